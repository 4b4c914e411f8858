"""A many_small start's steady first-token wait in its own decode passes, real and simulated: a fit's target.

    python3 research/sglang_fit/steady.py ROWS.jsonl [...] [--calibration FILE]

The steady requests are those `first_token_path.steady` keeps: sent after the start burst, barely queued (TTFT under
three TPOT p50s): their median TTFT over the start's TPOT p50 is how many decode passes a new
request waits for its first token where nothing queues (`ttft_ratio.py`'s ratio, without the burst). Dividing by the
start's own TPOT p50 takes the lent machine's pass speed out. `residuals` gives a fit (`closed_fit.py --steady`) the
log of the sim's ratio over the real one, per row. Run alone, it prints both per row.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from first_token_path import steady

from rsi_env.engine.workload import Workload
from rsi_env.sim.calibration import Calibration
from rsi_env.sim.sglang.simulate import sglang_calibration, simulate_sglang_detailed


def ratio(arrival: np.ndarray, first: np.ndarray, tpot_p50: float) -> float:
    """The steady requests' median TTFT over the TPOT p50 (nan where none is steady)."""
    ttft = first - arrival
    keep = steady(arrival, ttft, tpot_p50)
    return float(np.median(ttft[keep])) / tpot_p50 if keep.any() else math.nan


def real_ratio(row: dict[str, Any]) -> float:
    """A row's steady ratio on the driver's clock (its ``requests``' sends and first tokens)."""
    req = row["requests"]
    return ratio(np.asarray(req["arrival_s"], float), np.asarray(req["first_token_s"], float),
                 float(row["telemetry"]["tpot_p50"]))


def sim_ratio(row: dict[str, Any], cal: Calibration) -> float:
    """The sim's steady ratio for the row's flags, model, chip and workload under ``cal`` (the client's first token
    a front-end hop after the engine's, as `simulate_sglang_detailed` reports it)."""
    tel, _, res = simulate_sglang_detailed(row["flags"], row["model"], row["hardware"],
                                           Workload.from_dict(row["workload_spec"]), calibration=cal)
    if res is None:
        return math.nan
    a = np.asarray([r.arrival for r in res.reqs])
    first = np.asarray([r.first_token for r in res.reqs]) + cal.frontend_s
    return ratio(a, first, tel.tpot_p50)


def steady_rows(files: list[Path]) -> list[dict[str, Any]]:
    """The many_small rows of ``files`` that carry per-request times."""
    rows = [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("workload") == "many_small" and r.get("requests")
            and not r["telemetry"].get("error")]


def residuals(rows: list[dict[str, Any]], cal: Calibration, weight: float) -> np.ndarray:
    """``weight`` times the log of the sim's steady ratio over the real one, per row (3, `timing.residuals`'s
    failure value, where the sim fails or has no steady request)."""
    out = []
    for r in rows:
        s = sim_ratio(r, cal)
        out.append(3.0 if not s > 0 else weight * math.log(s / real_ratio(r)))
    return np.asarray(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="+", type=Path)
    ap.add_argument("--calibration", type=Path, help="the sim's calibration file (default: the chip's shipped one)")
    args = ap.parse_args()
    rows = steady_rows(args.rows)
    cal = sglang_calibration(rows[0]["hardware"], args.calibration) if rows else None
    excess = []
    for r in rows:
        assert cal is not None
        real, sim = real_ratio(r), sim_ratio(r, cal)
        excess.append(sim / real - 1)
        print(f"{json.dumps(r['flags'])[:60]:60s} real {real:4.2f}  sim {sim:4.2f}  ({100 * (sim / real - 1):+5.1f} %)")
    if excess:
        print(f"mean sim / real - 1: {100 * float(np.mean(excess)):+.1f} % over {len(excess)} starts")


if __name__ == "__main__":
    main()
