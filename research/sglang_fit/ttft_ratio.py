"""many_small's first-token wait in units of its decode pass: TTFT p50 / TPOT p50, real against the sim, per start.

    python3 research/sglang_fit/ttft_ratio.py [--calibration FILE]

The sim's TTFT p50 error on many_small at low queueing moves from lent machine to lent machine (+20 to +35 % on lease
13's e1, about -2 % on lease 16's m96), because the real passes' cost does and the sim's does not. The ratio of
TTFT p50 to TPOT p50 divides the machine's pass speed out: how many decode passes' worth a new request waits for its
first token. Printed for every many_small start of leases 10-16 where few requests queue (real TTFT p50 under three
TPOT p50s), grouped by whether the decode passes run above the largest CUDA graph, with the shipped sim's ratio for
the same flags.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from rsi_env.calibrate.samples import samples_from_rows
from rsi_env.calibrate.score import predict
from rsi_env.engine.hardware import load_hardware
from rsi_env.sim.sglang.simulate import sglang_calibration

ROOT = Path(__file__).resolve().parents[2]
H100 = ROOT / "data/sglang/0.5.17-h100"
FILES = [*sorted((H100 / "closed").glob("lease1[0-5]*.jsonl")), *sorted((H100 / "lease16").glob("call*/rows.jsonl"))]
LOW_QUEUE = 3.0  # real TTFT p50 under this many TPOT p50s: few requests wait


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", type=Path, help="the sim's calibration file (default: the chip's shipped one)")
    args = ap.parse_args()
    hw = load_hardware("h100-sxm")
    cal = sglang_calibration(hw.name, args.calibration)
    sims: dict[str, tuple[float, float]] = {}
    groups: dict[str, list[tuple[float, float]]] = {"eager": [], "captured": []}
    print(f"{'rows':22s} {'flags':62s} {'real TTFT/TPOT ms':>18s} {'ratio':>5s} | {'sim':>12s} {'ratio':>5s}")
    for f in FILES:
        rows = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        for s in samples_from_rows(rows, str(f)):
            if s.workload.name != "many_small" or s.real.ttft_p50 >= LOW_QUEUE * s.real.tpot_p50:
                continue
            key = json.dumps(s.flags, sort_keys=True)
            if key not in sims:
                p = predict(s, cal, hw)
                sims[key] = (p.ttft_p50, p.tpot_p50)
            sttft, stpot = sims[key]
            graphs = s.flags.get("cuda_graph_max_bs", 256)
            kind = "eager" if graphs < s.real.mean_batch_size else "captured"
            groups[kind].append((s.real.ttft_p50 / s.real.tpot_p50, sttft / stpot))
            where = f"{f.parent.name}/{f.name}" if f.parent.name != "closed" else f.name
            print(f"{where[:22]:22s} {key[:62]:62s} {1e3 * s.real.ttft_p50:8.1f}/{1e3 * s.real.tpot_p50:4.1f} ms "
                  f"{s.real.ttft_p50 / s.real.tpot_p50:5.2f} | {1e3 * sttft:5.1f}/{1e3 * stpot:4.1f} ms "
                  f"{sttft / stpot:5.2f}  ({kind})")
    for kind, got in groups.items():
        real, sim = [r for r, _ in got], [x for _, x in got]
        print(f"{kind:8s} {len(got):2d} starts: real {min(real):.2f}-{max(real):.2f} (mean {statistics.fmean(real):.2f}), "
              f"sim {min(sim):.2f}-{max(sim):.2f} (mean {statistics.fmean(sim):.2f}); sim / real - 1 "
              f"{100 * statistics.fmean(x / r - 1 for r, x in got):+.1f} %")


if __name__ == "__main__":
    main()
