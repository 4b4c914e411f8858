"""What integrity costs: a shell command, a bench and a submit per family, hardened harness against a base commit.

``python benchmarks/bench_integrity.py [--base REV] [--sandbox bubblewrap|docker] [--repeats N]``

The base (by default the commit before the integrity work) is checked out into a temporary git
worktree; each family's episode runs in a child process of each tree in turn, interleaved (base, this
tree, base, ...), so the machine's load falls on both alike. Per family it prints the seconds of a
reset, a shell command (``true``), an explicit bench and a submit, and the ratio this tree / base of
each, as the minimum over the repeats (noise only adds time).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE = "99bdc26"  # main before issue 26's work
FAMILIES = ["RSI/KVCache-v0", "RSI/Batching-v0", "RSI/PrefixCache-v0", "RSI/Quantization-v0", "RSI/Parallelism-v0",
            "RSI/Scheduler-v0", "RSI/BugFix-v0", "RSI/DayZero-v0", "RSI/Kernel-v0"]
CODE = {"RSI/Scheduler-v0", "RSI/BugFix-v0", "RSI/DayZero-v0", "RSI/Kernel-v0"}

EPISODE = r'''
import json, sys, time, warnings
warnings.simplefilter("ignore")
import gymnasium as gym
import rsi_env  # noqa: F401
task, sandbox = sys.argv[1], sys.argv[2]
kwargs = {"sandbox": sandbox} if sandbox else {}
env = gym.make(task, **kwargs)
out = {}
t = time.perf_counter(); env.reset(seed=0); out["reset"] = time.perf_counter() - t
t = time.perf_counter(); env.step({"kind": 2, "command": "true"}); out["shell"] = time.perf_counter() - t
t = time.perf_counter(); env.step({"kind": 3}); out["bench"] = time.perf_counter() - t
t = time.perf_counter(); env.step({"kind": 4}); out["submit"] = time.perf_counter() - t
env.close()
print("RESULT " + json.dumps(out))
'''


def run_episode(tree: Path, task: str, sandbox: str) -> dict[str, float]:
    """One episode's timings in a child process that imports ``tree``'s rsi_env."""
    env = {"PYTHONPATH": str(tree), "PATH": "/usr/local/bin:/usr/bin:/bin", "RSI_ENV_STORE": "off",
           "HOME": tempfile.gettempdir()}
    out = subprocess.run([sys.executable, "-c", EPISODE, task, sandbox if task in CODE else ""], cwd=tree, env=env,
                         capture_output=True, text=True, timeout=900)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{task} in {tree} failed:\n{out.stdout[-1500:]}\n{out.stderr[-3000:]}")
    return dict(json.loads(line[len("RESULT "):]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=BASE)
    ap.add_argument("--sandbox", default="bubblewrap")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--only", nargs="*", default=FAMILIES)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rsi-base-") as tmp:
        base = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), args.base], check=True,
                       capture_output=True)
        try:
            print(f"base {args.base} vs this tree, sandbox {args.sandbox}, min of {args.repeats}; seconds")
            print(f"{'family':<22}" + "".join(f"{p:>27}" for p in ("reset", "shell", "bench", "submit")))
            for task in args.only:
                runs: dict[str, list[dict[str, float]]] = {"base": [], "new": []}
                for _ in range(args.repeats):
                    runs["base"].append(run_episode(base, task, args.sandbox))
                    runs["new"].append(run_episode(ROOT, task, args.sandbox))
                cells = []
                for phase in ("reset", "shell", "bench", "submit"):
                    b = min(r[phase] for r in runs["base"])
                    n = min(r[phase] for r in runs["new"])
                    cells.append(f"{b:8.3f} -> {n:8.3f} ({n / b:5.2f}x)")
                print(f"{task:<22}" + "".join(f"{c:>27}" for c in cells), flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], capture_output=True)


if __name__ == "__main__":
    main()
