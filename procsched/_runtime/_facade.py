"""Scheduler: the user-process facade over the processes, threads or Ray runtime.

    caller threads ── schedule() / cancel() / stats() ──▶ backend.send(command)
                                                           │  processes: pipe to the dispatcher process
                                                           │  threads, ray: queue to the dispatcher thread
    listener thread ◀── event batches ── backend.next_batch()
       └─▶ resolves TaskHandles, answers requests, logs, calls listeners

The facade owns the handles; only the listener thread writes them. Task ids
are numbered here, so ``schedule()`` never waits for the dispatcher; calls
that need an answer (``cancel``, ``stats``) send a request and wait for its
reply, which comes on the same ordered event stream as everything else, so
a cancel's effect on the handle is visible by the time ``cancel()`` returns.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import itertools
import logging
import os
import sys
import threading
import time
import weakref
from typing import Any, Callable

from .. import _validate as v
from .._api import SchedulingAPI
from .._clock import MonotonicClock
from .._core import TaskState
from .._errors import SchedulerBrokenError, SchedulerClosedError, SchedulerError
from .._events import (
    RUN_END, RUN_MISSED, RUN_STARTED, TASK_CANCELLED, WORKER_EXITED, WORKER_STARTED, Listeners, run_ended, run_started,
    signal_name,
)  # fmt: skip
from .._handle import RunInfo, TaskHandle
from ._engine import (
    BLOB_ERROR, BLOB_EXC, EV_ADDED, EV_CANCELLED, EV_CLOSED, EV_LOG, EV_REPLY, EV_RUN, EV_STARTED, EV_WORKER,
)  # fmt: skip
from ._wire import unpack

NS = 1_000_000_000
logger = logging.getLogger("procsched")
REQUEST_TIMEOUT = 60.0

_live: weakref.WeakSet[Scheduler] = weakref.WeakSet()


def _default_start_method() -> str:
    import multiprocessing

    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


class Scheduler(SchedulingAPI, concurrent.futures.Executor):
    """Runs scheduled work on a pool of worker processes (or threads).

    Args:
        workers: pool size; defaults to the CPU count.
        runner: ``"processes"`` (default: a dispatcher process and worker
            processes; a crash costs one run), ``"threads"`` (same API and
            semantics, in this process; no crash isolation, and a timed-out
            or interrupted run cannot be killed: it is abandoned, its result
            discarded, and a fresh thread takes its place) or ``"ray"``
            (every run a Ray task on the cluster ``ray.init()`` reaches;
            ``workers`` bounds the runs in flight, default the cluster's
            CPUs; the scheduling methods take ``ray_options=``).
        policy: ``"priority"``, ``"due"`` or ``"fifo"`` (see README).
        max_tasks_per_worker: replace a worker after this many runs.
        timeout: default per-run timeout in seconds (per-task ``timeout=`` wins).
        mp_context: multiprocessing start method (name or context) for the
            workers; default forkserver where available, else spawn.
        clock: only the real monotonic clock (``None``); use
            ``InlineScheduler`` with a ``ManualClock`` for virtual time.
        max_worker_memory: bytes; a worker whose RSS is above this after a
            run is replaced.
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        runner: str = "processes",
        policy: str = "priority",
        max_tasks_per_worker: int | None = None,
        timeout: float | None = None,
        mp_context: Any = None,
        clock: Any = None,
        max_worker_memory: int | None = None,
    ) -> None:
        if runner not in ("processes", "threads", "ray"):
            raise ValueError(f"runner must be 'processes', 'threads' or 'ray', not {runner!r}")
        if runner == "ray":
            _ray_unsupported(max_tasks_per_worker=max_tasks_per_worker, max_worker_memory=max_worker_memory)
            if workers is None:
                from ._ray import cluster_cpus

                workers = cluster_cpus()  # connects to Ray (SchedulerError if it cannot)
        workers = _positive_int("workers", (os.cpu_count() or 1) if workers is None else workers)
        config = {
            "workers": workers,
            "policy": v.policy(policy).value,
            "max_tasks_per_worker": None if max_tasks_per_worker is None
            else _positive_int("max_tasks_per_worker", max_tasks_per_worker),
            "max_worker_memory": None if max_worker_memory is None
            else _positive_int("max_worker_memory", max_worker_memory),
            "start_method": _start_method(mp_context),
            "sys_path": list(sys.path),
        }  # fmt: skip
        self._default_timeout = v.optional_timeout_ns(timeout)
        if clock is not None and not isinstance(clock, MonotonicClock):
            raise TypeError(
                f"clock must be None (the monotonic clock) for Scheduler, not {clock!r}; "
                "use InlineScheduler(clock=ManualClock()) for virtual time"
            )
        self.runner = runner
        self._ray_runner = runner == "ray"
        self.workers = workers
        self._handles: dict[int, TaskHandle] = {}
        self._requests: dict[int, concurrent.futures.Future[Any]] = {}
        self._ids = itertools.count(1)
        self._request_ids = itertools.count(1)
        self._lock = threading.Lock()  # orders commands against shutdown
        self._closed = False
        self._broken: str | None = None
        self._listeners = Listeners()
        if runner == "processes":
            from ._process_backend import ProcessBackend

            self._backend: Any = ProcessBackend(config)
        elif runner == "ray":
            from ._ray import RayBackend

            self._backend = RayBackend(config, self)
        else:
            from ._threads import ThreadBackend

            self._backend = ThreadBackend(config, self)
        self._listener = threading.Thread(target=self._listen, name="procsched-listener", daemon=True)
        self._listener.start()
        _live.add(self)

    def __repr__(self) -> str:
        state = "broken" if self._broken else "closed" if self._closed else "open"
        return f"<Scheduler runner={self.runner} workers={self.workers} {state} pending={self.pending()}>"

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown(wait=True)

    # -- SchedulingAPI -------------------------------------------------------

    def _check_open(self) -> None:
        if self._broken:
            raise SchedulerBrokenError(self._broken)
        if self._closed:
            raise SchedulerClosedError("this Scheduler was shut down; it accepts no new tasks")

    def _add(self, spec: v.TaskSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> TaskHandle:
        payload = self._backend.pack(fn, args, kwargs)
        if spec.ray_options is not None:  # validated: only a Ray scheduler gets here with them
            payload = self._backend.with_options(payload, spec.ray_options)
        timeout = spec.timeout_ns if spec.timeout_ns is not None else self._default_timeout
        with self._lock:
            self._check_open()
            task_id = next(self._ids)
            due = time.monotonic_ns() + spec.delay_ns
            handle = TaskHandle(self, task_id, spec.name, due / NS)
            self._handles[task_id] = handle  # before the command: its events may come at once
            self._backend.send((
                "add", task_id, due, spec.priority, spec.kind.value, spec.period_ns, spec.misfire.value,
                spec.stop_on_error, timeout, spec.name, payload,
            ))  # fmt: skip
        return handle

    def cancel(self, task_id: int, *, interrupt: bool = False) -> bool:
        v.flag("interrupt", interrupt)
        if isinstance(task_id, bool) or not isinstance(task_id, int):
            raise TypeError(f"task_id must be an int, not {type(task_id).__name__} {task_id!r}")
        if task_id not in self._handles:
            return False  # finished, cancelled, or never ours: nothing to ask
        try:
            return bool(self._request("cancel", task_id, interrupt))
        except SchedulerError:
            return False  # the dispatcher is gone: the handle has been failed

    # -- the rest of the public API --------------------------------------------

    def pending(self) -> int:
        """Tasks not yet finished or cancelled."""
        return len(self._handles)

    def handle(self, task_id: int) -> TaskHandle | None:
        """The handle of an unfinished task, including tasks scheduled from
        inside a running task; None once it has finished."""
        return self._handles.get(task_id)

    def stats(self) -> dict[str, Any]:
        """pending, running, counts per run outcome, and per worker its pid,
        state, RSS, runs and restarts."""
        return dict(self._request("stats"))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Accept no new tasks. Periodic tasks are cancelled (a run in
        progress finishes); one-shot tasks still run when due, unless
        ``cancel_futures`` cancels every task not yet running. With ``wait``,
        return once every task has ended and every worker has exited (a
        worker that does not exit is killed)."""
        with self._lock:
            self._closed = True
            if not self._broken:
                try:
                    self._backend.send(("shutdown", bool(cancel_futures)))
                except OSError:
                    pass  # already gone: the listener fails the handles
        if wait and threading.current_thread() is not self._listener:
            self._listener.join()
            self._backend.join()

    def _abort(self) -> None:
        """Stop at once: cancel what is pending, kill what runs, end every process."""
        with self._lock:
            if self._closed and not self._listener.is_alive():
                return
            pending = len(self._handles)
            self._closed = True
        if pending:
            logger.warning(
                "procsched: a Scheduler was not shut down before exit; stopping its %d unfinished task(s). "
                "Use `with Scheduler() as s:` or call shutdown().", pending
            )
        self._backend.abort()
        if self.runner != "threads":  # threads cannot be stopped: don't wait for them
            self._listener.join(10)

    def add_listener(self, callback: Callable[[dict[str, Any]], object], events: Any = None) -> None:
        """Call ``callback(event)`` for each scheduler event, or for those named in ``events``.

        ``event`` is a dict: ``{"event": "run_finished", "task_id": 3, "name":
        "poll", "run": 7, ...}``. The events and their fields are listed in
        ``procsched/_events.py`` (and the README): run_started, run_finished,
        run_failed, run_crashed, run_timeout, run_cancelled, run_missed,
        task_cancelled, worker_started, worker_exited. Callbacks run in this
        process, on the scheduler's listener thread, in the order added; one
        that raises is logged and skipped. Waiting on this scheduler
        (``result()``, ``cancel()``, ``stats()``) inside a callback is an error.

        Raises:
            TypeError: ``callback`` is not callable.
            ValueError: ``events`` names an unknown event.
        """
        self._listeners.add(callback, events)

    def remove_listener(self, callback: Callable[[dict[str, Any]], object]) -> bool:
        """Stop calling ``callback``; True if it was a listener."""
        return self._listeners.remove(callback)

    # -- requests ----------------------------------------------------------------

    def _request(self, *message: Any) -> Any:
        if threading.current_thread() is self._listener:
            raise SchedulerError(
                "cannot wait for the dispatcher inside a done-callback (it runs on the listener thread); "
                "call it from another thread"
            )
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._broken:
                raise SchedulerBrokenError(self._broken)
            if not self._listener.is_alive() and self._backend.finished():
                raise SchedulerClosedError("this Scheduler has shut down")
            request = next(self._request_ids)
            self._requests[request] = future
            try:
                self._backend.send((message[0], request, *message[1:]))
            except OSError:
                del self._requests[request]
                raise SchedulerBrokenError("the dispatcher is gone") from None
        return future.result(REQUEST_TIMEOUT)

    # -- the listener thread ----------------------------------------------------

    def _listen(self) -> None:
        closed = False
        try:
            while not closed:
                for event in self._backend.next_batch():
                    if event[0] == EV_CLOSED:
                        closed = True
                    else:
                        self._apply(event)
        except EOFError:
            pass
        except BaseException:  # noqa: BLE001 - must not die silently
            logger.exception("procsched listener failed")
        finally:
            if not closed:
                self._fail_all(self._backend.death_reason())

    def _apply(self, event: tuple[Any, ...]) -> None:
        tag = event[0]
        if tag == EV_RUN:
            (_, task_id, run, scheduled, started, finished, worker, outcome,
             state_value, next_due, missed, ended, blob_kind, blob) = event  # fmt: skip
            state = TaskState(state_value)
            handle = self._handles.get(task_id)
            info = RunInfo(task_id, run, scheduled / NS, started / NS, finished / NS, worker, outcome)
            if handle is not None:
                handle._on_run(info, state, None if next_due is None else next_due / NS)
                if state.terminal:
                    del self._handles[task_id]
                    if ended:
                        value, exc = unpack(blob_kind, blob, self._backend.pickled)
                        if state is TaskState.DONE:
                            handle._on_result(state, value)
                        else:
                            handle._on_result(state, exc=exc or SchedulerError(f"run ended: {outcome}"))
            if self._listeners:
                self._notify_run_end(info, handle, state, next_due, missed, blob_kind, blob)
        elif tag == EV_STARTED:
            handle = self._handles.get(event[1])
            if handle is not None:
                handle._on_started()
            if self._listeners:
                self._notify(RUN_STARTED, **run_started(
                    event[1], None if handle is None else handle.name, event[2], event[3],
                    None if handle is None else handle.next_run,
                ))  # fmt: skip
        elif tag == EV_CANCELLED:
            handle = self._handles.get(event[1])
            was_running = False
            if handle is not None:
                was_running = handle.state is TaskState.RUNNING
                handle._on_cancelled()
                if not was_running:  # else its last run's event comes later
                    del self._handles[event[1]]
            name = None if handle is None else handle.name
            self._notify(TASK_CANCELLED, task_id=event[1], name=name, running=was_running)
        elif tag == EV_REPLY:
            future = self._requests.pop(event[1], None)
            if future is not None:
                future.set_result(event[2])
        elif tag == EV_ADDED:
            _, task_id, name, due = event
            self._handles.setdefault(task_id, TaskHandle(self, task_id, name, due / NS))
        elif tag == EV_WORKER:
            _, what, slot, worker, exitcode = event
            if what == "started":
                self._notify(WORKER_STARTED, task_id=None, name=None, worker=worker, slot=slot)
            else:  # "exited": retired or killed by us; "crashed": died on its own
                self._notify(WORKER_EXITED, task_id=None, name=None, worker=worker, slot=slot, exitcode=exitcode,
                             signal=signal_name(exitcode), crashed=what == "crashed")  # fmt: skip
        elif tag == EV_LOG:
            logger.log(event[1], event[2])

    def _notify(self, kind: str, **fields: Any) -> None:
        """Deliver one event to the listeners (see ``_events.py``); never raises."""
        if self._listeners:
            self._listeners.notify(kind, fields)

    def _notify_run_end(
        self, info: RunInfo, handle: TaskHandle | None, state: TaskState, next_due: int | None,
        missed: int, blob_kind: int, blob: Any,
    ) -> None:  # fmt: skip
        kind = RUN_END[info.outcome]  # type: ignore[index]
        error: BaseException | None = None
        if info.outcome != "ok" and self._listeners.wants(kind):
            if handle is not None and handle.done() and not handle.cancelled():
                error = handle.exception(0)  # the task ended with this run: already unpacked
            elif blob_kind in (BLOB_ERROR, BLOB_EXC):
                error = unpack(blob_kind, blob, self._backend.pickled)[1]
        next_run = None if next_due is None else next_due / NS
        name = None if handle is None else handle.name
        self._notify(kind, **run_ended(info, name, state.value, next_run, error))
        if missed:
            self._notify(RUN_MISSED, task_id=info.task_id, name=name, run=info.run, missed=missed, next_run=next_run)

    def _fail_all(self, reason: str) -> None:
        with self._lock:
            self._broken = reason
            self._closed = True
        logger.error("procsched: %s; failing %d unfinished task(s)", reason, len(self._handles))
        for task_id in list(self._handles):
            handle = self._handles.pop(task_id, None)
            if handle is not None and not handle.done():
                handle._on_result(TaskState.FAILED, exc=SchedulerBrokenError(f"{reason}; task {task_id} never finished"))
        for request in list(self._requests):
            future = self._requests.pop(request, None)
            if future is not None:
                future.set_exception(SchedulerBrokenError(reason))


def _positive_int(arg: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{arg} must be a positive int, not {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{arg} must be >= 1, not {value!r}")
    return value


def _ray_unsupported(**options: Any) -> None:
    for arg, value in options.items():
        if value is not None:
            raise ValueError(
                f"{arg} is not supported with runner='ray' (Ray owns its worker processes), not {value!r}"
            )


def _start_method(mp_context: Any) -> str:
    import multiprocessing

    if mp_context is None:
        return _default_start_method()
    method = mp_context if isinstance(mp_context, str) else getattr(mp_context, "get_start_method", lambda: None)()
    if method not in multiprocessing.get_all_start_methods():
        raise ValueError(
            f"mp_context must be one of {multiprocessing.get_all_start_methods()} or a multiprocessing "
            f"context, not {mp_context!r}"
        )
    return str(method)


@atexit.register
def _abort_at_exit() -> None:
    """The interpreter is exiting (normally or on an unhandled exception)
    with schedulers never shut down: nothing may outlive this process, and a
    hung task must not hang the exit, so their work is stopped now."""
    for scheduler in list(_live):
        try:
            scheduler._abort()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass
