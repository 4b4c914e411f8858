"""The SGLang sim beside lease 1's real SGLang row (triton attention, not SGLang's default FA3 that the H100 fit
read): printed side by side, never asserted. The fit's own error is guarded in test_sglang_calibration.py."""

from __future__ import annotations

import json
from pathlib import Path

from rsi_env.sim.sglang import simulate_sglang_detailed

ROW = Path(__file__).resolve().parents[3] / "data/sglang/0.5.17-h100/many_small_defaults_triton.jsonl"
FIELDS = ("out_tok_per_s", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "e2e_p50", "mean_batch_size",
          "prefix_cache_hit_rate", "kv_cache_usage_peak", "num_gpu_blocks", "num_preemptions")


def test_print_the_sim_beside_the_real_row(capsys):
    row = json.loads(ROW.read_text().splitlines()[0])
    real = row["telemetry"]
    # The row ran on an H100 (its folder's README): the catalog's h100-sxm, SGLang's defaults as resolved.
    tel, plan, _ = simulate_sglang_detailed({}, row["model"], "h100-sxm", row["workload"])
    assert tel.ok, tel.error
    with capsys.disabled():
        print(f"\nSGLang 0.5.17, {row['model']}, {row['workload']}: real (H100, triton attention) vs sim "
              f"({tel.calibration}, fitted on FA3 rows)")
        print(f"  resolved: real max_total_num_tokens {row['resolved']['max_total_num_tokens']}, "
              f"sim {plan.max_total_num_tokens}; mem_fraction_static real {row['resolved']['mem_fraction_static']}, "
              f"sim {plan.mem_fraction_static}")
        for f in FIELDS:
            r, s = real[f], getattr(tel, f)
            print(f"  {f:22s} real {r:12.5g}  sim {s:12.5g}  sim/real {s / r if r else float('nan'):6.3f}")
