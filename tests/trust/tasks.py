"""Task functions of the trust tests (importable by reference: keyed tasks
are stored as ``module:qualname``)."""

from __future__ import annotations

import os


def tick(path: str, tag: str = "") -> str:
    """Append this run's pid and tag to ``path`` (one O_APPEND write)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{os.getpid()} {tag}\n".encode())
    finally:
        os.close(fd)
    return tag
