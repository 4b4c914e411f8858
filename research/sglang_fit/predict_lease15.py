"""Lease 15's rows as the shipped calibration predicts them, before the lease.

    python3 research/sglang_fit/predict_lease15.py > research/sglang_fit/predictions-lease15.md

research/plans/sglang_lease15.md's steps (`tools/gpu/sglang_lease9.sh`): g1-g3, ``cuda_graph_max_bs`` 32 at three
caps on running requests (training), x1 (held out), and lease 13's e1-e4 again for reference (held out, measured
there), each on Batching-v0's two closed-loop workloads. The shipped calibration has ``uncaptured_per_req_s`` at 0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from predict_lease14 import table

from rsi_env.sim.sglang.simulate import sglang_calibration

HERE = Path(__file__).resolve().parent
# The steps by name, as lease15/candidates.json holds them for the scripts that read lease 15's rows (s2 left out:
# lease 14's, not predicted here).
CONFIGS: list[tuple[str, dict[str, Any]]] = [
    (c["name"], c["flags"]) for c in json.loads((HERE / "lease15/candidates.json").read_text())["candidates"]
    if c["name"] != "s2"]


def main() -> None:
    steps = [(name, flags, w) for name, flags in CONFIGS for w in ("short_long", "many_small")]
    print(table(steps, {"shipped": sglang_calibration("h100-sxm")}))


if __name__ == "__main__":
    main()
