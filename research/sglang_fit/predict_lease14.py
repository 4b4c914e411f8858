"""Lease 14's held-out rows as the calibration then shipped (the eager refit) and the shared-read candidate predict
them, before the lease.

    python3 research/sglang_fit/predict_lease14.py > research/sglang_fit/predictions-lease14.md

research/plans/sglang_lease14.md's steps: the defaults on the catalog's shared_prefix_many and rag_chat (open loops),
max_running_requests 64 on shared_prefix_many, and s1-s3 on Batching-v0's two closed-loop workloads (the eager
search's candidates file holds them). One table line per (step, workload): out tok/s, TTFT p50, TPOT p50.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rsi_env.engine.workload import Workload, load_workload
from rsi_env.sim.calibration import Calibration
from rsi_env.sim.sglang import simulate_sglang
from rsi_env.sim.sglang.simulate import sglang_calibration

HERE = Path(__file__).resolve().parent
STEPS: list[tuple[str, dict[str, Any], str]] = [("spm", {}, "shared_prefix_many"), ("spm", {}, "rag_chat"),
         ("spm64", {"max_running_requests": 64}, "shared_prefix_many")]
STEPS += [(name, flags, w) for name, flags in (("s1", {"max_running_requests": 48, "chunked_prefill_size": 8192}),
                                               ("s2", {"max_running_requests": 80, "schedule_conservativeness": 0.5}),
                                               ("s3", {"max_running_requests": 160, "chunked_prefill_size": 2048}))
          for w in ("short_long", "many_small")]


def table(steps: list[tuple[str, dict[str, Any], str]], cals: dict[str, Calibration]) -> str:
    """A markdown table: per (step, workload), each calibration's out tok/s, TTFT p50 and TPOT p50 on the H100's sim;
    a workload is one of the eager search's closed loops, else the catalog's."""
    closed = {w["name"]: Workload.from_dict(w)
              for w in json.loads((HERE / "eager_search/candidates.json").read_text())["workloads"]}
    lines = ["| step | workload | flags | " + " | ".join(cals) + " |", "|---|---|---|" + "---|" * len(cals)]
    for name, flags, w in steps:
        wl = closed.get(w) or load_workload(w)
        cells = []
        for cal in cals.values():
            t = simulate_sglang(flags, "llama-3.1-8b", "h100-sxm", wl, calibration=cal)
            cells.append(f"{t.out_tok_per_s:,.0f} tok/s, TTFT {1e3 * t.ttft_p50:.1f} ms, TPOT {1e3 * t.tpot_p50:.2f} ms")
        lines.append(f"| {name} | {w} | {json.dumps(flags)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    print(table(STEPS, {"shipped": sglang_calibration("h100-sxm", HERE / "h100-sxm-sglang-0.5-eager.yaml"),
                        "shared": sglang_calibration("h100-sxm", HERE / "h100-sxm-sglang-0.5-shared.yaml")}))


if __name__ == "__main__":
    main()
