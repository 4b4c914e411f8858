"""Bug operators: exact-text mutations of the BugFix workspace's engine code, by class.

A `Mutation` replaces one passage (``old``, which must occur exactly once) of one workspace file by a
bugged one. The catalogue is data, hidden from the agent's sandbox
(``catalog/code/bugfix/hidden/mutations.yaml``). Exact text rather than AST rewriting: each bug is
a reviewed, realistic one-line slip in a named place, and a mutation whose passage no longer
occurs (the engine changed) is refused loudly instead of landing somewhere else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

import yaml

from rsi_env.errors import CatalogError
from rsi_env.sandbox.hidden import CODE_DIR

__all__ = ["BUG_CLASSES", "MUTATIONS_FILE", "Mutation", "apply_mutations", "load_mutations"]

MUTATIONS_FILE = CODE_DIR / "bugfix" / "hidden" / "mutations.yaml"
BUG_CLASSES = ("kv_leak", "token_budget", "preemption_order", "lost_request", "throughput_collapse")


@dataclass(frozen=True)
class Mutation:
    """One bug: in ``file``, ``old`` (occurring once) becomes ``new``."""

    id: str
    bug_class: str
    file: str
    old: str
    new: str
    note: str = ""

    def apply(self, files: Mapping[str, str]) -> dict[str, str]:
        """A copy of ``files`` with this bug in; `CatalogError` if its passage is not there exactly once."""
        text = files.get(self.file)
        count = 0 if text is None else text.count(self.old)
        if text is None or count != 1:
            raise CatalogError(f"mutation {self.id}: its passage occurs {count} times in {self.file} (needs 1)")
        return {**files, self.file: text.replace(self.old, self.new, 1)}


@cache
def load_mutations() -> dict[str, Mutation]:
    """The catalogue, by id."""
    out: dict[str, Mutation] = {}
    for raw in yaml.safe_load(MUTATIONS_FILE.read_text()):
        m = Mutation(raw["id"], raw["class"], raw["file"], raw["old"], raw["new"], raw.get("note", ""))
        if m.bug_class not in BUG_CLASSES:
            raise CatalogError(f"mutation {m.id}: unknown class {m.bug_class!r}; known: {BUG_CLASSES}")
        if m.id in out:
            raise CatalogError(f"mutation {m.id} is declared twice")
        out[m.id] = m
    return out


def apply_mutations(files: Mapping[str, str], ids: Sequence[str]) -> dict[str, str]:
    """``files`` with the bugs ``ids`` applied in order (each passage must still occur once)."""
    muts = load_mutations()
    out = dict(files)
    for i in ids:
        if i not in muts:
            raise CatalogError(f"unknown mutation {i!r}")
        out = muts[i].apply(out)
    return out
