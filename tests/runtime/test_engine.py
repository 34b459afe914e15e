"""The engine driven by hand, as h11's tests drive its state machine: no
process, no thread, no clock. A fake carrier records what the engine asks
(spawn, send, kill, retire, revoke) and is told what happens ("worker 2
exited with -11 now", "its run started", "it passed over a revoked run");
time is an integer moved by the test. The crash table, prefetch revoke,
early hand-off and the crash-loop hold in milliseconds; the real-process
suites (test_crash_table.py, test_prefetch.py, test_early_handoff.py,
reliability/test_crash_loop.py) stay the second line.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from procsched import TaskState
from procsched._core import ONCE, Policy, Run, Schedule
from procsched._errors import TaskTimeoutError, WorkerCrashedError
from procsched._events import Listeners
from procsched._handle import TaskHandle
from procsched._runtime import _messages as m
from procsched._runtime._carrier import Carrier
from procsched._runtime._engine import Engine
from procsched._runtime._holds import BACKOFF_FIRST_NS
from procsched._runtime._listener import EventApplier

MS = 1_000_000


class FakeWorker:
    def __init__(self, ident: int) -> None:
        self.ident = ident
        self.given: list[Run] = []  # runs sent, in order
        self.started = 0  # how many of them it has started (the rest hold their tickets)
        self.revoked = 0  # taken back from the end of ``given``, not passed over yet

    def __repr__(self) -> str:
        return f"<fake worker {self.ident}>"


class FakeCarrier(Carrier):
    """Records what the engine asks; a worker's runs start only when the test says so."""

    def __init__(self, prefetch: int = 0, early_ns: int = 0, reports_start: bool = False) -> None:
        self.prefetch = prefetch
        self.early_ns = early_ns
        self.reports_start = reports_start
        self.log: list[tuple[Any, ...]] = []
        self.workers: list[FakeWorker] = []

    def spawn(self, slot: int) -> FakeWorker:
        worker = FakeWorker(100 + len(self.workers))
        self.workers.append(worker)
        self.log.append(("spawn", slot, worker.ident))
        return worker

    def send_run(self, worker: FakeWorker, run: Run) -> None:
        worker.given.append(run)
        self.log.append(("send", worker.ident, run.task_id, run.run))

    def kill(self, worker: FakeWorker, hard: bool) -> None:
        self.log.append(("kill", worker.ident, hard))

    def retire(self, worker: FakeWorker) -> None:
        self.log.append(("retire", worker.ident))

    def revoke(self, worker: FakeWorker, run: Run) -> bool:
        """The ticket of the last run given and not revoked: still there unless it started."""
        index = len(worker.given) - worker.revoked - 1
        assert worker.given[index] is run, "the engine revokes the last run given, and no other"
        if index < worker.started:
            return False
        worker.revoked += 1
        self.log.append(("revoke", worker.ident, run.task_id, run.run))
        return True

    def start(self, worker: FakeWorker) -> Run:
        """The worker takes the ticket of its next run and starts it."""
        run = worker.given[worker.started]
        worker.started += 1
        return run


def add(
    engine: Engine,
    task_id: int,
    due: int,
    schedule: Schedule = ONCE,
    *,
    timeout: int | None = None,
    priority: int = 0,
    now: int = 0,
) -> None:
    message = m.Add.wire(
        task_id,
        due,
        due - now,
        0,
        None,
        schedule.to_wire(),
        priority,
        timeout,
        f"t{task_id}",
        ("fn", "args"),
        None,
        None,
        None,
    )
    assert engine.add(m.view(m.Add, message), task_id, ("fn", "args")) is None


def done(engine: Engine, worker: FakeWorker, run: Run, now: int, outcome: str = "ok") -> None:
    blob_kind = m.BLOB_VALUE if outcome == "ok" else m.BLOB_ERROR
    engine.finished(worker, m.Done(m.DONE, run.task_id, run.run, outcome, now, now, blob_kind, b"", False, None, None))


