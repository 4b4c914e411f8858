"""Every golden case (`tests/golden/outputs.py`: ``simulate`` and ``traces``) through `simulate` with a compiled loop
standing in for `EngineSim.run`, against the Python engine: ``--json`` text compared with ``==``, CPU time of each
side's `simulate` call (the CLI's argument parsing, about 7 ms a call here, left out).

Per case: ``port`` (every engine run of the case ran compiled), ``fallback`` (at least one ran in Python: the reason,
a configuration outside the port's subset or the status a run stopped with) or ``MISMATCH`` (the two ``--json``
texts differ). A run the port stops is run again in Python, its time counted on the port's side.

    PYTHONPATH=/tmp/numba_site nice -n 10 python3 research/sim_numba/golden_check.py [--loop loop_full] [--only SUBSTR]
"""

from __future__ import annotations

import argparse
import collections
import importlib
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parents[1]))  # the repo root: tests.golden's configurations

__all__ = ["PortEngine", "main"]

STATUS = {1: "status 1 (preemption)", 2: "status 2 (span outside a CUDA graph)", 3: "status 3 (deadlock)",
          4: "status 4 (allocation beyond the free blocks)", 5: "status 5 (a pool invariant broken)"}
LOG: list[str] = []  # per engine run of the current case: "port" or the fallback's reason
LOOP: dict[str, Any] = {}


def reason_group(cfg: Any, cost: Any, trace: Any) -> str | None:
    """Why `loop_group` does not cover a run (None: it does)."""
    if cfg.scheduling_policy != "fcfs":
        return "priority policy"
    if int(trace.prefix_group.max()) >= 0:
        return "shared prefixes"
    if cost._window is not None:
        return "sliding window"
    if cfg.data_parallel_size != 1:
        return "data parallel"
    if cost.model.is_moe:
        return "MoE"
    if not cost._sizes_sorted:
        return "unsorted capture sizes"
    return None


class PortEngine:
    """`EngineSim`'s constructor and ``run``, on the compiled loop where it covers the run."""

    def __init__(self, cfg: Any, cost: Any, trace: Any, num_gpu_blocks: int, check_invariants: bool = False,
                 record_steps: bool = True) -> None:
        self.args = (cfg, cost, trace, num_gpu_blocks, check_invariants)
        self.record_steps = record_steps

    def run(self) -> Any:
        from rsi_env.engine.profile import Profile
        from rsi_env.sim.engine import EngineSim, SimResult

        cfg, cost, trace, blocks, check = self.args
        mod = LOOP["mod"]
        records = getattr(mod, "RECORDS", False)  # the loop keeps a step trace
        checks = getattr(mod, "CHECKS", False)  # and checks the pool's invariants
        why = "step trace" if (self.record_steps and not records) else "invariant checks" if (check and not checks) \
            else LOOP["reason"](cfg, cost, trace)
        if why is None:
            kw = {"record": True} if self.record_steps else {}
            if check:
                kw["check"] = True
            res, prof, status = mod.run_compiled(cfg, cost, trace, blocks, **kw)
            if not status:
                LOG.append("port")
                cost.engine_cpu_rest(prof, res["busy_time"])
                return SimResult(
                    arrival=res["arrival"], first_token=res["first_token"], finish=res["finish"],
                    prompt_len=trace.prompt_len.astype(np.int64), output_len=trace.output_len.astype(np.int64),
                    generated=res["generated"], num_steps=res["num_steps"],
                    num_preemptions=res.get("num_preemptions", 0), prefix_queries=res["prefix_queries"],
                    prefix_hits=res.get("prefix_hits", 0), kv_usage_peak=res["kv_usage_peak"],
                    busy_time=res["busy_time"], running_time_integral=res["running_time_integral"],
                    tokens_scheduled=res["tokens_scheduled"], steps=res.get("steps"),
                    preempted_prefix_hits=res.get("preempted_prefix_hits", 0), profile=Profile(*prof))
            why = STATUS.get(status, f"status {status}")
        LOG.append(why)
        return EngineSim(cfg, cost, trace, blocks, check, record_steps=self.record_steps).run()


def _use(engine: Any) -> None:
    import rsi_env.sim as sim

    sim.simulate_detailed.__kwdefaults__["engine_cls"] = engine


def cases() -> list[tuple[str, str, list[str]]]:
    """(name, workload, flags) of every ``simulate`` and ``traces`` golden case, in `tests.golden.outputs`' order."""
    from rsi_env.engine.model import list_models
    from rsi_env.engine.workload import list_workloads
    from tests.golden import outputs

    out = [(f"{m}/{wl}/{name}", wl, flags) for m in list_models() for wl in list_workloads()
           for name, flags in outputs.CONFIGS.items()]
    for path in sorted(outputs.TRACES.glob("*.yaml")):
        models = outputs.LARGE_TRACE_MODELS if path.stem.endswith("_10000") else list_models()
        out += [(f"{m}/{path.stem}/{name}", str(path), flags) for m in models
                for name, flags in outputs.TRACE_CONFIGS.items()]
    return out


