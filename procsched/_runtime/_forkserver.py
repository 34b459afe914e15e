"""Preloaded into the dispatcher's multiprocessing forkserver: what the
forkserver does on its way out, and how its workers (forked from it) tie
their lives to the dispatcher rather than to it.

The forkserver is the workers' parent: when the dispatcher dies, the
forkserver sees its "alive" pipe close and exits, and each worker dies with
it. But what a task started - its children, in the worker's process group -
would outlive them all. So on its way out the forkserver kills each worker's
whole process group, while the workers are still alive and their group ids
cannot have been reused.

The forkserver itself is a helper: its death alone (a SIGKILL, the OOM
killer) costs no run. A worker is told of its parent's death by a signal
(PR_SET_PDEATHSIG, ``ORPHANED``), asks whether the dispatcher still holds
its pipe, and dies (with its process group) only if not; otherwise it goes
on, and a thread of its own waits for the dispatcher's end of the pipe to
close. The dispatcher watches such a worker on its own pidfd from then on
(``ProcessCarrier.outlived``), and the next worker's start starts a new
forkserver. A task that resets this signal to its default dies of it (the
old behaviour); one stuck in C code sees it when it returns to Python.
"""

from __future__ import annotations

import atexit
import os
import select
import signal
import sys
import threading
from typing import Any

#: The signal a worker forked by the forkserver gets when the forkserver dies.
#: (Its default action ends the process: the old behaviour, if a task resets it.)
ORPHANED = signal.SIGRTMIN + 1 if sys.platform.startswith("linux") else signal.SIGUSR2
PR_SET_PDEATHSIG = 1


def _kill_worker_groups() -> None:
    try:
        with open(f"/proc/self/task/{os.getpid()}/children") as f:
            children = [int(pid) for pid in f.read().split()]
    except (OSError, ValueError):
        return  # no /proc children list: the workers still die with us
    for pid in children:
        try:
            if os.getpgid(pid) == pid:  # a worker leads its own group
                os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


atexit.register(_kill_worker_groups)


def die_with_the_dispatcher(libc: Any, pipe_fd: int) -> None:
    """In a worker forked by the forkserver (Linux): when the forkserver
    dies, die only if the dispatcher - the other end of ``pipe_fd``, the
    worker's pipe - is gone too (see the module docstring)."""
    signal.signal(ORPHANED, lambda signum, frame: _orphaned(pipe_fd))
    parent = os.getppid()
    libc.prctl(PR_SET_PDEATHSIG, ORPHANED)
    if os.getppid() != parent:  # the forkserver died before prctl took effect
        _orphaned(pipe_fd)


def _orphaned(pipe_fd: int) -> None:
    if _closed(pipe_fd, 0):
        _die()
    threading.Thread(target=_watch, args=(pipe_fd,), name="procsched-dispatcher-watch", daemon=True).start()


def _watch(pipe_fd: int) -> None:
    """Wait for the dispatcher's end of the pipe to close (its death, or its
    letting go of this worker), then die with the task's process group."""
    _closed(pipe_fd, None)
    _die()


def _closed(pipe_fd: int, timeout_ms: int | None) -> bool:
    """Has the other end of the socket ``pipe_fd`` closed (within ``timeout_ms``;
    None: wait for it)? Data waiting unread does not hide it."""
    poll = select.poll()
    poll.register(pipe_fd, select.POLLRDHUP)
    try:
        return bool(poll.poll(timeout_ms))
    except OSError:
        return True


def _die() -> None:
    try:
        os.killpg(os.getpid(), signal.SIGKILL)  # the worker leads its group: its task's children too
    finally:
        os._exit(1)
