"""``rsi-env``: simulate a workload, run the demo, fit a calibration.

``rsi-env simulate --model ID|CONFIG.json --hardware ID --workload FILE.yaml [--set flag=value …]
[--engine-version 0.26] --json`` prints one `Telemetry` as JSON (DESIGN.md's contract).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

import yaml

from rsi_env.errors import RsiEnvError

__all__ = ["main"]

_TABLE_FIELDS = ("out_tok_per_s", "goodput_req_per_s", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99",
                 "e2e_p99", "num_preemptions", "prefix_cache_hit_rate", "kv_cache_usage_peak")


def _parse_sets(items: list[str]) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise RsiEnvError(f"--set expects flag=value, got {item!r}")
        flags[k.strip()] = yaml.safe_load(v)
    return flags


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def _cmd_simulate(args: argparse.Namespace) -> int:
    from rsi_env.sim import simulate

    tel = simulate(_parse_sets(args.set), args.model, args.hardware, args.workload,
                   engine_version=args.engine_version, usage_context=args.usage_context,
                   calibration=args.calibration)
    if args.json:
        print(tel.to_json())
    else:
        for k, v in tel.to_dict().items():
            print(f"{k:24s} {_fmt(v)}")
    return 0 if tel.ok else 3


def _demo_workloads() -> list[Any]:
    """The frozen workloads, driven closed-loop at 256 concurrent users (the load of ``vllm bench serve``)."""
    from dataclasses import replace

    from rsi_env.engine.workload import Arrival, list_workloads, load_workload

    return [replace(load_workload(n), arrival=Arrival("closed", concurrency=256)) for n in list_workloads()]


def _cmd_demo(args: argparse.Namespace) -> int:
    from rsi_env.engine.config import EngineConfig
    from rsi_env.search import coordinate_descent
    from rsi_env.sim import simulate

    t0 = time.perf_counter()
    workloads = _demo_workloads()

    def measure(cfg: EngineConfig) -> list[Any]:
        return [simulate(cfg, args.model, args.hardware, w) for w in workloads]

    def objective(cfg: EngineConfig) -> float:
        tels = measure(cfg)
        if any(not t.ok or t.goodput_req_per_s <= 0 for t in tels):
            return -math.inf
        return math.exp(sum(math.log(t.goodput_req_per_s) for t in tels) / len(tels))

    flags = ["max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching", "block_size",
             "long_prefill_token_threshold", "gpu_memory_utilization"]
    res = coordinate_descent(objective, flags, budget=args.budget)
    base, best = measure(EngineConfig()), measure(res.best_config)
    print(f"rsi-env demo: {args.model} on {args.hardware}, vLLM 0.26 (sim tier), frozen workloads at 256 "
          f"concurrent users; objective = geometric mean of goodput under each workload's SLO")
    print(f"search: coordinate descent, {res.evaluations} configurations, {time.perf_counter() - t0:.1f}s")
    print(f"found: {res.best_config.to_dict(only_set=True) or 'vLLM defaults'}")
    print()
    head = f"{'workload':20s} {'metric':22s} {'default':>10s} {'found':>10s} {'change':>8s}"
    print(head)
    print("-" * len(head))
    for w, a, b in zip(workloads, base, best, strict=True):
        for f in _TABLE_FIELDS:
            va, vb = getattr(a, f), getattr(b, f)
            ch = f"{(vb / va - 1) * 100:+.1f}%" if isinstance(va, (int, float)) and va else ""
            print(f"{w.name:20s} {f:22s} {_fmt(va):>10s} {_fmt(vb):>10s} {ch:>8s}")
    gain = (res.best_score / res.default_score - 1) * 100 if res.default_score > 0 else float("nan")
    print(f"\nobjective: default {res.default_score:.3f} -> found {res.best_score:.3f} req/s ({gain:+.1f}%)")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from rsi_env.engine import list_hardware, list_models, list_workloads
    from rsi_env.engine.config import FLAGS

    print("models:    " + ", ".join(list_models()))
    print("hardware:  " + ", ".join(list_hardware()))
    print("workloads: " + ", ".join(list_workloads()))
    print("flags:")
    for f in FLAGS.values():
        print(f"  {f.name:30s} {f.allowed():40s} {f.help}")
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from rsi_env.sim.fit import run_calibration

    report = run_calibration(args.hardware, args.measurements, engine_version=args.engine_version,
                             out=args.out, seed=args.seed)
    print(json.dumps(report, indent=2) if args.json else report["summary"])
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rsi-env", description="LLM-inference engineering environments on vLLM.")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("simulate", help="simulate one workload on one engine config (sim tier)")
    s.add_argument("--model", required=True, help="catalog id or path to a Hugging Face config.json")
    s.add_argument("--hardware", required=True, help="catalog id, e.g. h200")
    s.add_argument("--workload", required=True, help="workload YAML file or frozen workload name")
    s.add_argument("--set", action="append", default=[], metavar="FLAG=VALUE", help="an engine flag (repeatable)")
    s.add_argument("--engine-version", default="0.26")
    s.add_argument("--usage-context", default="server", choices=("server", "llm"))
    s.add_argument("--calibration", default=None, help="calibration YAML (default: the catalog's)")
    s.add_argument("--json", action="store_true", help="print one Telemetry as JSON")
    s.set_defaults(func=_cmd_simulate)

    d = sub.add_parser("demo", help="search a better engine config than vLLM's defaults, on the sim tier")
    d.add_argument("--model", default="llama-3.1-8b")
    d.add_argument("--hardware", default="h200")
    d.add_argument("--budget", type=int, default=40, help="configurations to evaluate")
    d.set_defaults(func=_cmd_demo)

    ls = sub.add_parser("list", help="models, hardware, workloads and engine flags known to rsi-env")
    ls.set_defaults(func=_cmd_list)

    c = sub.add_parser("calibrate", help="fit the simulator's coefficients to real measurements")
    c.add_argument("--hardware", required=True)
    c.add_argument("--measurements", required=True, nargs="+", help="JSON-lines files from the real tier")
    c.add_argument("--engine-version", default="0.26")
    c.add_argument("--out", default=None, help="where to write the calibration YAML")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=_cmd_calibrate)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rc: int = args.func(args)
        return rc
    except RsiEnvError as exc:
        print(f"rsi-env: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
