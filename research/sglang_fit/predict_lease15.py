"""Lease 15's rows as the shipped calibration predicts them, before the lease.

    python3 research/sglang_fit/predict_lease15.py > research/sglang_fit/predictions-lease15.md

research/plans/sglang_lease15.md's steps (`tools/gpu/sglang_lease9.sh`): g1-g3, ``cuda_graph_max_bs`` 32 at three
caps on running requests (training), x1 (held out), and lease 13's e1-e4 again for reference (held out, measured
there), each on Batching-v0's two closed-loop workloads. The shipped calibration has ``uncaptured_per_req_s`` at 0.
"""

from __future__ import annotations

from typing import Any

from predict_lease14 import table

from rsi_env.sim.sglang.simulate import sglang_calibration

CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("g1", {"cuda_graph_max_bs": 32, "max_running_requests": 64}),
    ("g2", {"cuda_graph_max_bs": 32, "max_running_requests": 160}),
    ("g3", {"cuda_graph_max_bs": 32}),
    ("x1", {"cuda_graph_max_bs": 64, "max_running_requests": 128, "chunked_prefill_size": 4096}),
    ("e1", {"cuda_graph_max_bs": 96}),
    ("e2", {"max_running_requests": 96, "cuda_graph_max_bs": 48, "chunked_prefill_size": 2048}),
    ("e3", {"chunked_prefill_size": -1, "max_running_requests": 192}),
    ("e4", {"cuda_graph_max_bs": 200, "chunked_prefill_size": 4096, "schedule_conservativeness": 0.8}),
]


def main() -> None:
    steps = [(name, flags, w) for name, flags in CONFIGS for w in ("short_long", "many_small")]
    print(table(steps, {"shipped": sglang_calibration("h100-sxm")}))


if __name__ == "__main__":
    main()
