"""TaskHandle (a Future per task) and RunInfo (the record of one run).

A handle is written by exactly one thread, its scheduler's event thread (the
calling thread for InlineScheduler, the listener thread otherwise), through
the ``_on_*`` methods below; users only read it. The Future part never enters
the Future "RUNNING" state, so that ``Future.cancel`` semantics stay ours:
``cancel()`` asks the scheduler, and the scheduler resolves the handle.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NamedTuple, Protocol

from ._core import TaskState
from ._core._units import NS, wall_datetime

RunOutcome = Literal["ok", "error", "crashed", "timeout", "cancelled", "skipped"]
#: Skipped slots kept per handle (``TaskHandle.slots``).
SLOTS_KEPT = 100

#: How many ``RunInfo`` a ``TaskHandle`` keeps in ``runs`` by default (the
#: newest); ``Scheduler(handle_runs=)`` and ``InlineScheduler(handle_runs=)``
#: change it. A task's every run is counted in ``run_count``.
HANDLE_RUNS = 1000


def handle_runs(value: object) -> int:
    """``handle_runs=``, checked: an int >= 1."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"handle_runs must be an int >= 1, not {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"handle_runs must be an int >= 1, not {value!r}")
    return value


#: The longest traceback text a ``RunError`` keeps (its tail: the raise is last).
TRACEBACK_CHARS = 16_384


