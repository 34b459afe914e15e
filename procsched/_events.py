"""Scheduler events: their names, their fields, and delivery to listeners.

``Scheduler.add_listener(callback, events=None)`` (and the same method on
``InlineScheduler``) calls ``callback(event)`` with one ``dict`` per event::

    event            when                                   fields beyond "event", "task_id", "name"
    ---------------  -------------------------------------  -------------------------------------------
    run_started      a run was handed to a worker           run, worker, scheduled_for
    run_finished     the run returned                       run, worker, outcome, scheduled_for,
    run_failed       the run raised                           started_at, finished_at, duration,
    run_crashed      its worker process died mid-run          lateness, state, next_run, error,
                                                              traceback, output, attempt,
                                                              scheduled_at
    run_timeout      it overran its timeout (worker killed)
    run_cancelled    it was stopped by cancel(interrupt=True)
    run_missed       fixed-rate slots were dropped by the   run, missed, next_run
                     misfire policy ("skip"/"coalesce")
    run_skipped      a slot did not run                     scheduled_for, scheduled_at, reason
                     (reason "overlap", "misfire", "late",
                     "paused", "down")
    task_cancelled   the task was cancelled                 running (its last run is still in flight)
    worker_started   a worker process (or thread) started   worker, slot             (task_id/name: None)
    worker_exited    a worker ended                         worker, slot, exitcode, signal, crashed

``name`` is the task's name (a job's name). Times are seconds on the
scheduler's clock, as in ``RunInfo``; ``duration`` is finished - started and
``lateness`` is started - scheduled. ``state`` is the task's state after the
run (a ``TaskState`` value such as ``"pending"`` or ``"done"``) and ``error``
is the run's ``RunInfo.error`` as ``"ExcType: message"`` when the run did not
end "ok" (the last run of a task that ends at its limit too), else None;
``traceback`` is then its formatted traceback (the worker's, for the
processes runner; the error line alone for a crash or a timeout). ``output`` is the run's captured stdout
and stderr (the last 64 KiB, a crash's faulthandler trace included) with
``Scheduler(capture_output=True)``, else None. ``attempt`` counts tries of
the run (see ``Retry``) and ``scheduled_at`` is ``scheduled_for`` on the wall
clock, as an ISO 8601 UTC string (``"2026-03-08T07:00:00+00:00"``).
A run's events also say its ``cause`` ("schedule", "manual", "backfill")
and ``reason`` (None, or "replaced" for a run ended by ``overlap="replace"``). Every
value is a plain str, int, float, bool or None, so an event can go straight
to ``json.dumps``.

Order: for one task, ``run_started`` comes before that run's end event, which
comes before its ``run_missed``; runs of one task overlap only with
``max_concurrent`` > 1, ``overlap="replace"`` or ``run_now``/``backfill``. A cancel
of a running task gives ``task_cancelled`` before the end of its last run.

Delivery: callbacks run in the user process on the scheduler's event thread
(the listener thread of ``Scheduler``, the calling thread of
``InlineScheduler``), never in the dispatcher, in the order they were
added. They should be quick: a slow callback delays the resolution of task
handles, not the schedule. A callback that raises is logged (logger
``"procsched"``) and the next one is called; it never breaks the scheduler.
"""

from __future__ import annotations

import logging
import signal
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from ._handle import RunInfo

logger = logging.getLogger("procsched")

RUN_STARTED = "run_started"
RUN_FINISHED = "run_finished"
RUN_FAILED = "run_failed"
RUN_CRASHED = "run_crashed"
RUN_TIMEOUT = "run_timeout"
RUN_CANCELLED = "run_cancelled"
RUN_MISSED = "run_missed"
RUN_SKIPPED = "run_skipped"
TASK_CANCELLED = "task_cancelled"
WORKER_STARTED = "worker_started"
WORKER_EXITED = "worker_exited"

#: Every event name, in the order of the table above.
EVENTS: tuple[str, ...] = (
    RUN_STARTED,
    RUN_FINISHED,
    RUN_FAILED,
    RUN_CRASHED,
    RUN_TIMEOUT,
    RUN_CANCELLED,
    RUN_MISSED,
    RUN_SKIPPED,
    TASK_CANCELLED,
    WORKER_STARTED,
    WORKER_EXITED,
)

#: The event that ends a run, by the run's outcome.
RUN_END: dict[str, str] = {
    "ok": RUN_FINISHED,
    "error": RUN_FAILED,
    "crashed": RUN_CRASHED,
    "timeout": RUN_TIMEOUT,
    "cancelled": RUN_CANCELLED,
}

Listener = Callable[[dict[str, Any]], object]


