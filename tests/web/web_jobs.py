"""Task functions for the console tests (workers import them by name)."""

from __future__ import annotations

import os
import sys


def tick() -> int:
    return os.getpid()


def chatty() -> None:
    print("hello from chatty")
    print("to stderr", file=sys.stderr)


def fails() -> None:
    raise ValueError("bad luck")


def mark(path: str) -> None:
    """Append one line per run to ``path`` (O_APPEND): the runs as the task saw them."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, b"run\n")
    finally:
        os.close(fd)


def report(path: str) -> None:
    """A job that takes 10-70 ms (for the screenshots' chart) and logs its runs."""
    import random
    import time

    time.sleep(random.uniform(0.01, 0.07))
    mark(path)


def crash() -> None:
    """Dies as a segfault would: the worker is gone, the run ``crashed``, a new worker takes its place."""
    os._exit(70)


def wait(path: str) -> None:
    """Says its worker's pid to the test listening at ``path``, then blocks
    until the test closes the connection (refused, reset or ended: it
    returns)."""
    import socket

    with socket.socket(socket.AF_UNIX) as conn:
        try:
            conn.connect(path)
            conn.sendall(f"{os.getpid()}\n".encode())
            conn.recv(1)
        except OSError:
            pass
