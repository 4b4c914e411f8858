"""The Harbor export against Harbor's task contract, its verifier run as Harbor runs it, in a container made by the
project's own sandbox (bubblewrap): the exported task folders, their ``tests/test.sh`` after ``solution/solve.sh``
(reward 1) and on the untouched task (reward 0), and the agent's attacks on a verifier that runs where it worked:
a tampered rsi-env (a file changed, added or linked) is refused, planted files and a forged reward are never read.

The container is what the task's Dockerfile builds, laid out here without Docker: the package's public archive
extracted at /opt/rsi-env/site, a venv at /opt/rsi-env/venv with the pinned requirements (this machine's, bound by
the sandbox's allowlist), the workspace at /workspace, ``tests/`` at /tests after the agent, and /logs/verifier.
The sandbox runs everything as an unprivileged user, as Harbor's agent user.
"""

from __future__ import annotations

import json
import py_compile
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from rsi_env.integrations.harbor import SITE, VENV, package_archives
from rsi_env.integrations.harbor_check import read_manifest
from rsi_env.sandbox import BubblewrapSandbox, Limits
from rsi_env.sandbox.profile import NOBODY, Mount, Profile
from rsi_env.suite.instance import Suite, load
from tests.integrations.required import skip_or_fail
from tests.suite.conftest import bugfix_instance, flag_instance


@pytest.fixture(autouse=True, scope="module")
def _bubblewrap() -> None:
    """The container is the project's bubblewrap sandbox: without it these tests skip, or fail where CI runs them."""
    why = BubblewrapSandbox.unavailable()
    if why is not None:
        skip_or_fail(f"bubblewrap: {why}")

FLAG, CODE = "opt-batching-test", "bug-bugfix-s5"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both kinds of instance (a flag one, a BugFix one) exported by the CLI, as a user would."""
    root = tmp_path_factory.mktemp("harbor")
    suite = Suite(id="rsi-bench-test", instances=(flag_instance(), bugfix_instance()), ceiling_fraction=0.95,
                  calibrations={}, frozen="2026-12-05")
    path = root / "rsi-bench-test.yaml"
    path.write_text(yaml.safe_dump(suite.to_dict(), sort_keys=False))
    out = subprocess.run([sys.executable, "-m", "rsi_env.cli", "export", "harbor", str(root / "tasks"), "--suite",
                          str(path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert sorted(Path(line).name for line in out.stdout.split()) == [CODE, FLAG]
    return root / "tasks"


@dataclass(frozen=True)
class Container(Profile):
    """The allowlist of the project's sandbox plus the task container's own paths (``binds``)."""

    binds: tuple[Mount, ...] = field(default=())

    def mounts(self) -> list[Mount]:
        return [*super().mounts(), *self.binds]


class ContainerSandbox(BubblewrapSandbox):
    """The project's bubblewrap sandbox with the /proc of a container that lets bubblewrap run inside it.

    What the code tasks' ``docker-compose.yaml`` asks Docker for (``systempaths=unconfined``): a /proc with
    nothing masked, without which a nested bubblewrap, the hidden checks' sandbox, cannot mount its own. So the
    machine's /proc is bound, in the machine's PID namespace, instead of a fresh, partly covered one.
    """

    def argv(self, command: str) -> list[str]:
        argv = super().argv(command)
        i = argv.index("--proc")
        argv[i:i + 2] = ["--bind", "/proc", "/proc"]
        argv.remove("--unshare-pid")
        return argv


@dataclass
class Trial:
    """One Harbor trial of an exported task: its container's folders on this machine, and the commands run in it."""

    task: Path
    root: Path

    def __post_init__(self) -> None:
        self.site = self.root / "site"
        self.workspace = self.root / "workspace"
        self.logs = self.root / "logs"
        self.home = self.root / "home"
        self.venv = self.root / "venv"
        for d in (self.site, self.logs, self.home):
            d.mkdir(parents=True)
        # The image's venv: this interpreter, the machine's packages (the sandbox binds the pinned ones), the .pth.
        # Where this interpreter is itself a venv, --system-site-packages reaches only its base's packages: the
        # .pth names this interpreter's site directory too, where the pinned packages are installed and bound.
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(self.venv)],
                       check=True)
        purelib = next(self.venv.glob("lib/python3*/site-packages"))
        (purelib / "rsi_env.pth").write_text(f"{SITE}\n{sysconfig.get_paths()['purelib']}\n")
        with tarfile.open(self.task / "environment" / "rsi_env-public.tar.gz") as tar:
            tar.extractall(self.site, filter="data")
        shutil.copytree(self.task / "environment" / "workspace", self.workspace)
        for d in (self.root, self.site, self.task, self.venv):
            d.chmod(0o755)
        subprocess.run(["chmod", "-R", "a+rX", str(self.task), str(self.site), str(self.venv)], check=True)
        subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(self.workspace), str(self.logs)], check=True)

    def run(self, command: str, *, tests: bool = True) -> tuple[int | None, str]:
        """``command`` in the container as the unprivileged user; ``tests``: /tests uploaded (the verifier's phase)."""
        reqs = [line.split("==")[0] for line in (self.task / "environment" / "requirements.txt").read_text().split()]
        binds = [Mount("ro", SITE, str(self.site)), Mount("ro", VENV, str(self.venv)),
                 Mount("rw", "/workspace", str(self.workspace)), Mount("rw", "/logs/verifier", str(self.logs)),
                 Mount("ro", "/solution", str(self.task / "solution"))]
        if tests:
            binds.append(Mount("ro", "/tests", str(self.task / "tests")))
        box = ContainerSandbox(self.home, profile=Container(packages=tuple(reqs), binds=tuple(binds)),
                                limits=Limits(cpu_s=600, max_procs=512, memory_bytes=8 << 30, disk_bytes=4 << 30))
        try:
            res = box.run(command, timeout_s=600, max_output=200_000)
        finally:
            box.close()
        return res.returncode, res.output + (res.error or "")

    def verify(self) -> tuple[int | None, dict[str, float], str]:
        code, out = self.run("bash /tests/test.sh")
        reward = json.loads((self.logs / "reward.json").read_text())
        return code, reward, out