def check_events(events: object) -> frozenset[str] | None:
    """``events`` as given to ``add_listener`` -> the set of names (None: all)."""
    if events is None:
        return None
    if isinstance(events, str):
        events = (events,)
    if not isinstance(events, Iterable):
        raise TypeError(f"events must be None, an event name or an iterable of names, not {events!r}")
    names = frozenset(events)
    for name in sorted(names, key=repr):
        if name not in EVENTS:
            raise ValueError(f"unknown event {name!r}; the events are: {', '.join(EVENTS)}")
    return names


class Listeners:
    """The listeners of one scheduler.

    ``add`` and ``remove`` may be called from any thread; ``notify`` from
    the event thread only. The list is copied on write, so a notification
    in progress is never disturbed by a change.
    """

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: tuple[tuple[Listener, frozenset[str] | None], ...] = ()

    def __bool__(self) -> bool:
        return bool(self._entries)

    def add(self, callback: Listener, events: object = None) -> None:
        if not callable(callback):
            raise TypeError(f"callback must be callable, not {type(callback).__name__} {callback!r}")
        self._entries = (*self._entries, (callback, check_events(events)))

    def remove(self, callback: Listener) -> bool:
        """Remove every registration of ``callback``; True if there was one."""
        kept = tuple(entry for entry in self._entries if entry[0] != callback)
        removed = len(kept) != len(self._entries)
        self._entries = kept
        return removed

    def wants(self, kind: str) -> bool:
        return any(kinds is None or kind in kinds for _, kinds in self._entries)

    def notify(self, kind: str, fields: dict[str, Any]) -> None:
        event: dict[str, Any] | None = None
        for callback, kinds in self._entries:
            if kinds is None or kind in kinds:
                if event is None:
                    event = {"event": kind, **fields}
                try:
                    # Each callback gets its own copy: one that edits its
                    # event cannot change what the next one sees.
                    callback(dict(event))
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:
                    logger.error(
                        "listener %r raised on a %s event: %s", callback, kind, describe(exc), exc_info=_loggable(exc)
                    )


def run_started(
    task_id: int, name: str | None, run: int, worker: Any, scheduled_for: float | None, cause: str = "schedule"
) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "name": name,
        "run": run,
        "worker": worker,
        "scheduled_for": scheduled_for,
        "cause": cause,
    }


def run_skipped(info: RunInfo, name: str | None) -> dict[str, Any]:
    """A ``run_skipped`` event's fields, from the skipped slot's RunInfo."""
    return {
        "task_id": info.task_id,
        "name": name,
        "scheduled_for": info.scheduled_for,
        "scheduled_at": None if info.scheduled_at is None else info.scheduled_at.isoformat(),
        "reason": info.reason,
    }


def run_ended(info: RunInfo, name: str | None, state: str, next_run: float | None) -> dict[str, Any]:
    started = info.started_at if info.started_at is not None else info.scheduled_for
    finished = info.finished_at if info.finished_at is not None else started
    error = None if info.outcome == "ok" else info.error
    return {
        "task_id": info.task_id,
        "name": name,
        "run": info.run,
        "worker": info.worker,
        "outcome": info.outcome,
        "scheduled_for": info.scheduled_for,
        "started_at": started,
        "finished_at": finished,
        "duration": max(0.0, finished - started),
        "lateness": max(0.0, started - info.scheduled_for),
        "state": state,
        "next_run": next_run,
        "error": None if error is None else str(error),
        "traceback": None if error is None else error.traceback or f"{error}\n",
        "output": info.output,
        "attempt": info.attempt,
        "scheduled_at": None if info.scheduled_at is None else info.scheduled_at.isoformat(),
        "cause": info.cause,
        "reason": info.reason,
    }


def describe(exc: BaseException) -> str:
    """``"ExcType: message"``; never raises (an exception's ``__str__`` may)."""
    try:
        text = str(exc)
    except BaseException:  # noqa: BLE001
        text = "<str() of this exception raised>"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def format_traceback(exc: BaseException) -> str:
    """The task's own traceback: the worker's (a ``RemoteTraceback`` cause), else the local one."""
    cause = exc.__cause__
    try:
        if cause is not None and type(cause).__name__ == "RemoteTraceback":
            return str(cause)
        return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except BaseException:  # noqa: BLE001 - a hostile exception must not break the listener
        return describe(exc)


def _loggable(exc: BaseException) -> BaseException | bool:
    """``exc_info`` for a log record: False if formatting ``exc`` would raise."""
    try:
        str(exc)
    except BaseException:  # noqa: BLE001
        return False
    return exc


def signal_name(exitcode: int | None) -> str | None:
    """The name of the signal that ended a process (exit code -N), else None."""
    if exitcode is None or exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"
