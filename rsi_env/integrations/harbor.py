"""Harbor task directories from a suite's instances: ``rsi-env export harbor DIR``.

Harbor (harbor-framework/harbor; TRL, SkyRL, rLLM and verifiers read the same format) runs a task as a container
built from ``environment/``, an agent given ``instruction.md`` working in it, then ``tests/`` uploaded into that
same container and ``bash /tests/test.sh`` run, which writes ``/logs/verifier/reward.json`` (a flat object of
numbers; ``reward`` is the one Harbor aggregates). ``solution/solve.sh`` is what Harbor's oracle agent runs.
One folder per instance:

- ``instruction.md``: the task's ``TASK.md``, where the workspace is, which files are read, how it is judged;
- ``task.toml``: timeouts and resources; the agent runs as the unprivileged user ``agent``, the verifier as root;
- ``environment/``: a ``Dockerfile`` (Python, bubblewrap, rsi-env's dependencies pinned to the exporter's), the
  package's *public* part as an archive (what `rsi_env.sandbox.runtime` shows a sandbox: no hidden check,
  reference solution or ceiling) and ``workspace/``, laid out at ``/workspace`` as the instance's reset leaves
  it; a code instance also gets a ``docker-compose.yaml`` that lets bubblewrap, its checks' sandbox, run;
- ``solution/solve.sh``: writes the reference solution's files (`rsi_env.suite.reference`);
- ``tests/``: ``test.sh``, ``instance.yaml`` (a suite of this one instance, with its pass line), the hidden
  parts as an archive, the public part's digest manifest and the stdlib script that checks it
  (`rsi_env.integrations.harbor_check`).

Since the agent's container is where the tests run, ``test.sh`` trusts nothing the agent could have changed: it
ends the agent user's processes, copies the installed package into a private folder and checks every file
against the manifest (refusing, with reward 0, a package changed, added to or linked), adds the hidden parts
from ``tests/``, and runs ``rsi-env suite verify`` from that copy alone (``python -I``, compiled caches
elsewhere): a fresh episode of the instance, only the editable files read from ``/workspace`` (regular files,
no link followed), submitted, so the env's own checks run in its own sandbox.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.metadata as metadata
import io
import json
import re
import shlex
import sys
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from rsi_env.errors import SuiteError
from rsi_env.integrations.harbor_check import write_manifest
from rsi_env.sandbox.runtime import EXCLUDED, PACKAGE
from rsi_env.suite.instance import Instance, Suite
from rsi_env.suite.reference import reference_files
from rsi_env.wrappers.ladders import rsi_env_of

__all__ = ["SITE", "VENV", "add_export_parser", "export_harbor", "package_archives"]

SITE = "/opt/rsi-env/site"      # the image's copy of the package's public part (rsi_env/ under it)
VENV = "/opt/rsi-env/venv"      # the image's interpreter and rsi-env's dependencies
_NEVER_SHIPPED = ("catalog/suites",)  # every instance's references and ceilings: the verifier gets its one instance
_EXTRA_PACKAGES = ("pytest",)  # a code task's visible tests run with it
_PUBLIC, _HIDDEN, _MANIFEST = "rsi_env-public.tar.gz", "rsi_env-hidden.tar.gz", "rsi_env.sha256"


@dataclass(frozen=True)
class Archives:
    """The package split as the export ships it: public (the image), hidden (``tests/``), and the public manifest."""

    public: bytes
    hidden: bytes
    manifest: str


def _under(rel: str, parts: Sequence[str]) -> bool:
    return any(rel == p or rel.startswith(p + "/") for p in parts)


def _tar(files: dict[str, bytes]) -> bytes:
    """A gzip'd tar of ``files`` (``rsi_env/``-relative paths), byte-identical for identical input."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, data in sorted(files.items()):
            info = tarfile.TarInfo(f"rsi_env/{rel}")
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buf.getvalue(), compresslevel=9, mtime=0)


def package_archives(package: Path = PACKAGE) -> Archives:
    """The installed package as the export ships it (its source files; compiled caches left out)."""
    public: dict[str, bytes] = {}
    hidden: dict[str, bytes] = {}
    for path in sorted(package.rglob("*")):
        rel = path.relative_to(package).as_posix()
        if not path.is_file() or "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
            continue
        if _under(rel, _NEVER_SHIPPED):
            continue
        (hidden if _under(rel, EXCLUDED) else public)[rel] = path.read_bytes()
    manifest = write_manifest({rel: hashlib.sha256(data).hexdigest() for rel, data in public.items()})
    return Archives(_tar(public), _tar(hidden), manifest)


