"""How much the real engine itself moves between two measurements of the same configuration: the noise floor.

vLLM's defaults on Llama-3.1-8B were measured on one H200 host (``data/measurements/h200-vllm0.26/llama8b.jsonl``,
first lease) and again, with the same workload files and seeds, on a two-H200 host a session later
(``data/noise/h200x2_defaults_repeat_summary.jsonl``: the driver's per-workload summary lines; the
full rows of that run did not come back from the GPU machine). This prints, per workload, the second run's
difference from the first for throughput, TTFT p50 and TPOT p50 — the error a perfect simulator would still
show against one real measurement.

``python benchmarks/repeat_spread.py``
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST = ROOT / "data" / "measurements" / "h200-vllm0.26" / "llama8b.jsonl"
SECOND = ROOT / "data" / "noise" / "h200x2_defaults_repeat_summary.jsonl"
METRICS = ("out_tok_per_s", "ttft_p50", "tpot_p50")


def main() -> None:
    first = {}
    for line in FIRST.read_text().splitlines():
        row = json.loads(line)
        if row["model"] == "llama-3.1-8b" and not row["flags"]:
            first[row["workload"]] = row["telemetry"]
    print(f"{'workload':<20}" + "".join(f"{m:>16}" for m in METRICS))
    spread: dict[str, list[float]] = {m: [] for m in METRICS}
    for line in SECOND.read_text().splitlines():
        row = json.loads(line)
        if "workload" not in row or row["workload"] not in first:
            continue
        a = first[row["workload"]]
        cells = []
        for m in METRICS:
            d = row[m] / a[m] - 1.0
            spread[m].append(abs(d))
            cells.append(f"{d:+15.1%} ")
        print(f"{row['workload']:<20}" + "".join(cells))
    print(f"{'mean |difference|':<20}" + "".join(f"{sum(v) / len(v):15.1%} " for v in spread.values()))


if __name__ == "__main__":
    main()
