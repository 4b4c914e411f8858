"""Lease 16's readings (research/plans/sglang_lease16.md): is the eager decode pass's cost the host's, or a form the
sim misses?

    python3 research/sglang_fit/judge_lease16.py
    python3 research/sglang_fit/judge_lease16.py --rows-dir data/sglang/0.5.17-h200/lease16 \
        --base research/sglang_fit/h200-sglang-0.5-transfer.yaml

Written before the lease, as the plan fixes it:

- **The machine's launch cost.** `launch_layer.machine_layer` on this lease's p32 rows (short_long's every-pass log
  at graphs to 32, every call's): the shipped ``uncaptured_layer_s`` plus the median shortfall of the eager passes
  over the model's layers. The machine's calibration is the shipped one with that value, nothing else changed.
- **Host or form.** Under it, each row of h5 and e1 (two starts, two workloads) has a throughput error
  (sim / real - 1). Host's: both configurations' mean absolute error within 5 %. Form wrong: on one workload, h5's and
  e1's signed means more than 10 points apart and of opposite signs. Otherwise neither, said so. Neither rule is
  judged on a configuration measured in one start only.
- Beside them, under no rule: the same errors under the shipped calibration and lease 15's launch candidate
  (h100-sxm-sglang-0.5-launch.yaml); lease 11's h5 under each, with its real throughput beside this lease's (the
  amount the level moves between lent machines); SGLang's own repeat of h5 and e1 against the sim's error on the same
  starts; m96's and passes-frozen's TTFT p50, real and sim (their passes: passes.py).

On an H200 (research/plans/sglang_lease16_h200.md), ``--base`` names the calibration that stands for the shipped one
(the H100's priced on the H200, transfer_h200.py), and the defaults join h5 and e1. The transfer's rule: over the
defaults' and h5's rows, its throughput MAPE within 5 % and below the fallback's (vLLM's H200 coefficients). Lease
11's h5 and lease 15's launch candidate, H100's, are left out there.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from closed_fit import lease11_held_rows, of_configs
from launch_layer import machine_layer
from pick import read_rows
from repeat import loo

from rsi_env.calibrate.samples import Sample, samples_from_rows
from rsi_env.calibrate.score import predict
from rsi_env.engine.hardware import load_hardware
from rsi_env.sim.calibration import Calibration
from rsi_env.sim.sglang.simulate import sglang_calibration

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LEASE16 = ROOT / "data/sglang/0.5.17-h100/lease16"  # call1, call2: the driver's rows
CANDIDATES = HERE / "lease16/candidates.json"  # h5 and e1 by name
NAMES = ("h5", "e1")
CAPTURED = ("defaults", "h5")  # the transfer's rule: configurations whose passes run inside CUDA graphs


def lease16_rows(where: Path) -> list[dict[str, Any]]:
    """Every call's driver rows, in the order measured."""
    return read_rows(sorted(where.glob("call*/rows.jsonl")), {})


def logged(rows: list[dict[str, Any]], workload: str, graphs: int | None = None) -> list[dict[str, Any]]:
    """The every-pass rows (``decode_log_interval`` set) on ``workload``, of graphs to ``graphs`` where given."""
    return [r for r in rows if (r.get("server_arg_overrides") or {}).get("decode_log_interval")
            and graphs in (None, r["flags"].get("cuda_graph_max_bs")) and r["workload"] == workload]


def errors(samples: list[Sample], cal: Calibration) -> list[tuple[Sample, float, float, float]]:
    """Per sample: signed throughput, TTFT p50 and TPOT p50 errors, sim / real - 1."""
    hw = load_hardware(cal.hardware)
    out = []
    for s in samples:
        p = predict(s, cal, hw)
        out.append((s, p.out_tok_per_s / s.real.out_tok_per_s - 1, p.ttft_p50 / s.real.ttft_p50 - 1,
                    p.tpot_p50 / s.real.tpot_p50 - 1))
    return out


def by_workload(errs: list[tuple[Sample, float, float, float]]) -> dict[str, list[float]]:
    """Signed throughput errors per workload."""
    out: dict[str, list[float]] = {}
    for s, thr, _, _ in errs:
        out.setdefault(s.workload.name, []).append(thr)
    return out


