"""The training programs run end to end as their users run them and end on one JSON line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], timeout: int) -> dict:
    env = {**os.environ, "RAY_DEDUP_LOGS": "0", "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    return json.loads(last)


def test_sb3_ppo_short_run(tmp_path):
    out = _run(["baselines.sb3_ppo", "--env", "RSI/Batching-v0", "--timesteps", "256", "--budget", "5",
                "--eval-seeds", "1", "--train-seeds", "4", "--out", str(tmp_path)], timeout=180)
    assert out["timesteps"] >= 256 and out["episodes"] > 0 and isinstance(out["episode_return_mean"], float)
    assert os.path.exists(out["checkpoint"]) and out["wall_s"] > 0
    assert out["actions"] == "direct" and isinstance(out["eval_sampled_improvement_pct_mean"], float)
    assert out["eval"][0]["seed"] == 1000 and out["eval"][0]["measurements"] <= 5


def test_rllib_ppo_one_iteration(tmp_path):
    out = _run(["baselines.rllib_ppo", "--env", "RSI/Batching-v0", "--iterations", "1", "--train-batch", "128",
                "--minibatch", "64", "--epochs", "1", "--budget", "5", "--num-env-runners", "1",
                "--out", str(tmp_path)], timeout=240)
    assert out["iterations"] == 1 and out["env_steps"] >= 128
    assert isinstance(out["episode_return_mean"], float) and out["wall_s"] > 0
    assert os.path.isdir(out["checkpoint"])
