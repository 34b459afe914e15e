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
    movable = ("started", "finished")  # (every other kind is a barrier)
    for x in ops:
        for y in ops:
            same_key = x[1] is not None and x[1] == y[1]
            barrier = x[0] not in movable or y[0] not in movable
            if x[2] < y[2] and (same_key or barrier):
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


def test_ends_and_the_claims_after_them_decide_each_op_as_one_by_one(store_url):
    """PostgreSQL sends a group of ends and the claims after it in one round
    trip: an end not recorded there (stale) and claims not won (lost,
    limited, a manual run) are decided after both, op by op - as on SQLite."""
    store = open_store(store_url)
    store.set_limits({"g": 1})
    for key in ("a", "b", "c", "m"):
        add(store, key)
    add(store, "g1", group="g")
    add(store, "g2", group="g")
    h, other = store.register(), store.register()
    assert claim(store, h, "a", 1).ok and claim(store, other, "b", 1).ok and claim(store, h, "g1", 1).ok
    b = store.batch(h)
    b.finished("a", 1, 1, "ok", T0 + 1, T0 + P)
    b.finished("b", 1, 1, "ok", T0 + 1, T0 + P)  # the other scheduler's run: stale
    b.finished("x", 1, 1, "ok", T0 + 1, T0 + P)  # never claimed: stale
    b.started("a", 2, 1, T0 + P)
    b.started("b", 2, 1, T0 + P)  # its run 1 is in flight elsewhere: lost
    b.started("c", 1, 1, T0)
    b.started("g2", 1, 1, T0)  # g1 in flight: limited
    b.started("m", 1, 1, T0 + 9 * P, cause="manual")
    result = b.commit()
    assert sorted(result.stale) == [("b", 1, 1), ("x", 1, 1)] and result.lost == [("b", 2, 1)]
    assert result.limited == [("g2", 1, 1)] and result.failed == []
    assert sorted((r.key, r.run) for r in store.load().in_flight) == [("a", 2), ("b", 1), ("c", 1), ("g1", 1), ("m", 1)]
    assert store.counts().runs["ok"] == 1
    store.close()


def test_a_bad_end_paired_with_claims_is_left_out_and_the_rest_written(store_url):
    """A value the database refuses in the ends' statement (sent with the
    claims' on PostgreSQL: a worker pid past its integer column fails on the
    server, in the pipeline; a text no store can encode, in the driver): the
    batch goes again op by op, that end left out and the rest written."""
    store = open_store(store_url)
    h = store.register()
    cases = [{"error_message": "bad \ud800"}]
    if store_url.startswith("postgresql://"):
        cases.append({"worker_pid": 2**40})
    for i, bad in enumerate(cases):
        a, b_ = f"a{i}", f"b{i}"
        for key in (a, b_):
            add(store, key)
            assert claim(store, h, key, 1).ok
        b = store.batch(h)
        b.finished(a, 1, 1, "error", T0 + 1, T0 + P, **bad)
        b.finished(b_, 1, 1, "ok", T0 + 1, T0 + P)
        b.started(b_, 2, 1, T0 + P)
        result = b.commit()
        assert [(f.kind, f.key) for f in result.failed] == [("finished", a)] and result.stale == [(a, 1, 1)]
        assert sorted((r.key, r.run) for r in store.load().in_flight if r.key in (a, b_)) == [(a, 1), (b_, 2)]
    store.close()


def test_a_bad_claim_paired_with_ends_is_left_out_and_the_rest_written(store_url):
    """A claim the database refuses among the claims sent with the ends (on
    PostgreSQL a worker pid past its integer column fails on the server, in
    the pipeline; keys no store can encode fail in the driver): the batch
    goes again op by op, that claim left out and the rest written."""
    store = open_store(store_url)
    h = store.register()
    pg = store_url.startswith("postgresql://")
    cases = [("k\ud800", None)] + ([("w", 2**40)] if pg else [])
    for i, (bad, pid) in enumerate(cases):
        good = f"good{i}"
        add(store, good)
        if pid is not None:
            add(store, bad)
        assert claim(store, h, good, 1).ok
        b = store.batch(h)
        b.finished(good, 1, 1, "ok", T0 + 1, T0 + P)
        b.started(good, 2, 1, T0 + P)
        b.started(bad, 1, 1, T0, worker_pid=pid)
        result = b.commit()
        assert [(f.kind, f.key) for f in result.failed] == [("started", bad)] and result.lost == [(bad, 1, 1)]
        assert sorted((r.key, r.run) for r in store.load().in_flight) == [(f"good{j}", 2) for j in range(i + 1)]
        assert store.counts().runs["ok"] == i + 1
    store.close()


def test_a_fenced_out_holder_s_ends_and_claims_write_nothing(store_url):
    """PostgreSQL sends a batch's first ends and claims with the lease
    renewal, before its answer: a holder fenced out (its registration taken
    over) has them rolled back with it - in a session that has read the
    clock before (its setting then reads '') and in a new one."""
    store = open_store(store_url)
    for key in ("a", "b"):
        add(store, key)
    h = store.register()
    assert claim(store, h, "a", 1).ok
    impostor = type(h)(h.id, h.token + 100, h.host, h.pid, h.lease_ns)
    fresh = open_store(store_url)
    for s in (store, fresh):
        b = s.batch(impostor)
        b.finished("a", 1, 1, "ok", T0 + 1, T0 + P)
        b.started("a", 2, 1, T0 + P)
        b.started("b", 1, 1, T0)
        result = b.commit()
        assert result.fenced_out and result.lost == [] and result.stale == []
        assert [(r.key, r.run) for r in store.load().in_flight] == [("a", 1)]
        assert store.get("b").state.run_count == 0 and store.get("b").holder is None
    assert claim(store, h, "b", 1).ok  # the holder itself goes on
    fresh.close()
    store.close()