def repeated(held: dict[str, list[Sample]], names: tuple[str, ...]) -> bool:
    """Whether each of ``names`` was measured in two starts or more on each workload (the plans read nothing from
    one start)."""
    return all(sum(s.workload.name == w for s in held[n]) >= 2 for n in names for w in ("short_long", "many_small"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows-dir", type=Path, default=LEASE16)
    ap.add_argument("--base", type=Path, help="the calibration standing for the shipped one (default: the chip's)")
    args = ap.parse_args()
    rows = lease16_rows(args.rows_dir)
    p32 = logged(rows, "short_long", 32)
    hw = p32[0]["hardware"]
    shipped = sglang_calibration(hw, args.base) if args.base else sglang_calibration(hw)
    print(f"p32: {len(p32)} every-pass rows on {hw}; base {shipped.id}")
    layer, _ = machine_layer(p32, shipped)
    h100 = hw == "h100-sxm"
    cals = {"machine": shipped.with_coefficients({"uncaptured_layer_s": layer}), "base": shipped,
            **({"launch": sglang_calibration(hw, HERE / "h100-sxm-sglang-0.5-launch.yaml")} if h100 else
               {"fallback": sglang_calibration(hw)})}
    names = NAMES if h100 else ("defaults", *NAMES)
    held = {n: samples_from_rows(of_configs(rows, CANDIDATES, (n,)), f"lease 16's {n}") for n in names}
    h5_flags = next(json.dumps(c["flags"], sort_keys=True) for c in json.loads(CANDIDATES.read_text())["candidates"]
                    if c["name"] == "h5")
    l11_h5 = samples_from_rows([r for r in lease11_held_rows() if json.dumps(r["flags"], sort_keys=True) == h5_flags],
                               "lease 11's h5") if h100 else []

    errs_of = {label: {n: errors(held[n], cal) for n in names} for label, cal in cals.items()}
    print("\nthroughput error (sim / real - 1) per row, and each configuration's mean absolute error:")
    signed: dict[str, dict[str, dict[str, float]]] = {}
    for label, cal in cals.items():
        for n in names:
            errs = errs_of[label][n]
            per = by_workload(errs)
            signed.setdefault(label, {})[n] = {w: statistics.fmean(v) for w, v in per.items()}
            mape = statistics.fmean(abs(e[1]) for e in errs)
            print(f"  {label:8s} {n}: " + "; ".join(f"{w} " + ", ".join(f"{100 * x:+.1f}" for x in v)
                                                   for w, v in per.items()) + f" -> {100 * mape:.1f} %")
            signed[label][n]["mape"] = mape
        if not l11_h5:
            continue
        errs = errors(l11_h5, cal)
        print(f"  {label:8s} lease 11 h5: " + "; ".join(f"{w} " + ", ".join(f"{100 * x:+.1f}" for x in v)
                                                       for w, v in by_workload(errs).items()))

    print("\nh5's real throughput, lease 11 against lease 16 (tok/s):" if l11_h5 else "")
    for w in ("short_long", "many_small"):
        a = [s.real.out_tok_per_s for s in l11_h5 if s.workload.name == w]
        b = [s.real.out_tok_per_s for s in held.get("h5", []) if s.workload.name == w]
        if a and b:
            print(f"  {w:11s} {', '.join(f'{x:,.0f}' for x in a)} | {', '.join(f'{x:,.0f}' for x in b)}: "
                  f"{100 * (statistics.fmean(a) / statistics.fmean(b) - 1):+.1f} %")

    print("\nSGLang's own repeat (each start against the mean of the others) beside the machine calibration's error:")
    for n in names:
        errs = errs_of["machine"][n]
        for w in ("short_long", "many_small"):
            got = [e for e in errs if e[0].workload.name == w]
            if len(got) < 2:
                continue
            cells = []
            for i, (metric, scale) in enumerate((("out_tok_per_s", 1.0), ("ttft_p50", 1e3), ("tpot_p50", 1e3)), 1):
                xs = [getattr(e[0].real, metric) for e in got]
                cells.append(f"{metric} " + ", ".join(f"{scale * x:,.1f}" for x in xs)
                             + f" repeat {100 * statistics.fmean(loo(xs)):.1f} %,"
                             f" sim {100 * statistics.fmean(abs(e[i]) for e in got):.1f} %")
            print(f"  {n} {w:11s} " + "; ".join(cells))

    print("\nmany_small's every-pass starts, TTFT p50 real and sim (base):")
    for r in logged(rows, "many_small"):
        for s, _, ttft, _ in errors(samples_from_rows([r]), shipped):
            print(f"  graphs to {r['resolved']['cuda_graph_max_bs']}: real {1e3 * s.real.ttft_p50:.1f} ms, "
                  f"sim {1e3 * s.real.ttft_p50 * (1 + ttft):.1f} ms ({100 * ttft:+.1f} %)")

    if not h100:
        mape = {k: statistics.fmean(abs(e[1]) for n in CAPTURED for e in errs_of[k][n])
                for k in ("base", "fallback")}
        ok = mape["base"] <= 0.05 and mape["base"] < mape["fallback"]
        print(f"\nthe transfer on {' and '.join(CAPTURED)}: throughput MAPE {100 * mape['base']:.1f} % (fallback "
              f"{100 * mape['fallback']:.1f} %): " + ("not judged: a configuration measured once" if not
                                                      repeated(held, CAPTURED) else "adopted" if ok else "NOT adopted"))
    m = signed["machine"]
    host = all(m[n]["mape"] <= 0.05 for n in NAMES)
    parted = [w for w in ("short_long", "many_small")
              if abs(m["h5"][w] - m["e1"][w]) > 0.10 and m["h5"][w] * m["e1"][w] < 0]
    verdict = ("not judged: a configuration measured once" if not repeated(held, NAMES) else
               "the host's: both within 5 %" if host else
               f"the form is wrong: h5 and e1 part by more than 10 points, opposite ways, on {', '.join(parted)}"
               if parted else "neither: not both within 5 %, and not parted by 10 points opposite ways")
    print(f"\nmachine uncaptured_layer_s {layer:.4g} (shipped {shipped.uncaptured_layer_s:.4g}); "
          f"h5 {100 * m['h5']['mape']:.1f} %, e1 {100 * m['e1']['mape']:.1f} %: {verdict}")


if __name__ == "__main__":
    main()
