"""What the product prints and records, as data: the golden outputs a move of the code must leave byte for byte.

``python -m tests.golden.outputs --write`` records them in ``tests/golden/data/``; `test_golden.py`
computes them again and compares. Four kinds (issue 27's bar):

- ``simulate``: ``rsi-env simulate --json`` for every catalog model on every frozen workload (H200), under
  vLLM's defaults and two other configurations;
- ``traces``: the same for Poisson, burst, closed-loop and shared-prefix traces of 100-10,000 requests
  (``tests/golden/traces/``; issue 30's bar for a faster simulator), under those configurations and two that
  reach the simulator's other paths (a tight KV cache that preempts; priority, synchronous scheduling, no chunked
  prefill, eager, two replicas);
- ``demo``: the demo's table (``rsi-env demo --no-plot``, store off; its wall time left out);
- ``episodes``: a fixed-seed episode's ``state()`` for each of the 9 families (Kernel's rewards and
  verdict are timings of this machine, so only its actions are kept);
- ``unseen``: ``benchmarks/unseen_fidelity.py``'s numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).with_name("data")
CONFIGS = {"defaults": [], "small_batches": ["max_num_seqs=32", "max_num_batched_tokens=2048"],
           "fp8_kv_no_prefix": ["kv_cache_dtype=fp8", "enable_prefix_caching=false", "block_size=32"]}
# The traces' configurations: CONFIGS, and two that reach the rest of the engine loop.
TRACE_CONFIGS = {**CONFIGS, "tight_kv": ["gpu_memory_utilization=0.25", "long_prefill_token_threshold=256"],
                 "sync_priority_eager_dp2": ["scheduling_policy=priority", "async_scheduling=false",
                                             "enable_chunked_prefill=false", "enforce_eager=true",
                                             "data_parallel_size=2"]}
TRACES = Path(__file__).with_name("traces")
# The 10,000-request traces on three models (dense, sliding-window, MoE); the others on every model.
LARGE_TRACE_MODELS = ("llama-3.1-8b", "mistral-7b", "qwen3-30b-a3b")
FAMILIES = ["RSI/KVCache-v0", "RSI/Batching-v0", "RSI/PrefixCache-v0", "RSI/Quantization-v0", "RSI/Parallelism-v0",
            "RSI/Scheduler-v0", "RSI/BugFix-v0", "RSI/DayZero-v0", "RSI/Kernel-v0"]
_SECONDS = re.compile(r"(\d+ steps, )[\d.]+s")  # the demo's wall time
TIMED = {"RSI/Kernel-v0"}  # rewards and verdict are this machine's timings


def _cli(argv: list[str]) -> str:
    from rsi_env.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    return f"exit {code}\n{out.getvalue()}"


def _simulate_cli(model: str, workload: str, flags: list[str]) -> str:
    argv = ["simulate", "--model", model, "--hardware", "h200", "--workload", workload, "--json"]
    for f in flags:
        argv += ["--set", f]
    try:
        return _cli(argv)
    except SystemExit as exc:
        return f"exit {exc.code}"


def simulate() -> dict[str, str]:
    from rsi_env.engine.model import list_models
    from rsi_env.engine.workload import list_workloads

    return {f"{model}/{wl}/{name}": _simulate_cli(model, wl, flags)
            for model in list_models() for wl in list_workloads() for name, flags in CONFIGS.items()}


def traces() -> dict[str, str]:
    from rsi_env.engine.model import list_models

    out = {}
    for path in sorted(TRACES.glob("*.yaml")):
        models = LARGE_TRACE_MODELS if path.stem.endswith("_10000") else list_models()
        for model in models:
            for name, flags in TRACE_CONFIGS.items():
                out[f"{model}/{path.stem}/{name}"] = _simulate_cli(model, str(path), flags)
    return out


def demo() -> str:
    env = {**os.environ, "RSI_ENV_STORE": "off"}
    res = subprocess.run([sys.executable, "-m", "rsi_env.cli", "demo", "--no-plot"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    table = _SECONDS.sub(r"\1<seconds>", res.stdout)
    return f"exit {res.returncode}\n{table}"


def _episode(task: str) -> dict[str, Any]:
    import gymnasium as gym

    import rsi_env  # noqa: F401

    env = gym.make(task, sandbox="bubblewrap").unwrapped
    try:
        env.reset(seed=0)
        if env.flag_names:
            env.step(env.flag_action(env.flag_names[0], env.task.ladder(env.flag_names[0])[-1]))
        env.step({"kind": 3})
        env.step({"kind": 4})
        state = json.loads(json.dumps(env.state(), default=str))
    finally:
        env.close()
    if task in TIMED:
        state = {k: state[k] for k in ("task", "kwargs", "seed", "actions")}
    return state


def episodes() -> dict[str, Any]:
    """Recorded with the store off, and only while they run: the process's store (a test session's) is as before."""
    before = os.environ.get("RSI_ENV_STORE")
    os.environ["RSI_ENV_STORE"] = "off"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return {task: _episode(task) for task in FAMILIES}
    finally:
        if before is None:
            del os.environ["RSI_ENV_STORE"]
        else:
            os.environ["RSI_ENV_STORE"] = before


def unseen() -> str:
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "unseen_fidelity.py")], cwd=ROOT,
                         capture_output=True, text=True, timeout=900)
    return f"exit {res.returncode}\n{res.stdout}"


KINDS = {"simulate": simulate, "traces": traces, "demo": demo, "episodes": episodes, "unseen": unseen}


def compute(kind: str) -> Any:
    return KINDS[kind]()


def path(kind: str) -> Path:
    return DATA / f"{kind}.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="record the outputs (else: compare)")
    ap.add_argument("kinds", nargs="*", default=list(KINDS))
    args = ap.parse_args()
    DATA.mkdir(exist_ok=True)
    bad = []
    for kind in args.kinds:
        got = compute(kind)
        if args.write:
            path(kind).write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
            print(f"{kind}: written")
        elif json.loads(path(kind).read_text()) != got:
            bad.append(kind)
            print(f"{kind}: DIFFERS")
        else:
            print(f"{kind}: same")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
