"""Throughput, TTFT p50 and TPOT p50 MAPE of one sim on each held-out set of heldout-all.txt, saved or compared.

    python3 research/sglang_fit/heldout_sets.py [--calibration FILE] --save OUT.json
    python3 research/sglang_fit/heldout_sets.py [--calibration FILE] --against OUT.json

A loop candidate changes the sim's code, so the shipped sim's side is run with the shipped code (`--save`, on a clean
checkout) and the candidate's with its own (`--against` the saved file). The first-token plan's rule 3
(research/plans/sglang_first_token.md): every set's throughput MAPE within 0.5 points of the shipped sim's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from closed_fit import heldout_sets

from rsi_env.calibrate.score import evaluate
from rsi_env.engine.hardware import load_hardware
from rsi_env.sim.sglang.simulate import sglang_calibration

RULE3_POINTS = 0.5


def set_mapes(calibration: Path | None) -> dict[str, dict[str, float]]:
    """Per held-out set: its size and the MAPE of throughput, TTFT p50 and TPOT p50, in %."""
    hw = load_hardware("h100-sxm")
    cal = sglang_calibration(hw.name, calibration)
    out = {}
    for name, samples in heldout_sets().items():
        err = evaluate(samples, cal, hw)
        out[name] = {"n": len(samples), **{k: 100 * err[k] for k in ("out_tok_per_s_mape", "ttft_p50_mape",
                                                                      "tpot_p50_mape")}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", type=Path)
    ap.add_argument("--save", type=Path)
    ap.add_argument("--against", type=Path)
    args = ap.parse_args()
    got = set_mapes(args.calibration)
    if args.save:
        args.save.write_text(json.dumps(got, indent=1) + "\n")
    base = json.loads(args.against.read_text()) if args.against else {}
    ok = True
    for name, m in got.items():
        line = (f"{name:22s} n={m['n']:2d} throughput {m['out_tok_per_s_mape']:5.1f} %  TTFT p50 "
                f"{m['ttft_p50_mape']:5.1f} %  TPOT p50 {m['tpot_p50_mape']:5.1f} %")
        if name in base:
            b = base[name]
            within = m["out_tok_per_s_mape"] <= b["out_tok_per_s_mape"] + RULE3_POINTS
            ok &= within
            line += (f"   | against {b['out_tok_per_s_mape']:5.1f} / {b['ttft_p50_mape']:5.1f} / "
                     f"{b['tpot_p50_mape']:5.1f} %: {'within' if within else 'OUTSIDE'} {RULE3_POINTS} points")
        print(line)
    if base:
        print(f"rule 3: {'holds' if ok else 'fails'}")


if __name__ == "__main__":
    main()
