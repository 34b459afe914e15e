"""What runs on the Ray cluster: the run wrapper and the mailbox actor.

    user process (dispatcher thread, _ray.py)            Ray worker process (any node)
    ┌─────────────────────────────────────┐  Ray task   ┌──────────────────────────────┐
    │ RayCarrier.send_run ────────────────│───────────▶ │ run(): unpickle, call fn,    │
    │  ◀── ObjectRef.future() callback ───│─────────────│  kill what the run started,  │
    │      (outcome, times, result blob)  │             │  return opaque blobs         │
    │                                     │             │ current_scheduler() ─┐       │
    │ long-poll Mailbox.take ◀────────────│── Mailbox actor ◀── ask(request) ─┘       │
    │ Mailbox.answer(request, reply) ─────│──▶ (num_cpus=0, one per Scheduler)        │
    └─────────────────────────────────────┘             └──────────────────────────────┘

User code is unpickled only here, in the Ray worker: the dispatcher thread
forwards the payload's bytes and gets bytes back (the result and exception
blobs of ``_wire.py``), so it never runs user code, and a run's exception
reaches ``result()`` with its own type and the remote traceback, as with the
processes runner.

The wrapper makes the Ray worker a process-group leader (Ray already starts
its workers so) and, on Linux, a child subreaper, so every process a run
starts - orphaned grandchildren included - stays its descendant; when the
run ends, whatever is left of them is killed. A run killed by its timeout
or ``cancel(interrupt=True)`` ends its Ray worker (``ray.cancel(force=True)``),
and Ray kills that worker's children; a worker killed from outside (SIGKILL,
the OOM killer) cannot clean up: see the README for Ray's own options.

This module must be importable on every node (procsched installed there),
and imports nothing heavy: Ray is imported only by ``current_scheduler()``.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from .._context import running
from .._core._units import NS, wall_datetime
from .._errors import SchedulerError
from .._handle import RunError, RunInfo, TaskHandle
from .._validate import TaskSpec
from ._messages import BLOB_ERROR, OUTPUT_TAIL, REFUSAL, Add, Refusal, Reply, view
from ._ray_messages import RayOutcome
from ._wire import CallLoader, carried_classes, pack_call, pack_error, pack_value
from ._worker import _DetachedHandle, _retry_matches, _WorkerScheduler

#: How long current_scheduler() waits for the dispatcher's answer.
ASK_TIMEOUT = 60.0

_load = CallLoader().load
_leader = False  # this process leads its group and reaps orphans (once per process)
_actors: dict[str, Any] = {}  # mailbox name -> actor handle, looked up once per process


def run(
    fn_blob: bytes,
    arg_blob: bytes,
    task_id: int,
    run_no: int,
    scheduled_ns: int,
    clock_offset_ns: int,
    mailbox: str,
    attempt: int = 1,
    wall_ns: int | None = None,
    retry_on: bytes | None = None,
    capture: bool = False,
) -> RayOutcome:
    """The Ray task: one run. Times on this node's wall clock (ns);
    ``clock_offset_ns`` is the scheduler's wall minus monotonic clock, so
    that ``current_run()`` speaks in scheduler-clock seconds. ``matched``:
    the run raised one of the exception classes its ``Retry.on`` names
    (decided here, where the exception exists). ``capture``: the run's
    stdout and stderr (fds 1 and 2) are captured (the tail returned), and
    then written on to the Ray worker's own stdout (its log: Ray's
    ``log_to_driver`` still shows them)."""
    _lead_children()
    before = _children()  # the Ray worker's own (normally none): not the run's to kill
    wall = time.time_ns
    started = wall()
    scheduled_at = wall_datetime(scheduled_ns + clock_offset_ns if wall_ns is None else wall_ns)
    info = RunInfo(
        task_id,
        run_no,
        scheduled_ns / NS,
        (started - clock_offset_ns) / NS,
        None,
        os.getpid(),
        None,
        attempt,
        scheduled_at,
    )
    matched = False
    captured = _Capture() if capture else None
    error: RunError | None
    try:
        fn, args, kwargs = _load((fn_blob, arg_blob))
        with running(info, _RayScheduler(mailbox)):
            value = fn(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - the task's failure is its result
        outcome, kind = "error", BLOB_ERROR
        blob, error = pack_error(exc)
        matched = retry_on is not None and _retry_matches(exc, retry_on)
    else:
        kind, blob, error = pack_value(value)
        outcome = "ok" if kind != BLOB_ERROR else "error"
    finally:
        output = None if captured is None else captured.end()
        _end_children(before)
    return RayOutcome(outcome, started, wall(), kind, blob, matched, output, error)


class _Capture:
    """A run's fds 1 and 2, sent to a file from now until ``end()``."""

    def __init__(self) -> None:
        _flush()
        self.saved = (os.dup(1), os.dup(2))
        self.file = tempfile.TemporaryFile()
        fd = self.file.fileno()
        os.dup2(fd, 1)
        os.dup2(fd, 2)

    def end(self) -> str:
        """Put fds 1 and 2 back, write what was captured on to fd 1; its tail."""
        _flush()
        for target, saved in zip((1, 2), self.saved, strict=True):
            os.dup2(saved, target)
            os.close(saved)
        with self.file as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(0)
            while chunk := f.read(1 << 16):
                try:
                    os.write(1, chunk)
                except OSError:
                    break
            f.seek(max(0, size - OUTPUT_TAIL))
            return f.read(OUTPUT_TAIL).decode("utf-8", "replace")


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a task replaced or closed it
            pass


