"""SGLang's own repeat error across engine starts, beside the sim's error on the same starts.

    python3 research/sglang_fit/repeat.py ROWS.jsonl ... [--candidates FILE] [--calibration FILE ...]

ROWS and --candidates as `pick.py` reads them (driver rows or a promotion's ``real.jsonl``). For every
(configuration, workload) measured in two starts or more, and every metric (throughput, TTFT p50, TPOT p50): the
real engine's repeat error, each start against the mean of the others (the absolute percentage error a perfect
predictor of the configuration's mean would still show on one start), and the sim's absolute percentage error on
the same starts, per calibration (the chip's shipped one first). The issue's bar asks the sim's latency to be no worse
than SGLang's repeat error; this prints the two side by side, per row and as means over rows.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from pick import flag_names, parser, read_rows, starts

from rsi_env.engine.workload import Workload
from rsi_env.sim.sglang import simulate_sglang_detailed

METRICS = (("out_tok_per_s", "tok/s"), ("ttft_p50", "TTFT"), ("tpot_p50", "TPOT"))


def loo(xs: list[float]) -> list[float]:
    """Each start's absolute relative error against the mean of the other starts (SGLang's own repeat)."""
    return [abs(x / statistics.fmean(xs[:i] + xs[i + 1:]) - 1.0) for i, x in enumerate(xs)]


def main() -> None:
    args = parser(__doc__).parse_args()
    doc = json.loads(args.candidates.read_text())
    wls = [Workload.from_dict(w) for w in doc["workloads"]]
    entries = [doc["defaults"], *doc["candidates"]]
    measured = starts(read_rows(args.rows, doc), flag_names(doc), [w.name for w in wls])
    cals: list[str | None] = [None, *args.calibration]
    labels = ["real"] + [f"sim {Path(c).stem.removeprefix('h100-sxm-sglang-0.5-')[:8]}" if c else "sim shipped"
                         for c in cals]
    print(f"{'':9s} {'workload':11s} {'n':>2s} " + " ".join(f"{m:>5s} " + " ".join(f"{lb:>12s}" for lb in labels)
                                                       for _, m in METRICS))
    totals: dict[tuple[str, str], list[float]] = {}
    for e in entries:
        runs = [t for n, t in measured if n == e["name"]]
        if len(runs) < 2:
            continue
        for w in wls:
            sims = [simulate_sglang_detailed(e["flags"], doc["model"], doc["hardware"], w, calibration=c)[0]
                    for c in cals]
            cells = []
            for key, m in METRICS:
                xs = [getattr(t[w.name], key) for t in runs]
                errs = [statistics.fmean(loo(xs))] + [statistics.fmean(abs(getattr(s, key) / x - 1.0) for x in xs)
                                                  for s in sims]
                for lb, v in zip(labels, errs, strict=True):
                    totals.setdefault((m, lb), []).append(v)
                cells.append(f"{'':5s} " + " ".join(f"{100 * v:11.1f}%" for v in errs))
            print(f"{e['name']:9s} {w.name:11s} {len(runs):2d} " + " ".join(cells))
    print(f"{'mean':9s} {'':11s} {'':2s} " + " ".join(
        f"{'':5s} " + " ".join(f"{100 * statistics.fmean(totals[(m, lb)]):11.1f}%" for lb in labels)
        for _, m in METRICS if (m, labels[0]) in totals))


if __name__ == "__main__":
    main()
