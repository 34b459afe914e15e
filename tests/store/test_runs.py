"""What a run records (issues 22 and 26), and skipped slots: on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from procsched._store import RunRecord, SkippedSlot, TaskDefinition, TaskState, open_store

P = 1_000_000_000
T0 = 1_700_000_000 * P


def add(store, key="k", due=T0, **kw):
    b = store.batch()
    b.upsert(
        TaskDefinition(key, "store_funcs:plain", b"", {"kind": "fixed_rate", "period_ns": P}, {}, **kw),
        TaskState(next_due_ns=due),
    )
    assert b.commit().ok


def test_a_run_records_cause_reason_error_traceback_worker_and_output(store):
    add(store)
    h = store.register(pid=4242)
    b = store.batch(h)
    b.started("k", 1, 1, T0, T0 + 1, worker_pid=777)
    assert b.commit().ok
    (flying,) = store.load().in_flight
    assert (flying.cause, flying.worker_pid, flying.pid, flying.outcome) == ("schedule", 777, 4242, None)
    b = store.batch(h)
    tb = "Traceback (most recent call last):\n  ...\nValueError: boom\n"
    b.finished(
        "k",
        1,
        1,
        "cancelled",
        T0 + 2,
        T0 + P,
        error_type="ValueError",
        error_message="boom",
        error_traceback=tb,
        reason="replaced",
        worker_pid=778,
        output="x" * 10_000 + "tail",
    )
    assert b.commit().ok
    (r,) = store.history("k")
    assert (r.outcome, r.reason, r.error_type, r.error_message, r.error_traceback) == (
        "cancelled",
        "replaced",
        "ValueError",
        "boom",
        tb,
    )
    assert r.worker_pid == 778 and r.pid == 4242  # the worker, and the scheduler instance
    assert r.output.endswith("tail") and len(r.output) == 8192  # the tail is kept
    assert store.counts().runs["cancelled"] == 1


def test_a_run_in_flight_given_to_another_worker_names_that_one(store):
    """A run given ahead to a busy worker and taken back before it started
    runs on another: its row in flight named the first until its end (the
    console and ``procsched jobs`` showed a worker that was not running
    it). ``Batch.moved`` names the new one; not a run that ended, nor
    another holder's."""
    add(store)
    h, other = store.register(), store.register()
    b = store.batch(h)
    b.started("k", 1, 1, T0, T0 + 1, worker_pid=777)
    assert b.commit().ok
    b = store.batch(h)
    b.moved("k", 1, 1, 778)
    assert b.commit().ok and b.fenced is False
    assert [r.worker_pid for r in store.load().in_flight] == [778]
    b = store.batch(other)
    b.moved("k", 1, 1, 999)  # not its run: nothing
    assert b.commit().ok
    assert [r.worker_pid for r in store.load().in_flight] == [778]
    b = store.batch(h)
    b.finished("k", 1, 1, "ok", T0 + 2, T0 + P, worker_pid=778)
    b.moved("k", 1, 1, 777)  # ended: nothing
    assert b.commit().ok
    assert store.history("k")[0].worker_pid == 778


def test_bad_cause_reason_and_skip_reason_are_refused_at_the_call(store):
    h = store.register()
    b = store.batch(h)
    with pytest.raises(ValueError, match="cause must be one of"):
        b.started("k", 1, 1, T0, cause="whim")
    with pytest.raises(ValueError, match="reason must be None or one of"):
        b.finished("k", 1, 1, "ok", T0, None, reason="bored")
    with pytest.raises(ValueError, match="reason must be one of"):
        b.skipped("k", T0, "bored")
    with pytest.raises(TypeError, match="slot_ns must be an int"):
        b.skipped("k", 1.5, "late")
    assert len(b) == 0


