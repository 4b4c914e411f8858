"""Bugged instances from seeds: draw bugs, keep an instance only if a hidden check then fails.

``generate(seed)`` draws one bug (70 %) or two (30 %) from the catalogue with ``random.Random(seed)``,
applies them to the clean workspace and runs the hidden checks on the result in a fresh sandbox. An
instance is kept only if at least one check fails and the engine still finishes (a bug that hangs the
engine would make every reset and bench wait for the timeout); otherwise the draw is rejected and the
next one tried. Each kept instance carries its difficulty:

- ``num_bugs``;
- ``distance``: 0 when the cause is in the scheduler loop (``engine.py``), where the symptoms show;
  1 when it is in another module (the block pool, the config resolution) than where it shows;
  2 when the task's own workloads show nothing at all (identical telemetry, no symptom): only the
  hidden checks see it;
- ``visible_caught``: whether the workspace's visible tests fail;
- ``level`` = ``num_bugs + distance + (0 if visible_caught else 1)``, 1 (easy) to 6.

Verification costs about a second per draw, so ``python -m rsi_env.tasks.bugfix.generator --seeds 0-63``
precomputes the instances of a seed range into ``catalog/code/bugfix/instances.yaml``, stamped with
the hash of everything a verdict depends on; a stale or missing entry is generated live and kept for
the process.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cache
from typing import Any

import yaml

from rsi_env.engine.config import EngineConfig
from rsi_env.engine.workload import Workload, load_workload
from rsi_env.errors import CatalogError
from rsi_env.sandbox.fresh import run_fresh
from rsi_env.sandbox.hidden import CODE_DIR
from rsi_env.tasks.bugfix.checks import CHECKS_FILE, HARNESS, BenchResult, bench, check_workspace, workspace_profile
from rsi_env.tasks.bugfix.mutations import MUTATIONS_FILE, apply_mutations, load_mutations
from rsi_env.tasks.bugfix.templates import clean_workspace

__all__ = ["INSTANCES_FILE", "Instance", "catalogue_hash", "generate", "instance_for", "task_workloads",
           "verified_seeds", "visible_tests_fail"]

INSTANCES_FILE = CODE_DIR / "bugfix" / "instances.yaml"
WORKLOAD_DIR = CODE_DIR / "bugfix" / "workloads"
TASK_WORKLOADS = ("bugfix_chat", "bugfix_rag")
MAX_DRAWS = 32
TWO_BUGS = 0.3


@dataclass(frozen=True)
class Instance:
    """One bugged workspace: which bugs, which hidden checks they fail, how hard it is."""

    seed: int
    mutations: tuple[str, ...]
    bug_classes: tuple[str, ...]
    failing: tuple[str, ...]
    rejected: int
    difficulty: dict[str, int] = field(default_factory=dict)

    def files(self) -> dict[str, str]:
        return apply_mutations(clean_workspace(), self.mutations)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Instance:
        return cls(int(raw["seed"]), tuple(raw["mutations"]), tuple(raw["bug_classes"]), tuple(raw["failing"]),
                   int(raw["rejected"]), {k: int(v) for k, v in raw["difficulty"].items()})


def task_workloads() -> list[Workload]:
    return [load_workload(str(WORKLOAD_DIR / f"{n}.yaml")) for n in TASK_WORKLOADS]


def catalogue_hash() -> str:
    """Hash of everything an instance's verdict depends on: engine sources, bugs, checks, harness, tests."""
    parts = [json.dumps(clean_workspace(pkg_root="@PKG_ROOT@"), sort_keys=True), MUTATIONS_FILE.read_text(),
             CHECKS_FILE.read_text(), HARNESS.read_text()]
    parts += [(WORKLOAD_DIR / f"{n}.yaml").read_text() for n in TASK_WORKLOADS]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def visible_tests_fail(files: dict[str, str], backend: str) -> bool:
    """Whether ``python -m pytest -q tests/`` fails on ``files`` (in a fresh sandbox).

    A run that did not finish says nothing about the tests: it is an error, never "caught" (a loaded
    machine would otherwise move instances to an easier level).
    """
    run = run_fresh(files, "{python} -m pytest -q -p no:cacheprovider tests/", backend=backend, timeout_s=60,
                    profile=workspace_profile())
    if run.result.timed_out:
        raise CatalogError(f"the visible tests did not finish {run.timeout_text()}; generate on a quiet machine")
    return not run.result.ok


def _draw(rng: random.Random) -> tuple[str, ...]:
    ids = sorted(load_mutations())
    n = 2 if rng.random() < TWO_BUGS else 1
    return tuple(rng.sample(ids, n))


