"""SchedulerCore: the task table, the heaps of due times, the run decisions.

Theory of operation
-------------------
A runner drives the core with four calls and one question:

    add(...)                 -> task id      a task is submitted
    claim(now)               -> Run | None   hand out the next due run, by policy
    complete(id, run, outcome, now)
                             -> Completion | None   a run ended; what changed
    cancel(id, interrupt)    -> CancelResult        what to do about a cancel
    next_deadline()          -> int | None          the earliest due time
    pause(id) / resume(id, now) / set_wall_offset(offset)
    skip(id, run, now) / realign(id, runs, attempt, due)   several schedulers on one store
    run_now(id, now) / backfill_slots(...) / backfill(...)   runs outside the schedule
    take_skips() / take_replaced()   slots that did not run; runs to end ("replace")

Schedule control (``max_concurrent``, ``overlap``, ``misfire_grace``, run now,
backfill, skipped slots) is in ``_control.py``, whose ``ControlMixin`` this
class extends: a plain task never reaches it.

A task's slots come from its :class:`~._schedule.Schedule` (``add(...,
schedule=...)``; one-shots share ``ONCE``): the core asks it for the slot
after a run, where a left-behind slot resumes, and the grid point after a
pause. The core holds the task's state (its current slot, run count,
attempt), the schedule holds the rules.

``claim`` returns ``None`` when nothing is due. ``complete`` returns ``None``
for a stale report (a run that is not the task's current one), so a late
result can never land on a later run. Time is integer nanoseconds throughout,
so a fixed-rate grid ``first + k * period`` is exact.

Heaps. Tasks that are not yet due wait in ``_timers``, ordered by due time.
Under the "due" and "fifo" policies that order is also the run order, so
``claim`` pops straight from it. Under the default "priority" policy, tasks
that have come due move to ``_ready``, ordered by (-priority, due, seq).
``seq`` is the submission order and breaks every tie, so no order ever
depends on heap internals (bpo-19270).

Heap entries hold plain ints, the task's id last: tuples of ints are not
tracked by the cycle collector, so a million pending tasks cost it half as
much. Cancel is O(1): it marks the task CANCELLED, frees its payload at
once and leaves its heap entry behind ("lazy deletion"); the task's record
stays in the table until that entry goes too ("buried": ``state()`` and
``task_ids()`` no longer see it), because freeing a record costs more than
everything else a cancel does (a 12-slot object: its slots released, its
cycle-GC links unhooked, its memory returned; ~150 ns at a million pending,
in memory the cancel would not otherwise touch). A popped entry whose task
is no longer PENDING is dropped, and a buried record with it. Once dead
entries outnumber live ones, both heaps are rebuilt without them and the
buried records are freed, so any number of schedule/cancel pairs keeps
memory flat. Each task has at
most one live heap entry: a periodic task is re-queued only when its run
completes, which is also why it never runs concurrently with itself (a
controlled task, whose runs may overlap, is re-queued when a run starts:
see ``_control.py``). An
entry is live only while its ``seq`` is the task's: a task whose due time
moved while queued (resumed after a pause, a calendar task after a
wall-clock step) gets a fresh ``seq`` and leaves its old entry behind, dead.

Calendars, retries, limits, pause. A task with any of these carries a
:class:`TaskExtra` (``task.extra``; None for plain tasks, so the hot path
pays one slot). Calendar tasks are kept on the monotonic heap like every
other task: their due time is their slot's wall-clock instant minus the
wall-minus-monotonic offset the runner last reported
(``set_wall_offset``); when that offset moves (an NTP step, a suspend),
their due times are recomputed from the slots, so they follow the wall
clock and a step back never repeats a slot. A failed attempt that
``Retry`` covers re-queues the same run (same run number, next attempt)
after its backoff, unless that would reach the task's next regular slot.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping
from heapq import heapify, heappop, heappush
from typing import Any

from ._control import ControlMixin
from ._limits import LimitsMixin, undelay
from ._schedule import ONCE as ONCE_SCHEDULE
from ._schedule import Kind, Schedule
from ._state import OUTCOMES, Outcome, TaskState, transition
from ._task import CancelResult, Completion, Control, Policy, RetryPolicy, Run, TaskExtra, _Task

PENDING = TaskState.PENDING
RUNNING = TaskState.RUNNING
CANCELLED = TaskState.CANCELLED
PAUSED = TaskState.PAUSED
DONE = TaskState.DONE

#: Rebuild the heaps only past this many dead entries (and once they outnumber live ones).
COMPACT_MIN_DEAD = 64
#: A change of the wall-minus-monotonic offset smaller than this is read
#: jitter (or NTP slewing), not a step: calendar due times stay put.
WALL_STEP_NS = 100_000_000


# Hot-path constants (benchmarks/core_scale.py: a million pending tasks). On
# CPython 3.11 reading an enum member off its class (``Kind.ONCE``) costs
# ~100 ns and a ``transition()`` call ~100 ns, a module global ~10 ns: the
# per-task paths (add, claim, cancel, complete) read these instead. The
# state changes they make unconditionally are read off the transition table
# once, here, so the table stays the only place that knows them.
ONCE, FIXED_RATE, FIXED_DELAY, CALENDAR = Kind.ONCE, Kind.FIXED_RATE, Kind.FIXED_DELAY, Kind.CALENDAR
BY_PRIORITY, BY_DUE = Policy.PRIORITY, Policy.DUE
R_CANCELLED, R_STOPPED, R_INTERRUPT = CancelResult.CANCELLED, CancelResult.STOPPED, CancelResult.INTERRUPT
R_REFUSED, R_UNKNOWN = CancelResult.REFUSED, CancelResult.UNKNOWN
CLAIMED = transition(PENDING, "claim")  # PENDING --claim--> RUNNING
CANCELLED_PENDING = transition(PENDING, "cancel")  # PENDING --cancel--> CANCELLED


class SchedulerCore(ControlMixin, LimitsMixin):
    """The deterministic heart of every runner. See the module docstring."""

    def __init__(
        self, policy: Policy | str = Policy.PRIORITY, limits: Mapping[str, int] | None = None, seed: int | None = None
    ) -> None:
        """``limits``: shared limits by group; ``seed``: the jitter's (see ``_limits.py``)."""
        self.policy = Policy(policy)
        self._due_first = self.policy is BY_DUE  # heap entries (due, -priority, seq, id), see _push
        self._tasks: dict[int, _Task] = {}  # every task that is not finished
        self._timers: list[tuple[int, ...]] = []
        self._ready: list[tuple[int, ...]] = []  # "priority" policy only
        # Dead heap entries (their task is no longer PENDING, or was re-queued)
        # number _dead + _buried: a buried task's entry counts in _buried only,
        # so cancel moves one counter.
        self._dead = 0  # dead entries but those of buried tasks
        self._buried = 0  # CANCELLED tasks left in the table for their dead heap entry (see cancel)
        self._compact_at = COMPACT_MIN_DEAD  # check for compaction once _buried passes this (_maybe_compact)
        self._stopping = 0  # CANCELLED tasks whose last run is still in flight
        self._seq = itertools.count(1)
        self._own_ids = True  # no task_id was ever given to add(): ids are seq numbers, unique by construction
        self.wall_offset = 0  # wall-clock ns minus monotonic ns, as last reported
        self.calendars = 0  # calendar tasks not yet finished: the runner watches the wall clock while > 0
        self._rng = random.Random(0x5EED)  # retry jitter: deterministic per core
        self._init_control()
        self._init_limits(limits, seed)

    # -- questions -------------------------------------------------------

    def __len__(self) -> int:
        """Tasks not yet finished or cancelled."""
        return len(self._tasks) - self._stopping - self._buried

    def state(self, task_id: int) -> TaskState | None:
        """The task's state, or ``None`` once it is terminal (or unknown)."""
        task = self._tasks.get(task_id)
        if task is None or _is_buried(task):
            return None
        return RUNNING if task.active and task.state is PENDING else task.state  # (a controlled task's run)

    def kind(self, task_id: int) -> Kind | None:
        task = self._tasks.get(task_id)
        return None if task is None or _is_buried(task) else task.kind

    def task_ids(self) -> list[int]:
        """Ids of every task not yet finished, in submission order."""
        if not self._buried:
            return list(self._tasks)  # a dict keeps insertion (submission) order
        return [tid for tid, task in self._tasks.items() if not _is_buried(task)]

    def next_deadline(self) -> int | None:
        """The earliest due time among PENDING tasks (ns), or ``None`` if none.

        It may lie in the past: then something is due now.
        """
        side = self._side_due() if self._side else None
        ready = self._ready
        while ready and self._live(ready[0][-1], ready[0][-2]) is None:
            self._discard(heappop(ready))
        if ready:
            return ready[0][1] if side is None else min(side, ready[0][1])  # (-prio, due, seq, id): already due
        timers = self._timers
        while timers and self._live(timers[0][-1], timers[0][-2]) is None:
            self._discard(heappop(timers))
        if side is not None:
            return side if not timers else min(side, timers[0][0])
        return timers[0][0] if timers else None

    def schedule(self, task_id: int) -> Schedule | None:
        """The task's schedule, or None once it is terminal (or unknown)."""
        task = self._tasks.get(task_id)
        return None if task is None or _is_buried(task) else task.schedule

    def due(self, task_id: int) -> int | None:
        """A PENDING task's due time (ns), or None."""
        task = self._tasks.get(task_id)
        return None if task is None or task.state is not PENDING else task.due

    def next_wall(self, task_id: int) -> int | None:
        """A PENDING task's next run on the wall clock (ns since the epoch)."""
        task = self._tasks.get(task_id)
        if task is None or task.state is not PENDING:
            return None
        return self._wall_of(task)

    def paused_wall(self, task_id: int) -> int | None:
        """A PAUSED task's next slot on the wall clock: where its grid stands
        (a resume goes on from it, recording the slots passed as skipped)."""
        task = self._tasks.get(task_id)
        if task is None or task.state is not PAUSED:
            return None
        return self._wall_of(task)

    # -- events ----------------------------------------------------------

    def add(
        self,
        due_ns: int,
        priority: int = 0,
        schedule: Schedule = ONCE_SCHEDULE,
        timeout_ns: int | None = None,
        payload: Any = None,
        name: str | None = None,
        task_id: int | None = None,
        retry: RetryPolicy | None = None,  # (none keyword-only: filling those from a dict costs ~50 ns a call)
        retry_on: Any = None,
        start_wall_ns: int = 0,
        first_slot_ns: int | None = None,
        now: int = 0,
    ) -> int:
        """Add a PENDING task first due at ``due_ns``; return its id.

        ``task_id`` lets a runner choose ids (they must be unique); by
        default the core numbers tasks 1, 2, 3, ... Arguments are assumed
        valid: the public API validates them. A calendar task is due at its
        first slot, ``first_slot_ns`` (wall-clock; None: the first strictly
        after ``start_wall_ns``, the call's wall-clock time), whatever
        ``due_ns`` says. The schedule's ``until`` counts from the call:
        ``start_wall_ns`` for a calendar task, ``now`` (the call's time) for
        the others. ``retry``: a failed run is tried again
        by this policy; ``retry_on``: the exception classes it names, as the
        runner carries them (opaque here; without ``retry`` it means nothing).

        Raises ValueError (nothing changes) for a calendar task without a
        slot before its until, and for a ``task_id`` a live task holds.
        """
        seq = next(self._seq)
        task = _Task()
        task.seq = seq
        task.priority = priority
        task.due = due_ns
        task.schedule = schedule
        task.state = PENDING
        task.runs = 0
        task.active = False
        task.timeout = timeout_ns
        task.payload = payload
        task.name = name
        if schedule is ONCE_SCHEDULE:  # a one-shot (the per-task path: no attribute of the schedule read)
            task.kind = ONCE
            extra = None if retry is None else TaskExtra(None, retry, retry_on)
        elif retry is None and not schedule.limited:
            task.kind = schedule.kind
            extra = None
        else:
            kind = task.kind = schedule.kind
            until = schedule.until_ns
            start = start_wall_ns if kind is CALENDAR else now
            extra = TaskExtra(None if until is None else start + until, retry, retry_on)
            if schedule.controlled and kind is not ONCE:
                extra.control = Control()
            if schedule.jitter_ns:
                self._slow = True  # (claim: _limits.py)
            if kind is CALENDAR:
                slot = schedule.first(start_wall_ns) if first_slot_ns is None else first_slot_ns
                if slot is None or (extra.limit is not None and slot > extra.limit):
                    raise ValueError("the calendar task has no slot before its until")
                extra.slot = slot
                due_ns = task.due = slot - self.wall_offset
        task.extra = extra
        tasks = self._tasks
        if task_id is None and self._own_ids:
            tid = seq  # a fresh number, and every id so far was the core's: no task holds it
            tasks[tid] = task
        else:
            tid = seq if task_id is None else task_id
            self._own_ids = False
            # A runner's id is new but for a cancelled task's id chosen again:
            # one probe of the table (a million records: a cache miss) stores
            # the record, the rare id already held is seen by what it returns.
            if tasks.setdefault(tid, task) is not task:
                self._reuse_id(tid, task)
        if extra is not None and task.kind is CALENDAR:
            self.calendars += 1
        # _push, inlined (the per-task path)
        if self._due_first:
            heappush(self._timers, (due_ns, -priority, seq, tid))
        else:
            heappush(self._timers, (due_ns, seq, tid))
        return tid

    def _reuse_id(self, tid: int, task: _Task) -> None:
        """``add`` with an id the table holds: a buried (cancelled) task's id
        is given to the new task, which goes last in submission order; a
        live task's id is refused."""
        tasks = self._tasks
        if not _is_buried(tasks[tid]):
            raise ValueError(f"task_id {tid!r} is already in use")
        del tasks[tid]
        tasks[tid] = task
        self._buried -= 1
        self._dead += 1  # the buried task's heap entry stays dead, counted as such

    def claim(self, now: int) -> Run | None:
        """Hand out the next run due at ``now`` under the policy (task -> RUNNING).

        Returns ``None`` when nothing is due.
        """
        if self._slow:  # limits or jitter (_limits.py)
            return self._claim_slow(now)
        if self._side and self._side[0][0] <= now:  # runs outside the schedule (run now, backfill) first
            run = self._claim_side(now)
            if run is not None:
                return run
        timers, live = self._timers, self._live
        if self.policy is BY_PRIORITY:
            ready = self._ready
            while True:
                while timers and timers[0][0] <= now:
                    entry = heappop(timers)
                    due, seq, tid = entry
                    task = live(tid, seq)
                    if task is not None:
                        heappush(ready, (-task.priority, due, seq, tid))
                    else:
                        self._discard(entry)
                while ready:
                    entry = heappop(ready)
                    task = live(entry[-1], entry[-2])
                    if task is not None:
                        if (run := self._start(entry[-1], task, now)) is not None:
                            return run
                        continue  # its slot was skipped, or waits for a run to end (see _control.py)
                    self._discard(entry)
                if not (timers and timers[0][0] <= now):  # (a skipped slot's next one may be due too)
                    return None
        while timers and timers[0][0] <= now:
            entry = heappop(timers)
            task = live(entry[-1], entry[-2])
            if task is not None:
                if (run := self._start(entry[-1], task, now)) is not None:
                    return run
                continue
            self._discard(entry)
        return None

    def complete(self, task_id: int, run: int, outcome: Outcome, now: int, matched: bool = False) -> Completion | None:
        """The run ``run`` of ``task_id`` ended with ``outcome`` at ``now``.

        ``matched``: for an "error", whether the exception is one of the
        classes its ``Retry.on`` names (the runner that holds the exception
        decides). Returns what changed, or ``None`` if that run is not in
        flight (a stale or duplicate report, which changes nothing).
        """
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, not {outcome!r}")
        task = self._tasks.get(task_id)
        if task is None:
            return None
        extra = task.extra
        if self.gate is not None:  # its unit of its group's limit, if it held one (_limits.py)
            control = None if extra is None else extra.control
            self._unit_free((task_id, run), run in control.inflight if control else task.active and task.runs == run)
        if extra is not None and extra.control is not None:
            return self._complete_controlled(task_id, task, extra, extra.control, run, outcome, now, matched)
        if not task.active or task.runs != run:
            return None
        task.active = False
        if task.state is CANCELLED:  # cancelled while this run was in flight
            self._stopping -= 1
            self._drop(task_id, task)
            return Completion(task_id, run, outcome, CANCELLED, None, 0, False)
        if task.extra is not None:
            return self._complete_extra(task_id, task, task.extra, outcome, now, matched)
        ok = outcome == "ok"
        if task.kind is ONCE or (not ok and task.schedule.stop_on_error):
            task.state = transition(task.state, "finish" if ok and task.kind is ONCE else "fail")
            del self._tasks[task_id]
            return Completion(task_id, run, outcome, task.state, None, 0, True)
        following, missed = task.schedule.after_run(task.due, now, outcome)
        assert following is not None  # a fixed rate or delay (calendar tasks have an extra)
        if missed:
            self._record_between(task_id, task, task.due, following, "misfire")
        task.due = following
        task.state = transition(task.state, "requeue")
        self._push(task_id, task)
        return Completion(task_id, run, outcome, PENDING, task.due, missed, False)

    def continue_runs(self, task_id: int, runs: int, attempt: int = 1, retry_due: int = 0, base: int = 0) -> None:
        """A task restored from a durable store: ``runs`` runs were claimed
        before; the next claim is run ``runs + 1`` (``attempt`` 1), or
        attempt ``attempt`` of run ``runs`` (a retry, due at ``retry_due``,
        of the run whose regular slot was ``base``)."""
        task = self._tasks[task_id]
        task.runs = runs
        if attempt > 1 and task.state is PENDING:
            extra = self._extra(task)
            extra.retrying = True
            extra.attempt = attempt - 1
            extra.base = base
            task.due = retry_due
            self._repush(task_id, task)
            self._bury()  # the entry add() pushed is dead

    def skip(self, task_id: int, run: int, now: int) -> Completion | None:
        """Run ``run`` of ``task_id`` does not happen here: another scheduler
        sharing a durable store claimed that slot. Nothing is counted: no
        outcome, no retry, no misfire; the run number stays used (the other
        scheduler ran it). A periodic task goes on to its next slot as after a
        run that went well (a limit it reached ends it, DONE); a one-shot is
        CANCELLED here (it ran there). Returns what changed, or None if that
        run is not in flight."""
        task = self._tasks.get(task_id)
        if task is None or not task.active or task.runs != run:
            return None
        if task.kind is Kind.ONCE and task.state is RUNNING:
            self._unit_free((task_id, run), True)
            task.active = False
            task.state = transition(task.state, "cancel")
            self._drop(task_id, task)
            return Completion(task_id, run, "cancelled", CANCELLED, None, 0, True)
        return self.complete(task_id, run, "ok", now)

    def realign(
        self, task_id: int, runs: int, attempt: int, due: int, slot_wall: int | None = None, base: int | None = None
    ) -> bool:
        """A task shared through a durable store, where other schedulers
        claimed its runs: the next claim here is run ``runs + 1`` due at
        ``due`` (``attempt`` 1), or attempt ``attempt`` of run ``runs`` (a
        retry) due at ``due``, of the run whose regular slot was ``base``
        (the grid goes on from it; None: not known, from ``due``). A
        calendar task's regular slot is ``slot_wall`` (its due time follows
        it). PENDING tasks only; True if it was realigned."""
        task = self._tasks.get(task_id)
        if task is None or task.state is not PENDING:
            return False
        undelay(task)
        task.runs = runs
        extra = task.extra
        if attempt > 1:
            extra = self._extra(task)
            extra.retrying = True
            extra.attempt = attempt - 1
            extra.base = due if base is None else base
        elif extra is not None:
            extra.retrying = False
            if task.kind is CALENDAR and slot_wall is not None:
                extra.slot = slot_wall
                due = slot_wall - self.wall_offset
        task.due = due
        self._repush(task_id, task)
        self._bury()  # the entry it had is dead
        return True

    def next_claim(self, task_id: int) -> tuple[int, int] | None:
        """(run, attempt) of the task's next claim, or None if it has none queued."""
        task = self._tasks.get(task_id)
        if task is None or task.state is CANCELLED:  # (a buried task is CANCELLED)
            return None
        extra = task.extra
        if extra is not None and extra.retrying:
            return task.runs, extra.attempt + 1
        return task.runs + 1, 1

    def pause(self, task_id: int) -> bool:
        """Pause a task: a PENDING one at once, a RUNNING periodic one when
        its run ends. True if it is (or will be) paused."""
        task = self._tasks.get(task_id)
        if task is None or task.state is CANCELLED:
            return False
        if task.state is PAUSED:
            return True
        if task.state is RUNNING:
            if task.kind is ONCE:
                return False  # its only run is under way
            self._extra(task).pause_asked = True
            return True
        task.state = transition(task.state, "pause")
        undelay(task)
        self._bury()
        return True

    def resume(self, task_id: int, now: int, *, record: bool = True, since_wall: int | None = None) -> bool:
        """Resume a paused task at its next slot from ``now``; True if it was
        paused. ``record``: the slots passed while paused are recorded
        skipped ("paused"); False for a hold the user never asked for (a
        store's standby: another scheduler ran those slots). ``since_wall``:
        they count from the task's first slot after it (wall ns: the last
        slot a durable store accounts for) where its grid stands later (it
        went on "not before now" past another scheduler's runs, and that
        one is gone: the slots between are nobody else's to record)."""
        task = self._tasks.get(task_id)
        if task is None:
            return False
        if task.state is RUNNING and task.extra is not None and task.extra.pause_asked:
            task.extra.pause_asked = False
            return True
        if task.state is not PAUSED:
            return False
        task.state = transition(task.state, "resume")
        extra = task.extra
        if extra is not None and extra.retrying:
            task.due = max(task.due, now)  # the retry of the current run: as soon as it may
        elif extra is not None and task.kind is CALENDAR:
            slot = task.schedule.not_before(extra.slot, now + self.wall_offset)
            if slot is None or (extra.limit is not None and slot > extra.limit):
                slot = extra.slot  # nothing left: run out the pending slot, then end
            if record:
                first = extra.slot
                if since_wall is not None:
                    after = task.schedule.not_before(since_wall, since_wall + 1)
                    first = first if after is None else min(first, after)
                self._record_between(task_id, task, first, slot, "paused", include_first=True)
            extra.slot = slot
            task.due = slot - self.wall_offset
        else:  # the first slot at or after now (a grid point, for a fixed rate)
            following = task.schedule.not_before(task.due, now)
            if following is not None and task.kind is not FIXED_DELAY and record:
                first = task.due
                period = task.schedule.period_ns
                if since_wall is not None and task.kind is FIXED_RATE and period:
                    # the task's first grid point past it (within half a period: that slot, read microseconds off)
                    since = since_wall - self.wall_offset + period // 2
                    first = min(first, first - (first - since - 1) // period * period)
                self._record_between(task_id, task, first, following, "paused", include_first=True)
            task.due = now if following is None else following
        self._repush(task_id, task)  # the entry it had when it paused is dead
        return True

    def set_wall_offset(self, offset_ns: int, now: int | None = None) -> bool:
        """The runner's wall clock minus its monotonic clock, at ``now``. If it
        moved by WALL_STEP_NS or more since last time (the wall clock was
        stepped, or the machine slept), every calendar task's due time is
        recomputed from its slot; a slot that the step left in the past
        follows the task's misfire policy (coalesce: the last slot up to now
        runs once, for all; skip: the next slot after now). Returns True if
        it recomputed."""
        if abs(offset_ns - self.wall_offset) < WALL_STEP_NS:
            return False
        self.wall_offset = offset_ns
        moved = 0
        for tid, task in self._tasks.items():
            extra = task.extra
            if extra is not None and task.kind is CALENDAR and task.state is PENDING and not extra.retrying:
                extra.delayed = None  # (its due time is its slot's again, below)
                if now is not None:  # a slot the step left behind follows the misfire policy
                    resumed = task.schedule.resume(extra.slot, now + offset_ns)
                    if resumed != extra.slot:
                        self._record_between(tid, task, extra.slot, resumed, "misfire", include_first=True)
                    extra.slot = resumed
                due = extra.slot - offset_ns
                if due != task.due:
                    task.due = due
                    self._repush(tid, task)  # its old entry is dead now
                    moved += 1
        self._dead += moved
        if moved:
            self._maybe_compact()
        return True

    def cancel(self, task_id: int, interrupt: bool = False) -> CancelResult:
        """Decide a cancel. See :class:`CancelResult` for what each answer asks."""
        try:  # a subscript is one specialized instruction, .get() a method call (~10 ns at 1M pending)
            task = self._tasks[task_id]
        except KeyError:
            return R_UNKNOWN
        state = task.state
        if state is PENDING and not task.active:  # the per-task path: module constants, no calls (see CLAIMED)
            # Buried, not freed: the record stays in the table, CANCELLED and
            # inactive, until its heap entry is popped or compacted away (see
            # the module docstring; _discard, _compact). Its payload goes now.
            task.state = CANCELLED_PENDING
            task.payload = None
            if task.extra is not None and task.kind is CALENDAR:  # (extra: in the head; kind is not)
                self.calendars -= 1
            buried = self._buried = self._buried + 1  # counts its heap entry among the dead too
            if buried > self._compact_at:
                self._maybe_compact()
            return R_CANCELLED
        if task.extra is not None and task.extra.control is not None and task.active:
            # a controlled task with runs in flight: they end (or are killed) first
            if state is CANCELLED:
                return R_UNKNOWN
            if state is PENDING:
                self._bury()  # its queued slot is dead
                state = transition(state, "claim")
            elif state is PAUSED:
                state = transition(transition(state, "resume"), "claim")
            task.state = transition(state, "cancel")
            self._stopping += 1
            return R_INTERRUPT if interrupt else R_STOPPED
        if state is RUNNING and task.extra is not None and task.extra.control is not None:
            task.state = transition(state, "cancel")  # nothing in flight (a retry or a backfill slot queued)
            self._drop(task_id, task)
            return R_CANCELLED
        if state is PAUSED:  # its heap entry was counted dead when it paused
            task.state = transition(state, "cancel")
            self._drop(task_id, task)
            return R_CANCELLED
        if state is RUNNING:
            if not interrupt and task.kind is ONCE:
                return R_REFUSED
            task.state = transition(state, "cancel")
            self._stopping += 1
            return R_INTERRUPT if interrupt else R_STOPPED
        return R_UNKNOWN  # cancelled already, its last run still in flight

    def cancel_all(self, *, periodic_only: bool = False) -> list[tuple[int, CancelResult]]:
        """Cancel every task (or every periodic one, and every paused one:
        nothing would resume it), in submission order.

        Running one-shot tasks are left to finish (REFUSED); this is what
        shutdown uses.
        """
        return [
            (tid, self.cancel(tid))
            for tid in self.task_ids()
            if not periodic_only or self._tasks[tid].kind is not ONCE or self._tasks[tid].state is PAUSED
        ]

    # -- internals -------------------------------------------------------

    def _push(self, tid: int, task: _Task) -> None:
        if self._due_first:
            heappush(self._timers, (task.due, -task.priority, task.seq, tid))
        else:
            heappush(self._timers, (task.due, task.seq, tid))

    def _live(self, task_id: int, seq: int) -> _Task | None:
        """The task behind a heap entry, or None if the entry is dead."""
        task = self._tasks.get(task_id)
        return task if task is not None and task.state is PENDING and task.seq == seq else None

    def _repush(self, tid: int, task: _Task) -> None:
        """Queue a task whose old heap entry may still be in a heap: a fresh
        ``seq`` stamps the new entry, so the old one is dead for good. (The
        task then ties as if submitted now.)"""
        task.seq = next(self._seq)
        self._push(tid, task)

    def _discard(self, entry: tuple[int, ...]) -> None:
        """A dead heap entry was popped; free its task's record if it was
        buried for it (cancelled while PENDING with this very entry)."""
        tid = entry[-1]
        task = self._tasks.get(tid)
        if task is not None and task.seq == entry[-2] and _is_buried(task):
            del self._tasks[tid]
            self._buried -= 1
        else:
            self._dead -= 1

    def _drop(self, tid: int, task: _Task) -> None:
        """Forget a task that reached a terminal state."""
        del self._tasks[tid]
        if task.kind is CALENDAR:
            self.calendars -= 1

    def _bury(self) -> None:
        """A heap entry just died (its task left PENDING)."""
        self._dead += 1
        self._maybe_compact()

    def _maybe_compact(self) -> None:
        """Compact once dead entries outnumber live ones (and there are more
        than COMPACT_MIN_DEAD). The cancel path checks only ``_buried >
        _compact_at``, one comparison: ``_compact_at`` is set here so that it
        passes when the dead entries reach half the heaps' size at this
        check, the least for which the exact test can pass if no entry is
        popped. (A popped live entry lowers the exact bar without a check,
        so compaction may come later than the exact test would, never with
        more dead entries than half the heaps' size at the last check:
        memory stays bounded. Every other path that adds dead entries calls
        this.)"""
        size = len(self._timers) + len(self._ready)
        dead = self._dead + self._buried
        if dead > COMPACT_MIN_DEAD and dead * 2 > size:
            self._compact()
            size = len(self._timers) + len(self._ready)
        self._compact_at = max(COMPACT_MIN_DEAD, size // 2) - self._dead

    def _start(self, tid: int, task: _Task, now: int) -> Run | None:
        """Start a PENDING task's run (the caller found it live: see _live);
        None if its slot was skipped or waits (see _control.py)."""
        extra = task.extra
        if extra is None:
            task.state = CLAIMED
            task.active = True
            task.runs += 1
            return Run(tid, task.runs, task.due, task.timeout, task.payload, task.name)
        jitter = undelay(task)  # the run's scheduled time is its slot; lateness counts from its jittered start
        grace = task.schedule.misfire_grace_ns
        if grace is not None and not extra.retrying and now - task.due - jitter > grace:
            self._late(tid, task, extra, now)
            return None
        if extra.control is not None:
            return self._start_controlled(tid, task, extra, extra.control, now)
        task.state = CLAIMED
        task.active = True
        if extra.retrying:
            extra.retrying = False
            extra.attempt += 1
        else:
            task.runs += 1
            extra.attempt = 1
            extra.base = task.due
        wall = extra.slot if task.kind is CALENDAR and extra.attempt == 1 else None
        return Run(tid, task.runs, task.due, task.timeout, task.payload, task.name, extra.attempt, wall, extra.retry_on)

    @staticmethod
    def _extra(task: _Task) -> TaskExtra:
        if task.extra is None:  # a plain task paused mid-run: its run is attempt 1 of a regular slot
            task.extra = TaskExtra()
            task.extra.base = task.due
            task.extra.attempt = 1
        return task.extra

    def _wall_of(self, task: _Task) -> int:
        extra = task.extra
        if extra is not None and task.kind is CALENDAR and not extra.retrying:
            return extra.slot
        return task.due + self.wall_offset

    def _complete_extra(
        self, tid: int, task: _Task, extra: TaskExtra, outcome: str, now: int, matched: bool
    ) -> Completion:
        """``complete`` for a task with retries, limits, a calendar or a pause asked."""
        run = task.runs
        ok = outcome == "ok"
        periodic = task.kind is not ONCE
        # The next regular slot (periodic tasks), before deciding on a retry:
        # a retry that would reach it is not made.
        schedule = task.schedule
        next_due: int | None = None
        next_slot: int | None = None
        missed = 0
        if task.kind is CALENDAR:
            next_slot, missed = schedule.after_run(extra.slot, now + self.wall_offset, outcome)
            next_due = None if next_slot is None else next_slot - self.wall_offset
        elif periodic:
            next_due, missed = schedule.after_run(extra.base, now, outcome)
        retry = extra.retry
        if (
            not ok
            and retry is not None
            and extra.attempt < retry.attempts
            and (outcome in retry.outcomes or (outcome == "error" and matched))
        ):
            due = now + retry.delay_after(extra.attempt, self._rng)
            if next_due is None or due < next_due:
                # No slot dropped: the grid goes on from this run's slot after the retry (a
                # crash's "skip" recorded here, then caught up: one slot, two ends - the
                # fault campaign's stores, seed 3404).
                extra.retrying = True
                task.due = due
                return self._requeue(tid, task, extra, outcome, 0, True)
        if missed and next_slot is not None:
            self._record_between(tid, task, extra.slot, next_slot, "misfire")
        elif missed and next_due is not None:
            self._record_between(tid, task, extra.base, next_due, "misfire")
        if not periodic or (not ok and schedule.stop_on_error):
            task.state = transition(task.state, "finish" if ok and not periodic else "fail")
            self._drop(tid, task)
            return Completion(tid, run, outcome, task.state, None, 0, True, None, False, periodic)
        limit = extra.limit
        if (
            next_due is None
            or (schedule.max_runs is not None and run >= schedule.max_runs)
            or (limit is not None and (next_slot if next_slot is not None else next_due) > limit)
        ):
            task.state = transition(task.state, "finish")  # a limit reached: DONE
            self._drop(tid, task)
            return Completion(tid, run, outcome, DONE, None, missed, True, None, False, True)
        task.due = next_due
        if next_slot is not None:
            extra.slot = next_slot
        return self._requeue(tid, task, extra, outcome, missed, False)

    def _requeue(
        self, tid: int, task: _Task, extra: TaskExtra, outcome: str, missed: int, retrying: bool
    ) -> Completion:
        if extra.pause_asked:
            extra.pause_asked = False
            task.state = transition(task.state, "pause")
            return Completion(
                tid, task.runs, outcome, PAUSED, None, missed, False, None, retrying, task.kind is not ONCE
            )
        task.state = transition(task.state, "requeue")
        self._push(tid, task)
        wall = extra.slot if task.kind is CALENDAR and not retrying else None
        return Completion(
            tid, task.runs, outcome, PENDING, task.due, missed, False, wall, retrying, task.kind is not ONCE
        )

    def _compact(self) -> None:
        if self.gate is not None:  # entries waiting for a limit go back to the heaps (claim parks them again)
            (self._ready if self._ranked else self._timers).extend(self.gate.take_all())
        # _live and _is_buried, inlined: this runs over every entry and task
        tasks = self._tasks
        get = tasks.get
        self._timers = [
            e for e in self._timers if (t := get(e[-1])) is not None and t.state is PENDING and t.seq == e[-2]
        ]
        self._ready = [
            e for e in self._ready if (t := get(e[-1])) is not None and t.state is PENDING and t.seq == e[-2]
        ]
        heapify(self._timers)
        heapify(self._ready)
        self._dead = 0
        if self._buried:  # their entries are gone: so are they
            for tid in [tid for tid, t in tasks.items() if t.state is CANCELLED and not t.active]:
                del tasks[tid]
            self._buried = 0
        assert len(self._timers) + len(self._ready) == sum(t.state is PENDING for t in self._tasks.values())


def _is_buried(task: _Task) -> bool:
    """Cancelled while PENDING, its record kept until its heap entry goes
    (see cancel). A task cancelled while RUNNING is CANCELLED too, but its
    run is still in flight (``active``) and it is dropped when that ends."""
    return task.state is CANCELLED and not task.active