def trial(exported: Path, tmp_path: Path, iid: str) -> Trial:
    return Trial(exported / iid, tmp_path / "container")


def test_every_task_folder_holds_what_harbor_reads(exported: Path):
    for iid in (FLAG, CODE):
        task = exported / iid
        config = tomllib.loads((task / "task.toml").read_text())
        assert config["agent"]["user"] == "agent" and config["verifier"]["user"] == "root"
        assert config["metadata"]["instance"] == iid and config["verifier"]["timeout_sec"] > 0
        assert (task / "environment" / "Dockerfile").read_text().startswith("# rsi-env's Harbor environment")
        text = (task / "instruction.md").read_text()
        assert "/workspace" in text and "`serving.yaml` (editable)" in text
        assert all((task / f).stat().st_mode & 0o111 for f in ("tests/test.sh", "solution/solve.sh"))
        assert load(str(task / "tests" / "instance.yaml")).get(iid).id == iid
    assert (exported / CODE / "environment" / "docker-compose.yaml").is_file()  # bubblewrap for the hidden checks
    assert not (exported / FLAG / "environment" / "docker-compose.yaml").exists()


def test_the_image_holds_no_hidden_part(exported: Path):
    """What the agent's container holds is the package's public part: no check, reference, ceiling or suite."""
    archives = package_archives()
    for iid in (FLAG, CODE):
        env = exported / iid / "environment"
        with tarfile.open(env / "rsi_env-public.tar.gz") as tar:
            names = tar.getnames()
        assert names and not [n for n in names if n.startswith(("rsi_env/tasks/", "rsi_env/catalog/code/",
                                                                  "rsi_env/catalog/suites/"))]
        assert sorted(n.removeprefix("rsi_env/") for n in names) == sorted(read_manifest(archives.manifest))
        for f in env.rglob("*"):  # nor does the workspace or anything else built into the image hold the reference
            assert f.is_dir() or b"the reference configuration" not in f.read_bytes()
        with tarfile.open(exported / iid / "tests" / "rsi_env-hidden.tar.gz") as tar:
            hidden = tar.getnames()
        assert any(n.startswith("rsi_env/tasks/") for n in hidden)
        assert not any(n.startswith("rsi_env/catalog/suites/") for n in hidden)  # other instances' answers stay home


@pytest.mark.parametrize("iid", [FLAG, CODE])
def test_the_reference_solution_earns_1_and_the_untouched_task_0(exported: Path, tmp_path: Path, iid: str):
    untouched = trial(exported, tmp_path / "untouched", iid)
    code, reward, out = untouched.verify()
    assert code == 0 and reward == {"reward": 0.0, "binary": 0.0, "continuous": reward["continuous"]}, out
    solved = trial(exported, tmp_path / "solved", iid)
    code, out = solved.run("bash /solution/solve.sh", tests=False)
    assert code == 0, out
    code, reward, out = solved.verify()
    assert code == 0 and reward["reward"] == 1.0 and reward["binary"] == 1.0, out
    verdict = json.loads((solved.logs / "verdict.json").read_text())
    assert verdict["passed"] and verdict["instance"] == iid and "PASSED" in verdict["verdict"]


