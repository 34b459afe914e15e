"""The worker process: runs one run at a time for the dispatcher.

    dispatcher ──RunOrder ──────────────▶ worker     (the records: _messages.py)
                 or, for a large payload, RunHeader + 2 raw frames (the
                 pickled function, arguments)
               ──ticket pipe: one byte per run ──▶ taken as the run starts
               ◀─Skipped                  a run without its byte (revoked): passed over
               ◀─Stalled ─▶ Checked        continued after a stop (SIGCONT), or a keyed run
                                          past its start_by: no ticket is taken before the
                                          dispatcher has checked its claims
               ◀─Started                  only with report_start (a timeout counts from here)
               ◀─Done                     the run's outcome, times and result blob
               ◀─Add | Cancel | Pause | Resume | RunNow | Backfill ─▶ Reply | Refusal
                                          current_scheduler(), from the run (_run_requests.py)
               EOF on the pipe ─▶ exits

Each worker has its own duplex pipe, so a worker that dies mid-message
corrupts nothing but that pipe, which dies with it. The pipe is shared by
the main loop and any thread of a running task that uses
``current_scheduler()``: ``_Channel`` routes what arrives (replies to the
one request in flight, everything else to the main loop) and sends one
frame at a time; requests are serialised, so a reply always belongs to the
request in flight. A ``current_scheduler()`` kept past its run fails with
SchedulerError.

The worker leads its own process group, so the dispatcher can kill a run's
whole tree (including the task's own children, even orphaned ones) with one
``killpg``. It ignores SIGINT (Ctrl-C is the user process's business), has
faulthandler on, and dies with its parent (PR_SET_PDEATHSIG on Linux; an
idle worker also exits on EOF from its pipe). With output capture, file
descriptors 1 and 2 point at a file the dispatcher reads when a run ends
(even by a crash: the faulthandler trace is in it); it is emptied as each
run starts.

Runs may arrive ahead of time (prefetch): they wait in the pipe, in order.
A run starts only if its ticket - one byte the dispatcher wrote to the
ticket pipe before the run - is still there to read; the dispatcher reads it
back to revoke a run that has not started (see ``ProcessCarrier`` in
``_dispatcher.py``). The run's function and arguments are loaded before its
ticket is taken, so a stop during a long import is checked for before the
run starts. Its result goes out before the next run's ticket is taken, so
at most one run is started and unreported.
"""

from __future__ import annotations

import collections
import faulthandler
import functools
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, NoReturn

from .._api import SchedulingAPI
from .._context import begin_run, end_run
from .._core._units import NS
from .._errors import SchedulerError
from .._handle import RunError, TaskHandle, run_in_progress
from .._validate import TaskSpec, flag
from .._validate import task_id as task_id_
from ._messages import (
    BLOB_ERROR,
    CHECKED,
    OUTPUT_TAIL,
    REFUSAL,
    REPLY,
    RUN,
    RUN_HEADER,
    Add,
    Backfill,
    Cancel,
    Done,
    Pause,
    Refusal,
    Reply,
    Resume,
    RunHeader,
    RunNow,
    RunOrder,
    Skipped,
    Stalled,
    Started,
    view,
)
from ._wire import PROTOCOL, CallLoader, FrameReader, carried_classes, pack_call, pack_error, pack_value, send_frame