def events(engine: Engine, tag: str) -> list[Any]:
    """The engine's events of one kind, as records (and the outbox emptied)."""
    views = {
        m.RUN_ENDED: m.RunEnded,
        m.RUN_STARTED: m.RunStarted,
        m.TASK_CANCELLED: m.TaskCancelled,
        m.WORKER_CHANGED: m.WorkerChanged,
        m.LOG: m.Log,
    }
    return [m.view(views[tag], ev) for ev in engine.take_events() if ev[0] == tag]


def make(workers: int = 1, **carrier: Any) -> tuple[Engine, FakeCarrier]:
    fake = FakeCarrier(**carrier)
    engine = Engine(fake, workers=workers, policy=Policy.PRIORITY)
    engine.start(0)
    return engine, fake


# -- the crash table ------------------------------------------------------------------


@pytest.mark.parametrize(("exitcode", "signal"), [(-11, "SIGSEGV"), (-9, "SIGKILL"), (1, None), (None, None)])
def test_a_worker_that_dies_mid_run_costs_that_run_only(exitcode: int | None, signal: str | None) -> None:
    engine, fake = make(workers=2)
    add(engine, 1, 0)
    add(engine, 2, 0, Schedule.fixed_rate(10 * MS))
    engine.tick(0)
    one, two = fake.workers
    assert [r.task_id for r in one.given + two.given] == [1, 2]
    engine.take_events()
    engine.worker_exited(one, exitcode, 3 * MS)  # "worker 1 exited with -11 now"
    ended = events(engine, m.RUN_ENDED)
    assert [(e.task_id, e.outcome, e.state) for e in ended] == [(1, "crashed", "failed")]
    error = ended[0].blob
    assert isinstance(error, WorkerCrashedError) and error.exitcode == exitcode and error.signal == signal
    assert ("kill", one.ident, True) in fake.log  # whatever it left behind
    assert engine.state(2) is not None and engine.state(1) is None  # the other task untouched
    engine.tick(3 * MS)
    assert fake.log[-1] == ("spawn", 0, 102)  # replaced at the next tick (the crash reaches the user first)


def test_a_periodic_task_that_crashes_keeps_its_schedule() -> None:
    engine, fake = make()
    add(engine, 1, 0, Schedule.fixed_rate(10 * MS))
    engine.tick(0)
    engine.worker_exited(fake.workers[0], -11, 4 * MS)
    (ended,) = events(engine, m.RUN_ENDED)
    assert (ended.outcome, ended.state, ended.next_due_ns) == ("crashed", "pending", 10 * MS)


def test_a_run_over_its_timeout_is_killed_and_fails_the_task() -> None:
    engine, fake = make()
    add(engine, 1, 0, timeout=5 * MS)
    assert engine.tick(0) == 5 * MS  # its deadline is the next wake-up
    worker = fake.workers[0]
    engine.tick(5 * MS)
    assert ("kill", worker.ident, False) in fake.log  # SIGTERM first
    (ended,) = events(engine, m.RUN_ENDED)
    assert ended.outcome == "timeout" and isinstance(ended.blob, TaskTimeoutError)
    engine.tick(5 * MS + engine.kill_grace_ns)
    assert fake.log[-1] == ("kill", worker.ident, True) or ("kill", worker.ident, True) in fake.log  # then SIGKILL
    engine.worker_exited(worker, -9, 6 * MS + engine.kill_grace_ns)
    (gone,) = events(engine, m.WORKER_CHANGED)
    assert (gone.what, gone.worker) == ("exited", worker.ident)  # a worker we killed: not a crash


def test_cancel_with_interrupt_kills_the_run_and_reports_it_cancelled() -> None:
    engine, fake = make()
    add(engine, 1, 0)
    engine.tick(0)
    assert engine.cancel(1, False, MS) is False  # a running one-shot: left alone
    assert engine.cancel(1, True, MS) is True
    assert ("kill", fake.workers[0].ident, False) in fake.log
    ended = events(engine, m.RUN_ENDED)
    assert [(e.outcome, e.state) for e in ended] == [("cancelled", "cancelled")]


def test_a_late_report_never_lands_on_a_later_run() -> None:
    engine, fake = make()
    add(engine, 1, 0, timeout=5 * MS)
    engine.tick(0)
    worker = fake.workers[0]
    run = fake.start(worker)
    engine.tick(5 * MS)  # timed out: the run is ended
    engine.take_events()
    done(engine, worker, run, 6 * MS)  # its result arrives after all
    assert events(engine, m.RUN_ENDED) == []


