"""Every golden case through `simulate_detailed` with the step trace on: each engine run done by the Python
`EngineSim` and by the compiled loop (`loop_full`, ``record=True``), every `SimResult` field compared, the step trace
(`SimResult.steps`) and the profile included (arrays: same dtype, equal values, NaN equal to NaN).

The ``--json`` golden outputs do not show the step trace, so `golden_check.py` cannot judge it; this does.

    PYTHONPATH=/tmp/numba_site nice -n 10 python3 research/sim_numba/steps_check.py [--only SUBSTR]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parents[1]))

import golden_check  # noqa: E402
import loop_full  # noqa: E402

RUNS: list[tuple[str, str]] = []  # per engine run of the current case: (verdict, first differing field)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f")))
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() and all(
            _same(a[k], b[k]) for k in a)
    return bool(a == b) and type(a) is type(b) or (isinstance(a, float) and isinstance(b, float) and a == b)


class Both:
    """Runs the Python engine and the port on the same inputs; returns the Python engine's result."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        self.args, self.kw = args, kw

    def run(self) -> Any:
        from rsi_env.sim.engine import EngineSim

        ref = EngineSim(*self.args, **self.kw).run()
        golden_check.LOG.clear()
        got = golden_check.PortEngine(*self.args, **self.kw).run()
        if golden_check.LOG != ["port"]:
            RUNS.append(("fallback: " + ", ".join(golden_check.LOG), ""))
            return ref
        bad = [f.name for f in dataclasses.fields(ref) if not _same(getattr(ref, f.name), getattr(got, f.name))]
        RUNS.append(("MISMATCH", ", ".join(bad)) if bad else ("port", ""))
        return ref


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="")
    p.add_argument("--check", action="store_true", help="check_invariants=True on both sides")
    args = p.parse_args()
    golden_check.LOOP["mod"] = loop_full
    golden_check.LOOP["reason"] = loop_full.reason
    from rsi_env.cli import _parse_sets
    from rsi_env.sim import simulate_detailed

    counts: collections.Counter[str] = collections.Counter()
    steps = 0
    for name, wl, flags in golden_check.cases():
        if args.only not in name:
            continue
        RUNS.clear()
        _, _, _, results = simulate_detailed(_parse_sets(flags), name.split("/")[0], "h200", wl, engine_cls=Both,
                                             record_steps=True, check_invariants=args.check)
        steps += sum(len(r.steps["t"]) for r in results if r.steps is not None)
        if not RUNS:
            verdict = "no engine run"
        elif any(v == "MISMATCH" for v, _ in RUNS):
            verdict = "MISMATCH: " + "; ".join(f for v, f in RUNS if v == "MISMATCH")
        elif all(v == "port" for v, _ in RUNS):
            verdict = "port"
        else:
            verdict = "; ".join(sorted({v for v, _ in RUNS if v != "port"}))
        counts[verdict.split(":")[0]] += 1
        print(f"{name:58s} {verdict}", flush=True)
    print(f"\n{sum(counts.values())} cases: " + ", ".join(f"{k} {v}" for k, v in counts.most_common())
          + f"; {steps} step-trace rows compared")


if __name__ == "__main__":
    main()
