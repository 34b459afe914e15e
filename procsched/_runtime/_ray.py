"""The Ray runner: the same Engine in a dispatcher thread of the user
process; every run is a Ray task.

    caller ── command ──▶ inbox ──▶ dispatcher thread (_dispatch_thread.py): Engine
                          ▲    │        │ RayCarrier.send_run: remote(run).remote(...)
      Ray's callback  ────┘    │        ▼                          ray.cancel(force=True)
      thread: Landed           │    Ray task on the cluster (_ray_task.run)
      (ObjectRef.future()),    │
      Mail (Mailbox.take) ◀────│─── Mailbox actor ◀── current_scheduler() in a run
                               └──▶ event batches ──▶ the facade's listener thread

Connecting is Ray's usual way: a Ray already initialised in this process is
used as is; otherwise ``ray.init()``, which honours ``RAY_ADDRESS`` and else
starts a local cluster (shut down again with the last scheduler using it).

A *worker* of this carrier is a virtual slot: ``workers`` bounds the runs in
flight, and Ray places them. Each run is a Ray task with ``max_retries=0``
and ``retry_exceptions=False`` (Ray's defaults retry a task 3 times after a
system failure, and forever after an OOM kill): nothing is run twice behind
the user's back. Its end comes back without polling: the ObjectRef's future
calls back on a Ray thread, which only puts a message in the inbox; the
dispatcher thread maps it onto the engine:

- a result (the wrapper's blobs): ``ok`` or ``error`` (the task's own
  exception and remote traceback), times converted to the scheduler's clock;
- ``WorkerCrashedError``, ``NodeDiedError``, ``OutOfMemoryError`` (and the
  other ways Ray loses a running task): the worker "died": ``crashed``;
- a run the engine stopped (timeout, ``cancel(interrupt=True)``) is
  cancelled with ``ray.cancel(force=True)``, which ends its Ray worker; the
  slot waits for Ray to confirm, or the kill grace, whichever is first.

Ray does not say when a queued task starts, so timeouts count from
submission (``Engine.started`` is never called).

A local cluster that ``ray.init()`` starts here (no ``RAY_ADDRESS``) gets
this program's import path (``runtime_env`` ``PYTHONPATH``: what the
processes runner can import, Ray's workers can). Its ``gcs_server`` and
``raylet`` - this program's descendants - are watched (``ClusterWatch``: a
thread blocked on their pidfds): if one dies, the runs in flight are
recorded ``crashed`` at once and the scheduler is broken (every unfinished
handle fails with the reason), as when the processes runner's dispatcher
dies; Ray itself would wait for its cluster for a minute or more.
"""

from __future__ import annotations

import itertools
import os
import select
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from .._core import Run
from .._errors import SchedulerClosedError, SchedulerError
from . import _messages as m
from . import _ray_messages as rm
from . import _ray_task
from . import _run_requests as run_requests
from ._carrier import Carrier
from ._dispatch_thread import DispatcherThread
from ._engine import WARNING
from ._wire import pack_call, pack_error

#: Ids of tasks added from inside Ray runs (the facade numbers its own from 1).
INNER_IDS_START = 1 << 48
#: The ray.exceptions that mean "the run's worker (or node) is gone".
CRASHES = (
    "WorkerCrashedError",
    "NodeDiedError",
    "OutOfMemoryError",
    "LocalRayletDiedError",
    "TaskCancelledError",
    "ObjectLostError",
)
INSTALL_HINT = 'Scheduler(runner="ray") needs Ray: pip install "procsched[ray]"'

_lock = threading.Lock()
_opened = False  # this module called ray.init(): it shuts Ray down after its last user
_users = 0
_shutting_down: threading.Thread | None = None  # Ray's shutdown after its cluster was lost


def ray_module() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise SchedulerError(f"{INSTALL_HINT} ({type(exc).__name__}: {exc})") from exc
    return ray


def connect(hold: bool = False) -> Any:
    """Ray, initialised as the user expects; ``hold`` counts a user of a
    connection this module opened (see ``release``)."""
    global _opened, _users, _shutting_down
    ray = ray_module()
    with _lock:
        if _shutting_down is not None:  # (a shutdown of a lost cluster: see release)
            _shutting_down.join()
            _shutting_down = None
        if not ray.is_initialized():
            try:
                ray.init(**_init_options())
            except Exception as exc:
                raise SchedulerError(f"could not start or reach Ray: {type(exc).__name__}: {exc}") from exc
            _opened = True
        if hold and _opened:
            _users += 1
    return ray


