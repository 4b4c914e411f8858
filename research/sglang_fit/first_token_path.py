"""Where a many_small request's first token waits, leg by leg, on SGLang's own clock beside the sim's.

    python3 research/sglang_fit/first_token_path.py [ROWS.jsonl ...] [--sim-only]

`ttft_ratio.py` shows the sim's first token waiting about one pass longer than SGLang's at low queueing, and
`research/plans/sglang_first_token.md` reads in SGLang 0.5.17's loop a wait of three loop iterations, as the sim has
it: so something in the loop is not as read. The SGLang driver keeps, per request, SGLang's own time stamps (the
row's ``requests``: `rsi_env.real.sglang_driver.ENGINE_STAMPS`), and this splits the first token's wait into legs:

- ``in``: the driver's send to the scheduler's receipt (the tokenizer manager and the hop to the scheduler);
- ``queue``: the receipt to the prefill batch's formation (SGLang's own ``queue_time``);
- ``batch``: the formation to the batch's result processed (``prefill_finished_time``);
- ``out``: the processing to the driver's first token (the detokenizer and the hop back).

The sim's legs, from the shipped sim's passes (`passes.sim_run`): ``in`` 0 (its arrival is the scheduler's receipt);
``queue`` from the arrival to its prefill's choice, made, as SGLang's overlap loop makes it, at the start of the pass
before (receipt there is the first pass start after the arrival, so ``queue`` here holds the wait to that receipt);
``batch`` to the prefill pass's end; ``out`` the front-end hop. Each leg is printed as its median in ms and in TPOT
p50s, for the requests sent after the first second (the start burst queues) that waited under three TPOT p50s.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
from passes import sim_run

from rsi_env.engine.workload import Workload
from rsi_env.real.sglang_driver import ENGINE_STAMPS
from rsi_env.sim.sglang.simulate import sglang_calibration

LEGS = ("in", "queue", "batch", "out")
AFTER_S = 1.0  # requests sent earlier are the start burst's
LOW_QUEUE = 3.0  # TTFT under this many TPOT p50s: the request barely queued


def real_legs(req: dict[str, list[Any]]) -> dict[str, np.ndarray] | None:
    """Per request, each leg's seconds from a row's ``requests``; None where SGLang's stamps are missing."""
    if any(k not in req or None in req[k] for k in ENGINE_STAMPS):
        return None
    a, first = np.asarray(req["arrival_s"]), np.asarray(req["first_token_s"])
    _, queued, scheduled, prefilled = (np.asarray(req[k], dtype=float) for k in ENGINE_STAMPS)
    return {"arrival": a, "first": first, "in": queued - a, "queue": scheduled - queued,
            "batch": prefilled - scheduled, "out": first - prefilled}


def sim_legs(flags: dict[str, Any], model: str, hardware: str,
             workload: Workload) -> tuple[dict[str, np.ndarray], float]:
    """The same legs in the shipped sim, from its passes' start times and its requests' timestamps, and its TPOT
    p50."""
    cal = sglang_calibration(hardware)
    passes, tel, res = sim_run(flags, model, hardware, workload, cal)
    assert res is not None
    starts = [p["t"] for p in passes]
    ends = np.array([p["t"] + p["dt"] for p in passes])
    a = np.array([r.arrival for r in res.reqs])
    done = np.array([r.first_token for r in res.reqs])  # the end of the request's (last) prefill pass
    k = np.abs(ends[None, :] - done[:, None]).argmin(axis=1)  # the prefill pass that ended at each first token
    chosen = np.array(starts)[np.maximum(k - 1, 0)]  # chosen while the pass before it ran
    chosen_at = np.maximum(chosen, a)
    legs = {"arrival": a, "first": done + cal.frontend_s, "in": np.zeros_like(a), "queue": chosen_at - a,
            "batch": done - chosen_at, "out": np.full_like(a, cal.frontend_s)}
    return legs, tel.tpot_p50


def steady(arrival: np.ndarray, ttft: np.ndarray, tpot: float) -> np.ndarray:
    """The requests sent after the start burst that barely queued (a mask)."""
    return (arrival > AFTER_S) & (ttft < LOW_QUEUE * tpot)


def show(label: str, legs: dict[str, np.ndarray], tpot: float) -> None:
    ttft = legs["first"] - legs["arrival"]
    keep = steady(legs["arrival"], ttft, tpot)
    parts = "  ".join(f"{k} {1e3 * float(np.median(legs[k][keep])):5.1f}" for k in LEGS)
    ratio = "  ".join(f"{k} {float(np.median(legs[k][keep])) / tpot:4.2f}" for k in LEGS)
    print(f"  {label}: {int(keep.sum())} requests, TTFT p50 {1e3 * float(np.median(ttft[keep])):5.1f} ms "
          f"({float(np.median(ttft[keep])) / tpot:4.2f} TPOT)\n      ms    {parts}\n      TPOT  {ratio}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="+", type=Path)
    ap.add_argument("--sim-only", action="store_true", help="the sim's legs for the rows' configurations only")
    args = ap.parse_args()
    sims: dict[str, tuple[dict[str, np.ndarray], float]] = {}  # the sim's legs per configuration and workload
    for f in args.rows:
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if r.get("workload") != "many_small" or not r.get("requests"):
                continue
            real = None if args.sim_only else real_legs(r["requests"])
            if real is None and not args.sim_only:
                continue
            print(f"{r['workload']} {json.dumps(r['flags'])} ({f.parent.name}/{f.name})")
            key = json.dumps([r["flags"], r["model"], r["hardware"], r["workload_hash"]], sort_keys=True)
            if key not in sims:
                sims[key] = sim_legs(r["flags"], r["model"], r["hardware"], Workload.from_dict(r["workload_spec"]))
            sim, tpot = sims[key]
            if real is not None:
                show("real", real, float(r["telemetry"]["tpot_p50"]))
            show("sim ", sim, tpot)


if __name__ == "__main__":
    main()
