"""Lease 18: SGLang's loop with its overlap scheduler on and off, real beside the sim, and the CPU time it hid.

    python3 research/sglang_fit/overlap_off.py ROWS.jsonl [...] [--calibration FILE]

`research/plans/sglang_lease18.md`. With ``disable_overlap_schedule`` SGLang's loop runs its CPU work (receive,
schedule, launch, process the result, stream) in series with each forward pass. The growth of TPOT p50 from a
configuration with overlap (``t``, ``tN``) to the same without (``n``, ``nN``), started on one machine in one call, is
about one iteration's CPU time. Printed per pair: real throughput, TTFT p50 and TPOT p50 with overlap on and off,
TPOT's growth in ms; the sim's the same with its cost model's overlap turned off (`StepCost.combine` without
``async_scheduling``: the step's CPU work added to its device time). The sim's loop still lets the next choice see
arrivals only up to the pass in flight's start, so its TTFT with overlap off is an upper bound; its TPOT is the
comparison.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from rsi_env.engine.workload import Workload
from rsi_env.sim.sglang import simulate as sglang_simulate
from rsi_env.sim.sglang.simulate import sglang_calibration, simulate_sglang_detailed


def sim(flags: dict[str, Any], model: str, hardware: str, workload: Workload, overlap: bool,
        calibration: Path | None) -> tuple[float, float, float]:
    """The sim's throughput, TTFT p50 and TPOT p50, its cost model's overlap on or off."""
    cal = sglang_calibration(hardware, calibration)
    step_cost = sglang_simulate.StepCost

    def serial(spec: Any, hw: Any, resolved: Any, *rest: Any) -> Any:
        return step_cost(spec, hw, dataclasses.replace(resolved, async_scheduling=False), *rest)

    if not overlap:
        sglang_simulate.StepCost = serial  # type: ignore[misc,assignment]
    try:
        tel, _, _ = simulate_sglang_detailed(flags, model, hardware, workload, calibration=cal)
    finally:
        sglang_simulate.StepCost = step_cost  # type: ignore[misc]
    return tel.out_tok_per_s, tel.ttft_p50, tel.tpot_p50


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="+", type=Path)
    ap.add_argument("--calibration", type=Path, help="the sim's calibration file (default: the chip's shipped one)")
    args = ap.parse_args()
    rows = [json.loads(line) for f in args.rows for line in f.read_text().splitlines() if line.strip()]
    by: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("workload") != "many_small" or r["telemetry"].get("error"):
            continue
        off = bool(r["resolved"].get("disable_overlap_schedule"))
        by.setdefault((json.dumps(r["flags"], sort_keys=True), off), []).append(r)
    print(f"{'flags':28s} {'overlap':7s} {'real tok/s':>10s} {'TTFT':>6s} {'TPOT':>5s} | {'sim tok/s':>9s} {'TTFT':>6s} "
          f"{'TPOT':>5s}   (ms)")
    for key in sorted({k for k, _ in by}):
        tpots: dict[bool, tuple[float, float]] = {}
        for off in (False, True):
            starts = by.get((key, off), [])
            if not starts:
                continue
            r0 = starts[0]  # every start of a configuration simulates alike
            s = sim(r0["flags"], r0["model"], r0["hardware"], Workload.from_dict(r0["workload_spec"]), not off,
                    args.calibration)
            for r in starts:
                t = r["telemetry"]
                print(f"{key[:28]:28s} {'off' if off else 'on':7s} {t['out_tok_per_s']:10.0f} "
                      f"{1e3 * t['ttft_p50']:6.1f} {1e3 * t['tpot_p50']:5.1f} | {s[0]:9.0f} {1e3 * s[1]:6.1f} "
                      f"{1e3 * s[2]:5.1f}")
                tpots.setdefault(off, (t["tpot_p50"], s[2]))  # the first start of each
        if len(tpots) == 2:
            (r_on, s_on), (r_off, s_off) = tpots[False], tpots[True]
            print(f"{'':28s} TPOT growth: real {1e3 * (r_off - r_on):+5.1f} ms, sim {1e3 * (s_off - s_on):+5.1f} ms")


if __name__ == "__main__":
    main()
