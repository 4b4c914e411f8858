"""An LLM agent harness: any OpenAI-compatible chat-completions endpoint drives `TextActions`.

``python -m baselines.llm_agent --env RSI/Batching-v0 --base-url http://127.0.0.1:8000/v1 --model NAME``
plays one episode per held-out seed. The system prompt is the task's ``TASK.md``, its flags with
their ladders and the text-action syntax; each turn sends the observation's text (last output,
measurement, error) and the budget left, and the reply's action — the first fenced code block if it
has one, else the whole reply — goes to the env. Requests are `rsi_env.suite.chat.ChatEndpoint`'s (stdlib
HTTP with a timeout; the suite's tool-calling agent uses the same endpoint); the episode is bounded by
``--max-turns`` env steps and the measurement budget. The last line printed is one JSON object with the
held-out improvement per seed and its mean.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from baselines.episodes import Agent, run_agent
from baselines.protocol import eval_seeds, print_result_line
from baselines.results import RunResult
from rsi_env.engine.task import load_task
from rsi_env.errors import EndpointError
from rsi_env.suite.chat import ChatEndpoint, extract_action
from rsi_env.wrappers.ladders import ladder, rsi_env_of
from rsi_env.wrappers.text_actions import TEXT_SYNTAX

__all__ = ["ChatEndpoint", "EndpointError", "LLM_VIEW", "extract_action", "llm_agent", "run_llm", "system_prompt"]

LLM_VIEW = {"actions": "text", "observation": "dict"}


def system_prompt(env: Any) -> str:
    """The task (its ``TASK.md``), the tunable flags with their ladders, and the action syntax."""
    rsi = rsi_env_of(env)
    assert rsi.workspace is not None, "reset the env first"
    flags = "\n".join(f"  {f}: {list(ladder(rsi, f))}" for f in rsi.flag_names)
    return (f"You are an LLM-inference engineer tuning vLLM.\n\n{rsi.workspace.read('TASK.md')}\n"
            f"Tunable flags and the values on their ladders (null: vLLM's default):\n{flags}\n\n"
            f"{TEXT_SYNTAX}\n\nEach measurement spends budget; submit once the configuration is good. "
            "Reply with exactly one action.")


def llm_agent(endpoint: ChatEndpoint, history_turns: int = 8) -> Agent:
    """An `Agent` that asks ``endpoint`` for each action, keeping the last ``history_turns`` exchanges."""
    messages: list[dict[str, str]] = []

    def act(obs: Any, env: Any) -> str:
        if not messages:
            messages.append({"role": "system", "content": system_prompt(env)})
        rsi = rsi_env_of(env)
        left = rsi.task.max_measurements - rsi.measurements
        messages.append({"role": "user", "content": f"{obs['text']}\n\n[{left} measurements left, "
                                                    f"{rsi.max_steps - rsi.steps} steps left]"})
        del messages[1:-(2 * history_turns + 1)]
        reply = endpoint.complete(messages)
        messages.append({"role": "assistant", "content": reply})
        return extract_action(reply)

    return act


def run_llm(endpoint: ChatEndpoint, env_id: str, seeds: Sequence[int], budget: int, max_turns: int = 40,
            baseline: str = "llm_agent") -> list[RunResult]:
    """One episode per seed; a fresh conversation each."""
    return [run_agent(baseline, env_id, s, budget, llm_agent(endpoint), LLM_VIEW, max_steps=max_turns)
            for s in seeds]


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="RSI/Batching-v0")
    p.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", required=True)
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"))
    p.add_argument("--budget", type=int, default=None, help="measurements per episode (default: the task's)")
    p.add_argument("--seeds", type=int, default=1, help="held-out seeds to play")
    p.add_argument("--max-turns", type=int, default=40)
    p.add_argument("--timeout-s", type=float, default=120.0)
    args = p.parse_args(argv)
    endpoint = ChatEndpoint(args.base_url, args.model, args.api_key, timeout_s=args.timeout_s)
    budget = args.budget or load_task(args.env).max_measurements
    results = run_llm(endpoint, args.env, eval_seeds(args.seeds), budget, args.max_turns)
    print_result_line({
        "env": args.env, "model": args.model, "requests": endpoint.requests,
        "eval_improvement_pct_mean": float(np.mean([r.improvement_pct for r in results])),
        "wall_s": sum(r.wall_s for r in results),
        "eval": [{"seed": r.seed, "improvement_pct": r.improvement_pct, "measurements": r.measurements,
                  "config": r.config} for r in results]})


if __name__ == "__main__":
    main()