def generate(seed: int, backend: str = "auto") -> Instance:
    """The instance of ``seed``: the first draw whose bugs make a hidden check fail (verified by running them)."""
    rng = random.Random(seed)
    clean = clean_workspace()
    muts = load_mutations()
    for attempt in range(MAX_DRAWS):
        ids = _draw(rng)
        try:
            files = apply_mutations(clean, ids)
        except CatalogError:  # two bugs in one passage: not a valid pair
            continue
        results = check_workspace(files, backend)
        failing = tuple(c.name for c in results if not c.ok)
        hangs = any(c.name == "workspace runs" and "did not finish" in c.reason for c in results)
        if not failing or hangs:
            continue
        visible = visible_tests_fail(files, backend)
        distance = _distance(files, clean, ids, backend)
        diff = {"num_bugs": len(ids), "distance": distance, "visible_caught": int(visible),
                "level": len(ids) + distance + (0 if visible else 1)}
        return Instance(seed, ids, tuple(muts[i].bug_class for i in ids), failing, attempt, diff)
    raise CatalogError(f"seed {seed}: no draw of {MAX_DRAWS} made a hidden check fail")


def _distance(files: dict[str, str], clean: dict[str, str], ids: Sequence[str], backend: str) -> int:
    ws = task_workloads()
    got = bench(files, EngineConfig(), "qwen2.5-7b", "l4", ws, backend)
    if backend not in _CLEAN_BENCH:
        _CLEAN_BENCH[backend] = bench(clean, EngineConfig(), "qwen2.5-7b", "l4", ws, backend)
    ref = _CLEAN_BENCH[backend]
    if not got.symptoms and got.telemetry == ref.telemetry:
        return 2
    muts = load_mutations()
    return 0 if all(muts[i].file == "engine.py" for i in ids) else 1


_CLEAN_BENCH: dict[str, BenchResult] = {}


@cache
def _table() -> dict[int, Instance]:
    if not INSTANCES_FILE.is_file():
        return {}
    raw = yaml.safe_load(INSTANCES_FILE.read_text()) or {}
    if raw.get("catalogue") != catalogue_hash():
        return {}  # stale: the engine, the bugs or the checks changed since it was built
    return {int(d["seed"]): Instance.from_dict(d) for d in raw.get("instances", [])}


_LIVE: dict[tuple[int, str], Instance] = {}


def verified_seeds() -> list[int]:
    """The seeds of the precomputed instance table (none while it is stale: rebuild it with ``main``)."""
    return sorted(_table())


def instance_for(seed: int, backend: str = "auto") -> Instance:
    """The verified instance of ``seed``: from the precomputed table, else generated now (and remembered)."""
    table = _table()
    if seed in table:
        return table[seed]
    if (seed, backend) not in _LIVE:
        _LIVE[(seed, backend)] = generate(seed, backend)
    return _LIVE[(seed, backend)]


def build(seeds: range, backend: str) -> dict[str, Any]:
    """Generate every seed of ``seeds``; the table for ``instances.yaml`` and its counts."""
    t0 = time.perf_counter()
    inst = [generate(s, backend) for s in seeds]
    secs = time.perf_counter() - t0
    classes = Counter(c for i in inst for c in i.bug_classes)
    stats = {"seeds": f"{seeds.start}-{seeds.stop - 1}", "kept": len(inst), "rejected": sum(i.rejected for i in inst),
             "per_class": dict(sorted(classes.items())),
             "per_level": dict(sorted(Counter(i.difficulty["level"] for i in inst).items())),
             "two_bugs": sum(i.difficulty["num_bugs"] == 2 for i in inst),
             "visible_caught": sum(i.difficulty["visible_caught"] for i in inst),
             "hidden_only": sum(i.difficulty["distance"] == 2 for i in inst),
             "seconds_per_instance": round(secs / max(len(inst), 1), 2)}
    return {"catalogue": catalogue_hash(), "stats": stats, "instances": [i.to_dict() for i in inst]}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="precompute RSI/BugFix-v0 instances into the catalog")
    ap.add_argument("--seeds", default="0-63", help="a range, e.g. 0-63")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--out", default=str(INSTANCES_FILE))
    a = ap.parse_args(argv)
    lo, hi = (int(x) for x in a.seeds.split("-"))
    data = build(range(lo, hi + 1), a.backend)
    with open(a.out, "w") as fh:
        fh.write("# Verified instances of RSI/BugFix-v0 (python -m rsi_env.tasks.bugfix.generator); hidden from agents.\n")
        yaml.safe_dump(data, fh, sort_keys=False, width=120)
    print(json.dumps(data["stats"], indent=1))


if __name__ == "__main__":
    main()
