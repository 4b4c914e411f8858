"""Run a BugFix workspace's engine code and report what it did: copied into a fresh sandbox and run there.

``python -I harness.py JOB.json OUT.json`` in a folder holding the workspace's ``kv_cache.py``,
``engine.py`` and ``config.py``. The job names the root of the engine runtime
(`rsi_env.tasks.bugfix.templates.engine_runtime`: the package without its hidden parts, the simulator's cost
model, memory plan and workload traces among it, whose engine modules are the workspace's own) and
three kinds of work:

- ``pool_ops``: sequences of block-pool operations, replayed on the workspace's ``BlockPool``; the
  pool's state is recorded after every operation;
- ``resolve``: engine configurations resolved by the workspace's ``config.py``;
- ``runs``: workloads simulated end to end — configuration resolved by the workspace's ``config.py``,
  the workspace's ``EngineSim`` over the workspace's ``BlockPool`` — reporting telemetry, each
  request's first-token and finish times, and the pool's state once the engine stopped.

The output holds only observations, never verdicts: the env compares them with the same job run on
its own (clean) modules through :func:`run_job`, so code in this process cannot decide a check.
Anything here may be rewritten by the workspace's code; the env trusts no number it reports that the
clean engine's run does not pin down. Standard library only at import time (the package is imported
from the job's root).
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["pool_state", "run_job"]


def _err(exc: BaseException) -> dict[str, str]:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-4)
    return {"error": f"{type(exc).__name__}: {exc}"[:400], "traceback": "".join(tb)[-1500:]}


def pool_state(pool: Any) -> dict[str, Any]:
    """What a block pool holds: free, evictable, owned and referenced blocks, cached chains in LRU order."""
    cached = {int(k): int(v) for k, v in pool.cached.items()}
    refs = {int(k): int(v) for k, v in pool.refs.items()}
    return {"num_blocks": int(pool.num_blocks), "free_plain": int(pool.free_plain), "evictable": int(pool.evictable),
            "owned": int(pool.owned), "cached": sorted(cached.items()), "refs": sorted(refs.items()),
            "lru": [int(c) for c in pool._lru], "num_free": int(pool.num_free)}


def _pool_ops(kv: ModuleType, ops: list[list[Any]]) -> list[Any]:
    out: list[Any] = []
    pool = kv.BlockPool(int(ops[0][1]))
    out.append(pool_state(pool))
    for op in ops[1:]:
        try:
            ret = getattr(pool, op[0])(*op[1:])
            out.append({"ret": ret if isinstance(ret, int) else None, **pool_state(pool)})
        except Exception as exc:
            out.append(_err(exc))
            break
    return out


def _resolve(config: ModuleType, case: dict[str, Any]) -> dict[str, Any]:
    from rsi_env.engine.hardware import load_hardware
    from rsi_env.engine.model import load_model
    from rsi_env.errors import InvalidConfigError

    try:
        cfg = config.EngineConfig.from_dict(case["config"])
        res = cfg.resolve(load_model(case["model"]), load_hardware(case["hardware"]), case["engine_version"],
                          case.get("usage_context", "server"))
        return {"resolved": res.to_dict()}
    except InvalidConfigError as exc:
        return {"refused": str(getattr(exc, "field", type(exc).__name__))}


def _run(kv: ModuleType, engine: ModuleType, config: ModuleType, spec: dict[str, Any]) -> dict[str, Any]:
    from rsi_env.engine.config import EngineConfig, ResolvedConfig
    from rsi_env.engine.hardware import load_hardware
    from rsi_env.engine.model import load_model
    from rsi_env.engine.workload import Workload
    from rsi_env.sim import simulate_detailed

    model, hw = load_model(spec["model"]), load_hardware(spec["hardware"])
    res = _resolve(config, {**spec, "config": spec["config"]})
    if "resolved" not in res:
        return {"refused": res["refused"]}
    raw = dict(res["resolved"])
    raw["cudagraph_capture_sizes"] = tuple(raw["cudagraph_capture_sizes"])
    resolved = ResolvedConfig(**raw)

    class Resolved(EngineConfig):  # the workspace's resolution, handed to the package's simulate_detailed
        def resolve(self, *args: Any, **kwargs: Any) -> ResolvedConfig:
            return resolved

    engines: list[Any] = []

    def make(*args: Any) -> Any:
        e = engine.EngineSim(*args)
        engines.append(e)
        return e

    tel, _, _, results = simulate_detailed(Resolved(), model, hw, Workload.from_dict(spec["workload"]),
                                           engine_version=spec["engine_version"], engine_cls=make)
    out: dict[str, Any] = {"telemetry": tel.to_dict(), "resolved": res["resolved"]}
    if results:
        r = results[0]
        out |= {"first": [float(x) for x in r.first_token], "finish": [float(x) for x in r.finish],
                "unfinished": int(sum(1 for f in r.finish if not math.isfinite(float(f))))
                + int(sum(int(g < o) for g, o in zip(r.generated, r.output_len, strict=True)))}
    if engines:
        out["pool"] = pool_state(engines[0].pool)
    return out


def run_job(job: dict[str, Any], kv: ModuleType, engine: ModuleType, config: ModuleType) -> dict[str, Any]:
    """Every piece of ``job`` on the given modules; a piece that raises is reported, the others still run."""
    out: dict[str, Any] = {"pool_ops": [], "resolve": [], "runs": []}
    for ops in job.get("pool_ops", []):
        try:
            out["pool_ops"].append(_pool_ops(kv, ops))
        except Exception as exc:
            out["pool_ops"].append([_err(exc)])
    for case in job.get("resolve", []):
        try:
            out["resolve"].append(_resolve(config, case))
        except Exception as exc:
            out["resolve"].append(_err(exc))
    for spec in job.get("runs", []):
        try:
            out["runs"].append(_run(kv, engine, config, spec))
        except Exception as exc:
            out["runs"].append(_err(exc))
    return out


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, Path(f"{name}.py").resolve())
    if spec is None or spec.loader is None:
        raise ImportError(f"{name}.py not found in the workspace")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # engine.py imports kv_cache by this name
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str]) -> int:
    src, dst = Path(argv[1]), Path(argv[2])
    job = json.loads(src.read_text())
    src.unlink()
    sys.path[:0] = [job["pkg_root"], str(Path.cwd())]  # the runtime, and the workspace its stubs load
    try:
        import rsi_env.sim  # noqa: F401  (in the runtime, its engine modules are the workspace's)

        mods = [_load(n) for n in ("kv_cache", "engine", "config")]
        out = run_job(job, *mods)
    except BaseException as exc:  # the workspace's own failure (a syntax error, an exit), reported to the agent
        out = {"load_error": _err(exc)}
    dst.write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