def _requirements() -> str:
    """rsi-env's own dependencies (and pytest), pinned to the versions the exporting machine runs."""
    names = [re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0] for r in metadata.requires("rsi-env") or ()
             if "extra ==" not in r]
    lines = []
    for name in [*names, *_EXTRA_PACKAGES]:
        try:
            lines.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            lines.append(name)
    return "\n".join(lines) + "\n"


def _dockerfile(python: str) -> str:
    return f"""\
# rsi-env's Harbor environment: Python, bubblewrap, rsi-env's dependencies (pinned to the exporter's), the package's
# public part (no hidden check, reference or ceiling: those come with tests/, after the agent), the workspace.
FROM python:{python}-slim

RUN apt-get update \\
    && apt-get install -y --no-install-recommends bubblewrap procps util-linux \\
    && rm -rf /var/lib/apt/lists/*

COPY requirements.txt /opt/rsi-env/requirements.txt
RUN python3 -m venv {VENV} && {VENV}/bin/pip install --no-cache-dir -r /opt/rsi-env/requirements.txt

# The package, read-only for everyone; importable by the venv's Python; `rsi-env` on the PATH.
COPY {_PUBLIC} /opt/rsi-env/
RUN mkdir -p {SITE} && tar -xzf /opt/rsi-env/{_PUBLIC} -C {SITE} && rm /opt/rsi-env/{_PUBLIC} \\
    && echo {SITE} > "$({VENV}/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/rsi_env.pth" \\
    && printf '#!/bin/sh\\nexec {VENV}/bin/python -m rsi_env.cli "$@"\\n' > /usr/local/bin/rsi-env \\
    && chmod 755 /usr/local/bin/rsi-env && chmod -R a+rX,go-w /opt/rsi-env

# The agent works as an unprivileged user in its workspace; /tests and /logs belong to root.
RUN useradd --create-home --shell /bin/bash agent && mkdir -p /tests /logs && chmod 755 /tests /logs
COPY --chown=agent:agent workspace/ /workspace/
ENV PATH="{VENV}/bin:$PATH"
WORKDIR /workspace
"""


# Harbor's Docker environment merges this into its own compose file: bubblewrap needs user namespaces and a /proc it
# may mount inside the container.
_COMPOSE = """\
# bubblewrap, the sandbox the hidden checks run in, needs these inside a container.
services:
  main:
    security_opt:
      - seccomp=unconfined
      - apparmor=unconfined
      - systempaths=unconfined
"""

_TEST_SH = """\
#!/bin/bash
# rsi-env's verifier for {iid}: judges /workspace's editable files from a clean start and writes
# /logs/verifier/reward.json ({{"reward": binary, "binary": ..., "continuous": ...}}; the verdict beside it).
# It trusts nothing the agent could have changed: the agent's processes are ended; the installed rsi-env is copied
# to a private folder and checked file by file against the manifest shipped here; the hidden parts come from here;
# Python runs isolated (-I: no PYTHON* variable, no user site, not the working folder) with its caches elsewhere.
set -u
LOGS=/logs/verifier
HERE=$(cd "$(dirname "$0")" && pwd)
PY={venv}/bin/python
mkdir -p "$LOGS"
rm -f "$LOGS/reward.json" "$LOGS/reward.txt" "$LOGS/verdict.json"
refuse() {{
  echo "rsi-env verifier: refused: $*" | tee "$LOGS/refused.txt" >&2
  printf '{{"reward": 0, "binary": 0, "continuous": 0}}\\n' > "$LOGS/reward.json"
  exit 1
}}
if [ "$(id -u)" = 0 ] && id agent >/dev/null 2>&1; then
  pkill -KILL -u agent 2>/dev/null
  sleep 0.2
fi
WORK=$(mktemp -d "${{TMPDIR:-/tmp}}/rsi-verify.XXXXXX") || refuse "no private folder"
chmod 700 "$WORK"
trap 'rm -rf "$WORK"' EXIT
"$PY" -I -S "$HERE/harbor_check.py" {site}/rsi_env "$HERE/{manifest}" "$HERE/{hidden}" "$WORK" \\
  || refuse "the installed rsi-env failed its check (above)"
cd "$WORK" || refuse "no private folder"
"$PY" -I -X pycache_prefix="$WORK/pycache" -c '
import sys
sys.path.insert(0, sys.argv[1])
import rsi_env
if not rsi_env.__file__.startswith(sys.argv[1] + "/"):
    sys.exit(f"rsi_env was imported from {{rsi_env.__file__}}, not the checked copy")
from rsi_env.cli import main
sys.exit(main(["suite", "verify", "--suite", sys.argv[2], "--instance", sys.argv[3], "--workspace", "/workspace",
               "--reward-json", sys.argv[4]]))
' "$WORK" "$HERE/instance.yaml" {iid_q} "$WORK/verdict.json" || refuse "the verification did not finish (above)"
"$PY" -I -S -c '
import json, math, sys
v = json.load(open(sys.argv[1]))
num = lambda x: float(x) if isinstance(x, (int, float)) and math.isfinite(x) else 0.0
r = {{"reward": num(v["binary"]), "binary": num(v["binary"]), "continuous": num(v["continuous"])}}
json.dump(v, open(sys.argv[2] + "/verdict.json", "w"), indent=1)
json.dump(r, open(sys.argv[2] + "/reward.json.tmp", "w"))
print(json.dumps(r))
' "$WORK/verdict.json" "$LOGS" || refuse "the verdict could not be read"
mv -f "$LOGS/reward.json.tmp" "$LOGS/reward.json"
"""


