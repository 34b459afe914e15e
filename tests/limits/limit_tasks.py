"""Task functions of the shared-limit tests (imported by the workers).

Each run appends to an O_APPEND log (so overlaps are read from the tasks'
own record, never from procsched's view of itself) and, given a rendezvous
socket, says it started there and waits to be released (blocking, with a
deadline): the test (``Rendezvous``) sees each start and ends each run when
it chooses, never guessing with sleeps."""

from __future__ import annotations

import os
import socket
import time

WAIT = 60.0


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def hold(log: str, name: str, rendezvous: str | None = None, crash: bool = False) -> str:
    """Log the start; with a rendezvous, say so there and wait to be
    released; log the end (or crash the worker)."""
    _write(log, f"+ {name} {time.monotonic_ns()}\n")
    if rendezvous is not None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(WAIT)
            conn.connect(rendezvous)
            conn.sendall(name.encode().ljust(16))
            conn.recv(2)  # "go" (or the test's end)
    if crash:
        os._exit(3)
    _write(log, f"- {name} {time.monotonic_ns()}\n")
    return name


def most_at_once(log: str, names: set[str] | None = None) -> int:
    """The most runs (of ``names``, or any) between their + and - lines at once."""
    now = peak = 0
    with open(log) as f:
        for line in f:
            sign, name, _ = line.split()
            if names is not None and name not in names:
                continue
            now += 1 if sign == "+" else -1
            peak = max(peak, now)
    return peak


class Rendezvous:
    """The test's side: ``started()`` is the next run to start (blocks, with
    a deadline); ``release(name)`` lets it end."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(64)
        self.conns: dict[str, socket.socket] = {}

    def started(self, timeout: float = WAIT) -> str:
        self.server.settimeout(timeout)
        conn, _ = self.server.accept()
        conn.settimeout(timeout)
        data = b""
        while len(data) < 16:
            chunk = conn.recv(16 - len(data))
            if not chunk:
                raise EOFError("a run hung up before saying its name")
            data += chunk
        name = data.decode().strip()
        self.conns[name] = conn
        return name

    def none_started(self) -> bool:
        """No run waits to say it started, now."""
        self.server.setblocking(False)
        try:
            conn, _ = self.server.accept()
        except BlockingIOError:
            return True
        conn.close()
        return False

    def release(self, name: str) -> None:
        conn = self.conns.pop(name)
        conn.sendall(b"go")
        conn.close()

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.server.close()
