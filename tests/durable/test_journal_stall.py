"""A keyed run whose start the store recorded, taken back from its worker
after a stall (``Journal.recheck``, or a turn late by a third of the lease),
is given again only once the lease is known to be this scheduler's: while
the renewal fails, it waits; fenced out meanwhile, it never starts here.
Given again at once, it started beside another scheduler's retry of it (the
fault campaign, seed 1919, PostgreSQL: the renewal after SIGCONT failed on a
dropped connection, the run went to another worker of the same scheduler,
and the fencing was found 10 ms later, after its worker had taken it). A
real journal on a real SQLite store; the carrier is a recorder (the
engine's, from its own tests)."""

from __future__ import annotations

import os
import sqlite3
import time

from procsched._core import Policy, Run
from procsched._core._units import NS
from procsched._runtime._durable import _journal as journal_module
from procsched._runtime._durable._journal import FLIGHT, RECORDED, Journal
from procsched._runtime._engine import Engine
from procsched._store import TaskDefinition, TaskState
from tests.runtime.test_engine import FakeCarrier, FakeWorker, add


def _journal(tmp_path) -> tuple[Journal, Run]:
    journal = Journal(str(tmp_path / "s.db"), os.getpid(), emit=lambda events: None)
    journal.keys[7] = "k"
    run = Run(7, 3, 0, None, None, "k")
    journal.claims[(7, 3, 1)] = [RECORDED, run, "k", 4242]  # its start is the store's
    return journal, run


def test_a_recorded_run_given_again_waits_while_the_lease_is_unknown(tmp_path) -> None:
    journal, run = _journal(tmp_path)
    carrier, worker = FakeCarrier(), FakeWorker(4242)
    try:
        journal.writable_since = None  # the renewal after the stall failed
        assert journal.hold(worker, run)  # held, not sent
        journal._release(carrier, time.monotonic_ns())
        assert worker.given == []
        journal._wrote(time.monotonic_ns())  # a write succeeded: the lease is ours
        journal._release(carrier, time.monotonic_ns())
        assert worker.given == [run]
    finally:
        journal.close(clean=True)


def test_a_recorded_run_given_again_goes_at_once_while_the_lease_is_known(tmp_path) -> None:
    journal, run = _journal(tmp_path)
    try:
        assert not journal.hold(FakeWorker(4242), run)  # sent now: nothing to wait for
    finally:
        journal.close(clean=True)


def test_a_start_recorded_under_a_registration_taken_over_is_forgotten(tmp_path) -> None:
    """Fenced out (another scheduler took the registration over and
    recorded its runs crashed), the journal forgets the starts it had
    recorded under it: a run of them given again later is claimed anew -
    and refused by the store - instead of going out as "recorded" (seed
    1919: it started beside the other scheduler's retry of it)."""
    journal, run = _journal(tmp_path)
    try:
        engine = Engine(FakeCarrier(prefetch=2), workers=1, policy=Policy.PRIORITY, durable=journal)
        journal._fenced_out(engine, time.monotonic_ns())
        assert (7, 3, 1) not in journal.claims
        assert journal.hold(FakeWorker(4242), run)  # given again: a new claim, held until the store says
        assert journal.claims[(7, 3, 1)][0] != RECORDED
    finally:
        journal.close(clean=True)


def test_a_run_whose_commit_answered_after_its_lease_waits_for_a_renewal(tmp_path, monkeypatch) -> None:
    """A commit that recorded a run's start renewed the lease when it began:
    if its answer comes a lease later (the store stalled, the dispatcher
    starved), the lease may have run out meanwhile and another scheduler
    recorded the run crashed. The run is sent only once a renewal says the
    lease is still ours (the fault campaign, seed 2807: sent on the late
    answer, it started 16 ms after the take-over, beside the retry). The
    turn does not wait for the commit here: its answer is taken as the
    dispatcher's loop takes it (``committed``, its pipe readable), at a time
    a lease after the turn that made it."""
    monkeypatch.setattr(journal_module, "COMMIT_WAIT_S", 0)
    journal = Journal(str(tmp_path / "s.db"), os.getpid(), emit=lambda events: None)
    journal.keys[7] = "k"
    stored = journal.store.batch(journal.holder)
    stored.upsert(TaskDefinition("k", "m:f", b"", {"kind": "fixed_rate", "period_ns": NS}), TaskState(next_due_ns=0))
    stored.commit()
    run = Run(7, 1, 0, None, None, "k")
    carrier, worker = FakeCarrier(prefetch=2), FakeWorker(4242)
    engine = Engine(carrier, workers=1, policy=Policy.PRIORITY, durable=journal)
    try:
        assert journal.hold(worker, run)  # claimed: held until its start is committed
        t0 = time.monotonic_ns()
        journal.turn(engine, carrier, 0, t0)  # its start goes to the writer
        assert journal.claims[(7, 1, 1)][0] == FLIGHT  # (not collected in the turn)
        journal.writer.wait(None)
        late = t0 + journal.lease_ns
        journal.committed(engine, carrier, late)  # the answer, taken a lease after the commit began
        assert journal.claims[(7, 1, 1)][0] == RECORDED
        assert worker.given == []  # not sent: the lease is not known to be ours
        assert journal.renew_at <= late  # renewed at the next turn
        journal.turn(engine, carrier, 0, late + 1)
        assert worker.given == [run]  # the renewal found the lease ours: sent
    finally:
        journal.close(clean=True)


