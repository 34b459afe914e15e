"""``procsched why KEY --store S --json``: the same answer, machine-readable.

One JSON object: the job as ``GET /api/jobs/{key}`` of the console gives it
(``key``, ``name``, ``state``, ``paused``, ``schedule``, ``next_run_at``,
``last_outcome``, ...), ``next_slots`` (the next 5, ISO 8601 UTC) and
``slots``: the last N slots, oldest first, each with the console's fields
(``run``, ``attempt``, ``outcome``, ``reason``, ``cause``, ``scheduled_at``,
``started_at``, ``finished_at``, ``duration``, ``lateness``, ``error``, ...)
and ``why``: the words ``procsched why`` prints for it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._store import JobDetail, RunRecord, SkippedSlot


def as_json(detail: JobDetail, n: int, next_count: int, why: Callable[[RunRecord | SkippedSlot], str]) -> str:
    """``detail``'s last ``n`` slots (each with ``why(slot)``) and its next
    ``next_count`` slots (also while paused, as the text says) as one JSON object."""
    from .._core._units import wall_datetime
    from .._web import _words
    from .._web._model import iso
    from .._web._store_source import job_of, slot_of

    record: dict[str, Any] = job_of(detail.job).api()
    due = detail.job.state.next_due_ns
    upcoming = [] if due is None else _words.next_slots(detail.job.schedule, wall_datetime(due), next_count)
    record["next_slots"] = [iso(t) for t in upcoming]
    record["slots"] = [{**slot_of(s).api(), "why": why(s)} for s in detail.slots[-n:]]
    return json.dumps(record)
