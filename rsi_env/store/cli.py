"""``rsi-env experience stats|best|export|import``: the experience store from the command line.

``--store URL`` picks a store (default: ``RSI_ENV_STORE``, else the user's cache directory).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rsi_env.errors import StoreError
from rsi_env.store.db import ExperienceStore, default_store_url, parse_store_url

__all__ = ["add_experience_parser"]


def _store(args: argparse.Namespace) -> ExperienceStore:
    url = args.store or default_store_url()
    if parse_store_url(url) is None:
        raise StoreError(f"the experience store is off ({url!r}): pass --store sqlite:///PATH or set RSI_ENV_STORE")
    return ExperienceStore(url)


def _cmd_stats(args: argparse.Namespace) -> int:
    s = _store(args).stats()
    if args.json:
        print(json.dumps(s, indent=1))
        return 0
    print(f"experience store {s['store']} (schema v{s['schema_version']})")
    print(f"  measurements {s['measurements']}  episodes {s['episodes']}  calibrations {s['calibrations']}")
    print(f"  models {s['models']}  hardware {s['hardware']}  workloads {s['workloads']}  configurations {s['configs']}")
    for tier, t in s["by_tier"].items():
        print(f"  {tier:9s} {t['measurements']:8d} measurements ({t['failed']} failed), "
              f"{t['gpu_seconds']:.0f} GPU-s, ${t['cost_usd']:.2f}")
    return 0


def _cmd_best(args: argparse.Namespace) -> int:
    from rsi_env.engine.task import load_task
    from rsi_env.store.queries import best_configs

    task = load_task(args.task) if args.task else None
    best = best_configs(_store(args), args.model, args.hardware, workload=args.workload, metric=args.metric,
                        task=task, tier=args.tier, n=args.n)
    if args.json:
        print(json.dumps(best, indent=1))
        return 0
    if not best:
        print(f"no successful measurement of {args.model} on {args.hardware} in the store")
        return 1
    name = f"score[{task.id}]" if task else args.metric
    print(f"{name:>16s} {'meas':>5s}  config  (workloads)")
    for b in best:
        print(f"{b['value']:16.4g} {b['measurements']:5d}  {json.dumps(b['config'])}  ({', '.join(b['workloads'])})")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from rsi_env.store.transfer import export_store

    counts = export_store(_store(args), args.out, args.format)
    print(json.dumps(counts) if args.json else f"exported {counts} to {args.out}")
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    from rsi_env.store.transfer import import_files

    added = import_files(_store(args), args.files)
    print(json.dumps(added) if args.json else f"imported {added} (rows already in the store are skipped)")
    return 0


def add_experience_parser(sub: Any) -> None:
    """Add ``experience`` and its subcommands to ``rsi-env``'s subparsers."""
    e = sub.add_parser("experience", help="the experience store: stats, best configs, export/import")
    esub = e.add_subparsers(dest="experience_cmd", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--store", default=None, help="store URL (default: RSI_ENV_STORE, else the cache directory)")
        p.add_argument("--json", action="store_true")

    s = esub.add_parser("stats", help="counts of measurements, episodes, calibrations; GPU-seconds and cost per tier")
    common(s)
    s.set_defaults(func=_cmd_stats)
    b = esub.add_parser("best", help="the best known configurations for a (model, hardware[, workload])")
    common(b)
    b.add_argument("--model", required=True)
    b.add_argument("--hardware", required=True)
    b.add_argument("--workload", default=None, help="a workload name or content hash")
    b.add_argument("--task", default=None, help="rank by this task's objective (e.g. RSI/Batching-v0)")
    b.add_argument("--metric", default="out_tok_per_s", help="without --task: the telemetry field to rank by")
    b.add_argument("--tier", default=None, choices=("sim", "real", "endpoint"))
    b.add_argument("-n", type=int, default=5)
    b.set_defaults(func=_cmd_best)
    x = esub.add_parser("export", help="write the store as JSONL (or Parquet, with pyarrow)")
    common(x)
    x.add_argument("out", help="FILE.jsonl or FILE.parquet")
    x.add_argument("--format", choices=("jsonl", "parquet"), default=None, help="default: from the file's suffix")
    x.set_defaults(func=_cmd_export)
    i = esub.add_parser("import", help="add exported experience, or the real tier's measurement files")
    common(i)
    i.add_argument("files", nargs="+")
    i.set_defaults(func=_cmd_import)