def main(conn: Connection, capture: str | None = None, tickets: Connection | None = None) -> None:
    """Entry point of a worker process (the target of its multiprocessing.Process)."""
    _become_worker(conn)
    if capture is not None:
        out = os.open(capture, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, 1)
        os.dup2(out, 2)
        tail = os.open(capture, os.O_RDONLY)  # what a run wrote, read back for its report
    channel = _Channel(conn)
    load = CallLoader().load
    send, dumps = channel.send, pickle.dumps
    pid = os.getpid()
    clock = time.monotonic_ns
    ticket_fd = -1 if tickets is None else tickets.fileno()
    if ticket_fd >= 0:
        os.set_blocking(ticket_fd, False)
    skipped = dumps(Skipped.wire(), PROTOCOL)
    # Stopped and continued (SIGSTOP/SIGCONT, a frozen container): this
    # scheduler's lease may have expired meanwhile and another one retried
    # the runs given ahead here. None starts before the dispatcher has
    # checked (issue 20 item 1).
    continued = threading.Event()
    if ticket_fd >= 0:
        signal.signal(signal.SIGCONT, lambda _signo, _frame: continued.set())
    retiring = False  # after a MemoryError: start nothing more (the dispatcher takes back what we hold)
    while True:
        try:
            message = channel.order()
        except (EOFError, OSError):
            return  # the dispatcher is gone
        order: RunOrder | RunHeader
        if message[0] == RUN:
            order = view(RunOrder, message)
            fn_blob, arg_blob = order.fn_blob, order.arg_blob
        else:  # a large payload follows as two raw frames
            order = view(RunHeader, message)
            fn_blob, arg_blob = channel.order(), channel.order()
        task_id, run_no, scheduled = order.task_id, order.run, order.scheduled_ns
        if ticket_fd >= 0 and retiring:
            continue
        # Loaded before the start is decided below: an import or a large
        # argument takes a while, and a stop landing in it must be seen
        # before the run starts (the fault campaign, seed 2222: a fresh
        # worker, stopped while importing the task's module, started the
        # run after SIGCONT though another scheduler had retried it).
        loaded: tuple[Any, Any, Any] | BaseException
        try:
            loaded = load((fn_blob, arg_blob))
        except BaseException as exc:  # noqa: BLE001 - the run's error, if it starts (below)
            loaded = exc
        del fn_blob, arg_blob
        if ticket_fd >= 0:
            wait = scheduled - clock()
            if wait > 0:  # given early (see _engine.py, "Early hand-off"): start on time, if not revoked by then
                time.sleep(wait / NS)
            # Stopped and continued, or a keyed run that would start after
            # its start_by (it waited behind a long run; the lease it was
            # given under may have run out): checked first.
            if continued.is_set() or 0 < order.start_by < clock():
                continued.clear()
                send(dumps(Stalled.wire(), PROTOCOL))
                if not _await_checked(channel):
                    return  # the dispatcher is gone
            try:
                ticket = os.read(ticket_fd, 1)
            except BlockingIOError:
                ticket = b""
            if not ticket:  # revoked: it never starts
                send(skipped)
                continue
        attempt, wall, retry_on = order.attempt, order.wall_ns, order.retry_on
        if capture is not None:
            os.ftruncate(out, 0)  # O_APPEND: the next write lands at 0
        proxy = _WorkerScheduler(channel, task_id, run_no)
        unfit = False
        matched = False
        error: RunError | None
        started = 0
        try:
            if isinstance(loaded, BaseException):
                raise loaded  # loading the function or its arguments failed
            fn, args, kwargs = loaded
            started = clock()
            if order.report_start:
                send(dumps(Started.wire(task_id, run_no, started), PROTOCOL))
            if wall is None:
                wall = scheduled + time.time_ns() - started
            # current_run()'s RunInfo is made only if the task asks for it (a
            # few microseconds a run, as much as a no-op task's whole run)
            token = begin_run(
                functools.partial(
                    run_in_progress, task_id, run_no, scheduled, started, pid, attempt, wall, order.cause or "schedule"
                ),
                proxy,
            )
            try:
                value = fn(*args, **kwargs)
            finally:
                end_run(token)
        except BaseException as exc:  # noqa: BLE001 - the task's failure is its result
            # After a MemoryError this process is suspect (a task may have
            # lowered its rlimit, or wrecked the heap): ask to be replaced.
            unfit = isinstance(exc, MemoryError)
            outcome, kind = "error", BLOB_ERROR
            blob, error = pack_error(exc)
            started = started or clock()  # 0: loading the function or its arguments failed
            if retry_on is not None:
                matched = _retry_matches(exc, retry_on)
        else:
            kind, blob, error = pack_value(value)
            outcome = "ok" if kind != BLOB_ERROR else "error"
        finally:
            value = args = kwargs = loaded = None  # type: ignore[assignment]
        output = None
        if capture is not None:
            _flush()
            output = _tail(tail)
        done = Done.wire(
            task_id,
            run_no,
            outcome,
            started,
            clock(),
            kind,
            blob,
            matched,
            "replaced after a MemoryError" if unfit else None,
            error,
            output,
        )
        retiring = retiring or unfit
        try:
            proxy._end(dumps(done, PROTOCOL))
        except (BrokenPipeError, OSError):
            return


