"""The host stage alone, moved to the host of one lease: fitted on one pass of its runs, judged on the other.

The seventeenth lease (the one-H200 host kind, `data/measurements/h200-vllm0.26/heldout_campaign17.jsonl`) ran five
Llama-3.1-8B configurations twice, in two passes; its machine ran the engine's CPU side slower than the hosts the
shipped calibration's host stage was fitted on (`short_long`'s defaults at a TPOT p50 of 8.2-9.4 ms, against
6.7-6.8 ms on the thirteenth lease). This writes the first pass's rows to a file (what a user would give), runs
`rsi-env calibrate host` on it alone (`run_host_calibration`: the shipped calibration's `HOST`
terms refitted, every GPU and model term kept), and prints the error of the shipped calibration and of the
refitted one on the second pass (runs no fit saw, of the same configurations on the same machine), and on the
fifteenth lease's runs of the same configurations (another machine of the same kind, faster on the CPU side):
what a host stage buys on its own host and what it costs on another. Then the same from a single configuration
(the first pass's defaults), the smallest probe a user might try.

``python benchmarks/host_stage_transfer.py [--max-nfev N]`` (default 60; about two minutes on one core).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from rsi_env.calibrate.host import HOST
from rsi_env.calibrate.samples import samples_from_rows
from rsi_env.calibrate.score import evaluate
from rsi_env.calibrate.stages import run_host_calibration
from rsi_env.engine.hardware import load_hardware
from rsi_env.evaluate.fidelity import passes
from rsi_env.sim.calibration import Calibration, load_calibration

ROOT = Path(__file__).resolve().parents[1]
LEASE15 = ROOT / "data" / "measurements" / "h200-vllm0.26" / "heldout_campaign15.jsonl"
LEASE17 = ROOT / "data" / "measurements" / "h200-vllm0.26" / "heldout_campaign17.jsonl"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--max-nfev", type=int, default=60)
    args = ap.parse_args(argv)
    hw, shipped = load_hardware("h200"), load_calibration("h200", "0.26")
    first, second = passes([x for x in LEASE17.read_text().splitlines() if x.strip()], key=_run_key)
    defaults = [x for x in first if json.loads(x)["flags"] == {}]
    lease15 = [r for r in map(json.loads, filter(str.strip, LEASE15.read_text().splitlines()))
               if r["model"] == "llama-3.1-8b"]
    sets = {"lease17_pass2": samples_from_rows([json.loads(x) for x in second], "the second pass"),
            "lease15_same_configs": samples_from_rows(lease15, str(LEASE15))}
    before = {name: evaluate(samples, shipped, hw) for name, samples in sets.items()}
    with tempfile.TemporaryDirectory() as tmp:
        for probe_name, rows in (("lease17_pass1 (5 configurations)", first), ("lease17_pass1 defaults only", defaults)):
            probe = Path(tmp) / "probe.jsonl"
            probe.write_text("\n".join(rows) + "\n")
            rep = run_host_calibration("h200", [str(probe)], base=shipped, max_nfev=args.max_nfev)
            moved = Calibration.from_dict(rep["calibration"])
            print(json.dumps({"host_stage_from": probe_name, "runs": len(rows), "fit_s": rep["fit_seconds"],
                              "calibration": moved.id,
                              "terms": {n: [round(getattr(shipped, n), 7), round(getattr(moved, n), 7)] for n in HOST}}))
            for name, samples in sets.items():
                for label, e in (("shipped", before[name]), ("host_stage", evaluate(samples, moved, hw))):
                    print(json.dumps({"host_stage_from": probe_name, "set": name, "n": e["n"], "calibration": label,
                                      **{k: round(v, 4) for k, v in e.items()
                                         if k in ("out_tok_per_s_mape", "ttft_p50_mape", "tpot_p50_mape")},
                                      "spearman": {k: v if v is None else round(v, 3) for k, v in e["spearman"].items()}}))
    return 0


def _run_key(line: str) -> tuple[str, str, str]:
    """A row's model, flags and workload: the same key in both passes of a lease."""
    row = json.loads(line)
    return row["model"], json.dumps(row["flags"], sort_keys=True), row["workload"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
