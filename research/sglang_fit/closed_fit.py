"""SGLang's H100 coefficients fitted with the Batching task's closed loop in training, judged on closed-loop rows no
fit has seen.

    python3 research/sglang_fit/closed_fit.py [--closed lease4|lease10] [--switch [--hold T,...]] [--max-nfev 16]
        [--eager [--small [--shared [--batch-eager]]]] [--write [--name KIND]]

The shipped coefficients were fitted on lease 2's open loops, most below capacity, where throughput is the offered
load: they price a pass of 200-240 running requests 10-15 % fast (the closed loop of 256 users, Batching-v0's load).
Chosen before this fit (research/plans/sglang_lease8.md): lease 2's training rows and lease 4's four configurations
(data/eval/batching_sglang_h100: defaults, c1, c2, c3; a closed loop, 8 rows) train; lease 2's held-out
configurations, lease 7's rows (data/eval/batching_sglang_h100_b: defaults and the re-searched c1, whose flags no fit
has seen) and lease 5's (research/sglang_fit/rows: the defaults, c1, c2 and `mem_fraction_static` 0.95 with every
decode pass logged) are held out. Warm start from the shipped calibration. Prints the errors of both calibrations
on every set; --write saves the refit as a candidate, research/sglang_fit/h100-sxm-sglang-0.5-closed.yaml (not the
catalog's: SGLang's suite ceilings were found with the shipped one, so adopting it means freezing a new suite draw).

`--closed lease10` (research/plans/sglang_lease10.md, set before the lease): the closed-loop training rows are lease
10's instead (batching_sglang_h100_b's defaults and c2, FA3, the driver's collector frozen: lease 4's carry its pause),
its c1 held out beside lease 8's h4-h7; written to research/sglang_fit/h100-sxm-sglang-0.5-frozen.yaml.

`--switch` (with lease 10's rows): ``cpu_switch_per_req_s`` fitted too, the device's wait where a prefill follows a
decode (`rsi_env.sim.sglang.engine`), warm-started at SWITCH0, what SGLang's clock says; written to
research/sglang_fit/h100-sxm-sglang-0.5-switch.yaml. `--hold uncaptured_layer_s,frontend_s` keeps those terms at the
shipped values (no training row decodes above its largest CUDA graph; the switch fit drove both to their bounds);
written to research/sglang_fit/h100-sxm-sglang-0.5-switch-held.yaml.

`--eager` (research/plans/sglang_lease12.md, set before this fit): `--switch` with ``uncaptured_layer_s`` fitted too,
warm-started at the switch-held refit, and two more configurations' rows in training, both of lease 11 (collector
frozen) and both with passes outside any CUDA graph: d's c3 (decode batches above its largest graph) and d's c2
(prefills without chunking). Lease 11's d c1 and h4-h7 and lease 4's rows (c1 and c2 without chunking, c3
decoding above its graphs) are held out beside the others; written to
research/sglang_fit/h100-sxm-sglang-0.5-eager.yaml. Its rows are read from the files `--export` writes (the same
rows, one driver-form line per workload), which its provenance names.

`--small` (research/plans/sglang_lease13.md's addendum, set before this fit): `--eager`'s terms and rows plus lease
13's c2 and c3 of batching_sglang_h100_e (closed loops of 64 and 32 running requests, the collector frozen; both
promotions and the driver's starts) in training, warm-started at the catalog's calibration (the eager refit); lease
13's e1-e4, defaults and c1 and lease 12's promotion held out beside the others; written to
research/sglang_fit/h100-sxm-sglang-0.5-small.yaml. `--shared` (the addendum's third run): ``kv_shared_read``
fitted too (the fraction of a decode pass's repeated reads of a shared cached prefix served without HBM traffic),
warm-started at SHARED0; written to research/sglang_fit/h100-sxm-sglang-0.5-shared.yaml.

`--batch-eager` (research/plans/sglang_lease15.md, set before lease 15): `--shared`'s terms plus
``uncaptured_per_req_s`` (per request of a decode pass above the largest CUDA graph), warm-started at the catalog's
calibration with that term at PER_REQ0; lease 15's g1-g3 (``cuda_graph_max_bs`` 32 at three caps on running requests)
train beside `--shared`'s rows; lease 15's x1, and its e1, e2 and s2 measured again, are held out. Written to
research/sglang_fit/h100-sxm-sglang-0.5-batch-eager.yaml.

`--steady` (research/plans/sglang_first_token.md's candidate 4, set before its fit): with `--small`, lease 17's first
call's many_small starts train a target of their own beside the rows' summaries: each start's steady first-token
wait in decode passes (`steady.py`), weighted STEADY_W; lease 17's second call is printed beside, held out.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from closed_loop import EVAL, TERMS, closed_loop_rows
from pick import flag_names, read_rows
from steady import residuals as steady_residuals
from steady import steady_rows

from rsi_env.calibrate.report import errors, fitted_at, mapes, named
from rsi_env.calibrate.samples import Sample, load_samples, samples_from_rows
from rsi_env.calibrate.score import evaluate
from rsi_env.calibrate.timing import fit_terms
from rsi_env.engine.hardware import load_hardware
from rsi_env.sim.sglang.simulate import sglang_calibration

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LEASE2 = ROOT / "data/sglang/0.5.17-h100/lease2"
LEASE5 = HERE / "rows/lease5-many_small.jsonl"
LEASE8 = ROOT / "data/sglang/0.5.17-h100/lease8/heldout.jsonl"
LEASE10 = ROOT / "data/sglang/0.5.17-h100/lease10/rows.jsonl"
LEASE11 = ROOT / "data/sglang/0.5.17-h100/lease11"
LEASE11_PROMOTIONS = (LEASE11 / "r1.jsonl", LEASE11 / "r2.jsonl")  # batching_sglang_h100_d promoted twice
LEASE12 = ROOT / "data/sglang/0.5.17-h100/lease12/r1.jsonl"  # batching_sglang_h100_e promoted once
LEASE13 = ROOT / "data/sglang/0.5.17-h100/lease13"  # e promoted twice (r2, r3), rows.jsonl the driver's starts
E_CANDIDATES = HERE / "eager_search/candidates.json"  # batching_sglang_h100_e, promoted on leases 12 and 13
LEASE14 = ROOT / "data/sglang/0.5.17-h100/lease14/rows.jsonl"  # the driver's starts, open and closed loops
LEASE15 = ROOT / "data/sglang/0.5.17-h100/lease15"  # three calls of the driver's starts, call1-call3
L15_CANDIDATES = HERE / "lease15/candidates.json"  # lease 15's steps by name (g1-g3, x1, e1-e4, s2)
CLOSED = ROOT / "data/sglang/0.5.17-h100/closed"  # the evaluations' closed-loop rows, one driver-form line per workload
EXPORTS = {"lease4.jsonl": (EVAL, ("defaults", "c1", "c2", "c3")),
           "lease7.jsonl": ("batching_sglang_h100_b", ("defaults", "c1"))}
TRAIN_ROLES = ("repeat", "fit", "gauges")
# The last decode of a run on SGLang's clock less the sim's (13.4 - 9.0 ms: research/sglang_fit/engine_clock.py on
# lease 10's every-pass row) over its ~255 running requests.
SWITCH0 = 4.4e-3 / 255
# Where lease 2's shared_prefix_chat training rows' decode (TPOT p50 12.5 ms) lies between the sim's at
# kv_shared_read 0 (14.06 ms) and 1 (8.39 ms).
SHARED0 = 0.25
# Lease 13's note: e1's and e2's TPOT p50 short by ~20 us per running request above their largest graph (held-out
# rows: the form's scale, not a fitted value).
PER_REQ0 = 1e-5
LEASE17 = ROOT / "data/sglang/0.5.17-h100/lease17"  # call1 trains `--steady`'s target, call2 is held out
# The steady first-token residual's weight: a closed loop's throughput residual's (`timing.residuals`), so that four
# starts pull against the ~40 training rows' summaries.
STEADY_W = 2.0


def lease2_files(train: bool) -> list[str]:
    """Lease 2's rows of the training roles (``train``) or of the held-out configurations."""
    roles = {c["name"]: c["role"] for c in yaml.safe_load((HERE / "configs.yaml").read_text())["configs"]}
    files = {n: LEASE2 / f"{n}.jsonl" for n in roles if (LEASE2 / f"{n}.jsonl").exists()}
    return sorted(str(f) for n, f in files.items() if (roles[n] in TRAIN_ROLES if train else roles[n] == "held_out"))


