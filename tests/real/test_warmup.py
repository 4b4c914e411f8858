"""The driver's warm-up reaches step sizes from one prompt to a full token budget (no engine needed)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rsi_env.real.warmup import warmup_workloads


@given(budget=st.integers(16, 65536), seqs=st.integers(1, 2048), model_len=st.integers(8, 131072))
def test_bursts_fill_the_budget_then_shrink_by_a_third_down_to_one_prompt(budget, seqs, model_len):
    ws = warmup_workloads(budget, seqs, model_len)
    assert ws[0].name == "warmup" and len({w.name for w in ws}) == len(ws)  # distinct request ids per burst
    bursts = [w.trace() for w in ws[1:]]
    sizes = sorted({len(t) for t in bursts}, reverse=True)
    assert sizes[-1] == 1 and all(b == max(1, a * 2 // 3) < a for a, b in zip(sizes, sizes[1:], strict=False))
    for n in sizes:  # each size in two forms: one total divisible by 16 and, where prompts allow, one not
        totals = {int(t.prompt_len.sum()) for t in bursts if len(t) == n}
        assert len(totals) == 2 or int(bursts[0].prompt_len[0]) == 1
        assert any(x % 16 for x in totals) or n % 16 == 0 or int(bursts[0].prompt_len[0]) == 1
    first = bursts[0]
    assert len(first) <= seqs  # more could not share one step
    assert (first.prompt_len < model_len).all()
    assert (first.arrival_s == 0).all()
    if len(first) < seqs and int(first.prompt_len[0]) < model_len - 2:
        assert int(first.prompt_len.sum()) >= budget  # the first burst fills the token budget
