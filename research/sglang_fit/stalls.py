"""Pauses of the SGLang driver's process in the closed-loop rows, and the sim beside the stretches without them.

    python3 research/sglang_fit/stalls.py [ROWS.jsonl ...]   (default: every H100 row with the driver's samples)

The driver samples SGLang's gauges and the host's CPU every 50 ms from its event loop (`rsi_env.real.host.CpuShares`
stamps each sample); a gap between two stamps far past 50 ms is a pause of the whole process, the one that runs
SGLang's tokenizer manager beside the client. Per row: the longest gap and where it fell, the time lost to gaps past
100 ms, and the sim's output throughput over the real one (shipped calibration), on the whole run and over a steady
stretch clear of the pause (`steady_window`; tokens placed by each request's first token and finish). Where the row
logged every decode
pass (``decode_log_interval`` 1), SGLang's own counts show what the scheduler did meanwhile: the running requests at
the decode passes around the pause, and the decode tokens per second over stretches of one second or more where it
held every user, beside the sim's over its own such stretches (`passes.sim_passes`). Where the row has the driver's
own collections (`counters.driver_gc`), the generation-2 ones and any starting within 0.1 s of the longest gap.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
from passes import real_passes, sim_passes

from rsi_env.engine.workload import Workload
from rsi_env.evaluate.promote import measured_gc
from rsi_env.sim.sglang.simulate import sglang_calibration, simulate_sglang_detailed

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = [ROOT / "data/sglang/0.5.17-h100/lease8/passes.jsonl", ROOT / "data/sglang/0.5.17-h100/lease8/heldout.jsonl",
           ROOT / "research/sglang_fit/rows/lease5-many_small.jsonl"]
TICK_S = 0.05


def token_rate(first: np.ndarray, finish: np.ndarray, out_len: np.ndarray, lo: float, hi: float) -> float:
    """Output tokens per second made in [lo, hi): each request's first token at its time, the rest spread evenly
    from its first token to its finish."""
    made = 0.0
    for f, e, k in zip(first, finish, out_len, strict=True):
        made += float(lo <= f < hi)
        if k > 1 and e > f:
            made += (k - 1) * max(min(e, hi) - max(f, lo), 0.0) / (e - f)
    return made / (hi - lo)


def steady_window(row: dict[str, Any], pause: tuple[float, float, float]) -> tuple[float, float]:
    """From 1 s (past the first wave) to the longest pause's start, or to 75 % of the run where that pause is under
    0.15 s; past the pause where it came before 1.5 s."""
    end = 0.75 * max(row["requests"]["finish_s"])
    if pause[0] <= 0.15:
        return 1.0, end
    if pause[1] >= 1.5:
        return 1.0, pause[1]
    return pause[1] + pause[0] + 0.5, end


def sampler_gaps(row: dict[str, Any]) -> tuple[float, float, float] | None:
    """(longest gap between the driver's samples, its start, seconds lost to gaps over 2 ticks), or None."""
    shares = (row.get("counters") or {}).get("host_cpu") or {}
    t = np.asarray(shares.get("t") or [], dtype=float)
    if len(t) < 3:
        return None
    gaps = np.diff(t)
    i = int(np.argmax(gaps))
    return float(gaps[i]), float(t[i]), float(np.sum(np.clip(gaps[gaps > 2 * TICK_S] - TICK_S, 0.0, None)))


def logged_decodes(row: dict[str, Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """The decode passes' (time on the driver's clock, running requests) where every one was logged, else None."""
    lines = real_passes([row], row["flags"], row["workload"])
    if not lines:
        return None
    dec = [p for p in lines if p["kind"] == "decode"]
    return (np.asarray([p["t"] for p in dec], dtype=float) - lines[0]["t"],
            np.asarray([p["running"] for p in dec], dtype=float))


def full_rate(t: np.ndarray, running: np.ndarray, users: int) -> tuple[float, float]:
    """Decode tokens per second over the stretches of at least a second in which every decode pass ran at least
    90 % of ``users``, and the seconds they cover (each pass's time: the gap to the next logged decode)."""
    full = running >= 0.9 * users
    toks = secs = 0.0
    start = None
    for i in range(len(t)):
        if full[i] and start is None:
            start = i
        if (not full[i] or i == len(t) - 1) and start is not None:
            end = i if not full[i] else i + 1
            if end - start > 1 and t[end - 1] - t[start] >= 1.0:
                toks += float(running[start:end - 1].sum())
                secs += float(t[end - 1] - t[start])
            start = None
    return (toks / secs if secs else float("nan")), secs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="*", type=Path)
    args = ap.parse_args()
    cal = sglang_calibration("h100-sxm")
    for path in args.rows or DEFAULT:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            gaps = sampler_gaps(row)
            spec = row.get("workload_spec") or {}
            if gaps is None or (spec.get("arrival") or {}).get("process") != "closed":
                continue
            wl = Workload.from_dict(spec)
            sim, _, reqs = simulate_sglang_detailed(row["flags"], row["model"], "h100-sxm", wl, calibration=cal)
            real = row["telemetry"]
            print(f"{path.parent.name}/{path.name} {row['workload']} {json.dumps(row['flags'])}")
            print(f"  longest pause {gaps[0]:.3f} s at {gaps[1]:.2f} s of {real['duration_s']:.2f} s; "
                  f"lost to pauses > {2 * TICK_S:.1f} s: {gaps[2]:.3f} s; "
                  f"out tok/s sim {sim.out_tok_per_s:,.0f} / real {real['out_tok_per_s']:,.0f} "
                  f"({sim.out_tok_per_s / real['out_tok_per_s'] - 1:+.1%})")
            gcs = (row.get("counters") or {}).get("driver_gc")
            if gcs is not None:
                full = [(t, s) for g, t, s in gcs["listed"] if g == 2]
                at = [s for t, s in full if abs(t - gaps[1]) <= 0.1]
                print(f"  driver gc {measured_gc(row)}: {gcs['frozen_objects']:,} frozen; generation-2 "
                      f"collections >= 5 ms (start s, length s): {full}; at the longest pause: {at}")
            lo, hi = steady_window(row, gaps)
            out_len = wl.trace().output_len
            assert reqs is not None
            s_first = np.array([r.first_token for r in reqs.reqs])
            s_finish = np.array([r.finish for r in reqs.reqs])
            r_rate = token_rate(np.asarray(row["requests"]["first_token_s"]), np.asarray(row["requests"]["finish_s"]),
                                out_len, lo, hi)
            s_rate = token_rate(s_first, s_finish, out_len, 1.0, 0.75 * float(np.nanmax(s_finish)))
            print(f"  steady out tok/s (real [{lo:.2f}, {hi:.2f}) s, sim [1, 75 % of its run)): sim {s_rate:,.0f} / "
                  f"real {r_rate:,.0f} ({s_rate / r_rate - 1:+.1%})")
            dec = logged_decodes(row)
            if dec is None:
                continue
            t, running = dec
            near = (t > gaps[1] - 0.1) & (t < gaps[1] + gaps[0] + 0.6)
            users = int(spec["arrival"]["concurrency"])
            rate, secs = full_rate(t, running, users)
            sp = sim_passes(row["flags"], row["model"], "h100-sxm", wl)
            st = np.cumsum([0.0] + [p["dt"] for p in sp])[:-1]
            sdec = np.asarray([p["kind"] == "decode" for p in sp])
            srate, ssecs = full_rate(st[sdec], np.asarray([p["running"] for p in sp], dtype=float)[sdec], users)
            print(f"  running at the decode passes from the pause on: {running[near].astype(int).tolist()}")
            print(f"  decode tok/s while every user ran: sim {srate:,.0f} over {ssecs:.2f} s / real {rate:,.0f} over "
                  f"{secs:.2f} s ({srate / rate - 1:+.1%})")


if __name__ == "__main__":
    main()
