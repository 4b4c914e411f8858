"""What each suite is drawn from: the candidate instances `rsi_env.suite.build` freezes (or leaves out).

``rsi-bench-v1`` is vLLM's. ``rsi-bench-v2`` keeps every instance of v1 as frozen (`SUITE_BASES`) and adds
SGLang's flag families (``engine="sglang"``: its flags, defaults and simulator), drawn the same way.
``rsi-bench-v3`` is v1 plus SGLang's flag families drawn again on SGLang's simulator as it now prices a prefill pass
(CUDA graphs up to the chunk size only) with the H100 coefficients refitted for it: v2's SGLang ceilings were found
on the simulator before, so v2 reports calibration drift on this install. ``rsi-bench-v4`` is v1 plus SGLang's flag
families drawn again with the H100 coefficients refitted with SGLang's passes outside any CUDA graph in training (a
decode batch above ``cuda_graph_max_bs``, a prefill without chunking) and the decode-to-prefill switch priced: v3's
SGLang ceilings were found with the coefficients before, so v3 reports calibration drift on this install.
``rsi-bench-v5`` is v1 plus SGLang's flag families drawn again with the H100 coefficients refitted with a decode pass's
repeated reads of a shared cached prefix priced (``kv_shared_read``): v4's SGLang ceilings were found without it, so
v4 reports calibration drift on this install.

Three fronts, as the field's benchmarks split inference engineering:

- **optimisation**: each flag family (KVCache, Batching, PrefixCache, Quantization, Parallelism) over
  models x chips x workload mixes — the grid below, in a fixed shuffled order, `flag_quota` kept per
  family once their ceilings are found (a candidate without headroom over vLLM's defaults is left out); the
  Scheduler over its two settings, workload sets and seeds; the Kernel over ops x dtypes.
- **day-zero**: every DayZero feature.
- **bug-fixing**: every verified BugFix instance, and every verified VLLMBugFix instance where the family
  is installed.

A candidate's id says what it is (``opt-batching-llama-3.1-8b-h200-short_long+many_small``,
``opt-sglang-batching-...`` on SGLang); its env kwargs and reset seed pin it.
"""

from __future__ import annotations

import importlib
import itertools
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rsi_env.errors import SuiteError

__all__ = ["FLAG_PER_FAMILY", "SUITE_BASES", "Candidate", "candidates", "flag_quota"]

FLAG_PER_FAMILY = 40
# Parallelism's grids (70B and MoE models over 4-8 GPUs) are searched at 20x their budget, the build's costliest
# ceilings: fewer of them.
_FLAG_QUOTA = {"Parallelism": 25, "SGLang-Batching": 6, "SGLang-KVCache": 6}
_ORDER_SEED = 20261205  # the fixed shuffle that decides which candidates of a family are tried first

