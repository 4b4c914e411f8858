"""``rsi-env demo``: a short coordinate-descent search on an environment, a comparison table and a plot.

The search drives the environment through its own actions (flag steps with auto-bench), so what it
prints is exactly what an agent would have earned: the best configuration found, its telemetry
beside vLLM's defaults for every workload, the submission's verdict, and a PNG of the objective
over the steps, each improvement labelled with the flag change that made it; what it cost in
GPU-seconds (simulated: what the real engine would have taken); and what this run recorded in the
experience store, whose path it prints before it starts (``RSI_ENV_STORE=off`` records nothing).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

__all__ = ["run_demo"]

_FIELDS = ("goodput_req_per_s", "out_tok_per_s", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99",
           "num_preemptions", "prefix_cache_hit_rate", "kv_cache_usage_peak", "num_gpu_blocks")


def _fmt(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def run_demo(env_id: str = "RSI/KVCache-v0", budget: int = 40, plot: str | None = "rsi-env-demo.png",
             **env_kwargs: Any) -> dict[str, Any]:
    import gymnasium as gym

    import rsi_env  # noqa: F401  (registers the envs)
    from rsi_env.envs.core import RsiEnv
    from rsi_env.store import default_store

    store = default_store()
    before = store.stats() if store is not None else None
    print(f"rsi-env demo: recording into the experience store {before['store']} (RSI_ENV_STORE=off: nothing)"
          if before else "rsi-env demo: the experience store is off (RSI_ENV_STORE); nothing is recorded", flush=True)
    t0 = time.perf_counter()

    env = gym.make(env_id, max_steps=budget + 2, max_measurements=budget + 1, **env_kwargs).unwrapped
    assert isinstance(env, RsiEnv)
    env.reset(seed=0)
    history: list[tuple[float, float, str]] = []  # per step: its score, the best so far, the change it tried
    best_cfg = env.config
    best = 0.0
    improved = True
    while improved and env.steps < budget:
        improved = False
        fixed = env.fixed_flags()
        for name in [n for n in env.flag_names if n not in fixed]:
            for value in env.task.ladder(name):
                if env.steps >= budget:
                    break
                env.config = best_cfg
                v = list(value) if isinstance(value, tuple) else value
                if getattr(best_cfg, name) == (tuple(value) if isinstance(value, list) else value):
                    continue
                _, _, _, _, info = env.step(env.flag_action(name, v))
                s = info["score"] if info["score"] is not None else -math.inf
                history.append((s, max(best, s) if math.isfinite(s) else best, f"{name}={v}"))
                if math.isfinite(s) and s > best + 1e-9:
                    best, best_cfg, improved = s, env.config, True
    env.config = best_cfg
    _, reward, _, _, info = env.step({"kind": 4})  # submit measures the best configuration, unless it just was
    found_tels = env.last_tels
    wall = time.perf_counter() - t0
    lines = [f"rsi-env demo: {env_id} on the sim tier — {env.model.name} on {env.num_gpus} x {env.hardware.name}, "
             f"vLLM {env.tier.engine_version} (calibration: {env.base_tels[0].calibration})",
             f"objective: {'maximise' if env.task.maximize else 'minimise'} {env.task.metric} over "
             f"{list(env.workload_names)}; search: coordinate descent, {env.steps - 1} steps, {wall:.1f}s",
             f"found: {best_cfg.to_dict(only_set=True) or 'nothing better than vLLM defaults'}", ""]
    head = f"{'workload':20s} {'metric':22s} {'vLLM default':>12s} {'found':>12s} {'change':>8s}"
    lines += [head, "-" * len(head)]
    for w, a, b in zip(env.workloads, env.base_tels, found_tels, strict=True):
        for f in _FIELDS:
            va, vb = getattr(a, f), getattr(b, f)
            ch = f"{(vb / va - 1) * 100:+.1f}%" if isinstance(va, (int, float)) and va else ""
            lines.append(f"{w.name:20s} {f:22s} {_fmt(va):>12s} {_fmt(vb):>12s} {ch:>8s}")
    gain = math.expm1(best) * 100
    lines += ["", f"objective vs vLLM defaults: {gain:+.1f}% (score {best:+.4f}); submission "
              f"{'PASSED' if info['verdict']['passed'] else 'FAILED'}: {info['verdict']['guards']}"]
    lines.append(f"cost: {env.cost.summary()}")
    env.close()  # records the episode in the experience store
    after = store.stats() if store is not None else None
    if before and after:
        lines.append(f"experience store: this run recorded {after['measurements'] - before['measurements']} "
                     f"measurements and {after['episodes'] - before['episodes']} episode in {after['store']} "
                     f"(it holds {after['measurements']} and {after['episodes']}: rsi-env experience stats)")
    else:
        lines.append("experience store: off (RSI_ENV_STORE); nothing recorded")
    stored = after
    if plot:
        _plot(history, env_id, plot)
        lines.append(f"plot: {Path(plot).resolve()}")
    print("\n".join(lines))
    return {"best_score": best, "gain": gain, "config": best_cfg.to_dict(only_set=True),
            "history": [b for _, b, _ in history], "passed": info["verdict"]["passed"], "seconds": wall,
            "cost": env.cost.to_dict(), "store": stored}


def _plot(history: list[tuple[float, float, str]], env_id: str, path: str) -> None:
    """Every step's score (dots) and the best so far (line), each new best labelled with its change."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    steps = range(1, len(history) + 1)
    pct = [math.expm1(b) * 100 for _, b, _ in history]
    tried = [(i, math.expm1(s) * 100) for i, (s, _, _) in zip(steps, history, strict=True) if math.isfinite(s)]
    ax.plot(steps, pct, drawstyle="steps-post", label="best so far")
    ax.scatter([i for i, _ in tried], [v for _, v in tried], s=10, color="grey", zorder=3, label="each step's change")
    prev, labels = 0.0, 0
    for i, (_, b, change) in zip(steps, history, strict=True):
        if b > prev + 1e-9:
            ax.annotate(change, (i, math.expm1(b) * 100), textcoords="offset points", xytext=(6, -12 - 10 * labels),
                        fontsize=7, arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "grey"})
            prev, labels = b, labels + 1
    ax.axhline(0, color="grey", lw=0.8, ls="--", label="vLLM defaults")
    ax.set_xlabel("step (one flag change and its measurement each)")
    ax.set_ylabel("objective vs defaults (%)")
    ax.set_title(f"{env_id}: coordinate descent on the sim tier")
    ax.margins(y=0.12)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