def _tail(fd: int) -> str:
    """The last OUTPUT_TAIL bytes of the capture file, as text."""
    try:
        size = os.fstat(fd).st_size
        return os.pread(fd, OUTPUT_TAIL, max(0, size - OUTPUT_TAIL)).decode("utf-8", "replace")
    except OSError:
        return ""


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a task replaced or closed it
            pass


_retry_classes: dict[bytes, tuple[type[BaseException], ...]] = {}


def _retry_matches(exc: BaseException, blob: bytes) -> bool:
    """Is ``exc`` one of the classes ``Retry.on`` names? Decided here, where
    the exception exists: the dispatcher never unpickles user classes."""
    classes = _retry_classes.get(blob)
    if classes is None:
        try:
            classes = pickle.loads(blob)
        except Exception:  # noqa: BLE001 - a class that cannot be imported here matches nothing
            classes = ()
        if len(_retry_classes) < 256:
            _retry_classes[blob] = classes
    return isinstance(exc, classes)


def _become_worker(conn: Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    faulthandler.enable()
    try:
        os.setpgid(0, 0)
    except OSError:
        pass  # already a group leader
    forked_by_forkserver = _let_go_of_forkserver()
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if forked_by_forkserver:  # a helper's death is not the dispatcher's (see _forkserver.py)
            from ._forkserver import die_with_the_dispatcher

            die_with_the_dispatcher(libc, conn.fileno())
            return
        parent = os.getppid()
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)


def _let_go_of_forkserver() -> bool:
    """A forkserver child inherits the write end of the forkserver's "alive"
    pipe, so the forkserver outlives the dispatcher for as long as any of its
    workers runs - and the workers, which die with their parent, outlive it
    too. Close it: then the dispatcher's death ends the forkserver, and that
    ends the workers. (A task that uses forkserver itself gets its own.)
    True if this process was forked by a forkserver."""
    from multiprocessing import forkserver

    server: Any = forkserver._forkserver
    try:
        fd = server._forkserver_alive_fd
    except AttributeError:  # a multiprocessing without it: nothing to let go of
        return False
    if fd is None:
        return False
    try:
        os.close(fd)
    except OSError:
        pass
    server._forkserver_alive_fd = None
    server._forkserver_address = None
    return True


def _await_checked(channel: _Channel) -> bool:
    """Wait for the dispatcher's ``Checked``; the orders that come before
    it stay queued, in order. False: the pipe ended."""
    kept = []
    try:
        while True:
            message = channel.order()
            if type(message) is tuple and message[0] == CHECKED:
                break
            kept.append(message)
    except (EOFError, OSError):
        return False
    channel.orders.extendleft(reversed(kept))
    return True


