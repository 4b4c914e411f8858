"""The sim's and the real engine's profiles side by side: where each says a step's time goes, on three workloads.

For each configuration (``--config``, default vLLM's defaults) it measures three workloads on the sim and on the
real engine (``--tier``) — a decode-heavy burst (256 requests of 128 prompt / 512 output tokens), long-context
prefill (the frozen ``long_context``) and shared-prefix chat (``shared_prefix_chat``) — and prints, per workload,
each part's share of the engine's time (`rsi_env.engine.profile.PARTS`) on both tiers, with the throughput and the
dominant part. ``--size small`` scales the workloads down for the CPU build of vLLM and the tiny model.

The real tier runs each configuration's workloads in one engine process of its own (`rsi_env.real.tier.RealTier`:
the driver profiles each workload after measuring all of them). Results go to ``--out`` as JSON after every
(configuration, tier), so a run cut short keeps what it measured.

On one H200 (vLLM 0.26, Llama-3.1-8B with dummy weights; ``source .gpu/install_vllm.sh`` first, see GPU.md)::

    python benchmarks/profile_side_by_side.py --out profile_h200.json

On the CPU build::

    python benchmarks/profile_side_by_side.py --model tiny-llama --hardware cpu --size small \\
        --config eager:max_model_len=2048,enforce_eager=true --out profile_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # a plain script on a machine where the package is not installed
    sys.path.insert(0, str(ROOT))

# Full size (one H200): about a minute of measurement and a minute of profiled replays in all.
FULL = [
    {"name": "decode_burst", "seed": 7, "requests": 256, "prompt_tokens": 128, "output_tokens": 512,
     "arrival": {"process": "burst"}},
    "long_context",
    "shared_prefix_chat",
]
# The same three shapes for the CPU build and a tiny model (max_model_len 2048).
SMALL = [
    {"name": "decode_burst", "seed": 7, "requests": 16, "prompt_tokens": 32, "output_tokens": 48,
     "arrival": {"process": "burst"}},
    {"name": "long_prefill", "seed": 8, "requests": 8, "prompt_tokens": {"dist": "uniform", "min": 1200, "max": 1600},
     "output_tokens": 16, "arrival": {"process": "poisson", "rate": 4}},
    {"name": "shared_prefix_chat", "seed": 9, "requests": 24, "shared_prefix": {"groups": 2, "tokens": 384},
     "prompt_tokens": {"dist": "uniform", "min": 32, "max": 64}, "output_tokens": 24,
     "arrival": {"process": "poisson", "rate": 12}},
]


def workloads(size: str) -> list[Any]:
    from rsi_env.engine.workload import Workload, load_workload

    return [Workload.from_dict(w) if isinstance(w, dict) else load_workload(w) for w in (FULL if size == "full"
                                                                                           else SMALL)]


def parse_config(spec: str) -> tuple[str, dict[str, Any]]:
    """``name:flag=value,flag=value`` (values as YAML) -> (name, flags); ``defaults`` alone is vLLM's defaults."""
    import yaml

    name, _, rest = spec.partition(":")
    flags = {}
    for item in filter(None, rest.split(",")):
        k, eq, v = item.partition("=")
        if not eq:
            raise SystemExit(f"--config {spec!r}: {item!r} is not flag=value")
        flags[k.strip()] = yaml.safe_load(v)
    return name or "config", flags


