"""Stage 2 of a two-tier evaluation: measure the candidates (and the engine's defaults) on the real tier.

``python -m rsi_env.evaluate.promote --plan configs/eval/<plan>.yaml --gpus 0,1`` reads the
candidates file the search stage wrote and measures each configuration with `RealTier` of the engine the
search tuned (vLLM, or SGLang where the candidates say ``engine: sglang``) — one
driver process (one engine start, every workload) per configuration, in its own process group,
killed whole at its timeout — on the local GPUs in parallel: a configuration that needs ``k``
GPUs (tensor x pipeline x data parallel) waits for ``k`` free ones and gets them through
``CUDA_VISIBLE_DEVICES``. The engine's defaults go first (the real score of every candidate is measured
against them), then the candidates in sim order, then the plan's probes (changes the output guard
should catch). Each row names the card it was measured on: the plan's unless ``--hardware`` names another (a
lease that gives another card than the search priced); one results file holds one card's rows. One JSON line per
configuration is appended to
``<out>/real.jsonl`` as it finishes, so a run cut short keeps what it measured, and a second run
skips what is there. Nothing starts that would not finish before the deadline by its estimate,
and no run outlives the deadline; an interrupted promote (Ctrl-C, SIGTERM) kills every running
engine's process group before it exits.

This module imports only the engine vocabulary and the real tier (no Gymnasium, no Optuna), so it
runs on a GPU machine that has the engine (vLLM or SGLang), numpy and PyYAML.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rsi_env.engine.engines import get_engine
from rsi_env.engine.hardware import load_hardware
from rsi_env.engine.model import load_model
from rsi_env.engine.policy import PolicyKeys
from rsi_env.engine.tier import Tier
from rsi_env.engine.workload import Workload
from rsi_env.errors import RsiEnvError
from rsi_env.evaluate.plan import EvalPlan, load_plan
from rsi_env.real.gc_pauses import gc_mode
from rsi_env.real.tier import RealTier, group_members
from rsi_env.store.recorded import Recorded

__all__ = ["estimated_makespan_s", "load_candidates", "main", "measured_hardware", "read_results", "run_promote"]


def load_candidates(plan: EvalPlan) -> dict[str, Any]:
    """The search stage's output for ``plan``; a clear error if it is missing, belongs to another plan or names an
    engine there is no real tier for (before any engine starts)."""
    p = Path(plan.candidates)
    if not p.is_file():
        raise RsiEnvError(f"no candidates at {p}: run the search stage first (rsi-env eval --plan {plan.source} "
                          "--stage search)")
    doc: dict[str, Any] = json.loads(p.read_text())
    if doc.get("plan") != plan.name:
        raise RsiEnvError(f"{p} holds the candidates of plan {doc.get('plan')!r}, not {plan.name!r}")
    try:
        get_engine(doc.get("engine", "vllm"))
    except RsiEnvError as exc:
        raise RsiEnvError(f"{p}: the candidates' {exc}") from None
    return doc


def read_results(plan: EvalPlan) -> list[dict[str, Any]]:
    """Every configuration measured on real so far (``<out>/real.jsonl``), in the order they finished."""
    p = Path(plan.out) / "real.jsonl"
    if not p.is_file():
        return []
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()]


def estimated_makespan_s(entries: Sequence[dict[str, Any]], num_gpus: int) -> float:
    """Wall time of measuring ``entries`` in order on ``num_gpus`` GPUs by their ``est_real_s``, as `promote` schedules.

    Each entry starts, in list order, on the GPUs that free up first (``num_gpus`` of them; one at a time
    without GPUs to pin).
    """
    free = [0.0] * max(1, num_gpus)
    end = 0.0
    for e in entries:
        need = min(int(e.get("num_gpus", 1)), len(free)) if num_gpus > 0 else 1
        free.sort()
        start = free[need - 1]
        stop = start + float(e.get("est_real_s") or 0.0)
        for k in range(need):
            free[k] = stop
        end = max(end, stop)
    return end


class _Pool:
    """GPU ids handed to runs; ``[""]`` stands for "no GPU to pin" (a CPU machine: one run at a time)."""

    def __init__(self, gpus: Sequence[str]) -> None:
        self.free = list(gpus) or [""]
        self.size = len(self.free)
        self.cond = threading.Condition()


def _run_one(entry: dict[str, Any], doc: dict[str, Any], plan: EvalPlan, hardware: str, gpus: list[str],
             timeout_s: float, out: Path, lock: threading.Lock, running: dict[str, RealTier],
             stop: threading.Event) -> None:
    env = {"CUDA_VISIBLE_DEVICES": ",".join(gpus)} if any(gpus) else {}
    kind = get_engine(doc.get("engine", "vllm"))
    tier = RealTier(timeout_s=timeout_s, record_tokens=plan.promote.record_tokens, env=env, engine=kind.name,
                    gc=plan.promote.gc)
    running[entry["name"]] = tier
    workloads = [Workload.from_dict(w) for w in doc["workloads"]]
    # A scheduling policy's keys (computed on sim by the search stage) order vLLM's scheduler; such a run is not
    # recorded in the store, which has no field for a policy (`ScheduledTier`).
    measure: Tier = Recorded(tier)
    if entry.get("policy_keys"):
        measure = tier.scheduled({w: PolicyKeys(np.asarray(k["waiting"], dtype=float), np.asarray(k["victim"], dtype=float))
                                  for w, k in entry["policy_keys"].items()})
    t0 = time.monotonic()
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        tels = measure.measure_all(kind.make(entry["flags"]), load_model(doc["model"]),
                                   load_hardware(hardware), workloads)
    finally:
        running.pop(entry["name"], None)
    wall = time.monotonic() - t0
    rows = {r["workload"]: r for r in tier.last_rows}
    row = {
        "name": entry["name"], "flags": entry["flags"], "policy": entry.get("policy"),
        "gpus": [g for g in gpus if g], "num_gpus": entry["num_gpus"], "hardware": hardware,
        "started": when, "wall_s": round(wall, 2), "gpu_s": round(wall * entry["num_gpus"], 2),
        "startup_s": next((r["startup_s"] for r in rows.values()), None),
        # the machine that measured (CPU, GPUs, the CPU probe at its start) and the CPU probe right before each
        # workload, as the driver's rows carry them: rows of one configuration from two hosts can be told apart
        "host": next((r["host"] for r in rows.values() if r.get("host")), None),
        "cpu_probe_ms": {w: r["counters"].get("cpu_probe_ms") for w, r in rows.items()},
        "engine": kind.name, "engine_version": tier.engine_version, "workloads": [w.name for w in workloads],
        "telemetry": [t.to_dict() for t in tels],
        "output_token_ids": {w: (r["counters"].get("output_token_ids") or {}) for w, r in rows.items()},
        "steps": {w: r["steps"] for w, r in rows.items() if "steps" in r},  # the engine's step trace, per workload
        "passes": {w: r["passes"] for w, r in rows.items() if r.get("passes")},  # SGLang's logged passes
        "gc": tier.gc,  # the driver's collector, its pauses and each request's times (where one falls)
        "driver_gc": {w: r["counters"].get("driver_gc") for w, r in rows.items()},
        "requests": {w: r.get("requests") for w, r in rows.items()},
        "error": next((t.error for t in tels if t.error), None),
    }
    if stop.is_set():  # interrupted: the run was killed, not measured
        return
    with lock, open(out, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps({"measured": entry["name"], "gpus": row["gpus"], "wall_s": row["wall_s"], "error": row["error"],
                      "out_tok_per_s": [round(t.out_tok_per_s) for t in tels]}), flush=True)


def _kill_running(running: dict[str, RealTier], threads: Sequence[threading.Thread]) -> None:
    """Kill the process group of every measurement still running, until every run's thread has returned.

    Killed again and again: a run whose thread was just starting gets its process group a moment later.
    """
    deadline = time.monotonic() + 30
    pgids: set[int] = set()
    while time.monotonic() < deadline:
        pgids |= {t.last_pgid for t in list(running.values()) if t.last_pgid is not None}
        for pg in pgids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pg, signal.SIGKILL)
        if not any(th.is_alive() for th in threads) and not any(group_members(pg) for pg in pgids):
            return
        time.sleep(0.05)


def measured_hardware(doc: dict[str, Any], row: dict[str, Any]) -> str:
    """The card a real row was measured on; rows written before promote recorded it were the searched card's."""
    return str(row.get("hardware") or doc["hardware"])


