"""Run a grid of engine configurations on the real engine, each in its own process, within a deadline.

A plan (``research/plans/*.yaml`` has every one the shipped calibration came from) lists ``runs`` (model, flags,
optionally driver options), ``workloads`` and optionally ``env`` (variables every run's processes get, e.g. NCCL
settings on several GPUs). Each run is one :mod:`rsi_env.real.vllm_driver` process in its own process group, killed
whole if it outlives ``per_run_timeout_s``; no run starts if fewer than ``min_left_s`` seconds remain before the
deadline. Results are appended to one JSON-lines file as they come, so a cut-short campaign keeps everything it
measured.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

__all__ = ["driver_command", "main"]


def _run_one(cmd: list[str], timeout: float, log: Path, env: dict[str, str]) -> int:
    with open(log, "a") as lf:
        lf.write(f"\n=== {' '.join(cmd)}\n")
        lf.flush()
        proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **env})
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            lf.write(f"=== killed after {timeout:.0f}s\n")
            return -9


def _selected_runs(runs: list[dict], only: list[str]) -> list[dict]:
    """The plan's runs named in ``only``, in that order (a second pass can reverse the first), or all of them.

    A name the plan lacks is refused before anything runs: a typo would otherwise spend GPU time doing nothing.
    """
    if not only:
        return runs
    by_name = {r["name"]: r for r in runs}
    unknown = [n for n in only if n not in by_name]
    if unknown:
        raise SystemExit(f"campaign: no run named {unknown} in the plan; its runs: {list(by_name)}")
    return [by_name[n] for n in only]


def driver_command(run: dict, workloads: list[str], results: Path) -> list[str]:
    """The `rsi_env.real.vllm_driver` command of one run: its model, flags (``set``), workloads (the run's own or
    the plan's) and further driver options (``args``, e.g. ``[--no-min-tokens]``)."""
    cmd = [sys.executable, "-m", "rsi_env.real.vllm_driver", "--model", run["model"], "--out", str(results)]
    for k, v in (run.get("set") or {}).items():
        cmd += ["--set", f"{k}={json.dumps(v)}"]
    for w in run.get("workloads", workloads):
        cmd += ["--workload", w]
    return cmd + [str(a) for a in run.get("args") or []]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--plan", required=True)
    p.add_argument("--out", required=True, help="folder for results.jsonl and campaign.log")
    p.add_argument("--deadline-s", type=float, default=540.0, help="seconds from now")
    p.add_argument("--only", default="",
                   help="comma-separated run names to do, in that order (default: all, in the plan's order)")
    args = p.parse_args(argv)
    t_end = time.monotonic() + args.deadline_s
    plan = yaml.safe_load(Path(args.plan).read_text())
    runs = _selected_runs(plan["runs"], [s for s in args.only.split(",") if s])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wl = [str(Path(args.plan).parent / w) if not Path(w).exists() else w for w in plan["workloads"]]
    for run in runs:
        left = t_end - time.monotonic()
        need = float(run.get("min_left_s", plan.get("min_left_s", 90)))
        if left < need:
            print(json.dumps({"skipped": run["name"], "left_s": round(left)}), flush=True)
            continue
        cmd = driver_command(run, wl, out / "results.jsonl")
        t0 = time.monotonic()
        env = {str(k): str(v) for k, v in (plan.get("env") or {}).items()}
        rc = _run_one(cmd, min(float(plan.get("per_run_timeout_s", 240)), left - 5), out / "campaign.log", env)
        print(json.dumps({"run": run["name"], "rc": rc, "s": round(time.monotonic() - t0, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
