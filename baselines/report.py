"""Results of a comparison: a markdown table, a JSON file and a learning-curve plot per task.

Per baseline: the mean and per-seed improvement over vLLM's defaults (what the agent keeps: its
best configuration or the defaults), the best configuration measured (which can be worse than the
defaults), measurements used, wall seconds, and the GPU-seconds the run's measurements took (on the
sim tier: would have taken on the real engine, the baseline's included) with their cost in USD. The
plot is the best score measured so far against the number of measurements, averaged over seeds, as a
change from vLLM's defaults.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from baselines.protocol import json_safe
from baselines.results import RunResult

__all__ = ["TEN_PERCENT", "curve", "main", "rebuild", "summarize", "task_header", "write_markdown", "write_plot",
           "write_report"]

TEN_PERCENT = 10.0  # the gain over vLLM's defaults a task should offer (issue 6's bar)


def _mean(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return float(np.mean(vals)) if vals else None


def summarize(results: Sequence[RunResult]) -> dict[str, dict[str, Any]]:
    """Per baseline, in first-seen order: means over seeds and the per-seed numbers."""
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r.baseline for r in results):
        rs = [r for r in results if r.baseline == name]
        out[name] = {
            "improvement_pct_mean": _mean([r.improvement_pct for r in rs]),
            "best_measured_pct_mean": _mean([r.best_measured_pct for r in rs]),
            "measurements_mean": _mean([float(r.measurements) for r in rs]),
            "to_best_mean": _mean([None if r.to_best is None else float(r.to_best) for r in rs]),
            "wall_s_mean": _mean([r.wall_s for r in rs]),
            "gpu_seconds_mean": _mean([r.gpu_seconds for r in rs]),
            "cost_usd_mean": _mean([r.cost_usd for r in rs]),
            "seeds": [r.seed for r in rs],
            "improvement_pct": [r.improvement_pct for r in rs],
            "measurements": [r.measurements for r in rs],
        }
    return out


def curve(rs: Sequence[RunResult], budget: int) -> np.ndarray:
    """Mean over runs of the best so far after 1..budget measurements, in % vs vLLM's defaults (as the tables).

    A run that stopped keeps its best; NaN until every run has measured something successfully (a mean
    over some of the seeds would jump).
    """
    rows = []
    for r in rs:
        h = list(r.history[:budget]) or [-math.inf]
        rows.append(h + [h[-1]] * (budget - len(h)))
    arr = np.array(rows, dtype=float)
    arr[~np.isfinite(arr)] = np.nan
    arr = np.expm1(arr) * 100.0
    return np.asarray(arr.mean(axis=0)) if len(arr) else np.full(budget, np.nan)


def _fmt(x: float | None, digits: int = 1) -> str:
    return "—" if x is None else f"{x:+.{digits}f}"


def task_header(results: Sequence[RunResult]) -> str:
    """What a reader must know before the table: whether any baseline found a 10 % gain here."""
    best = max((s["improvement_pct_mean"] or 0.0 for s in summarize(results).values()), default=0.0)
    if best >= TEN_PERCENT:
        return ""
    return (f"No baseline finds a configuration {TEN_PERCENT:.0f} % better than vLLM's defaults here "
            f"(best mean {best:+.2f} %).")


def write_markdown(env_id: str, results: Sequence[RunResult], notes: Mapping[str, str], path: Path,
                   header: str = "") -> str:
    """The task's table (and any per-baseline notes) as markdown; returns the text."""
    summary = summarize(results)
    digits = 2 if all(abs(s["improvement_pct_mean"] or 0.0) < 10 for s in summary.values()) else 1
    lines = [f"### {env_id}", ""]
    if header:
        lines += [header, ""]
    lines += ["| baseline | improvement vs vLLM defaults, mean (%) | per seed (%) | best measured, mean (%) "
              "| measurements used | to its best | wall s | GPU-s (USD) |",
              "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, s in summary.items():
        per_seed = ", ".join(_fmt(x, digits) for x in s["improvement_pct"])
        lines.append(f"| {name} | {_fmt(s['improvement_pct_mean'], digits)} | {per_seed} | "
                     f"{_fmt(s['best_measured_pct_mean'], digits)} | {s['measurements_mean']:.1f} | "
                     f"{'—' if s['to_best_mean'] is None else format(s['to_best_mean'], '.1f')} | "
                     f"{s['wall_s_mean']:.2f} | {s['gpu_seconds_mean'] or 0:.0f} (${s['cost_usd_mean'] or 0:.2f}) |")
    for name, note in notes.items():
        lines.append(f"\n*{name}*: {note}")
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def write_plot(env_id: str, results: Sequence[RunResult], budget: int, path: Path) -> None:
    """Best objective vs measurements, one line per baseline (mean over seeds), as a PNG of two panels.

    Left: what the agent keeps (its best or vLLM's defaults, whichever is better); right: the best
    configuration it measured, which shows progress where nothing beats the defaults.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), dpi=110)
    x = np.arange(1, budget + 1)
    for name in dict.fromkeys(r.baseline for r in results):
        c = curve([r for r in results if r.baseline == name], budget)
        kept = curve([RunResult(r.baseline, r.env_id, r.seed, r.budget, [max(h, 0.0) for h in r.history], r.wall_s)
                      for r in results if r.baseline == name], budget)
        axes[0].plot(x, kept, drawstyle="steps-post", label=name)
        axes[1].plot(x, c, drawstyle="steps-post", label=name)
    for ax, title in zip(axes, ("kept: best or vLLM's defaults", "best configuration measured"), strict=True):
        ax.axhline(0.0, color="grey", lw=0.8, ls="--", label="vLLM defaults")
        ax.set_xlabel("measurements")
        ax.set_ylabel("objective vs vLLM defaults (%)")
        ax.set_title(title, fontsize=10)
    axes[1].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{env_id}: mean over {len({r.seed for r in results})} held-out seeds (sim tier)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_report(env_id: str, results: Sequence[RunResult], budget: int, out: Path,
                 notes: Mapping[str, str] | None = None, meta: Mapping[str, Any] | None = None) -> dict[str, Path]:
    """Write ``results.json``, ``results.md`` and ``curves.png`` for one task under ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "markdown": out / "results.md", "plot": out / "curves.png"}
    payload = {"env_id": env_id, "budget": budget, **dict(meta or {}), "summary": summarize(results),
               "notes": dict(notes or {}), "runs": [r.to_dict() for r in results]}
    paths["json"].write_text(json.dumps(json_safe(payload), indent=1))
    write_markdown(env_id, results, notes or {}, paths["markdown"], task_header(results))
    write_plot(env_id, results, budget, paths["plot"])
    return paths


def rebuild(out: Path) -> str:
    """Rewrite every task's markdown and plot under ``out`` from its ``results.json``, and ``summary.md``."""
    tables = []
    for path in sorted(out.glob("*/results.json")):
        data = json.loads(path.read_text())
        results = [RunResult.from_dict(r) for r in data["runs"]]
        meta = {k: v for k, v in data.items() if k not in ("env_id", "budget", "summary", "notes", "runs")}
        paths = write_report(data["env_id"], results, int(data["budget"]), path.parent, data.get("notes"), meta)
        tables.append(paths["markdown"].read_text())
    summary = out / "summary.md"
    head = summary.read_text().splitlines()[0] + "\n" if summary.exists() else ""
    summary.write_text(head + "\n" + "\n".join(tables))
    return summary.read_text()


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m baselines.report DIR``: rebuild the tables and plots of a ``run_all`` output folder."""
    import argparse

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("out", type=Path)
    print(rebuild(p.parse_args(argv).out))


if __name__ == "__main__":
    main()
