"""SGLang's pass intervals on its own clock, by position in their run, beside the sim's passes at the same positions.

    python3 research/sglang_fit/engine_clock.py ROWS.jsonl [--from 1.0] [--to 3.5] [--sim]

The driver stamps each log line when it reads it from the pipe, so the gap between two lines (what passes.py prices a
pass with) carries the pipe's buffering. SGLang's lines carry its own clock: a prefill line's input throughput is its
new tokens over the time since the last prefill line, a decode line's generation throughput the decoded tokens (one
per running request, with `decode_log_interval` 1) over the time since the last decode line. So the second and later
lines of a run of one kind give that kind's interval on the engine's clock; the first of a run spans the other kind's
run and gives none. On Batching-v0's closed loop the passes come in runs (three decodes, three prefills, on real and
sim alike), so the intervals are printed by position in their run: a decode line is logged when its result is
processed, in the loop iteration that first schedules and launches the next batch, so the last decode of a run also
carries the scheduling of the prefill that follows it.

Prints, for each row with an every-pass log, the median interval (and count) of each kind at each position within
[--from, --to) seconds of the run; with --sim, the sim's pass times (shipped calibration) at the same positions, for
its passes with at least 240 running requests.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


def positions(kinds: Iterable[str]) -> Iterator[int]:
    """Each pass's position (1, 2, ...) in its run of passes of one kind."""
    run, last = 0, None
    for kind in kinds:
        run = run + 1 if kind == last else 1
        last = kind
        yield run


def by_position(lines: dict[str, list], lo: float, hi: float) -> dict[str, dict[int, list[float]]]:
    """Engine-clock intervals (s) by kind and position (2, 3, ...) in their run; ``lines``: ``passes.lines``."""
    out: dict[str, dict[int, list[float]]] = {"decode": defaultdict(list), "prefill": defaultdict(list)}
    for i, (kind, run) in enumerate(zip(lines["kind"], positions(lines["kind"]), strict=True)):
        if run < 2 or not lo <= lines["t"][i] < hi:
            continue
        if kind == "decode" and lines["gen_throughput"][i]:
            out[kind][run].append(lines["running"][i] / lines["gen_throughput"][i])
        elif kind == "prefill" and lines["input_throughput"][i]:
            out[kind][run].append(lines["new_token"][i] / lines["input_throughput"][i])
    return out


def sim_by_position(row: dict[str, Any]) -> dict[str, dict[int, list[float]]]:
    """The sim's pass times (s) by kind and position in their run, for the row's configuration and workload."""
    from passes import sim_passes

    from rsi_env.engine.workload import Workload

    out: dict[str, dict[int, list[float]]] = {"decode": defaultdict(list), "prefill": defaultdict(list)}
    passes = sim_passes(row["flags"], row["model"], row["hardware"], Workload.from_dict(row["workload_spec"]))
    for p, run in zip(passes, positions(p["kind"] for p in passes), strict=True):
        if p["running"] >= 240:
            out[p["kind"]][run].append(p["dt"])
    return out


def show(label: str, got: dict[str, dict[int, list[float]]]) -> None:
    for kind, pos in got.items():
        cells = [f"{n}: {1e3 * statistics.median(xs):5.1f} ms (n {len(xs)})" for n, xs in sorted(pos.items())
                 if len(xs) >= 3]
        print(f"  {label:4s} {kind:8s} " + ", ".join(cells))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", type=Path)
    ap.add_argument("--from", dest="lo", type=float, default=1.0)
    ap.add_argument("--to", dest="hi", type=float, default=3.5)
    ap.add_argument("--sim", action="store_true", help="the sim's pass times beside them")
    args = ap.parse_args()
    for line in args.rows.read_text().splitlines():
        row = json.loads(line)
        got = row.get("passes") or {}
        cols = got.get("lines") or {}
        if got.get("decode_log_interval") != 1 or not cols.get("t"):
            continue
        run = [r for r, t in zip(cols["running"], cols["t"], strict=True) if args.lo <= t < args.hi]
        print(f"{row['workload']} {json.dumps(row['flags'])}: {len(run)} lines, mean running "
              f"{statistics.fmean(run):.0f}")
        show("real", by_position(cols, args.lo, args.hi))
        if args.sim:
            show("sim", sim_by_position(row))


if __name__ == "__main__":
    main()