SPENT = [0.0]  # CPU seconds inside `rsi_env.sim.simulate` (the CLI's argument parser and printing left out)


def _time_simulate() -> None:
    """`rsi_env.sim.simulate` wrapped to add its CPU time to ``SPENT`` (the CLI imports it at each call)."""
    import rsi_env.sim as sim

    inner = sim.simulate

    def simulate(*a: Any, **kw: Any) -> Any:
        t0 = time.process_time()
        try:
            return inner(*a, **kw)
        finally:
            SPENT[0] += time.process_time() - t0

    sim.simulate = simulate


def _timed(engine: Any, model: str, wl: str, flags: list[str], repeat: int) -> tuple[float, str]:
    """The case's ``--json`` text through the CLI, and the CPU time of its `simulate` call (best of ``repeat``)."""
    from tests.golden import outputs

    _use(engine)
    best = float("inf")
    text = ""
    for _ in range(repeat):
        SPENT[0] = 0.0
        text = outputs._simulate_cli(model, wl, flags)
        best = min(best, SPENT[0])
    return best, text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loop", default="loop_full", help="loop_group (the study's port) or loop_full")
    p.add_argument("--only", default="", help="cases whose name contains this")
    p.add_argument("--repeat", type=int, default=1, help="timed runs per side (best kept)")
    p.add_argument("--quiet", action="store_true", help="summary only")
    args = p.parse_args()
    mod = importlib.import_module(args.loop)
    LOOP["mod"] = mod
    LOOP["reason"] = reason_group if args.loop == "loop_group" else mod.reason
    from rsi_env.sim.engine import EngineSim
    from tests.golden import outputs

    _time_simulate()
    outputs._simulate_cli("llama-3.1-8b", "short_long", [])  # imports, before any timing
    _timed(PortEngine, "llama-3.1-8b", "short_long", [], 1)  # numba's cache load (or compile), before any timing
    LOG.clear()
    counts: collections.Counter[str] = collections.Counter()
    reasons: collections.Counter[str] = collections.Counter()
    tot = {"py": 0.0, "port": 0.0}
    by_wl: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    bad = []
    todo = [c for c in cases() if args.only in c[0]]
    if not args.quiet:
        print(f"{'case':58s} {'python ms':>9s} {'port ms':>9s} {'ratio':>6s}  verdict")
    for name, wl, flags in todo:
        model = name.split("/")[0]
        _use(EngineSim)
        outputs._simulate_cli(model, wl, flags)  # warm: the workload parsed, the cost model's imports
        t_py, ref = _timed(EngineSim, model, wl, flags, args.repeat)
        LOG.clear()
        t_port, got = _timed(PortEngine, model, wl, flags, args.repeat)
        _use(EngineSim)
        runs = LOG[-len(LOG) // args.repeat:] if LOG else []
        if got != ref:
            verdict = "MISMATCH"
            bad.append(name)
        elif not runs:
            verdict = "no engine run (the configuration fails before the loop)"
        elif all(r == "port" for r in runs):
            verdict = "port"
            tot["py"] += t_py
            tot["port"] += t_port
            w = by_wl[name.split("/")[1]]
            w[0] += t_py
            w[1] += t_port
        else:
            why = sorted({r for r in runs if r != "port"})
            verdict = "fallback: " + ", ".join(why)
            for r in why:
                reasons[r] += 1
        counts[verdict.split(":")[0]] += 1
        if not args.quiet:
            print(f"{name:58s} {t_py * 1e3:9.2f} {t_port * 1e3:9.2f} {t_py / max(t_port, 1e-9):5.1f}x  {verdict}",
                  flush=True)
    print(f"\n{len(todo)} cases: port {counts['port']}, python fallback {counts['fallback']}, "
          f"MISMATCH {counts['MISMATCH']}, "
          f"no engine run {counts['no engine run (the configuration fails before the loop)']}")
    for r, c in reasons.most_common():
        print(f"  fallback reason {r}: {c} cases")
    if tot["port"]:
        print(f"covered cases, CPU: python {tot['py']:.3f} s, port {tot['port']:.3f} s, "
              f"{tot['py'] / tot['port']:.1f}x")
        for wl, (a, b) in sorted(by_wl.items()):
            print(f"  {wl:24s} python {a * 1e3:9.1f} ms  port {b * 1e3:8.1f} ms  {a / b:5.1f}x")
    if bad:
        print("MISMATCH:", ", ".join(bad))


if __name__ == "__main__":
    main()
