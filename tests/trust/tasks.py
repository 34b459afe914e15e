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


def files() -> dict[str, object]:
    """What this run's capture file and the directory it is in look like:
    the path and mode of each entry (the dispatcher's temporary directory)."""
    capture = os.readlink("/proc/self/fd/1")
    where = os.path.dirname(capture)
    return {
        "capture": capture,
        "capture_mode": os.fstat(1).st_mode & 0o777,
        "dir_mode": os.stat(where).st_mode & 0o777,
        "entries": {name: os.lstat(os.path.join(where, name)).st_mode & 0o777 for name in os.listdir(where)},
    }


def chatty(tag: str) -> str:
    """Print something (captured as the run's output) and fail on odd runs."""
    import procsched

    print(f"OUTPUT-{tag}", flush=True)
    run = procsched.current_run()
    if run is not None and run.run % 2:
        raise ValueError(f"ERROR-{tag}")
    return tag
