"""Bug operators for the installed vLLM: exact-text mutations of its modules and of the deployment, by class.

The operators are data (``catalog/code/vllm_bugfix/hidden/mutations.yaml``, hidden from every sandbox), each
a `rsi_env.tasks.bugfix.mutations.Mutation`: in one workspace file (a module of
`rsi_env.tasks.vllm_bugfix.modules.MODULES` or ``engine_args.yaml``) one passage, which must occur exactly
once, becomes a bugged one. They were read off vLLM 0.32's source; applied to another vLLM, an operator
whose passage is not there exactly once simply does not apply (`applicable`), and the generator
verifies whatever does by running it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache

import yaml

from rsi_env.errors import CatalogError
from rsi_env.sandbox.hidden import CODE_DIR
from rsi_env.tasks.bugfix.mutations import Mutation
from rsi_env.tasks.vllm_bugfix.modules import MODULES
from rsi_env.tasks.vllm_bugfix.runs import ENGINE_ARGS

__all__ = ["BUG_CLASSES", "MUTATIONS_FILE", "Mutation", "applicable", "apply_mutations", "load_mutations"]

MUTATIONS_FILE = CODE_DIR / "vllm_bugfix" / "hidden" / "mutations.yaml"
BUG_CLASSES = ("compat", "memory", "throughput")


@cache
def load_mutations() -> dict[str, Mutation]:
    """The catalogue, by id; `CatalogError` for an unknown class or file, or an id declared twice."""
    out: dict[str, Mutation] = {}
    for raw in yaml.safe_load(MUTATIONS_FILE.read_text()):
        m = Mutation(raw["id"], raw["class"], raw["file"], raw["old"], raw["new"], raw.get("note", ""))
        if m.bug_class not in BUG_CLASSES:
            raise CatalogError(f"mutation {m.id}: unknown class {m.bug_class!r}; known: {BUG_CLASSES}")
        if m.file != ENGINE_ARGS and m.file not in MODULES:
            raise CatalogError(f"mutation {m.id}: {m.file!r} is neither {ENGINE_ARGS} nor one of {MODULES}")
        if m.id in out:
            raise CatalogError(f"mutation {m.id} is declared twice")
        out[m.id] = m
    return out


def applicable(m: Mutation, files: Mapping[str, str]) -> bool:
    """Whether ``m``'s passage occurs exactly once in ``files`` (this vLLM's text)."""
    text = files.get(m.file)
    return text is not None and text.count(m.old) == 1


def apply_mutations(files: Mapping[str, str], ids: Sequence[str]) -> dict[str, str]:
    """``files`` with the operators ``ids`` applied in order; `CatalogError` where one does not apply."""
    muts = load_mutations()
    out = dict(files)
    for i in ids:
        if i not in muts:
            raise CatalogError(f"unknown mutation {i!r}")
        out = muts[i].apply(out)
    return out
