"""The H100's SGLang calibration read on the H200's spec ("the transfer"): a prediction for the H200 no fit has seen.

    python3 research/sglang_fit/transfer_h200.py [--write]

SGLang's fitted coefficients are efficiencies against the chip's peaks (``mm_eff``, ``bw_eff``, ``attn_eff``,
``kv_bw_eff``, ``kv_shared_read``) and times of the host and the launches (``step_s``, ``per_req_s``, the ``cpu_*``
terms, ``uncaptured_layer_s``, ``frontend_s``), none of them the H100's bandwidth or FLOPs. The same numbers priced on
the H200's spec (its bandwidth and memory; its compute is the H100's) are the transfer. Without it the SGLang sim on
the H200 falls back to vLLM's H200 coefficients (`sglang_calibration`).

Prints, for lease 16's steps (research/plans/sglang_lease16_h200.md) on RSI/Batching-v0's two workloads, the
transfer's prediction beside the fallback's (throughput, TTFT p50, TPOT p50) and the H100's own; written before the
lease, kept as predictions-lease16-h200.txt. ``--write``: research/sglang_fit/h200-sglang-0.5-transfer.yaml.
``--earlier``: the transfer and the fallback against the H200 rows already in the repo (data/eval/
batching_sglang_h100_on_h200: SGLang's triton attention, the collector live, so under no rule of the plan).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from rsi_env.calibrate.report import fitted_at, named
from rsi_env.engine.workload import Workload
from rsi_env.sim.calibration import Calibration
from rsi_env.sim.sglang import simulate_sglang_detailed
from rsi_env.sim.sglang.simulate import sglang_calibration

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = HERE / "h200-sglang-0.5-transfer.yaml"
EARLIER = (ROOT / "data/eval/batching_sglang_h100_on_h200/real.jsonl",
           ROOT / "configs/eval/batching_sglang_h100_on_h200.candidates.json")
STEPS = HERE / "lease16/candidates.json"  # the defaults, h5 and e1 by name; p32 is short_long at graphs to 32


def transfer(source: str = "h100-sxm", target: str = "h200") -> Calibration:
    """``source``'s SGLang calibration with every coefficient kept, priced on ``target``."""
    base = sglang_calibration(source)
    return named(replace(base, hardware=target), base.id.rsplit("-", 1)[-1], {
        "fitted": fitted_at(), "procedure": "research/sglang_fit/transfer_h200.py: the H100's SGLang calibration "
        f"({base.id}) priced on the {target}'s spec, no coefficient fitted on the {target}",
        "parent": base.id, "parent_provenance": base.provenance})


def earlier(cals: dict[str, Calibration]) -> None:
    """Each of `EARLIER`'s promoted rows: its KV pool and throughput, real beside each calibration's."""
    rows, candidates = EARLIER
    doc = json.loads(candidates.read_text())
    workloads = {w["name"]: Workload.from_dict(w) for w in doc["workloads"]}
    print(f"\n{rows.relative_to(ROOT)}: KV pool (tokens) and throughput (tok/s), real | " + " | ".join(cals))
    for line in rows.read_text().splitlines():
        r = json.loads(line)
        for t, name in zip(r["telemetry"], r["workloads"], strict=True):
            sims = [simulate_sglang_detailed(r["flags"], doc["model"], "h200", workloads[name], calibration=c)[0]
                    for c in cals.values()]
            print(f"  {r['name']:8s} {name:11s} pool {t['num_gpu_blocks']:,} | {sims[0].num_gpu_blocks:,}; "
                  f"tok/s {t['out_tok_per_s']:,.0f} | " + " | ".join(
                      f"{x.out_tok_per_s:,.0f} ({100 * (x.out_tok_per_s / t['out_tok_per_s'] - 1):+.1f} %)"
                      for x in sims))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--earlier", action="store_true")
    args = ap.parse_args()
    cal = transfer()
    doc = json.loads(STEPS.read_text())
    steps = {c["name"]: c["flags"] for c in [doc["defaults"], *doc["candidates"]]} | {"p32": {"cuda_graph_max_bs": 32}}
    cals = {"H100 shipped": ("h100-sxm", sglang_calibration("h100-sxm")), "H200 transfer": ("h200", cal),
            "H200 fallback": ("h200", sglang_calibration("h200"))}
    print(f"{'':8s} {'workload':11s} " + " ".join(f"{k:>24s}" for k in cals) + "   (tok/s, TTFT p50 ms, TPOT p50 ms)")
    for name, flags in steps.items():
        for w in doc["workloads"]:
            if name == "p32" and w["name"] != "short_long":
                continue
            cells = []
            for hw, c in cals.values():
                t = simulate_sglang_detailed(flags, doc["model"], hw, Workload.from_dict(w), calibration=c)[0]
                cells.append(f"{t.out_tok_per_s:9,.0f} {1e3 * t.ttft_p50:6.1f} {1e3 * t.tpot_p50:5.1f}")
            print(f"{name:8s} {w['name']:11s} " + " ".join(f"{c:>24s}" for c in cells))
    if args.earlier:
        earlier({"transfer": cal, "fallback": cals["H200 fallback"][1]})
    if args.write:
        cal.save(OUT)
        print(f"wrote {OUT.relative_to(ROOT)} ({cal.id})")


if __name__ == "__main__":
    main()
