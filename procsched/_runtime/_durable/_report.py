"""What a start-up on a store tells at INFO (issue 26 items 2 and 6).

    _recovery.recover, plan ──▶ resumed(found, plan, wall) ──▶ logger "procsched", INFO:
        resumed 3 stored task(s) from the store: tick (run 44 next), slow (run 7 next), ...
        (another scheduler registered on the store: found 3 stored task(s) that scheduler vm/3029,
         registered on the store, runs too: tick (run 44 next), ...; ... this one stands by ...)
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
from typing import TYPE_CHECKING

from ..._core import Kind, Misfire, Schedule
from ._stored import schedule_of

if TYPE_CHECKING:
    from ._recovery import Plan, Recovered

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


def resumed(found: Recovered, plan: Plan, wall: int) -> None:
    """Log what ``plan`` adopts of what start-up ``found``: resumed here,
    or, while other schedulers are registered on the store (alive, or not
    known dead: a lease that ran out is taken over later, if it stays out),
    found and run with them (this one stands by while they keep a task up); the slots each
    task missed while no scheduler ran it, and the runs recorded
    ``crashed`` (in flight when their scheduler died)."""
    if not logger.isEnabledFor(logging.INFO) or not plan.tasks:
        return
    tasks, crashed = found.tasks, found.crashed
    rows = plan.rows(0, TOLD)
    count = len(plan.tasks)
    listed = ", ".join(
        f"{row.key} (run {row.runs + 1} next)"
        if row.attempt == 1
        else f"{row.key} (run {row.runs} attempt {row.attempt} next)"
        for row in rows
    )
    more = f" and {count - TOLD} more" if count > TOLD else ""
    if found.others:
        one = len(found.others) == 1
        names = ", ".join(f"{h.host}/{h.pid}" for h in found.others[:TOLD])
        names += f" and {len(found.others) - TOLD} more" if len(found.others) > TOLD else ""
        logger.info(
            "found %d stored task(s) that %s, registered on the store, %s too: %s%s; each run runs once among them: "
            "this one stands by for a task while %s keeps it up, and takes it over if it stops",
            count,
            f"scheduler {names}" if one else f"schedulers {names}",
            "runs" if one else "run",
            listed,
            more,
            "that one" if one else "another",
        )
    else:
        logger.info("resumed %d stored task(s) from the store: %s%s", count, listed, more)
    adopted = plan.adopted
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
