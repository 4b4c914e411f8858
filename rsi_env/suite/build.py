"""Freeze a suite: find each flag instance's ceiling, check each reference passes, measure each difficulty.

``python -m rsi_env.suite.build [--suite rsi-bench-v1] [--workers W] [--work DIR]`` writes
``rsi_env/catalog/suites/<suite>.yaml``. A suite with a base (``rsi-bench-v2`` to ``-v5`` on v1: `SUITE_BASES`)
keeps the base's instances as they were frozen and freezes only its own candidates. What it does, per candidate of
`rsi_env.suite.plan`:

- **a flag instance** (the sim tier): every valid configuration on the task's ladders is measured where
  the grid has at most `EXHAUSTIVE_MAX` of them (``exhaustive``); a larger grid gets a search of 20x the
  instance's budget (random search over half of it, then coordinate descent from its best: ``search-20x``).
  The best configuration whose submission passes every guard is the ceiling and the reference; the instance
  passes at `CEILING_FRACTION` of the ceiling's objective (`threshold_for`). A candidate whose defaults
  fail, or whose ceiling is less than `MIN_HEADROOM` above the defaults, is left out (with the reason). A
  flag family whose first `GIVE_UP_AFTER` candidates are all left out is dropped (vLLM's defaults already
  serve its grid well: PrefixCache, whose defaults cache prefixes).
- **a code instance**: its family's reference solution must pass and the untouched workspace must fail.
- **difficulty, measured**: each baseline plays the instance as a suite agent would (`rsi_env.suite.agents`):
  ``easy`` where vLLM's auto-tune procedure or the untouched start passes, ``medium`` where a matched-budget
  random search or Optuna TPE passes (any of their seeds), ``hard`` where none does. Their pass rates are
  kept per instance and summed into the suite's baseline table.

Each candidate's result is kept in ``--work`` as it is found, so a build killed midway goes on where it was.
The measurements go to no experience store (``RSI_ENV_STORE=off`` unless set).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime
import json
import math
import multiprocessing
import os
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rsi_env.suite.agents import NullAgent, RandomAgent, ReferenceAgent, SearchAgent, SuiteAgent
from rsi_env.suite.instance import DIFFICULTIES, FRONTS, Instance, Suite, load, threshold_for
from rsi_env.suite.plan import SUITE_BASES, Candidate, candidates, flag_quota
from rsi_env.wrappers.ladders import rsi_env_of

__all__ = ["CEILING_FRACTION", "EXHAUSTIVE_MAX", "GIVE_UP_AFTER", "MIN_HEADROOM", "baseline_table", "freeze", "main"]

CEILING_FRACTION = 0.95   # a flag instance passes at 95 % of its ceiling's objective
EXHAUSTIVE_MAX = 1500     # valid configurations measured whole; a larger grid gets a search of 20x the budget
MIN_HEADROOM = 0.10       # a flag instance's ceiling beats vLLM's defaults by at least 10 %
SEARCH_FACTOR = 20
GIVE_UP_AFTER = 16        # a flag family none of whose first 16 candidates has headroom is dropped
_TRIES = 8                # configurations tried, best first, for a ceiling whose submission passes every guard
# The baselines each instance is measured against, and the seeds each plays.
BASELINES: dict[str, tuple[int, ...]] = {"null": (0,), "vllm_auto_tune": (0,), "random_search": (0, 1, 2),
                                         "optuna_tpe": (0, 1)}
_EASY = ("null", "vllm_auto_tune")
_MEDIUM = ("random_search", "optuna_tpe")


def _agent(name: str) -> SuiteAgent:
    return NullAgent() if name == "null" else SearchAgent(name)


def _passes(inst: Instance, agent: SuiteAgent, seed: int = 0) -> bool:
    env = inst.make_env()
    try:
        agent.play(env, inst, np.random.default_rng(seed))
        v = rsi_env_of(env).verdict
        return v is not None and v.passed
    finally:
        env.close()


def _measured_difficulty(inst: Instance, names: Sequence[str]) -> tuple[str, dict[str, float]]:
    rates = {}
    for name in names:
        seeds = BASELINES[name]
        rates[name] = sum(_passes(inst, _agent(name), s) for s in seeds) / len(seeds)
    if any(rates.get(n, 0) > 0 for n in _EASY):
        return "easy", rates
    if any(rates.get(n, 0) > 0 for n in _MEDIUM):
        return "medium", rates
    return "hard", rates


def _instance(c: Candidate, difficulty: str, criterion: Mapping[str, Any], reference: Mapping[str, Any],
              budget: int, max_steps: int, baselines: Mapping[str, float] | None = None) -> Instance:
    return Instance(id=c.id, front=c.front, family=c.family, env_id=c.env_id, env_kwargs=dict(c.env_kwargs),
                    seed=c.seed, tier="sim", budget=budget, max_steps=max_steps, difficulty=difficulty,
                    criterion=dict(criterion), reference=dict(reference), baselines=dict(baselines or {}))


def _ceiling_search(c: Candidate) -> tuple[list[tuple[float, dict[str, int]]], str, int, Any]:
    """Every measured configuration of ``c``'s ladders (score, indices), best first; the method; how many."""
    from rsi_env.search import Evaluator
    from rsi_env.search.coordinate_descent import coordinate_descent
    from rsi_env.search.exhaustive import valid_grid
    from rsi_env.search.random_search import random_search

    probe = Evaluator(c.env_id, c.seed, budget=0, env_kwargs=dict(c.env_kwargs))
    task = probe.env.task
    try:
        if not all(t.ok for t in probe.env.base_tels):
            bad = [t.error for t in probe.env.base_tels if not t.ok]
            raise _Rejected(f"the engine's defaults fail: {bad}")
        grid = valid_grid(probe)
    finally:
        probe.close()
    if len(grid) <= EXHAUSTIVE_MAX:
        ev = Evaluator(c.env_id, c.seed, budget=len(grid), env_kwargs=dict(c.env_kwargs))
        ev.evaluate(grid)
        method = "exhaustive"
    else:
        total = SEARCH_FACTOR * task.max_measurements
        ev = Evaluator(c.env_id, c.seed, budget=total // 2, env_kwargs=dict(c.env_kwargs))
        random_search(ev, np.random.default_rng(c.seed))
        ev.budget = total
        ev.warm = [ev.best_indices] if ev.best_indices is not None else []
        coordinate_descent(ev)
        method = f"search-{SEARCH_FACTOR}x"
    try:
        scored = sorted(((t.score, t.indices) for t in ev.trials if t.measured and t.score is not None
                         and math.isfinite(t.score)), key=lambda x: -x[0])
        flags = list(ev.env.flag_names)
        configs = [(s, {f: ev.config(idx).to_dict()[f] for f in flags}) for s, idx in scored[:_TRIES]]
        return [(s, cfg) for s, cfg in configs], method, ev.measurements, task
    finally:
        ev.close()


class _Rejected(Exception):
    """A candidate that cannot be an instance (the message says why)."""


def _freeze_flag(c: Candidate) -> Instance:
    configs, method, measured, task = _ceiling_search(c)
    if not configs or configs[0][0] < math.log1p(MIN_HEADROOM):
        best = f"{math.expm1(configs[0][0]):+.1%}" if configs else "nothing ran"
        raise _Rejected(f"headroom: the best configuration beats the engine's defaults by {best} "
                        f"(< {MIN_HEADROOM:.0%})")
    for score, cfg in configs:
        criterion = {"kind": "ceiling", "ceiling": round(score, 6), "fraction": CEILING_FRACTION, "method": method,
                     "measured": measured}
        inst = _instance(c, "hard", criterion, {"config": cfg}, task.max_measurements, task.max_steps)
        inst = _with_threshold(inst, score)
        if _passes(inst, ReferenceAgent()):
            difficulty, rates = _measured_difficulty(inst, list(BASELINES))
            return _with(inst, difficulty, rates)
    raise _Rejected(f"none of the {len(configs)} best configurations passes every guard at submit")


def _with_threshold(inst: Instance, ceiling: float) -> Instance:
    kwargs = {**inst.env_kwargs, "improvement_threshold": round(threshold_for(ceiling, CEILING_FRACTION), 6)}
    return Instance(**{**inst.__dict__, "env_kwargs": kwargs})


def _with(inst: Instance, difficulty: str, rates: Mapping[str, float]) -> Instance:
    return Instance(**{**inst.__dict__, "difficulty": difficulty, "baselines": dict(rates)})


def _freeze_code(c: Candidate) -> Instance:
    from rsi_env.engine.task import load_task

    task = load_task(c.env_id)
    inst = _instance(c, "hard", {"kind": "checks"}, {"code": c.family}, task.max_measurements, task.max_steps)
    if not _passes(inst, ReferenceAgent()):
        raise _Rejected("the reference solution does not pass")
    if _passes(inst, NullAgent()):
        raise _Rejected("the untouched workspace passes")
    names = ["null"] + (list(_MEDIUM) if task.flags else [])
    rates = {"null": 0.0}
    for name in names[1:]:
        seeds = BASELINES[name][:1]  # a code instance's flags rarely matter: one seed each
        rates[name] = sum(_passes(inst, _agent(name), s) for s in seeds) / len(seeds)
    rates["random"] = float(_passes(inst, RandomAgent(), 0))
    difficulty = "easy" if rates["random"] else ("medium" if any(rates.get(n, 0) for n in _MEDIUM) else "hard")
    return _with(inst, difficulty, rates)


def candidate_key(c: Candidate) -> str:
    """What a kept result is valid for: the candidate's env, kwargs and seed (an id alone can be reused)."""
    return json.dumps([c.env_id, dict(c.env_kwargs), c.seed, c.kind], sort_keys=True)


def freeze(c: Candidate) -> dict[str, Any]:
    """One candidate frozen: ``{"instance": ...}``, or ``{"rejected": reason}``; with the seconds it took."""
    t0 = time.monotonic()
    try:
        inst = _freeze_flag(c) if c.kind == "flag" else _freeze_code(c)
        out: dict[str, Any] = {"instance": inst.to_dict()}
    except _Rejected as exc:
        out = {"rejected": str(exc)}
    out["id"], out["key"], out["seconds"] = c.id, candidate_key(c), round(time.monotonic() - t0, 1)
    return out


def baseline_table(instances: Sequence[Instance]) -> dict[str, Any]:
    """Each baseline's pass rate per front and difficulty (mean over the instances it was measured on)."""
    cells: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for i in instances:
        for name, rate in i.baselines.items():
            cells[name][f"{i.front}/{i.difficulty}"].append(rate)
            cells[name][i.front].append(rate)
            cells[name][i.difficulty].append(rate)
            cells[name]["all"].append(rate)
    return {name: {k: {"pass_rate": round(sum(v) / len(v), 4), "instances": len(v)} for k, v in sorted(c.items())}
            for name, c in sorted(cells.items())}


def _calibrations(instances: Sequence[Instance]) -> dict[str, str]:
    from rsi_env.engine.task import load_task
    from rsi_env.sim import sim_calibration

    out = {}
    for i in instances:
        if i.tier != "sim":
            continue
        hw = i.env_kwargs.get("hardware") or load_task(i.env_id).default_hardware
        out[f"{hw}@{i.engine_version}"] = sim_calibration(hw, i.engine_version).id
    return dict(sorted(out.items()))


def _quota(c: Candidate) -> int | None:
    return flag_quota(c.family) if c.kind == "flag" else None


def _run(todo: list[Candidate], done: dict[str, dict[str, Any]], sink_path: Path, workers: int,
         family_of: Mapping[str, str]) -> None:
    """Freeze ``todo`` in order over ``workers`` processes, no more of a flag family than its quota needs.

    ``done`` holds the results kept from earlier runs, by candidate id; ``family_of`` names each id's family.
    """
    accepted: dict[str, int] = defaultdict(int)
    left_out: dict[str, int] = defaultdict(int)
    for cid, r in done.items():
        (accepted if "instance" in r else left_out)[family_of[cid]] += 1
    pending = list(todo)
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool, sink_path.open("a") as sink:
        inflight: dict[cf.Future[dict[str, Any]], Candidate] = {}
        n = 0
        while pending or inflight:
            busy: dict[str, int] = defaultdict(int)
            for c in inflight.values():
                busy[c.family] += 1
            for c in list(pending):
                if len(inflight) >= workers:
                    break
                q = _quota(c)
                if q is not None and (accepted[c.family] >= q or (not accepted[c.family]
                                                                  and left_out[c.family] >= GIVE_UP_AFTER)):
                    pending.remove(c)  # the family is full, or given up
                elif q is None or accepted[c.family] + busy[c.family] < q:
                    pending.remove(c)
                    inflight[pool.submit(freeze, c)] = c
                    busy[c.family] += 1
            if not inflight:
                break
            finished, _ = cf.wait(inflight, return_when=cf.FIRST_COMPLETED)
            for fut in finished:
                c = inflight.pop(fut)
                try:
                    res = fut.result()
                except Exception as exc:  # a candidate that breaks is reported and left out
                    res = {"id": c.id, "key": candidate_key(c), "rejected": f"error: {type(exc).__name__}: {exc}",
                           "seconds": 0}
                sink.write(json.dumps(res) + "\n")
                sink.flush()
                done[c.id] = res
                n += 1
                if "instance" in res:
                    accepted[c.family] += 1
                else:
                    left_out[c.family] += 1
                what = res["instance"]["difficulty"] if "instance" in res else f"left out: {res['rejected']}"
                print(f"[{n}] {c.id}: {what} ({res['seconds']} s)", file=sys.stderr, flush=True)


def _selected(plan: Sequence[Candidate], done: Mapping[str, Mapping[str, Any]]) -> list[Instance]:
    """The frozen instances in plan order, the first `flag_quota` of each flag family."""
    kept: dict[str, int] = defaultdict(int)
    out = []
    for c in plan:
        r = done.get(c.id)
        if r is None or "instance" not in r:
            continue
        q = _quota(c)
        if q is not None and kept[c.family] >= q:
            continue
        kept[c.family] += 1
        out.append(Instance.from_dict(r["instance"]))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--suite", default="rsi-bench-v1")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 1)))
    p.add_argument("--work", type=Path, default=Path(".suite-build"), help="where results are kept as they come")
    p.add_argument("--only", nargs="*", default=None, help="candidate ids (or prefixes) to freeze")
    p.add_argument("--out", type=Path, default=None, help="the suite file (default: the package's catalog)")
    args = p.parse_args(argv)
    os.environ.setdefault("RSI_ENV_STORE", "off")
    args.work.mkdir(parents=True, exist_ok=True)
    done_path = args.work / f"{args.suite}.jsonl"
    plan = candidates(args.suite)
    base = SUITE_BASES.get(args.suite)
    kept = list(load(base).instances) if base else []  # a later version keeps its base's instances as frozen
    keys = {c.id: candidate_key(c) for c in plan}
    done = {}
    if done_path.is_file():
        for line in done_path.read_text().splitlines():
            row = json.loads(line)
            if row.get("key") == keys.get(row["id"]):  # kept for this very candidate, not an earlier one of its id
                done[row["id"]] = row
    todo = [c for c in plan if c.id not in done and (args.only is None or any(c.id.startswith(o) for o in args.only))]
    print(f"{len(done)} candidates done, {len(todo)} to go, {args.workers} workers", file=sys.stderr)
    _run(todo, done, done_path, args.workers, {c.id: c.family for c in plan})
    instances = kept + _selected(plan, done)
    instances.sort(key=lambda i: (FRONTS.index(i.front), i.family, i.id))
    suite = Suite(id=args.suite, instances=tuple(instances), ceiling_fraction=CEILING_FRACTION,
                  calibrations=_calibrations(instances), frozen=datetime.date.today().isoformat(),
                  baselines=baseline_table(instances),
                  notes=(f"Flag ceilings: exhaustive over the valid grid up to {EXHAUSTIVE_MAX} configurations, else a "
                         f"search of {SEARCH_FACTOR}x the budget (random, then coordinate descent). Pass: "
                         f"{CEILING_FRACTION:.0%} of the ceiling's objective (flags), every hidden check (code)."
                         + (f" Extends {base}: its instances as frozen there." if base else "")))
    out = args.out or Path(__file__).resolve().parents[1] / "catalog" / "suites" / f"{args.suite}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    import yaml

    out.write_text(f"# {args.suite}: frozen by python -m rsi_env.suite.build; hidden from agents (it holds the "
                   "references).\n" + yaml.safe_dump(suite.to_dict(), sort_keys=False, width=120))
    counts = {f: sum(i.front == f for i in instances) for f in FRONTS}
    diff = {d: sum(i.difficulty == d for i in instances) for d in DIFFICULTIES}
    print(f"wrote {out}: {len(instances)} instances {counts} {diff}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
