"""VLLMBugFix instances: bug operators applied to the installed vLLM, kept only if a hidden check then fails.

A candidate is one operator of the catalogue (`rsi_env.tasks.vllm_bugfix.mutations`) or one of `COMBOS`
(two compatibility breaks of one old launcher). `verify` applies it to the clean workspace, runs the
hidden checks on the result in a fresh sandbox (the real engine) and keeps it only if a check fails
beyond doubt: any check but ``throughput`` failing, or the throughput phase taking a different number of
engine steps from the clean engine's (a schedule is deterministic). A rate short of the bar on its own is
not enough: on a shared host a run's CPU time moves by up to ~1.8x between runs under heavy load, so only
what the schedule shows is kept. A candidate whose run timed out is rejected (a bug
that hangs the engine would make every reset wait for the timeout), and so is a ``throughput`` operator
whose engine does not serve the job: its class promises a silent collapse, not a crash.

Verification costs an engine start (tens of seconds) per candidate, so ``python -m
rsi_env.tasks.vllm_bugfix.generator`` verifies every candidate applicable to the installed vLLM and
writes the kept ones, per vLLM version, into ``catalog/code/vllm_bugfix/instances.yaml``, stamped with the
hash of everything a verdict depends on. `instance_for(seed)` takes the seed's instance from that table
(instance ``seed mod n``, in the table's order); where the table has no fresh entry for the installed
vLLM, candidates are verified live from the seed's position on, and remembered for the process.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

import yaml

from rsi_env.errors import CatalogError
from rsi_env.sandbox.hidden import CODE_DIR
from rsi_env.tasks.vllm_bugfix.checks import (
    CHECK_NAMES,
    CHECKS_FILE,
    CLEAN_DEPLOYMENT,
    check_workspace,
    clean_deployment,
)
from rsi_env.tasks.vllm_bugfix.modules import installed_source, installed_version
from rsi_env.tasks.vllm_bugfix.mutations import MUTATIONS_FILE, applicable, apply_mutations, load_mutations
from rsi_env.tasks.vllm_bugfix.runs import ENGINE_ARGS, harness_text

__all__ = ["COMBOS", "INSTANCES_FILE", "Instance", "base_files", "build", "candidates",
           "catalogue_hash", "instance_for", "verified_table", "verify"]

INSTANCES_FILE = CODE_DIR / "vllm_bugfix" / "instances.yaml"
# Launchers written for vLLM 0.26 carry more than one flag 0.32 no longer takes.
COMBOS: tuple[tuple[str, ...], ...] = (
    ("compat_partial_prefills", "compat_calculate_kv_scales"),
    ("compat_override_attention_dtype", "compat_mamba_cache_mode_all"),
    ("compat_partial_prefill_defaults", "compat_bf16x3_router_gemm"),
)


@dataclass(frozen=True)
class Instance:
    """One bugged workspace: its operators, their class, the vLLM modules it holds, the hidden checks it fails."""

    mutations: tuple[str, ...]
    bug_class: str
    modules: tuple[str, ...]
    failing: tuple[str, ...]

    @property
    def id(self) -> str:
        return "+".join(self.mutations)

    def start_files(self) -> dict[str, str]:
        """``engine_args.yaml`` and the instance's modules, bugs in."""
        return apply_mutations(base_files(self.mutations), self.mutations)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Instance:
        return cls(tuple(raw["mutations"]), str(raw["bug_class"]), tuple(raw["modules"]), tuple(raw["failing"]))


def candidates() -> list[tuple[str, ...]]:
    """Every candidate, in a fixed order: each operator alone (by id), then `COMBOS`."""
    return [(i,) for i in sorted(load_mutations())] + list(COMBOS)


def _modules(ids: Sequence[str]) -> tuple[str, ...]:
    muts = load_mutations()
    return tuple(sorted({muts[i].file for i in ids} - {ENGINE_ARGS}))


def base_files(ids: Sequence[str]) -> dict[str, str]:
    """The clean files the operators ``ids`` apply to: the task's deployment and the installed modules they touch."""
    return {ENGINE_ARGS: clean_deployment(), **{m: installed_source(m) for m in _modules(ids)}}


def catalogue_hash() -> str:
    """Hash of everything a verdict depends on: the installed modules' texts, operators, checks, harness and
    supervisor, deployment."""
    muts = load_mutations()
    parts = [installed_version(), MUTATIONS_FILE.read_text(), CHECKS_FILE.read_text(), harness_text(),
             CLEAN_DEPLOYMENT.read_text()]
    parts += [installed_source(f) for f in sorted({m.file for m in muts.values()} - {ENGINE_ARGS})]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _beyond_doubt(failing: dict[str, str]) -> bool:
    """Whether the failed checks hold whatever the host's noise: any but throughput, or a different schedule."""
    return bool(set(failing) - {"throughput"}) or "engine steps" in failing.get("throughput", "")


