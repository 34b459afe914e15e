"""Task functions for the several-schedulers tests (importable by reference)."""

from __future__ import annotations

import os
import time

import procsched


def mark(path: str, long_runs: int = 0, long_s: float = 0.0) -> None:
    """Append ``run attempt scheduled_at_us peer worker_pid`` to ``path``
    (one O_APPEND write: atomic) when the run starts; runs up to
    ``long_runs`` then take ``long_s`` seconds."""
    run = procsched.current_run()
    assert run is not None and run.scheduled_at is not None
    line = (
        f"{run.run} {run.attempt} {round(run.scheduled_at.timestamp() * 1e6)} "
        f"{os.environ.get('PEER_ID', '?')} {os.getpid()}\n"
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    if run.run <= long_runs:
        time.sleep(long_s)
