"""What a start-up on a store tells at INFO (issue 26 items 2 and 6).

    _recovery.plan ──▶ resumed(tasks, crashed, plan, wall) ──▶ logger "procsched", INFO:
        resumed 3 stored task(s) from the store: tick (run 44 next), slow (run 7 next), ...
        tick: 449 slots missed since 12:00:01 UTC while no scheduler ran it; misfire catch_up
              makes up every one of them now, back to back
        slow run 6 (attempt 1) was in flight when its scheduler died: recorded crashed

A line per task, for at most ``TOLD`` tasks of each kind (a store of
100,000 tasks says how many more, not each); nothing is computed when INFO
is off for the "procsched" logger.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from ..._core import Kind, Misfire, Schedule
from ..._store import RunRecord, StoredTask
from ._stored import schedule_of

logger = logging.getLogger("procsched")

#: Tasks told one by one, of each kind of line.
TOLD = 10
#: Missed slots are counted up to this many (a cron task down for years).
MAX_COUNTED = 10_000
#: What each misfire policy makes of the missed slots.
MAKES_UP = {
    Misfire.CATCH_UP: "misfire catch_up makes up every one of them now, back to back "
    '(misfire="coalesce" would run one for all, misfire_grace= bounds them)',
    Misfire.COALESCE: "misfire coalesce runs one run for all of them, then keeps the schedule",
    Misfire.SKIP: "misfire skip skips them: the next run is at the next slot",
}


def resumed(tasks: list[StoredTask], crashed: dict[str, RunRecord], plan: Any, wall: int) -> None:
    """Log what ``plan`` (a ``_recovery.Plan``) resumes, the slots each
    resumed task missed while no scheduler ran it, and the runs recorded
    ``crashed`` (in flight when their scheduler died)."""
    if not logger.isEnabledFor(logging.INFO) or not plan.rows:
        return
    rows = plan.rows
    listed = ", ".join(
        f"{row.key} (run {row.runs + 1} next)"
        if row.attempt == 1
        else f"{row.key} (run {row.runs} attempt {row.attempt} next)"
        for row in rows[:TOLD]
    )
    more = f" and {len(rows) - TOLD} more" if len(rows) > TOLD else ""
    logger.info("resumed %d stored task(s) from the store: %s%s", len(rows), listed, more)
    adopted = {row.key for row in rows}
    missed = 0
    for task in tasks:
        key = task.definition.key
        if key not in adopted or task.state.paused:
            continue
        if task.holder is not None and key not in crashed:
            continue  # its run in flight is another live scheduler's
        due = task.state.next_due_ns
        if due is None:
            continue
        schedule = schedule_of(task.definition)
        cap = MAX_COUNTED if missed < TOLD else 2  # (beyond TOLD only counted, not told)
        count = slots_between(schedule, due, wall, cap)
        if count < 2:
            continue
        missed += 1
        if missed <= TOLD:
            logger.info(
                "%s: %s slots missed since %s while no scheduler ran it; %s",
                key,
                f"{count:,}" if count < MAX_COUNTED else f"{MAX_COUNTED:,} or more",
                datetime.fromtimestamp(due / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
                MAKES_UP.get(schedule.misfire, f"misfire {schedule.misfire.value}"),
            )
    if missed > TOLD:
        logger.info("%d more resumed task(s) missed slots while no scheduler ran them", missed - TOLD)
    records = [r for r in crashed.values() if r.key in adopted or r.key in plan.ended]
    for record in records[:TOLD]:
        logger.info(
            "%s run %d (attempt %d) was in flight when its scheduler died: recorded crashed",
            record.key,
            record.run,
            record.attempt,
        )
    if len(records) > TOLD:
        logger.info("%d more runs in flight when their scheduler died: recorded crashed", len(records) - TOLD)


def slots_between(schedule: Schedule, due: int, wall: int, cap: int = MAX_COUNTED) -> int:
    """The regular slots of a fixed-rate or cron schedule from ``due`` to
    ``wall`` (UTC ns), both included, up to ``cap``; 0 for others."""
    if due > wall:
        return 0
    if schedule.kind is Kind.FIXED_RATE:
        return min(cap, (wall - due) // schedule.period_ns + 1)
    if schedule.trigger is None:
        return 0
    count = 0
    for instant in schedule.trigger.iter_ns(due - 1):
        if instant > wall or count >= cap:
            break
        count += 1
    return count