def test_skipped_slots_are_kept_per_task_and_merged_with_runs_in_slot_order(store_url):
    store = open_store(store_url, keep_runs=4)
    add(store)
    add(store, "other")
    h = store.register()
    b = store.batch(h)
    b.started("k", 1, 1, T0)
    b.skipped("k", T0 + P, "overlap")
    b.skipped("other", T0 + P, "paused")
    assert b.commit().ok
    b = store.batch(h)
    b.finished("k", 1, 1, "ok", T0 + 3 * P // 2, T0 + 2 * P)
    b.skipped("k", T0 + P, "late")  # recorded already: its first reason stands
    assert b.commit().ok
    b = store.batch(h)
    b.started("k", 2, 1, T0 + 2 * P)
    assert b.commit().ok
    both = store.history("k", skipped=True)
    assert [(type(x).__name__, x.slot_ns - T0, x.outcome) for x in both] == [
        ("RunRecord", 0, "ok"),
        ("SkippedSlot", P, "skipped"),
        ("RunRecord", 2 * P, None),
    ]
    assert both[1] == SkippedSlot("k", T0 + P, "overlap", both[1].recorded_ns, h.id)
    assert all(isinstance(x, RunRecord) for x in store.history("k"))  # runs only, as before
    # kept keep_runs (4) per task, like runs; the totals count them all
    for i in range(2, 9):
        b = store.batch(h)
        b.skipped("k", T0 + (10 + i) * P, "misfire")
        assert b.commit().ok
    skipped = [x for x in store.history("k", 100, skipped=True) if isinstance(x, SkippedSlot)]
    assert [x.slot_ns - T0 for x in skipped] == [(10 + i) * P for i in range(5, 9)]
    assert [x.reason for x in store.history("other", skipped=True)] == ["paused"]
    counts = store.counts()
    assert counts.skipped == {"overlap": 1, "misfire": 7, "late": 0, "paused": 1, "down": 0}
    assert counts.by_job["k"][1]["misfire"] == 7
    # the last n, newest last
    assert [x.slot_ns for x in store.history("k", 2, skipped=True)] == [T0 + 17 * P, T0 + 18 * P]
    # every task's, and deleted with the history only when asked
    assert len(store.history(None, 100, skipped=True)) == 2 + 4 + 1
    b = store.batch()
    b.delete("k")
    b.delete("other", history=True)
    b.commit()
    assert len(store.history("k", skipped=True)) == 6 and store.history("other", skipped=True) == []
    store.close()


def test_a_skip_is_written_with_the_turn_and_does_not_move_the_task(store):
    """A skipped slot is written in the turn's batch and does not bump the
    task's change time (the other instances' re-read does not re-read it)."""
    add(store)
    before = store.get("k")
    b = store.batch(store.register())
    b.skipped("k", T0, "down", recorded_ns=T0 + 5)
    assert b.commit().ok
    after = store.get("k")
    assert after.updated_ns == before.updated_ns and after.state == before.state
    (skip,) = store.history("k", skipped=True)
    assert (skip.reason, skip.recorded_ns) == ("down", T0 + 5)


def _skip_ops(b, base):
    """A turn's worth of ops with skips among claims and ends: more than
    keep_runs of one task, a slot twice, one recorded in an earlier batch
    (both still kept: a slot already trimmed is recorded again, op by op),
    several reasons, and a task deleted with its history after its skip."""
    b.started("k", 2, 1, T0 + 112 * P)  # (past every slot recorded skipped before: a claim of one is lost)
    for i in range(12):
        b.skipped("k", T0 + (100 + i) * P, "misfire")
        b.skipped("other", T0 + (100 + i) * P, "overlap" if i % 2 else "late")
    b.finished("k", 2, 1, "ok", T0 + 3 * P, T0 + 200 * P)
    b.skipped("k", T0 + 110 * P, "late")  # twice in the batch: the first reason stands
    b.skipped("k", base, "paused")  # recorded in an earlier batch (and in this one, as a misfire)
    b.skipped("gone", T0 + 7 * P, "misfire")
    b.delete("gone", history=True)
    b.skipped("k", T0 + 300 * P, "down", recorded_ns=T0 + 5)


@pytest.mark.parametrize("together", [True, False], ids=["one batch", "op by op"])
def test_a_batch_of_skips_records_what_they_do_one_by_one(store_url, together):
    """The set-wise path (a batch's skips gathered past its claims and ends,
    any number per task) leaves the store as the ops one at a time do."""
    store = open_store(store_url, keep_runs=5)
    for key in ("k", "other", "gone"):
        add(store, key)
    h = store.register()
    b = store.batch(h)
    b.started("k", 1, 1, T0)
    assert b.commit().ok
    b = store.batch(h)
    b.finished("k", 1, 1, "ok", T0 + P // 2, T0 + 2 * P)
    b.skipped("k", T0 + 111 * P, "overlap")
    assert b.commit().ok
    ops = store.batch(h)
    _skip_ops(ops, T0 + 111 * P)
    if together:
        assert ops.commit().ok
    else:  # the same ops, each in a batch of its own
        for op in list(ops.ops):
            one = store.batch(h)
            one.ops.append(op)
            assert one.commit().ok
    seen = {
        key: [(x.slot_ns - T0, x.reason) for x in store.history(key, 100, skipped=True) if isinstance(x, SkippedSlot)]
        for key in ("k", "other", "gone")
    }
    assert seen == {
        "k": [(i * P, "misfire") for i in range(108, 111)] + [(111 * P, "overlap"), (300 * P, "down")],
        "other": [(i * P, "overlap" if (i - 100) % 2 else "late") for i in range(107, 112)],
        "gone": [],
    }
    counts = store.counts()
    assert counts.by_job["k"][1] == {"overlap": 1, "misfire": 11, "late": 0, "paused": 0, "down": 1}
    assert counts.by_job["other"][1] == {"overlap": 6, "misfire": 0, "late": 6, "paused": 0, "down": 0}
    assert [(r.run, r.outcome) for r in store.history("k")] == [(1, "ok"), (2, "ok")]
    store.close()


def test_a_turn_s_ends_and_claims_keep_every_text_as_it_was_given(store):
    """The set-wise statements carry a turn's rows as one array per column
    (PostgreSQL: ``unnest``): a text that looks like array syntax, an
    empty one, a column that is NULL in every row, keys alike but for
    their case or quotes - each row reads back exactly as written."""
    awkward = ['{"a", b}', "", "NULL", "back\\slash, comma", 'quote " and }{', "line\nbreak\ttab", "é ✓"]
    keys = ["k", "K", 'k"', "k,1", "{k}", "k\\", "k k"]
    for key in keys:
        add(store, key)
    h = store.register()
    b = store.batch(h)
    for key in keys:
        b.started(key, 1, 1, T0, T0 + 1)
    assert b.commit().ok
    b = store.batch(h)
    for key, text in zip(keys, awkward, strict=True):
        b.finished(key, 1, 1, "error", T0 + 2, T0 + P, error_type=text, error_message=text, output=text)
    result = b.commit()
    assert result.ok and not result.stale
    b = store.batch(h)
    for key in keys:
        b.started(key, 2, 1, T0 + P, T0 + P + 1)
    result = b.commit()
    assert result.ok and not result.lost
    for key, text in zip(keys, awkward, strict=True):
        first, second = store.history(key)
        assert (first.error_type, first.error_message, first.output, first.error_traceback) == (text, text, text, None)
        assert (second.run, second.outcome) == (2, None)
