"""A stored task's schedule, and where a stored task goes on.

Pure functions over the store's records and the core's ``Schedule``, used
by both sides of durability (the user process's recovery, the dispatcher's
peers): a definition's schedule (read once per definition), the hash that
says "the same task" whatever the record's version, and a stored task's
resume point.

A definition's ``schedule`` is ``Schedule.to_record()`` (versioned; the
first release's form is read too: ``Schedule.from_record``), its
``options`` what a request holds beyond its schedule (``_recovery.definition``).
"""

from __future__ import annotations

from ... import _tz
from ..._core import Kind, Schedule
from ..._core._schedule import upgrade_record
from ..._store import RunRecord, SQLStore, StoredTask, TaskDefinition, definition_hash

#: Definitions whose schedule is kept decoded (``schedule_of``).
SCHEDULES_KEPT = 1024
#: Slots missed while down recorded per task at a restart, at most (the newest): as the core's skipped slots.
DOWN_KEPT = 100
_schedules: dict[str, Schedule] = {}
#: A first release's stored hash -> the hash this version gives its definition (``stored_hash``).
_hashes: dict[str, str] = {}


def schedule_of(d: TaskDefinition) -> Schedule:
    """A stored task's schedule, for questions about its slots (decoded once
    per definition; its ``until`` counts from the epoch: do not ask it)."""
    schedule = _schedules.get(d.def_hash)
    if schedule is None:
        if len(_schedules) >= SCHEDULES_KEPT:
            _schedules.clear()
        schedule = _schedules[d.def_hash] = Schedule.from_record(d.schedule, d.options, 0, _tz.zone)[0]
    return schedule


def stored_hash(d: TaskDefinition) -> str:
    """The hash of ``d`` as this version writes it: equal for the same task
    whether its record was written now or by the first release (whose
    hash was taken over the older form). The first release's are computed
    once per stored hash (the same old hash, the same old record: a restart
    over 100,000 such tasks of one definition hashed each one anew, 1.9 of
    its 4.8 s under cProfile)."""
    if "v" in d.schedule:
        return d.def_hash
    known = _hashes.get(d.def_hash)
    if known is None:
        if len(_hashes) >= SCHEDULES_KEPT:
            _hashes.clear()
        schedule, options = upgrade_record(d.schedule, d.options)
        known = _hashes[d.def_hash] = definition_hash(d.fn_ref, d.args, schedule, options)
    return known


#: Runs read back to find a retried run's first attempt (``regular_slot``).
HISTORY_BACK = 50


def regular_slot(store: SQLStore, key: str, run: int) -> int | None:
    """The regular slot (UTC ns) of ``key``'s run ``run``: its first
    attempt's scheduled time in the store's history (the task's newest
    HISTORY_BACK attempts), the point a retried run's grid goes on from; None
    if that attempt is not there. StoreError: the store could not say."""
    for record in store.history(key, HISTORY_BACK):
        if isinstance(record, RunRecord) and record.run == run and record.attempt == 1:
            return record.scheduled_ns
    return None


def resume_point(
    task: StoredTask, crashed: RunRecord | None, now_wall: int, slot: int | None = None
) -> tuple[int, int, int | None, int, bool] | None:
    """Where a stored task goes on: (runs claimed so far, next attempt, its
    due time (UTC ns), the regular slot of a retried run, paused), or None if
    it has ended (a one-shot whose only run crashed with no retry left).
    Missed slots follow the task's misfire policy (``Schedule.resume``)."""
    return _resume(task, crashed, now_wall, slot)[0]


def crash_fields(task: StoredTask, crashed: RunRecord, now_wall: int, slot: int | None) -> dict[str, int | None] | None:
    """A task row's fields once ``crashed`` is recorded (``take_over``'s
    ``reschedule``, written in the take-over's own transaction): its resume
    point; None for a one-shot that ended. Every take-over writes them - at
    start-up too: a crash recorded there with the row rescheduled later left
    a crashed retry's task at the retry's time for a moment, and another
    scheduler claiming it then put every later slot off the grid (the fault
    campaign, seed 3220, replayed)."""
    point = resume_point(task, crashed, now_wall, slot)
    if point is None:
        return None
    runs, attempt, due = point[:3]
    return {"run_count": runs, "next_attempt": attempt, "next_due_ns": due}


def down_slots(
    task: StoredTask, crashed: RunRecord | None, now_wall: int, slot: int | None = None, limit: int = DOWN_KEPT
) -> list[int]:
    """The slots (UTC ns, oldest first; the newest ``limit``) that a task
    resumed at ``now_wall`` (as ``resume_point`` says) leaves behind: missed
    while no scheduler ran it, and dropped by its misfire policy (``skip``:
    all of them; ``coalesce``: all but the one it runs; ``catch_up`` runs
    them all). None for a paused task (it would not have run them)."""
    point, left = _resume(task, crashed, now_wall, slot)
    if point is None or left is None or point[4] or point[2] is None or point[2] <= left:
        return []
    return slots_between(schedule_of(task.definition), left, point[2], limit)


def slots_between(schedule: Schedule, start: int, end: int, limit: int) -> list[int]:
    """The newest ``limit`` regular slots ``start <= slot < end`` of
    ``schedule`` (``start`` one of them), oldest first - counted back from
    ``end``, so a task down for a year costs ``limit`` steps, not a year's."""
    if schedule.kind is Kind.FIXED_RATE:
        period = schedule.period_ns
        last = (end - start - 1) // period
        return [start + k * period for k in range(max(0, last - limit + 1), last + 1)]
    trigger = schedule.trigger
    if trigger is None:
        return []
    found: list[int] = []
    at = end - 1
    while len(found) < limit:
        slot = trigger.last_ns(at)
        if slot is None or slot < start:
            break
        found.append(slot)
        at = slot - 1
    return found[::-1]


def _resume(
    task: StoredTask, crashed: RunRecord | None, now_wall: int, slot: int | None
) -> tuple[tuple[int, int, int | None, int, bool] | None, int | None]:
    """(``resume_point``, the slot the misfire policy went on from, if it was left behind: else None)."""
    d, st = task.definition, task.state
    schedule = schedule_of(d)
    kind = schedule.kind
    runs, attempt, due = st.run_count, st.next_attempt, st.next_due_ns
    if crashed is None and task.holder is not None and attempt == 1 and due is not None and kind is not Kind.ONCE:
        due = schedule.next_after(due)  # its run in flight is another scheduler's: the slot after it
    retry = d.options.get("retry")  # (the first release's record keeps it there too: upgrade_record moves others)
    if crashed is not None:
        base = crashed.scheduled_ns if slot is None else slot
        if retry is not None and "crashed" in retry[5] and crashed.attempt < retry[0]:
            return (crashed.run, crashed.attempt + 1, now_wall, base, st.paused), None
        runs, attempt = crashed.run, 1
        if kind is Kind.ONCE:
            return None, None
        due = now_wall if kind is Kind.FIXED_DELAY else schedule.next_after(base)
    if attempt > 1:
        due = now_wall if due is None else due
        return (runs, attempt, due, due if slot is None else slot, st.paused), None
    left = None
    if due is None:  # paused with no slot yet, or stopped at shutdown: from now
        due = schedule.first(now_wall)
    elif due < now_wall:
        left, due = due, schedule.resume(due, now_wall)
    return (runs, 1, due, due or 0, st.paused), left
