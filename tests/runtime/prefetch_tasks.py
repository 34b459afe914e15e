"""Task functions for the prefetch tests (importable by worker processes)."""

from __future__ import annotations

import os
import time


def gate(path: str) -> str:
    """Block until the test writes a line to the FIFO ``path``."""
    with open(path) as fifo:
        return fifo.readline().strip()


def gate_then_exit(path: str) -> None:
    """Block on the FIFO ``path``, then kill this worker (os._exit)."""
    gate(path)
    os._exit(7)


def mark(path: str, tag: str, seconds: float = 0.0) -> str:
    """Append ``tag`` (and this process's pid) to ``path`` as the run starts, then sleep."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{tag} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    if seconds:
        time.sleep(seconds)
    return tag


def started_at(seconds: float) -> float:
    """The monotonic time this run started (then it sleeps ``seconds``)."""
    start = time.monotonic()
    time.sleep(seconds)
    return start


def marks(path: str) -> list[str]:
    try:
        with open(path) as f:
            return [line.split()[0] for line in f]
    except FileNotFoundError:
        return []
