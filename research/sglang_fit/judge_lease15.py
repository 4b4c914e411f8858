"""Lease 15's adoption rules (research/plans/sglang_lease15.md), the shipped calibration against a candidate.

    python3 research/sglang_fit/judge_lease15.py [--candidate research/sglang_fit/h100-sxm-sglang-0.5-batch-eager.yaml]
        [--rule1 e1-e4+x1|e1-e4]

Rule 1: on lease 13's e1-e4 and lease 15's x1 together (``--rule1 e1-e4``: lease 13's e1-e4 only, x1 under no rule,
research/plans/sglang_eager_launch.md), the candidate's throughput MAPE at least 2 points below the
shipped calibration's and its TPOT p50 MAPE lower. Rule 2: on each other held-out set of heldout-all.txt, its
throughput MAPE no more than 0.5 points above the shipped one's. Rule 3 (the pick) is `pick.py`'s, run apart. Also
printed, under no rule: lease 15's e1, e2 and s2 measured again, and SGLang's own repeat of every configuration
measured in more than one start across leases 13-15 (each start against the mean of the others).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from closed_fit import CLOSED, L15_CANDIDATES, heldout_sets, lease14_samples
from repeat import loo

from rsi_env.calibrate.report import mapes
from rsi_env.calibrate.samples import Sample, load_samples
from rsi_env.calibrate.score import evaluate
from rsi_env.engine.hardware import load_hardware
from rsi_env.sim.sglang.simulate import sglang_calibration

HERE = Path(__file__).resolve().parent
E_STEPS = ("e1", "e2", "e3", "e4")


def by_flags(samples: list[Sample], names: tuple[str, ...], keep: bool) -> list[Sample]:
    """``samples`` whose flags are (``keep``) or are not lease 15's steps ``names``."""
    flags = {json.dumps(c["flags"], sort_keys=True) for c in json.loads(L15_CANDIDATES.read_text())["candidates"]
             if c["name"] in names}
    return [s for s in samples if (json.dumps(s.flags, sort_keys=True) in flags) == keep]


def held_sets(with_x1: bool) -> dict[str, list[Sample]]:
    """Rule 1's set (``with_x1``: lease 15's x1 in it), then rule 2's sets (heldout-all.txt's, lease 13's e1-e4 moved
    to rule 1), then lease 15's rows under no rule."""
    held = heldout_sets()
    l13 = held["lease 13 held"]
    x1 = load_samples([CLOSED / "lease15-x1.jsonl"])
    rule1 = ("rule 1: lease 13 e1-e4 + lease 15 x1", by_flags(l13, E_STEPS, True) + x1) if with_x1 else (
        "rule 1: lease 13 e1-e4", by_flags(l13, E_STEPS, True))
    rest = {("lease 13 defaults, c1" if k == "lease 13 held" else k): (by_flags(v, E_STEPS, False)
                                                                       if k == "lease 13 held" else v)
            for k, v in held.items()}
    return {
        rule1[0]: rule1[1], **rest,
        "lease 15 e1, e2, s2 (no rule)": load_samples([CLOSED / "lease15-again.jsonl"]),
        **({} if with_x1 else {"lease 15 x1 (no rule)": x1,
                               "lease 15 g1-g3 (no rule)": load_samples([CLOSED / "lease15-train.jsonl"])}),
    }


def repeat(samples: list[Sample]) -> None:
    """SGLang's throughput and TPOT p50 repeat per (configuration, workload) measured in two starts or more."""
    groups: dict[tuple[str, str], list[Sample]] = {}
    for s in samples:
        groups.setdefault((json.dumps(s.flags, sort_keys=True), s.workload.name), []).append(s)
    print("\nSGLang's own repeat, each start against the mean of the others (tok/s; TPOT p50):")
    loo_all: dict[str, list[float]] = {"tok/s": [], "TPOT": []}
    for (flags, w), got in groups.items():
        if len(got) < 2:
            continue
        cells = []
        for label, f in (("tok/s", "out_tok_per_s"), ("TPOT", "tpot_p50")):
            xs = [getattr(s.real, f) for s in got]
            rep = loo(xs)
            loo_all[label] += rep
            cells.append(f"{label} " + ", ".join(f"{x * (1e3 if f == 'tpot_p50' else 1):,.{1 if f == 'tpot_p50' else 0}f}"
                                               for x in xs) + f" ({100 * statistics.fmean(rep):.1f} %)")
        print(f"  {flags[:60]:60s} {w:11s} " + "; ".join(cells))
    print("  mean: " + ", ".join(f"{k} {100 * statistics.fmean(v):.1f} %" for k, v in loo_all.items() if v))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidate", type=Path, default=HERE / "h100-sxm-sglang-0.5-batch-eager.yaml")
    ap.add_argument("--rule1", choices=("e1-e4+x1", "e1-e4"), default="e1-e4+x1")
    args = ap.parse_args()
    hw = load_hardware("h100-sxm")
    cals = {"shipped": sglang_calibration(hw.name), "candidate": sglang_calibration(hw.name, args.candidate)}
    print(f"shipped {cals['shipped'].id}; candidate {cals['candidate'].id} ({args.candidate.name})")
    verdicts = []
    for i, (name, samples) in enumerate(held_sets(args.rule1 == "e1-e4+x1").items()):
        errs = {label: evaluate(samples, cal, hw) for label, cal in cals.items()}
        for label, e in errs.items():
            print(f"{name:38s} {label:9s} n={e['n']:2d} {mapes(e)}")
        thr = {k: 100 * e["out_tok_per_s_mape"] for k, e in errs.items()}
        tpot = {k: 100 * e["tpot_p50_mape"] for k, e in errs.items()}
        if i == 0:
            ok = thr["candidate"] <= thr["shipped"] - 2.0 and tpot["candidate"] < tpot["shipped"]
            verdicts.append(f"rule 1: throughput {thr['shipped']:.1f} -> {thr['candidate']:.1f} % (needs -2 pts), "
                            f"TPOT {tpot['shipped']:.1f} -> {tpot['candidate']:.1f} %: {'met' if ok else 'NOT met'}")
        elif "no rule" not in name:
            ok = thr["candidate"] <= thr["shipped"] + 0.5
            verdicts.append(f"rule 2, {name}: throughput {thr['shipped']:.1f} -> {thr['candidate']:.1f} %: "
                            f"{'met' if ok else 'NOT met'}")
    print("\n" + "\n".join(verdicts))
    l13_l15 = load_samples([CLOSED / f for f in ("lease13-held.jsonl", "lease15-train.jsonl", "lease15-x1.jsonl",
                                                 "lease15-again.jsonl")])
    repeat(l13_l15 + lease14_samples())


if __name__ == "__main__":
    main()
