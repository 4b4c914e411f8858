"""SGLang's pass intervals on its own clock, read from an every-pass log (the driver run with decode_log_interval 1).

    python3 research/sglang_fit/engine_clock.py ROWS.jsonl [--from 1.0] [--to 3.5]

The driver stamps each log line when it reads it from the pipe, so the gap between two lines (what passes.py prices a
pass with) carries the pipe's buffering. SGLang's lines carry its own clock: a prefill line's input throughput is its
new tokens over the time since the last prefill line, a decode line's generation throughput the decoded tokens (one
per running request, `decode_log_interval` 1) over the time since the last decode line. Under the overlap scheduler
a prefill is logged when scheduled and a decode when its result is processed, one batch later (the loop schedules
and launches batch j, then processes batch j-1), so:

- a decode interval is decode passes only where the two lines before the decode line are decodes too (a prefill
  between the two decode batches is logged just before the first of them);
- a prefill interval is one prefill pass where the line before is a prefill and the line after is not a decode.

Prints both kinds' intervals (median, mean, count) within [--from, --to) seconds of the run, and all decode-after-
decode and prefill-after-prefill intervals without those conditions, beside each other.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def intervals(lines: dict[str, list], lo: float, hi: float) -> dict[str, list[float]]:
    """Engine-clock intervals (s) by kind; ``lines`` are the row's ``passes.lines`` columns."""
    t, kind = lines["t"], lines["kind"]
    out: dict[str, list[float]] = {"decode_pure": [], "decode_any": [], "prefill_pure": [], "prefill_any": []}
    for i in range(1, len(t)):
        if not lo <= t[i] < hi:
            continue
        if kind[i] == "decode" == kind[i - 1] and lines["gen_throughput"][i]:
            dt = lines["running"][i] / lines["gen_throughput"][i]
            out["decode_any"].append(dt)
            if i >= 2 and kind[i - 2] == "decode":
                out["decode_pure"].append(dt)
        if kind[i] == "prefill" == kind[i - 1] and lines["input_throughput"][i]:
            dt = lines["new_token"][i] / lines["input_throughput"][i]
            out["prefill_any"].append(dt)
            if i + 1 == len(t) or kind[i + 1] != "decode":
                out["prefill_pure"].append(dt)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", type=Path)
    ap.add_argument("--from", dest="lo", type=float, default=1.0)
    ap.add_argument("--to", dest="hi", type=float, default=3.5)
    args = ap.parse_args()
    for line in args.rows.read_text().splitlines():
        row = json.loads(line)
        got = row.get("passes") or {}
        cols = got.get("lines") or {}
        if got.get("decode_log_interval") != 1 or not cols.get("t"):
            continue
        run = [r for i, r in enumerate(cols["running"]) if args.lo <= cols["t"][i] < args.hi]
        print(f"{row['workload']} {json.dumps(row['flags'])}: {len(run)} lines, mean running "
              f"{statistics.fmean(run):.0f}")
        for name, xs in intervals(cols, args.lo, args.hi).items():
            if xs:
                print(f"  {name:13s} median {1e3 * statistics.median(xs):6.2f} ms  mean "
                      f"{1e3 * statistics.fmean(xs):6.2f} ms  n {len(xs)}")


if __name__ == "__main__":
    main()
