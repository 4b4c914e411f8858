"""A verdict's text within an observation's bound: every guard keeps its line, however long another's reason."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rsi_env.envs.observation import TEXT_MAX, clean
from rsi_env.reward.guards import GuardResult, Verdict

_names = st.text(alphabet="abcdefghij :", min_size=1, max_size=20)
_guards = st.lists(st.builds(GuardResult, _names, st.booleans(), st.text(max_size=3000)), min_size=1, max_size=8)


def test_a_traceback_in_one_guard_leaves_the_last_guards_verdict_in_view():
    """DayZero's hidden loader's traceback came before the real tier's line and pushed it past TEXT_MAX."""
    tb = "Traceback (most recent call last):\n" + "  File '/a/very/long/path/to/loader.py', line 1\n" * 80
    v = Verdict(False, 0.36, (GuardResult("hidden loader", False, tb), GuardResult("hidden block", False, tb),
                              GuardResult("real: vLLM", False, "not run: the hidden checks failed")))
    text = clean(v.summary(TEXT_MAX))
    assert len(text) <= TEXT_MAX and "[FAIL] real: vLLM: not run: the hidden checks failed" in text
    assert "[FAIL] hidden loader: Traceback" in text and "...[clipped]" in text
    assert v.summary() == v.summary(10**6)  # unbounded: nothing clipped


@settings(max_examples=200, deadline=None)
@given(_guards, st.integers(min_value=600, max_value=4000))
def test_every_guard_keeps_its_line_within_the_limit(guards: list[GuardResult], limit: int):
    v = Verdict(all(g.ok for g in guards), 0.0, tuple(guards))
    text = v.summary(limit)
    assert len(text) <= limit
    for g in guards:
        assert f"  [{'ok' if g.ok else 'FAIL'}] {g.name}" in text
        short = len(g.reason) <= (limit - 200) // (2 * len(guards))  # short reasons are never clipped
        assert not short or g.reason in text
