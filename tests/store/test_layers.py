"""A batch's ops in groups (``_writes._groups``): a batch of several turns
(ends, claims, ends, claims) is written as one group of ends and one of
claims - PostgreSQL sends a statement per group - with each key's ops, and
every other op, in the order given; on SQLite and PostgreSQL."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from procsched._store import open_store
from procsched._store._writes import _groups
from tests.store.test_claims import T0, P, add, claim, flying

KINDS = ("started", "finished", "update", "skipped", "answer")


def layered(ops):
    return [(kind, [op[1] for op in group]) for kind, group in _groups(ops)]


def test_two_turns_of_ends_and_claims_are_two_groups():
    ops = [("finished", "a"), ("started", "a"), ("finished", "b"), ("started", "b"), ("finished", "c")]
    assert layered(ops) == [("finished", ["a", "b", "c"]), ("started", ["a", "b"])]


def test_a_key_s_next_op_of_a_kind_waits_for_its_op_before():
    ops = [("started", "a"), ("finished", "a"), ("started", "a"), ("finished", "b")]
    assert layered(ops) == [("started", ["a"]), ("finished", ["a", "b"]), ("started", ["a"])]


def test_another_kind_of_op_is_a_barrier():
    ops = [("finished", "a"), ("update", "x"), ("finished", "b"), ("started", "c"), ("answer", None), ("started", "d")]
    assert layered(ops) == [
        ("finished", ["a"]),
        ("update", ["x"]),
        ("finished", ["b"]),
        ("started", ["c"]),
        ("answer", [None]),
        ("started", ["d"]),
    ]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from(["a", "b", "c", "d"]))))
def test_layering_keeps_each_key_s_order_and_every_barrier_s_place(pairs):
    ops = [(kind, None if kind == "answer" else key, i) for i, (kind, key) in enumerate(pairs)]
    groups = list(_groups(ops))
    flat = [op for _kind, group in groups for op in group]
    assert sorted(flat, key=lambda op: op[2]) == ops  # every op once
    position = {op[2]: n for n, op in enumerate(flat)}
    for x in ops:
        for y in ops:
            if x[2] < y[2] and (
                x[1] is not None
                and x[1] == y[1]
                or "started" != x[0] != "finished"
                or y[0] not in ("started", "finished")
            ):
                assert position[x[2]] < position[y[2]], (x, y)
    for kind, group in groups:
        assert all(op[0] == kind for op in group)
        keys = [op[1] for op in group if op[1] is not None]
        assert kind == "skipped" or len(keys) == len(set(keys))


def test_an_end_of_a_later_turn_makes_room_for_a_claim_of_an_earlier_one(store_url):
    """A group's shared limit of 1: g2's claim (turn one) and the end of
    g1's run (turn two) in one batch - the end is written first (it was
    done before this commit), so the claim wins; the other task's runs, as
    one by one."""
    store = open_store(store_url)
    store.set_limits({"g": 1})
    add(store, "g1", group="g")
    add(store, "g2", group="g")
    add(store, "a")
    h = store.register()
    assert claim(store, h, "g1", 1).ok and claim(store, h, "a", 1).ok
    b = store.batch(h)
    b.finished("a", 1, 1, "ok", T0 + 1, T0 + P)  # turn one: an end, claims
    b.started("g2", 1, 1, T0)
    b.started("a", 2, 1, T0 + P)
    b.finished("g1", 1, 1, "ok", T0 + 2, T0 + P)  # turn two: an end
    result = b.commit()
    assert result.ok and result.limited == [] and result.lost == [] and result.stale == []
    assert flying(store, "g2") == [(1, 1)] and flying(store, "a") == [(2, 1)]
    assert flying(store, "g1") == [] and store.counts().runs["ok"] == 2
    store.close()