def of_configs(rows: list[dict[str, Any]], candidates: Path, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """The driver rows of the candidates file's configurations ``names`` (an every-pass log left out)."""
    flags = {k for k, name in flag_names(json.loads(candidates.read_text())).items() if name in names}
    return [r for r in rows if not r.get("server_arg_overrides") and json.dumps(r["flags"], sort_keys=True) in flags]


def lease10(names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Lease 10's rows of batching_sglang_h100_b's configurations ``names``."""
    return of_configs(read_rows([LEASE10], {}), ROOT / "configs/eval/batching_sglang_h100_b.candidates.json", names)


def lease11(names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Lease 11's promotion rows of batching_sglang_h100_d's configurations ``names``, one per (start, workload)."""
    candidates = HERE / "frozen_search/candidates.json"
    return of_configs(read_rows(list(LEASE11_PROMOTIONS), json.loads(candidates.read_text())), candidates, names)


def lease11_held_rows() -> list[dict[str, Any]]:
    """Lease 11's rows of configurations no fit trains on: batching_sglang_h100_d's c1, lease 8's h4-h7 frozen (its
    defaults' rows are neither: their configuration trains)."""
    return lease11(("c1",)) + [r for r in read_rows([LEASE11 / "rows.jsonl"], {}) if not r.get("server_arg_overrides")]


def lease13(names: tuple[str, ...], others: bool = False) -> list[dict[str, Any]]:
    """Lease 13's rows of batching_sglang_h100_e's configurations ``names`` (its promotions' and the driver's), with
    ``others`` also the driver's rows of configurations not in that plan (e1-e4)."""
    doc = json.loads(E_CANDIDATES.read_text())
    rows = read_rows([LEASE13 / "r2.jsonl", LEASE13 / "r3.jsonl", LEASE13 / "rows.jsonl"], doc)
    plan = set(flag_names(doc))
    return of_configs(rows, E_CANDIDATES, names) + [
        r for r in rows if others and json.dumps(r["flags"], sort_keys=True) not in plan]


def lease15(names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Lease 15's driver rows of its steps ``names`` (research/sglang_fit/lease15/candidates.json), every call's."""
    rows = read_rows(sorted(LEASE15.glob("call*/rows.jsonl")), {})
    return of_configs(rows, L15_CANDIDATES, names)


def lease14_samples() -> list[Sample]:
    """Lease 14's driver starts as samples (no every-pass log among them is read)."""
    rows = [r for r in read_rows([LEASE14], {}) if not r.get("server_arg_overrides")]
    return samples_from_rows(rows, str(LEASE14))


def heldout_sets() -> dict[str, list[Sample]]:
    """The held-out sets of research/sglang_fit/heldout-all.txt (leases 2 and 10-14, the collector frozen where
    closed), by name, in that file's order."""
    return {"lease 14": lease14_samples(),
            "lease 2 open loops": load_samples(lease2_files(False)),
            "lease 10 c1": load_samples([CLOSED / "lease10-c1.jsonl"]),
            "lease 11 held": load_samples([CLOSED / "lease11-held.jsonl"]),
            "lease 12": load_samples([CLOSED / "lease12.jsonl"]),
            "lease 13 held": load_samples([CLOSED / "lease13-held.jsonl"])}


def lease12_rows() -> list[dict[str, Any]]:
    """Lease 12's promotion of batching_sglang_h100_e, one row per (configuration, workload)."""
    return read_rows([LEASE12], json.loads(E_CANDIDATES.read_text()))


# The eager fit's lease 10 and 11 rows as files of their own (`export`): training, then held out; and the small
# fit's lease 12 and 13 rows.
EAGER_TRAIN = {"lease10-train.jsonl": lambda: lease10(("defaults", "c2")),
               "lease11-train.jsonl": lambda: lease11(("c2", "c3"))}
EAGER_HELD = {"lease10-c1.jsonl": lambda: lease10(("c1",)), "lease11-held.jsonl": lease11_held_rows}
SMALL_TRAIN = {"lease13-train.jsonl": lambda: lease13(("c2", "c3"))}
SMALL_HELD = {"lease13-held.jsonl": lambda: lease13(("defaults", "c1"), others=True), "lease12.jsonl": lease12_rows}
# The batch-eager fit's (research/plans/sglang_lease15.md): g1-g3 train; x1 is its held-out configuration; e1, e2 and
# s2 measured again there are held out too, apart (no rule of the plan names them).
BATCH_TRAIN = {"lease15-train.jsonl": lambda: lease15(("g1", "g2", "g3"))}
BATCH_HELD = {"lease15-x1.jsonl": lambda: lease15(("x1",)), "lease15-again.jsonl": lambda: lease15(("e1", "e2", "s2"))}


def eager_train(small: bool, batch: bool = False) -> list[Path]:
    """The eager fit's closed-loop training files, with ``small`` the small fit's too, with ``batch`` lease 15's g1-g3."""
    return [CLOSED / f for f in (*EAGER_TRAIN, *(SMALL_TRAIN if small else ()), *(BATCH_TRAIN if batch else ()))]


def sets(closed: str, eager: bool = False, small: bool = False, batch: bool = False) -> dict[str, list[Sample]]:
    """The training sets (``open_train``, ``closed_train``) and the held-out ones, ``closed`` naming the closed-loop
    training rows (lease 4's or lease 10's; ``eager`` adds lease 11's d c2 and c3 to lease 10's, ``small`` lease 13's
    c2 and c3 to those, ``batch`` lease 15's g1-g3)."""
    out = {"open_train": load_samples(lease2_files(True))}
    if closed == "lease4":
        out["closed_train"] = load_samples([CLOSED / "lease4.jsonl"])
    elif eager:
        out["closed_train"] = load_samples(eager_train(small, batch))
        out["closed_held_l10"] = load_samples([CLOSED / "lease10-c1.jsonl"])
    else:
        out["closed_train"] = samples_from_rows(lease10(("defaults", "c2")), "lease 10's defaults and c2")
        out["closed_held_l10"] = samples_from_rows(lease10(("c1",)), "lease 10's c1")
    out |= {"open_held": load_samples(lease2_files(False)),
            "closed_held_l8": load_samples([LEASE8]),
            "closed_held_l7": load_samples([CLOSED / "lease7.jsonl"]),
            "closed_held_l5": load_samples([LEASE5])}
    if eager:
        out["closed_held_l11"] = load_samples([CLOSED / "lease11-held.jsonl"])
        out["closed_held_l4"] = load_samples([CLOSED / "lease4.jsonl"])
        out["closed_held_l12"] = load_samples([CLOSED / "lease12.jsonl"])
        out["closed_held_l13"] = load_samples([CLOSED / "lease13-held.jsonl"])
    if batch:
        out["closed_held_l15x1"] = load_samples([CLOSED / "lease15-x1.jsonl"])
        out["closed_held_l15again"] = load_samples([CLOSED / "lease15-again.jsonl"])
    return out


def export() -> None:
    """Write the evaluations' closed-loop rows in the driver's form (what `load_samples` and a calibration's
    provenance name), one line per (configuration, workload)."""
    CLOSED.mkdir(parents=True, exist_ok=True)
    made = {name: closed_loop_rows(configs, evaluation) for name, (evaluation, configs) in EXPORTS.items()}
    made |= {name: make() for name, make in {**EAGER_TRAIN, **EAGER_HELD, **SMALL_TRAIN, **SMALL_HELD, **BATCH_TRAIN,
                                                    **BATCH_HELD}.items()}
    for name, rows in made.items():
        (CLOSED / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"wrote {len(rows)} rows to {(CLOSED / name).relative_to(ROOT)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--closed", choices=("lease4", "lease10"), default="lease10",
                    help="the closed-loop training rows")
    ap.add_argument("--switch", action="store_true", help="fit cpu_switch_per_req_s too (lease 10's rows)")
    ap.add_argument("--hold", default="", help="with --switch: comma-separated terms kept at the shipped values")
    ap.add_argument("--eager", action="store_true",
                    help="with --switch: fit uncaptured_layer_s on lease 11's d c2 and c3 too")
    ap.add_argument("--small", action="store_true",
                    help="with --eager: lease 13's c2 and c3 train too, warm-started at the catalog's calibration")
    ap.add_argument("--shared", action="store_true", help="with --small: fit kv_shared_read too")
    ap.add_argument("--batch-eager", action="store_true",
                    help="with --shared: fit uncaptured_per_req_s too, lease 15's g1-g3 in training")
    ap.add_argument("--steady", action="store_true",
                    help="with --small: lease 17 call 1's steady first-token waits train too (steady.py)")
    ap.add_argument("--max-nfev", type=int, default=16)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--name", help="with --write: the written file's kind (default: the fit's, e.g. shared)")
    ap.add_argument("--export", action="store_true", help="write the closed-loop rows' driver-form files and stop")
    args = ap.parse_args()
    if args.switch and args.closed != "lease10":
        ap.error("--switch fits on lease 10's rows (--closed lease10)")
    if args.eager and not args.switch:
        ap.error("--eager takes --switch")
    if args.small and not args.eager:
        ap.error("--small takes --eager")
    if args.shared and not args.small:
        ap.error("--shared takes --small")
    if args.steady and not args.small:
        ap.error("--steady takes --small")
    if args.batch_eager and not args.shared:
        ap.error("--batch-eager takes --shared")
    held_terms = tuple(t for t in args.hold.split(",") if t)
    if held_terms and (not args.switch or set(held_terms) - set(TERMS)):
        ap.error(f"--hold takes --switch and terms among {TERMS}")
    if args.export:
        export()
        return
    s = sets(args.closed, args.eager, args.small, args.batch_eager)
    if args.closed == "lease4":
        train_files = [*lease2_files(True), str(CLOSED / "lease4.jsonl")]
        texts = [Path(f).read_text() for f in train_files]
    elif args.eager:
        train_files = [*lease2_files(True), *map(str, eager_train(args.small, args.batch_eager))]
        texts = [Path(f).read_text() for f in train_files]
    else:  # lease 10's file holds held-out rows too: the digest is of the rows that trained
        train_files = [*lease2_files(True), f"{LEASE10} (defaults and c2)"]
        texts = [*(Path(f).read_text() for f in lease2_files(True)),
                 "".join(json.dumps(r) + "\n" for r in lease10(("defaults", "c2")))]
    if args.steady:
        train_files.append(str(LEASE17 / "call1/rows.jsonl"))
        texts.append((LEASE17 / "call1/rows.jsonl").read_text())
    digest = hashlib.sha256("".join(texts).encode()).hexdigest()[:12]
    hw = load_hardware("h100-sxm")
    shipped = sglang_calibration(hw.name)
    terms = (*(t for t in TERMS if t not in held_terms), "cpu_switch_per_req_s") if args.switch else TERMS
    if args.shared:
        terms = (*terms, "kv_shared_read")
    if args.batch_eager:
        terms = (*terms, "uncaptured_per_req_s")
    start = shipped.with_coefficients({"cpu_switch_per_req_s": SWITCH0}) if args.switch else shipped
    if args.batch_eager:  # warm start: the catalog's calibration (the shared refit), the new term at PER_REQ0
        start = shipped.with_coefficients({"uncaptured_per_req_s": PER_REQ0})
    elif args.small:  # warm start: the catalog's calibration, the eager refit
        start = shipped.with_coefficients({"kv_shared_read": SHARED0}) if args.shared else shipped
    elif args.eager:  # warm start: the switch-held refit (its uncaptured_layer_s is lease 2's, which no row held)
        start = sglang_calibration(hw.name, HERE / f"{hw.name}-{shipped.engine_version}-switch-held.yaml")
    steady_train = steady_rows([LEASE17 / "call1/rows.jsonl"]) if args.steady else []
    t0 = time.perf_counter()
    refit = fit_terms(s["open_train"] + s["closed_train"], hw, start, terms, args.max_nfev,
                      extra=(lambda c: steady_residuals(steady_train, c, STEADY_W)) if steady_train else None)
    print(f"fit: {time.perf_counter() - t0:.0f} s")
    if args.steady:
        steady_held = steady_rows([LEASE17 / "call2/rows.jsonl"])
        for label, cal in (("shipped", shipped), ("refit", refit)):
            for part, rows in (("train", steady_train), ("held", steady_held)):
                r = np.exp(steady_residuals(rows, cal, 1.0)) - 1
                print(f"{label:8s} steady lease 17 {part}: sim / real - 1 {' '.join(f'{100 * x:+.1f}' for x in r)} % "
                      f"(mean {100 * float(r.mean()):+.1f} %)")
    for label, cal in (("shipped", shipped), ("refit", refit)):
        for part, samples in s.items():
            err = evaluate(samples, cal, hw)
            print(f"{label:8s} {part:15s} n={len(samples):2d} {mapes(err)}")
            if part.startswith("closed"):
                for r in err["per_sample"]:
                    print(f"           {r['config'][:60]:60s} {r['workload']:11s} tok/s {r['sim_tok_s']:8.0f} / "
                          f"{r['real_tok_s']:8.0f}  tpot {1e3 * r['sim_tpot_p50']:5.1f} / "
                          f"{1e3 * r['real_tpot_p50']:5.1f} ms")
    for t in terms:
        print(f"  {t:20s} {getattr(shipped, t):12.4g} -> {getattr(refit, t):12.4g}")
    if args.write:
        held = [x for part, v in s.items() if "held" in part for x in v]
        refit = named(refit, digest, {
            "fitted": fitted_at(), "procedure": "research/sglang_fit/closed_fit.py (rsi_env.calibrate.timing.fit_terms)",
            "terms": list(terms), "measurements": [f.removeprefix(f"{ROOT}/") for f in train_files],
            "measurements_sha256_12": digest, "n_train": len(s["open_train"]) + len(s["closed_train"]),
            "n_held_out": len(held),
            "held_out_measurements": [str(Path(f).relative_to(ROOT)) for f in (
                *lease2_files(False), *map(str, (LEASE8, CLOSED / "lease7.jsonl", LEASE5)))]
            + ([str((CLOSED / f).relative_to(ROOT)) for f in (*EAGER_HELD, "lease4.jsonl", *SMALL_HELD,
                                                               *(BATCH_HELD if args.batch_eager else ()))] if args.eager
               else [f"{LEASE10.relative_to(ROOT)} (c1)"] if args.closed == "lease10" else []),
            "held_out_error": errors(evaluate(held, refit, hw)),
            "train_error": errors(evaluate(s["open_train"] + s["closed_train"], refit, hw)),
            "fitted_on": "the training rows only (held-out configurations chosen before the fit)"})
        kind = ("closed" if args.closed == "lease4" else "frozen" if not args.switch
                else "batch-eager" if args.batch_eager else "shared" if args.shared
                else "small" if args.small
                else "eager" if args.eager else "switch-held" if held_terms else "switch")
        out = HERE / f"{hw.name}-{refit.engine_version}-{args.name or kind}.yaml"
        refit.save(out)
        print(f"wrote {out.relative_to(ROOT)} ({refit.id})")


if __name__ == "__main__":
    main()