def _plant_passing_verifier(site: Path) -> None:
    """What a tampering agent would do: make the verifier pay 1 whatever the workspace holds."""
    verify = site / "rsi_env" / "suite" / "verify.py"
    verify.write_text(verify.read_text() + '\n\ndef verify_workspace(inst, folder):\n    return {"instance": inst.id, '
                      '"passed": True, "reward": 1.0, "binary": 1.0, "continuous": 1.0, "score": 1.0, "files": [], '
                      '"skipped": [], "verdict": "forged"}\n')


@pytest.mark.parametrize("tamper", ["changed", "added", "linked"])
def test_a_tampered_rsi_env_is_refused(exported: Path, tmp_path: Path, tamper: str):
    t = trial(exported, tmp_path, FLAG)
    pkg = t.site / "rsi_env"
    if tamper == "changed":
        _plant_passing_verifier(t.site)
    elif tamper == "added":
        (pkg / "suite" / "harbor_hook.py").write_text("raise SystemExit(0)\n")
    else:
        (pkg / "catalog" / "workloads").rename(pkg / "catalog" / "workloads.real")
        (pkg / "catalog" / "workloads").symlink_to("/workspace")
    code, reward, out = t.verify()
    assert code != 0 and reward == {"reward": 0, "binary": 0, "continuous": 0}, out
    assert "refused" in (t.logs / "refused.txt").read_text() and not (t.logs / "verdict.json").exists()
    assert {"changed": "changed: suite/verify.py", "added": "added: suite/harbor_hook.py",
            "linked": "catalog/workloads is not a regular file"}[tamper] in out, out


def test_what_the_agent_plants_is_never_read(exported: Path, tmp_path: Path):
    """A compiled cache of a forged verifier beside the real one, a fake rsi_env and sitecustomize in the working
    folder, a forged reward and verdict where the verifier writes: the untouched task still earns 0."""
    t = trial(exported, tmp_path, FLAG)
    forged = tmp_path / "forged"
    shutil.copytree(t.site, forged)
    _plant_passing_verifier(forged)
    pyc = t.site / "rsi_env" / "suite" / "__pycache__" / f"verify.{sys.implementation.cache_tag}.pyc"
    # A cache Python would load without looking at the source at all (an unchecked hash), holding the forged code.
    py_compile.compile(str(forged / "rsi_env" / "suite" / "verify.py"), cfile=str(pyc),
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    pyc.parent.chmod(0o755)
    (t.workspace / "rsi_env").mkdir()
    (t.workspace / "rsi_env" / "__init__.py").write_text("raise SystemExit('the workspace was imported')\n")
    (t.workspace / "sitecustomize.py").write_text("raise SystemExit('sitecustomize was run')\n")
    (t.workspace / "verdict.json").write_text('{"passed": true}')
    (t.logs / "reward.json").write_text('{"reward": 1}')
    subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(t.workspace), str(t.logs)], check=True)
    code, reward, out = t.verify()
    assert code == 0 and reward["reward"] == 0.0 and reward["binary"] == 0.0, out
    assert "forged" not in (t.logs / "verdict.json").read_text()


def test_only_the_editable_files_are_read_and_no_link_is_followed(exported: Path, tmp_path: Path):
    """serving.yaml as a link to the reference solution's file is skipped, named; the rest is judged as it is."""
    t = trial(exported, tmp_path, FLAG)
    code, out = t.run("bash /solution/solve.sh && cd /workspace && mv serving.yaml solved.yaml && "
                      "ln -s solved.yaml serving.yaml", tests=False)
    assert code == 0, out
    code, reward, out = t.verify()
    verdict = json.loads((t.logs / "verdict.json").read_text())
    assert code == 0 and reward["reward"] == 0.0 and verdict["files"] == [], out
    assert any("serving.yaml" in s for s in verdict["skipped"]), verdict


def test_the_agent_can_measure_with_the_public_part_and_reach_nothing_hidden(exported: Path, tmp_path: Path):
    """What instruction.md promises the agent: the simulator runs; the hidden checks and references are not there."""
    t = trial(exported, tmp_path, CODE)
    py = f"{VENV}/bin/python"
    code, out = t.run(f"cd /workspace && {py} -m rsi_env.cli simulate --model llama-3.1-8b --hardware h200 "
                      "--workload workloads/bugfix_chat.yaml --set max_num_seqs=64 --json", tests=False)
    assert code == 0 and json.loads(out)["out_tok_per_s"] > 0, out
    code, out = t.run(f"{py} -c 'import rsi_env.tasks.bugfix.reference'", tests=False)
    assert code != 0 and "No module named 'rsi_env.tasks'" in out, out
