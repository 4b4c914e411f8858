"""RSI/VLLMBugFix-v0 costs: the instance table's counts, and the wall time of a reset, a bench and the hidden checks.

Prints the installed vLLM's verified table (kept and rejected candidates per class), then times, on the real
engine in bubblewrap sandboxes: a cold reset (no clean run or baseline remembered: the bugged engine and the
clean one each serve the bench's workloads), a warm reset (both read back from disk), one bench of the
workspace (its files made new by a comment in ``engine_args.yaml``: an engine start and three workloads) and one
uncached run of the hidden checks (the clean engine's report remembered; a throughput short of the bar is
measured again, two more engine runs). ``--instance`` picks the instance (default: a memory error in the
scheduler, which the engine serves in full). Run: ``python benchmarks/vllm_bugfix_times.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import gymnasium as gym
import yaml
from timing import print_rows, timed  # benchmarks/timing.py, beside this script

import rsi_env  # noqa: F401  (registers the envs)
from rsi_env.tasks.vllm_bugfix import checks
from rsi_env.tasks.vllm_bugfix.generator import INSTANCES_FILE, verified_table
from rsi_env.tasks.vllm_bugfix.modules import installed_version


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--instance", default="mem_finished_blocks_kept")
    p.add_argument("--repeats", type=int, default=1)
    args = p.parse_args()
    table = (yaml.safe_load(INSTANCES_FILE.read_text()) or {}).get("vllm", {}).get(installed_version(), {})
    print(f"vLLM {installed_version()}: table", json.dumps(table.get("stats", {})))
    seed = [i.id for i in verified_table()].index(args.instance)
    rows: dict[str, list[float]] = {"reset, cold (bugged and clean engines run)": [],
                                    "reset, warm (both read back)": [], "bench (3 workloads, uncached)": [],
                                    "hidden checks (uncached, clean remembered)": []}
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="rsi-vbf-cache-") as cold:
            os.environ["RSI_ENV_CACHE_DIR"] = cold
            env = gym.make("RSI/VLLMBugFix-v0").unwrapped
            rows["reset, cold (bugged and clean engines run)"].append(timed(env.reset, seed=seed))
            env.close()
        os.environ.pop("RSI_ENV_CACHE_DIR")
        env = gym.make("RSI/VLLMBugFix-v0").unwrapped
        env.reset(seed=seed)  # fills the user's cache where it was empty
        rows["reset, warm (both read back)"].append(timed(env.reset, seed=seed))
        # the starting files' bench is read back from disk: a comment makes the same engine's files new to it
        args_text = env.workspace.read("engine_args.yaml")
        env.workspace.write("engine_args.yaml", args_text + "# benchmark: not the starting text\n")
        rows["bench (3 workloads, uncached)"].append(timed(env.step, {"kind": 3}))
        files, shadowed = env.engine_files()
        checks._VERDICTS.clear()
        rows["hidden checks (uncached, clean remembered)"].append(
            timed(checks.check_workspace, files, shadowed, env.sandbox_backend))
        env.close()
    print(f"instance {args.instance}, sandbox bubblewrap, load average {os.getloadavg()[0]:.1f}")
    print_rows(rows, 44, 1)


if __name__ == "__main__":
    main()
