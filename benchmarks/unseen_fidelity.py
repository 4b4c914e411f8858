"""The simulator against real measurements no calibration has seen, in two sets.

- ``batching``: `data/eval/batching_h200/real.jsonl`, 8 configurations of `RSI/Batching-v0` (Llama-3.1-8B on
  an H200, vLLM 0.26.0) measured on the task's own workloads at reset seed 1000 (closed loops of 256 users):
  16 measurements.
- ``heldout``: `data/measurements/h200x2-vllm0.26/heldout_lease4.jsonl`, 6 configurations measured for this
  purpose and never given to `rsi-env calibrate` (Llama-3.1-8B, Qwen2.5-7B, Mistral-7B, Qwen3-30B-A3B; flags
  the searches vary) on the calibration workloads: 42 measurements.

This prints, for each set and each calibration given (default: the shipped one), the MAPE of throughput, TTFT
and TPOT p50 and the Spearman correlation of configurations per (model, workload), the same numbers `rsi-env
calibrate` reports for its held-out split.

``python benchmarks/unseen_fidelity.py [CALIBRATION.yaml ...]``
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from rsi_env.engine.hardware import load_hardware
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Workload
from rsi_env.sim.calibration import Calibration, load_calibration
from rsi_env.sim.fit import Sample, evaluate, load_samples

ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT / "data" / "eval" / "batching_h200"
CANDIDATES = ROOT / "configs" / "eval" / "batching_h200.candidates.json"
HELDOUT = ROOT / "data" / "measurements" / "h200x2-vllm0.26" / "heldout_lease4.jsonl"


def unseen_samples() -> list[Sample]:
    doc = json.loads(CANDIDATES.read_text())
    workloads = [Workload.from_dict(w) for w in doc["workloads"]]
    out = []
    for line in (EVAL / "real.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("error"):
            continue
        for w, tel in zip(workloads, row["telemetry"], strict=True):
            real = Telemetry.from_dict(tel)
            if real.ok:
                out.append(Sample(doc["model"], row["flags"], w, real, int(real.num_gpu_blocks), "0.26",
                                  float(row.get("startup_s", 0.0))))
    return out


def main(argv: list[str]) -> int:
    hw = load_hardware("h200")
    sets = {"batching": unseen_samples(), "heldout": load_samples([HELDOUT])}
    cals = [Calibration.from_dict(yaml.safe_load(Path(p).read_text())) for p in argv] or [
        load_calibration("h200", "0.26")]
    for name, samples in sets.items():
        for cal in cals:
            e = evaluate(samples, cal, hw)
            print(json.dumps({"set": name, "calibration": cal.id, "n": e["n"], "failed_in_sim": e["n_failed_in_sim"],
                              **{k: round(v, 4) for k, v in e.items() if k.endswith("_mape") and v is not None},
                              "spearman": e["spearman"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
