"""The allowlist, proven: from inside each family's sandbox, no readable file is a secret.

A walker runs as the agent's own shell command in each of the nine families' episode sandboxes. It
walks the whole visible filesystem and hashes every readable file whose size is the size of a secret:
a hidden check or reference (``catalog/code/*/hidden``), the bug catalogue and its checks
(``rsi_env/bugs``), the day-zero checks (``rsi_env/dayzero``), the clean originals of BugFix's
engine modules (as the package has them and as a workspace would), and the reference solutions and
the rest of the project's tests. None may match, and no ``.git`` may be visible. This is a walk of
what is there, not a list of forbidden paths.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import gymnasium as gym
import pytest

import rsi_env
from rsi_env.tasks.bugfix.templates import CLEAN_ENGINE, LOCAL_IMPORT

PKG = Path(rsi_env.__file__).resolve().parent
TESTS = PKG.parent / "tests"

WALKER = r'''
import hashlib, json, os, stat, sys
secrets = {int(k): set(v) for k, v in json.load(open("secrets.json")).items()}
here = os.path.realpath(".")
found, gits, files = [], [], 0
for top, dirs, names in os.walk("/", followlinks=False):
    if top in ("/proc", "/sys", "/dev") or top.startswith(("/proc/", "/sys/", "/dev/")) or top.startswith(here):
        dirs[:] = []
        continue
    gits += [os.path.join(top, d) for d in dirs if d == ".git"]
    for n in names:
        p = os.path.join(top, n)
        try:
            st = os.lstat(p)
            if not stat.S_ISREG(st.st_mode) or st.st_size not in secrets:
                continue
            files += 1
            with open(p, "rb") as fh:
                digest = hashlib.sha256(fh.read()).hexdigest()
        except OSError:
            continue
        if digest in secrets[st.st_size]:
            found.append(p)
print(json.dumps({"found": found, "git": gits, "hashed": files}))
'''

FAMILIES = {
    "RSI/KVCache-v0": {}, "RSI/Batching-v0": {}, "RSI/PrefixCache-v0": {}, "RSI/Quantization-v0": {},
    "RSI/Parallelism-v0": {}, "RSI/Scheduler-v0": {}, "RSI/BugFix-v0": {}, "RSI/DayZero-v0": {},
    "RSI/Kernel-v0": {},
}


def _secrets() -> dict[int, list[str]]:
    """Size -> sha256 of every secret (files under 64 bytes, like empty ``__init__.py``, carry nothing)."""
    texts: list[bytes] = []
    paths = [*PKG.glob("catalog/code/*/hidden/**/*"), *PKG.glob("catalog/code/*/instances.yaml"),
             *PKG.glob("tasks/**/*.py"), *PKG.glob("catalog/suites/*"), *TESTS.rglob("*.py")]
    texts += [p.read_bytes() for p in paths if p.is_file()]
    for rel in ("tasks/bugfix/kv_cache.py", "sim/engine.py", "engine/config.py"):
        texts.append((PKG / rel).read_bytes())
    texts.append(CLEAN_ENGINE.read_text().replace(*LOCAL_IMPORT).encode())  # BugFix-v0's, as its workspace holds it
    out: dict[int, set[str]] = {}
    for t in texts:
        if len(t) >= 64:
            out.setdefault(len(t), set()).add(hashlib.sha256(t).hexdigest())
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.parametrize("task_id", list(FAMILIES))
def test_no_secret_is_readable_from_the_agents_shell(task_id: str):
    env = gym.make(task_id, shell_timeout_s=120.0, **FAMILIES[task_id])
    try:
        env.reset(seed=0)
        ws = env.unwrapped.workspace.root
        (ws / "walk.py").write_text(WALKER)
        (ws / "secrets.json").write_text(json.dumps(_secrets()))
        _, reward, _, _, _ = env.step({"kind": 2, "command": "python3 walk.py"})
        text = env.unwrapped.text
        assert reward == 0.0
        line = next((ln for ln in text.splitlines() if ln.startswith("{")), None)
        assert line is not None, text
        seen = json.loads(line)
        assert seen["found"] == [], f"{task_id}: secrets readable in the sandbox: {seen['found']}"
        assert seen["git"] == [], f"{task_id}: a .git is visible: {seen['git']}"
    finally:
        env.close()


def test_the_secrets_include_every_code_family_s_reference_solution():
    """The walk hashes the hidden reference solutions too (``rsi_env/tasks/<family>/reference.py``, e.g. DayZero's)."""
    secrets = _secrets()
    refs = sorted(PKG.glob("tasks/*/reference.py"))
    assert PKG / "tasks" / "dayzero" / "reference.py" in refs
    for p in refs:
        data = p.read_bytes()
        assert hashlib.sha256(data).hexdigest() in secrets[len(data)], p