def _lead_children() -> None:
    global _leader
    if _leader:
        return
    _leader = True
    try:
        os.setpgid(0, 0)
    except OSError:
        pass  # already a group leader (Ray starts its workers so)
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphans stay ours


def _children() -> frozenset[int] | None:
    """The pids of this process's descendants; None if it has no child at all.
    One ``waitid`` answers the common case (none), so a run that starts no
    process pays a system call before and after, nothing more."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None
    import psutil

    try:
        return frozenset(p.pid for p in psutil.Process().children(recursive=True))
    except psutil.Error:
        return frozenset()


def _end_children(before: frozenset[int] | None) -> None:
    """Kill and reap what the run started that is still there (orphans too:
    this process is their subreaper)."""
    if _children() is None:
        return
    import psutil

    try:
        left = [p for p in psutil.Process().children(recursive=True) if before is None or p.pid not in before]
    except psutil.Error:
        return
    for child in left:
        try:
            child.send_signal(signal.SIGKILL)  # psutil checks the pid was not reused
        except psutil.Error:
            pass
    psutil.wait_procs(left, timeout=5)  # reaps our children (and the orphans we adopted)
    while before is None:  # zombies of orphans that ended during the run (none of Ray's own to steal)
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break


class _RayScheduler(_WorkerScheduler):
    """``current_scheduler()`` inside a Ray run: asks the scheduler's dispatcher
    thread through its mailbox actor and waits for the answer."""

    _ray_runner = True

    def __init__(self, mailbox: str) -> None:
        self._mailbox = mailbox

    def _check_open(self) -> None:
        pass  # the dispatcher thread answers for itself

    def _ask(self, message: tuple[Any, ...]) -> Any:
        import ray

        try:
            actor = _actors.get(self._mailbox)
            if actor is None:
                actor = _actors[self._mailbox] = ray.get_actor(self._mailbox)
            reply = ray.get(actor.ask.remote(message), timeout=ASK_TIMEOUT)
        except Exception as exc:
            raise SchedulerError(f"cannot reach the scheduler from this Ray run: {type(exc).__name__}: {exc}") from exc
        if reply[0] == REFUSAL:
            raise view(Refusal, reply).error
        return view(Reply, reply).value

    def _add(self, spec: TaskSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> TaskHandle:
        payload: tuple[Any, ...] = pack_call(fn, args, kwargs)
        if spec.ray_options is not None:
            payload += (spec.ray_options,)
        # No due time: this node's monotonic clock is not the scheduler's (the delay counts from receipt).
        task_id, due = self._ask(Add.of_spec(spec, None, None, None, payload, carried_classes(spec.retry, True)))
        return _DetachedHandle(self, task_id, spec.name, None if due is None else due / NS, spec.key)


class Mailbox:
    """The actor between Ray runs and the dispatcher thread: a run ``ask``s and
    waits; the dispatcher long-polls ``take`` and ``answer``s each request."""

    def __init__(self) -> None:
        self._requests: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count()

    async def ask(self, message: Any) -> Any:
        request = next(self._ids)
        reply = self._waiting[request] = asyncio.get_running_loop().create_future()
        self._requests.put_nowait((request, message))
        try:
            return await reply
        finally:
            self._waiting.pop(request, None)

    async def take(self) -> list[tuple[int, Any]]:
        batch = [await self._requests.get()]
        while not self._requests.empty():
            batch.append(self._requests.get_nowait())
        return batch

    async def answer(self, request: int, reply: Any) -> None:
        waiting = self._waiting.get(request)
        if waiting is not None and not waiting.done():
            waiting.set_result(reply)
