"""The store contract, on SQLite and on a real PostgreSQL server alike."""

from __future__ import annotations

import pytest

from procsched import SchedulerError
from procsched._errors import StoreError
from procsched._store import SCHEMA_VERSION, TaskDefinition, TaskState, open_store

P = 1_000_000_000  # a 1 s period, in ns
T0 = 1_700_000_000 * P  # a UTC wall time


def definition(key="k", period=P, args=b"args", **options):
    return TaskDefinition(key, "store_funcs:plain", args, {"kind": "fixed_rate", "period_ns": period}, options)


def add(store, key="k", due=T0, **kw):
    b = store.batch()
    b.upsert(definition(key, **kw), TaskState(next_due_ns=due))
    assert b.commit().ok


def cycle(store, h, key, run, outcome="ok", attempt=1, retry=False):
    """Claim and finish (key, run): the run is scheduled at T0 + (run-1) P."""
    scheduled = T0 + (run - 1) * P
    assert store.claim_run(h, key, run, attempt, scheduled, scheduled + 5)
    nxt = scheduled if retry else scheduled + P
    assert store.finish_run(h, key, run, attempt, outcome, scheduled + 10, nxt, retry=retry)


def test_new_store_has_the_schema_and_reopens(store, store_url):
    assert store.schema_version() == SCHEMA_VERSION
    add(store)
    store.close()
    again = open_store(store_url)
    assert [t.key for t in again.jobs()] == ["k"]
    assert again.get("k").state == TaskState(next_due_ns=T0)
    again.close()


def test_upsert_get_jobs_and_definition_change(store):
    add(store, "b")
    add(store, "a", args=b"x", priority=5)
    a = store.get("a")
    assert a.definition == definition("a", args=b"x", priority=5)
    assert a.definition.options == {"priority": 5}
    assert [t.key for t in store.jobs()] == ["a", "b"]
    assert store.get("missing") is None
    # a changed definition without a state keeps the state
    b = store.batch()
    b.upsert(definition("a", args=b"y"))
    b.commit()
    a2 = store.get("a")
    assert a2.definition.def_hash != a.definition.def_hash
    assert a2.state == a.state


def test_run_cycle_updates_state_and_history(store):
    add(store)
    h = store.register()
    for run in (1, 2, 3):
        cycle(store, h, "k", run, outcome="error" if run == 2 else "ok")
    t = store.get("k")
    assert t.state == TaskState(run_count=3, next_due_ns=T0 + 3 * P, next_attempt=1)
    assert t.last_outcome == "ok" and t.holder is None
    hist = store.history("k")
    assert [(r.run, r.outcome) for r in hist] == [(1, "ok"), (2, "error"), (3, "ok")]
    assert hist[0].scheduled_ns == T0 and hist[0].started_ns == T0 + 5 and hist[0].finished_ns == T0 + 10
    assert hist[0].host == h.host and hist[0].pid == h.pid
    assert [r.run for r in store.history("k", 2)] == [2, 3]
    assert [r.run for r in store.history(None, 10)] == [1, 2, 3]


def test_started_run_is_in_flight_with_the_new_state(store):
    add(store)
    h = store.register()
    assert store.claim_run(h, "k", 1, 1, T0, T0 + 1)
    loaded = store.load()
    assert [(r.key, r.run, r.outcome) for r in loaded.in_flight] == [("k", 1, None)]
    (t,) = loaded.tasks
    assert (t.state.run_count, t.state.next_due_ns, t.holder, t.token) == (1, T0, h.id, h.token)
    assert [s.id for s in loaded.schedulers] == [h.id]


@pytest.mark.parametrize("run", [0, 2, 5])
def test_claim_of_anything_but_the_next_run_is_lost(store, run):
    add(store)
    h = store.register()
    assert not store.claim_run(h, "k", run, 1, T0)
    assert store.claim_run(h, "k", 1, 1, T0)


def test_claim_lost_while_held_paused_or_missing(store):
    add(store)
    h = store.register()
    assert store.claim_run(h, "k", 1, 1, T0)
    assert not store.claim_run(h, "k", 2, 1, T0 + P)  # one run at a time
    assert store.finish_run(h, "k", 1, 1, "ok", T0 + 1, T0 + P)
    b = store.batch()
    b.update("k", paused=True)
    b.commit()
    assert store.get("k").state.paused
    assert not store.claim_run(h, "k", 2, 1, T0 + P)
    b = store.batch()
    b.update("k", paused=False, next_due_ns=T0 + 7 * P)
    b.commit()
    assert store.get("k").state.next_due_ns == T0 + 7 * P
    assert store.claim_run(h, "k", 2, 1, T0 + 7 * P)
    assert not store.claim_run(h, "nope", 1, 1, T0)