# Per flag family: its env id, and the models, chips, workload mixes and extra kwargs to draw from.
_FLAG_GRID: dict[str, dict[str, Any]] = {
    # KVCache-v1: a co-tenant's memory share (30 % at most) of each chip; variant l4: v0's whole small GPU.
    "KVCache": {"env_id": "RSI/KVCache-v1",
                "models": ["llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "llama-3.2-1b", "qwen3-30b-a3b"],
                "hardware": ["h200", "h100-sxm", "b200", "mi300x", "a100-80gb"],
                "mixes": [["long_context", "rag_chat"], ["rag_chat", "shared_prefix_chat"],
                          ["shared_prefix_chat", "many_small"]],
                "extra": [{}, {"variant": "l4"}]},
    "Batching": {"env_id": "RSI/Batching-v0",
                 "models": ["llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "llama-3.2-1b", "qwen3-30b-a3b"],
                 "hardware": ["h200", "h100-sxm", "a100-80gb", "l40s", "b200", "mi300x"],
                 "mixes": [["short_long", "many_small"], ["many_small", "long_context"], ["short_long", "rag_chat"]]},
    "PrefixCache": {"env_id": "RSI/PrefixCache-v0",
                    "models": ["llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "llama-3.2-1b", "qwen3-30b-a3b"],
                    "hardware": ["h200", "h100-sxm", "a100-80gb", "l40s", "l4"],
                    "mixes": [["shared_prefix_chat", "shared_prefix_many"], ["shared_prefix_many", "rag_chat"],
                              ["shared_prefix_chat", "rag_chat"]]},
    "Quantization": {"env_id": "RSI/Quantization-v0",
                     "models": ["llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "llama-3.2-1b", "qwen3-30b-a3b"],
                     "hardware": ["h200", "h100-sxm", "l40s", "l4", "b200"],
                     "mixes": [["short_long", "long_context"], ["many_small", "rag_chat"]]},
    "Parallelism": {"env_id": "RSI/Parallelism-v0",
                    "models": ["llama-3.1-70b", "qwen3-30b-a3b", "llama-3.1-8b"],
                    "hardware": ["h200", "h100-sxm", "a100-80gb", "b200", "mi300x"],
                    "mixes": [["short_long", "long_context"], ["many_small", "rag_chat"]],
                    "extra": [{"num_gpus": 8}, {"num_gpus": 4}]},
}
# SGLang's flag families (rsi-bench-v2): dense models (what SGLang's sim was checked on) on the H100, whose SGLang
# coefficients are fitted on real SGLang rows, and the H200, priced with its vLLM fit. PrefixCache is not drawn
# on SGLang, as on vLLM in v1: the defaults already cache prefixes (RadixAttention is on). A random search of 80 on
# three of its settings (8B on H100, Qwen 7B on H200, 1B on H100) beat SGLang's defaults by 3.0, 0.1 and 0.0 %,
# under the 10 % headroom an instance needs.
_SGLANG_GRID: dict[str, dict[str, Any]] = {
    "SGLang-Batching": {"env_id": "RSI/Batching-v0", "models": ["llama-3.1-8b", "qwen2.5-7b", "llama-3.2-1b"],
                        "hardware": ["h100-sxm", "h200"],
                        "mixes": [["short_long", "many_small"], ["many_small", "long_context"],
                                  ["short_long", "rag_chat"]],
                        "extra": [{"engine": "sglang"}]},
    "SGLang-KVCache": {"env_id": "RSI/KVCache-v1", "models": ["llama-3.1-8b", "qwen2.5-7b", "llama-3.2-1b"],
                       "hardware": ["h100-sxm", "h200"],
                       "mixes": [["long_context", "rag_chat"], ["rag_chat", "shared_prefix_chat"],
                                 ["shared_prefix_chat", "many_small"]],
                       "extra": [{"engine": "sglang"}]},
}
# A later suite keeps its base's frozen instances verbatim (ids, ceilings, difficulties) and adds its own candidates.
SUITE_BASES = {"rsi-bench-v2": "rsi-bench-v1", "rsi-bench-v3": "rsi-bench-v1", "rsi-bench-v4": "rsi-bench-v1",
               "rsi-bench-v5": "rsi-bench-v1"}
# The Scheduler: models on the task's chip, over the task's workload sets, seeds for the workloads' draws.
# Scheduler-v1 on its H200 and v0's L4 setting (variant l4), each over its workload sets and seeds.
_SCHEDULER = ({"mixes": (("bursty_chat_h200", "mixed_rag_h200"), ("bursty_chat_h200",), ("mixed_rag_h200",))},
              {"variant": "l4", "mixes": (("bursty_chat", "mixed_rag"), ("bursty_chat",), ("mixed_rag",))})
_SCHEDULER_SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class Candidate:
    """An instance before it is frozen: which env, which kwargs and seed, which front and family."""

    id: str
    kind: str                      # "flag" or "code"
    front: str
    family: str
    env_id: str
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0


def flag_quota(family: str) -> int:
    """How many instances of a flag family the suite keeps (the first that fit, in the family's order)."""
    return _FLAG_QUOTA.get(family, FLAG_PER_FAMILY)


def _slug(kwargs: Mapping[str, Any]) -> str:
    parts = [str(kwargs.get("model", "")), str(kwargs.get("hardware", "")), "+".join(kwargs.get("workloads", []))]
    parts += [f"{v}{k.replace('num_', '').replace('_', '')}" for k, v in sorted(kwargs.items())
              if k not in ("model", "hardware", "workloads", "engine")]  # the engine is in the family's name
    return "-".join(p for p in parts if p)


def flag_candidates(grid: Mapping[str, Mapping[str, Any]] = _FLAG_GRID) -> list[Candidate]:
    """Every flag family's grid, each family in its fixed shuffled order (the build keeps the first that fit)."""
    out = []
    for family, g in grid.items():
        combos = list(itertools.product(g["models"], g["hardware"], g["mixes"], g.get("extra", [{}])))
        random.Random(f"{_ORDER_SEED}/{family}").shuffle(combos)
        for model, hw, mix, extra in combos:
            kwargs = {"model": model, "hardware": hw, "workloads": list(mix), **extra}
            out.append(Candidate(f"opt-{family.lower()}-{_slug(kwargs)}", "flag", "optimisation", family,
                                 g["env_id"], kwargs))
    return out


def _code(front: str, family: str, env_id: str, name: str, kwargs: Mapping[str, Any], seed: int) -> Candidate:
    prefix = {"optimisation": "opt", "day-zero": "dz", "bug-fixing": "bug"}[front]
    return Candidate(f"{prefix}-{family.lower()}-{name}", "code", front, family, env_id, dict(kwargs), seed)


def code_candidates() -> list[Candidate]:
    """The code families' instances: what each family's own catalogue pins."""
    out = []
    for setting in _SCHEDULER:
        for mix, seed in itertools.product(setting["mixes"], _SCHEDULER_SEEDS):
            kwargs = {"workloads": list(mix), **({"variant": setting["variant"]} if "variant" in setting else {})}
            out.append(_code("optimisation", "Scheduler", "RSI/Scheduler-v1", f"{_slug(kwargs)}-s{seed}", kwargs,
                             seed))
    for fam, front in (("kernel", "optimisation"), ("dayzero", "day-zero"), ("bugfix", "bug-fixing"),
                       ("vllm_bugfix", "bug-fixing")):
        try:
            module = importlib.import_module(f"rsi_env.tasks.{fam}.instances")
        except ModuleNotFoundError:
            continue
        for name, env_id, kwargs, seed in module.suite_instances():
            out.append(_code(front, module.FAMILY, env_id, name, kwargs, seed))
    return out


def candidates(suite: str = "rsi-bench-v1") -> list[Candidate]:
    """Every candidate ``suite`` adds to its base (`SUITE_BASES`; v1 has none), flag families first."""
    if suite == "rsi-bench-v1":
        return flag_candidates() + code_candidates()
    if suite in SUITE_BASES:
        return flag_candidates(_SGLANG_GRID)
    raise SuiteError(f"no plan for suite {suite!r}; plans: {['rsi-bench-v1', *SUITE_BASES]}")
