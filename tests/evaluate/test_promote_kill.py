"""Whatever happens in the promote stage, no engine process outlives it: timeouts and SIGTERM, with real processes.

The engine is stood in for by a program that never answers and has a child (as vLLM's engine core is), run
through `RealTier` itself (its ``python`` argument), so the process-group handling under test is the real one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

import rsi_env.evaluate.promote as promote_mod
from rsi_env.evaluate import load_plan
from rsi_env.real.tier import RealTier

HANG = textwrap.dedent("""\
    import subprocess, sys, time
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", sys.argv[0]])
    time.sleep(300)
""")


def _alive(marker: str) -> list[int]:
    """Live processes whose command line names ``marker``."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().decode(errors="replace")
            state = (p / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmd and state != "Z":
            out.append(int(p.name))
    return out


@pytest.fixture
def hanging(tmp_path):
    fake = tmp_path / "fake-python"
    fake.write_text(f"#!/bin/sh\nexec {sys.executable} {tmp_path / 'hang.py'}\n")
    fake.chmod(0o755)
    (tmp_path / "hang.py").write_text(HANG)
    entry = {"flags": {}, "num_gpus": 1, "est_real_s": 1.0, "sim": []}
    doc = {"plan": "kill", "model": "tiny-llama", "hardware": "cpu",
           "workloads": [{"name": "w", "seed": 1, "requests": 2, "prompt_tokens": 8, "output_tokens": 2}],
           "defaults": {**entry, "name": "defaults"},
           "candidates": [{**entry, "name": "c1", "flags": {"max_num_seqs": 8}}]}
    (tmp_path / "cand.json").write_text(json.dumps(doc))
    plan = {"name": "kill", "env": "RSI/Batching-v0", "candidates": str(tmp_path / "cand.json"),
            "out": str(tmp_path / "out"), "promote": {"per_run_timeout_s": 2.0, "deadline_s": 60}}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    return tmp_path, str(fake)


def test_a_run_that_hangs_is_killed_at_its_timeout_with_its_children(hanging, monkeypatch):
    tmp, fake = hanging

    class Hanging(RealTier):
        def __init__(self, **kw):
            super().__init__(python=fake, **kw)
            self.engine_version = "stand-in"

    monkeypatch.setattr(promote_mod, "RealTier", Hanging)
    rows = promote_mod.run_promote(load_plan(tmp / "plan.yaml"), gpus=["0", "1"])
    assert [r["error"][:7] for r in rows] == ["timeout", "timeout"]
    assert not _alive(str(tmp / "hang.py"))


def test_sigterm_kills_every_running_engine(hanging):
    tmp, fake = hanging
    script = textwrap.dedent(f"""\
        import rsi_env.evaluate.promote as pm
        from rsi_env.real.tier import RealTier
        class Hanging(RealTier):
            def __init__(self, **kw):
                super().__init__(python={fake!r}, **kw)
                self.engine_version = "stand-in"
                self.timeout_s = 120
        pm.RealTier = Hanging
        raise SystemExit(pm.main(["--plan", {str(tmp / "plan.yaml")!r}, "--gpus", "0,1"]))
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    marker = str(tmp / "hang.py")
    deadline = time.monotonic() + 30
    while len(_alive(marker)) < 4 and time.monotonic() < deadline:  # two engines, each with its child
        time.sleep(0.05)
    assert len(_alive(marker)) == 4
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and b"every running engine was killed" in err
    assert not _alive(marker)
    assert not (tmp / "out" / "real.jsonl").exists()  # killed runs are not results