def test_one_batch_claims_after_finishing(store):
    """A turn's batch may finish run n and claim run n+1 of the same task."""
    add(store)
    h = store.register()
    b = store.batch(h)
    b.started("k", 1, 1, T0)
    assert b.commit().ok
    b = store.batch(h)
    b.finished("k", 1, 1, "ok", T0 + 1, T0 + P)
    b.started("k", 2, 1, T0 + P)
    b.started("k", 3, 1, T0 + 2 * P)  # not its next run: lost, the rest stands
    result = b.commit()
    assert result.lost == [("k", 3, 1)] and not result.stale
    assert store.get("k").state.run_count == 2


def test_retry_attempts(store):
    add(store)
    h = store.register()
    cycle(store, h, "k", 1, outcome="error", retry=True)
    assert store.get("k").state.next_attempt == 2
    assert not store.claim_run(h, "k", 2, 1, T0 + P)  # the retry comes first
    cycle(store, h, "k", 1, attempt=2)
    assert store.get("k").state == TaskState(run_count=1, next_due_ns=T0 + P, next_attempt=1)
    assert [(r.run, r.attempt, r.outcome) for r in store.history("k")] == [(1, 1, "error"), (1, 2, "ok")]


def test_a_row_made_anew_under_a_run_in_flight_is_rescheduled_by_its_retry(store):
    """A task cancelled while its run is in flight, added again, whose run
    then crashes (its holder died) and is retried: the retry's end
    reschedules the task (the new row did not know its latest scheduled
    run, stayed on that retry, and no claim could win again: the fault
    campaign, seed 316)."""
    add(store)
    dead, s = store.register(lease_ns=P), store.register()
    assert store.claim_run(dead, "k", 1, 1, T0, T0 + 1)
    b = store.batch()
    b.delete("k")
    assert b.commit().ok
    b = store.batch()
    b.upsert(definition("k", args=b"v2"), TaskState(run_count=1, next_due_ns=T0 + P))
    assert b.commit().ok
    assert [(r.run, r.outcome) for r in store.take_over(dead, s, force=True)] == [(1, "crashed")]
    b = store.batch(s)
    b.update("k", next_attempt=2, next_due_ns=T0 + P // 2)  # the survivor retries it
    assert b.commit().ok
    assert store.claim_run(s, "k", 1, 2, T0 + P // 2)
    assert store.finish_run(s, "k", 1, 2, "ok", T0 + P // 2 + 10, T0 + P)
    assert store.get("k").state == TaskState(run_count=1, next_due_ns=T0 + P, next_attempt=1)
    assert store.claim_run(s, "k", 2, 1, T0 + P)


def test_history_keeps_the_last_n_runs(store_url):
    store = open_store(store_url, keep_runs=5)
    add(store)
    h = store.register()
    for run in range(1, 13):
        cycle(store, h, "k", run)
    assert [r.run for r in store.history("k", 100)] == list(range(8, 13))
    store.close()


def test_delete_keeps_history_unless_asked(store):
    add(store, "a")
    add(store, "b")
    h = store.register()
    cycle(store, h, "a", 1)
    cycle(store, h, "b", 1)
    b = store.batch()
    b.delete("a")
    b.delete("b", history=True)
    b.commit()
    assert store.jobs() == []
    assert [r.key for r in store.history(None, 10)] == ["a"]


def test_unloadable_is_kept_and_cleared_by_upsert(store):
    add(store)
    b = store.batch()
    b.unloadable("k", "ModuleNotFoundError: No module named 'gone'")
    b.commit()
    (t,) = store.jobs()
    assert t.unloadable.startswith("ModuleNotFoundError")
    add(store)
    assert store.get("k").unloadable is None


def test_batch_needs_a_holder_for_runs_and_commits_once(store):
    b = store.batch()
    with pytest.raises(ValueError, match="holder"):
        b.started("k", 1, 1, T0)
    with pytest.raises(ValueError, match="outcome"):
        store.batch(store.register()).finished("k", 1, 1, "weird", T0, None)
    with pytest.raises(ValueError, match="update takes"):
        b.update("k", holder="me")
    assert b.commit().ok  # empty: no transaction
    with pytest.raises(RuntimeError):
        b.commit()


# -- leases, fencing, take-over (issue 11) -----------------------------------


def test_tokens_are_fresh_and_renewal_extends_the_lease(store):
    a, b = store.register(lease_ns=5 * P), store.register(lease_ns=5 * P)
    assert b.token > a.token and a.id != b.id
    assert a.lease_until_ns - a.heartbeat_ns == 5 * P
    assert store.renew_lease(a)
    (row,) = [s for s in store.load().schedulers if s.id == a.id]
    assert row.lease_until_ns >= a.lease_until_ns


def test_take_over_an_expired_holder_once_and_fence_it_out(store):
    add(store, "a")
    add(store, "b")
    dead = store.register(lease_ns=P)
    s1, s2 = store.register(), store.register()
    cycle(store, dead, "b", 1)
    assert store.claim_run(dead, "a", 1, 1, T0, T0 + 1)
    assert store.claim_run(dead, "b", 2, 1, T0 + P, T0 + P)
    # not expired yet: nobody may take it over
    assert store.take_over(dead, s1) is None
    later = store.now_ns() + 2 * P
    assert [h.id for h in store.expired_holders(later)] == [dead.id]
    assert store.expired_holders() == []
    # its lease is over (as seen 2 s from now): the first survivor records its runs crashed, once
    crashed = store.take_over(dead, s1, force=True)
    assert sorted((r.key, r.run, r.outcome, r.error_type) for r in crashed) == [
        ("a", 1, "crashed", "SchedulerDied"),
        ("b", 2, "crashed", "SchedulerDied"),
    ]
    assert store.take_over(dead, s2, force=True) is None
    assert store.load().in_flight == []
    a = store.get("a")
    assert a.holder is None and a.last_outcome == "crashed" and a.state.run_count == 1
    # the dead one wakes up: nothing it writes lands
    assert not store.finish_run(dead, "a", 1, 1, "ok", T0 + 2, T0 + P)
    b = store.batch(dead)
    b.finished("a", 1, 1, "ok", T0 + 2, T0 + P)
    b.upsert(definition("zzz"))
    assert b.commit().fenced_out
    assert store.get("zzz") is None
    assert not store.renew_lease(dead)
    assert [r.outcome for r in store.history("a")] == ["crashed"]
    # a survivor carries on with the next run
    assert store.claim_run(s2, "a", 2, 1, T0 + P)


def test_stale_token_cannot_finish_even_unexpired(store):
    add(store)
    h = store.register()
    assert store.claim_run(h, "k", 1, 1, T0)
    impostor = type(h)(h.id, h.token + 100, h.host, h.pid, h.lease_ns)
    assert not store.claim_run(impostor, "k", 2, 1, T0)
    b = store.batch(impostor)
    b.finished("k", 1, 1, "ok", T0 + 1, T0 + P)
    assert b.commit().fenced_out
    assert store.load().in_flight[0].outcome is None


def test_taken_over_holder_cannot_take_over_others(store):
    a, b = store.register(lease_ns=P), store.register(lease_ns=P)
    assert store.take_over(a, b, force=True) == []
    assert store.take_over(b, a, force=True) is None  # a was taken over: fenced out
    assert [s.id for s in store.load().schedulers] == [b.id]


def test_unregister_cancels_its_in_flight_runs(store):
    add(store)
    h = store.register()
    assert store.claim_run(h, "k", 1, 1, T0)
    assert store.unregister(h)
    assert [r.outcome for r in store.history("k")] == ["cancelled"]
    assert not store.unregister(h)


def test_changed_since(store):
    add(store, "a")
    mark = store.now_ns()
    add(store, "b")
    assert [t.key for t in store.changed_since(mark)] == ["b"]


# -- schema versions -----------------------------------------------------------


def test_newer_schema_is_refused(store, store_url):
    with store._tx("test") as cur:
        store._x(cur, "UPDATE procsched_version SET version = 99, written_by = 'procsched 9.0' WHERE id = 1")
    store.close()
    with pytest.raises(StoreError, match=r"schema version 99 \(written by procsched 9.0\).*upgrade") as info:
        open_store(store_url)
    assert isinstance(info.value, SchedulerError)


def test_migrations_hook_upgrades_an_older_store(store, store_url):
    add(store)
    store.close()
    newer = type(
        "Newer",
        (type(store),),
        {
            "SCHEMA_VERSION": SCHEMA_VERSION + 1,
            "MIGRATIONS": {SCHEMA_VERSION + 1: ["ALTER TABLE procsched_tasks ADD COLUMN note TEXT"]},
        },
    )
    target = store.path if hasattr(store, "path") else store_url
    upgraded = newer(target)
    assert upgraded.schema_version() == SCHEMA_VERSION + 1
    assert upgraded.get("k") is not None
    upgraded.close()
    with pytest.raises(StoreError, match="upgrade procsched"):
        open_store(store_url)  # this procsched cannot read what the newer one wrote


class FakeClock:
    """A settable store clock (UTC ns): time passes only when told."""

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def test_lease_expiry_is_judged_by_the_store_clock(store_url):
    clock = FakeClock(T0)
    store = open_store(store_url, clock=clock)
    add(store)
    dead, live = store.register(lease_ns=3 * P), store.register(lease_ns=3 * P)
    assert store.claim_run(dead, "k", 1, 1, T0)
    clock.now += 2 * P
    assert store.renew_lease(live)
    clock.now += 2 * P  # 4 s: dead's lease (3 s) is over, live's (renewed at 2 s) is not
    assert [h.id for h in store.expired_holders()] == [dead.id]
    assert [r.run for r in store.take_over(dead, live)] == [1]
    assert store.take_over(live, dead) is None  # dead was taken over: fenced out
    store.close()


def test_an_expired_holder_not_yet_taken_over_may_renew(store_url):
    """Lateness alone does not fence: a holder whose lease ran out (a long
    pause) but whom nobody took over still holds its runs, and its renewal
    makes it live again - the take-over re-checks expiry in its own
    transaction, so exactly one of the two wins."""
    clock = FakeClock(T0)
    store = open_store(store_url, clock=clock)
    add(store)
    late, other = store.register(lease_ns=P), store.register(lease_ns=10 * P)
    assert store.claim_run(late, "k", 1, 1, T0)
    clock.now += 2 * P
    assert [h.id for h in store.expired_holders()] == [late.id]
    assert store.renew_lease(late)
    assert store.expired_holders() == []
    assert store.take_over(late, other) is None
    assert store.finish_run(late, "k", 1, 1, "ok", T0 + 1, T0 + P)
    store.close()


def test_injected_skew_shifts_expiry_by_the_skew(store_url):
    """Two schedulers on one store whose clocks differ by `skew`: a lease
    written by the slow clock looks `skew` shorter to the fast one. The bound
    stated in _sql.py: leases must exceed renewal interval + worst skew.
    (PostgreSQL stores use the server's clock unless one is injected, so
    there the skew between hosts is zero by construction.)"""
    skew = P // 2
    real = FakeClock(T0)
    slow = open_store(store_url, clock=lambda: real.now - skew)
    fast = open_store(store_url, clock=real)
    h = slow.register(lease_ns=3 * P)
    real.now = T0 + 3 * P - skew - 1
    assert fast.expired_holders() == []
    real.now = T0 + 3 * P - skew + 1  # still inside the lease by the slow clock
    assert [x.id for x in fast.expired_holders()] == [h.id]
    assert slow.expired_holders() == []
    slow.close()
    fast.close()


def test_a_busy_turn_finishes_then_claims_many_tasks(store):
    """The dispatcher's turn: every finish, then every claim, in one batch
    (PostgreSQL writes each group as one statement; the results must be
    exactly those of the ops one by one)."""
    keys = [f"k{i}" for i in range(8)]
    for k in keys:
        add(store, k)
    h, other = store.register(), store.register()
    b = store.batch(h)
    for k in keys[:6]:
        b.started(k, 1, 1, T0)
    assert b.commit().ok
    assert store.claim_run(other, "k6", 1, 1, T0)  # held by another scheduler
    b = store.batch()
    b.update("k7", paused=True)
    b.commit()
    b = store.batch(h)
    for k in keys[:5]:
        b.finished(k, 1, 1, "error" if k == "k1" else "ok", T0 + 1, T0 + P, retry=k == "k1", error_type="E")
    b.finished("k6", 1, 1, "ok", T0 + 1, T0 + P)  # not ours: stale
    b.finished("k5", 2, 1, "ok", T0 + 1, T0 + P)  # never started: stale
    for k in keys:
        run, attempt = (1, 2) if k == "k1" else (2, 1)
        b.started(k, run, attempt, T0 + P, T0 + P + 1)
    result = b.commit()
    assert result.stale == [("k6", 1, 1), ("k5", 2, 1)]
    assert result.lost == [("k5", 2, 1), ("k6", 2, 1), ("k7", 2, 1)]  # k5 still running, k6 held, k7 paused
    loaded = store.load()
    flying = sorted((r.key, r.run, r.attempt, r.holder == h.id) for r in loaded.in_flight)
    assert flying == [
        ("k0", 2, 1, True),
        ("k1", 1, 2, True),
        ("k2", 2, 1, True),
        ("k3", 2, 1, True),
        ("k4", 2, 1, True),
        ("k5", 1, 1, True),
        ("k6", 1, 1, False),
    ]
    k1 = store.get("k1")
    assert (k1.state.run_count, k1.state.next_attempt, k1.last_outcome) == (1, 2, "error")
    assert [(r.run, r.attempt, r.outcome, r.error_type) for r in store.history("k1")] == [
        (1, 1, "error", "E"),
        (1, 2, None, None),
    ]
    assert store.get("k0").state == TaskState(run_count=2, next_due_ns=T0 + P, next_attempt=1)


def test_batched_history_trim(store_url):
    store = open_store(store_url, keep_runs=3)
    keys = ["a", "b", "c"]
    for k in keys:
        add(store, k)
    h = store.register()
    for run in range(1, 8):
        b = store.batch(h)
        for k in keys:
            b.started(k, run, 1, T0 + (run - 1) * P)
        assert b.commit().ok
        b = store.batch(h)
        for k in keys:
            b.finished(k, run, 1, "ok", T0 + run * P, T0 + run * P)
        assert b.commit().ok
    for k in keys:
        assert [r.run for r in store.history(k)] == [5, 6, 7]
    store.close()


@pytest.mark.parametrize("together", [1, 3], ids=["op by op", "set-wise"])
def test_a_run_that_ends_past_its_trim_goes_with_the_next_sweep(store_url, together):
    """A run's end trims the one run that left the window; a run still in
    flight then (max_concurrent 2: run 1 outlives runs 2-71) stays until the
    next sweep, every TRIM_SWEEP-th run's end, which trims all below the window."""
    from procsched._store._writes import TRIM_SWEEP

    store = open_store(store_url, keep_runs=5)
    keys = [f"k{i}" for i in range(together)]
    b = store.batch()
    for k in keys:
        b.upsert(TaskDefinition(k, "store_funcs:plain", b"", {"kind": "fixed_rate", "period_ns": P}, {},
                                max_concurrent=2), TaskState(next_due_ns=T0))  # fmt: skip
    assert b.commit().ok
    h = store.register()

    def step(make):
        b = store.batch(h)
        for k in keys:
            make(b, k)
        assert b.commit().ok

    step(lambda b, k: b.started(k, 1, 1, T0))
    for run in range(2, TRIM_SWEEP + 8):
        step(lambda b, k, run=run: b.started(k, run, 1, T0 + (run - 1) * P))
        step(lambda b, k, run=run: b.finished(k, run, 1, "ok", T0 + run * P, T0 + run * P))
        if run == 10:  # run 1 ends past its trim (at run 6's end): kept for now
            step(lambda b, k: b.finished(k, 1, 1, "ok", T0 + 10 * P, None))
            assert [r.run for r in store.history(keys[0], 100)] == [1, 6, 7, 8, 9, 10]
        if run == TRIM_SWEEP - 1:
            assert [r.run for r in store.history(keys[-1], 100)][0] == 1
    for k in keys:
        assert [r.run for r in store.history(k, 100)] == list(range(TRIM_SWEEP + 3, TRIM_SWEEP + 8))
    store.close()


def test_unregister_with_every_end_written_leaves_the_slots_of_runs_that_never_started(store):
    """A clean shutdown that wrote the end of every run it started: its runs
    still in flight never started, and their slots go to the next claim (the
    fault campaign, seed 4607: a one-shot whose only run was so cancelled
    kept its slot claimed, every later claim of it was refused, it never
    ran). A retry so cancelled is tried again, as the next attempt."""
    add(store, "once")
    add(store, "retried")
    h = store.register()
    assert store.claim_run(h, "once", 1, 1, T0)
    cycle(store, h, "retried", 1, outcome="error", retry=True)
    assert store.claim_run(h, "retried", 1, 2, T0)
    assert store.unregister(h, ends_written=True)
    assert [r.outcome for r in store.history("once")] == ["cancelled"]
    g = store.register()
    assert store.claim_run(g, "once", 2, 1, T0)  # its slot, left to the next claim
    assert store.get("retried").state.next_attempt == 3
    assert store.claim_run(g, "retried", 1, 3, T0)


def test_unregister_keeps_the_slot_of_a_run_whose_end_may_be_lost(store):
    """Without every end written, a run still in flight may have run: its
    slot stays claimed (never twice)."""
    add(store, "once")
    h = store.register()
    assert store.claim_run(h, "once", 1, 1, T0)
    assert store.unregister(h)
    assert not store.claim_run(store.register(), "once", 2, 1, T0)