def _init_options() -> dict[str, Any]:
    """``ray.init()``'s options: with no ``RAY_ADDRESS`` (a local cluster,
    started here or by ``ray start`` on this machine), the workers get
    this program's import path, so that a function the processes runner
    can import (a module beside the script, a test module) imports on Ray
    too. A cluster named by ``RAY_ADDRESS`` is left to its own paths (its
    nodes may be other machines): ship code there with your own
    ``ray.init(runtime_env=...)``."""
    if os.environ.get("RAY_ADDRESS"):
        return {}
    paths = list(dict.fromkeys(os.path.abspath(p or os.curdir) for p in sys.path))
    return {"runtime_env": {"env_vars": {"PYTHONPATH": os.pathsep.join(paths)}}}


def release(background: bool = False) -> None:
    """A user of the connection is done; the last one shuts Ray down (in a
    thread with ``background``: Ray takes seconds to give up on a dead
    cluster; the next ``connect`` waits for it)."""
    global _opened, _users
    with _lock:
        if not _opened:
            return
        _users -= 1
        if _users > 0:
            return
        _opened, _users = False, 0
        if background:
            global _shutting_down
            _shutting_down = threading.Thread(target=_shutdown_ray, name="procsched-ray-shutdown", daemon=True)
            _shutting_down.start()
        else:
            _shutdown_ray()


def _shutdown_ray() -> None:
    ray = ray_module()
    if ray.is_initialized():
        ray.shutdown()


def cluster_cpus() -> int:
    """The default pool size: the cluster's CPUs."""
    return max(1, int(connect().cluster_resources().get("CPU", 1)))


class ClusterWatch:
    """Waits, in a thread blocked on their pidfds, for the death of the Ray
    cluster's own processes (``gcs_server``, ``raylet``) that are this
    program's descendants - a cluster ``ray.init()`` started here - and
    then puts ``RayLost`` in the dispatcher's inbox. Watches nothing for a
    cluster started elsewhere."""

    NAMES = ("gcs_server", "raylet")

    def __init__(self, put: Callable[[m.Message], object]) -> None:
        self.put = put
        self.watched: dict[int, str] = {}  # pidfd -> what it is, in words
        self.wake_w = -1
        psutil = _psutil()
        for proc in psutil.Process().children(recursive=True):
            try:
                name = proc.name()
            except psutil.Error:
                continue  # gone already (one of Ray's that is gone is caught below)
            if name not in self.NAMES:
                continue
            what = f"Ray's {name} (pid {proc.pid}) exited"
            try:
                self.watched[os.pidfd_open(proc.pid)] = what
            except OSError:
                put(rm.RayLost.wire(what))
        if self.watched:
            self.wake_r, self.wake_w = os.pipe()
            threading.Thread(target=self._wait, name="procsched-ray-watch", daemon=True).start()

    def _wait(self) -> None:
        try:
            poll = select.poll()
            for fd in (*self.watched, self.wake_r):
                poll.register(fd, select.POLLIN)
            for fd, _ in poll.poll():  # (blocks until a death, or stop())
                if fd in self.watched:
                    self.put(rm.RayLost.wire(self.watched[fd]))
                    break
        finally:
            for fd in (*self.watched, self.wake_r):
                os.close(fd)

    def stop(self) -> None:
        """Stop watching (the scheduler closed)."""
        if self.wake_w >= 0:
            try:
                os.write(self.wake_w, b"x")
            except OSError:
                pass  # it has stopped already (it saw a death)
            os.close(self.wake_w)
            self.wake_w = -1


def _psutil() -> Any:
    import psutil

    return psutil


class _RayWorker:
    """A virtual worker: a place for one run in flight."""

    __slots__ = ("ident", "ref", "killed", "reported", "output")

    def __init__(self, ident: str) -> None:
        self.ident = ident
        self.output: str | None = None  # its last run's captured output
        self.ref: Any = None  # the ObjectRef of the run in flight
        self.killed = False  # the engine stopped it: its end is an exit, not a result
        self.reported = False  # its exit was reported to the engine

    def __repr__(self) -> str:
        return f"<ray worker {self.ident}>"


