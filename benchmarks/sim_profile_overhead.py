"""What the sim's profile costs: ``simulate`` of this tree beside an earlier revision's, in one run.

Each round runs every case once in a fresh process per tree (earlier revision first on even rounds,
this tree first on odd ones, so drift on a shared machine falls on both alike), each case timed as the
best of ``--repeat`` calls after a warm-up, in the process's CPU time (``time.process_time``: time spent
waiting for a core on a loaded machine is left out); a case's time is its best over the rounds. It prints per case
the two times and their ratio (this tree / the revision), and the geometric mean of the ratios.
The earlier tree is ``git archive <rev> rsi_env`` unpacked into a temporary folder.

Run: ``python benchmarks/sim_profile_overhead.py --rev HEAD~1`` (or ``--before DIR``: a folder holding an
``rsi_env`` package).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("llama-3.1-8b", "llama-3.2-1b", "qwen3-30b-a3b")
POISSON = {"name": "poisson_1k", "seed": 3, "requests": 1000, "prompt_tokens": 256, "output_tokens": 256,
           "arrival": {"process": "poisson", "rate": 60}}


def cases() -> list[tuple[str, Any, dict[str, Any]]]:
    """(model, workload, flags): every frozen workload on three models, a Poisson trace, an eager and a TP=2 run."""
    from rsi_env.engine import list_workloads

    out: list[tuple[str, Any, dict[str, Any]]] = [(m, w, {}) for m in MODELS for w in list_workloads()]
    out += [("llama-3.1-8b", POISSON, {}), ("llama-3.1-8b", "short_long", {"enforce_eager": True}),
            ("llama-3.1-8b", "rag_chat", {"tensor_parallel_size": 2})]
    return out


def _name(model: str, workload: Any, flags: dict[str, Any]) -> str:
    w = workload["name"] if isinstance(workload, dict) else workload
    return f"{model}/{w}" + "".join(f" {k}={v}" for k, v in flags.items())


def worker(repeat: int) -> None:
    """Time every case with the ``rsi_env`` first on ``sys.path``; print {case: seconds} as JSON."""
    from rsi_env.engine.workload import Workload
    from rsi_env.sim import simulate

    out = {}
    for model, w, flags in cases():
        wl = Workload.from_dict(w) if isinstance(w, dict) else w
        simulate(flags, model, "h200", wl)
        best = math.inf
        for _ in range(repeat):
            t0 = time.process_time()
            simulate(flags, model, "h200", wl)
            best = min(best, time.process_time() - t0)
        out[_name(model, w, flags)] = best
    print(json.dumps(out))


def _run(root: Path, repeat: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "RSI_ENV_STORE": "off"}
    res = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", "--repeat", str(repeat)],
                         env=env, cwd=str(root), capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rev", default="HEAD", help="the earlier revision (git archive of its rsi_env)")
    p.add_argument("--before", default=None, help="a folder holding the earlier rsi_env (instead of --rev)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        sys.path.insert(0, os.environ["PYTHONPATH"])
        worker(args.repeat)
        return
    with tempfile.TemporaryDirectory(prefix="rsi-before-") as tmp:
        before = Path(args.before).resolve() if args.before else Path(tmp)
        if not args.before:
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.rev, "rsi_env"], capture_output=True,
                                     check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(before)], input=archive, check=True)
        best: dict[str, dict[str, float]] = {"before": {}, "after": {}}
        for r in range(args.rounds):
            order = [("before", before), ("after", ROOT)]
            for label, root in (order if r % 2 == 0 else order[::-1]):
                for k, v in _run(root, args.repeat).items():
                    best[label][k] = min(best[label].get(k, math.inf), v)
    label = args.before or args.rev
    print(f"{'case':48s} {label[:12]:>12s} {'this tree':>10s} {'ratio':>7s}")
    logs = []
    for k, b in best["before"].items():
        a = best["after"][k]
        logs.append(math.log(a / b))
        print(f"{k:48s} {b * 1e3:10.1f}ms {a * 1e3:8.1f}ms {a / b:7.3f}")
    print(f"geometric mean of the ratios: {math.exp(sum(logs) / len(logs)):.3f} over {len(logs)} cases, "
          f"{args.rounds} rounds x best of {args.repeat}")


if __name__ == "__main__":
    main()
