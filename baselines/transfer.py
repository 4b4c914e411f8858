"""Measured transfer: does experience on some (model, chip) pairs make a search on a held-out one faster?

``python -m baselines.transfer`` fills a fresh experience store with searches on the *source* pairs
(sim tier), then searches each held-out *target* — another model, another chip, non-NVIDIA ones
included — twice per seed: cold, and warm-started from the store's proposals (`warm_indices`).
The target runs record nothing (the store holds the sources only, so no seed learns from another
seed of the same target). For each (target, seed) the best known objective is the best that any
run measured (every search, cold and warm); a run's *measurements to 95 %* is the first measurement
whose objective reached 95 % of it (``score >= best + log 0.95``: the scores are log ratios).
Prints a markdown table and writes ``OUT/transfer.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from baselines.protocol import eval_seeds, json_safe, limit_threads
from baselines.results import RunResult
from baselines.warm_start import warm_indices
from rsi_env.search import SEARCHES
from rsi_env.search.evaluator import Evaluator
from rsi_env.store import ExperienceStore, recording

__all__ = ["SOURCES", "TARGETS", "fill_store", "main", "run_transfer", "to_fraction"]

# Experience: three models on five NVIDIA chips. Held out: a model (Mistral-7B) and two non-NVIDIA chips.
SOURCES = tuple(f"{m}@{h}" for m in ("llama-3.1-8b", "qwen2.5-7b", "llama-3.2-1b")
                for h in ("h200", "h100-sxm", "a100-80gb", "l40s", "b200"))
TARGETS = ("qwen2.5-7b@mi300x", "llama-3.1-8b@ascend-910b", "mistral-7b@h200")
FRACTION = 0.95


def _pair(s: str) -> tuple[str, str]:
    model, _, hw = s.partition("@")
    return model, hw


@contextmanager
def _store_env(url: str) -> Iterator[None]:
    old = os.environ.get("RSI_ENV_STORE")
    os.environ["RSI_ENV_STORE"] = url
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("RSI_ENV_STORE", None)
        else:
            os.environ["RSI_ENV_STORE"] = old


def fill_store(url: str, env_id: str, sources: Sequence[str], budget: int, seeds: Sequence[int],
               searches: Sequence[str] = ("optuna_tpe",)) -> dict[str, Any]:
    """Run every search on every source pair at every seed, recording into the store at ``url``; returns its stats."""
    with _store_env(url):
        for src in sources:
            model, hw = _pair(src)
            for seed in seeds:
                for search in searches:
                    with recording(source=f"transfer-source:{search}"):
                        ev = Evaluator(env_id, seed, budget, env_kwargs={"model": model, "hardware": hw})
                        SEARCHES[search](ev, np.random.default_rng(seed), 1)
                        ev.close()
        return ExperienceStore(url).stats()


def to_fraction(history: Sequence[float], best: float, fraction: float = FRACTION) -> int | None:
    """Measurements until the objective first reached ``fraction`` of ``best`` (``None``: never)."""
    if not math.isfinite(best):
        return None
    bar = best + math.log(fraction)
    return next((i + 1 for i, h in enumerate(history) if h >= bar - 1e-12), None)


def run_transfer(env_id: str, store: ExperienceStore, targets: Sequence[str], seeds: Sequence[int], budget: int,
                 searches: Sequence[str], n_proposals: int = 5) -> list[dict[str, Any]]:
    """Cold and warm runs of each search on each target and seed; one row per (target, search, seed).

    The best known objective of a (target, seed) is the best that any of its runs measured.
    """
    rows = []
    with _store_env("off"):  # the targets stay out of the store: held out for every seed
        for tgt in targets:
            model, hw = _pair(tgt)
            for seed in seeds:
                runs: dict[tuple[str, str], RunResult] = {}
                props = 0
                for search in searches:
                    for mode in ("cold", "warm"):
                        ev = Evaluator(env_id, seed, budget, env_kwargs={"model": model, "hardware": hw})
                        if mode == "warm":
                            ev.warm = warm_indices(ev, store, n=n_proposals)
                            props = len(ev.warm)
                        SEARCHES[search](ev, np.random.default_rng(seed), 1)
                        runs[(search, mode)] = RunResult.from_evaluator(search, ev)
                        ev.close()
                best = max(r.best_score for r in runs.values())
                for search in searches:
                    cold, warm = runs[(search, "cold")], runs[(search, "warm")]
                    rows.append({"target": tgt, "search": search, "seed": seed, "proposals": props,
                                 "best_known_pct": math.expm1(best) * 100 if math.isfinite(best) else None,
                                 "cold_to_95": to_fraction(cold.history, best),
                                 "warm_to_95": to_fraction(warm.history, best),
                                 "cold_best_pct": cold.best_measured_pct, "warm_best_pct": warm.best_measured_pct,
                                 "cold_gpu_s": cold.gpu_seconds, "warm_gpu_s": warm.gpu_seconds,
                                 "cold_usd": cold.cost_usd, "warm_usd": warm.cost_usd})
    rows.sort(key=lambda r: (targets.index(r["target"]), searches.index(r["search"]), r["seed"]))
    return rows


def _n(x: int | None, budget: int) -> str:
    return f">{budget}" if x is None else str(x)


def meets_bar(row: dict[str, Any], budget: int) -> bool:
    """Warm reached 95 % of the best known in at most half the measurements cold needed (never: ``budget + 1``)."""
    cold = row["cold_to_95"] if row["cold_to_95"] is not None else budget + 1
    warm = row["warm_to_95"] if row["warm_to_95"] is not None else math.inf
    return warm <= cold / 2


def markdown(env_id: str, rows: Sequence[dict[str, Any]], budget: int, meta: dict[str, Any]) -> str:
    lines = [f"### Transfer on {env_id}: measurements to 95 % of the best known objective", "",
             f"Sources (in the store, {meta['store']['measurements']} measurements): {', '.join(meta['sources'])}; "
             f"{', '.join(meta.get('source_searches', []))}, {meta['source_budget']} measurements x seeds "
             f"{meta['source_seeds']} each. Targets held out. "
             f"Budget {budget} per run, reset seeds {meta['seeds']}.", "",
             "| target | search | cold, per seed | warm, per seed | cold median | warm median | warm <= half of cold | "
             "GPU-s cold / warm (sim-equivalent) |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |"]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["target"], r["search"]), []).append(r)
    for (tgt, search), rs in groups.items():
        cold = [r["cold_to_95"] if r["cold_to_95"] is not None else budget + 1 for r in rs]
        warm = [r["warm_to_95"] if r["warm_to_95"] is not None else budget + 1 for r in rs]
        ok = sum(meets_bar(r, budget) for r in rs)
        lines.append(f"| {tgt} | {search} | {', '.join(_n(r['cold_to_95'], budget) for r in rs)} | "
                     f"{', '.join(_n(r['warm_to_95'], budget) for r in rs)} | {np.median(cold):.0f} | "
                     f"{np.median(warm):.0f} | {ok}/{len(rs)} | "
                     f"{np.mean([r['cold_gpu_s'] for r in rs]):.0f} / {np.mean([r['warm_gpu_s'] for r in rs]):.0f} |")
    total = sum(meets_bar(r, budget) for r in rows)
    lines += ["", f"Warm start reached 95 % of the best known objective in at most half the measurements of a cold "
              f"start on {total}/{len(rows)} (target, search, seed) runs."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    limit_threads()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="RSI/Batching-v0")
    p.add_argument("--sources", default=",".join(SOURCES), help="model@hardware, comma-separated")
    p.add_argument("--targets", default=",".join(TARGETS), help="held-out model@hardware, comma-separated")
    p.add_argument("--source-budget", type=int, default=60)
    p.add_argument("--source-searches", default="optuna_tpe,coordinate_descent",
                   help="the searches whose experience fills the store")
    p.add_argument("--source-seeds", type=int, default=1, help="searches per source pair (workload seeds 0..N-1)")
    p.add_argument("--budget", type=int, default=30, help="measurements per target run")
    p.add_argument("--seeds", type=int, default=5, help="held-out reset seeds per target")
    p.add_argument("--searches", default="optuna_tpe,random_search")
    p.add_argument("--store", default=None, help="store URL for the sources (default: a fresh temporary file)")
    p.add_argument("--out", type=Path, default=Path("results/transfer"))
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="rsi-transfer-")
    url = args.store or f"sqlite:///{tmp}/sources.sqlite"
    sources = [s for s in args.sources.split(",") if s]
    src_searches = [s for s in args.source_searches.split(",") if s]
    stats = fill_store(url, args.env, sources, args.source_budget, list(range(args.source_seeds)), src_searches)
    seeds = eval_seeds(args.seeds)
    rows = run_transfer(args.env, ExperienceStore(url), [t for t in args.targets.split(",") if t], seeds,
                        args.budget, [s for s in args.searches.split(",") if s])
    meta = {"sources": sources, "source_searches": src_searches, "source_budget": args.source_budget,
            "source_seeds": list(range(args.source_seeds)),
            "seeds": seeds, "store": stats, "wall_s": time.perf_counter() - t0}
    text = markdown(args.env, rows, args.budget, meta) + f"\n({meta['wall_s']:.0f} s on this machine)\n"
    print(text, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "transfer.md").write_text(text)
    (args.out / "transfer.json").write_text(json.dumps(json_safe({"meta": meta, "rows": rows}), indent=1))
    if args.store is None:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"meta": meta, "rows": rows}


if __name__ == "__main__":
    main()