class RayCarrier(Carrier):
    """Submits runs as Ray tasks and cancels them for the engine. (No RSS
    or health of its own: Ray places runs on processes we do not own, and
    watches its workers and nodes.)"""

    def __init__(self, ray: Any, inbox: Any, mailbox: str, capture: bool = False) -> None:
        self.ray = ray
        self.capture = capture  # capture each run's output (see _ray_task.run)
        self.inbox = inbox
        self.mailbox = mailbox
        self.remote = ray.remote(max_retries=0, retry_exceptions=False)(_ray_task.run)
        self.serial = 0
        self.lost = False  # the cluster is gone: no Ray call from now on (each would wait for it)

    def spawn(self, slot: int) -> _RayWorker:
        self.serial += 1
        return _RayWorker(f"ray-{slot}.{self.serial}")

    def send_run(self, worker: _RayWorker, run: Run) -> None:
        fn_blob, arg_blob, *options = run.payload
        now = time.monotonic_ns()
        try:
            remote = self.remote.options(**options[0]) if options else self.remote
            ref = remote.remote(
                fn_blob,
                arg_blob,
                run.task_id,
                run.run,
                run.scheduled_ns,
                time.time_ns() - now,
                self.mailbox,
                run.attempt,
                run.wall_ns,
                run.retry_on,
                self.capture,
            )
        except Exception as exc:  # noqa: BLE001 - Ray refused the task: the run fails with its reason
            err = SchedulerError(f"Ray did not accept task {run.task_id} run {run.run}: {type(exc).__name__}: {exc}")
            blob, error = pack_error(err)
            done = m.Done.wire(run.task_id, run.run, "error", now, now, m.BLOB_ERROR, blob, False, None, error)
            self.inbox.put(m.Finished.wire(worker, done))
            return
        worker.ref = ref
        put, clock, task_id, run_no = self.inbox.put, time.monotonic_ns, run.task_id, run.run
        # Called on a Ray thread (or here, if the run is already over): only queue it.
        ref.future().add_done_callback(lambda f: put(rm.Landed.wire(worker, task_id, run_no, now, f, clock())))

    def kill(self, worker: _RayWorker, hard: bool) -> None:
        """Cancel the run in flight (its Ray worker exits). Its end reports the
        exit; a hard kill (the grace is over) stops waiting for Ray to say so."""
        if worker.ref is not None and not worker.killed and not self.lost and self.ray.is_initialized():
            try:
                self.ray.cancel(worker.ref, force=True)
            except Exception:  # noqa: BLE001 - already finished, or Ray is gone
                pass
        worker.killed = True
        if (hard or worker.ref is None) and not worker.reported:
            worker.reported = True
            self.inbox.put(m.Exited.wire(worker, None, None))

    def output(self, worker: _RayWorker) -> str | None:
        return worker.output

    def retire(self, worker: _RayWorker) -> None:
        worker.killed = worker.reported = True
        self.inbox.put(m.Exited.wire(worker, 0, None))


