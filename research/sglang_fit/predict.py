"""The SGLang sim's predictions for configs.yaml's configurations, written before their rows are measured.

    python3 research/sglang_fit/predict.py --hardware h100-sxm [--calibration FILE] --out predictions-<tag>.json

Each (configuration, workload): the sim's throughput, TTFT p50/p99, TPOT p50/p99 and mean batch.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from rsi_env.sim.sglang import simulate_sglang_detailed

HERE = Path(__file__).resolve().parent
FIELDS = ("out_tok_per_s", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "mean_batch_size", "num_preemptions",
          "prefix_cache_hit_rate")


def predict(hardware: str, calibration: str | None) -> dict:
    spec = yaml.safe_load((HERE / "configs.yaml").read_text())
    out: dict = {}
    for cfg in spec["configs"]:
        for w in cfg.get("workloads", spec["workloads"]):
            tel, _, _ = simulate_sglang_detailed(cfg.get("set", {}), spec["model"], hardware, w,
                                                 calibration=calibration)
            out[f"{cfg['name']}/{w}"] = ({"error": tel.error} if not tel.ok else
                                         {f: getattr(tel, f) for f in FIELDS} | {"calibration": tel.calibration})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hardware", default="h100-sxm")
    ap.add_argument("--calibration", default=None)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.write_text(json.dumps(predict(args.hardware, args.calibration), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
