"""The decode group's sums are the sums over its members: under any sequence of joins, leaves and steps, the context
it reports, the blocks it says k more steps need, the steps to the next finish and who finishes, in admission order,
are what a member-by-member count gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rsi_env.sim.decoders import DecodeGroup

N = 40


def cdiv(x: int, bs: int) -> int:
    return -(-x // bs)


ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, N - 1), st.integers(1, 300), st.integers(1, 40), st.booleans()),
    st.tuples(st.just("remove"), st.integers(0, N - 1)),
    st.tuples(st.just("advance"), st.integers(1, 20)),
    st.tuples(st.just("remove_all")),
    st.tuples(st.just("add_many"), st.lists(st.tuples(st.integers(0, N - 1), st.integers(1, 300),
                                                     st.integers(1, 40)), max_size=6)),
), max_size=60)


@settings(max_examples=200, deadline=None)
@given(ops=ops, bs=st.sampled_from([1, 4, 16, 32]), window=st.sampled_from([None, 64, 257]))
def test_the_group_s_sums_are_its_members_sums(ops, bs, window):
    g = DecodeGroup(bs, window, N)
    members: dict[int, list[int]] = {}  # request -> [computed, out_left, seq]
    seq = 0
    for op in ops:
        if op[0] == "add" and op[1] not in members:
            _, i, c, ol, has_first = op
            g.add(i, c, ol, seq, has_first)
            members[i] = [c, ol, seq]
            seq += 1
        elif op[0] == "add_many":
            batch = []
            for i, c, ol in op[1]:
                if i not in members and all(i != j for j, *_ in batch):
                    batch.append((i, c, ol, seq, True))
                    members[i] = [c, ol, seq]
                    seq += 1
            g.add_many(batch)
        elif op[0] == "remove" and op[1] in members:
            assert g.remove(op[1]) == tuple(members.pop(op[1])[:2])
        elif op[0] == "remove_all":
            got = sorted(g.remove_all())
            assert got == sorted((i, c, ol) for i, (c, ol, _) in members.items())
            members.clear()
        elif op[0] == "advance" and members:
            k = min(op[1], g.steps_to_finish())
            assert g.steps_to_finish() == min(ol for _, ol, _ in members.values())
            done = g.advance(k)
            for m in members.values():
                m[0] += k
                m[1] -= k
            want = sorted((m[2], i) for i, m in members.items() if m[1] == 0)
            assert done == [(i, members[i][0]) for _, i in want]
            for _, i in want:
                del members[i]
        assert len(g) == len(members)
        w = window if window is not None else 1 << 60
        assert g.context() == sum(min(c + 1, w) for c, _, _ in members.values())
        for k in (1, 2, bs - 1, bs, bs + 3, 3 * bs):
            if k >= 1:
                assert g.new_blocks(k) == sum(cdiv(c + k, bs) - cdiv(c, bs) for c, _, _ in members.values())
