"""Control from outside (DESIGN part three): pause, resume, remove, run now and
backfill asked of any process that opens the store, carried out once by the
instance that runs the task - on SQLite and PostgreSQL. Each test opens the
store twice: ``store`` as an instance does, ``outside`` as the CLI or the
console does (its own connection)."""

from __future__ import annotations

import pytest

from procsched._store import TaskDefinition, TaskState, open_store

P = 1_000_000_000
T0 = 1_700_000_000 * P


@pytest.fixture
def outside(store_url):
    s = open_store(store_url)
    yield s
    s.close()


def add(store, key="k", due=T0):
    b = store.batch()
    b.upsert(
        TaskDefinition(key, "store_funcs:plain", b"", {"kind": "fixed_rate", "period_ns": P}),
        TaskState(next_due_ns=due),
    )
    assert b.commit().ok


def test_pause_resume_remove_from_outside(store, outside):
    add(store)
    h = store.register()
    mark = store.now_ns()
    view = outside.change_mark()
    assert outside.pause("k") is True
    assert outside.pause("k") is False  # paused already
    assert [t.key for t in store.changed_since(mark)] == ["k"]  # the instances' re-read sees it
    assert store.get("k").state.paused and outside.change_mark() != view
    b = store.batch(h)
    b.started("k", 1, 1, T0)
    assert b.commit().lost == [("k", 1, 1)]  # the store holds the paused task's claims at once
    assert outside.resume("k") is True and outside.resume("k") is False
    assert store.claim_run(h, "k", 1, 1, T0)
    # removed while a run is in flight: the run ends and is recorded; the history stays
    assert outside.remove("k") is True and outside.remove("k") is False
    assert store.finish_run(h, "k", 1, 1, "ok", T0 + 1, T0 + P)
    assert store.get("k") is None and store.keys() == set()
    assert [(r.run, r.outcome) for r in store.history("k")] == [(1, "ok")]
    add(store, "c")
    assert outside.cancel("c") and store.get("c") is None
    for action in (outside.pause, outside.resume):
        with pytest.raises(KeyError):
            action("nope")


def test_run_now_is_taken_once_by_the_instance_that_runs_the_task(store, outside):
    add(store)
    add(store, "other")
    a, b = store.register(), store.register()
    rid = outside.ask("k", "run_now", asked_by="cli")
    req = outside.request(rid)
    assert (req.key, req.kind, req.asked_by, req.taken_by, req.done) == ("k", "run_now", "cli", None, False)
    assert store.take_requests(a, {"other"}) == []  # a does not run k (standby, or another program's)
    (taken,) = store.take_requests(a, {"k", "other"})
    assert (taken.id, taken.taken_by) == (rid, a.id)
    assert store.take_requests(b, {"k"}) == []  # once among instances
    # carried out: the manual run's claim and the answer in one batch
    batch = store.batch(a)
    batch.started("k", 1, 1, T0 + 3 * P, cause="manual")
    batch.answer(rid, result={"accepted": True, "run": 1})
    assert batch.commit().ok
    req = outside.request(rid)
    assert req.done and req.result == {"accepted": True, "run": 1} and req.error is None
    assert not store.answer(a, rid, result="again")  # answered once
    assert [(r.run, r.cause) for r in store.history("k")] == [(1, "manual")]
    assert store.get("k").state.next_due_ns == T0  # the schedule did not move


def test_backfill_requests_and_refusals(store, outside):
    add(store)
    h = store.register()
    rid = outside.ask("k", "backfill", start_ns=T0 - 10 * P, end_ns=T0, dry_run=True)
    (req,) = store.take_requests(h, ["k"])
    assert (req.start_ns, req.end_ns, req.dry_run) == (T0 - 10 * P, T0, True)
    slots = [T0 - 10 * P + i * P for i in range(10)]
    assert store.answer(h, rid, result=slots)
    assert outside.request(rid).result == slots
    rid = outside.ask("k", "backfill", start_ns=T0 - P, end_ns=T0)
    store.take_requests(h, ["k"])
    assert store.answer(h, rid, error="a one-shot task has no slots to backfill")
    assert outside.request(rid).error.startswith("a one-shot")
    with pytest.raises(ValueError, match="start_ns < end_ns"):
        outside.ask("k", "backfill", start_ns=T0, end_ns=T0)
    with pytest.raises(TypeError, match="start_ns and end_ns"):
        outside.ask("k", "backfill", start_ns=1.5, end_ns=T0)
    with pytest.raises(ValueError, match="kind must be one of"):
        outside.ask("k", "reboot")
    with pytest.raises(ValueError, match="a backfill's"):
        outside.ask("k", "run_now", dry_run=True)
    with pytest.raises(KeyError):
        outside.ask("nope", "run_now")
    assert outside.request(10_000) is None


def test_a_request_taken_by_an_instance_that_died_is_given_back_at_its_take_over(store, outside):
    add(store)
    dead, live = store.register(lease_ns=P), store.register()
    rid = outside.ask("k", "run_now")
    assert [r.id for r in store.take_requests(dead, {"k"})] == [rid]
    assert store.take_over(dead, live, force=True) == []
    assert outside.request(rid).taken_by is None
    assert store.take_requests(dead, {"k"}) == []  # a fenced-out instance takes nothing
    assert [r.id for r in store.take_requests(live, {"k"})] == [rid]
    assert not store.answer(dead, rid, result=True)  # nor answers what it no longer holds
    assert store.answer(live, rid, result=True)


def test_a_clean_shutdown_gives_back_what_it_did_not_answer(store, outside):
    add(store)
    a = store.register()
    rid = outside.ask("k", "run_now")
    store.take_requests(a, {"k"})
    assert store.unregister(a)
    assert outside.request(rid).taken_by is None


def test_old_requests_are_forgotten(store_url):
    class Clock:
        now = T0

        def __call__(self) -> int:
            return self.now

    clock = Clock()
    store = open_store(store_url, clock=clock)
    add(store)
    old = store.ask("k", "run_now")
    clock.now += 2 * 86_400 * P
    new = store.ask("k", "run_now")
    assert store.request(old) is None and store.request(new) is not None
    store.close()
