"""RSI/DayZero-v0's hidden checks: the workspace's loader, cost model and block against hidden references.

The agent's ``spec.py`` and ``block.py`` run only in fresh sandboxes (`rsi_env.sandbox.fresh.run_harness`),
through the harnesses `run_spec.py` and `run_block.py`; only their JSON output comes back and every
value is validated here. Each sandbox shows only what its harness imports (`spec_profile`: the
standard library; `block_profile`: torch and numpy), never the package nor any checkout, so no
reference is in reach. The references live in ``catalog/code/dayzero/hidden``: ``reference_spec.py``
(standard library) is imported here; ``reference_block.py`` (torch) runs through the same harness as
the agent's block in a sandbox of its own, so this process never imports torch and both blocks see
bit-identical weights and inputs. Every verdict compares what the agent's process reported with the
reference's own answer, computed outside it (exactly, or within the tolerance): forging a pass needs
that answer, which is the work. Checks (one `CheckResult` each):

- ``loader: ModelSpec fields (<config>)`` for the full and the tiny config;
- ``cost: param_count``, ``cost: flops_per_token``, ``cost: kv_bytes`` (both configs, every context of
  ``checks.yaml``; exact integers);
- ``block: seed=… tokens=… first_position=… layer=…``: the layer's output within the tolerance.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import math
from collections import OrderedDict
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import yaml

from rsi_env.engine.model import ModelSpec
from rsi_env.errors import DayZeroError, RsiEnvError
from rsi_env.sandbox.backends import default_backend
from rsi_env.sandbox.base import Limits
from rsi_env.sandbox.deadline import untimed
from rsi_env.sandbox.fresh import ReportErrors, run_agent_module, run_harness
from rsi_env.sandbox.hidden import CODE_DIR, CheckResult
from rsi_env.sandbox.profile import Profile

__all__ = ["FEATURES", "MODEL_SIZES", "CheckResult", "DayZeroError", "Feature", "block_profile", "check_workspace",
           "load_feature", "model_spec", "run_block", "run_spec", "spec_profile"]

ROOT = CODE_DIR / "dayzero"
HIDDEN = ROOT / "hidden"
# Every architecture's new part, by the name of its folder under catalog/code/dayzero/features/.
FEATURES = ("qk_norm", "yarn", "sliding_window", "shared_experts", "logit_softcap", "partial_rotary",
            "attention_sinks", "nope_layers", "sigmoid_routing")
# The full configs each feature ships (``<size>.json``); the checks' tiny variant (``tiny.json``) is one per feature.
MODEL_SIZES = ("small", "large")
HERE = Path(__file__).resolve().parent
SPEC_TIMEOUT_S = 10.0
BLOCK_TIMEOUT_S = 60.0
_SPEC_LIMITS = Limits(cpu_s=10, memory_bytes=1 << 30, file_bytes=16 << 20, max_procs=32)
_BLOCK_LIMITS = Limits(cpu_s=60, memory_bytes=4 << 30, file_bytes=64 << 20, max_procs=64)
_SPEC_FIELDS = {f.name: f for f in dataclasses.fields(ModelSpec) if f.name not in ("name", "raw")}
_CACHE: OrderedDict[str, Any] = OrderedDict()


_SPEC_ERRORS = ReportErrors(DayZeroError, timed_out="spec.py did not finish",
                            missing="spec.py produced no answers",
                            not_json="spec.py's answers are not JSON (did it write over them?)",
                            raised="spec.py raised an error")
_BLOCK_ERRORS = ReportErrors(DayZeroError, timed_out="block.py did not finish",
                             missing="block.py produced no outputs",
                             not_json="block.py's outputs are not JSON (did it write over them?)",
                             raised="block.py could not be run")


def spec_profile() -> Profile:
    """What the loader's sandbox shows: the interpreter and its standard library (run_spec.py needs no more)."""
    return Profile()


def block_profile() -> Profile:
    """What the block's sandbox shows: torch and numpy (run_block.py and a decoder layer need no more)."""
    return Profile(packages=("torch", "numpy"))