# -- prefetch: revoke -----------------------------------------------------------------------


def test_a_cancel_of_a_run_given_ahead_revokes_it_and_it_never_starts() -> None:
    engine, fake = make(prefetch=2)
    for task_id in (1, 2, 3):
        add(engine, task_id, 0)
    engine.tick(0)
    worker = fake.workers[0]
    assert [r.task_id for r in worker.given] == [1, 2, 3]  # one running, two queued behind it
    fake.start(worker)
    assert engine.cancel(3, False, MS) is True  # queued, not started: revoked
    assert fake.log[-1] == ("revoke", worker.ident, 3, 1)
    assert [e.task_id for e in events(engine, m.TASK_CANCELLED)] == [3]
    add(engine, 4, MS, now=MS)
    done(engine, worker, worker.given[0], 2 * MS)
    engine.tick(2 * MS)
    assert [r.task_id for r in worker.given] == [1, 2, 3]  # nothing new until it passed over the revoked run
    engine.skipped(worker)
    engine.tick(2 * MS)
    assert [r.task_id for r in worker.given] == [1, 2, 3, 4]


def test_a_cancel_of_a_queued_run_the_worker_started_is_decided_as_running() -> None:
    engine, fake = make(prefetch=1)
    add(engine, 1, 0)
    add(engine, 2, 0)
    engine.tick(0)
    worker = fake.workers[0]
    first = fake.start(worker)
    done(engine, worker, first, MS)  # (its result is read; the worker went on to run 2 by itself)
    fake.start(worker)
    assert engine.cancel(2, False, MS) is False  # a running one-shot


def test_a_crash_sends_the_runs_queued_behind_the_dead_run_back_untouched() -> None:
    engine, fake = make(prefetch=2)
    for task_id in (1, 2, 3):
        add(engine, task_id, 0)
    engine.tick(0)
    dead = fake.workers[0]
    fake.start(dead)
    engine.worker_exited(dead, -11, MS)
    ended = events(engine, m.RUN_ENDED)
    assert [(e.task_id, e.outcome) for e in ended] == [(1, "crashed")]
    engine.tick(MS)  # a fresh worker gets them, never started, never counted
    assert sorted(r.task_id for r in fake.workers[1].given) == [2, 3]
    assert events(engine, m.RUN_ENDED) == []


# -- early hand-off --------------------------------------------------------------------------


def test_a_run_handed_over_early_is_taken_back_by_a_cancel() -> None:
    engine, fake = make(prefetch=2, early_ns=3 * MS)
    add(engine, 1, 10 * MS)
    assert engine.tick(0) == 7 * MS  # woken early_ns before it is due
    engine.tick(7 * MS)
    worker = fake.workers[0]
    assert [r.task_id for r in worker.given] == [1]  # given 3 ms ahead; the worker waits for 10 ms itself
    assert engine.cancel(1, False, 8 * MS) is True  # not started: taken back
    assert fake.log[-1] == ("revoke", worker.ident, 1, 1)
    assert [e.task_id for e in events(engine, m.TASK_CANCELLED)] == [1]


def test_a_run_due_meanwhile_takes_back_a_run_given_early() -> None:
    engine, fake = make(prefetch=2, early_ns=3 * MS)
    add(engine, 1, 10 * MS)
    engine.tick(7 * MS)
    worker = fake.workers[0]
    add(engine, 2, 8 * MS, now=8 * MS)  # due now: it must not wait behind a run due later
    engine.tick(8 * MS)
    assert fake.log[-1] == ("revoke", worker.ident, 1, 1)
    engine.skipped(worker)  # the worker passed over it
    engine.tick(8 * MS)
    sends = [entry[2] for entry in fake.log if entry[0] == "send"]
    assert sends == [1, 2, 1]  # given early, taken back; the run due now first, then it again


# -- the crash-loop hold ------------------------------------------------------------------------