class _Channel:
    """The worker's end of its pipe, shared by the main loop and the threads
    of a running task (see the module docstring). Whichever thread needs a
    frame and finds none waiting reads the pipe (one reader at a time) and
    routes every frame it brings: replies to ``replies``, the rest (runs,
    their two raw frames) to ``orders``."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.reader = FrameReader(conn.fileno())
        self.cond = threading.Condition(threading.Lock())  # guards the fields below
        self.orders: collections.deque[Any] = collections.deque()
        self.replies: collections.deque[Any] = collections.deque()
        self.reading = False
        self.waiters = 0  # threads waiting for the reader
        self.eof = False
        self.raw = 0  # raw frames (a run's function and arguments) still to come
        self.send_lock = threading.Lock()  # one frame at a time on the pipe
        self.request_lock = threading.Lock()  # one request in flight: the next reply is its

    def send(self, frame: bytes) -> None:
        with self.send_lock:
            send_frame(self.conn, frame)

    def order(self) -> Any:
        return self._take(self.orders)

    def reply(self) -> Any:
        return self._take(self.replies)

    def _take(self, queue: collections.deque[Any]) -> Any:
        if queue:  # one consumer per queue, and deque.popleft is atomic: no lock needed
            return queue.popleft()
        cond = self.cond
        with cond:
            while not queue:
                if self.eof:
                    raise EOFError
                if self.reading:
                    self.waiters += 1
                    cond.wait()
                    self.waiters -= 1
                    continue
                self.reading = True
                cond.release()
                try:
                    frames = self.reader.read()
                except BaseException:
                    cond.acquire()
                    self.reading, self.eof = False, True
                    cond.notify_all()
                    raise
                cond.acquire()
                self.reading = False
                self._route(frames)
                if self.waiters:  # (the main loop alone, the usual case: no one to wake)
                    cond.notify_all()
            return queue.popleft()

    def _route(self, frames: list[bytes]) -> None:
        for frame in frames:
            if self.raw:
                self.raw -= 1
                self.orders.append(frame)
                continue
            message = pickle.loads(frame)
            if message[0] in (REPLY, REFUSAL):
                self.replies.append(message)
            else:
                self.orders.append(message)
                if message[0] == RUN_HEADER:
                    self.raw = 2


class _WorkerScheduler(SchedulingAPI):
    """``current_scheduler()`` inside a worker, for one run: asks the
    dispatcher over the worker's pipe and waits for its answer. Safe to use
    from several threads of the task; fails once its run has ended."""

    _zones_travel = True

    def __init__(self, channel: _Channel, task_id: int, run_no: int) -> None:
        self._channel = channel
        self._run = (task_id, run_no)
        self._open = True

    def _check_open(self) -> None:
        if not self._open:
            raise SchedulerError(
                f"current_scheduler() of task {self._run[0]} run {self._run[1]} was used after that run ended"
            )

    def _end(self, done: bytes) -> None:
        """The run is over: report it and refuse later calls. Waits for a
        request in flight, so its reply cannot reach the main loop."""
        with self._channel.request_lock:
            self._open = False
            self._channel.send(done)

    def _ask(self, message: tuple[Any, ...]) -> Any:
        channel = self._channel
        with channel.request_lock:
            self._check_open()
            channel.send(pickle.dumps(message, PROTOCOL))
            try:
                reply = channel.reply()
            except (EOFError, OSError):
                raise SchedulerError("the dispatcher is gone") from None
        if reply[0] == REFUSAL:
            raise view(Refusal, reply).error
        return view(Reply, reply).value

    def _add(self, spec: TaskSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> TaskHandle:
        """Scheduled by the dispatcher. A ``key`` is registered with the
        scheduler's process when it hears of the task; it is not checked
        against live keys here (decision: the user process owns keys)."""
        payload = pack_call(fn, args, kwargs)
        due = time.monotonic_ns() + spec.delay_ns  # (the machine's monotonic clock is the dispatcher's too)
        task_id, due = self._ask(Add.of_spec(spec, None, due, None, payload, carried_classes(spec.retry, True)))
        return _DetachedHandle(self, task_id, spec.name, None if due is None else due / NS, spec.key)

    def cancel(self, task_id: int, *, interrupt: bool = False) -> bool:
        flag("interrupt", interrupt)
        return bool(self._ask(Cancel.wire(0, task_id_(task_id), interrupt)))

    def pause(self, task_id: int) -> bool:
        return bool(self._ask(Pause.wire(0, task_id_(task_id))))

    def resume(self, task_id: int) -> bool:
        return bool(self._ask(Resume.wire(0, task_id_(task_id))))

    def _task_id_of(self, key_or_id: str | int) -> int | None:
        if isinstance(key_or_id, str):  # (keys live in the scheduler's own process: see _add)
            raise SchedulerError(
                f"current_scheduler() in a worker names tasks by id, not by key ({key_or_id!r}): "
                "pass the task's id (TaskHandle.id, current_run().task_id)"
            )
        return task_id_(key_or_id)

    def _run_now(self, task_id: int) -> bool:
        return bool(self._ask(RunNow.wire(0, task_id)))

    def _backfill(self, task_id: int, start_ns: int, end_ns: int, dry_run: bool) -> list[int]:
        answer = self._ask(Backfill.wire(0, task_id, start_ns, end_ns, dry_run))
        if isinstance(answer, str):
            raise ValueError(answer)
        return list(answer)


class _DetachedHandle(TaskHandle):
    """A handle made inside a worker: ``id``, ``name`` and ``cancel()`` work;
    its outcome is followed from the scheduler's own process
    (``Scheduler.handle(id)``), not here."""

    def result(self, timeout: float | None = None) -> NoReturn:
        raise SchedulerError(
            f"task {self.id} was scheduled from inside a worker: follow its result "
            "from the scheduler's process with Scheduler.handle(task_id)"
        )

    exception = result
