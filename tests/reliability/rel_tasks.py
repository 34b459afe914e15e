"""Task functions for the reliability tests: they run inside worker processes.

Kept in their own small module (stdlib imports only), so a fresh worker
imports it in a millisecond or two and tests that replace thousands of
workers stay fast. Every task that leaves a trace writes it with one small
``O_APPEND`` write, which the kernel never splits or interleaves, even when
the writer is SIGKILLed a moment later.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import stat
import subprocess
import sys
import time

import procsched

_LEAK: list[bytearray] = []


def append(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def record(path: str, value: int = 0) -> int:
    """Append "task_id run pid" and return ``value``."""
    info = procsched.current_run()
    append(path, f"{info.task_id} {info.run} {os.getpid()}\n")
    return value


def record_until(path: str, last_run: int) -> None:
    """A periodic task: record the run, and cancel itself at run ``last_run``."""
    info = procsched.current_run()
    append(path, f"{info.task_id} {info.run} {os.getpid()}\n")
    if info.run >= last_run:
        procsched.current_scheduler().cancel(info.task_id)


def nothing() -> int:
    return os.getpid()


def touch_and_sleep(path: str, seconds: float) -> None:
    append(path, f"{os.getpid()}\n")
    time.sleep(seconds)


def segfault() -> None:
    ctypes.string_at(0)


def exit_hard(code: int = 3) -> None:
    os._exit(code)


def spin(seconds: float) -> int:
    """Burn CPU for ``seconds`` (a CPU-bound job)."""
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


# -- resource faults ---------------------------------------------------------


def memory_bomb(headroom: int) -> int:
    """Lower this process's address-space limit to its current size plus
    ``headroom`` bytes (soft limit only, never restored: the worker stays
    poisoned), then allocate 16 MiB blocks until something gives."""
    import resource

    with open("/proc/self/statm") as f:
        vm = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm + headroom, hard))
    blocks = []
    while True:
        blocks.append(bytearray(16 << 20))


def allocate(nbytes: int) -> int:
    """Allocate and touch ``nbytes`` (a healthy worker can); return the pid."""
    block = bytearray(nbytes)
    block[::4096] = b"x" * len(block[::4096])
    return os.getpid()


def leak(nbytes: int) -> int:
    """Keep ``nbytes`` more alive in this worker forever; return the pid."""
    block = bytearray(nbytes)
    block[::4096] = b"x" * len(block[::4096])
    _LEAK.append(block)
    return os.getpid()


def _sleeper(ignore_term: bool) -> None:
    """In a forked child: optionally ignore SIGTERM, then sleep forever."""
    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(60)


def fork_tree_and_hang(pidfile: str) -> None:
    """Start a tree and hang: two forked children (one ignores SIGTERM), a
    grandchild under the first, an orphan (its parent exits at once, so it
    is re-parented away from this worker), and an exec'd ``sleep``. Every
    pid goes to ``pidfile``, one per line, followed by "ready"."""
    pids = []
    for ignore in (False, True):
        pid = os.fork()
        if pid == 0:
            if not ignore:
                grandchild = os.fork()
                if grandchild == 0:
                    _sleeper(False)
                append(pidfile, f"{grandchild}\n")
            _sleeper(ignore)
        pids.append(pid)
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:  # double fork: the orphan's parent exits at once
        os.close(r)
        orphan = os.fork()
        if orphan == 0:
            _sleeper(True)
        os.write(w, f"{orphan}\n".encode())
        os._exit(0)
    os.close(w)
    orphan_pid = int(os.read(r, 64).decode())
    os.close(r)
    os.waitpid(middle, 0)
    pids.append(orphan_pid)
    pids.append(subprocess.Popen(["sleep", "3600"]).pid)
    pids.append(os.getpid())
    # The first child writes its grandchild's pid itself; wait for it so
    # "ready" is the last line.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(pidfile) as f:
                if f.read().count("\n") >= 1:
                    break
        except FileNotFoundError:
            pass
        time.sleep(0.005)
    append(pidfile, "".join(f"{p}\n" for p in pids) + "ready\n")
    while True:
        time.sleep(60)


def spawn_background_and_return(pidfile: str) -> int:
    """Start a ``sleep`` that outlives this run, and return at once."""
    proc = subprocess.Popen(["sleep", "3600"])
    append(pidfile, f"{proc.pid}\n")
    return proc.pid


def ignore_sigterm_and_hang(pidfile: str) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    append(pidfile, f"{os.getpid()}\n")
    while True:
        time.sleep(60)


# -- file-descriptor faults --------------------------------------------------


def _my_fds() -> list[int]:
    return sorted(int(name) for name in os.listdir("/proc/self/fd"))


def _sockets() -> list[int]:
    fds = []
    for fd in _my_fds():
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                fds.append(fd)
        except OSError:
            pass
    return fds


def close_all_fds() -> str:
    """Close every inherited descriptor (stdio included), then return."""
    os.closerange(0, 1 << 16)
    return "closed"


def write_garbage(kind: str) -> str:
    """Write garbage to every socket this worker holds - its pipe to the
    dispatcher among them - and to stdout/stderr, then return normally.

    kind: "raw" (arbitrary bytes: a frame header claiming a huge length),
    "frame" (a well-formed frame holding bytes that are not a pickle),
    "message" (a well-formed frame holding a pickled tuple the dispatcher
    does not expect), "short" (a frame header promising more than follows).
    """
    import pickle
    import struct

    if kind == "raw":
        data = b"garbage!" * 64
    elif kind == "frame":
        body = b"\x80\x05not a pickle at all"
        data = struct.pack("!i", len(body)) + body
    elif kind == "message":
        body = pickle.dumps(("done", "bogus", None, "weird"))
        data = struct.pack("!i", len(body)) + body
    elif kind == "short":
        data = struct.pack("!i", 1000) + b"x" * 10
    else:
        raise ValueError(kind)
    for fd in (1, 2):
        try:
            os.write(fd, b"\n(garbage from a test task: " + data[:32] + b"...)\n")
        except OSError:
            pass
    for fd in _sockets():
        try:
            socket.socket(fileno=os.dup(fd)).sendall(data)  # dup: closing it leaves fd open
        except OSError:
            pass
    return kind


def hello(x: int = 0) -> str:
    return f"hello {x} from {os.getpid()} ({sys.platform})"


def segfault_first(n: int) -> int:
    """Segfault on runs 1..n, then succeed."""
    run = procsched.current_run().run
    if run <= n:
        ctypes.string_at(0)
    return run
