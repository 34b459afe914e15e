"""A commit computed in this process (SQLite) is followed by one that waits
for the ends of the runs it sent - for as long as it took, at most
``HOLD_MAX_NS`` - so that one commit carries each task's end and next claim
(``Journal.holding``). A commit that mostly waited (a server) is not. A
real journal on a real SQLite store; the carrier is a recorder (the
engine's, from its own tests); the clock is the turn's argument."""

from __future__ import annotations

import os
import time

import pytest

from procsched._core import Policy, Run
from procsched._runtime import _messages as m
from procsched._runtime._durable._journal import HOLD_MAX_NS, RECORDED, Journal
from procsched._runtime._durable._writer import Spent
from procsched._runtime._engine import Engine
from procsched._store import TaskDefinition, TaskState, open_store
from tests.runtime.test_engine import FakeCarrier, FakeWorker

RUN = (7, 3, 1)  # (task id, run, attempt) the last commit sent


def _held(tmp_path) -> tuple[Journal, Engine, int]:
    """A journal whose last commit sent RUN, with a change waiting."""
    journal = Journal(str(tmp_path / "s.db"), os.getpid(), emit=lambda events: None)
    engine = Engine(FakeCarrier(prefetch=2), workers=1, policy=Policy.PRIORITY, durable=journal)
    now = time.monotonic_ns()
    journal.turn(engine, FakeCarrier(), 0, now)  # the first turn renews the lease
    journal.keys[7] = "k"
    journal.going = {RUN}
    journal.hold_until = now + HOLD_MAX_NS
    journal.batch.delete("gone")  # a change for the next commit
    return journal, engine, now


def _ended(task_id: int, run: int, attempt: int) -> list[object]:
    return m.RunEnded.wire(
        task_id, run, 0, 0, 0, None, "ok", "pending", 0, 0, False, 0, None, None, attempt, 0, 0, False, "schedule",
        None, None,
    )  # fmt: skip


def test_the_next_commit_waits_for_the_ends_of_the_runs_the_last_one_sent(tmp_path) -> None:
    journal, engine, now = _held(tmp_path)
    try:
        wake = journal.turn(engine, FakeCarrier(), 0, now + 1)
        assert not journal.writer.busy and len(journal.batch) == 1  # waits
        assert wake is not None and wake <= journal.hold_until  # and wakes when the wait is over
        engine.events.append(_ended(*RUN))  # the run's end came
        journal.turn(engine, FakeCarrier(), 0, now + 2)
        assert journal.going == set()
        assert journal.writer.busy or len(journal.batch) == 0  # with it, the batch went (its end among it)
    finally:
        journal.close(clean=False)


def test_the_next_commit_waits_no_longer_than_the_hold(tmp_path) -> None:
    journal, engine, now = _held(tmp_path)
    try:
        journal.turn(engine, FakeCarrier(), 0, journal.hold_until)  # the run is still going
        assert journal.writer.busy or len(journal.batch) == 0
    finally:
        journal.close(clean=False)


def test_another_run_s_end_does_not_end_the_wait(tmp_path) -> None:
    journal, engine, now = _held(tmp_path)
    try:
        engine.events.append(_ended(7, 2, 1))
        journal.turn(engine, FakeCarrier(), 0, now + 1)
        assert journal.going == {RUN} and not journal.writer.busy
    finally:
        journal.close(clean=False)


def test_a_drain_waits_for_no_run(tmp_path) -> None:
    journal, engine, now = _held(tmp_path)
    try:
        journal.drain(engine, FakeCarrier(), 0, now + 1)
        assert journal.drained and len(journal.batch) == 0
    finally:
        journal.close(clean=True)


@pytest.mark.parametrize("computed", [True, False])
def test_the_runs_a_commit_sent_are_waited_for_if_it_was_computed_here(tmp_path, monkeypatch, computed) -> None:
    monkeypatch.setattr(Spent, "computed", property(lambda spent: computed))  # what the writer measured, for the test
    path = str(tmp_path / "s.db")
    store = open_store(path)
    batch = store.batch()
    slot = time.time_ns()
    batch.upsert(TaskDefinition("k", "m:f", b"", {"kind": "once", "at_ns": 0}), TaskState(0, slot))
    batch.commit()
    store.close()
    journal = Journal(path, os.getpid(), emit=lambda events: None)
    engine = Engine(FakeCarrier(prefetch=2), workers=1, policy=Policy.PRIORITY, durable=journal)
    carrier, worker = FakeCarrier(), FakeWorker(4242)
    try:
        now = time.monotonic_ns()
        journal.turn(engine, carrier, 0, now)  # the first turn renews the lease
        journal.keys[7] = "k"
        run = Run(7, 1, slot, None, None, "k")
        assert journal.hold(worker, run)  # its start goes with the next commit
        journal.turn(engine, carrier, 0, now)  # (it may see the commit end, and take it)
        assert journal.writer.wait(10)
        journal.committed(engine, carrier, now)
        assert journal.claims[(7, 1, 1)][0] == RECORDED and worker.given == [run]  # sent
        assert journal.going == ({(7, 1, 1)} if computed else set())
        assert journal.hold_until == now + min(journal.writer.spent.wall_ns, HOLD_MAX_NS)
    finally:
        journal.close(clean=False)


def test_a_commit_that_mostly_waited_is_not_waited_for() -> None:
    assert Spent(wall_ns=1_000_000, cpu_ns=900_000).computed  # SQLite: computed in the writer thread
    assert not Spent(wall_ns=3_000_000, cpu_ns=1_100_000).computed  # PostgreSQL: the answer's round trip, an fsync
