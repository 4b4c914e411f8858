"""Real SGLang rows beside the SGLang sim, per configuration and workload, and SGLang's repeat error.

    python3 research/sglang_fit/compare.py [--rows data/sglang/0.5.17-h100/lease2] [--calibration FILE]

Prints each (configuration, workload): real and sim throughput, TTFT p50, TPOT p50 and their ratios, the role of the
configuration (configs.yaml), and the two default runs' differences (SGLang's repeat error on this host).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from rsi_env.sim.sglang import simulate_sglang_detailed

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
METRICS = ("out_tok_per_s", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99")


def load_rows(folder: Path) -> dict[tuple[str, str], dict]:
    """(configuration, workload) -> row, from `<configuration>.jsonl` files."""
    rows = {}
    for f in sorted(folder.glob("*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            rows[(f.stem, r["workload"])] = r
    return rows


def repeat_error(rows: dict, a: str = "defaults_a", b: str = "defaults_b") -> dict[str, dict[str, float]]:
    """Per workload and metric, |b/a - 1| of the two default runs."""
    out: dict[str, dict[str, float]] = {}
    for (cfg, w), ra in rows.items():
        if cfg != a or (b, w) not in rows:
            continue
        rb = rows[(b, w)]
        out[w] = {m: abs(rb["telemetry"][m] / ra["telemetry"][m] - 1.0) for m in METRICS}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=Path, default=ROOT / "data/sglang/0.5.17-h100/lease2")
    ap.add_argument("--calibration", default=None)
    args = ap.parse_args()
    roles = {c["name"]: c["role"] for c in yaml.safe_load((HERE / "configs.yaml").read_text())["configs"]}
    rows = load_rows(args.rows)
    print(f"{'config':16s}{'role':9s}{'workload':20s}{'tok/s real':>11s}{'sim/real':>9s}"
          f"{'ttft50 ms':>10s}{'sim/real':>9s}{'tpot50 ms':>10s}{'sim/real':>9s}{'batch':>7s}{'sim':>7s}")
    for (cfg, w), r in sorted(rows.items(), key=lambda kv: (list(roles).index(kv[0][0]), kv[0][1])):
        real = r["telemetry"]
        tel, _, _ = simulate_sglang_detailed(r["flags"], r["model"], r["hardware"], w, calibration=args.calibration)
        if not tel.ok:
            print(f"{cfg:16s}{roles[cfg]:9s}{w:20s} sim error: {tel.error}")
            continue
        print(f"{cfg:16s}{roles[cfg]:9s}{w:20s}{real['out_tok_per_s']:11.0f}"
              f"{tel.out_tok_per_s / real['out_tok_per_s']:9.3f}{real['ttft_p50'] * 1e3:10.1f}"
              f"{tel.ttft_p50 / real['ttft_p50']:9.3f}{real['tpot_p50'] * 1e3:10.2f}"
              f"{tel.tpot_p50 / real['tpot_p50']:9.3f}{real['mean_batch_size']:7.0f}{tel.mean_batch_size:7.0f}")
    print("\nSGLang's repeat error (|defaults_b / defaults_a - 1|):")
    for w, errs in repeat_error(rows).items():
        print(f"  {w:20s}" + "  ".join(f"{m} {e * 100:5.1f} %" for m, e in errs.items()))


if __name__ == "__main__":
    main()
