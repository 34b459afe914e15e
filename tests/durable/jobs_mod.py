"""Module-level task functions for the durable-store tests (importable by reference)."""

from __future__ import annotations

import os

import procsched


def record(path: str) -> None:
    """Append this run's identity to ``path`` (one O_APPEND write: atomic)."""
    run = procsched.current_run()
    assert run is not None
    line = f"{run.run} {run.attempt} {int(run.scheduled_at.timestamp() * 1e6)} {os.getpid()}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def add(a: int, b: int) -> int:
    return a + b


def crash_on_first_run(path: str) -> None:
    """Record the run, then kill the worker on run 1 (a real crash)."""
    record(path)
    if procsched.current_run().run == 1:  # type: ignore[union-attr]
        os._exit(3)


def fail_then_wait(path: str, fifo: str) -> None:
    """Attempt 1 fails; a later attempt records itself in ``path``, then
    waits for a line on the FIFO ``fifo`` (the test lets it end)."""
    run = procsched.current_run()
    assert run is not None
    if run.attempt == 1:
        raise RuntimeError("the first attempt fails")
    record(path)
    with open(fifo) as f:
        f.readline()


def pause_then_read(task_id: int, key: str, store: str) -> list[bool]:
    """Through ``current_scheduler()``: pause then resume task ``task_id``
    (keyed ``key``), reading its row in ``store`` as each returns: [paused,
    its row paused, resumed, its row paused]."""
    from procsched._store import open_store

    sched, rows = procsched.current_scheduler(), open_store(store)
    try:
        paused = sched.pause(task_id)
        paused_row = rows.get(key).state.paused  # type: ignore[union-attr]
        resumed = sched.resume(task_id)
        return [paused, paused_row, resumed, rows.get(key).state.paused]  # type: ignore[union-attr]
    finally:
        rows.close()