_METHODS = {"exhaustive": "an exhaustive search of its flags' ladders",
            "search-20x": "a search of 20 times the instance's measurement budget"}


def _criterion(inst: Instance) -> str:
    c = inst.criterion
    if c.get("kind") == "ceiling":
        method = _METHODS.get(str(c.get("method")), f"a search ({c.get('method')})")
        return (f"the objective reaches {float(c['fraction']):.0%} of this instance's ceiling, the best that "
                f"{method} found on the simulator (TASK.md states it as the gain over vLLM's defaults to beat)")
    return "every hidden check passes and the task's performance threshold is met"


def _instruction(inst: Instance, suite: Suite, task_md: str, editable: Sequence[str], files: Sequence[str]) -> str:
    listing = "\n".join(f"- `{f}`" + (" (editable)" if f in editable else "") for f in files)
    return f"""{task_md.rstrip()}

## How this task is run here

This is instance `{inst.id}` of the rsi-env suite `{suite.id}` ({inst.front}, {inst.family}, {inst.difficulty}).
Your workspace is `/workspace`:

{listing}

Change the editable files in place; they are all that is read. When you stop, the verifier starts a fresh episode \
of `{inst.env_id}` (seed {inst.seed}), writes your editable files into it and submits. It passes when \
{_criterion(inst)}. Nothing else you leave in the container is read, and a changed rsi-env installation is refused.

rsi-env's public part is installed: `rsi-env --help`; `rsi-env simulate --model ID --hardware ID --workload \
FILE.yaml --set FLAG=VALUE --json` measures a configuration on the simulator. Its hidden checks and reference \
solutions are not in this container. In the suite an attempt may spend {inst.budget} measurements; here your time \
is the budget.
"""


