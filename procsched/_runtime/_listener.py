"""The listener thread: the dispatcher's event stream applied to the handles.

    backend.next_batch() ──▶ listen() ──▶ EventApplier.apply(event), one event at a time
      (processes: the event pipe;          ├─ RunStarted / RunEnded / TaskCancelled / TaskChanged ─▶ TaskHandle._on_*
       threads, Ray: a queue)              ├─ TaskAdded (from inside a task) ─▶ a new handle
                                           ├─ Answer ─▶ the waiting request's future
                                           ├─ Log ─▶ the "procsched" logger;  WorkerChanged ─▶ backend
                                           ├─ AdoptKey ─▶ the facade adopts another scheduler's task
                                           └─ listeners (``_events.py``)

Only this thread writes handles (see the map in ``_runtime/__init__.py``).
The thread holds its ``Scheduler`` weakly, and an ``EventApplier`` only
through it, so a Scheduler dropped without ``shutdown()`` is collected.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from .._core import TaskState
from .._core._units import NS
from .._errors import SchedulerError
from .._events import (
    RUN_END,
    RUN_MISSED,
    RUN_SKIPPED,
    RUN_STARTED,
    TASK_CANCELLED,
    WORKER_EXITED,
    WORKER_STARTED,
    Listeners,
    describe,
    run_ended,
    run_skipped,
    run_started,
    signal_name,
)
from .._failure_log import FailureLog
from .._handle import RunError, RunInfo, RunRecord, TaskHandle, skipped_slots
from . import _messages as m
from ._wire import unpack

_STATES = {state.value: state for state in TaskState}  # (a dict lookup: an Enum call costs more, per run)
logger = logging.getLogger("procsched")


class Listened(Protocol):
    """What the listener thread asks of its Scheduler (the facade)."""

    _events: EventApplier

    def _stream_ended(self, closed: bool) -> None:
        """The stream is over: closed by the dispatcher, or broken."""


class EventApplier:
    """Applies events to the handles of one Scheduler. Every collaborator
    comes in here: the handles by id and by key (shared with the caller
    threads, which add to them), the requests waiting for an answer, the
    listeners, the backend (how results unpickle, workers' lives), and
    ``adopt_key`` (the facade's adoption of another scheduler's task)."""

    def __init__(
        self,
        owner: Any,
        handles: dict[int, TaskHandle],
        keys: dict[str, TaskHandle],
        requests: dict[int, concurrent.futures.Future[Any]],
        listeners: Listeners,
        backend: Any,
        adopt_key: Callable[[str], None],
    ) -> None:
        self.owner = owner  # the handles' scheduler (a handle added from inside a task needs it)
        self.handles = handles
        self.keys = keys
        self.requests = requests
        self.listeners = listeners
        self.backend = backend
        self.adopt_key = adopt_key
        self.failures = FailureLog()

    def apply_guarded(self, event: m.Message) -> None:
        """Apply one event in isolation: whatever goes wrong with it (a result
        that cannot be unpacked, an exception whose ``str()`` raises, a
        listener raising SystemExit) costs that event's task alone, never the
        listener thread and so never the other tasks."""
        try:
            self.apply(event)
        except BaseException as exc:
            logger.error("could not handle a %s event: %s", event[0], describe(exc), exc_info=_safe_exc(exc))
            tag = event[0]
            if tag == m.RUN_ENDED and _STATES[(ended := m.view(m.RunEnded, event)).state].terminal:
                handle = self.handles.pop(ended.task_id, None)
                if handle is not None and not handle.done():
                    handle._on_result(
                        TaskState.FAILED,
                        exc=SchedulerError(
                            f"task {ended.task_id} ended, but its outcome could not be handled here: {describe(exc)}"
                        ),
                    )
            elif tag == m.ANSWER:
                future = self.requests.pop(m.view(m.Answer, event).request, None)
                if future is not None and not future.done():
                    future.set_exception(SchedulerError(f"the answer could not be handled: {describe(exc)}"))

    def apply(self, event: m.Message) -> None:
        tag = event[0]
        if tag == m.RUN_ENDED:
            self._run_ended(m.view(m.RunEnded, event))
        elif tag == m.RUN_STARTED:
            started = m.view(m.RunStarted, event)
            handle = self.handles.get(started.task_id)
            if handle is not None:
                handle._on_started()
            if self.listeners:
                self._notify(
                    RUN_STARTED,
                    **run_started(
                        started.task_id,
                        None if handle is None else handle.name,
                        started.run,
                        started.worker,
                        None if handle is None else handle.next_run,
                        started.cause,
                    ),
                )
        elif tag == m.RUN_SKIPPED:
            self._run_skipped(m.view(m.RunSkipped, event))
        elif tag == m.TASK_CANCELLED:
            cancelled = m.view(m.TaskCancelled, event)
            task_id, was_running = cancelled.task_id, cancelled.running
            handle = self.handles.get(task_id)
            if handle is not None:
                handle._on_cancelled()
                if not was_running:  # else its last run's event comes later
                    del self.handles[task_id]
                    self.failures.ended(task_id)
            name = None if handle is None else handle.name
            self._notify(TASK_CANCELLED, task_id=task_id, name=name, running=was_running)
        elif tag == m.ANSWER:
            answer = m.view(m.Answer, event)
            future = self.requests.pop(answer.request, None)
            if future is not None:
                future.set_result(answer.value)
        elif tag == m.TASK_ADDED:
            added = m.view(m.TaskAdded, event)
            handle = self.handles.setdefault(
                added.task_id,
                TaskHandle(self.owner, added.task_id, added.name, added.due_ns / NS, added.key, added.next_wall_ns),
            )
            key = added.key
            if key is not None:  # added from inside a task: the key is taken as it comes
                holder = self.keys.get(key)
                if holder is not None and not holder.done() and holder is not handle:
                    logger.warning(
                        "task %d took key %r from live task %d (added from inside a task)",
                        added.task_id,
                        key,
                        holder.id,
                    )
                self.keys[key] = handle
        elif tag == m.TASK_CHANGED:
            changed = m.view(m.TaskChanged, event)
            handle = self.handles.get(changed.task_id)
            if handle is not None:
                if changed.state == TaskState.PAUSED.value:
                    handle._on_paused()
                else:
                    due = changed.next_due_ns
                    handle._on_resumed(None if due is None else due / NS, changed.next_wall_ns)
        elif tag == m.WORKER_CHANGED:
            worker = m.view(m.WorkerChanged, event)
            self.backend.worker_event(worker.what, worker.worker)
            if worker.what == "started":
                self._notify(WORKER_STARTED, task_id=None, name=None, worker=worker.worker, slot=worker.slot)
            else:  # "exited": retired or killed by us; "crashed": died on its own
                self._notify(
                    WORKER_EXITED,
                    task_id=None,
                    name=None,
                    worker=worker.worker,
                    slot=worker.slot,
                    exitcode=worker.exitcode,
                    signal=signal_name(worker.exitcode),
                    crashed=worker.what == "crashed",
                )
        elif tag == m.LOG:
            log = m.view(m.Log, event)
            logger.log(log.level, log.message)
        elif tag == m.ADOPT_KEY:
            self.adopt_key(m.view(m.AdoptKey, event).key)

    def _run_ended(self, ev: m.RunEnded) -> None:
        state = _STATES[ev.state]
        outcome, error = ev.outcome, ev.error
        handle = self.handles.get(ev.task_id)
        value: Any = None
        exc: BaseException | None = None
        if ev.ended and handle is not None:
            value, exc = unpack(ev.blob_kind, ev.blob, self.backend.pickled)
            if exc is not None and outcome == "ok":
                # The value came back but cannot be unpickled here (a class
                # only the worker can import): the task failed, not "ok".
                outcome, state, error = "error", TaskState.FAILED, RunError.of(exc)
        record = RunRecord(
            ev.task_id,
            ev.run,
            ev.scheduled_ns,
            ev.started_ns,
            ev.finished_ns,
            ev.worker,
            outcome,  # type: ignore[arg-type]  # (an outcome's name: a RunOutcome)
            ev.attempt,
            ev.scheduled_wall_ns,
            ev.output,
            ev.cause,
            ev.reason,
            error,
        )
        # The RunInfo is made here only for whom it is told to now; else when the handle's runs are read.
        told = self.listeners or outcome == "error" or ev.task_id in self.failures
        info = record.info() if told else None
        next_due = ev.next_due_ns
        if handle is not None:
            handle._on_run(
                record if info is None else info, state, None if next_due is None else next_due / NS, ev.next_wall_ns
            )
            if state.terminal:
                del self.handles[ev.task_id]
                if ev.ended:
                    if state is TaskState.DONE:
                        handle._on_result(state, value)
                    else:
                        handle._on_result(state, exc=exc or SchedulerError(f"run ended: {outcome}"))
        if info is None:
            return
        self.failures.run_ended(info, None if handle is None else handle.name or handle.key, state)
        if self.listeners:
            self._notify_run_end(info, handle, state, next_due, ev.missed)

    def _run_skipped(self, ev: m.RunSkipped) -> None:
        """Slots did not run: each listed on the handle and told to the
        listeners; a task that ended there (its last slot) is resolved."""
        handle = self.handles.get(ev.task_id)
        infos = skipped_slots(ev.task_id, ev.scheduled_ns, ev.wall_ns, ev.reason, ev.period_ns, ev.slots)
        if handle is not None:
            for info in infos:
                handle._on_skipped(info)
            if ev.state is not None:
                del self.handles[ev.task_id]
                self.failures.ended(ev.task_id)
                if ev.state == TaskState.CANCELLED.value:
                    handle._on_cancelled()
                else:
                    handle._on_result(_STATES[ev.state], None)
        if self.listeners:
            name = None if handle is None else handle.name
            for info in infos:
                self._notify(RUN_SKIPPED, **run_skipped(info, name))
            if ev.state == TaskState.CANCELLED.value:
                self._notify(TASK_CANCELLED, task_id=ev.task_id, name=name, running=False)

    def _notify(self, kind: str, **fields: Any) -> None:
        """Deliver one event to the listeners (see ``_events.py``); never raises."""
        if self.listeners:
            self.listeners.notify(kind, fields)

    def _notify_run_end(
        self, info: RunInfo, handle: TaskHandle | None, state: TaskState, next_due: int | None, missed: int
    ) -> None:
        next_run = None if next_due is None else next_due / NS
        name = None if handle is None else handle.name
        self._notify(RUN_END[info.outcome], **run_ended(info, name, state.value, next_run))  # type: ignore[index]
        if missed:
            self._notify(RUN_MISSED, task_id=info.task_id, name=name, run=info.run, missed=missed, next_run=next_run)


def listen(ref: weakref.ReferenceType[Listened], backend: Any, done: threading.Event) -> None:
    """The listener thread: apply each event batch to the Scheduler, which it
    holds only while applying a batch, so a dropped Scheduler is collected.
    ``done`` is set when it has finished."""
    try:
        _listen_until_closed(ref, backend)
    finally:
        done.set()


def _listen_until_closed(ref: weakref.ReferenceType[Listened], backend: Any) -> None:
    closed = False
    try:
        while not closed:
            batch = backend.next_batch()
            scheduler = ref()
            if scheduler is None:  # dropped: nobody can see the events; drain to the end
                closed = any(event[0] == m.CLOSED for event in batch)
                continue
            apply = scheduler._events.apply_guarded
            for event in batch:
                if event[0] == m.CLOSED:
                    closed = True
                else:
                    apply(event)
            del scheduler, apply
    except EOFError:
        pass
    except BaseException:
        logger.exception("the listener failed")
    scheduler = ref()
    if scheduler is not None:
        scheduler._stream_ended(closed)
    else:
        backend.join()


def _safe_exc(exc: BaseException) -> BaseException | bool:
    """``exc_info`` for logging: the exception, unless formatting it raises."""
    try:
        str(exc)
        return exc
    except BaseException:  # noqa: BLE001
        return False