def test_runs_given_ahead_are_taken_back_when_the_lease_runs_short(tmp_path) -> None:
    """A keyed run given ahead to a busy worker starts when the worker's
    current run ends - maybe after the lease ran out, if no renewal came
    meanwhile (the store slow or out). When the lease is known for less than
    a third of it, the runs given ahead that no worker has started are taken
    back; a renewal gives them again."""
    journal = Journal(str(tmp_path / "s.db"), os.getpid(), emit=lambda events: None)
    stored = journal.store.batch(journal.holder)
    for task_id in (1, 2):
        journal.keys[task_id] = f"k{task_id}"
        stored.upsert(
            TaskDefinition(f"k{task_id}", "m:f", b"", {"kind": "fixed_rate", "period_ns": NS}),
            TaskState(next_due_ns=0),
        )
    stored.commit()
    carrier = FakeCarrier(prefetch=2)
    engine = Engine(carrier, workers=1, policy=Policy.PRIORITY, durable=journal)
    try:
        t0 = time.monotonic_ns()
        engine.start(t0)
        for task_id in (1, 2):
            add(engine, task_id, t0, now=t0)
        engine.tick(t0)
        journal.renew_at = t0 + journal.lease_ns // 3  # (renewed at its start)
        journal.turn(engine, carrier, 0, t0)  # their starts committed (or in flight)
        if journal.writer.busy:
            journal.writer.wait(None)
            journal.committed(engine, carrier, t0)
        worker = carrier.workers[0]
        assert [r.task_id for r in worker.given] == [1, 2]  # 2 given ahead, behind 1
        carrier.start(worker)
        short = t0 + journal.lease_ns - journal.lease_ns // 3  # no renewal since the start: a third of it is left
        journal.renew_at = short + journal.lease_ns  # (and the renewal is stuck: not tried in this turn)
        journal.turn(engine, carrier, 0, short)
        assert ("revoke", worker.ident, 2, 1) in carrier.log
    finally:
        journal.close(clean=True)


def test_a_batch_fenced_out_under_a_registration_renewed_since_registers_no_third(tmp_path, monkeypatch) -> None:
    """A commit in flight under a registration that was taken over (this
    scheduler stalled past its lease) answers "fenced out" after a lease
    renewal has found that out and registered again: the new registration
    stands. Registered again once more, the scheduler left the second one
    to expire - another scheduler took it over a second later (the fault
    campaign, seed 5715: registered at 20:40:11.971, left at .981)."""
    monkeypatch.setattr(journal_module, "COMMIT_WAIT_S", 0)
    path = str(tmp_path / "s.db")
    journal = Journal(path, os.getpid(), emit=lambda events: None)
    journal.keys[7] = "k"
    stored = journal.store.batch(journal.holder)
    stored.upsert(TaskDefinition("k", "m:f", b"", {"kind": "fixed_rate", "period_ns": NS}), TaskState(next_due_ns=0))
    stored.commit()
    carrier = FakeCarrier(prefetch=2)
    engine = Engine(carrier, workers=1, policy=Policy.PRIORITY, durable=journal)
    first = journal.holder
    try:
        with sqlite3.connect(path, isolation_level=None) as other:  # taken over
            other.execute("UPDATE procsched_schedulers SET token = 'taken over' WHERE id = ?", (first.id,))
        assert journal.hold(FakeWorker(4242), Run(7, 1, 0, None, None, "k"))  # claimed: its start is batched
        t0 = time.monotonic_ns()
        journal.turn(engine, carrier, 0, t0)  # the commit goes to the writer (not collected in the turn)
        journal.writer.wait(None)  # done: fenced out
        journal.recheck(engine, t0)  # a renewal finds it out first, and registers again
        second = journal.holder
        assert second.id != first.id
        journal.committed(engine, carrier, t0)  # the commit's answer
        assert journal.holder.id == second.id
        assert {h.id for h in journal.store.schedulers()} == {first.id, second.id}  # (the first: its row, taken over)
    finally:
        journal.close(clean=True)
