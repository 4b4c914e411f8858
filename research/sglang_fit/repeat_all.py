"""SGLang's own repeat on the lent H100s across leases, beside the sim's error on the same starts.

    python3 research/sglang_fit/repeat_all.py [--calibration FILE] [--leases 10,11,12,13,14,15]

The issue's bar asks the sim's latency to be no worse than SGLang's own repeat error. `repeat.py` reads one
evaluation plan's starts; this reads every closed-loop start of Batching-v0's two workloads that the collector-frozen
FA3 leases measured (`data/sglang/0.5.17-h100/closed/`'s lease 10-15 files and lease 14's rows), groups them by
(flags, workload), and for every group of two starts or more prints the real engine's repeat (each start against the
mean of the others) and the sim's absolute percentage error on the same starts, per metric; then the means over
groups, for the leases given.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from closed_fit import CLOSED, lease14_samples
from repeat import loo

from rsi_env.calibrate.samples import Sample, load_samples
from rsi_env.calibrate.score import evaluate
from rsi_env.engine.hardware import load_hardware
from rsi_env.sim.sglang.simulate import sglang_calibration

FILES = {10: ["lease10-train.jsonl", "lease10-c1.jsonl"], 11: ["lease11-train.jsonl", "lease11-held.jsonl"],
         12: ["lease12.jsonl"], 13: ["lease13-train.jsonl", "lease13-held.jsonl"],
         15: ["lease15-train.jsonl", "lease15-x1.jsonl", "lease15-again.jsonl"]}
METRICS = (("out_tok_per_s", "tok/s"), ("ttft_p50", "TTFT p50"), ("tpot_p50", "TPOT p50"))


def samples(leases: list[int]) -> list[Sample]:
    out = [s for n in leases if n in FILES for s in load_samples([CLOSED / f for f in FILES[n]])]
    if 14 in leases:
        out += [s for s in lease14_samples() if s.workload.name in ("short_long", "many_small")]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", type=Path, default=None)
    ap.add_argument("--leases", default="10,11,12,13,14,15")
    args = ap.parse_args()
    hw = load_hardware("h100-sxm")
    cal = sglang_calibration(hw.name, args.calibration) if args.calibration else sglang_calibration(hw.name)
    got = samples([int(x) for x in args.leases.split(",")])
    groups: dict[tuple[str, str], list[Sample]] = {}
    for s in got:
        groups.setdefault((json.dumps(s.flags, sort_keys=True), s.workload.name), []).append(s)
    print(f"leases {args.leases}, sim {cal.id}: per (configuration, workload) of 2+ starts, real repeat | sim error")
    means: dict[str, list[float]] = {}
    for (flags, w), starts in sorted(groups.items()):
        if len(starts) < 2:
            continue
        sim = evaluate(starts, cal, hw)["per_sample"]
        cells = []
        for key, label in METRICS:
            xs = [getattr(s.real, key) for s in starts]
            rep = statistics.fmean(loo(xs))
            err = statistics.fmean(abs(p[f"sim_{key.replace('out_tok_per_s', 'tok_s')}"] / x - 1.0)
                                   for p, x in zip(sim, xs, strict=True))
            means.setdefault(f"{label} real", []).append(rep)
            means.setdefault(f"{label} sim", []).append(err)
            cells.append(f"{label} {100 * rep:5.1f} | {100 * err:5.1f} %")
        print(f"  {flags[:58]:58s} {w:11s} n={len(starts)}  " + "   ".join(cells))
    print(f"mean over {len(means.get('tok/s real', []))} groups: " + "   ".join(
        f"{label} {100 * statistics.fmean(means[f'{label} real']):.1f} | "
        f"{100 * statistics.fmean(means[f'{label} sim']):.1f} %" for _, label in METRICS))


if __name__ == "__main__":
    main()
