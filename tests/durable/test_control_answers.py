"""The user's pause (resume, cancel) of a keyed task is answered once the
store has it: when ``pause()`` returns True, every instance reads it there.
Answered before it was written, a resume whose commit failed (a dropped
connection) and went again 70 ms later reached the store after a pause
that another instance acknowledged after it - and undid it: the task ran
on, paused for its user (the fault campaign, seed 5715, PostgreSQL). Here
the commit that carries the pause fails (the store locked), or is fenced
out (the registration taken over): the answer waits for the commit that
writes it. A real journal on a real SQLite store; the carrier is a
recorder (the engine's, from its own tests)."""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any

from procsched._core import Policy, Schedule
from procsched._core._units import NS
from procsched._runtime import _messages as m
from procsched._runtime._durable._journal import Journal
from procsched._runtime._engine import Engine
from procsched._store import TaskDefinition, TaskState, open_store
from tests.durable.test_peers_realign import _turn
from tests.runtime.test_engine import FakeCarrier, add

REQUEST = 99  # the user's pause request


def _paused(tmp_path) -> tuple[str, Journal, Engine, FakeCarrier, list[Any]]:
    """A journal on a store at ``s.db`` (a lock makes its commits fail at
    once), its keyed task 7 ("k", every second) paused by the user, the
    pause answered as the dispatcher answers it; (path, journal, engine,
    carrier, what the user was told)."""
    path = str(tmp_path / "s.db")
    told: list[Any] = []
    journal = Journal(f"sqlite:///{path}?busy_timeout=1", os.getpid(), emit=told.extend)
    stored = journal.store.batch(journal.holder)
    rate = {"kind": "fixed_rate", "period_ns": NS, "initial_delay_ns": 0, "misfire": "skip"}
    stored.upsert(TaskDefinition("k", "m:f", b"", rate), TaskState(next_due_ns=time.time_ns() + 60 * NS))
    stored.commit()
    carrier = FakeCarrier(prefetch=2)
    engine = Engine(carrier, workers=1, policy=Policy.PRIORITY, durable=journal)
    add(engine, 7, time.monotonic_ns() + 60 * NS, Schedule.fixed_rate(NS))
    journal.keys[7] = "k"
    assert engine.pause(7, time.monotonic_ns())
    journal.answer(engine, 7, REQUEST, True)
    return path, journal, engine, carrier, told


def _answered(told: list[Any]) -> list[Any]:
    return [m.view(m.Answer, ev).value for ev in told if ev[0] == m.ANSWER and m.view(m.Answer, ev).request == REQUEST]


def test_a_pause_whose_commit_failed_is_answered_once_the_retry_writes_it(tmp_path) -> None:
    path, journal, engine, carrier, told = _paused(tmp_path)
    store = open_store(path)
    lock = sqlite3.connect(path, isolation_level=None)
    try:
        lock.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
        _turn(journal, engine, 0, time.monotonic_ns())
        assert journal.retry_at is not None  # the commit failed: it goes again
        assert _answered(told) == []  # not written: not answered
        assert not store.get("k").state.paused
        lock.execute("ROLLBACK")
        _turn(journal, engine, 0, journal.retry_at)
        assert journal.retry_at is None
        assert _answered(told) == [True]
        assert store.get("k").state.paused
        assert not journal.answers
    finally:
        lock.close()
        store.close()
        journal.close(clean=True)


def test_a_pause_whose_commit_was_fenced_out_is_answered_once_written_again(tmp_path) -> None:
    path, journal, engine, carrier, told = _paused(tmp_path)
    store = open_store(path)
    first = journal.holder
    try:
        # The batch also claims a run (so its commit checks the lease), and the
        # registration it was made under was taken over meanwhile.
        journal.batch.started("k", 1, 1, time.time_ns(), time.time_ns())
        with sqlite3.connect(path, isolation_level=None) as other:
            other.execute("UPDATE procsched_schedulers SET token = 'taken over' WHERE id = ?", (first.id,))
        _turn(journal, engine, 0, time.monotonic_ns())
        assert journal.holder.id != first.id  # fenced out: registered again
        assert _answered(told) == []  # nothing of the batch was written
        assert not store.get("k").state.paused
        _turn(journal, engine, 0, time.monotonic_ns())
        assert _answered(told) == [True]
        assert store.get("k").state.paused
    finally:
        store.close()
        journal.close(clean=True)


def test_a_run_s_pause_of_a_keyed_task_returns_once_the_store_has_it(tmp_path) -> None:
    """``current_scheduler().pause()`` inside a run takes the user's way:
    the run hears True once the store has the pause (it was answered before
    the dispatcher had even journalled it), and so for the resume."""
    import procsched
    from tests.durable import jobs_mod

    path = str(tmp_path / "s.db")
    with procsched.Scheduler(1, store=path) as sched:
        target = sched.schedule_at_fixed_rate(jobs_mod.add, 3600.0, args=(1, 2), key="hourly", initial_delay=3600.0)
        got = sched.submit(jobs_mod.pause_then_read, target.id, "hourly", path).result(timeout=60)
    assert got == [True, True, True, False]
