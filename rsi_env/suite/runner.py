"""Run a suite: every selected instance attempted ``k`` times by one agent, in parallel, resumably.

`run_attempt` plays one attempt in a fresh env and returns an `Attempt` read from the env itself (its
verdict, rewards, steps, measurements and cost), never from what the agent says; an agent or env that
raises fails that attempt with the reason, and the run goes on. `run_suite` shares the attempts out over
worker processes (or Ray tasks, given a cluster address), appends each result to ``attempts.jsonl`` in the
run's folder as it arrives (a run started again skips what is there), records each attempt's trajectory in
the experience store (`rsi_env.store`: messages, tool calls, observations, rewards) and prints progress.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import multiprocessing
import random
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rsi_env.errors import SuiteError
from rsi_env.suite.agents import Played, make_agent
from rsi_env.suite.instance import Instance, Suite, load
from rsi_env.wrappers.ladders import rsi_env_of

__all__ = ["ATTEMPTS_FILE", "Attempt", "read_attempts", "run_attempt", "run_suite", "sample_instances"]

ATTEMPTS_FILE = "attempts.jsonl"
_OBS_TEXT_MAX = 4000  # characters of each observation's text kept in a trajectory


@dataclass(frozen=True)
class Attempt:
    """One agent's attempt at one instance, as the env recorded it."""

    suite: str
    instance: str
    front: str
    family: str
    difficulty: str
    agent: str
    attempt: int
    passed: bool
    submitted: bool
    reward: float             # the episode's total reward
    binary: float             # its binary part (1.0 when the submission's verdict passed)
    continuous: float         # the rest: improvement paid, minus the measurements' cost
    steps: int
    measurements: int         # the env's, and any the agent spent outside it (a search's own)
    gpu_seconds: float        # what those measurements charge (simulated GPU-seconds on the sim tier)
    tokens: int
    seconds: float
    ended_by: str
    error: str | None = None
    episode: str | None = None

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.instance, self.agent, self.attempt)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Attempt:
        return cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})


@dataclass
class _Trace:
    """The observation text after each step, gathered by wrapping the env's ``step``."""

    texts: list[str] = field(default_factory=list)


def _traced(env: Any, trace: _Trace) -> None:
    step = env.step

    def traced_step(action: Any) -> Any:
        out = step(action)
        trace.texts.append(str(out[0].get("text", ""))[:_OBS_TEXT_MAX])
        return out

    env.step = traced_step


def _attempt_seed(seed: int, instance: str, attempt: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{instance}/{attempt}".encode()).digest()[:8], "little")


def run_attempt(suite_id: str, instance_id: str, agent: str, attempt: int, seed: int = 0,
                agent_options: Mapping[str, Any] | None = None, record: bool = True) -> Attempt:
    """Play one attempt of ``instance_id`` with ``agent``; what the env recorded, failures included."""
    suite = load(suite_id)
    inst = suite.get(instance_id)
    t0 = time.monotonic()
    played, env, error = Played(), None, None
    trace = _Trace()
    try:
        player = make_agent(agent, **dict(agent_options or {}))
        env = inst.make_env()
        _traced(env, trace)
        played = player.play(env, inst, np.random.default_rng(_attempt_seed(seed, instance_id, attempt)))
    except Exception as exc:  # an attempt that breaks fails alone; the run goes on
        error = f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, SuiteError):
            error += "\n" + "".join(traceback.format_exc(limit=6))[-2000:]
    try:
        out = _outcome(suite, inst, agent, attempt, env, played, error, time.monotonic() - t0)
        if record:
            _record(suite, out, played, trace)
        return out
    finally:
        if env is not None:
            env.close()


def _outcome(suite: Suite, inst: Instance, agent: str, attempt: int, env: Any, played: Played,
             error: str | None, seconds: float) -> Attempt:
    rsi = None if env is None else rsi_env_of(env)
    verdict = None if rsi is None else rsi.verdict
    rewards = [] if rsi is None else list(rsi.reward_log)
    binary = 1.0 if verdict is not None and verdict.passed else 0.0
    total = float(sum(rewards))
    return Attempt(
        suite=f"{suite.id}@{suite.digest}", instance=inst.id, front=inst.front, family=inst.family,
        difficulty=inst.difficulty, agent=agent, attempt=attempt, passed=bool(binary) and error is None,
        submitted=verdict is not None, reward=total, binary=binary, continuous=total - binary,
        steps=0 if rsi is None else rsi.steps,
        measurements=(0 if rsi is None else rsi.measurements) + played.outside_measurements,
        gpu_seconds=(0.0 if rsi is None else rsi.cost.gpu_seconds) + played.outside_gpu_seconds,
        tokens=played.tokens, seconds=round(seconds, 3), ended_by=played.ended_by or ("error" if error else ""),
        error=error, episode=None if rsi is None else rsi.episode_id)


