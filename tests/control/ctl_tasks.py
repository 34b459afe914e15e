"""Task functions for the schedule-control tests (importable by worker processes).

Each run writes its own lines to a log opened with O_APPEND (one write per
line, atomic), so the tests read overlaps from the tasks themselves, never
from procsched's view of them."""

from __future__ import annotations

import os
import time

import procsched


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def logged_sleep(path: str, seconds: float) -> None:
    """Log "start RUN" and "end RUN" (monotonic times) around a sleep."""
    run = procsched.current_run().run
    _write(path, f"start {run} {time.monotonic()}\n")
    time.sleep(seconds)
    _write(path, f"end {run} {time.monotonic()}\n")


def note(path: str) -> None:
    """Log one line per run: why it ran, as the run itself sees it."""
    _write(path, f"{procsched.current_run().cause}\n")


def most_at_once(path: str) -> int:
    """The most runs that were between their start and end at once, from the log."""
    events = []
    with open(path) as log:
        for line in log:
            kind, _, at = line.split()
            events.append((float(at), 1 if kind == "start" else -1))
    running = most = 0
    for _, step in sorted(events):
        running += step
        most = max(most, running)
    return most


def first_run_waits(fifo: str) -> None:
    """Run 1 blocks reading the FIFO ``fifo`` until the test opens it; the others return at once."""
    if procsched.current_run().run == 1:
        with open(fifo) as release:
            release.read()


def control_from_a_run(task_id: int, start: object, end: object) -> dict[str, object]:
    """Through ``current_scheduler()``: pause and resume task ``task_id``,
    ask a run of it now, list then run its backfill over ``start..end``; and
    what a bad backfill and a key say."""
    sched = procsched.current_scheduler()
    done: dict[str, object] = {
        "paused": sched.pause(task_id),
        "resumed": sched.resume(task_id),
        "run_now": sched.run_now(task_id),
        "planned": sched.backfill(task_id, start, end, dry_run=True),  # type: ignore[arg-type]
        "backfill": sched.backfill(task_id, start, end),  # type: ignore[arg-type]
    }
    for name, call in (
        ("reversed", lambda: sched.backfill(task_id, end, start)),  # type: ignore[arg-type]
        ("by_key", lambda: sched.run_now("no-such-key")),
    ):
        try:
            done[name] = call()
        except Exception as exc:  # noqa: BLE001 - the error itself is what the test reads
            done[name] = f"{type(exc).__name__}: {exc}"
    return done
