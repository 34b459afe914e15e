"""Claims of schema 2 (issue 22): concurrency per task, manual and backfill
runs, retries under concurrency, shared limits - on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from procsched._store import TaskDefinition, TaskState, open_store

P = 1_000_000_000
T0 = 1_700_000_000 * P


def add(store, key="k", due=T0, **kw):
    b = store.batch()
    b.upsert(
        TaskDefinition(key, "store_funcs:plain", b"", {"kind": "fixed_rate", "period_ns": P}, {}, **kw),
        TaskState(next_due_ns=due),
    )
    assert b.commit().ok


def claim(store, h, key, run, attempt=1, slot=None, cause="schedule"):
    b = store.batch(h)
    b.started(key, run, attempt, T0 + (run - 1) * P if slot is None else slot, cause=cause)
    return b.commit()


def end(store, h, key, run, attempt=1, outcome="ok", due=None, retry=False):
    b = store.batch(h)
    b.finished(key, run, attempt, outcome, T0 + run * P, T0 + run * P if due is None else due, retry=retry)
    return b.commit()


def flying(store, key):
    return sorted((r.run, r.attempt) for r in store.load().in_flight if r.key == key)


# -- concurrency per task ---------------------------------------------------------


def test_max_concurrent_runs_in_flight_on_any_instances(store):
    add(store, max_concurrent=3)
    a, b, c = store.register(), store.register(), store.register()
    assert claim(store, a, "k", 1).ok
    assert claim(store, b, "k", 2).ok
    assert claim(store, c, "k", 3).ok
    assert claim(store, a, "k", 4).lost == [("k", 4, 1)]  # three in flight: no fourth
    t = store.get("k")
    assert (t.in_flight, t.state.run_count, t.definition.max_concurrent) == (3, 3, 3)
    assert t.holder in {a.id, b.id, c.id} and t.last_holder == c.id
    assert end(store, b, "k", 2).ok
    assert claim(store, a, "k", 4).ok
    assert flying(store, "k") == [(1, 1), (3, 1), (4, 1)]
    assert claim(store, c, "k", 4).lost == [("k", 4, 1)]  # a run is won once
    assert claim(store, c, "k", 6).lost  # run numbers stay consecutive
    for h, run in ((a, 1), (c, 3), (a, 4)):
        assert end(store, h, "k", run).ok
    t = store.get("k")
    assert (t.in_flight, t.holder, t.token) == (0, None, None)
    assert [r.run for r in store.history("k")] == [1, 2, 3, 4]


def test_the_holder_of_a_task_is_one_of_its_runs_holders(store):
    add(store, max_concurrent=2)
    a, b = store.register(), store.register()
    assert claim(store, a, "k", 1).ok and claim(store, b, "k", 2).ok
    assert end(store, b, "k", 2).ok  # b held the latest: the task names a now
    assert (store.get("k").holder, store.get("k").token) == (a.id, a.token)
    assert claim(store, b, "k", 3).ok
    assert end(store, a, "k", 1).ok
    assert store.get("k").holder == b.id


def test_only_the_latest_scheduled_run_reschedules(store):
    """Two runs in flight: the end of the older one does not set the next due
    time back; the end of the latest does."""
    add(store, max_concurrent=2)
    h = store.register()
    assert claim(store, h, "k", 1).ok and claim(store, h, "k", 2).ok
    assert store.get("k").state.next_due_ns == T0 + P  # the latest claim's slot
    assert end(store, h, "k", 1, due=T0 + 9 * P).ok
    assert store.get("k").state.next_due_ns == T0 + P
    assert end(store, h, "k", 2, due=T0 + 2 * P).ok
    assert store.get("k").state == TaskState(run_count=2, next_due_ns=T0 + 2 * P, next_attempt=1)


def test_a_paused_task_claims_no_scheduled_run(store):
    add(store, max_concurrent=2)
    h = store.register()
    assert store.pause("k")
    assert claim(store, h, "k", 1).lost
    assert store.resume("k")
    assert claim(store, h, "k", 1).ok


# -- manual and backfill runs -------------------------------------------------------


def test_manual_and_backfill_runs_are_numbered_like_others_and_never_move_the_schedule(store):
    add(store, due=T0 + 5 * P, max_concurrent=2)
    h, other = store.register(), store.register()
    assert claim(store, h, "k", 1, slot=T0 + 5 * P).ok
    assert end(store, h, "k", 1, due=T0 + 6 * P).ok
    # run now: at a time past the next slot; backfill: slots before the last
    assert claim(store, h, "k", 2, slot=T0 + 100 * P, cause="manual").ok
    assert claim(store, other, "k", 2, slot=T0 + 100 * P, cause="manual").lost  # once among instances
    t = store.get("k")
    assert (t.state.run_count, t.state.next_due_ns) == (2, T0 + 6 * P)  # the next slot did not move
    assert claim(store, other, "k", 3, slot=T0 + 1 * P, cause="backfill").ok
    assert end(store, h, "k", 2, due=T0 + 1000 * P).ok  # (what a caller passes for a manual run is ignored)
    assert end(store, other, "k", 3, due=T0 + 1000 * P).ok
    t = store.get("k")
    assert (t.state.run_count, t.state.next_due_ns, t.state.next_attempt) == (3, T0 + 6 * P, 1)
    # the next scheduled slot is claimed as run 4: the slot guard looks at scheduled slots only
    assert claim(store, h, "k", 4, slot=T0 + 6 * P).ok
    assert [(r.run, r.cause, r.scheduled_ns - T0) for r in store.history("k")] == [
        (1, "schedule", 5 * P),
        (2, "manual", 100 * P),
        (3, "backfill", 1 * P),
        (4, "schedule", 6 * P),
    ]
    assert store.get("k").state.next_due_ns == T0 + 6 * P


def test_a_manual_run_of_a_paused_task(store):
    """A paused task stays paused, and a run now still runs."""
    add(store)
    h = store.register()
    assert store.pause("k")
    assert claim(store, h, "k", 1, cause="manual").ok
    assert claim(store, h, "k", 2, cause="manual").lost  # max_concurrent 1: one at a time
    assert end(store, h, "k", 1).ok
    t = store.get("k")
    assert t.state.paused and t.state.next_due_ns == T0 and t.state.run_count == 1


def test_scheduled_slot_guard_still_refuses_an_old_slot_under_a_new_number(store):
    add(store)
    h = store.register()
    assert claim(store, h, "k", 1, slot=T0 + 5 * P).ok
    assert end(store, h, "k", 1).ok
    assert claim(store, h, "k", 2, slot=T0 + 5 * P).lost
    assert claim(store, h, "k", 2, slot=T0 + 4 * P).lost
    assert claim(store, h, "k", 2, slot=T0 + 6 * P).ok


# -- retries -------------------------------------------------------------------------


def test_retry_of_the_latest_run_as_before(store):
    add(store)
    h = store.register()
    assert claim(store, h, "k", 1).ok
    assert end(store, h, "k", 1, outcome="error", due=T0 + 2, retry=True).ok
    assert store.get("k").state == TaskState(run_count=1, next_due_ns=T0 + 2, next_attempt=2)
    assert claim(store, h, "k", 2).lost  # the retry comes first
    (retry,) = store.load().retries
    assert (retry.run, retry.attempt, retry.retry_due_ns) == (1, 1, T0 + 2)
    assert claim(store, h, "k", 1, attempt=2, slot=T0 + 2).ok
    assert store.load().retries == []
    assert claim(store, store.register(), "k", 1, attempt=2, slot=T0 + 2).lost  # never twice
    assert end(store, h, "k", 1, attempt=2, due=T0 + P).ok
    assert store.get("k").state == TaskState(run_count=1, next_due_ns=T0 + P, next_attempt=1)


def test_retry_of_an_earlier_run_while_a_newer_one_runs(store):
    """max_concurrent 2: run 1 fails while run 2 is in flight; its retry is
    kept on its run row and claimed from there, once; the schedule goes on."""
    add(store, max_concurrent=2)
    a, b = store.register(), store.register()
    assert claim(store, a, "k", 1).ok and claim(store, b, "k", 2).ok
    assert end(store, a, "k", 1, outcome="error", due=T0 + 3, retry=True).ok
    t = store.get("k")
    assert (t.state.run_count, t.state.next_attempt, t.state.next_due_ns) == (2, 1, T0 + P)
    assert [(r.key, r.run, r.attempt, r.retry_due_ns) for r in store.load().retries] == [("k", 1, 1, T0 + 3)]
    assert claim(store, b, "k", 1, attempt=3, slot=T0 + 3).lost  # only the attempt asked for
    assert claim(store, b, "k", 1, attempt=2, slot=T0 + 3).ok
    assert claim(store, a, "k", 1, attempt=2, slot=T0 + 3).lost  # once among instances
    assert claim(store, a, "k", 3).lost  # two in flight (the retry counts)
    assert store.load().retries == []
    assert end(store, b, "k", 1, attempt=2).ok
    assert end(store, b, "k", 2, due=T0 + 2 * P).ok
    assert store.get("k").state == TaskState(run_count=2, next_due_ns=T0 + 2 * P, next_attempt=1)


def test_a_run_now_while_the_latest_run_waits_for_its_retry(store):
    """The retry the state says is next moves to its run row when a manual
    run takes the next number: both go on, nothing is lost."""
    add(store)
    h = store.register()
    assert claim(store, h, "k", 1).ok
    assert end(store, h, "k", 1, outcome="error", due=T0 + 7, retry=True).ok
    assert claim(store, h, "k", 2, cause="manual", slot=T0 + 5).ok
    assert store.get("k").state == TaskState(run_count=2, next_due_ns=T0 + 7, next_attempt=1)
    assert end(store, h, "k", 2).ok
    assert claim(store, h, "k", 1, attempt=2, slot=T0 + 7).ok
    assert end(store, h, "k", 1, attempt=2, due=T0 + P).ok
    assert store.get("k").state == TaskState(run_count=2, next_due_ns=T0 + P, next_attempt=1)


# -- shared limits -----------------------------------------------------------------------


def test_a_group_limit_holds_across_instances_and_says_limited(store):
    store.set_limits({"db": 2})
    assert store.limits() == {"db": 2}
    for key in ("a", "b", "c"):
        add(store, key, group="db", max_concurrent=2)
    add(store, "free")
    h1, h2 = store.register(), store.register()
    assert claim(store, h1, "a", 1).ok
    assert claim(store, h2, "b", 1).ok
    result = claim(store, h2, "c", 1)
    assert result.limited == [("c", 1, 1)] and not result.lost and not result.ok  # it waits: nobody else's
    assert claim(store, h1, "a", 2).limited  # a's own second run too
    assert claim(store, h1, "free", 1).ok  # no group: no limit
    assert store.get("c").state.run_count == 0 and flying(store, "c") == []
    assert end(store, h2, "b", 1).ok
    assert claim(store, h2, "c", 1).ok
    assert [r.group for r in store.load().in_flight if r.key in "ac"] == ["db", "db"]


def test_a_limit_counts_manual_and_retry_runs_and_frees_at_take_over(store):
    store.set_limits({"db": 1})
    add(store, "a", group="db")
    add(store, "b", group="db")
    dead, live = store.register(lease_ns=P), store.register()
    assert claim(store, dead, "a", 1, cause="manual").ok
    assert claim(store, live, "b", 1, cause="backfill", slot=T0 - P).limited
    # the holder dies (SIGKILL): its unit of the limit is held by its run until its lease is taken over
    assert store.take_over(dead, live, force=True)[0].key == "a"
    assert claim(store, live, "b", 1).ok
    assert end(store, live, "b", 1, outcome="error", due=T0 + 5, retry=True).ok
    assert claim(store, live, "a", 2).ok
    assert claim(store, live, "b", 1, attempt=2, slot=T0 + 5).limited  # a retry waits for the limit too
    assert end(store, live, "a", 2).ok
    assert claim(store, live, "b", 1, attempt=2, slot=T0 + 5).ok


def test_a_group_without_a_limit_row_is_not_limited_and_limits_are_checked(store):
    add(store, "a", group="nolimit", max_concurrent=5)
    h = store.register()
    for run in range(1, 6):
        assert claim(store, h, "a", run).ok
    with pytest.raises(ValueError, match="must be an int >= 1"):
        store.set_limits({"db": 0})
    with pytest.raises(ValueError, match="non-empty str"):
        store.set_limits({"": 1})
    assert store.limits() == {}


def test_a_busy_turn_mixes_plain_claims_with_grouped_manual_and_retry_ones(store_url):
    """One batch of many claims: the set-wise path takes the plain ones and
    hands the rest (and those it did not win) to the op-by-op claim, with
    the same results as one by one."""
    store = open_store(store_url)
    store.set_limits({"g": 1})
    for i in range(6):
        add(store, f"p{i}")
    add(store, "g1", group="g")
    add(store, "g2", group="g")
    add(store, "m")
    h = store.register()
    assert claim(store, h, "p5", 1).ok  # p5's run 1 is in flight: its run 2 is lost
    b = store.batch(h)
    for i in range(6):
        b.started(f"p{i}", 1 if i < 5 else 2, 1, T0)
    b.started("g1", 1, 1, T0)
    b.started("g2", 1, 1, T0)
    b.started("m", 1, 1, T0 + 50 * P, cause="manual")
    result = b.commit()
    assert result.lost == [("p5", 2, 1)] and result.limited == [("g2", 1, 1)]
    assert sorted(r.key for r in store.load().in_flight) == ["g1", "m", "p0", "p1", "p2", "p3", "p4", "p5"]
    b = store.batch(h)
    for i in range(5):
        b.finished(f"p{i}", 1, 1, "ok", T0 + 1, T0 + P)
    b.finished("g1", 1, 1, "ok", T0 + 1, T0 + P)
    b.finished("p5", 2, 1, "ok", T0 + 1, T0 + P)  # never claimed: stale
    result = b.commit()
    assert result.stale == [("p5", 2, 1)]
    assert store.counts().runs["ok"] == 6
    store.close()


def test_a_late_write_of_a_retry_that_ran_since_does_not_ask_for_it_again(store):
    """The fault campaign, seed 4300 (SQLite): a start-up recorded run 12
    crashed (its scheduler died) and the retry, attempt 2, due; its
    adoption's write of that state (run 12, attempt 2) committed late,
    after another scheduler had claimed attempt 2 and run it ok - the
    row's next claim went back to a retry that had run, which no claim
    could win again: the task never ran again. A write of a retry claimed
    since changes nothing; one of a retry not yet claimed stands."""
    add(store, due=T0 + 11 * P)
    a, b = store.register(), store.register()
    assert claim(store, a, "k", 1, slot=T0 + 11 * P).ok
    assert end(store, a, "k", 1, outcome="crashed", due=T0 + 12 * P, retry=True).ok  # (12, 2) due
    stale = store.batch(b)  # what a start-up read then: attempt 2 of run 1 next
    stale.update("k", run_count=1, next_due_ns=T0 + 12 * P, next_attempt=2)
    assert claim(store, a, "k", 1, attempt=2, slot=T0 + 12 * P).ok
    assert end(store, a, "k", 1, attempt=2, due=T0 + 13 * P).ok
    assert stale.commit().ok  # (late)
    assert store.get("k").state == TaskState(run_count=1, next_due_ns=T0 + 13 * P, next_attempt=1)
    assert claim(store, b, "k", 2, slot=T0 + 13 * P).ok  # the next run goes on
    assert end(store, b, "k", 2, outcome="error", due=T0 + 14 * P, retry=True).ok
    assert store.get("k").state.next_attempt == 2
    fresh = store.batch(b)  # a retry not claimed yet: its write stands
    fresh.update("k", run_count=2, next_due_ns=T0 + 15 * P, next_attempt=2)
    assert fresh.commit().ok
    assert store.get("k").state == TaskState(run_count=2, next_due_ns=T0 + 15 * P, next_attempt=2)
