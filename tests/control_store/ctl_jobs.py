"""Task functions of the control-from-outside tests (importable by reference)."""

from __future__ import annotations

import os

import procsched


def mark(path: str) -> None:
    """Append ``run cause`` to ``path`` (one O_APPEND write: atomic): the runs as the task saw them."""
    run = procsched.current_run()
    assert run is not None
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{run.run} {os.environ.get('PEER_ID', '-')}\n".encode())
    finally:
        os.close(fd)