class RayBackend(DispatcherThread):
    pickled = True

    def __init__(self, config: dict[str, Any], scheduler: Any) -> None:
        super().__init__()
        self.ray = ray = connect(hold=True)
        known = vars(ray.exceptions)  # (which of them this Ray version has)
        crashes = tuple(known[name] for name in CRASHES if name in known)
        self.crashes: tuple[type[BaseException], ...] = crashes
        self.inner_ids = itertools.count(INNER_IDS_START)
        name = f"procsched-mailbox-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        try:
            mailbox_class = ray.remote(num_cpus=0, max_restarts=0)(_ray_task.Mailbox)
            self.mailbox = mailbox_class.options(name=name).remote()
            self.carrier = RayCarrier(ray, self.inbox, name, config["capture_output"])
        except BaseException:
            release()
            raise
        self._take()
        self.watch = ClusterWatch(self.inbox.put)
        self._start(self.carrier, config)

    def pack(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bytes, bytes]:
        return pack_call(fn, args, kwargs)

    def with_options(self, payload: tuple[Any, ...], options: dict[str, Any]) -> tuple[Any, ...]:
        """The payload of a run with Ray options, which Ray checks here, at the call."""
        try:
            self.carrier.remote.options(**options)
        except (ValueError, TypeError) as exc:
            raise type(exc)(f"ray_options {options!r} rejected by Ray: {exc}") from None
        return (*payload, options)

    def abort(self) -> None:
        self.inbox.put(rm.Abort.wire())

    # -- the dispatcher thread ---------------------------------------------------

    def _handle(self, message: tuple[Any, ...]) -> None:
        tag = message[0]
        if tag == rm.LANDED:
            self._landed(m.view(rm.Landed, message))
        elif tag == rm.MAIL:
            self._mail(m.view(rm.Mail, message).future)
        elif tag == rm.ABORT:
            self.engine.abort(time.monotonic_ns())
        elif tag == rm.RAY_LOST:
            self._lost(m.view(rm.RayLost, message).detail)
        else:
            super()._handle(message)

    def _landed(self, landed: rm.Landed) -> None:
        engine = self.engine
        worker, task_id, run_no, sent, future, now = (
            landed.worker,
            landed.task_id,
            landed.run,
            landed.sent_ns,
            landed.future,
            landed.now_ns,
        )
        worker.ref = None
        if worker.reported:
            return  # its exit was reported already (hard kill)
        if worker.killed:  # a timeout or interrupt: the engine recorded the run
            worker.reported = True
            engine.worker_exited(worker, None, now)
            return
        exc = future.exception()
        worker.output = None
        if exc is None:
            result: rm.RayOutcome = future.result()
            worker.output = result.output
            # The node's wall clock -> the scheduler's monotonic clock, kept
            # within what this process saw (clocks of other nodes may be off).
            offset = time.time_ns() - time.monotonic_ns()
            started = min(max(result.started_ns - offset, sent), now)
            finished = min(max(result.finished_ns - offset, started), now)
            done = m.Done(
                m.DONE,
                task_id,
                run_no,
                result.outcome,
                started,
                finished,
                result.blob_kind,
                result.blob,
                result.matched,
                None,
                result.error,
            )
            engine.finished(worker, done)
        elif isinstance(exc, self.crashes):
            worker.reported = True
            text = str(exc).strip().split("\n")[0][:300]
            engine.worker_exited(worker, None, now, f"Ray {type(exc).__name__}: {text}")
        else:  # Ray could not run the wrapper (e.g. procsched not installed on the node)
            blob, error = pack_error(exc)
            engine.finished(
                worker, m.Done(m.DONE, task_id, run_no, "error", sent, now, m.BLOB_ERROR, blob, False, None, error)
            )

    def _lost(self, detail: str) -> None:
        """Ray's cluster is gone: its runs in flight crashed, and the
        scheduler is broken (see the module docstring)."""
        if self.lost is not None or self.engine.closed:
            return
        engine, now = self.engine, time.monotonic_ns()
        self.lost = f"Ray's cluster is gone ({detail})"
        self.carrier.lost = True
        for slot in engine.slots:
            worker = slot.worker
            if worker is not None and worker.ref is not None and not worker.reported:
                worker.reported = True
                engine.worker_exited(worker, None, now, self.lost)
        engine.abort(now)

    def _take(self) -> None:
        """Long-poll the mailbox for requests from runs (current_scheduler())."""
        if self.lost is not None or not self.ray.is_initialized():
            return  # see _closed
        put = self.inbox.put
        self.mailbox.take.remote().future().add_done_callback(lambda f: put(rm.Mail.wire(f)))

    def _mail(self, future: Any) -> None:
        try:
            batch = future.result()
        except Exception as exc:  # noqa: BLE001 - the actor died
            if not self.engine.closing and self.lost is None:
                self.engine.log(
                    WARNING,
                    f"the Ray mailbox actor failed ({type(exc).__name__}: {exc}); "
                    "current_scheduler() no longer works inside Ray runs",
                )
            return
        now = time.monotonic_ns()
        for request, message in batch:
            try:
                reply = self._serve(message, now)
            except Exception as exc:  # noqa: BLE001 - a malformed request
                reply = m.Refusal.wire(SchedulerError(f"bad request from a Ray run: {type(exc).__name__}: {exc}"))
            if self.lost is None and self.ray.is_initialized():
                self.mailbox.answer.remote(request, reply)
        self._take()

    def _serve(self, message: m.Message, now: int) -> m.Message:
        engine, tag = self.engine, message[0]
        if tag == m.ADD:
            if engine.closing:
                return m.Refusal.wire(SchedulerClosedError("the scheduler is shutting down"))
            add = m.view(m.Add, message)  # its due time is None: the node's clock means nothing here
            if add.schedule is not None:
                engine.set_wall_offset(time.time_ns() - now, now)
            task_id = next(self.inner_ids)
            why = engine.add(add, task_id, add.payload, now)
            if why is not None:
                return m.Refusal.wire(ValueError(f"task {task_id} cannot be scheduled: {why}"[:300]))
            due = engine.due(task_id)
            engine.emit(
                m.TaskAdded.wire(
                    task_id, add.name, now + add.delay_ns if due is None else due, add.key, engine.next_wall(task_id)
                )
            )
            return m.Reply.wire((task_id, due))
        if tag in run_requests.TAGS:  # cancel, pause, resume, run now, backfill
            return run_requests.serve(engine, message, now, lambda: (time.time_ns() - now, now))
        raise ValueError(f"unknown request {tag!r}")

    def _closed(self) -> None:
        # Every Ray call checks is_initialized() first where Ray may be shut
        # down already (at interpreter exit, Ray's atexit hook runs before
        # ours): Ray's API would otherwise call ray.init() again by itself.
        self.watch.stop()
        if self.lost is not None:
            release(background=True)
            return
        if self.ray.is_initialized():
            try:
                self.ray.kill(self.mailbox, no_restart=True)
            except Exception:  # noqa: BLE001 - Ray is going away
                pass
        release()

    def _failed(self) -> None:
        self.engine.abort(time.monotonic_ns())
        self._closed()
