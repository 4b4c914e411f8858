"""SGLang's own coefficients for a chip, fitted on lease 2's fit rows and judged on the held-out configurations
chosen before any fit (configs.yaml's roles), with the product's fit (`rsi_env.calibrate.timing.fit_terms`).

    python3 research/sglang_fit/fit.py [--rows data/sglang/0.5.17-h100/lease2] [--max-nfev 12] [--warm] [--write]

Trains on the `repeat`, `fit` and `gauges` rows (the `backend` row ran another attention kernel than SGLang's
default and is left out), reports the errors before (vLLM's calibration of the chip) and after on both sets, and with
--write saves `rsi_env/catalog/calibration/<hardware>-sglang-0.5.yaml` (fitted on the training rows only: the
held-out rows stay unseen, so the error they give stays the error on configurations the fit never saw). --warm starts
from the chip's SGLang calibration as it stands (itself fitted on the same training rows) instead of the generic
coefficients: a refit after a change to the SGLang sim's model, which moves the terms a little, not from scratch.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import yaml

from rsi_env.calibrate.report import errors, fitted_at, mapes, named
from rsi_env.calibrate.samples import load_samples
from rsi_env.calibrate.score import evaluate
from rsi_env.calibrate.timing import fit_terms
from rsi_env.engine.engines import SGLANG_RELEASE
from rsi_env.engine.hardware import load_hardware
from rsi_env.sim.calibration import Calibration, release_tag
from rsi_env.sim.sglang.simulate import sglang_calibration

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# The timing terms SGLang's passes read on one GPU without eager steps (no tensor parallel, fp8 or MoE here).
TERMS = ("mm_eff", "mm_half_tokens", "bw_eff", "attn_eff", "kv_bw_eff", "step_s", "per_req_s", "piecewise_layer_s",
         "uncaptured_layer_s", "cpu_step_s", "cpu_per_req_s", "cpu_per_new_req_s", "frontend_s")
TRAIN_ROLES = ("repeat", "fit", "gauges")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=Path, default=ROOT / "data/sglang/0.5.17-h100/lease2")
    ap.add_argument("--hardware", default="h100-sxm")
    ap.add_argument("--max-nfev", type=int, default=12)
    ap.add_argument("--warm", action="store_true", help="start from the chip's SGLang calibration")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    roles = {c["name"]: c["role"] for c in yaml.safe_load((HERE / "configs.yaml").read_text())["configs"]}
    files = {n: args.rows / f"{n}.jsonl" for n in roles if (args.rows / f"{n}.jsonl").exists()}
    train_files = sorted(str(f) for n, f in files.items() if roles[n] in TRAIN_ROLES)
    held_files = sorted(str(f) for n, f in files.items() if roles[n] == "held_out")
    train, held = load_samples(train_files), load_samples(held_files)
    hw = load_hardware(args.hardware)
    before = sglang_calibration(hw.name)
    start = before if args.warm else Calibration(hardware=hw.name, engine_version=release_tag(SGLANG_RELEASE))
    t0 = time.perf_counter()
    fitted = fit_terms(train, hw, start, TERMS, args.max_nfev)
    secs = time.perf_counter() - t0
    report = {when: {part: evaluate(s, cal, hw) for part, s in (("train", train), ("held_out", held))}
              for when, cal in (("before", before), ("after", fitted))}
    print(f"{len(train)} training rows, {len(held)} held-out rows; fit {secs:.0f} s; before: {before.id}")
    for when in ("before", "after"):
        for part in ("train", "held_out"):
            print(f"  {when:6s} {part:8s} {mapes(report[when][part])}")
    for t in TERMS:
        print(f"  {t:20s} {getattr(start, t):12.4g} -> {getattr(fitted, t):12.4g}")
    if args.write:
        blob = "".join(Path(f).read_text() for f in train_files)
        digest = hashlib.sha256(blob.encode()).hexdigest()[:12]
        fitted = named(fitted, digest, {
            "fitted": fitted_at(), "procedure": "research/sglang_fit/fit.py (rsi_env.calibrate.timing.fit_terms)",
            "terms": list(TERMS), "measurements": [str(Path(f).relative_to(ROOT)) for f in train_files],
            "measurements_sha256_12": digest, "n_train": len(train), "n_held_out": len(held),
            "held_out_measurements": [str(Path(f).relative_to(ROOT)) for f in held_files],
            "held_out_error": errors(report["after"]["held_out"]), "train_error": errors(report["after"]["train"]),
            "fitted_on": "the training rows only (held-out configurations chosen before the fit)"})
        out = ROOT / f"rsi_env/catalog/calibration/{hw.name}-{fitted.engine_version}.yaml"
        fitted.save(out)
        print(f"wrote {out.relative_to(ROOT)} ({fitted.id})")
    print(json.dumps({w: {p: {k: v for k, v in e.items() if k != "per_sample"} for p, e in d.items()}
                      for w, d in report.items()}, default=str))


if __name__ == "__main__":
    main()