def verify(ids: Sequence[str], backend: str = "bubblewrap") -> tuple[Instance | None, str]:
    """The instance of operators ``ids`` if a hidden check fails beyond doubt, else None; and why, in words."""
    muts = load_mutations()
    files = base_files(ids)
    if not all(applicable(muts[i], apply_mutations(files, ids[:k])) for k, i in enumerate(ids)):
        return None, "not applicable to this vLLM"
    bugged = apply_mutations(files, ids)
    results = check_workspace(bugged, _modules(ids), backend, fresh=True)
    failing = {c.name: c.reason for c in results if not c.ok}
    if any("did not finish" in r for r in failing.values()):
        return None, "the engine hangs"
    if not failing:
        return None, "every hidden check passes"
    if not _beyond_doubt(failing):
        return None, f"only within the host's noise: {failing}"
    classes = {muts[i].bug_class for i in ids}
    if classes == {"throughput"} and CHECK_NAMES[0] in failing:
        return None, f"not silent, the engine fails: {failing[CHECK_NAMES[0]][:300]}"
    inst = Instance(tuple(ids), classes.pop() if len(classes) == 1 else "mixed", _modules(ids), tuple(failing))
    return inst, "; ".join(f"{k}: {v[:160]}" for k, v in failing.items())


def build(backend: str = "bubblewrap", only: Sequence[str] = (), log: bool = True) -> dict[str, Any]:
    """Verify every candidate (or those whose id is in ``only``); the installed vLLM's table and its counts."""
    t0 = time.perf_counter()
    kept: list[Instance] = []
    rejected: dict[str, str] = {}
    for ids in candidates():
        cid = "+".join(ids)
        if only and cid not in only:
            continue
        t = time.perf_counter()
        inst, why = verify(ids, backend)
        if inst is None:
            rejected[cid] = why
        else:
            kept.append(inst)
        if log:
            print(f"{'kept' if inst else 'rejected'} {cid} ({time.perf_counter() - t:.0f} s): {why[:300]}", flush=True)
    muts = load_mutations()
    per_class = Counter(i.bug_class for i in kept)
    rejected_class = Counter(muts[c.split("+")[0]].bug_class for c in rejected)
    stats = {"vllm": installed_version(), "kept": len(kept), "rejected": len(rejected),
             "kept_per_class": dict(sorted(per_class.items())),
             "rejected_per_class": dict(sorted(rejected_class.items())),
             "failing": dict(sorted(Counter(f for i in kept for f in i.failing).items())),
             "seconds_per_candidate": round((time.perf_counter() - t0) / max(len(kept) + len(rejected), 1), 1)}
    return {"catalogue": catalogue_hash(), "stats": stats, "instances": [i.to_dict() for i in kept],
            "rejected": rejected}


@cache
def _tables() -> dict[str, Any]:
    if not INSTANCES_FILE.is_file():
        return {}
    raw = yaml.safe_load(INSTANCES_FILE.read_text()) or {}
    return dict(raw.get("vllm", {}))


def verified_table() -> list[Instance]:
    """The installed vLLM's verified instances, in the table's order; empty where the table has no fresh entry."""
    entry = _tables().get(installed_version())
    if not entry or entry.get("catalogue") != catalogue_hash():
        return []  # none for this vLLM, or stale: the modules, operators, checks or harness changed since
    return [Instance.from_dict(d) for d in entry.get("instances", [])]


_LIVE: dict[tuple[int, str], Instance] = {}


def instance_for(seed: int, backend: str = "bubblewrap") -> Instance:
    """The verified instance of ``seed``: the table's ``seed mod n``, else the first candidate from that position
    on that verifies now (remembered for the process)."""
    table = verified_table()
    if table:
        return table[seed % len(table)]
    if (seed, backend) not in _LIVE:
        cands = candidates()
        for k in range(len(cands)):
            inst, _ = verify(cands[(seed + k) % len(cands)], backend)
            if inst is not None:
                _LIVE[(seed, backend)] = inst
                break
        else:
            raise CatalogError(f"no candidate makes a hidden check fail on vLLM {installed_version()}")
    return _LIVE[(seed, backend)]


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="verify RSI/VLLMBugFix-v0's instances on the installed vLLM")
    ap.add_argument("--backend", default="bubblewrap")
    ap.add_argument("--only", nargs="*", default=(), help="candidate ids to verify (default: all)")
    ap.add_argument("--out", default=str(INSTANCES_FILE))
    a = ap.parse_args(argv)
    data = build(a.backend, a.only)
    try:
        with open(a.out) as fh:
            doc = yaml.safe_load(fh) or {}
    except FileNotFoundError:
        doc = {}
    doc.setdefault("vllm", {})[installed_version()] = data
    with open(a.out, "w") as fh:
        fh.write("# Verified instances of RSI/VLLMBugFix-v0 per installed vLLM (python -m "
                 "rsi_env.tasks.vllm_bugfix.generator); hidden from agents.\n")
        yaml.safe_dump(doc, fh, sort_keys=False, width=120)
    print(json.dumps(data["stats"], indent=1))


if __name__ == "__main__":
    main()
