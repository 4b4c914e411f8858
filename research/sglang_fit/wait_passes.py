"""How many passes a many_small request's first token waits, real against the sim: the count behind the TTFT ratio.

    python3 research/sglang_fit/wait_passes.py [ROWS.jsonl ...]

`ttft_ratio.py` shows the sim's first token waiting 19.5-32.5 % more decode passes than SGLang's at low queueing,
and lease 16's m96 log shows the two schedules alike (`passes.py`). This counts, per request, the passes between its
arrival and its first token. Real: the every-pass rows' log lines (``passes``, the driver's clock) that fall between
the request's send and its first token (``requests``, the same clock); a prefill line is logged when its batch is
formed, a decode line when its result is processed, and the pipe's buffering blurs both, so the count is a reading,
not a timing. Sim: the passes the shipped sim starts between the request's arrival and its first token as the client
sees it (``frontend_s`` after the engine's). Printed: the median and mean count, the mean number of prefills among
them, and the distribution.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import statistics
from pathlib import Path
from typing import Any

from passes import sim_run

from rsi_env.engine.workload import Workload
from rsi_env.sim.sglang.simulate import sglang_calibration

ROOT = Path(__file__).resolve().parents[2]
H100 = ROOT / "data/sglang/0.5.17-h100"
ROWS = [H100 / "lease8/passes.jsonl", H100 / "lease10/rows.jsonl", H100 / "lease16/call1/rows.jsonl"]  # many_small logs


def waits(times: list[float], kinds: list[str], spans: list[tuple[float, float]]) -> tuple[list[int], list[int]]:
    """Per span (arrival, first token): the passes whose time falls inside it, and how many of them are prefills."""
    counts, prefills = [], []
    for a, f in spans:
        i, j = bisect.bisect_left(times, a), bisect.bisect_left(times, f)
        counts.append(j - i)
        prefills.append(sum(k == "prefill" for k in kinds[i:j]))
    return counts, prefills


def sim_waits(flags: dict[str, Any], model: str, hardware: str, workload: Workload) -> tuple[list[int], list[int]]:
    """`waits` over the shipped sim's passes (their start times) and its requests."""
    cal = sglang_calibration(hardware)
    passes, _, res = sim_run(flags, model, hardware, workload, cal)
    assert res is not None
    return waits([p["t"] for p in passes], [p["kind"] for p in passes],
                 [(r.arrival, r.first_token + cal.frontend_s) for r in res.reqs])


def show(label: str, counts: list[int], prefills: list[int]) -> None:
    dist = sorted(collections.Counter(counts).items())
    print(f"  {label}: median {statistics.median(counts):.0f}, mean {statistics.fmean(counts):.2f} passes "
          f"({statistics.fmean(prefills):.2f} prefills); " + ", ".join(f"{k}: {v}" for k, v in dist))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="*", type=Path, default=ROWS)
    args = ap.parse_args()
    for f in args.rows:
        for line in f.read_text().splitlines():
            r = json.loads(line)
            got, req = (r.get("passes") or {}).get("lines"), r.get("requests")
            if not got or not req:
                continue
            print(f"{r['workload']} {json.dumps(r['flags'])} ({f.parent.name}/{f.name}), TTFT p50 "
                  f"{1e3 * r['telemetry']['ttft_p50']:.1f} ms real")
            show("real", *waits(got["t"], got["kind"], list(zip(req["arrival_s"], req["first_token_s"], strict=True))))
            show("sim ", *sim_waits(r["flags"], r["model"], r["hardware"], Workload.from_dict(r["workload_spec"])))


if __name__ == "__main__":
    main()