def test_a_periodic_task_that_crashes_every_run_is_held_back() -> None:
    """From its second crashed run in a row, a periodic task's runs are held
    back (50 ms, doubling): a free worker stays free, the pool is not spent
    on it (the slot's own respawn back-off is another matter)."""
    engine, fake = make(workers=2)
    add(engine, 1, 0, Schedule.fixed_rate(MS))
    engine.tick(0)
    first, idle = fake.workers
    engine.worker_exited(first, -11, MS // 2)
    engine.tick(MS)
    second = fake.workers[2]  # slot 0's replacement took run 2
    assert [r.run for r in second.given] == [2]
    engine.worker_exited(second, -11, 3 * MS // 2)
    logs = [e.message for e in events(engine, m.LOG)]
    assert any("2 crashed runs in a row; holding its runs back (50 ms" in line for line in logs)
    hold_ends = 3 * MS // 2 + BACKOFF_FIRST_NS
    assert engine.tick(2 * MS) == hold_ends  # run 3 is claimed and parked until then
    assert idle.given == []  # a free worker, and the run waits
    engine.tick(hold_ends)
    assert [r.run for w in fake.workers for r in w.given][-1] == 3


# -- what the user process hears of a run taken back ------------------------------------------


def _heard() -> tuple[TaskHandle, list[dict[str, Any]], EventApplier]:
    """The user process's side: task 1's handle, what its listeners are
    told, and the applier the engine's events are fed to."""

    class Owner:
        handle_runs = 100

    told: list[dict[str, Any]] = []
    listeners = Listeners()
    listeners.add(told.append)
    handle = TaskHandle(Owner(), 1, "t1", 0.0, None, None)
    return handle, told, EventApplier(Owner(), {1: handle}, {}, {}, listeners, None, lambda key: None)


def _feed(engine: Engine, applier: EventApplier) -> None:
    for event in engine.take_events():
        if event[0] != m.WORKER_CHANGED:  # (the backend's: no backend here)
            applier.apply(event)


def test_a_pause_that_takes_back_a_run_given_early_leaves_the_handle_paused() -> None:
    """The run given early was told started (it starts at its due time on
    its own); the pause takes it back before it begins: no end comes for
    it, so the handle must hear it paused, not stay RUNNING for good (the
    flaky test_pause_and_resume: ~1 run in 12, the pause landed in the
    ~3 ms between the early hand-off and the due time)."""
    engine, fake = make(prefetch=2, early_ns=3 * MS)
    add(engine, 1, 10 * MS, Schedule.fixed_rate(50 * MS))
    handle, told, applier = _heard()
    engine.tick(7 * MS)
    _feed(engine, applier)
    assert handle.state is TaskState.RUNNING  # told started (given early)
    assert engine.pause(1, 8 * MS) is True
    _feed(engine, applier)
    assert fake.log[-1] == ("revoke", fake.workers[0].ident, 1, 1)
    assert handle.state is TaskState.PAUSED and handle.next_run is None
    assert (told[-1]["event"], told[-1]["reason"]) == ("run_skipped", "paused")


def test_a_cancel_that_takes_back_a_run_given_early_says_no_run_is_left() -> None:
    engine, _ = make(prefetch=2, early_ns=3 * MS)
    add(engine, 1, 10 * MS, Schedule.fixed_rate(50 * MS))
    handle, told, applier = _heard()
    engine.tick(7 * MS)
    _feed(engine, applier)
    assert engine.cancel(1, False, 8 * MS) is True
    _feed(engine, applier)
    assert handle.state is TaskState.CANCELLED
    assert told[-1] == {"event": "task_cancelled", "task_id": 1, "name": "t1", "running": False}


def test_a_handle_told_twice_that_its_task_is_cancelled_ends_once(caplog: pytest.LogCaptureFixture) -> None:
    """A task cancelled while its run was in flight can be cancelled again
    before the run ends (here and by another scheduler, by a shutdown):
    the second event found the handle cancelled, and the listener logged a
    traceback (the fault campaign, seed 2609: "Future in unexpected state")."""
    handle, _, applier = _heard()
    with caplog.at_level(logging.ERROR, logger="procsched"):
        for _ in range(2):
            applier.apply_guarded(m.TaskCancelled.wire(1, True))
    assert handle.cancelled() and not caplog.records
