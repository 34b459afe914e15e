"""A dispatcher thread in the user process: the loop shared by the threads
and Ray runners.

    caller ── command ──▶ inbox ──▶ dispatcher thread: Engine.tick / add / cancel ...
                          ▲    │        │ carrier.send_run / kill / ...
      carrier reports ────┘    │        ▼
      (Finished, Exited, ...)  │    the carrier's workers (threads, Ray tasks)
                               └──▶ event batches ──▶ the facade's listener thread

Commands and events are the records of ``_messages.py``, as with the
processes runner, through queues instead of pipes (nothing is pickled).

The thread owns the Engine; every input reaches it through one blocking
queue (``inbox``), waited on with the engine's next deadline as timeout, so
it never polls. A subclass makes the carrier and may handle more message
tags (``_handle``) and clean up once the engine is closed (``_closed``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

from .._core import Policy
from .._core._units import NS
from . import _messages as m
from ._carrier import Carrier
from ._engine import WALL_CHECK_S, Engine


class DispatcherThread:
    """The facade's backend for in-process runners (see the module docstring)."""

    pickled = False
    aborted = False
    #: Why the runner is gone (the engine was aborted for it): the handles fail with it.
    lost: str | None = None

    def __init__(self) -> None:
        self.inbox: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self.events: queue.SimpleQueue[list[tuple[Any, ...]]] = queue.SimpleQueue()

    def _start(self, carrier: Carrier, config: dict[str, Any]) -> None:
        self.engine = Engine(
            carrier,
            workers=config["workers"],
            policy=Policy(config["policy"]),
            limits=config.get("limits"),
            max_tasks_per_worker=config["max_tasks_per_worker"],
            default_timeout_ns=config.get("default_timeout"),
        )
        self.thread = threading.Thread(target=self._dispatch, name="procsched-dispatcher", daemon=True)
        self.thread.start()

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
        return self.lost or "the dispatcher thread died"

    def join(self) -> None:
        self.thread.join()

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
                    self.events.put(engine.take_events())
                if engine.closed:
                    break
                timeout = None if wake is None else max(0, wake - clock()) / NS
                if engine.watches_wall and (timeout is None or timeout > WALL_CHECK_S):
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
            if self.lost is not None:  # broken, not closed: the listener fails every handle with it
                if engine.events:
                    self.events.put(engine.take_events())
                self.events.put(None)  # type: ignore[arg-type]
                self._closed()
                return
            self._closed()
            if engine.events:
                self.events.put(engine.events)
            self.events.put([m.Closed.wire()])
        except BaseException:
            logger = logging.getLogger("procsched")
            logger.exception("the dispatcher thread failed")
            try:
                self._failed()
            except Exception:
                logger.exception("cleaning up after the dispatcher thread failed")
            self.events.put(None)  # type: ignore[arg-type]  # the listener fails every handle
            raise

    def _handle(self, message: tuple[Any, ...]) -> None:
        engine, tag, now = self.engine, message[0], time.monotonic_ns()
        if tag == m.FINISHED:
            finished = m.view(m.Finished, message)
            engine.finished(finished.worker, m.view(m.Done, finished.done))
        elif tag == m.EXITED:
            exited = m.view(m.Exited, message)
            engine.worker_exited(exited.worker, exited.exitcode, now, exited.detail)
        elif tag == m.ADD:
            add = m.view(m.Add, message)
            if add.schedule is not None:
                engine.set_wall_offset(time.time_ns() - now, now)
            engine.add(add, add.task_id, add.payload)  # type: ignore[arg-type]  # numbered by the facade
        elif tag == m.PAUSE:
            pause = m.view(m.Pause, message)
            engine.emit(m.Answer.wire(pause.request, engine.pause(pause.task_id)))
        elif tag == m.RESUME:
            resume = m.view(m.Resume, message)
            engine.emit(m.Answer.wire(resume.request, engine.resume(resume.task_id, now)))
        elif tag == m.WALL_STEP:
            pass  # an in-process runner reads the real wall clock
        elif tag == m.CANCEL:
            cancel = m.view(m.Cancel, message)
            engine.emit(m.Answer.wire(cancel.request, engine.cancel(cancel.task_id, cancel.interrupt, now)))
        elif tag == m.RUN_NOW:
            run_now = m.view(m.RunNow, message)
            engine.emit(m.Answer.wire(run_now.request, engine.run_now(run_now.task_id, now)))
        elif tag == m.BACKFILL:
            backfill = m.view(m.Backfill, message)
            engine.set_wall_offset(time.time_ns() - now, now)
            slots = engine.backfill(
                backfill.task_id, backfill.start_wall_ns, backfill.end_wall_ns, backfill.dry_run, now
            )
            engine.emit(m.Answer.wire(backfill.request, slots))
        elif tag == m.STATS:
            engine.emit(m.Answer.wire(m.view(m.Stats, message).request, engine.stats(now)))
        elif tag == m.SHUTDOWN:
            engine.shutdown(m.view(m.Shutdown, message).cancel_futures, now)

    def _closed(self) -> None:
        """The engine closed: every worker is gone. Release what the carrier holds."""

    def _failed(self) -> None:
        """The loop raised (a bug): stop what can be stopped."""
