"""The simulator's step times against the real engine's, step by step (the real tier's step trace).

For every real row that carries a step trace (``steps``: `rsi_env.real.step_trace`), the same configuration and
workload are simulated and both traces are reduced to the median step time of decode-only steps (every running
request generated one token) by batch size, and of all steps. This is where end-to-end errors come from: a
simulator can match throughput while mispricing the steps (and vice versa).

``python benchmarks/step_fidelity.py [ROWS.jsonl ...]`` (default: every ``data/measurements/**/*.jsonl`` row with a
trace).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from rsi_env.engine.workload import Workload
from rsi_env.sim import simulate_detailed

ROOT = Path(__file__).resolve().parents[1]
BINS = ((1, 32), (32, 96), (96, 160), (160, 224), (224, 257), (257, 1025))


def decode_medians(t: np.ndarray, running: np.ndarray, gen: np.ndarray) -> dict[str, float]:
    """Median step time (ms) of decode-only steps per batch-size bin, and of every step."""
    dt = np.diff(t) * 1e3
    run, g = running[1:], gen[1:]
    decode = (g == run) & (run > 0)
    out = {}
    for a, b in BINS:
        k = decode & (run >= a) & (run < b)
        if k.sum() >= 5:
            out[f"decode {a}-{b - 1}"] = float(np.median(dt[k]))
    out["all steps"] = float(np.median(dt)) if dt.size else float("nan")
    return out


def main(paths: list[str]) -> int:
    files = [Path(p) for p in paths] or sorted((ROOT / "data" / "measurements").glob("**/*.jsonl"))
    for f in files:
        for line in f.read_text().splitlines():
            row = json.loads(line)
            if not isinstance(row.get("steps"), dict) or "workload_spec" not in row:
                continue
            w = Workload.from_dict(row["workload_spec"])
            _, _, _, results = simulate_detailed(row["flags"], row["model"], row.get("hardware", "h200"), w)
            if not results or results[0].steps is None:
                print(f"{row['workload']}: the sim refused {row['flags']}")
                continue
            s = results[0].steps
            real = decode_medians(np.asarray(row["steps"]["t"]), np.asarray(row["steps"]["running"]),
                                  np.asarray(row["steps"]["gen"]))
            sim = decode_medians(s["t"], s["running"], s["gen"])
            cells = [f"{k} {real[k]:.1f}/{sim[k]:.1f}" for k in real if k in sim]
            print(f"{row['model']} {json.dumps(row['flags'])} {row['workload']}: real/sim ms  " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
