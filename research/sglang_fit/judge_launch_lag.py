"""research/plans/sglang_launch_lag.md's rules: the shipped calibration against the same with ``launch_lag`` 1.

    git apply research/sglang_fit/launch_lag.patch && python3 research/sglang_fit/judge_launch_lag.py; git apply -R ...

Rule 1: on the held-out many_small rows of leases 10-14 whose real TTFT p50 is under 100 ms, TTFT p50 MAPE at least 3
points lower. Rule 2: on each held-out set of heldout-all.txt, throughput, TTFT p50 and TPOT p50 MAPE each no more
than 0.5 points worse. Rule 3 (the pick) is `pick.py`'s, run apart.
"""

from __future__ import annotations

from closed_fit import heldout_sets

from rsi_env.calibrate.report import mapes
from rsi_env.calibrate.score import evaluate
from rsi_env.engine.hardware import load_hardware
from rsi_env.sim.sglang.simulate import sglang_calibration

METRICS = ("out_tok_per_s_mape", "ttft_p50_mape", "tpot_p50_mape")


def main() -> None:
    hw = load_hardware("h100-sxm")
    shipped = sglang_calibration(hw.name)
    cals = {"shipped": shipped, "lag 1": shipped.with_coefficients({"launch_lag": 1.0})}
    sets = heldout_sets()
    low = [s for v in sets.values() for s in v if s.workload.name == "many_small" and s.real.ttft_p50 < 0.1]
    verdicts = []
    for i, (name, samples) in enumerate({"rule 1: many_small, TTFT p50 < 100 ms": low, **sets}.items()):
        errs = {label: evaluate(samples, cal, hw) for label, cal in cals.items()}
        for label, e in errs.items():
            print(f"{name:38s} {label:8s} n={e['n']:2d} {mapes(e)}")
        a, b = errs["shipped"], errs["lag 1"]
        if i == 0:
            ok = 100 * b["ttft_p50_mape"] <= 100 * a["ttft_p50_mape"] - 3.0
            verdicts.append(f"rule 1: TTFT p50 {100 * a['ttft_p50_mape']:.1f} -> {100 * b['ttft_p50_mape']:.1f} % "
                            f"(needs -3 pts): {'met' if ok else 'NOT met'}")
        else:
            worse = [m for m in METRICS if 100 * b[m] > 100 * a[m] + 0.5]
            verdicts.append(f"rule 2, {name}: {'met' if not worse else 'NOT met (' + ', '.join(worse) + ')'}")
    print("\n" + "\n".join(verdicts))


if __name__ == "__main__":
    main()