@dataclass(frozen=True)
class Feature:
    """One DayZero instance: the new architecture's config.json at one model size, its tiny variant and its card."""

    name: str
    config: dict[str, Any]
    tiny: dict[str, Any]
    card: str
    size: str = "small"


def load_feature(name: str, size: str = "small") -> Feature:
    if name not in FEATURES:
        raise RsiEnvError(f"unknown DayZero feature {name!r}; known: {list(FEATURES)}")
    if size not in MODEL_SIZES:
        raise RsiEnvError(f"unknown DayZero model size {size!r}; known: {list(MODEL_SIZES)}")
    d = ROOT / "features" / name
    return Feature(name, json.loads((d / f"{size}.json").read_text()), json.loads((d / "tiny.json").read_text()),
                   (d / "MODEL.md").read_text(), size)


@cache
def reference_spec() -> ModuleType:
    """The hidden reference loader and cost model (standard library only, so it may run in this process)."""
    spec = importlib.util.spec_from_file_location("rsi_dayzero_reference_spec", HIDDEN / "reference_spec.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def checks_spec() -> dict[str, Any]:
    return dict(yaml.safe_load((HIDDEN / "checks.yaml").read_text()))


def _cached(key: str, make: Any, fresh: bool = False) -> Any:
    """``make()``, remembered by ``key``; ``fresh`` makes it anew (a submission is judged from a clean start)."""
    if fresh or key not in _CACHE:
        _CACHE[key] = make()
        if len(_CACHE) > 256:
            _CACHE.popitem(last=False)
    _CACHE.move_to_end(key)
    return _CACHE[key]


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _backend(backend: str) -> str:
    return default_backend() if backend == "auto" else backend


# ---- the loader ------------------------------------------------------------------------------------
def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def run_spec(source: str, configs: dict[str, dict[str, Any]], contexts: list[int], backend: str = "auto",
             fresh: bool = False) -> dict[str, dict[str, Any]]:
    """``spec.py``'s answers for each config, validated; `DayZeroError` says what went wrong (``fresh``: see `_cached`)."""
    name = _backend(backend)

    def go() -> dict[str, dict[str, Any]]:
        data = run_agent_module(HERE / "run_spec.py", "spec.py", source,
                                json.dumps({"configs": configs, "contexts": contexts}), _SPEC_ERRORS,
                                input_file="configs.json", report="out.json", backend=name, timeout_s=SPEC_TIMEOUT_S,
                                max_output=4096, limits=_SPEC_LIMITS, profile=spec_profile())
        if not isinstance(data, dict) or set(data) != set(configs):
            raise DayZeroError("spec.py's answers do not cover exactly the configs asked for")
        for cname, ans in data.items():
            if not isinstance(ans, dict) or not isinstance(ans.get("fields"), dict):
                raise DayZeroError(f"spec_fields({cname}) must return a dict of ModelSpec fields")
            if not _is_int(ans.get("param_count")):
                raise DayZeroError(f"param_count({cname}) must return an int, got {ans.get('param_count')!r:.80}")
            for fn in ("flops_per_token", "kv_bytes"):
                vals = ans.get(fn)
                if not isinstance(vals, list) or len(vals) != len(contexts) or not all(_is_int(v) for v in vals):
                    raise DayZeroError(f"{fn}({cname}, context_tokens) must return an int")
        return data

    return _cached(_key("spec", name, source, configs, contexts), go, fresh)


def model_spec(fields: dict[str, Any], config: dict[str, Any], name: str) -> ModelSpec:
    """The `ModelSpec` the workspace's ``spec_fields`` describes, or `DayZeroError` naming the bad field."""
    unknown = sorted(set(fields) - set(_SPEC_FIELDS))
    if unknown:
        raise DayZeroError(f"spec_fields returned fields ModelSpec does not have: {unknown}; "
                           f"its fields: {sorted(_SPEC_FIELDS)}")
    kwargs: dict[str, Any] = {}
    for k, v in fields.items():
        default = _SPEC_FIELDS[k].default
        kind = type(default) if default is not dataclasses.MISSING and default is not None else None
        if k in ("architecture", "rope_scaling_type"):
            ok = isinstance(v, str) or (v is None and k == "rope_scaling_type")
        elif k in ("tie_word_embeddings", "qk_norm"):
            ok = isinstance(v, bool)
        elif k == "sliding_window":
            ok = v is None or (_is_int(v) and v > 0)
        else:
            ok = _is_int(v) and v >= 0 and (kind is None or kind is int)
        if not ok:
            raise DayZeroError(f"spec_fields: {k}={v!r:.80} is not a valid value for ModelSpec.{k}")
        kwargs[k] = v
    missing = [k for k, f in _SPEC_FIELDS.items() if f.default is dataclasses.MISSING and k not in kwargs]
    if missing:
        raise DayZeroError(f"spec_fields must give {missing}")
    for k in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "vocab_size"):
        if kwargs[k] < 1:
            raise DayZeroError(f"spec_fields: {k} must be >= 1")
    if kwargs["num_heads"] % kwargs["num_kv_heads"]:
        raise DayZeroError("spec_fields: num_heads must be a multiple of num_kv_heads")
    return ModelSpec(name=name, raw=dict(config), **kwargs)


