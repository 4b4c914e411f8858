"""The sim's pick against the real engine's, on the means of repeated starts of an evaluation plan's configurations.

    python3 research/sglang_fit/pick.py ROWS.jsonl ... [--candidates FILE] [--calibration FILE ...]

ROWS: driver rows (`rsi_env.real.sglang_driver`) of a candidates file's defaults and candidates on its workloads (by
default batching_sglang_h100_b's), one start per (configuration, every workload), or a promotion's ``real.jsonl``
(one line per configuration, its workloads' telemetry in order; each promotion one start). Rows with server-argument
overrides (an every-pass log) are left out, and so are starts with a workload missing or failed.

Per start, the task's SLO-adjusted objective per workload (`rsi_env.reward.objective.adjusted_value`) and the start's
score: the mean over workloads of log(objective / the defaults' mean objective). Per configuration, the mean score
over its starts with its standard error, beside the sim's score (each calibration given; the chip's shipped one
first). The rule (research/plans/sglang_lease10.md): the sim's pick is within 5 % of the best configuration's mean or
not; where the two means differ by less than one standard error of their difference the pick is not resolved.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

from closed_loop import driver_rows

from rsi_env.engine.task import load_task
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Workload
from rsi_env.reward.objective import adjusted_value, score
from rsi_env.sim.sglang import simulate_sglang_detailed

ROOT = Path(__file__).resolve().parents[2]


def parser(doc: str) -> argparse.ArgumentParser:
    """The arguments pick.py, repeat.py and errors.py share: row files, the candidates file, more calibrations."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("rows", type=Path, nargs="+")
    ap.add_argument("--candidates", type=Path, default=ROOT / "configs/eval/batching_sglang_h100_b.candidates.json")
    ap.add_argument("--calibration", action="append", default=[], help="another calibration file for the sim")
    return ap


def read_rows(paths: list[Path], doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Driver rows from files of driver rows or of a promotion's lines (each made one row per workload of ``doc``)."""
    lines = [json.loads(line) for f in paths for line in f.read_text().splitlines() if line.strip()]
    return [r for x in lines for r in (driver_rows(x, doc) if isinstance(x.get("telemetry"), list) else [x])]


def flag_names(doc: dict[str, Any]) -> dict[str, str]:
    """A candidates file's configurations by their flags (sorted JSON) -> name."""
    return {json.dumps(e["flags"], sort_keys=True): e["name"] for e in [doc["defaults"], *doc["candidates"]]}


def starts(rows: list[dict[str, Any]], names: dict[str, str], workloads: list[str]) -> list[tuple[str, dict]]:
    """(configuration, {workload: Telemetry}) per start, in the order measured; a start is one row per workload."""
    out: list[tuple[str, dict]] = []
    for r in rows:
        if r.get("server_arg_overrides"):
            continue
        name = names.get(json.dumps(r["flags"], sort_keys=True))
        workload = r["workload_spec"]["name"]
        if name is None:
            raise SystemExit(f"a row's flags are none of the plan's configurations: {r['flags']}")
        if not out or out[-1][0] != name or workload in out[-1][1]:
            out.append((name, {}))
        out[-1][1][workload] = Telemetry.from_dict(r["telemetry"])
    whole = [(n, t) for n, t in out if set(t) == set(workloads) and all(x.ok for x in t.values())]
    if len(whole) < len(out):
        print(f"{len(out) - len(whole)} start(s) left out: a workload missing or failed")
    return whole


def mean_se(xs: list[float]) -> tuple[float, float]:
    return statistics.fmean(xs), (statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else math.nan)


def pct(x: float) -> float:
    return 100.0 * math.expm1(x)


def main() -> None:
    args = parser(__doc__).parse_args()
    doc = json.loads(args.candidates.read_text())
    task = load_task(doc["env"])
    wls = [Workload.from_dict(w) for w in doc["workloads"]]
    wnames = [w.name for w in wls]
    entries = [doc["defaults"], *doc["candidates"]]
    measured = starts(read_rows(args.rows, doc), flag_names(doc), wnames)
    order = [e["name"] for e in entries if any(n == e["name"] for n, _ in measured)]
    base = {w: statistics.fmean(adjusted_value(t[w], task) for n, t in measured if n == "defaults") for w in wnames}
    print(f"{len(measured)} starts; the defaults' mean objective: "
          + ", ".join(f"{w} {v:,.0f}" for w, v in base.items()))
    per: dict[str, list[float]] = {n: [] for n in order}
    for n, t in measured:
        s = statistics.fmean(math.log(adjusted_value(t[w], task) / base[w]) for w in wnames)
        per[n].append(s)
        print(f"  {n:9s} " + "  ".join(f"{w} {adjusted_value(t[w], task):9,.0f} (tok/s {t[w].out_tok_per_s:7,.0f}, "
                                       f"TPOT p50 {1e3 * t[w].tpot_p50:4.1f} ms)" for w in wnames)
              + f"  score {pct(s):+6.1f} %")
    cals: list[str | None] = [None, *args.calibration]
    sims: dict[str | None, dict[str, float]] = {}
    for cal in cals:
        tels = {e["name"]: [simulate_sglang_detailed(e["flags"], doc["model"], doc["hardware"], w,
                                                     calibration=cal)[0] for w in wls] for e in entries
                if e["name"] in order}
        sims[cal] = {n: score(tels[n], tels["defaults"], task) for n in order}
    print(f"\n{'':9s} {'real mean':>10s} {'SE':>6s} " + " ".join(f"{'sim ' + Path(c or 'shipped').stem[:18]:>24s}"
                                                            for c in cals))
    stats = {n: mean_se(per[n]) for n in order}
    for n in order:
        m, se = stats[n]
        print(f"{n:9s} {pct(m):+9.1f}% {100 * se:5.1f} " + " ".join(f"{pct(sims[c][n]):+23.1f}%" for c in cals)
              + f"   ({len(per[n])} starts)")
    best = max(order, key=lambda n: stats[n][0])
    for c in cals:
        pick = max(order, key=lambda n: sims[c][n])
        gap = stats[best][0] - stats[pick][0]
        se = math.hypot(stats[best][1], stats[pick][1]) if pick != best else 0.0
        verdict = ("the same" if pick == best else "not resolved (within one SE)" if gap < se
                   else "within 5 %" if math.expm1(gap) <= 0.05 else "not within 5 %")
        print(f"sim ({c or 'shipped'}) picks {pick}; best on real {best}: gap {100 * gap:.1f} points, "
              f"SE {100 * se:.1f}: {verdict}")


if __name__ == "__main__":
    main()