def measure(tier_name: str, flags: dict[str, Any], args: argparse.Namespace, wls: list[Any]) -> list[dict[str, Any]]:
    """One configuration's workloads on one tier: a row per workload (its telemetry, and on real the replay's notes)."""
    if tier_name == "sim":
        from rsi_env.sim import SimTier

        tier: Any = SimTier(engine_version=args.engine_version)
    else:
        from rsi_env.real.tier import RealTier

        tier = RealTier(timeout_s=args.timeout)
    from rsi_env.engine import EngineConfig, load_hardware, load_model

    t0 = time.perf_counter()
    tels = tier.measure_all(EngineConfig.from_dict(flags), load_model(args.model), load_hardware(args.hardware), wls)
    took = time.perf_counter() - t0
    rows = getattr(tier, "last_rows", []) or []
    by_name = {r.get("workload"): r for r in rows}
    out = []
    for w, t in zip(wls, tels, strict=True):
        row = {"tier": tier_name, "workload": w.name, "telemetry": t.to_dict(), "seconds": round(took, 2)}
        if w.name in by_name:
            real = by_name[w.name]
            row |= {"profile_info": real.get("profile"), "vllm_version": real.get("vllm_version"),
                    "resolved": real.get("resolved"), "startup_s": real.get("startup_s")}
        out.append(row)
    return out


def table(results: list[dict[str, Any]]) -> str:
    """Per configuration and workload: each part's share on each tier, the throughput and the dominant part."""
    from rsi_env.engine.profile import PARTS
    from rsi_env.engine.telemetry import Telemetry

    lines = []
    for cfg, wl in dict.fromkeys((r["config"], r["workload"]) for r in results):
        got = {r["tier"]: Telemetry.from_dict(r["telemetry"]) for r in results
               if r["config"] == cfg and r["workload"] == wl}
        tiers = [t for t in ("sim", "real") if t in got]
        lines.append(f"\n{wl} ({cfg})".ljust(34) + "".join(f"{t:>12s}" for t in tiers))
        lines.append("  out tok/s".ljust(34) + "".join(
            f"{got[t].out_tok_per_s:12.0f}" if got[t].ok else f"{'ERROR':>12s}" for t in tiers))
        lines.append("  engine time s".ljust(34) + "".join(f"{got[t].profile.total_s:12.3f}" for t in tiers))
        fr = {t: got[t].profile.fractions() for t in tiers}
        for p in PARTS:
            lines.append(f"  {p} %".ljust(34) + "".join(
                f"{fr[t][p] * 100:12.1f}" if not got[t].profile.empty else f"{'-':>12s}" for t in tiers))
        for t in tiers:
            say = got[t].profile.summary() if got[t].ok else f"error: {got[t].error}"
            lines.append(f"  {t}: {say or 'no profile'}")
    return "\n".join(lines)


def _write(path: Path, meta: dict[str, Any], results: list[dict[str, Any]]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    os.replace(tmp, path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file written after every (configuration, tier)")
    p.add_argument("--tier", choices=("sim", "real", "both"), default="both")
    p.add_argument("--model", default="llama-3.1-8b")
    p.add_argument("--hardware", default="h200")
    p.add_argument("--config", action="append", default=None, metavar="NAME:FLAG=V,...",
                   help="a configuration to measure (repeatable; default: 'defaults', vLLM's own)")
    p.add_argument("--size", choices=("full", "small"), default="full")
    p.add_argument("--engine-version", default="0.26", help="the vLLM release the sim simulates")
    p.add_argument("--timeout", type=float, default=330.0, help="seconds for each configuration's real engine run")
    args = p.parse_args()
    configs = [parse_config(c) for c in (args.config or ["defaults"])]
    wls = workloads(args.size)
    out = Path(args.out)
    meta = {"model": args.model, "hardware": args.hardware, "size": args.size, "engine_version": args.engine_version,
            "configs": dict(configs), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    results: list[dict[str, Any]] = []
    tiers = ("sim", "real") if args.tier == "both" else (args.tier,)
    for name, flags in configs:
        for tier_name in tiers:
            t0 = time.perf_counter()
            rows = measure(tier_name, flags, args, wls)
            results += [{"config": name, **r} for r in rows]
            _write(out, meta, results)
            errors = [r["telemetry"]["error"] for r in rows if r["telemetry"]["error"]]
            print(f"{name} on {tier_name}: {time.perf_counter() - t0:.1f} s"
                  + (f", errors: {errors}" if errors else ""), flush=True)
    print(table(results))
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
