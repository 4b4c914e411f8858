"""The SGLang sim as it stands, re-run on an evaluation plan's promoted configurations, beside their real rows.

    python3 research/sglang_fit/rescore.py [--plan configs/eval/batching_sglang_h100.yaml] [--calibration FILE]

An evaluation's candidates file keeps the sim's telemetry from when it was searched; after a change to the SGLang
sim (or its calibration) this says what the sim now predicts for the same configurations, workloads and chip: each
workload's SLO-adjusted objective on sim and real and each configuration's score (log ratio to the defaults, as a
percentage) on both, so the sim's ranking of what was measured can be read against the real one.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from rsi_env.engine.task import load_task
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Workload
from rsi_env.evaluate.plan import load_plan
from rsi_env.evaluate.promote import load_candidates, read_results
from rsi_env.reward.objective import adjusted_value, score
from rsi_env.sim.sglang import simulate_sglang_detailed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", type=Path, default=Path("configs/eval/batching_sglang_h100.yaml"))
    ap.add_argument("--calibration", help="a calibration file (default: the chip's SGLang calibration)")
    args = ap.parse_args()
    plan = load_plan(args.plan)
    doc = load_candidates(plan)
    task = load_task(doc["env"])
    real = {r["name"]: r for r in read_results(plan)}
    wls = [Workload.from_dict(w) for w in doc["workloads"]]

    def sim(flags: dict) -> list[Telemetry]:
        return [simulate_sglang_detailed(flags, doc["model"], doc["hardware"], w, calibration=args.calibration,
                                         slo=w.slo)[0] for w in wls]

    entries = [doc["defaults"], *doc["candidates"]]
    sims = {e["name"]: sim(e["flags"]) for e in entries}
    reals = {n: [Telemetry.from_dict(t) for t in r["telemetry"]] for n, r in real.items() if not r.get("error")}
    pct = lambda x: 100.0 * (math.exp(x) - 1.0) if math.isfinite(x) else x  # noqa: E731
    print(f"{plan.name} on {doc['hardware']}, calibration {sims['defaults'][0].calibration}")
    print(f"{'config':9s} " + " ".join(f"{w.name + ' sim/real (TPOT p50 ms)':>44s}" for w in wls)
          + f" {'score sim':>10s} {'score real':>10s}")
    for e in entries:
        n = e["name"]
        s, r = sims[n], reals.get(n)
        cells = []
        for k in range(len(wls)):
            rs = f"{adjusted_value(r[k], task):7.0f} ({1e3 * r[k].tpot_p50:4.1f})" if r else "      —"
            cells.append(f"{adjusted_value(s[k], task):7.0f} ({1e3 * s[k].tpot_p50:4.1f}) / {rs}")
        rsc = pct(score(r, reals["defaults"], task)) if r and "defaults" in reals else math.nan
        print(f"{n:9s} " + " ".join(f"{c:>44s}" for c in cells)
              + f" {pct(score(s, sims['defaults'], task)):+9.1f}% {rsc:+9.1f}%")


if __name__ == "__main__":
    main()
