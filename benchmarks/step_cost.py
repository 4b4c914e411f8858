"""The step-cost model on the real engine's own steps: each group of alike real steps, priced by `StepCost`.

End-to-end errors mix the step cost with the queueing it drives (a step a little too slow lets the batch grow,
which slows every later step). This takes the queueing out: every real row whose step trace says what each step
ran (its prompt requests and tokens and its decode requests: vLLM's iteration details, recorded since the seventh
lease) is cut into groups of alike steps — by how vLLM ran them, one full CUDA graph, piecewise graphs or none,
by decode requests, and by how the next step ran, whose launches share the gap under async scheduling
(`rsi_env.calibrate.step_groups`) — and each group's mean composition is priced by the simulator's cost model and set
beside the group's median real time. Per model,
CUDA-graph mode and decode-request bin it prints the steps' median real and priced times (each group weighted
by its steps) and the median ratio.

``python benchmarks/step_cost.py [CALIBRATION.yaml] [ROWS.jsonl ...]`` (default: the shipped calibration, the
seventh lease's rows, training and held out, and the eighth lease's).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import yaml

from rsi_env.calibrate.step_groups import DECODE_BINS, decode_bin, price, step_groups, weighted_median
from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import load_hardware
from rsi_env.engine.model import load_model
from rsi_env.sim.calibration import Calibration, load_calibration
from rsi_env.sim.cost import GRAPH_MODES, StepCost

ROOT = Path(__file__).resolve().parents[1]
ROWS = [ROOT / "data" / "measurements" / "h200x2-vllm0.26" / f
        for f in ("campaign7.jsonl", "heldout_campaign7.jsonl", "campaign8.jsonl")]
MODE_NAMES = {code: name.lower() for name, code in GRAPH_MODES.items()}


def main(argv: list[str]) -> int:
    cal = load_calibration("h200", "0.26")
    if argv and argv[0].endswith(".yaml"):
        cal = Calibration.from_dict(yaml.safe_load(Path(argv[0]).read_text()))
        argv = argv[1:]
    table: dict[tuple[str, str, int], list[tuple[float, float, int]]] = defaultdict(list)
    for p in [Path(a) for a in argv] or ROWS:
        for line in filter(str.strip, p.read_text().splitlines()):
            row = json.loads(line)
            if row["telemetry"].get("error"):
                continue
            m, hw = load_model(row["model"]), load_hardware(row["hardware"])
            cost = StepCost(m, hw, EngineConfig.from_dict(row["flags"]).resolve(m, hw, row["vllm_version"]), cal)
            for g in step_groups(row):
                table[(row["model"], MODE_NAMES[g.mode], decode_bin(g.decode_reqs))].append(
                    (g.real_s, price(cost, g), g.n))
    print(f"calibration {cal.id}")
    for (model, mode, lo), v in sorted(table.items()):
        a = np.asarray(v)
        n = a[:, 2]
        hi = dict(DECODE_BINS)[lo]
        print(json.dumps({"model": model, "graph": mode, "decode_requests": f"{lo}-{min(hi, 2048) - 1}",
                          "steps": int(n.sum()), "groups": len(v),
                          "real_ms": round(weighted_median(a[:, 0], n) * 1e3, 1),
                          "sim_ms": round(weighted_median(a[:, 1], n) * 1e3, 1),
                          "sim_over_real": round(weighted_median(a[:, 1] / a[:, 0], n), 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
