"""The threads runner: the same Engine, with a dispatcher thread and worker threads.

    caller ── command ──▶ inbox ──▶ dispatcher thread: Engine.tick / add / cancel ...
                          ▲    │        │ run                       (_dispatch_thread.py)
      worker threads ─────┘    │        ▼
      (Finished, Exited)       │    worker thread's own queue ──▶ runs fn in-process
                               └──▶ event batches ──▶ the facade's listener thread

It is the comparison baseline: no pickling, no processes, and therefore no
crash isolation. A thread cannot be killed, so a run that times out or is
cancelled with ``interrupt=True`` is *abandoned*: it is recorded as
"timeout"/"cancelled" at once, its thread keeps running in the background
until the function returns, its result is discarded, and a fresh thread
takes its place in the pool.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from .._context import running
from .._core import Run
from .._handle import RunError, run_in_progress
from ._carrier import Carrier
from ._dispatch_thread import DispatcherThread
from ._messages import BLOB_ERROR, BLOB_VALUE, Done, Exited, Finished, Shutdown

#: A worker thread's inbox: a run to run, or this (exit).
_STOP = None


class _ThreadWorker:
    __slots__ = ("ident", "inbox", "thread")
    thread: threading.Thread

    def __init__(self, ident: str) -> None:
        self.ident = ident
        self.inbox: queue.SimpleQueue[Run | None] = queue.SimpleQueue()


class ThreadCarrier(Carrier):
    def __init__(self, inbox: queue.SimpleQueue[tuple[Any, ...]], scheduler: Any) -> None:
        self.inbox = inbox
        self.scheduler = scheduler  # a weakref.ref: a dropped Scheduler must be collectable
        self.serial = 0

    def spawn(self, slot: int) -> _ThreadWorker:
        self.serial += 1
        worker = _ThreadWorker(f"procsched-worker-{slot}.{self.serial}")
        worker.thread = threading.Thread(target=self._work, args=(worker,), name=worker.ident, daemon=True)
        worker.thread.start()
        return worker

    def send_run(self, worker: _ThreadWorker, run: Run) -> None:
        worker.inbox.put(run)

    def retire(self, worker: _ThreadWorker) -> None:
        worker.inbox.put(_STOP)

    def kill(self, worker: _ThreadWorker, hard: bool) -> None:
        # A thread cannot be killed: abandon it. It exits after its current
        # run; the engine counts it gone now.
        worker.inbox.put(_STOP)
        self.inbox.put(Exited.wire(worker, None, None))

    def _work(self, worker: _ThreadWorker) -> None:
        get, put, clock = worker.inbox.get, self.inbox.put, time.monotonic_ns
        while True:
            run = get()
            if run is _STOP:
                break
            fn, args, kwargs = run.payload
            started = clock()
            wall = run.wall_ns if run.wall_ns is not None else run.scheduled_ns + time.time_ns() - started
            info = run_in_progress(
                run.task_id, run.run, run.scheduled_ns, started, worker.ident, run.attempt, wall, run.cause
            )
            try:
                with running(info, self.scheduler()):
                    value = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - the task's failure is its result
                matched = run.retry_on is not None and isinstance(exc, run.retry_on)
                tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
                error = RunError.of(exc, tb)
                done = Done.wire(
                    run.task_id, run.run, "error", started, clock(), BLOB_ERROR, (exc, ""), matched, None, error
                )
            else:
                done = Done.wire(run.task_id, run.run, "ok", started, clock(), BLOB_VALUE, value, False, None, None)
            put(Finished.wire(worker, done))
        put(Exited.wire(worker, 0, None))


class ThreadBackend(DispatcherThread):
    def __init__(self, config: dict[str, Any], scheduler: Any) -> None:
        super().__init__()
        self._start(ThreadCarrier(self.inbox, scheduler), config)

    def pack(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return (fn, args, kwargs)

    def abort(self) -> None:
        # Threads cannot be killed: cancel what is pending; running runs are
        # daemon threads, which end with the interpreter.
        self.aborted = True
        self.inbox.put(Shutdown.wire(True))
