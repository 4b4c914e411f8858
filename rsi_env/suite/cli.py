"""``rsi-env suite {list,run,verify}``: list a suite's instances, run an agent on them, verify a workspace.

- ``list [--suite S] [--front F] [--family F] [--difficulty D] [--json]`` prints the instances (never their
  reference solutions).
- ``run --agent {reference,null,random,search:<name>,openai} [--base-url URL --model NAME] [--sample N]
  [--seed S] [-k K] [--tier sim|real] [--workers W] [--address RAY] [--out DIR] [--json]`` plays the
  instances and prints one report (`rsi_env.suite.report`); it writes ``report.json``, ``report.md`` and
  ``report.png`` into ``--out`` beside ``attempts.jsonl``, from which a run started again resumes.
- ``verify --instance ID --workspace DIR [--reward-json PATH]`` judges a finished workspace from a clean
  start: a fresh episode of the instance, the workspace's editable files brought in by edit actions, submit;
  it prints (and writes) the binary and continuous rewards. Harbor's ``tests/test.sh`` calls it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rsi_env.errors import SuiteError

__all__ = ["add_suite_parser"]


def _cmd_list(args: argparse.Namespace) -> int:
    from rsi_env.suite.instance import load

    suite = load(args.suite)
    chosen = suite.select(fronts=args.front, families=args.family, difficulties=args.difficulty)
    if args.json:
        print(json.dumps({"suite": suite.id, "digest": suite.digest, "count": len(chosen),
                          "instances": [i.public() for i in chosen]}, indent=1))
        return 0
    print(f"{suite.id} ({suite.digest}, frozen {suite.frozen}): {len(chosen)} of {len(suite.instances)} instances")
    for i in chosen:
        print(f"  {i.id:72s} {i.front:12s} {i.family:12s} {i.difficulty:6s} budget {i.budget}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from rsi_env.suite.instance import load
    from rsi_env.suite.report import summarize, write_report
    from rsi_env.suite.runner import read_attempts, run_suite, sample_instances

    suite = load(args.suite)
    if args.tier == "real":
        raise SuiteError("rsi-bench-v1's instances are frozen on the sim tier; promote a result with "
                         "promote_on_submit or rsi-env eval to measure it on the real engine")
    drift = suite.check_calibrations()
    if drift and not args.allow_drift:
        raise SuiteError("the simulator differs from the one the suite's ceilings were found with ("
                         + "; ".join(drift) + "); pass --allow-drift to run anyway")
    chosen = sample_instances(suite.select(fronts=args.front, families=args.family, difficulties=args.difficulty,
                                           ids=args.instance), args.sample, args.seed)
    if not chosen:
        raise SuiteError("no instance matches the filters given")
    options: dict[str, Any] = {"base_url": args.base_url, "model": args.model, "api_key": args.api_key,
                               "max_requests": args.max_requests} if args.agent == "openai" else {}
    out = args.out or Path("rsi-suite-runs") / f"{suite.id}-{args.agent.replace(':', '_')}-s{args.seed}"
    attempts = run_suite(suite, chosen, args.agent, k=args.k, seed=args.seed, workers=args.workers, out_dir=out,
                         agent_options=options, address=args.address)
    everyone = [a for a in read_attempts(out) if a.suite == f"{suite.id}@{suite.digest}"]
    write_report(out, everyone, args.k, plot=not args.no_plot)
    report = summarize(attempts, args.k)
    report["out"] = str(out)
    print(json.dumps(report, indent=1) if args.json else
          f"{args.agent}: pass@1 {report['pass_at_1']:.3f}, pass@{args.k} {report[f'pass_at_{args.k}']:.3f}, "
          f"mean reward {report['mean_reward']:+.3f} over {report['instances']} instances; report in {out}")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from rsi_env.suite.instance import load
    from rsi_env.suite.verify import verify_workspace

    inst = load(args.suite).get(args.instance)
    result = verify_workspace(inst, Path(args.workspace))
    text = json.dumps(result, indent=1)
    if args.reward_json:
        Path(args.reward_json).write_text(json.dumps(result) + "\n")
    print(text)
    return 0


def add_suite_parser(sub: Any) -> None:
    """``rsi-env suite ...`` under the CLI's subparsers."""
    s = sub.add_parser("suite", help="the benchmark suite (rsi-bench-v1): list, run an agent, verify a workspace")
    cmds = s.add_subparsers(dest="suite_cmd", metavar="{list,run,verify}", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--suite", default="rsi-bench-v1")
        p.add_argument("--front", action="append", default=[], help="day-zero, optimisation or bug-fixing")
        p.add_argument("--family", action="append", default=[], help="e.g. Batching, BugFix")
        p.add_argument("--difficulty", action="append", default=[], help="easy, medium or hard")

    ls = cmds.add_parser("list", help="the suite's instances")
    common(ls)
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=_cmd_list)

    r = cmds.add_parser("run", help="play an agent on the suite's instances and report pass@k")
    common(r)
    r.add_argument("--agent", required=True, help="reference, null, random, search:<name> or openai")
    r.add_argument("--instance", action="append", default=[], help="an instance id (repeatable)")
    r.add_argument("--base-url", default=None, help="openai: the endpoint, e.g. http://127.0.0.1:8000/v1")
    r.add_argument("--model", default=None, help="openai: the model name the endpoint serves")
    r.add_argument("--api-key", default=None)
    r.add_argument("--max-requests", type=int, default=40, help="openai: chat requests per attempt")
    r.add_argument("--sample", type=int, default=None, help="this many instances, drawn with --seed")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("-k", type=int, default=1, help="attempts per instance (pass@k)")
    r.add_argument("--tier", choices=("sim", "real"), default="sim")
    r.add_argument("--workers", type=int, default=1, help="worker processes")
    r.add_argument("--address", default=None, help="a Ray cluster's address: attempts run as Ray tasks")
    r.add_argument("--out", type=Path, default=None, help="the run's folder (resumed if it holds attempts)")
    r.add_argument("--allow-drift", action="store_true", help="run on a simulator the ceilings were not found with")
    r.add_argument("--no-plot", action="store_true")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=_cmd_run)

    v = cmds.add_parser("verify", help="judge a finished workspace of an instance from a clean start")
    v.add_argument("--suite", default="rsi-bench-v1")
    v.add_argument("--instance", required=True)
    v.add_argument("--workspace", required=True, help="the folder holding the instance's editable files")
    v.add_argument("--reward-json", default=None, help="also write the rewards there")
    v.set_defaults(func=_cmd_verify)
