"""Task functions shared by every contender.

They live in an importable module (not ``__main__``) so that every pool can
run them by reference, whatever its start method (fork, forkserver, spawn,
loky's own). Each timing task reads ``time.monotonic()`` inside the worker:
on Linux that clock is system-wide, so a start time taken in a worker is
comparable with a due time computed in the benchmark process.
"""

from __future__ import annotations

import ctypes
import os
import time


def noop(*_args: object) -> None:
    """Nothing (the throughput scenario passes it the task's index: ``submit(noop, i)``)."""
    return None


def stamp() -> float:
    """When the task started, on the system-wide monotonic clock."""
    return time.monotonic()


def stamp_pair() -> tuple[float, float]:
    """(start, end) of a trivial run."""
    t = time.monotonic()
    return t, time.monotonic()


def spin(n: int) -> int:
    """Pure-Python CPU work: holds the GIL for the whole loop."""
    x = 0
    for i in range(n):
        x = (x + i * i) % 1_000_003
    return x


def cpu(n: int) -> tuple[float, float]:
    """``spin(n)``, returning (start, end)."""
    start = time.monotonic()
    spin(n)
    return start, time.monotonic()


def calibrate_spin(seconds: float) -> int:
    """Iterations of ``spin`` that take about ``seconds`` here, alone."""
    n = 20_000
    while True:
        t = time.perf_counter()
        spin(n)
        elapsed = time.perf_counter() - t
        if elapsed > 0.05:
            break
        n *= 2
    best = elapsed
    for _ in range(2):
        t = time.perf_counter()
        spin(n)
        best = min(best, time.perf_counter() - t)
    return max(1, int(n * seconds / best))


def sleeper(seconds: float, value: int) -> int:
    """A well-behaved task for the crash scenario: returns its own index."""
    time.sleep(seconds)
    return value


def probe(seconds: float) -> tuple[int, float]:
    """(worker pid, start time); holds its worker for ``seconds``."""
    start = time.monotonic()
    time.sleep(seconds)
    return os.getpid(), start


def _note_fault_time(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, repr(time.monotonic()).encode())
    finally:
        os.close(fd)


def segfault(path: str) -> None:
    """Write the fault time to ``path``, then dereference NULL (SIGSEGV)."""
    _note_fault_time(path)
    ctypes.string_at(0)


def hard_exit(path: str) -> None:
    """Write the fault time to ``path``, then leave without cleanup."""
    _note_fault_time(path)
    os._exit(1)