def _record(suite: Suite, out: Attempt, played: Played, trace: _Trace) -> None:
    """The attempt's trajectory into the experience store (a store that cannot be written is warned about once)."""
    from rsi_env.store.db import now
    from rsi_env.store.record import default_store, warn_once

    store = default_store()
    if store is None:
        return
    try:
        store.add_trajectory({
            "id": f"{out.suite}/{out.instance}/{out.agent}/{out.attempt}", "created": now(), "suite": out.suite,
            "instance": out.instance, "agent": out.agent, "attempt": out.attempt, "episode": out.episode,
            "passed": int(out.passed), "reward": out.reward, "result": asdict(out), "messages": played.messages,
            "observations": trace.texts})
    except Exception as exc:
        warn_once("record a suite attempt", exc)


def sample_instances(instances: Sequence[Instance], n: int | None, seed: int) -> list[Instance]:
    """``n`` instances drawn without replacement with ``seed`` (all of them if ``n`` is None), in suite order."""
    if n is None or n >= len(instances):
        return list(instances)
    if n < 1:
        raise SuiteError(f"--sample must be at least 1, got {n}")
    chosen = set(random.Random(seed).sample([i.id for i in instances], n))
    return [i for i in instances if i.id in chosen]


def read_attempts(folder: Path) -> list[Attempt]:
    """The attempts recorded in ``folder``'s ``attempts.jsonl`` (a torn last line, from a killed run, is skipped)."""
    path = Path(folder) / ATTEMPTS_FILE
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(Attempt.from_dict(json.loads(line)))
        except (json.JSONDecodeError, TypeError, KeyError):
            continue
    return out


def _submit_local(workers: int) -> tuple[Callable[..., cf.Future[Attempt]], Callable[[], None]]:
    if workers <= 1:
        def run_here(*args: Any) -> cf.Future[Attempt]:
            fut: cf.Future[Attempt] = cf.Future()
            fut.set_result(run_attempt(*args))
            return fut
        return run_here, lambda: None
    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    return (lambda *args: pool.submit(run_attempt, *args)), lambda: pool.shutdown(wait=True, cancel_futures=True)


def _submit_ray(address: str) -> tuple[Callable[..., cf.Future[Attempt]], Callable[[], None]]:
    import ray

    ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    remote = ray.remote(run_attempt)

    def submit(*args: Any) -> cf.Future[Attempt]:
        return remote.remote(*args).future()

    return submit, lambda: None


def run_suite(suite: Suite, instances: Iterable[Instance], agent: str, *, k: int = 1, seed: int = 0,
              workers: int = 1, out_dir: Path, agent_options: Mapping[str, Any] | None = None,
              address: str | None = None, progress: Callable[[str], None] | None = None) -> list[Attempt]:
    """Attempt each instance ``k`` times; the attempts of this agent on them (those of an earlier run included)."""
    if k < 1:
        raise SuiteError(f"-k must be at least 1, got {k}")
    if workers < 1:
        raise SuiteError(f"--workers must be at least 1, got {workers}")
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    make_agent(agent, **dict(agent_options or {}))  # a bad agent spec fails before anything runs
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tag = f"{suite.id}@{suite.digest}"
    chosen = list(instances)
    wanted = {(i.id, agent, a) for i in chosen for a in range(k)}
    done = {a.key: a for a in read_attempts(out_dir) if a.suite == tag and a.key in wanted}
    todo = sorted(wanted - set(done))
    if done:
        say(f"resuming: {len(done)} of {len(wanted)} attempts are recorded in {out_dir / ATTEMPTS_FILE}")
    submit, close = _submit_ray(address) if address else _submit_local(workers)
    t0 = time.monotonic()
    try:
        futures = {submit(suite.source or suite.id, iid, agent, a, seed, dict(agent_options or {})): (iid, a)
                   for iid, _, a in todo}
        with (out_dir / ATTEMPTS_FILE).open("a") as sink:
            for n, fut in enumerate(cf.as_completed(futures), 1):
                res = fut.result()
                sink.write(json.dumps(asdict(res), sort_keys=True) + "\n")
                sink.flush()
                done[res.key] = res
                mark = "PASS" if res.passed else ("ERROR" if res.error else "fail")
                say(f"[{n}/{len(todo)}] {res.instance} #{res.attempt}: {mark} (reward {res.reward:+.3f}, "
                    f"{res.seconds:.1f} s; {time.monotonic() - t0:.0f} s in all)")
    finally:
        close()
    return [done[key] for key in sorted(done)]
