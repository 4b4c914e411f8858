"""A suite run's report: pass@1, pass@k and mean reward, overall and by front and difficulty, per agent.

pass@k is the unbiased estimator of Chen et al. 2021 (`rsi_env.suite.passk`) over each instance's attempts,
averaged over instances; an instance attempted fewer than ``k`` times counts at k = its attempts. The report
also sums what the attempts spent: tokens, GPU-seconds charged, wall seconds. `write_report` writes it as
JSON and Markdown, and a plot of pass@1 by front and by difficulty with the agents side by side.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rsi_env.suite.instance import DIFFICULTIES, FRONTS
from rsi_env.suite.passk import pass_at_k
from rsi_env.suite.runner import Attempt

__all__ = ["summarize", "write_report"]


def _rates(attempts: Sequence[Attempt], k: int) -> dict[str, Any]:
    per: dict[str, list[Attempt]] = defaultdict(list)
    for a in attempts:
        per[a.instance].append(a)
    if not per:
        return {"instances": 0, "attempts": 0, "pass_at_1": None, f"pass_at_{k}": None, "mean_reward": None}
    p1 = [pass_at_k(len(v), sum(a.passed for a in v), 1) for v in per.values()]
    pk = [pass_at_k(len(v), sum(a.passed for a in v), min(k, len(v))) for v in per.values()]
    return {"instances": len(per), "attempts": len(attempts), "pass_at_1": sum(p1) / len(p1),
            f"pass_at_{k}": sum(pk) / len(pk), "mean_reward": sum(a.reward for a in attempts) / len(attempts)}


def summarize(attempts: Sequence[Attempt], k: int = 1) -> dict[str, Any]:
    """One agent's report over ``attempts`` (the same suite)."""
    agents = sorted({a.agent for a in attempts})
    out: dict[str, Any] = {"suite": attempts[0].suite if attempts else None, "agent": ",".join(agents), "k": k,
                           **_rates(attempts, k)}
    out["by_front"] = {f: _rates([a for a in attempts if a.front == f], k) for f in FRONTS
                       if any(a.front == f for a in attempts)}
    out["by_difficulty"] = {d: _rates([a for a in attempts if a.difficulty == d], k) for d in DIFFICULTIES
                            if any(a.difficulty == d for a in attempts)}
    out["tokens"] = sum(a.tokens for a in attempts)
    out["gpu_seconds"] = round(sum(a.gpu_seconds for a in attempts), 3)
    out["measurements"] = sum(a.measurements for a in attempts)
    out["seconds"] = round(sum(a.seconds for a in attempts), 3)
    out["submitted"] = sum(a.submitted for a in attempts)
    out["errors"] = sum(a.error is not None for a in attempts)
    return out


def _fmt(x: Any) -> str:
    return "–" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))


def _markdown(reports: dict[str, dict[str, Any]], k: int) -> str:
    lines = [f"# Suite report: {next(iter(reports.values()))['suite']}", "",
             f"| agent | instances | attempts | pass@1 | pass@{k} | mean reward | tokens | GPU-s charged | errors |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in reports.items():
        lines.append(f"| {name} | {r['instances']} | {r['attempts']} | {_fmt(r['pass_at_1'])} | "
                     f"{_fmt(r[f'pass_at_{k}'])} | {_fmt(r['mean_reward'])} | {r['tokens']} | {r['gpu_seconds']:.0f} | "
                     f"{r['errors']} |")
    for part, keys in (("by_front", FRONTS), ("by_difficulty", DIFFICULTIES)):
        lines += ["", f"## pass@1 {part.replace('_', ' ')}", "", "| agent | " + " | ".join(keys) + " |",
                  "| --- |" + " --- |" * len(keys)]
        for name, r in reports.items():
            cells = [_fmt(r[part][c]["pass_at_1"]) + f" ({r[part][c]['instances']})" if c in r[part] else "–"
                     for c in keys]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _plot(reports: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cats = [("by_front", c) for c in FRONTS] + [("by_difficulty", c) for c in DIFFICULTIES]
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.8 / max(len(reports), 1)
    for j, (name, r) in enumerate(reports.items()):
        vals = [(r[p].get(c) or {}).get("pass_at_1") or 0.0 for p, c in cats]
        ax.bar([i + j * width for i in range(len(cats))], vals, width, label=name)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(cats))])
    ax.set_xticklabels([c for _, c in cats])
    ax.axvline(len(FRONTS) - 0.5 + 0.4 - width / 2, color="grey", lw=0.5)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("pass@1")
    ax.set_title(f"{next(iter(reports.values()))['suite']}: pass@1 by front and by difficulty")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(out_dir: Path, attempts: Sequence[Attempt], k: int = 1, plot: bool = True) -> dict[str, Any]:
    """``report.json``, ``report.md`` (and ``report.png``) in ``out_dir`` for every agent in ``attempts``."""
    by_agent: dict[str, list[Attempt]] = defaultdict(list)
    for a in attempts:
        by_agent[a.agent].append(a)
    reports = {name: summarize(v, k) for name, v in sorted(by_agent.items())}
    out_dir = Path(out_dir)
    (out_dir / "report.json").write_text(json.dumps(reports, indent=2, sort_keys=True) + "\n")
    if reports:
        (out_dir / "report.md").write_text(_markdown(reports, k))
        if plot:
            _plot(reports, out_dir / "report.png")
    return reports
