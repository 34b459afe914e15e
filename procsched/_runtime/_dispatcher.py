"""The dispatcher process: owns the core and the pool of worker processes.

    user process                      dispatcher (this module)                 workers
    ┌───────────┐ cmd pipe (Add,     ┌──────────────────────────────────┐ own  ┌────────┐
    │ Scheduler │ Cancel, ...) ────▶ │ loop: wait(cmd, wakeup, worker   │ pipe │ worker │
    │ listener  │ ◀── event pipe ─── │   pipes, worker sentinels,       │ ◀──▶ │ loop   │
    └───────────┘  (event batches)   │   timeout = next deadline)       │      └────────┘
                                     │ -> Engine (core + pool state)    │ sentinel: death
                                     └──────────────────────────────────┘
    (the records: _messages.py; the map of who runs where: _runtime/__init__.py)

The loop does three things only: wait - in one blocking ``select`` on
everything at once, registered once and updated as workers come and go,
with the engine's next deadline as timeout, so it never polls - translate
what arrived into Engine calls, and carry out what the engine asks
(``ProcessCarrier``, ``_process_carrier.py``). Each readable pipe is read with one ``os.read`` that
brings every message waiting in it; event batches go back to the user
process once per turn of the loop. No pipe is ever written with a blocking
write: what a pipe cannot take waits in a buffer (the event pipe's
``out``; each worker's ``out``, a queue of views of the frames, so a large
argument goes out of the task's own bytes, never copied here) and the
selector watches that pipe for writability only while its buffer is not
empty. A worker that takes nothing for STALLED_WRITE_NS is killed.

It is started with ``subprocess`` (fork+exec, safe with threads in the user
process) in a session of its own, so Ctrl-C at a terminal reaches only the
user process, which then shuts down cleanly. If the user process dies, the
command pipe reads EOF and the dispatcher kills every worker and exits.
Workers are started with the configured multiprocessing start method
(forkserver by default, preloaded with the worker module, so a replacement
is up in milliseconds); each dies with its parent (see ``_worker.py``).
The forkserver is started first thing (``_boot.py``), as a fork of this
process (no second interpreter start), so that its preload overlaps this
process's own imports: the first result after ``Scheduler()`` waits for both.

User code is never unpickled here: payloads and results are opaque bytes.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # the dispatcher process (python -m), not an import
    from ._boot import boot

    _BOOT = boot()

import itertools
import multiprocessing
import os
import pickle
import selectors
import shutil
import signal
import time
import traceback
from functools import partial
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from .._core import Policy
from .._core._units import NS
from .._errors import SchedulerClosedError
from . import _messages as m
from . import _run_requests as run_requests
from ._checks import check_report
from ._engine import LOAD_GRACE_NS, WALL_CHECK_S, Engine
from ._gc import FreezeOnGrowth, gc_paused
from ._process_carrier import (
    ON_COMMANDS,
    ON_COMMIT,
    ON_EXIT,
    ON_SIGNAL,
    ON_WORKER,
    ON_WRITABLE,
    ProcessCarrier,
    ProcessWorker,
)
from ._store_hooks import NO_STORE
from ._wire import PROTOCOL, CommandReader, FrameReader, frame_head

if TYPE_CHECKING:
    from ._durable._journal import Journal

#: A wall-clock reading is trusted if taken within this of the monotonic
#: readings around it (see Dispatcher.wall_offset).
WALL_READ_NS = 50_000
#: Ids of tasks added from inside tasks (the user process numbers its own from 1).
INNER_IDS_START = 1 << 48
#: A run's cancel, pause and resume (``current_scheduler()``): carried out
#: as the user's commands, numbered apart from the user's requests (which
#: count up from 1) - their answers go back to the run (``asked_by``).
CONTROL = frozenset((m.CANCEL, m.PAUSE, m.RESUME))
#: The longest single wait: epoll and poll reject timeouts over ~24.8 days
#: (OverflowError), and a task may be due in a century.
MAX_WAIT_S = 3600.0
#: A worker whose half-received message has not grown for this long is not
#: sending one (a task wrote a frame header to its pipe): it is killed.
STALLED_FRAME_NS = 5 * NS
#: A worker that takes nothing from its pipe for this long while we have
#: something to send it is stuck (SIGSTOPped, or a task thread blocked the
#: process): it is killed, as a crash. A healthy worker reads at memory speed
#: whenever it is idle or waiting for a reply, the only times we write to it.
STALLED_WRITE_NS = 10 * NS


class Dispatcher:
    def __init__(self, cmd: Connection, evt: Connection, config: dict[str, Any]) -> None:
        self.cmd: Connection | None = cmd
        self.cmd_reader = FrameReader(cmd.fileno())
        self.commands = CommandReader()
        self.evt: Connection | None = evt
        os.set_blocking(evt.fileno(), False)
        self.out = bytearray()  # framed event batches the pipe has not taken yet
        self.out_waiting = False  # registered for EVENT_WRITE
        # Registered once, updated as workers come and go: one wait a turn.
        # select(2) takes its timeout in microseconds, epoll in milliseconds
        # (rounded up): a timer would fire up to 1 ms late. select handles
        # descriptors below 1024 only, so a very large pool falls back to epoll.
        few = config["workers"] <= 256
        self.selector = selectors.SelectSelector() if few else selectors.DefaultSelector()
        capture = config["tempdir"] if config.get("capture_output") else None
        self.journal: Journal | None = None
        if config.get("store") is not None:  # keyed tasks are durable (see _durable/_journal.py)
            from ._durable._journal import Journal

            self.journal = Journal(
                config["store"],
                config["owner_pid"],
                self.emit,
                config.get("lease_ns", 30 * NS),
                secret=config.get("secret"),  # (its store and its writer's: they sign and check)
            )
            self.selector.register(self.journal.writer.fd, selectors.EVENT_READ, (ON_COMMIT, None))
        start_by = None if self.journal is None else self.journal.start_by
        self.carrier = ProcessCarrier(config["start_method"], self.selector, capture, start_by)
        self.engine = Engine(
            self.carrier,
            workers=config["workers"],
            policy=Policy(config["policy"]),
            limits=config.get("limits"),
            max_tasks_per_worker=config["max_tasks_per_worker"],
            max_worker_memory=config["max_worker_memory"],
            default_timeout_ns=config.get("default_timeout"),
            load_grace_ns=int(float(os.environ.get("PROCSCHED_LOAD_GRACE", LOAD_GRACE_NS / NS)) * NS),
            durable=NO_STORE if self.journal is None else self.journal,
        )
        self.inner_ids = itertools.count(INNER_IDS_START)
        self.worker_requests = itertools.count(-1, -1)  # a run's control requests (``asked_by``)
        self.replying: dict[int, ProcessWorker] = {}  # such a request -> the worker its Reply goes to
        self.wall_skew = 0  # tests step the dispatcher's wall clock with the "wall_step" command
        self.partial: dict[ProcessWorker, int] = {}  # worker -> when its unfinished frame last grew
        self.blobs: dict[bytes, bytes] = {}  # see intern()
        self.freeze_gc = FreezeOnGrowth()  # after bulk adds (see _gc.py)
        self.wakeup_r, wakeup_w = os.pipe()
        os.set_blocking(wakeup_w, False)
        signal.set_wakeup_fd(wakeup_w)
        signal.signal(signal.SIGTERM, lambda *_: None)  # seen through the wakeup fd
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.selector.register(cmd, selectors.EVENT_READ, (ON_COMMANDS, None))
        self.selector.register(self.wakeup_r, selectors.EVENT_READ, (ON_SIGNAL, None))

    def run(self) -> None:
        engine, select, clock = self.engine, self.selector.select, time.monotonic_ns
        engine.start(clock())
        while not engine.closed:
            engine.set_wall_offset(*self.wall_offset())
            wake = engine.tick(clock())
            if self.journal is not None:  # one transaction per turn, before the keyed runs go out
                offset, now = self.wall_offset()
                renew = self.journal.turn(engine, self.carrier, offset, now)
                if renew is not None and (wake is None or renew < wake):
                    wake = renew
            if self.carrier.unflushed:
                self.carrier.flush()
            self.flush()
            if engine.closed:
                break
            if self.partial:
                wake = self.check_partial(wake, clock())
            if self.carrier.writing:
                wake = self.check_writing(wake, clock())
            timeout = MAX_WAIT_S if wake is None else min(max(0, wake - clock()) / NS, MAX_WAIT_S)
            if engine.watches_wall and timeout > WALL_CHECK_S:
                timeout = WALL_CHECK_S
            for key, mask in select(timeout):
                try:
                    self.on_event(key.data, mask)
                except Exception as exc:  # one bad record never ends the dispatcher (issue 20 item 9)
                    if key.data[0] == ON_COMMANDS:
                        raise  # the user process's own channel is corrupt: nothing after it can be trusted
                    self.contained(exc)
        if self.journal is not None:
            if self.evt is not None:  # a clean end: the last turn's changes, then unregister
                offset, now = self.wall_offset()
                self.journal.drain(engine, self.carrier, offset, now)
                self.carrier.flush()
            self.journal.close(clean=self.evt is not None)
        self.flush()
        if self.evt is not None:
            self.emit([m.Closed.wire()])
        self.finish_output()

    def on_event(self, data: Any, mask: int) -> None:
        """One readiness event of the loop (see ``run``): ``data`` is its key's."""
        engine, clock = self.engine, time.monotonic_ns
        what, worker = data
        if what == ON_WORKER:
            if mask & selectors.EVENT_WRITE and worker.conn is not None:
                self.carrier.write(worker)
            if mask & selectors.EVENT_READ and worker.conn is not None:  # not dropped earlier in this turn
                self.on_worker(worker)
        elif what == ON_EXIT:
            if worker.sentinel in self.carrier.by_sentinel and not self.carrier.outlived(worker):
                while worker.conn is not None:  # what it said before it died (results of runs it ended)
                    self.on_worker(worker)
                engine.worker_exited(worker, self.carrier.forget(worker), clock())
                self.carrier.forget_output(worker)
                # the crash reaches the user before the replacement is started (next tick)
                if self.journal is None or self.journal.may_flush(engine):
                    self.flush()
        elif what == ON_COMMANDS:
            if self.cmd is not None:
                self.on_commands()
        elif what == ON_WRITABLE:
            self.write_out()
        elif what == ON_COMMIT:  # the store writer committed a turn: its keyed runs go out
            self.journal.committed(engine, self.carrier, clock())  # type: ignore[union-attr]
        else:
            os.read(self.wakeup_r, 512)
            engine.log(30, "dispatcher got SIGTERM: killing the workers and exiting")
            engine.abort(clock())

    def contained(self, exc: Exception) -> None:
        """A record that broke its handling (a bug, or a record it did not
        expect): logged with its traceback; the dispatcher goes on."""
        detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-3000:]
        self.engine.log(40, f"the dispatcher contained an error and goes on: {type(exc).__name__}: {exc}\n{detail}")

    def wall_offset(self) -> tuple[int, int]:
        """(the wall clock minus the monotonic clock, the monotonic clock), now (ns).

        The wall reading is taken between two monotonic ones: a preemption
        between two bare readings (milliseconds on a loaded machine) would
        shift every wall time derived from this offset - a fixed-rate run's
        slot stored off its grid. A pair further apart than WALL_READ_NS is
        read again (at most twice more)."""
        for _ in range(3):
            before = time.monotonic_ns()
            wall = time.time_ns()
            now = time.monotonic_ns()
            if now - before <= WALL_READ_NS:
                break
        return wall + self.wall_skew - (before + now) // 2, now

    def on_commands(self) -> None:
        engine = self.engine
        try:
            frames = self.cmd_reader.read()
        except (EOFError, OSError):
            self.user_gone()
            return
        with gc_paused():  # a batch's records (a restart's chunk: 5,000 tasks) are frozen after it (see _gc.py)
            self.on_messages(self.commands.messages(frames))
        self.freeze_gc(engine.pending)

    def on_messages(self, messages: list[Any]) -> None:
        """Carry out a batch of commands from the user process, in order."""
        engine = self.engine
        journal = self.journal
        for message in messages:
            tag = message[0]
            if tag == m.ADD:
                add = m.view(m.Add, message)
                task_id = add.task_id
                assert task_id is not None  # the user process numbers its tasks
                keyed = journal if journal is not None and task_id in journal.expected else None
                if keyed is not None:
                    keyed.sync(engine.events)  # what came before (a replaced task's cancel) is journalled first
                if keyed is not None or add.schedule is not None:  # its wall-clock times matter
                    engine.set_wall_offset(*self.wall_offset())
                engine.add(add, task_id, self.intern(add.payload))
                if keyed is not None:
                    keyed.added(engine, task_id)
            elif tag == m.ADOPT and journal is not None:  # a restart's stored tasks, a chunk at a time
                offset, now = self.wall_offset()
                engine.set_wall_offset(offset, now)
                adopt = m.view(m.Adopt, message)
                journal.adopt(engine, adopt.shapes, adopt.rows, offset, adopt.last)
            elif tag == m.DEFINE and journal is not None:
                journal.expect(m.view(m.Define, message))
            elif tag == m.UNLOADABLE and journal is not None:
                unloadable = m.view(m.Unloadable, message)
                journal.unloadable(unloadable.key, unloadable.why)
            elif tag == m.ADOPT_AGAIN and journal is not None:
                journal.peers.adopt_again(m.view(m.AdoptAgain, message).key)
            elif tag == m.PAUSE or tag == m.RESUME:
                request = m.view(m.Pause, message)  # (Resume: the same fields)
                now = time.monotonic_ns()
                if journal is not None:  # the user's pause or resume: not on standby any more
                    journal.peers.controlled(engine, request.task_id, now)
                if tag == m.PAUSE:
                    done = engine.pause(request.task_id, now)
                elif journal is not None:
                    done = journal.peers.resume(engine, request.task_id, now)
                else:
                    done = engine.resume(request.task_id, now)
                self.answer(request.task_id, request.request, done)
            elif tag == m.WALL_STEP:  # tests: step this process's wall clock
                self.wall_skew += m.view(m.WallStep, message).ns
            elif tag == m.CANCEL:
                cancel = m.view(m.Cancel, message)
                now = time.monotonic_ns()
                if cancel.replaced and journal is not None:  # its row stays for the task on its way
                    accepted = journal.replaced(cancel.task_id, partial(engine.cancel, cancel.task_id, False, now))
                    engine.emit(m.Answer.wire(cancel.request, accepted))  # (nothing of it to write)
                else:
                    accepted = engine.cancel(cancel.task_id, cancel.interrupt, now)
                    self.answer(cancel.task_id, cancel.request, accepted)
            elif tag == m.RUN_NOW:
                run_now = m.view(m.RunNow, message)
                engine.emit(m.Answer.wire(run_now.request, engine.run_now(run_now.task_id, time.monotonic_ns())))
            elif tag == m.BACKFILL:
                backfill = m.view(m.Backfill, message)
                engine.set_wall_offset(*self.wall_offset())
                slots = engine.backfill(
                    backfill.task_id,
                    backfill.start_wall_ns,
                    backfill.end_wall_ns,
                    backfill.dry_run,
                    time.monotonic_ns(),
                )
                engine.emit(m.Answer.wire(backfill.request, slots))
            elif tag == m.STATS:
                stats = engine.stats(time.monotonic_ns())
                if journal is not None:
                    stats["store"] = journal.stats(engine)
                engine.emit(m.Answer.wire(m.view(m.Stats, message).request, stats))
            elif tag == m.SHUTDOWN:
                if journal is not None:  # what shutdown cancels stays stored
                    journal.sync(engine.events)
                    journal.closing = True
                engine.shutdown(m.view(m.Shutdown, message).cancel_futures, time.monotonic_ns())

    def intern(self, payload: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
        """Share the bytes of a pickled function (and of small argument
        blobs) among the tasks that carry the same ones: a million pending
        calls of one function hold one copy of its pickle, not a million."""
        fn_blob, arg_blob = payload
        blobs = self.blobs
        if len(blobs) >= 4096:
            blobs.clear()
        fn_blob = blobs.setdefault(fn_blob, fn_blob) if len(fn_blob) < 512 else fn_blob
        arg_blob = blobs.setdefault(arg_blob, arg_blob) if len(arg_blob) < 64 else arg_blob
        return fn_blob, arg_blob

    def on_worker(self, worker: ProcessWorker) -> None:
        engine = self.engine
        conn = worker.conn
        try:
            frames = worker.reader.read()
        except (EOFError, OSError):
            self.partial.pop(worker, None)
            self.carrier._drop_conn(worker)  # dying: its sentinel will tell
            return
        if worker.reader.buf:
            self.partial[worker] = time.monotonic_ns()
        else:
            self.partial.pop(worker, None)
        for frame in frames:
            if worker.conn is not conn:
                return  # it was killed (e.g. it cancelled itself with interrupt=True)
            try:
                message: Any = pickle.loads(frame)
                tag = check_report(message)
            except Exception as exc:  # noqa: BLE001 - anything a task wrote to the pipe
                self.protocol_violation(worker, f"{type(exc).__name__}: {exc}"[:200])
                return
            if tag == m.DONE:
                engine.finished(worker, m.view(m.Done, message))
            elif tag == m.STARTED:
                started = m.view(m.Started, message)
                engine.started(worker, started.task_id, started.run, started.at_ns)
            elif tag == m.SKIPPED:
                engine.skipped(worker)
            elif tag == m.STALLED:  # stopped and continued: check what was given ahead before it starts
                if self.journal is not None:
                    self.journal.recheck(engine, time.monotonic_ns())
                self.carrier._send(worker, m.Checked.wire())
            elif tag == m.ADD:
                self.carrier._send(worker, self.add_from_task(m.view(m.Add, message)))
            elif tag in CONTROL and not (engine.closing and tag != m.CANCEL):
                self.on_messages([self.asked_by(worker, message)])  # as the user's: answered with a Reply
            elif tag in run_requests.TAGS:  # run now, backfill (current_scheduler()); a pause while closing
                self.carrier._send(worker, run_requests.serve(engine, message, time.monotonic_ns(), self.wall_offset))

    def asked_by(self, worker: ProcessWorker, message: m.Message) -> m.Message:
        """A run's cancel, pause or resume (``current_scheduler()``; request
        0) as the user's command, numbered for its answer to go to ``worker``
        as a ``Reply`` (``emit``): carried out as the user's is, and so
        answered as the user's is - a keyed task's once the store has it
        (answered at once, a run's pause of a keyed task was not written yet,
        and did not take the resume path a keyed task takes)."""
        request = next(self.worker_requests)
        self.replying[request] = worker
        if message[0] == m.CANCEL:
            cancel = m.view(m.Cancel, message)
            return m.Cancel.wire(request, cancel.task_id, cancel.interrupt)
        task_id = m.view(m.Pause, message).task_id  # (Resume: the same fields)
        return m.Pause.wire(request, task_id) if message[0] == m.PAUSE else m.Resume.wire(request, task_id)

    def answer(self, task_id: int, request: int, done: bool) -> None:
        """Answer the user's pause, resume or cancel: with a store, a keyed
        task's once it is written (``Journal.answer``)."""
        if self.journal is not None:
            self.journal.answer(self.engine, task_id, request, done)
        else:
            self.engine.emit(m.Answer.wire(request, done))

    def add_from_task(self, add: m.Add) -> m.Message:
        """A task's follow-up (``current_scheduler()`` in a worker): number
        it, add it, tell the user process; the answer for the worker."""
        engine = self.engine
        if engine.closing:
            return m.Refusal.wire(SchedulerClosedError("the scheduler is shutting down"))
        task_id = next(self.inner_ids)
        if add.schedule is not None:
            engine.set_wall_offset(*self.wall_offset())
        why = engine.add(add, task_id, self.intern(add.payload))
        if why is not None:
            return m.Refusal.wire(ValueError(f"task {task_id} cannot be scheduled: {why}"[:300]))
        due = engine.due(task_id)
        assert due is not None  # a task just added is pending
        engine.emit(m.TaskAdded.wire(task_id, add.name, due, add.key, engine.next_wall(task_id)))
        return m.Reply.wire((task_id, due))

    def check_partial(self, wake: int | None, now: int) -> int | None:
        """Kill workers whose unfinished frame stalled; return the next time to look."""
        for worker, since in list(self.partial.items()):
            if worker.conn is None:
                del self.partial[worker]
            elif since + STALLED_FRAME_NS <= now:
                del self.partial[worker]
                self.protocol_violation(worker, f"an unfinished message, stalled for {STALLED_FRAME_NS / NS:g}s")
            elif wake is None or since + STALLED_FRAME_NS < wake:
                wake = since + STALLED_FRAME_NS
        return wake

    def check_writing(self, wake: int | None, now: int) -> int | None:
        """Kill workers that took nothing from their pipe for STALLED_WRITE_NS
        while we had something for them; return the next time to look."""
        for worker in list(self.carrier.writing):
            due = worker.out_since + STALLED_WRITE_NS
            if due <= now:
                self.engine.log(
                    30,
                    f"worker {worker.ident} took nothing from its pipe for "
                    f"{STALLED_WRITE_NS / NS:g}s (stopped?); killing it",
                )
                self.carrier.kill(worker, hard=True)
            elif wake is None or due < wake:
                wake = due
        return wake

    def protocol_violation(self, worker: ProcessWorker, what: str) -> None:
        """A worker sent something that is not a message of ours (a task wrote
        to the pipe it inherited, or sent a frame it never finished): its pipe
        cannot be trusted, so the worker goes, like a crash - never the
        dispatcher, which never blocks on a worker's pipe (``FrameReader``)
        and gives up on a frame that stops growing (``check_partial``)."""
        self.engine.log(30, f"worker {worker.ident} sent garbage ({what}); killing it")
        self.carrier.kill(worker, hard=True)

    def flush(self) -> None:
        if self.engine.events:
            events = self.engine.take_events()
            if self.evt is not None:
                self.emit(events)

    def emit(self, events: list[tuple[Any, ...]]) -> None:
        """Queue an event batch for the user process without ever blocking:
        a user callback that schedules work while both pipes are full would
        otherwise deadlock the two processes. What the pipe cannot take now
        waits in ``self.out`` until the selector says it is writable."""
        if self.replying:
            events = self.reply_to_runs(events)
            if not events:
                return
        body = pickle.dumps(events, PROTOCOL)
        self.out += frame_head(len(body))
        self.out += body
        self.write_out()

    def reply_to_runs(self, events: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """``events`` without the answers to runs' requests (``asked_by``),
        each sent to its run's worker as a ``Reply`` (a worker gone since:
        nobody waits for it)."""
        kept = []
        for ev in events:
            if ev[0] == m.ANSWER:
                answer = m.view(m.Answer, ev)
                worker = self.replying.pop(answer.request, None)
                if worker is not None:
                    self.carrier._send(worker, m.Reply.wire(answer.value))
                    continue
            kept.append(ev)
        return kept

    def write_out(self) -> None:
        evt = self.evt
        if evt is None:
            return
        try:
            written = os.write(evt.fileno(), self.out)
        except BlockingIOError:
            written = 0
        except OSError:
            self.user_gone()
            return
        del self.out[:written]
        if self.out and not self.out_waiting:
            self.selector.register(evt, selectors.EVENT_WRITE, (ON_WRITABLE, None))
        elif not self.out and self.out_waiting:
            self.selector.unregister(evt)
        self.out_waiting = bool(self.out)

    def user_gone(self) -> None:
        """The user process is gone (its pipes broke): kill everything, exit."""
        if self.cmd is not None:
            self.selector.unregister(self.cmd)
            self.cmd = None
        if self.evt is not None and self.out_waiting:
            self.selector.unregister(self.evt)
        self.evt = None
        self.out_waiting = False
        self.out.clear()
        self.engine.abort(time.monotonic_ns())

    def finish_output(self) -> None:
        """At exit: the last events (and "closed") must reach the user process."""
        if self.evt is not None and self.out:
            os.set_blocking(self.evt.fileno(), True)
            try:
                while self.out:
                    del self.out[: os.write(self.evt.fileno(), self.out)]
            except OSError:
                pass


def main() -> None:
    cmd, evt, config = _BOOT
    sys.path[:] = config["sys_path"]
    dispatcher = Dispatcher(cmd, evt, config)
    code = 0
    try:
        dispatcher.run()
    except BaseException:  # noqa: BLE001 - a bug: say so, and leave no worker behind
        traceback.print_exc()
        dispatcher.engine.abort(time.monotonic_ns())
        code = 1
    # os._exit skips multiprocessing's finalizers, among them the one that
    # removes its temporary directory (the forkserver's socket): do that here.
    # (It is the user process's directory: if we are SIGKILLed, it removes it.)
    tempdir = multiprocessing.process.current_process()._config.get("tempdir")  # type: ignore[attr-defined]
    if tempdir:
        shutil.rmtree(tempdir, ignore_errors=True)
    # Every worker is gone; skip multiprocessing's atexit joins.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