def measured_gc(row: dict[str, Any]) -> str:
    """The driver's collector mode of a real row; rows written before promote recorded it ran live."""
    return str(row.get("gc") or "live")


def run_promote(plan: EvalPlan, gpus: Sequence[str] = (), deadline_s: float | None = None, fresh: bool = False,
                only: Sequence[str] = (), hardware: str | None = None) -> list[dict[str, Any]]:
    """Measure the plan's defaults, candidates and probes on real; returns every row in ``<out>/real.jsonl``.

    ``gpus``: ids to pin runs to (none: one run at a time, unpinned); ``deadline_s``: seconds from now
    (the plan's by default); ``fresh``: start the results over; ``only``: these names only; ``hardware``: the
    card to measure on where it is not the one the search priced (the real tier checks it is the card present).
    A results file holding another card's rows, or rows measured with the driver's collector in another mode
    (`rsi_env.real.gc_pauses`), is refused before any engine starts: scores against defaults measured on another
    card, or with pauses the others did not have, mean nothing.
    """
    doc = load_candidates(plan)
    hw = load_hardware(hardware or doc["hardware"]).name
    out = Path(plan.out) / "real.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    if fresh and out.exists():
        out.unlink()
    existing = read_results(plan)
    other = sorted({measured_hardware(doc, r) for r in existing} - {hw})
    if other:
        raise RsiEnvError(f"{out} holds rows measured on {', '.join(other)}; this run measures on {hw}: give it "
                          "another --out, or --fresh to start the results over")
    mode = gc_mode(get_engine(doc.get("engine", "vllm")).name, plan.promote.gc)
    modes = sorted({measured_gc(r) for r in existing} - {mode})
    if modes:
        raise RsiEnvError(f"{out} holds rows measured with the driver's collector {', '.join(modes)}; this run "
                          f"measures with it {mode}: give it another --out, or --fresh to start the results over")
    done = {r["name"] for r in existing}
    todo = [e for e in [doc["defaults"], *doc["candidates"], *doc.get("probes", [])]
            if e["name"] not in done and (not only or e["name"] in only)]
    pool = _Pool(list(gpus))
    order = list(pool.free)
    print(json.dumps({"to_measure": [e["name"] for e in todo], "gpus": list(gpus) or None,
                      "estimated_s": round(estimated_makespan_s(todo, len(gpus)))}), flush=True)
    lock = threading.Lock()
    running: dict[str, RealTier] = {}
    stop = threading.Event()
    pinned = any(g.strip() for g in gpus)
    threads: list[threading.Thread] = []
    t_end = time.monotonic() + (plan.promote.deadline_s if deadline_s is None else deadline_s)

    def job(entry: dict[str, Any], ids: list[str], timeout_s: float) -> None:
        try:
            _run_one(entry, doc, plan, hw, ids, timeout_s, out, lock, running, stop)
        finally:
            with pool.cond:
                pool.free.extend(ids)
                pool.cond.notify_all()

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old = signal.signal(signal.SIGTERM, on_term) if threading.current_thread() is threading.main_thread() else None
    try:
        for entry in todo:
            need = int(entry["num_gpus"]) if pinned else 1
            if need > pool.size:
                print(json.dumps({"skipped": entry["name"], "why": f"needs {need} GPUs, {pool.size} given"}),
                      flush=True)
                continue
            with pool.cond:
                while len(pool.free) < need:
                    pool.cond.wait(timeout=1.0)
                left = t_end - time.monotonic()
                est = float(entry.get("est_real_s") or 0.0)
                if left < min(est, plan.promote.per_run_timeout_s):
                    print(json.dumps({"skipped": entry["name"], "why": "deadline", "left_s": round(left),
                                      "est_s": est}), flush=True)
                    continue
                pool.free.sort(key=order.index)  # lowest ids first, in the order given
                ids, pool.free = pool.free[:need], pool.free[need:]
            th = threading.Thread(target=job, args=(entry, ids, min(plan.promote.per_run_timeout_s, left)),
                                  name=f"promote-{entry['name']}", daemon=True)
            th.start()
            threads.append(th)
        for th in threads:
            while th.is_alive():
                th.join(timeout=1.0)
    except KeyboardInterrupt:
        stop.set()
        _kill_running(running, threads)
        raise
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
    return read_results(plan)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--plan", required=True, help="configs/eval/<plan>.yaml")
    p.add_argument("--gpus", default="", help="GPU ids to use in parallel, e.g. 0,1 (default: none pinned, one at a time)")
    p.add_argument("--deadline-s", type=float, default=None, help="seconds from now (default: the plan's)")
    p.add_argument("--only", default="", help="comma-separated names (defaults,c1,...) to measure")
    p.add_argument("--out", default=None, help="folder for real.jsonl (default: the plan's out)")
    p.add_argument("--fresh", action="store_true", help="start <out>/real.jsonl over instead of skipping what is there")
    p.add_argument("--hardware", default=None,
                   help="the card to measure on, where it is not the one the search priced (default: the plan's)")
    args = p.parse_args(argv)
    try:
        plan = load_plan(args.plan)
        if args.out:
            plan = dataclasses.replace(plan, out=Path(args.out))
        rows = run_promote(plan, [g for g in args.gpus.split(",") if g.strip()], args.deadline_s, args.fresh,
                       [s for s in args.only.split(",") if s], args.hardware)
    except RsiEnvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: every running engine was killed; what finished is in real.jsonl", file=sys.stderr)
        return 130
    print(json.dumps({"measured": [r["name"] for r in rows], "results": str(Path(plan.out) / "real.jsonl")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
