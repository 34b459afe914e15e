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
import time

from procsched._core import Policy, Run
from procsched._runtime._durable._journal import RECORDED, Journal
from procsched._runtime._engine import Engine
from tests.runtime.test_engine import FakeCarrier, FakeWorker


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
        journal._release(carrier)
        assert worker.given == []
        journal._wrote(time.monotonic_ns())  # a write succeeded: the lease is ours
        journal._release(carrier)
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
