"""Each calibration's errors on every row of a lease: throughput, TPOT p50 and TTFT p50, sim beside real.

    python3 research/sglang_fit/errors.py ROWS.jsonl ... [--candidates FILE] [--calibration FILE ...]

ROWS: driver rows (`rsi_env.real.sglang_driver`) or a promotion's ``real.jsonl`` (its lines turned into driver rows
with the candidates file's workloads, `closed_loop.driver_rows`). Rows with server-argument overrides (an every-pass
log) are left out. Per row, the sim's throughput and TPOT p50 over the real engine's, per calibration (the chip's
shipped one first); then the MAPEs per calibration, as `rsi_env.calibrate.score.evaluate` counts them.
"""

from __future__ import annotations

import json
from pathlib import Path

from pick import flag_names, parser, read_rows

from rsi_env.calibrate.report import mapes
from rsi_env.calibrate.samples import samples_from_rows
from rsi_env.calibrate.score import evaluate
from rsi_env.engine.hardware import load_hardware
from rsi_env.sim.calibration import Calibration
from rsi_env.sim.sglang.simulate import sglang_calibration


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--hardware", default="h100-sxm")
    args = ap.parse_args()
    doc = json.loads(args.candidates.read_text())
    names = flag_names(doc)
    rows = [r for r in read_rows(args.rows, doc) if not r.get("server_arg_overrides")]
    samples = samples_from_rows(rows, str(args.rows))
    hw = load_hardware(args.hardware)
    cals: list[tuple[str, Calibration]] = [("shipped", sglang_calibration(hw.name))]
    cals += [(Path(c).stem.removeprefix(f"{hw.name}-sglang-0.5-"), sglang_calibration(hw.name, c))
             for c in args.calibration]
    errs = [(label, evaluate(samples, cal, hw)) for label, cal in cals]
    print(f"{'configuration':44s} {'workload':11s} {'real tok/s':>10s} {'TPOT':>6s}  "
          + "  ".join(f"{label[:8]:>8s} tok/s  TPOT" for label, _ in cals))
    for i, s in enumerate(samples):
        key = json.dumps(s.flags, sort_keys=True)
        cfg = names.get(key, key)
        cells = []
        for _, e in errs:
            p = e["per_sample"][i]
            cells.append(f"{100 * (p['sim_tok_s'] / p['real_tok_s'] - 1):+13.1f}% "
                         f"{100 * (p['sim_tpot_p50'] / p['real_tpot_p50'] - 1):+5.1f}%")
        print(f"{cfg[:44]:44s} {s.workload.name:11s} {s.real.out_tok_per_s:10,.0f} {1e3 * s.real.tpot_p50:5.1f}ms  "
              + "  ".join(cells))
    for label, e in errs:
        print(f"{label:10s} n={e['n']:2d} {mapes(e)}")


if __name__ == "__main__":
    main()