# ---- the block -------------------------------------------------------------------------------------
def block_cases(feature: Feature) -> list[dict[str, Any]]:
    spec, ref = checks_spec(), reference_spec()
    cases = []
    for layer in spec["layers"][feature.name]:
        shapes = ref.layer_shapes(feature.tiny, layer)
        for c in spec["block_cases"]:
            cid = f"seed={c['seed']} tokens={c['tokens']} first_position={c['first_position']} layer={layer}"
            cases.append({"id": cid, **c, "layer": layer, "shapes": shapes})
    return cases


def run_block(source: str, config: dict[str, Any], cases: list[dict[str, Any]], backend: str = "auto",
              fresh: bool = False) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Outputs of ``source``'s decoder_layer per case, and the cases it failed on (with the error)."""
    name = _backend(backend)

    def go() -> tuple[dict[str, np.ndarray], dict[str, str]]:
        data = run_harness({"block.py": source, "run_block.py": (HERE / "run_block.py").read_text(),
                            "cases.json": json.dumps({"config": config, "cases": cases})},
                           "{python} -I run_block.py cases.json out.json", "out.json", _BLOCK_ERRORS, backend=name,
                           timeout_s=BLOCK_TIMEOUT_S, max_output=4096, limits=_BLOCK_LIMITS, profile=block_profile())
        if not isinstance(data, dict) or not isinstance(data.get("outputs"), dict) or not isinstance(
                data.get("errors"), dict):
            raise DayZeroError("block.py's outputs file is malformed (did it write over it?)")
        outs: dict[str, np.ndarray] = {}
        errors = {str(k): str(v)[-1200:] for k, v in data["errors"].items()}
        for c in cases:
            v = data["outputs"].get(c["id"])
            if v is None:
                errors.setdefault(c["id"], "no output")
                continue
            try:
                outs[c["id"]] = np.asarray(v, dtype=np.float64)
            except (TypeError, ValueError):
                errors[c["id"]] = "the output is not a numeric tensor"
        return outs, errors

    return _cached(_key("block", name, source, config, cases), go, fresh)


def reference_outputs(feature: Feature, backend: str = "auto") -> dict[str, np.ndarray]:
    """The hidden reference block's outputs on the feature's cases (computed once per process and backend).

    Trusted code, so it runs under no step's deadline: whichever step first needs it pays its time.
    """
    with untimed():
        outs, errors = run_block((HIDDEN / "reference_block.py").read_text(), feature.tiny, block_cases(feature),
                                 backend)
    if errors:
        raise RsiEnvError(f"the hidden reference block failed (a bug in rsi-env): {errors}")
    return outs


