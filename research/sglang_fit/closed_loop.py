"""A refit of SGLang's H100 coefficients with the Batching task's closed-loop rows, judged on rows it never saw.

    python3 research/sglang_fit/closed_loop.py [--max-nfev 12] [--write]

Lease 2's rows are open loops, most of them below the engine's capacity: their throughput is the offered load, and
the fit learnt little about a decode pass at 100-230 running requests. Lease 4's rows (data/eval/batching_sglang_h100:
a closed loop of 256 users) are that regime. Chosen before this fit: `defaults` and `c1` of lease 4 train, beside
lease 2's training rows; `c2` of lease 4 and lease 2's held-out configurations (h1-h3) stay held out. Prints the
errors of the shipped and the refitted coefficients on all four sets, then the Batching task's score of each lease-4
configuration on sim (both calibrations) and on real: whether the sim would rank them as the real engine did.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import yaml

from rsi_env.calibrate.report import mapes
from rsi_env.calibrate.samples import Sample, load_samples, samples_from_rows
from rsi_env.calibrate.score import evaluate
from rsi_env.calibrate.timing import fit_terms
from rsi_env.engine.hardware import load_hardware
from rsi_env.engine.task import load_task
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Workload
from rsi_env.reward.objective import score
from rsi_env.sim.calibration import Calibration
from rsi_env.sim.sglang import simulate_sglang_detailed
from rsi_env.sim.sglang.simulate import sglang_calibration

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TERMS = ("mm_eff", "mm_half_tokens", "bw_eff", "attn_eff", "kv_bw_eff", "step_s", "per_req_s", "piecewise_layer_s",
         "uncaptured_layer_s", "cpu_step_s", "cpu_per_req_s", "cpu_per_new_req_s", "frontend_s")
EVAL = "batching_sglang_h100"
CLOSED_TRAIN, CLOSED_HELD = ("defaults", "c1"), ("c2",)


def driver_rows(line: dict[str, Any], doc: dict[str, Any]) -> list[dict[str, Any]]:
    """A promotion's line (``real.jsonl``, its workloads' telemetry in ``doc``'s order) as driver-form lines, one per
    workload; none for a failed measurement."""
    if line.get("error"):
        return []
    return [{"model": doc["model"], "flags": line["flags"], "workload_spec": w, "telemetry": tel,
             "sglang_version": line["engine_version"].removeprefix("sglang-"), "startup_s": line["startup_s"],
             "resolved": {"max_total_num_tokens": tel.get("num_gpu_blocks") or 0}}
            for w, tel in zip(doc["workloads"], line["telemetry"], strict=True)]


def closed_loop_rows(names: tuple[str, ...], evaluation: str = EVAL) -> list[dict[str, Any]]:
    """A two-tier evaluation's real rows of ``names``, one driver-form line per (configuration, workload)."""
    doc = json.loads((ROOT / f"configs/eval/{evaluation}.candidates.json").read_text())
    out = []
    for line in (ROOT / f"data/eval/{evaluation}/real.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["name"] in names:
            out += driver_rows(r, doc)
    return out


def ranking(cal: Calibration) -> dict[str, dict[str, float]]:
    """The Batching task's score (%, over SGLang's defaults) of each measured lease-4 configuration, sim and real."""
    doc = json.loads((ROOT / f"configs/eval/{EVAL}.candidates.json").read_text())
    task = load_task(doc["env"])
    real = {json.loads(x)["name"]: json.loads(x) for x in (ROOT / f"data/eval/{EVAL}/real.jsonl").read_text().split("\n")
            if x}
    sim = {}
    for name, r in real.items():
        sim[name] = [simulate_sglang_detailed(r["flags"], doc["model"], doc["hardware"], Workload.from_dict(w),
                                             calibration=cal)[0] for w in doc["workloads"]]
    rt = {n: [Telemetry.from_dict(t) for t in r["telemetry"]] for n, r in real.items()}
    pct = lambda x: 100.0 * math.expm1(x)  # noqa: E731
    return {n: {"sim": pct(score(sim[n], sim["defaults"], task)), "real": pct(score(rt[n], rt["defaults"], task))}
            for n in real}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-nfev", type=int, default=12)
    ap.add_argument("--write", type=Path, help="save the refitted calibration here")
    args = ap.parse_args()
    roles = {c["name"]: c["role"] for c in yaml.safe_load((HERE / "configs.yaml").read_text())["configs"]}
    lease2 = ROOT / "data/sglang/0.5.17-h100/lease2"
    files = {n: lease2 / f"{n}.jsonl" for n in roles if (lease2 / f"{n}.jsonl").exists()}
    sets: dict[str, list[Sample]] = {
        "open_train": load_samples([files[n] for n in files if roles[n] in ("repeat", "fit", "gauges")]),
        "open_held": load_samples([files[n] for n in files if roles[n] == "held_out"]),
        "closed_train": samples_from_rows(closed_loop_rows(CLOSED_TRAIN)),
        "closed_held": samples_from_rows(closed_loop_rows(CLOSED_HELD)),
    }
    hw = load_hardware("h100-sxm")
    shipped = sglang_calibration(hw.name)
    refit = fit_terms(sets["open_train"] + sets["closed_train"], hw, shipped, TERMS, args.max_nfev)
    for label, cal in (("shipped", shipped), ("refit", refit)):
        for part, s in sets.items():
            print(f"{label:8s} {part:13s} n={len(s):2d} {mapes(evaluate(s, cal, hw))}")
        print(f"{label:8s} Batching scores (sim / real, %): "
              + ", ".join(f"{n} {v['sim']:+.1f} / {v['real']:+.1f}" for n, v in ranking(cal).items()))
    for t in TERMS:
        print(f"  {t:20s} {getattr(shipped, t):12.4g} -> {getattr(refit, t):12.4g}")
    if args.write:
        refit.save(args.write)
        print(f"wrote {args.write}")


if __name__ == "__main__":
    main()
