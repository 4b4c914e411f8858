"""`edits_to`: the edit actions that turn one file into another reach it exactly, each within the action's limits."""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from rsi_env.errors import SuiteError
from rsi_env.suite.edits import apply_edits, edits_to

_LINES = st.lists(st.text(alphabet=string.ascii_letters + " =()", max_size=30).map(lambda s: s + "\n"),
                  max_size=60)


def _ok(edits: list[tuple[str, str]], limit: int) -> bool:
    return all(len(o) <= limit and len(n) <= limit for o, n in edits)


@settings(max_examples=200, deadline=None)
@given(_LINES, _LINES, st.sampled_from([40, 120, 8192]))
def test_the_edits_reach_the_target_within_the_limit(a: list[str], b: list[str], limit: int):
    current, target = "".join(a), "".join(b)
    try:
        edits = edits_to(current, target, limit)
    except SuiteError:  # a change no unique context can carry (repeated lines): said, never a wrong file
        return
    assert _ok(edits, limit)
    assert apply_edits(current, edits) == target


def test_a_large_file_changed_in_two_places_takes_two_small_edits():
    base = "".join(f"line {i} = {i * i}\n" for i in range(2000))
    target = base.replace("line 10 = 100\n", "line 10 = 101\n").replace("line 1900 = ", "line 1900 == ")
    edits = edits_to(base, target)
    assert len(edits) == 2 and all(len(o) < 40 for o, _ in edits)
    assert apply_edits(base, edits) == target


def test_a_new_large_file_is_written_in_pieces():
    target = "".join(f"x{i} = {i}\n" for i in range(3000))
    edits = edits_to(None, target)
    assert edits[0][0] == "" and len(edits) > 1 and _ok(edits, 8192)
    assert apply_edits(None, edits) == target


def test_text_outside_the_action_charset_is_refused_by_name():
    try:
        edits_to("a\n" * 5000, "b\u2014\n" + "a\n" * 5000)
    except SuiteError as exc:
        assert "edit actions" in str(exc)
    else:
        raise AssertionError("a non-ASCII change was turned into edits")
