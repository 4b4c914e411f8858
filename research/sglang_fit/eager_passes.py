"""A decode pass's time against its batch, inside and above the largest CUDA graph: SGLang's every-pass log beside the sim.

    python3 research/sglang_fit/eager_passes.py ROWS.jsonl ... [--calibration FILE ...] [--bin 32]

ROWS: driver rows; those run with ``decode_log_interval`` 1 (lease 15's p-steps: short_long with every decode pass
logged) are read. Per row, and per bin of running requests and graph state (captured ``g`` or eager ``e``): the
median gap between consecutive decode lines of SGLang's log (a pass's time, on the driver's clock), beside the median
time the sim prices its decode passes of that bin at, per calibration (the chip's shipped one first). Lease 15's
plan asks this shape before any other term is tried: a cost per request of an eager pass (``uncaptured_per_req_s``)
grows with the batch, a cost per pass does not.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from passes import real_passes, sim_passes

from rsi_env.engine.workload import Workload
from rsi_env.sim.sglang.simulate import sglang_calibration

HERE = Path(__file__).resolve().parent


def binned(passes: list[dict[str, Any]], width: int, graph_at: int) -> dict[tuple[int, str], float]:
    """Median decode-pass time per (running bin, ``g``/``e``), a pass eager where its batch exceeds ``graph_at``; only
    a decode followed by a decode counts for a logged pass (`real_passes` ends each with the next line)."""
    got: dict[tuple[int, str], list[float]] = {}
    for p, nxt in zip(passes, [*passes[1:], None], strict=True):
        if p["kind"] != "decode" or (nxt is not None and nxt["kind"] != "decode"):
            continue
        key = (p["running"] // width * width, "g" if p["running"] <= graph_at else "e")
        got.setdefault(key, []).append(p["dt"])
    return {k: statistics.median(v) for k, v in got.items() if len(v) >= 5}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="+", type=Path)
    ap.add_argument("--calibration", action="append", default=[])
    ap.add_argument("--bin", type=int, default=32)
    ap.add_argument("--candidates", type=Path, default=HERE / "eager_search/candidates.json")
    args = ap.parse_args()
    workloads = {w["name"]: Workload.from_dict(w) for w in json.loads(args.candidates.read_text())["workloads"]}
    rows = [json.loads(line) for f in args.rows for line in f.read_text().splitlines() if line.strip()]
    cals = [("shipped", None), *((Path(c).stem.removeprefix("h100-sxm-sglang-0.5-"), c) for c in args.calibration)]
    for r in rows:
        real = real_passes([r], r["flags"], r["workload"])
        if real is None:
            continue
        hw = r.get("hardware", "h100-sxm")
        graph_at = r["resolved"]["cuda_graph_max_bs"]
        print(f"{json.dumps(r['flags'])} {r['workload']} ({r['when']}): median decode pass, ms, real | "
              + " | ".join(label for label, _ in cals))
        real_bins = binned(real, args.bin, graph_at)
        sims = [binned(sim_passes(r["flags"], r["model"], hw, workloads[r["workload"]],
                                  sglang_calibration(hw, path) if path else None), args.bin, graph_at)
                for _, path in cals]
        for key in sorted(real_bins):
            cells = " | ".join(f"{1e3 * s[key]:5.1f}" if key in s else "    -" for s in sims)
            print(f"  running {key[0]:3d}-{key[0] + args.bin - 1:3d} {key[1]}  {1e3 * real_bins[key]:5.1f} | {cells}")


if __name__ == "__main__":
    main()
