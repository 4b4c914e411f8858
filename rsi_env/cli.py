"""``rsi-env``: simulate a workload, run the demo, fit a calibration.

``rsi-env simulate --model ID|CONFIG.json --hardware ID --workload FILE.yaml [--set flag=value …]
[--engine-version 0.26] --json`` prints one `Telemetry` as JSON (docs/architecture.md's contract).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from rsi_env.engine.telemetry import Telemetry
from rsi_env.errors import RsiEnvError

__all__ = ["main"]

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


def _report(tel: Telemetry, as_json: bool) -> int:
    """Print one measurement (JSON, or a field per line); exit 3 when it failed."""
    if as_json:
        print(tel.to_json())
    else:
        for k, v in tel.to_dict().items():
            print(f"{k:24s} {_fmt(v)}")
    return 0 if tel.ok else 3


def _cmd_simulate(args: argparse.Namespace) -> int:
    if args.engine == "sglang":
        from rsi_env.engine.sglang_config import SglangConfig
        from rsi_env.sim.sglang import simulate_sglang

        cfg = SglangConfig.from_dict(_parse_sets(args.set))  # refused here, as simulate refuses vLLM's flags
        tel = simulate_sglang(cfg, args.model, args.hardware, args.workload, calibration=args.calibration)
        return _report(tel, args.json)
    from rsi_env.sim import simulate

    tel = simulate(_parse_sets(args.set), args.model, args.hardware, args.workload,
                   engine_version=args.engine_version, usage_context=args.usage_context,
                   calibration=args.calibration)
    return _report(tel, args.json)


def _cmd_bench(args: argparse.Namespace) -> int:
    """``rsi-env bench --tier real|sim|endpoint``: the same arguments and JSON as ``simulate``."""
    from rsi_env.engine.config import EngineConfig
    from rsi_env.engine.hardware import load_hardware
    from rsi_env.engine.model import load_model
    from rsi_env.engine.workload import load_workload
    from rsi_env.store.recorded import Recordable, Recorded

    if args.tier == "endpoint" and args.engine != "vllm":
        raise RsiEnvError("an endpoint is whichever engine serves it: drop --engine")
    if args.tier != "real" and args.engine_arg:
        raise RsiEnvError("--engine-arg passes the real engine's own arguments: use it with --tier real")
    if args.tier == "sim":
        return _cmd_simulate(args)
    tier: Recordable
    if args.tier == "endpoint":
        from rsi_env.real.endpoint import EndpointTier

        if not args.url:
            raise RsiEnvError("--tier endpoint needs --url of a running OpenAI-compatible server")
        if args.set:
            raise RsiEnvError("an endpoint runs with its own engine flags: drop --set")
        tier, cfg = EndpointTier(args.url, timeout_s=args.timeout), EngineConfig()
    else:
        from rsi_env.real.tier import RealTier

        real = RealTier(timeout_s=args.timeout, usage_context=args.usage_context, engine=args.engine,
                        engine_args=_parse_sets(args.engine_arg))
        config = real.config(_parse_sets(args.set))
        # The store records an SglangConfig as it does an EngineConfig (to_dict, num_gpus; the tier's engine_version
        # says which engine); its signatures name vLLM's config only.
        tier, cfg = real, config  # type: ignore[assignment]
    tel = Recorded(tier).measure_all(cfg, load_model(args.model), load_hardware(args.hardware),
                                     [load_workload(args.workload)])[0]
    return _report(tel, args.json)


def _cmd_demo(args: argparse.Namespace) -> int:
    from rsi_env.demo import run_demo

    kw = {k: v for k, v in (("model", args.model), ("hardware", args.hardware)) if v}
    run_demo(args.env, budget=args.budget, plot=None if args.no_plot else args.plot, **kw)
    return 0


def _cmd_warm(args: argparse.Namespace) -> int:
    from rsi_env.sim.vllm.jit import warm

    print(json.dumps(warm()))
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from rsi_env.engine import list_hardware, list_models, list_workloads
    from rsi_env.engine.config import FLAGS
    from rsi_env.engine.task import list_tasks

    print("environments:")
    for t in list_tasks():
        print(f"  {t.id:22s} {t.summary}")

    print("models:    " + ", ".join(list_models()))
    print("hardware:  " + ", ".join(list_hardware()))
    print("workloads: " + ", ".join(list_workloads()))
    print("flags:")
    for f in FLAGS.values():
        print(f"  {f.name:30s} {f.allowed():40s} {f.help}")
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    """``rsi-env calibrate {full,memory,host,launch}``: the whole fit, or one stage from a base calibration."""
    from rsi_env.calibrate.full import run_calibration
    from rsi_env.calibrate.stages import run_stage
    from rsi_env.sim.calibration import load_calibration

    files = list(args.measurements) + list(getattr(args, "host_measurements", []))
    for path in files:
        if not Path(path).is_file():
            raise RsiEnvError(f"calibrate: no measurements file {path!r}")
    base_path = getattr(args, "base", None)
    if base_path and not Path(base_path).is_file():
        raise RsiEnvError(f"calibrate: no calibration file {base_path!r} (--base)")
    try:
        if args.stage == "full" and args.from_store:
            from rsi_env.calibrate.from_store import calibrate_from_store
            from rsi_env.store.cli import _store

            if files:
                raise RsiEnvError("calibrate full: --from-store fits the store's rows; give it no measurement files")
            report = calibrate_from_store(_store(args), args.hardware, engine_version=args.engine_version,
                                          out=args.out, seed=args.seed, max_nfev=args.max_nfev,
                                          num_gpus=args.num_gpus or None)
            report["summary"] += f"\n  written to {report['path']} (the simulator now uses it: the newest fit)"
        elif args.stage == "full":
            if not args.measurements:
                raise RsiEnvError("calibrate full needs --measurements FILE.jsonl ... or --from-store")
            report = run_calibration(args.hardware, args.measurements, engine_version=args.engine_version,
                                     out=args.out, seed=args.seed, max_nfev=args.max_nfev,
                                     host_measurements=args.host_measurements or None)
        else:
            base = load_calibration(args.hardware, args.engine_version, base_path) if base_path else None
            terms = getattr(args, "terms", None)
            report = run_stage(args.stage, args.hardware, args.measurements, base=base,
                               engine_version=args.engine_version, out=args.out, seed=args.seed,
                               max_nfev=args.max_nfev, terms=tuple(terms) if terms else None)
    except ValueError as e:
        raise RsiEnvError(str(e)) from e
    print(json.dumps(report, indent=2) if args.json else report["summary"])
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from rsi_env.evaluate import STAGES, evaluate, load_plan
    from rsi_env.evaluate.report import render_markdown

    plan = load_plan(args.plan)
    if args.out:
        import dataclasses
        from pathlib import Path

        plan = dataclasses.replace(plan, out=Path(args.out))
    stages = STAGES if args.stage == "all" else (args.stage,)
    rep = evaluate(plan, stages, gpus=[g for g in args.gpus.split(",") if g.strip()], deadline_s=args.deadline_s)
    if rep is None:
        print(f"{', '.join(stages)}: done ({plan.candidates if 'search' in stages else plan.out})")
    elif args.json:
        from rsi_env.evaluate.report import finite

        print(json.dumps(finite(rep), indent=1))
    else:
        print(render_markdown(rep))
    return 0


def _measure_args(s: argparse.ArgumentParser) -> None:
    s.add_argument("--model", required=True, help="catalog id or path to a Hugging Face config.json")
    s.add_argument("--hardware", required=True, help="catalog id, e.g. h200")
    s.add_argument("--workload", required=True, help="workload YAML file or frozen workload name")
    s.add_argument("--set", action="append", default=[], metavar="FLAG=VALUE", help="an engine flag (repeatable)")
    s.add_argument("--engine", choices=("vllm", "sglang"), default="vllm",
                   help="the engine measured or simulated: --set takes its own flags (SGLang's: docs/sglang.md)")
    s.add_argument("--engine-version", default="0.26", help="vLLM release the sim models (sim tier)")
    s.add_argument("--usage-context", default="server", choices=("server", "llm"))
    s.add_argument("--calibration", default=None, help="calibration YAML (default: the catalog's)")
    s.add_argument("--json", action="store_true", help="print one Telemetry as JSON")


def build_parser() -> argparse.ArgumentParser:
    from rsi_env import __version__

    p = argparse.ArgumentParser(prog="rsi-env", description="LLM-inference engineering environments on vLLM.")
    p.add_argument("--version", action="version", version=f"rsi-env {__version__}")
    sub = p.add_subparsers(dest="cmd")

    s = sub.add_parser("simulate", help="simulate one workload on one engine config (sim tier)")
    _measure_args(s)
    s.set_defaults(func=_cmd_simulate)

    b = sub.add_parser("bench", help="measure one workload on one engine config (--tier real: the real engine)")
    _measure_args(b)
    b.add_argument("--tier", choices=("real", "sim", "endpoint"), default="real")
    b.add_argument("--url", default=None, help="with --tier endpoint: a running server, e.g. http://127.0.0.1:8000")
    b.add_argument("--timeout", type=float, default=900.0, help="seconds before the engine is killed (real tier)")
    b.add_argument("--engine-arg", action="append", default=[], metavar="FIELD=VALUE",
                   help="the engine's own argument outside the flag vocabulary, passed through (real tier), "
                        "e.g. attention_backend=triton for SGLang")
    b.set_defaults(func=_cmd_bench)

    d = sub.add_parser("demo", help="a short search on an environment (sim tier): table and plot")
    d.add_argument("--env", default="RSI/KVCache-v0")
    d.add_argument("--model", default=None, help="default: the task's")
    d.add_argument("--hardware", default=None, help="default: the task's")
    d.add_argument("--budget", type=int, default=40, help="steps (one measurement each)")
    d.add_argument("--plot", default="rsi-env-demo.png", help="PNG of the objective over steps")
    d.add_argument("--no-plot", action="store_true")
    d.set_defaults(func=_cmd_demo)

    w = sub.add_parser("warm", help="compile the simulator's engine loop into numba's cache (once, before many processes "
                                    "would compile it at once)")
    w.set_defaults(func=_cmd_warm)

    ls = sub.add_parser("list", help="models, hardware, workloads and engine flags known to rsi-env")
    ls.set_defaults(func=_cmd_list)

    c = sub.add_parser("calibrate", help="fit the simulator's coefficients to real measurements")
    stages = c.add_subparsers(dest="stage", metavar="{full,memory,host,launch}", required=True)
    about = {"full": "every term, from real-tier runs (or the experience store's), held-out configurations reported",
             "memory": "the memory terms of --base, from the KV-cache sizes (num_gpu_blocks) real runs found",
             "host": "the CPU-side terms of --base, from one host's runs (the host stage)",
             "launch": "the CPU launch costs of --base's steps outside a full CUDA graph (piecewise_layer_s, "
                       "eager_layer_s), from step traces"}
    for stage, text in about.items():
        st = stages.add_parser(stage, help=text, description=text)
        st.add_argument("--hardware", required=True)
        st.add_argument("--measurements", nargs="+", default=[] if stage == "full" else None, required=stage != "full",
                        help="JSON-lines files from the real tier")
        if stage == "full":
            st.add_argument("--host-measurements", nargs="+", default=[],
                            help="one host's runs: its CPU-side terms are refitted on them last (the host stage)")
            st.add_argument("--from-store", action="store_true",
                            help="fit to the experience store's real-tier rows; written to the user's calibration "
                                 "directory")
            st.add_argument("--store", default=None, help="with --from-store: store URL (default: RSI_ENV_STORE)")
            st.add_argument("--num-gpus", type=int, default=1,
                            help="with --from-store: rows measured on this many GPUs (0: all)")
        else:
            st.add_argument("--base", default=None,
                            help="the calibration YAML the stage starts from (default: the calibration in use)")
        if stage == "launch":
            st.add_argument("--terms", nargs="+", default=None, choices=("piecewise_layer_s", "eager_layer_s"),
                            help="fit only these launch costs (default: every one the runs show)")
        st.add_argument("--max-nfev", type=int, default=60, help="least-squares evaluations of a timing fit")
        st.add_argument("--engine-version", default="0.26")
        st.add_argument("--out", default=None, help="where to write the calibration YAML")
        st.add_argument("--seed", type=int, default=0)
        st.add_argument("--json", action="store_true")
        st.set_defaults(func=_cmd_calibrate)

    e = sub.add_parser("eval", help="two-tier evaluation: search on sim, promote the best to real, report")
    e.add_argument("--plan", required=True, help="configs/eval/<plan>.yaml")
    e.add_argument("--stage", choices=("all", "search", "promote", "report"), default="all")
    e.add_argument("--gpus", default="", help="promote: GPU ids to measure on in parallel, e.g. 0,1")
    e.add_argument("--deadline-s", type=float, default=None, help="promote: seconds from now (default: the plan's)")
    e.add_argument("--out", default=None, help="folder for real.jsonl and the report (default: the plan's out)")
    e.add_argument("--json", action="store_true", help="report: print it as JSON")
    e.set_defaults(func=_cmd_eval)

    from rsi_env.integrations.harbor import add_export_parser
    from rsi_env.integrations.openenv_server import add_serve_parser
    from rsi_env.store.cli import add_experience_parser
    from rsi_env.suite.cli import add_suite_parser

    add_experience_parser(sub)
    add_suite_parser(sub)
    add_serve_parser(sub)
    add_export_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd is None:  # ``rsi-env`` alone: what it can do
        parser.print_help()
        return 0
    try:
        rc: int = args.func(args)
        return rc
    except RsiEnvError as exc:
        print(f"rsi-env: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
