"""SGLang's per-layer launch cost of a decode pass above the largest CUDA graph, read from SGLang's every-pass logs.

    python3 research/sglang_fit/launch_layer.py [ROWS.jsonl ...] [--write]

research/plans/sglang_eager_launch.md, fixed before this ran: for each bin of 32 running requests above the graph in
the every-pass rows (lease 15's p160 and p32: short_long, ``decode_log_interval`` 1), the real median decode pass
less the shipped sim's median of the same bin (`eager_passes.binned`); the median of those differences over the
model's layers is added to the shipped ``uncaptured_layer_s``. Every other coefficient stays the shipped
calibration's. The sim prices such a pass as its CPU side (`rsi_env.sim.cost.StepCost.combine`: the launches plus
the scheduler's own work) wherever that is the slower side, which it is in every bin read here, so the difference is
the launches' shortfall. ``--write``: research/sglang_fit/h100-sxm-sglang-0.5-launch.yaml.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
from pathlib import Path
from typing import Any

from eager_passes import binned
from passes import real_passes, sim_passes

from rsi_env.calibrate.report import fitted_at, named
from rsi_env.engine.model import load_model
from rsi_env.engine.workload import Workload
from rsi_env.sim.calibration import Calibration
from rsi_env.sim.sglang.simulate import sglang_calibration

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LEASE15 = ROOT / "data/sglang/0.5.17-h100/lease15"
ROWS = [LEASE15 / "call1/rows.jsonl", LEASE15 / "call2/rows.jsonl"]


def shortfalls(rows: list[dict[str, Any]], calibration: Calibration, show: bool = True) -> list[float]:
    """Per bin of 32 running requests above the graph in the every-pass ``rows``: the real median decode pass less
    the sim's median of the same bin under ``calibration``, in seconds."""
    workloads = {w["name"]: Workload.from_dict(w)
                 for w in json.loads((HERE / "eager_search/candidates.json").read_text())["workloads"]}
    logged = [(r, got) for r in rows if (got := real_passes([r], r["flags"], r["workload"])) is not None]
    diffs = []
    for r, got in logged:
        graph_at = r["resolved"]["cuda_graph_max_bs"]
        real = binned(got, 32, graph_at)
        sim = binned(sim_passes(r["flags"], r["model"], r["hardware"], workloads[r["workload"]],
                                calibration), 32, graph_at)
        for key in sorted(k for k in real if k[1] == "e" and k in sim):
            diffs.append(real[key] - sim[key])
            if show:
                print(f"{json.dumps(r['flags'])} running {key[0]:3d}+: real {1e3 * real[key]:5.1f} ms, "
                      f"sim {1e3 * sim[key]:5.1f} ms, short by {1e3 * diffs[-1]:+5.2f} ms")
    return diffs


def machine_layer(rows: list[dict[str, Any]], base: Calibration | None = None,
                  show: bool = True) -> tuple[float, list[float]]:
    """``base``'s (else the chip's shipped calibration's) ``uncaptured_layer_s`` plus the median of `shortfalls` under
    it over the model's layers (the launch cost per layer of the machine that made the every-pass ``rows``), and the
    shortfalls."""
    shipped = base or sglang_calibration(rows[0]["hardware"])
    diffs = shortfalls(rows, shipped, show)
    layers = load_model(rows[0]["model"]).num_layers
    short = statistics.median(diffs)
    value = shipped.uncaptured_layer_s + short / layers
    if show:
        print(f"median shortfall {1e3 * short:.2f} ms over {len(diffs)} bins / {layers} layers: uncaptured_layer_s "
              f"{shipped.uncaptured_layer_s:.4g} -> {value:.4g}")
    return value, diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="*", type=Path, default=ROWS)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    rows = [json.loads(line) for f in args.rows for line in f.read_text().splitlines() if line.strip()]
    hw = rows[0]["hardware"]
    shipped = sglang_calibration(hw)
    value, diffs = machine_layer(rows)
    if args.write:
        files = [str(f.resolve().relative_to(ROOT)) for f in args.rows]
        digest = hashlib.sha256("".join(f.read_text() for f in args.rows).encode()).hexdigest()[:12]
        cal = named(shipped.with_coefficients({"uncaptured_layer_s": value}), digest, {
            "fitted": fitted_at(), "procedure": "research/sglang_fit/launch_layer.py (research/plans/"
            "sglang_eager_launch.md): uncaptured_layer_s read from SGLang's every-pass logs, every other coefficient "
            f"the shipped calibration's ({shipped.id})",
            "terms": ["uncaptured_layer_s"], "measurements": files, "measurements_sha256_12": digest,
            "parent": shipped.id, "parent_provenance": shipped.provenance,
            "bins": len(diffs), "median_shortfall_s": statistics.median(diffs)})
        out = HERE / f"{hw}-{cal.engine_version}-launch.yaml"
        cal.save(out)
        print(f"wrote {out.relative_to(ROOT)} ({cal.id})")


if __name__ == "__main__":
    main()
