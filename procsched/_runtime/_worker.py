"""The worker process: runs one run at a time for the dispatcher.

    dispatcher ──("run", task, run, scheduled, payload[, attempt, wall, retry_on])──▶ worker
               ◀─("done", task, run, outcome, started, finished, blob, matched)──
               ◀─("add" | "cancel", ...) ─▶ ("reply", value)   current_scheduler()
               ──("stop",) ─▶ exits

Each worker has its own duplex pipe, so a worker that dies mid-message
corrupts nothing but that pipe, which dies with it. The worker leads its own
process group, so the dispatcher can kill a run's whole tree (including the
task's own children, even orphaned ones) with one ``killpg``. It ignores
SIGINT (Ctrl-C is the user process's business), has faulthandler on, and
dies with its parent (PR_SET_PDEATHSIG on Linux; an idle worker also exits
on EOF from its pipe).
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import signal
import sys
import time
from multiprocessing.connection import Connection
from typing import Any, Callable, NoReturn

from .._api import SchedulingAPI
from .._context import running
from .._errors import SchedulerError
from .._handle import RunInfo, TaskHandle, wall_datetime
from .._validate import TaskSpec, flag, task_id as task_id_, wire_extra
from ._engine import BLOB_ERROR
from ._wire import PROTOCOL, CallLoader, FrameReader, pack_call, pack_error, pack_value

NS = 1_000_000_000


def main(conn: Connection) -> None:
    """Entry point of a worker process (the target of its multiprocessing.Process)."""
    _become_worker()
    reader = FrameReader(conn.fileno())
    proxy = _WorkerScheduler(conn, reader)
    load = CallLoader().load
    recv, send, loads, dumps = reader.next, conn.send_bytes, pickle.loads, pickle.dumps
    pid = os.getpid()
    clock = time.monotonic_ns
    while True:
        try:
            message = loads(recv())
        except (EOFError, OSError):
            return  # the dispatcher is gone
        if message[0] == "stop":
            return
        task_id, run_no, scheduled, payload = message[1:5]
        attempt, wall, retry_on = message[5:8] if len(message) == 8 else (1, None, None)
        started = clock()
        if wall is None:
            wall = scheduled + time.time_ns() - started
        info = RunInfo(task_id, run_no, scheduled / NS, started / NS, None, pid, None, attempt, wall_datetime(wall))
        unfit = False
        matched = False
        try:
            fn, args, kwargs = load(payload)
            with running(info, proxy):
                value = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - the task's failure is its result
            # After a MemoryError this process is suspect (a task may have
            # lowered its rlimit, or wrecked the heap): ask to be replaced.
            unfit = isinstance(exc, MemoryError)
            outcome, kind, blob = "error", BLOB_ERROR, pack_error(exc)
            if retry_on is not None:
                matched = _retry_matches(exc, retry_on)
        else:
            kind, blob = pack_value(value)
            outcome = "ok" if kind != BLOB_ERROR else "error"
        done: tuple[Any, ...] = ("done", task_id, run_no, outcome, started, clock(), kind, blob, matched)
        if unfit:
            done += ("replaced after a MemoryError",)
        try:
            send(dumps(done, PROTOCOL))
        except (BrokenPipeError, OSError):
            return


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


def _become_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    faulthandler.enable()
    try:
        os.setpgid(0, 0)
    except OSError:
        pass  # already a group leader
    _let_go_of_forkserver()
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        parent = os.getppid()
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)


def _let_go_of_forkserver() -> None:
    """A forkserver child inherits the write end of the forkserver's "alive"
    pipe, so the forkserver outlives the dispatcher for as long as any of its
    workers runs - and the workers, which die with their parent, outlive it
    too. Close it: then the dispatcher's death ends the forkserver, and that
    ends the workers. (A task that uses forkserver itself gets its own.)"""
    from multiprocessing import forkserver

    server = forkserver._forkserver  # type: ignore[attr-defined]
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
        server._forkserver_alive_fd = None  # type: ignore[attr-defined]
        server._forkserver_address = None  # type: ignore[attr-defined]


class _WorkerScheduler(SchedulingAPI):
    """``current_scheduler()`` inside a worker: asks the dispatcher over the
    worker's own pipe and waits for its answer."""

    def __init__(self, conn: Connection, reader: FrameReader) -> None:
        self._conn = conn
        self._reader = reader

    def _check_open(self) -> None:
        pass  # the dispatcher answers for itself

    def _ask(self, message: tuple[Any, ...]) -> Any:
        self._conn.send_bytes(pickle.dumps(message, PROTOCOL))
        reply = pickle.loads(self._reader.next())
        if reply[0] == "error":
            raise reply[1]
        return reply[1] if len(reply) == 2 else reply[1:]

    def _add(self, spec: TaskSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> TaskHandle:
        """Scheduled by the dispatcher. A ``key`` is registered with the
        scheduler's process when it hears of the task; it is not checked
        against live keys here (decision: the user process owns keys)."""
        payload = pack_call(fn, args, kwargs)
        now = time.monotonic_ns()
        due = now + spec.delay_ns
        message: tuple[Any, ...] = ("add", due, spec.priority, spec.kind.value, spec.period_ns, spec.misfire.value,
                                    spec.stop_on_error, spec.timeout_ns, spec.name, payload)  # fmt: skip
        if spec.has_extra or spec.key is not None:
            message += (wire_extra(spec, now, True), spec.key)
        reply = self._ask(message)
        task_id, due = (reply, due) if isinstance(reply, int) else reply
        return _DetachedHandle(self, task_id, spec.name, None if due is None else due / NS, spec.key)

    def cancel(self, task_id: int, *, interrupt: bool = False) -> bool:
        flag("interrupt", interrupt)
        return bool(self._ask(("cancel", task_id_(task_id), interrupt)))


class _DetachedHandle(TaskHandle):
    """A handle made inside a worker: ``id``, ``name`` and ``cancel()`` work;
    its outcome is followed from the scheduler's own process
    (``Scheduler.handle(id)``), not here."""

    def result(self, timeout: float | None = None) -> NoReturn:
        raise SchedulerError(
            f"task {self.id} was scheduled from inside a worker: follow its result "
            "from the scheduler's process with Scheduler.handle(task_id)"
        )

    exception = result  # type: ignore[assignment]