def _compare(got: np.ndarray, want: np.ndarray, tol: dict[str, float]) -> str:
    if got.shape != want.shape:
        return f"output shape {list(got.shape)}, expected {list(want.shape)}"
    if not np.all(np.isfinite(got)):
        return "the output has NaN or inf"
    err = np.abs(got - want)
    bad = err > tol["atol"] + tol["rtol"] * np.abs(want)
    if bad.any():
        t, h = np.unravel_index(int(np.argmax(err)), err.shape)
        return (f"{int(bad.sum())}/{bad.size} values differ from the reference; max |error| {err.max():.3g} "
                f"at token {t}, channel {h} (tolerance atol {tol['atol']:g}, rtol {tol['rtol']:g})")
    return ""


# ---- all checks -------------------------------------------------------------------------------------
def spec_checks(source: str, feature: Feature, backend: str = "auto", fresh: bool = False) -> list[CheckResult]:
    """The loader and cost checks on the full and tiny configs."""
    spec, ref = checks_spec(), reference_spec()
    configs = {"config.json": feature.config, "tiny/config.json": feature.tiny}
    contexts = [int(c) for c in spec["contexts"]]
    try:
        got = run_spec(source, configs, contexts, backend, fresh)
    except DayZeroError as exc:
        return [CheckResult("loader runs", False, str(exc))]
    out = []
    for cname, cfg in configs.items():
        want = ModelSpec(name="reference", raw=cfg, **ref.spec_fields(cfg))
        try:
            have = model_spec(got[cname]["fields"], cfg, "workspace")
        except DayZeroError as exc:
            out.append(CheckResult(f"loader: ModelSpec fields ({cname})", False, str(exc)))
            continue
        wrong = [f"{k}={getattr(have, k)!r} (expected {getattr(want, k)!r})" for k in _SPEC_FIELDS
                 if getattr(have, k) != getattr(want, k)]
        out.append(CheckResult(f"loader: ModelSpec fields ({cname})", not wrong, "; ".join(wrong)))
    for fn in ("param_count", "flops_per_token", "kv_bytes"):
        wrong = []
        for cname, cfg in configs.items():
            if fn == "param_count":
                pairs = [("", got[cname][fn], ref.param_count(cfg))]
            else:
                pairs = [(f" at {c} tokens", g, getattr(ref, fn)(cfg, c))
                         for c, g in zip(contexts, got[cname][fn], strict=True)]
            wrong += [f"{cname}{where}: {g:,} (expected {w:,}, {g / w - 1:+.3%})" for where, g, w in pairs if g != w]
        out.append(CheckResult(f"cost: {fn}", not wrong, "; ".join(wrong[:4])))
    return out


def block_checks(source: str, feature: Feature, backend: str = "auto", fresh: bool = False) -> list[CheckResult]:
    cases = block_cases(feature)
    try:
        outs, errors = run_block(source, feature.tiny, cases, backend, fresh)
    except DayZeroError as exc:
        return [CheckResult("block runs", False, str(exc))]
    want, tol = reference_outputs(feature, backend), checks_spec()["tolerance"]
    out = []
    for c in cases:
        cid = c["id"]
        reason = errors.get(cid) or _compare(outs[cid], want[cid], tol)
        out.append(CheckResult(f"block: {cid}", not reason, reason))
    return out


def check_workspace(spec_source: str, block_source: str, feature: Feature, backend: str = "auto",
                    fresh: bool = False) -> list[CheckResult]:
    """Every hidden check of the workspace's ``spec.py`` and ``block.py`` (``fresh``: nothing remembered is reused)."""
    return spec_checks(spec_source, feature, backend, fresh) + block_checks(block_source, feature, backend, fresh)


def fraction_passed(results: list[CheckResult], total: int) -> float:
    """Passed checks over the number a fully runnable workspace has (a crash counts as every check failed)."""
    return sum(r.ok for r in results) / total if total else math.nan


def num_checks(feature: Feature) -> int:
    return 5 + len(block_cases(feature))
