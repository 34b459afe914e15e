"""One bad op never blocks a batch (issue 20 item 7), and a batch sent again is
harmless (item 5: a COMMIT whose answer was lost; item 9: a claim twice in
one commit) - on SQLite and PostgreSQL."""

from __future__ import annotations

import base64
import random

import pytest

from procsched._store import TaskDefinition, TaskState

P = 1_000_000_000
T0 = 1_700_000_000 * P


def definition(key):
    return TaskDefinition(key, "store_funcs:plain", b"", {"kind": "fixed_rate", "period_ns": P})


def add(store, key="k"):
    b = store.batch()
    b.upsert(definition(key), TaskState(next_due_ns=T0))
    assert b.commit().ok


def bad_keys(store_url):
    """Keys the database refuses: a lone surrogate (neither store can encode
    it), and on PostgreSQL a NUL and a key past a btree index row."""
    keys = ["k\ud800"]
    if store_url.startswith("postgresql://"):
        keys += ["k\x00nul", base64.b64encode(random.Random(7).randbytes(7500)).decode()]  # (incompressible)
    return keys


def test_a_bad_row_is_left_out_and_the_rest_written(store, store_url):
    h = store.register()
    for i, bad in enumerate(bad_keys(store_url)):
        good = f"good{i}"
        add(store, good)
        b = store.batch(h)
        b.upsert(definition(f"fine{i}"), TaskState(next_due_ns=T0))
        b.started(good, 1, 1, T0)
        b.started(bad, 1, 1, T0)
        b.skipped(bad, T0, "late")
        b.skipped(good, T0 + P, "late")
        result = b.commit()
        assert ("skipped", bad) in [(f.kind, f.key) for f in result.failed] and {f.key for f in result.failed} == {bad}
        assert result.lost == [(bad, 1, 1)] and result.failed[0].error  # why, in the database's words
        assert store.get(f"fine{i}") is not None
        assert [r.key for r in store.load().in_flight] == [good]
        assert [x.reason for x in store.history(good, skipped=True) if x.outcome == "skipped"] == ["late"]
        # the next batch goes as usual (nothing is stuck behind the bad key)
        b = store.batch(h)
        b.finished(good, 1, 1, "ok", T0 + 1, T0 + P)
        b.finished(bad, 1, 1, "ok", T0 + 1, T0 + P)
        result = b.commit()
        assert {f.key for f in result.failed} <= {bad} and result.stale == [(bad, 1, 1)]
        assert store.get(good).state.run_count == 1 and store.load().in_flight == []


def test_values_out_of_range_are_refused_op_by_op(store):
    add(store)
    h = store.register()
    b = store.batch(h)
    b.skipped("k", 2**70, "late")  # past a 64-bit integer
    b.started("k", 1, 1, T0)
    result = b.commit()
    assert [f.kind for f in result.failed] == ["skipped"] and not result.lost
    assert store.get("k").in_flight == 1


def test_a_claim_twice_in_one_commit_and_a_batch_sent_again(store):
    add(store)
    add(store, "j")
    h = store.register()
    b = store.batch(h)
    b.started("k", 1, 1, T0)
    b.started("k", 1, 1, T0)  # the same claim twice (issue 20 item 9's root)
    b.started("j", 1, 1, T0)
    assert b.commit().ok
    assert store.get("k").in_flight == 1 and len(store.load().in_flight) == 2
    # a turn whose COMMIT's answer was lost is sent again as it was: the
    # claims are this very holder's, the ends it recorded are recognised
    turn = [("finished", "k", 1), ("finished", "j", 1), ("started", "k", 2), ("started", "j", 2)]
    for _ in range(2):
        b = store.batch(h)
        for kind, key, run in turn:
            if kind == "finished":
                b.finished(key, run, 1, "ok", T0 + 1, T0 + P)
            else:
                b.started(key, run, 1, T0 + P, T0 + P + 1)
        assert b.commit().ok
    assert [(r.key, r.run, r.outcome) for r in store.history(None, 10)] == [
        ("j", 1, "ok"),
        ("k", 1, "ok"),
        ("j", 2, None),
        ("k", 2, None),
    ]
    assert store.counts().runs["ok"] == 2  # each end counted once
    # but not another holder's, nor another registration of the same id
    other = store.register()
    impostor = type(h)(h.id, other.token, h.host, h.pid, h.lease_ns)
    b = store.batch(other)
    b.started("k", 2, 1, T0 + P)
    assert b.commit().lost == [("k", 2, 1)]
    b = store.batch(impostor)
    b.started("k", 2, 1, T0 + P)
    assert b.commit().fenced_out
    # an end recorded with another outcome is not this one: stale
    b = store.batch(h)
    b.finished("k", 1, 1, "error", T0 + 1, T0 + P)
    assert b.commit().stale == [("k", 1, 1)]


@pytest.mark.parametrize("n", [1, 3])
def test_a_retried_batch_of_set_wise_claims(store, n):
    """The set-wise paths (several claims and ends in one group) sent again."""
    keys = [f"k{i}" for i in range(n)]
    for k in keys:
        add(store, k)
    h = store.register()
    for _ in range(2):
        b = store.batch(h)
        for k in keys:
            b.started(k, 1, 1, T0)
        assert b.commit().ok
    for _ in range(2):
        b = store.batch(h)
        for k in keys:
            b.finished(k, 1, 1, "ok", T0 + 1, T0 + P)
        assert b.commit().ok
    assert all(store.get(k).state == TaskState(1, T0 + P, 1) and store.get(k).in_flight == 0 for k in keys)
