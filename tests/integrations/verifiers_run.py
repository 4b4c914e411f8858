"""Rollouts of rsi-bench through verifiers' own machinery, for tests/integrations/test_verifiers.py.

Run by an interpreter that has verifiers (the main one, or the venv `.ci/run` makes: ``RSI_VERIFIERS_PYTHON``):
``python tests/integrations/verifiers_run.py SUITE_FILE BASE_URL [--instance ID ...] [--rollouts N]``. It loads
the env with `rsi_env.integrations.verifiers_env.load_environment`, plays each task's rollouts with verifiers'
``Env.serving`` and ``Env.run_slot`` against the OpenAI-compatible endpoint at BASE_URL, and prints one JSON line
per trace: its rewards, metrics, reward, stop condition, errors, state (the env's record) and messages. The test
asserts on those; this script asserts nothing. ``--describe`` prints the loaded tasks instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, where this runs from a venv


def _trace(trace: Any) -> dict[str, Any]:
    return {"instance": trace.task.data.instance, "reward": trace.reward,
            "rewards": {k: None if r is None else {"score": r.score, "weight": r.weight}
                        for k, r in trace.rewards.items()},
            "metrics": dict(trace.metrics), "stop_condition": trace.stop_condition, "ok": trace.ok,
            "errors": [f"{e.type}: {e.message}" for e in trace.errors], "state": trace.state.model_dump(mode="json"),
            "tools": sorted(t.name for t in trace.tools), "turns": trace.num_turns,
            "messages": [m.model_dump(mode="json") for m in trace.messages]}


async def _play(env: Any, tasks: list[Any], base_url: str, rollouts: int, concurrency: int) -> list[Any]:
    import verifiers.v1 as vf

    ctx = vf.ModelContext(model="scripted", client=vf.EvalClientConfig(base_url=base_url, api_key_var="NO_KEY"))
    gate = asyncio.Semaphore(concurrency)
    async with env.serving():
        slots = [slot for task in tasks for slot in env.slots(task, rollouts)]
        return list(await asyncio.gather(*(env.run_slot(slot, ctx, gate) for slot in slots)))


def main() -> None:
    from rsi_env.integrations.verifiers_env import load_environment

    parser = argparse.ArgumentParser()
    parser.add_argument("suite")
    parser.add_argument("base_url")
    parser.add_argument("--instance", action="append")
    parser.add_argument("--rollouts", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--describe", action="store_true")
    args = parser.parse_args()
    env = load_environment(args.suite, args.instance)
    tasks = list(env.taskset)
    if args.describe:
        for task in tasks:
            print(json.dumps({"key": task.key, "data": task.data.model_dump(mode="json"),
                              "env": type(env).__name__, "agent": env.config.agent.model_dump(mode="json")}))
        return
    for episode in asyncio.run(_play(env, tasks, args.base_url, args.rollouts, args.concurrency)):
        for trace in episode.traces:
            print(json.dumps(_trace(trace)), flush=True)


if __name__ == "__main__":
    main()
