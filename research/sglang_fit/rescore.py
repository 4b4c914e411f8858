"""The SGLang sim as it stands, re-run on an evaluation plan's configurations, reported beside their real rows.

    python3 research/sglang_fit/rescore.py [--plan configs/eval/batching_sglang_h100.yaml] [--calibration FILE]

An evaluation's candidates file keeps the sim's telemetry from when it was searched; after a change to the SGLang
sim (or its calibration) this re-simulates the same configurations, workloads and chip and prints the evaluation's
own report (`rsi_env.evaluate.report`) on that telemetry: each workload's SLO-adjusted objective on sim and real, and
each configuration's score on both, so the sim's ranking of what was measured can be read against the real one.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

from rsi_env.engine.workload import Workload
from rsi_env.evaluate.plan import load_plan
from rsi_env.evaluate.promote import load_candidates
from rsi_env.evaluate.report import build_report, render_markdown
from rsi_env.sim.sglang import simulate_sglang_detailed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", type=Path, default=Path("configs/eval/batching_sglang_h100.yaml"))
    ap.add_argument("--calibration", help="a calibration file (default: the chip's SGLang calibration)")
    args = ap.parse_args()
    plan = load_plan(args.plan)
    doc = copy.deepcopy(load_candidates(plan))
    wls = [Workload.from_dict(w) for w in doc["workloads"]]
    for entry in [doc["defaults"], *doc["candidates"], *doc.get("probes", [])]:
        tels = [simulate_sglang_detailed(entry["flags"], doc["model"], doc["hardware"], w,
                                         calibration=args.calibration)[0] for w in wls]
        entry["sim"] = [t.to_dict() for t in tels]
        doc["calibration"] = tels[0].calibration
    print(render_markdown(build_report(plan, doc)))


if __name__ == "__main__":
    main()
