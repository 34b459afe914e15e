"""Task functions of the issue-20 reproductions (importable by reference:
keyed tasks are stored as ``module:qualname``).

Every run appends JSON lines to its own log with one O_APPEND write each
(atomic: a line is far below PIPE_BUF), read back by ``helpers.log``.
"""

from __future__ import annotations

import json
import os
import time

import procsched


def _write(path: str, **fields: object) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(fields) + "\n").encode())
    finally:
        os.close(fd)


def _me(path: str, tag: str, ev: str) -> None:
    run = procsched.current_run()
    assert run is not None
    slot = None if run.scheduled_at is None else round(run.scheduled_at.timestamp() * 1e6)
    _write(
        path,
        ev=ev,
        tag=tag,
        run=run.run,
        attempt=run.attempt,
        slot_us=slot,
        pid=os.getpid(),
        t=time.time(),
        inst=os.environ.get("CAMPAIGN_INSTANCE", ""),
    )


def mark(path: str, tag: str = "", seconds: float = 0.0) -> str:
    """A start line, ``seconds`` of work, an end line."""
    _me(path, tag, "start")
    if seconds:
        time.sleep(seconds)
    _me(path, tag, "end")
    return tag


def hold(path: str, fifo: str, tag: str = "") -> None:
    """A start line, then wait until the test opens ``fifo`` for writing (a
    handshake: no sleep), then an end line."""
    _me(path, tag, "start")
    fd = os.open(fifo, os.O_RDONLY)  # blocks until a writer opens it
    os.close(fd)
    _me(path, tag, "end")


def hold_once_flagged(path: str, fifo: str, flag: str, tag: str = "") -> None:
    """Quick (as ``mark``) until the test creates ``flag``; then holds (as ``hold``)."""
    if os.path.exists(flag):
        hold(path, fifo, tag)
    else:
        mark(path, tag)


def hold_first(path: str, fifo: str, tag: str = "") -> None:
    """Run 1 holds (as ``hold``); every later run is quick (as ``mark``)."""
    run = procsched.current_run()
    if run is not None and run.run == 1 and run.attempt == 1:
        hold(path, fifo, tag)
    else:
        mark(path, tag)


def fail(path: str, tag: str = "") -> None:
    """A start line, then raise."""
    _me(path, tag, "start")
    raise RuntimeError(f"failing on purpose ({tag})")


def fail_first(path: str, tag: str = "") -> None:
    """A start line; the first attempt of every run raises, a retry ends (an end line)."""
    _me(path, tag, "start")
    run = procsched.current_run()
    if run is not None and run.attempt == 1:
        raise RuntimeError(f"first attempt fails on purpose ({tag})")
    _me(path, tag, "end")


def fail_then_hold(path: str, fifo: str, tag: str = "") -> None:
    """Run 1's first attempt raises, its retry holds (as ``hold``); every later run is quick (as ``mark``)."""
    run = procsched.current_run()
    if run is not None and run.run == 1:
        if run.attempt == 1:
            fail(path, tag)
        hold(path, fifo, tag)
    else:
        mark(path, tag)


def noop() -> None:
    pass


def add(a: int, b: int) -> int:
    return a + b


def hold_if(path: str, fifo: str, tag: str, gate: str) -> None:
    """As ``hold`` while the file ``gate`` exists, else as ``mark``."""
    if os.path.exists(gate):
        hold(path, fifo, tag)
    else:
        mark(path, tag)


def mark_blob(path: str, blob: bytes) -> None:
    """``mark`` for a task with a large argument."""
    mark(path, f"blob {len(blob)}")
