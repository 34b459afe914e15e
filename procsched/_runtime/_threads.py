"""The threads runner: the same Engine, with a dispatcher thread and worker threads.

    caller ── command ──▶ inbox ──▶ dispatcher thread: Engine.tick / add / cancel ...
                          ▲    │        │ run
      worker threads ─────┘    │        ▼
       ("done", "exited")      │    worker thread's own queue ──▶ runs fn in-process
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
from typing import Any, Callable

from .._context import running
from .._core import Policy, Run
from .._handle import RunInfo, wall_datetime
from ._engine import BLOB_ERROR, BLOB_VALUE, EV_CLOSED, EV_REPLY, WALL_CHECK_S, Engine

NS = 1_000_000_000
_STOP = ("stop",)


class _ThreadWorker:
    __slots__ = ("ident", "inbox", "thread")
    thread: threading.Thread

    def __init__(self, ident: str) -> None:
        self.ident = ident
        self.inbox: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()


class ThreadCarrier:
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
        worker.inbox.put(("run", run))

    def retire(self, worker: _ThreadWorker) -> None:
        worker.inbox.put(_STOP)

    def kill(self, worker: _ThreadWorker, hard: bool) -> None:
        # A thread cannot be killed: abandon it. It exits after its current
        # run; the engine counts it gone now.
        worker.inbox.put(_STOP)
        self.inbox.put(("exited", worker, None))

    def rss(self, worker: _ThreadWorker) -> None:
        return None

    def health(self, worker: _ThreadWorker) -> str:
        return "ok"

    def _work(self, worker: _ThreadWorker) -> None:
        get, put, clock = worker.inbox.get, self.inbox.put, time.monotonic_ns
        while True:
            message = get()
            if message is _STOP:
                break
            run: Run = message[1]
            fn, args, kwargs = run.payload
            started = clock()
            wall = run.wall_ns if run.wall_ns is not None else run.scheduled_ns + time.time_ns() - started
            info = RunInfo(run.task_id, run.run, run.scheduled_ns / NS, started / NS, None, worker.ident, None,
                           run.attempt, wall_datetime(wall))  # fmt: skip
            try:
                with running(info, self.scheduler()):
                    value = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - the task's failure is its result
                matched = run.retry_on is not None and isinstance(exc, run.retry_on)
                put(("done", worker, run.task_id, run.run, "error", started, clock(), BLOB_ERROR, (exc, ""), matched))
            else:
                put(("done", worker, run.task_id, run.run, "ok", started, clock(), BLOB_VALUE, value))
        put(("exited", worker, 0))


class ThreadBackend:
    pickled = False
    aborted = False

    def __init__(self, config: dict[str, Any], scheduler: Any) -> None:
        self.inbox: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self.events: queue.SimpleQueue[list[tuple[Any, ...]]] = queue.SimpleQueue()
        self.engine = Engine(
            ThreadCarrier(self.inbox, scheduler),
            workers=config["workers"],
            policy=Policy(config["policy"]),
            max_tasks_per_worker=config["max_tasks_per_worker"],
            default_timeout_ns=config.get("default_timeout"),
        )
        self.thread = threading.Thread(target=self._dispatch, name="procsched-dispatcher", daemon=True)
        self.thread.start()

    def pack(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return (fn, args, kwargs)

    def send(self, message: tuple[Any, ...]) -> None:
        self.inbox.put(message)

    def next_batch(self) -> list[tuple[Any, ...]]:
        batch = self.events.get()
        if batch is None:
            raise EOFError("the dispatcher thread died")
        return batch

    def finished(self) -> bool:
        return not self.thread.is_alive()

    def death_reason(self) -> str:
        return "the dispatcher thread died"

    def join(self) -> None:
        self.thread.join()

    def abort(self) -> None:
        # Threads cannot be killed: cancel what is pending; running runs are
        # daemon threads, which end with the interpreter.
        self.aborted = True
        self.inbox.put(("shutdown", True))

    def forked(self) -> None:
        pass  # a forked child has none of the threads: the Scheduler refuses every call

    def worker_event(self, what: str, ident: Any) -> None:
        pass

    def _dispatch(self) -> None:
        engine, inbox, clock = self.engine, self.inbox, time.monotonic_ns
        try:
            engine.start(clock())
            while not engine.closed:
                now = clock()
                engine.set_wall_offset(time.time_ns() - now, now)
                wake = engine.tick(clock())
                if engine.events:
                    self.events.put(engine.events)
                    engine.events = []
                if engine.closed:
                    break
                timeout = None if wake is None else max(0, wake - clock()) / NS
                if engine.core.calendars and (timeout is None or timeout > WALL_CHECK_S):
                    timeout = WALL_CHECK_S  # watch the wall clock (see _dispatcher.WALL_CHECK_S)
                try:
                    message = inbox.get(timeout=timeout)
                except queue.Empty:
                    continue
                while True:
                    self._handle(message)
                    try:
                        message = inbox.get_nowait()
                    except queue.Empty:
                        break
            if engine.events:
                self.events.put(engine.events)
            self.events.put([(EV_CLOSED,)])
        except BaseException:
            import logging

            logging.getLogger("procsched").exception("the dispatcher thread failed")
            self.events.put(None)  # type: ignore[arg-type]  # the listener fails every handle
            raise

    def _handle(self, message: tuple[Any, ...]) -> None:
        engine, tag, now = self.engine, message[0], time.monotonic_ns()
        if tag == "done":
            engine.finished(*message[1:])
        elif tag == "exited":
            engine.worker_exited(message[1], message[2], now)
        elif tag == "add":
            if len(message) == 12:
                engine.set_wall_offset(time.time_ns() - now, now)
            engine.add(*message[1:])
        elif tag == "pause":
            engine.events.append((EV_REPLY, message[1], engine.pause(message[2])))
        elif tag == "resume":
            engine.events.append((EV_REPLY, message[1], engine.resume(message[2], now)))
        elif tag == "wall_step":
            pass  # the threads runner reads the real wall clock
        elif tag == "cancel":
            engine.events.append(("reply", message[1], engine.cancel(message[2], message[3], now)))
        elif tag == "stats":
            engine.events.append(("reply", message[1], engine.stats(now)))
        elif tag == "shutdown":
            engine.shutdown(message[1], now)