@dataclass(frozen=True, slots=True)
class RunError:
    """Why a run did not end "ok": its exception's class name and message,
    and the traceback text where one exists (the worker's, for a run that
    raised; None for a crash or a timeout, which the scheduler saw from
    outside). ``str()`` is ``"ValueError: no data"``."""

    type: str
    message: str
    traceback: str | None = None

    def __str__(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type

    @classmethod
    def of(cls, exc: BaseException, traceback: str | None = None) -> RunError:
        """The RunError of ``exc`` (``traceback``: its text, kept to the last
        ``TRACEBACK_CHARS``); never raises (an exception's ``__str__`` may)."""
        try:
            message = str(exc)
        except BaseException:  # noqa: BLE001
            message = "<str() of this exception raised>"
        if traceback is not None and len(traceback) > TRACEBACK_CHARS:
            traceback = "...\n" + traceback[-TRACEBACK_CHARS:]
        return cls(type(exc).__name__, message, traceback or None)


def stored_error(outcome: str | None, type_: str | None, message: str | None, traceback: str | None) -> RunError | None:
    """The ``RunError`` of a stored run's outcome and error columns (None:
    an "ok" or "cancelled" run, or one stored without its error)."""
    if outcome not in ("error", "crashed", "timeout") or (type_ is None and message is None):
        return None
    return RunError(type_ or "Error", message or "", traceback)


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run (one attempt of a run) of a task. Times are seconds on the
    scheduler's clock; ``scheduled_at`` is ``scheduled_for`` on the wall
    clock (an aware UTC datetime); ``attempt`` counts tries of this run
    (see ``Retry``), from 1.

    Inside a running task (``current_run()``), ``finished_at`` and
    ``outcome`` are ``None``.

    A skipped slot (``TaskHandle.slots()``, the ``run_skipped`` event) is a
    RunInfo with ``outcome="skipped"``, ``run=None``, no start, finish or
    worker, and ``reason`` saying why: "overlap", "misfire", "late",
    "paused" or "down".
    """

    task_id: int
    run: int | None
    scheduled_for: float
    started_at: float | None
    finished_at: float | None
    worker: int | str | None
    outcome: RunOutcome | None
    attempt: int = 1
    scheduled_at: datetime | None = None
    #: The run's captured stdout and stderr (the last 64 KiB), with
    #: ``Scheduler(capture_output=True)``; None otherwise.
    output: str | None = None
    #: Why it ran: "schedule", "manual" (``run_now``) or "backfill".
    cause: str = "schedule"
    #: None for an ordinary run, "replaced" for a run ended by ``overlap="replace"``;
    #: a skipped slot's reason.
    reason: str | None = None
    #: Why the run did not end "ok" (outcome "error", "crashed", "timeout"):
    #: a ``RunError``; None for an "ok" or "cancelled" run, or where unknown.
    error: RunError | None = None


def skipped_slots(
    task_id: int, scheduled_ns: int, wall_ns: int, reason: str, period_ns: int, slots: int
) -> list[RunInfo]:
    """The ``RunInfo`` of each of ``slots`` slots ``period_ns`` apart from the
    first (a ``RunSkipped`` event, a core ``SkipRecord``)."""
    return [skipped_slot(task_id, scheduled_ns + k * period_ns, wall_ns + k * period_ns, reason) for k in range(slots)]


def skipped_slot(task_id: int, scheduled_ns: int, wall_ns: int, reason: str) -> RunInfo:
    """The ``RunInfo`` of a slot that did not run."""
    return RunInfo(
        task_id,
        None,
        scheduled_ns / NS,
        None,
        None,
        None,
        "skipped",
        1,
        wall_datetime(wall_ns),
        None,
        "schedule",
        reason,
    )


class RunRecord(NamedTuple):
    """A finished run as the event thread heard it, in the runner's ns: made
    a ``RunInfo`` only when ``TaskHandle.runs`` is read (its floats and its
    aware datetime cost ~2.5 µs a run; most handles' runs are never read)."""

    task_id: int
    run: int
    scheduled_ns: int
    started_ns: int
    finished_ns: int
    worker: int | str
    outcome: RunOutcome
    attempt: int
    scheduled_wall_ns: int
    output: str | None
    cause: str
    reason: str | None
    error: RunError | None

    def info(self) -> RunInfo:
        return RunInfo(
            self.task_id,
            self.run,
            self.scheduled_ns / NS,
            self.started_ns / NS,
            self.finished_ns / NS,
            self.worker,
            self.outcome,
            self.attempt,
            wall_datetime(self.scheduled_wall_ns),
            self.output,
            self.cause,
            self.reason,
            self.error,
        )


def run_in_progress(
    task_id: int,
    run: int,
    scheduled_ns: int,
    started_ns: int,
    worker: int | str,
    attempt: int,
    wall_ns: int,
    cause: str = "schedule",
) -> RunInfo:
    """The ``RunInfo`` of a run that has started (``current_run()``), from
    the runner's times in ns (``wall_ns``: its slot on the wall clock)."""
    scheduled_at = wall_datetime(wall_ns)
    return RunInfo(
        task_id, run, scheduled_ns / NS, started_ns / NS, None, worker, None, attempt, scheduled_at, None, cause
    )


_PENDING = concurrent.futures._base.PENDING
_FINISHED = concurrent.futures._base.FINISHED
_CANCELLED_AND_NOTIFIED = concurrent.futures._base.CANCELLED_AND_NOTIFIED
_CONDITION_LOCK = threading.Lock()
#: Guards every handle's run list: the event thread appends and trims it, a
#: reader makes its records RunInfo in place (``TaskHandle.runs``).
_RUNS_LOCK = threading.Lock()
#: Future's instance fields are the ones TaskHandle sets itself (checked, so a
#: Python whose Future differs gets its plain __init__).
_LAZY_CONDITION = sorted(vars(concurrent.futures.Future())) == [
    "_condition",
    "_done_callbacks",
    "_exception",
    "_result",
    "_state",
    "_waiters",
]
#: The Future fields a handle makes when first used (``TaskHandle.__getattr__``).
_LAZY_FIELDS: dict[str, Callable[[], Any]] = {
    "_condition": threading.Condition,
    "_waiters": list,
    "_done_callbacks": list,
}


class Owner(Protocol):
    """What a handle asks of its scheduler (every scheduler is one)."""

    def pause(self, task_id: int) -> bool: ...

    def resume(self, task_id: int) -> bool: ...

    def cancel(self, task_id: int, *, interrupt: bool = False) -> bool: ...

    def run_now(self, key_or_id: str | int) -> bool: ...

    def backfill(
        self, key_or_id: str | int, start: datetime, end: datetime, *, dry_run: bool = False
    ) -> list[datetime]: ...

    #: How many ``RunInfo`` a handle keeps in ``runs`` (the newest).
    handle_runs: int


class TaskHandle(concurrent.futures.Future):  # type: ignore[type-arg]
    """A scheduled task: a ``concurrent.futures.Future`` with task details.

    ``result()`` returns a one-shot task's return value, or re-raises its
    exception; a periodic task's ``result()`` returns only when the task
    ends (``CancelledError`` if it was cancelled).

    ``runs`` lists the ``RunInfo`` of the newest finished runs (attempts
    included), newest last: at most the scheduler's ``handle_runs``
    (default 1000), so a long-lived task's handle does not grow;
    ``run_count`` counts every one of them.
    """

    def __init__(
        self,
        owner: Owner,
        task_id: int,
        name: str | None,
        next_run: float | None,
        key: str | None = None,
        next_wall: int | None = None,
    ) -> None:
        if _LAZY_CONDITION:  # Future.__init__ without its Condition and lists (see __getattr__)
            self._state, self._result, self._exception = _PENDING, None, None
        else:
            super().__init__()
        self._owner = owner
        self.id = task_id
        self.name = name
        self.key = key
        self._task_state = TaskState.PENDING
        self._runs: list[RunInfo | RunRecord] = []  # the newest owner.handle_runs of them (see runs)
        self.run_count = 0  # every run the task had (runs keeps the newest)
        self._slots: deque[RunInfo] | None = None  # runs and skipped slots, once a slot was skipped
        self.next_run = next_run
        self._next_wall = next_wall  # ns since the epoch

    def __getattr__(self, name: str) -> Any:
        """A Future's ``_condition`` (an RLock in a Condition: 60% of making
        a handle, and a restart makes 100,000 handles) and its lists of
        waiters and callbacks (a third of what is left, and as much again
        in the collection after a restart) are made when first used - by
        whichever thread comes first, once, under a module lock."""
        make = _LAZY_FIELDS.get(name)
        if make is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        with _CONDITION_LOCK:
            value = self.__dict__.get(name)
            if value is None:
                value = self.__dict__[name] = make()
        return value

    # Reading a finished handle needs no Condition: its state never changes
    # again, and ``_settle_unwatched`` sets the result before the state.

    def done(self) -> bool:
        if self._state is _FINISHED:
            return True
        return super().done()

    def result(self, timeout: float | None = None) -> Any:
        if self._state is _FINISHED and self._exception is None:
            return self._result
        return super().result(timeout)

    @property
    def state(self) -> TaskState:
        return self._task_state

    @property
    def runs(self) -> list[RunInfo]:
        """The ``RunInfo`` of the newest finished runs, newest last (a copy)."""
        with _RUNS_LOCK:
            runs = self._runs
            for i, run in enumerate(runs):  # (each record once: the copy walks them all anyway)
                if type(run) is RunRecord:
                    runs[i] = run.info()
            return runs.copy()  # type: ignore[return-value]  # (RunInfo only now)

    @property
    def next_run_at(self) -> datetime | None:
        """The next run on the wall clock (an aware UTC datetime), or None."""
        if self._next_wall is None or self.next_run is None:
            return None
        return wall_datetime(self._next_wall)

    def pause(self) -> bool:
        """Pause the task: it runs no slot until resumed (a running periodic
        task pauses when its current run ends). True if it is (or will be)
        paused; False for a finished task or a running one-shot task."""
        return self._owner.pause(self.id)

    def resume(self) -> bool:
        """Resume a paused task at its next slot from now; True if it was paused."""
        return self._owner.resume(self.id)

    def cancel(self, interrupt: bool = False) -> bool:
        """Cancel the task (see ``Scheduler.cancel``); True if it was cancelled."""
        return self._owner.cancel(self.id, interrupt=interrupt)

    def running(self) -> bool:
        return self._task_state is TaskState.RUNNING

    def run_now(self) -> bool:
        """One extra run now, outside the schedule (the next slot does not
        move; a paused task stays paused), subject to ``max_concurrent`` /
        ``overlap``: False if "skip" finds it full (or the task is not a
        live periodic task). Its ``RunInfo.cause`` is "manual"."""
        return self._owner.run_now(self.id)

    def backfill(self, start: datetime, end: datetime, *, dry_run: bool = False) -> list[datetime]:
        """Run the task's own slots (fixed-rate grid points or cron fire
        times) with ``start <= slot < end`` and ``slot <= now``, one after
        another in slot order (each run's ``scheduled_at`` is its slot, its
        ``cause`` "backfill"), subject to ``max_concurrent``/``overlap``.
        Returns the slots (aware UTC datetimes); ``dry_run=True`` only
        returns them. ValueError: a one-shot or fixed-delay task, naive
        datetimes, ``start >= end``, more than 10,000 slots."""
        return self._owner.backfill(self.id, start, end, dry_run=dry_run)

    def slots(self, limit: int = 100) -> list[RunInfo]:
        """The task's last ``limit`` slots, newest (slot) last: its runs and
        its skipped slots (``outcome="skipped"``, with a ``reason``)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(f"limit must be an int >= 0, not {limit!r}")
        if limit == 0:
            return []
        if self._slots is None:
            return self.runs[-limit:]
        # In slot order, as history(key, skipped=True): a slot skipped while
        # a run was running is told at once, before that run's end.
        return sorted(self._slots, key=_slot_time)[-limit:]

    def __repr__(self) -> str:
        name = f" name={self.name!r}" if self.name else ""
        return f"<TaskHandle id={self.id}{name} state={self._task_state.name} runs={self.run_count}>"

    # -- written only by the owner's event thread ------------------------

    def _on_started(self) -> None:
        if self._task_state is TaskState.PENDING:
            self._task_state = TaskState.RUNNING

    def _on_run(
        self, info: RunInfo | RunRecord, state: TaskState, next_run: float | None, next_wall: int | None = None
    ) -> None:
        """A run finished; the task is now in ``state``."""
        if self._slots is not None:
            if type(info) is RunRecord:
                info = info.info()
            self._slots.append(info)  # type: ignore[arg-type]  # (a RunInfo now)
        with _RUNS_LOCK:
            runs = self._runs
            runs.append(info)
            excess = len(runs) - self._owner.handle_runs
            if excess > 0:
                del runs[:excess]
        self.run_count += 1
        if not self._task_state.terminal:
            self._task_state = state
            self.next_run = next_run
            self._next_wall = next_wall

    def _on_skipped(self, info: RunInfo) -> None:
        """A slot did not run (``info.outcome == "skipped"``)."""
        if self._slots is None:
            self._slots = deque(self.runs[-SLOTS_KEPT:], maxlen=SLOTS_KEPT)
        self._slots.append(info)

    def _on_paused(self) -> None:
        """The scheduler says the task is paused: no run of it is running
        (a run told started that a pause took back before it began, given
        ahead to a busy worker, never ends: it was skipped instead)."""
        if not self._task_state.terminal:
            self._task_state = TaskState.PAUSED
            self.next_run = None

    def _on_resumed(self, next_run: float | None, next_wall: int | None) -> None:
        if self._task_state is TaskState.PAUSED:
            self._task_state = TaskState.PENDING
            self.next_run = next_run
            self._next_wall = next_wall

    def _on_result(self, state: TaskState, value: Any = None, exc: BaseException | None = None) -> None:
        """The task ended in ``state`` (DONE/FAILED) with a value or exception."""
        self._task_state = state
        self.next_run = None
        if self._settle_unwatched(_FINISHED, value, exc):
            return
        if exc is not None:
            self.set_exception(exc)
        else:
            self.set_result(value)

    def _on_cancelled(self) -> None:
        if self._state is not _PENDING:
            return  # (told again: its task cancelled a second time while its last run was in flight)
        self._task_state = TaskState.CANCELLED
        self.next_run = None
        if not self._settle_unwatched(_CANCELLED_AND_NOTIFIED):
            concurrent.futures.Future.cancel(self)
            self.set_running_or_notify_cancel()  # wakes wait() / as_completed()

    def _settle_unwatched(self, state: str, value: Any = None, exc: BaseException | None = None) -> bool:
        """Settle the pending Future in ``state`` (finished, or cancelled) if
        nobody waits on it or has a callback on it - either would have made
        its Condition, under this lock - without making its Condition and
        lists: the usual case for a handle read only after it ended, and for
        every pending handle a shutdown cancels. False: the Future's own
        methods settle it (and wake who waits). Only the event thread
        settles a handle, so a handle seen pending here is pending."""
        if _LAZY_CONDITION:
            with _CONDITION_LOCK:
                if self._state is _PENDING and "_condition" not in self.__dict__:
                    self._result, self._exception = value, exc  # (before the state: see result())
                    self._state = state
                    return True
        return False


def _slot_time(info: RunInfo) -> float:
    return info.scheduled_for
