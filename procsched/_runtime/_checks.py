"""The check of untrusted input: a worker's report, before the dispatcher reads it.

A worker's pipe is written by user code too (a task may write to the
descriptor it inherited): nothing in a report is trusted. The records
themselves are in ``_messages.py``.
"""

from __future__ import annotations

from datetime import timezone
from typing import Any

from .._core import KIND_OF, MISFIRE_OF, OVERLAP_OF
from .._handle import RunError
from ._messages import (
    ADD,
    BACKFILL,
    BLOB_ERROR,
    BLOB_VALUE,
    CANCEL,
    DONE,
    PAUSE,
    RESUME,
    RUN_NOW,
    SKIPPED,
    STALLED,
    STARTED,
    Add,
    Backfill,
    Cancel,
    Done,
    Message,
    RunNow,
    Skipped,
    Stalled,
    Started,
    view,
)


def check_report(message: Any) -> str:
    """The tag of a well-formed report from a worker; TypeError (what is
    wrong) otherwise. A worker's pipe is written by user code too (a task
    may write to the descriptor it inherited): nothing is trusted."""
    if type(message) is not tuple or not message or type(message[0]) is not str:
        raise TypeError(f"not a message: {type(message).__name__}")
    tag: str = message[0]
    if tag == DONE:
        # (one per run: spelled out, no generator)
        if not (
            len(message) == len(Done._fields)
            and type(message[1]) is int
            and type(message[2]) is int
            and message[3] in ("ok", "error")
            and type(message[4]) is int
            and type(message[5]) is int
            and message[6] in (BLOB_VALUE, BLOB_ERROR)
            and isinstance(message[7], bytes)
            and type(message[8]) is bool
            and (message[9] is None or isinstance(message[9], str))
            and (message[10] is None or _is_error_text(message[10]))
            and (message[11] is None or type(message[11]) is str)
        ):
            raise TypeError("malformed done")
    elif tag == STARTED:
        if len(message) != len(Started._fields) or not all(type(x) is int for x in message[1:]):
            raise TypeError("malformed started")
    elif tag == SKIPPED:
        if len(message) != len(Skipped._fields):
            raise TypeError("malformed skipped")
    elif tag == STALLED:
        if len(message) != len(Stalled._fields):
            raise TypeError("malformed stalled")
    elif tag == ADD:
        _check_add(message)
    elif tag == CANCEL:
        if not (
            len(message) == len(Cancel._fields)
            and type(message[1]) is int
            and type(message[2]) is int
            and type(message[3]) is bool
        ):
            raise TypeError("malformed cancel")
    elif tag in (PAUSE, RESUME, RUN_NOW):  # (the same fields: request, task id)
        if not (len(message) == len(RunNow._fields) and type(message[1]) is int and type(message[2]) is int):
            raise TypeError(f"malformed {tag}")
    elif tag == BACKFILL:
        if not (
            len(message) == len(Backfill._fields)
            and all(type(x) is int for x in message[1:5])
            and type(message[5]) is bool
        ):
            raise TypeError("malformed backfill")
    else:
        raise TypeError(f"unknown tag {tag[:20]!r}")
    return tag


def _is_error_text(error: Any) -> bool:
    """A ``Done.error``: a ``RunError`` of plain strings."""
    return (
        type(error) is RunError
        and type(error.type) is str
        and type(error.message) is str
        and (error.traceback is None or type(error.traceback) is str)
    )


def _check_add(message: Message) -> None:
    if len(message) != len(Add._fields):
        raise TypeError("malformed add")
    add = view(Add, message)
    payload = add.payload
    if not (type(payload) is tuple and len(payload) == 2 and all(type(b) is bytes for b in payload)):
        raise TypeError("malformed add: payload")
    if not (
        add.task_id is None
        and (add.due_ns is None or type(add.due_ns) is int)
        and type(add.delay_ns) is int
        and type(add.start_wall_ns) is int
        and (add.first_slot_wall_ns is None or type(add.first_slot_wall_ns) is int)
        and type(add.priority) is int
        and (add.timeout_ns is None or type(add.timeout_ns) is int)
        and (add.name is None or type(add.name) is str)
        and (add.key is None or type(add.key) is str)
        and (add.retry_on is None or type(add.retry_on) is bytes)
    ):
        raise TypeError("malformed add")
    _check_schedule(add.schedule)
    _check_retry(add.retry)


def _check_schedule(schedule: Any) -> None:
    """``Schedule.to_wire()``'s shape (the values are checked where they are used)."""
    if schedule is None:
        return
    ints = (int, type(None))
    if not (type(schedule) is tuple and len(schedule) == 13):
        raise TypeError("malformed add: schedule")
    kind, period, misfire, stop_on_error, expr, zone, until, max_runs, concurrent, overlap, grace, jitter, group = (
        schedule
    )
    if not (
        kind in KIND_OF
        and type(period) is int
        and misfire in MISFIRE_OF
        and type(stop_on_error) is bool
        and (expr is None or type(expr) is str)
        and (zone is None or isinstance(zone, (str, timezone)))
        and type(until) in ints
        and type(max_runs) in ints
        and type(concurrent) is int
        and overlap in OVERLAP_OF
        and type(grace) in ints
        and type(jitter) is int
        and (group is None or type(group) is str)
    ):
        raise TypeError("malformed add: schedule")


def _check_retry(retry: Any) -> None:
    if retry is None:
        return
    if not (
        type(retry) is tuple
        and len(retry) == 6
        and type(retry[0]) is int
        and type(retry[1]) is int
        and isinstance(retry[2], float)
        and type(retry[3]) is int
        and isinstance(retry[4], float)
        and type(retry[5]) is tuple
        and all(o in ("error", "crashed", "timeout") for o in retry[5])
    ):
        raise TypeError("malformed add: retry")
