"""The SGLang sim's forward passes on RSI/Batching-v0's closed loop, beside SGLang's own logged passes where a row has them.

    python3 research/sglang_fit/passes.py [--hardware h100-sxm] [--rows data/eval/.../real.jsonl] [--json OUT]

research/sglang_fit/closed_loop.md narrowed the closed-loop gap to the passes at ~100-230 running requests with new
requests arriving every pass: the sim's token time there is 19-48 % short of SGLang's, and a refit of the cost terms
does not close it. Which of the two candidates it is — how many passes are prefills and of how many requests, or
what each pass costs — shows in the pass counts. This prints, per configuration and workload, the sim's: passes per
request, the share of prefill passes, new requests and new tokens per prefill, running and queued requests at each
kind of pass, and each kind's mean time. Given the SGLang driver's rows with ``passes`` (`rsi_env.real.sglang_passes`;
the driver run with ``--server-arg decode_log_interval=1``, tools/gpu/sglang_lease6.sh), the same numbers from
SGLang's log lines go beside them (a pass's time there: the gap to the next logged line, on the driver's clock,
which the pipe's buffering blurs: engine_clock.py times the passes on SGLang's own clock).

Written before lease 5 measures the passes (research/plans/sglang_lease5.md): `--json` keeps the sim's side as the
prediction it was.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Workload
from rsi_env.sim.calibration import Calibration
from rsi_env.sim.sglang import engine as sglang_engine
from rsi_env.sim.sglang import simulate_sglang_detailed
from rsi_env.sim.sglang.engine import SglangResult
from rsi_env.sim.sglang.simulate import sglang_calibration

ROOT = Path(__file__).resolve().parents[2]
CANDIDATES = ROOT / "configs/eval/batching_sglang_h100.candidates.json"
CONFIGS = {"defaults": {}, "c2": {"max_running_requests": 128, "chunked_prefill_size": -1, "cuda_graph_max_bs": 512},
           "c1": {"max_running_requests": 512, "chunked_prefill_size": -1, "max_prefill_tokens": 32768,
                  "schedule_conservativeness": 0.7, "cuda_graph_max_bs": 512}}


def sim_run(flags: dict[str, Any], model: str, hardware: str, workload: Workload,
            calibration: Calibration | None = None) -> tuple[list[dict[str, Any]], Telemetry, SglangResult | None]:
    """Every pass of the SGLang sim's run (``calibration``, else the chip's shipped one): kind, start time, new
    requests and tokens (prefill), running, queued, time; the run's telemetry; and its result (its requests'
    timestamps)."""
    passes: list[dict[str, Any]] = []
    price = sglang_engine.SglangEngineSim._price

    def recording(self: sglang_engine.SglangEngineSim, batch: Any, running: int, parts: list[float],
                  after_decode: bool = False) -> float:
        dt = price(self, batch, running, parts, after_decode)
        p: dict[str, Any] = {"kind": "prefill" if batch.is_prefill else "decode", "t": self.now, "running": running,
                             "queue": len(self.sched.waiting), "dt": dt}
        if batch.is_prefill:
            p |= {"new_seq": len(batch.reqs), "new_token": sum(r.extend for r in batch.reqs)}
        passes.append(p)
        return dt

    sglang_engine.SglangEngineSim._price = recording  # type: ignore[method-assign]
    try:
        tel, _, result = simulate_sglang_detailed(flags, model, hardware, workload,
                                                  calibration=calibration or sglang_calibration(hardware))
    finally:
        sglang_engine.SglangEngineSim._price = price  # type: ignore[method-assign]
    return passes, tel, result


def sim_passes(flags: dict[str, Any], model: str, hardware: str, workload: Workload,
               calibration: Calibration | None = None) -> list[dict[str, Any]]:
    """`sim_run`'s passes."""
    return sim_run(flags, model, hardware, workload, calibration)[0]


def real_passes(rows: list[dict[str, Any]], flags: dict[str, Any], workload: str) -> list[dict[str, Any]] | None:
    """The logged passes of the driver's row for ``flags`` on ``workload`` as `sim_passes` gives them (``dt``: the gap
    to the next line), or None where no such row logged every decode pass."""
    row = next((r for r in rows if r.get("flags") == flags and r.get("workload") == workload), None)
    got = (row or {}).get("passes") or {}
    cols = got.get("lines")
    if got.get("decode_log_interval") != 1 or not isinstance(cols, dict) or not cols.get("t"):
        return None
    keys = list(cols)  # `LoggedPasses.columns`: one list per field
    lines = [dict(zip(keys, vals, strict=True)) for vals in zip(*cols.values(), strict=True)]
    return [{**a, "dt": b["t"] - a["t"]} for a, b in zip(lines, lines[1:], strict=False)]


def summary(passes: list[dict[str, Any]], requests: int) -> dict[str, float]:
    """Passes per request, prefill share, and each kind's mean requests, tokens, queue and time."""
    pre = [p for p in passes if p["kind"] == "prefill"]
    dec = [p for p in passes if p["kind"] == "decode"]
    mean = lambda xs: statistics.fmean(xs) if xs else float("nan")  # noqa: E731
    return {
        "passes_per_request": len(passes) / requests, "prefill_share": len(pre) / max(len(passes), 1),
        "prefill_new_seq": mean([p.get("new_seq", 0) for p in pre]),
        "prefill_new_token": mean([p.get("new_token", 0) for p in pre]),
        "prefill_running": mean([p["running"] for p in pre]), "prefill_queue": mean([p["queue"] for p in pre]),
        "decode_running": mean([p["running"] for p in dec]), "decode_queue": mean([p["queue"] for p in dec]),
        "prefill_ms": 1e3 * mean([p["dt"] for p in pre]), "decode_ms": 1e3 * mean([p["dt"] for p in dec]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hardware", default="h100-sxm")
    ap.add_argument("--rows", type=Path, help="the SGLang driver's JSON lines, run with decode_log_interval=1")
    ap.add_argument("--json", type=Path, help="write the sim's summaries here")
    ap.add_argument("--config", action="append", default=[], metavar="NAME=FLAGS",
                    help="a configuration (JSON flags) instead of the defaults, c1 and c2; repeatable")
    ap.add_argument("--workload", help="only this workload of the candidates file")
    args = ap.parse_args()
    configs = {c.split("=", 1)[0]: json.loads(c.split("=", 1)[1]) for c in args.config} or CONFIGS
    doc = json.loads(CANDIDATES.read_text())
    rows = [json.loads(x) for x in args.rows.read_text().splitlines() if x.strip()] if args.rows else []
    saved: dict[str, Any] = {"hardware": args.hardware, "model": doc["model"], "sim": {}}
    for name, flags in configs.items():
        for w in [w for w in doc["workloads"] if args.workload in (None, w["name"])]:
            wl = Workload.from_dict(w)
            sim = summary(sim_passes(flags, doc["model"], args.hardware, wl), int(w["requests"]))
            saved["sim"][f"{name}/{wl.name}"] = sim
            real = real_passes(rows, flags, wl.name)
            rsum = summary(real, int(w["requests"])) if real else None
            print(f"\n{name} {wl.name} ({args.hardware})" + ("" if rsum else ": sim only"))
            for k, v in sim.items():
                print(f"  {k:20s} sim {v:9.3f}" + (f"   real {rsum[k]:9.3f}" if rsum else ""))
    if args.json:
        args.json.write_text(json.dumps(saved, indent=1, sort_keys=True) + "\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
