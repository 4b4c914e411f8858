"""Turn a file's text into another through edit actions that fit the action space, as an agent would have to.

An edit action replaces text that occurs exactly once (``old``) with ``new``, or writes a whole file
(``old == ""``); both fields hold at most `EDIT_FIELD_MAX` printable ASCII characters
(`rsi_env.envs.observation`). `edits_to` writes a small file whole, and reaches a large one hunk by hunk
(a line diff), each hunk given the fewest lines of context that make its ``old`` unique and cut to fit
the field; a new large file is written in pieces. Applied in order, the edits give the target exactly.
"""

from __future__ import annotations

import difflib

from rsi_env.envs.observation import CHARSET, EDIT_FIELD_MAX
from rsi_env.errors import SuiteError

__all__ = ["apply_edits", "edits_to"]

_PRINTABLE = frozenset(CHARSET)
_MAX_EDITS = 10_000


def _fits(text: str, limit: int) -> bool:
    return len(text) <= limit and _PRINTABLE.issuperset(text)


def _prefix_lines(lines: list[str], limit: int) -> int:
    """How many of ``lines`` (at least one) fit in ``limit`` characters together."""
    total, n = 0, 0
    for line in lines:
        if total + len(line) > limit and n:
            break
        total += len(line)
        n += 1
    return n


def _one_edit(cur: str, target: str, limit: int) -> tuple[str, str]:
    """The next edit towards ``target``: the first differing hunk, with unique context, cut to fit ``limit``."""
    a, b = cur.splitlines(keepends=True), target.splitlines(keepends=True)
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    _, i1, i2, j1, j2 = next(op for op in ops if op[0] != "equal")
    # At most `limit` characters of the old hunk and of the new one: a longer hunk is done in several edits.
    if i2 > i1:
        i2 = i1 + _prefix_lines(a[i1:i2], limit // 2)
    if j2 > j1:
        j2 = j1 + _prefix_lines(b[j1:j2], limit // 2)
    for ctx in range(0, max(len(a), 1) + 1):
        lo, hi = max(i1 - ctx, 0), min(i2 + ctx, len(a))
        old = "".join(a[lo:hi])
        if old and cur.count(old) == 1:
            new = "".join(a[lo:i1] + b[j1:j2] + a[i2:hi])
            if not (_fits(old, limit) and _fits(new, limit)):
                break
            return old, new
        if lo == 0 and hi == len(a):
            break
    raise SuiteError(f"a change at line {i1 + 1} cannot be made by edit actions: no context of at most {limit} "
                     "printable ASCII characters makes it unique")


def apply_edits(text: str | None, edits: list[tuple[str, str]]) -> str:
    """``text`` after ``edits`` (``old == ""`` writes the whole file), as the workspace applies them."""
    cur = text or ""
    for old, new in edits:
        if old == "":
            cur = new
        elif cur.count(old) != 1:
            raise SuiteError(f"an edit's old text occurs {cur.count(old)} times; it must occur once")
        else:
            cur = cur.replace(old, new, 1)
    return cur


def edits_to(current: str | None, target: str, limit: int = EDIT_FIELD_MAX) -> list[tuple[str, str]]:
    """Edits ``(old, new)`` that turn ``current`` (``None``: no such file) into ``target``."""
    if current == target:
        return []
    if _fits(target, limit):
        return [("", target)]
    out: list[tuple[str, str]] = []
    cur = current
    if cur is None or cur == "":  # a new large file: its first lines whole, the rest appended
        lines = target.splitlines(keepends=True)
        head = "".join(lines[:_prefix_lines(lines, limit)])
        if not _fits(head, limit):
            raise SuiteError("the file's first line cannot be written by an edit action (too long, or not ASCII)")
        out.append(("", head))
        cur = head
    for _ in range(_MAX_EDITS):
        if cur == target:
            return out
        old, new = _one_edit(cur, target, limit)
        out.append((old, new))
        cur = cur.replace(old, new, 1)
    raise SuiteError(f"the file could not be reached in {_MAX_EDITS} edit actions")