def _task_toml(inst: Instance, suite: Suite, code: bool) -> str:
    meta = {"suite": f"{suite.id}@{suite.digest}", "instance": inst.id, "front": inst.front, "family": inst.family,
            "difficulty": inst.difficulty, "env_id": inst.env_id, "seed": inst.seed, "budget": inst.budget,
            "category": inst.front, "tags": ["rsi-env", inst.front, inst.family]}
    lines = ['version = "1.0"', "", "[metadata]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in meta.items()]
    lines += ["", "[verifier]", f"timeout_sec = {900.0 if code else 600.0}", 'user = "root"',
              "", "[agent]", f"timeout_sec = {3600.0 if code else 1800.0}", 'user = "agent"',
              "", "[environment]", "build_timeout_sec = 900.0", "cpus = 2", "memory_mb = 6144",
              "storage_mb = 10240", ""]
    return "\n".join(lines)


def _solve_sh(files: dict[str, str]) -> str:
    out = ["#!/bin/bash", "# Writes this instance's reference solution into the workspace (Harbor's oracle runs it).",
           "set -euo pipefail", "cd /workspace"]
    for path, text in sorted(files.items()):
        q = shlex.quote(path)
        out += [f"# {path}", f"mkdir -p \"$(dirname {q})\"", f"base64 -d > {q} <<'RSI_ENV_B64'"]
        b64 = base64.b64encode(text.encode()).decode()
        out += [b64[i:i + 76] for i in range(0, len(b64), 76)] + ["RSI_ENV_B64"]
    return "\n".join(out) + "\n"


def _write(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)
    path.chmod(mode)


def _folder_name(instance_id: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", instance_id).strip(".-")
    if not name:
        raise SuiteError(f"instance id {instance_id!r} makes no folder name")
    return name


def _workspace_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink() and "__pycache__" not in p.parts}


def export_task(inst: Instance, suite: Suite, out: Path, archives: Archives) -> Path:
    """Write ``out/<instance id>/``, Harbor's task folder for ``inst``; returns it."""
    task = out / _folder_name(inst.id)
    if task.exists():
        raise SuiteError(f"{task} exists already: export into a new or empty folder")
    env = inst.make_env()
    try:
        env.reset(seed=inst.seed)
        rsi = rsi_env_of(env)
        assert rsi.workspace is not None
        workspace = _workspace_files(rsi.workspace.root)
        editable = tuple(rsi.task.editable_files)
        solution = reference_files(inst, env)
        task_md = rsi.workspace.read("TASK.md") if "TASK.md" in workspace else rsi.task.summary
    finally:
        env.close()
    code = inst.criterion.get("kind") == "checks"
    one = Suite(id=suite.id, instances=(inst,), ceiling_fraction=suite.ceiling_fraction,
                calibrations=dict(suite.calibrations), frozen=suite.frozen, notes=f"{inst.id} of {suite.id}")
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    _write(task / "instruction.md", _instruction(inst, suite, task_md, editable, sorted(workspace)))
    _write(task / "task.toml", _task_toml(inst, suite, code))
    _write(task / "environment" / "Dockerfile", _dockerfile(python))
    _write(task / "environment" / "requirements.txt", _requirements())
    _write(task / "environment" / _PUBLIC, archives.public)
    if code:
        _write(task / "environment" / "docker-compose.yaml", _COMPOSE)
    for rel, data in workspace.items():
        _write(task / "environment" / "workspace" / rel, data)
    _write(task / "solution" / "solve.sh", _solve_sh(solution), 0o755)
    tests = task / "tests"
    _write(tests / "test.sh", _TEST_SH.format(iid=inst.id, iid_q=shlex.quote(inst.id), venv=VENV, site=SITE,
                                              manifest=_MANIFEST, hidden=_HIDDEN), 0o755)
    _write(tests / "instance.yaml", yaml.safe_dump(one.to_dict(), sort_keys=False))
    _write(tests / _HIDDEN, archives.hidden)
    _write(tests / _MANIFEST, archives.manifest)
    _write(tests / "harbor_check.py", (resources.files("rsi_env.integrations") / "harbor_check.py").read_text())
    return task


def export_harbor(suite: Suite, instances: Sequence[Instance], out: Path) -> list[Path]:
    """Harbor task folders for ``instances`` of ``suite`` under ``out``; the folders written."""
    if not instances:
        raise SuiteError("no instance to export")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    archives = package_archives()
    return [export_task(inst, suite, out, archives) for inst in instances]


def _cmd_export(args: Any) -> int:
    from rsi_env.suite.instance import load
    from rsi_env.suite.runner import sample_instances

    suite = load(args.suite)
    chosen = sample_instances(suite.select(ids=args.instance), args.sample, args.seed)
    for path in export_harbor(suite, chosen, Path(args.dir)):
        print(path)
    return 0


def add_export_parser(sub: Any) -> None:
    """``rsi-env export harbor DIR`` on the CLI's subparsers."""
    e = sub.add_parser("export", help="write a suite's instances in another framework's task format")
    fmt = e.add_subparsers(dest="export_format", metavar="{harbor}", required=True)
    h = fmt.add_parser("harbor", help="Harbor task folders: instruction.md, task.toml, environment/, solution/, tests/")
    h.add_argument("dir", help="the folder to write the tasks into (one folder per instance)")
    h.add_argument("--suite", default="rsi-bench-v1", help="suite id or FILE.yaml")
    h.add_argument("--instance", action="append", default=[], help="an instance id (repeatable; default: all)")
    h.add_argument("--sample", type=int, default=None, help="this many instances, drawn with --seed")
    h.add_argument("--seed", type=int, default=0)
    h.set_defaults(func=_cmd_export)
