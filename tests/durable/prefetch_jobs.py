"""Task functions of the prefetch-with-a-store tests (importable by reference)."""

from __future__ import annotations

import os
import time

import jobs_mod  # (this directory is on the path of whoever imports this)


def gate(path: str) -> str:
    """Block until the test writes a line to the FIFO ``path``."""
    with open(path) as fifo:
        return fifo.readline().strip()


def mark(path: str, tag: str) -> str:
    """Append ``tag`` and this worker's pid to ``path`` (one O_APPEND write)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{tag} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    return tag


def record_busy(path: str, seconds: float) -> None:
    """Append this run's identity to ``path`` (jobs_mod.record), then work ``seconds``."""
    jobs_mod.record(path)
    time.sleep(seconds)
