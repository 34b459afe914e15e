"""Schedule control: runs counted one by one, runs on demand, backfill, skipped slots.

Theory of operation
-------------------
A plain task has at most one run in flight (``task.active``, its number
``task.runs``), and its next slot is queued when that run ends: that is
what makes it "never concurrent with itself" and is the hot path of the
core. A task is *controlled* - its runs are counted one by one in
``Control.inflight`` (run number -> :class:`Flight`) - when its schedule
lets runs overlap (``max_concurrent`` > 1, or ``overlap`` "skip" /
"replace"), or once it was asked for a run outside its schedule
(``run_now``, ``backfill``): the core then moves it to this path, its run
in flight included.

Two ways a controlled task's slots follow one another (``Schedule.chained``):

- *chained* (a fixed delay, or one run at a time that waits: the behaviour
  of a plain task): the next slot is queued when the scheduled run (all its
  attempts) ends, by ``Schedule.after_run`` as for a plain task.
- *detached* (every other): the next slot is queued as soon as a run
  starts, so it can come due while runs are running. Then, if
  ``max_concurrent`` runs are in flight, ``overlap`` decides: "skip"
  records the slot as skipped (reason "overlap") and queues the next one;
  "replace" asks the runner to end the oldest run (``replaced``: the runner
  kills it as ``cancel(interrupt=True)`` does and reports it "cancelled";
  its completion says reason "replaced") and starts the slot; "wait" holds
  the slot (``blocked``, the task RUNNING) until a run ends, then the
  misfire policy decides where it goes on (``Schedule.resume``).

Runs outside the schedule (:class:`SideRun`: a manual run, a backfill slot,
a retry of a controlled run) wait in the core's side heap, ordered by due
time and claimed before the regular heaps. They obey ``max_concurrent``
too: one that finds the task full waits in ``Control.waiting`` ("replace":
it ends the oldest run; a backfill slot under "skip" is skipped). Backfill
slots run one after another, in slot order: the next is queued when the
previous ends. A retry attempt in flight counts as a running run.

Skipped slots. Every slot that does not run is a :class:`SkipRecord` in
``SchedulerCore.skips`` (the runner takes them, in order): "overlap",
"misfire" (dropped by the misfire policy), "late" (past
``misfire_grace``), "paused" (passed while the task was paused: recorded
when it resumes). At most ``RECORDS_PER_STEP`` are recorded per step (the
newest): a task asleep for a year does not produce a million records.
"""

from __future__ import annotations

import itertools
from collections import deque
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any

from ._schedule import Kind, Overlap, Schedule
from ._state import TaskState, transition
from ._task import (
    BACKFILL,
    BACKFILL_MAX,
    MANUAL,
    RECORDS_PER_STEP,
    SCHEDULE,
    Completion,
    Control,
    Flight,
    RetryPolicy,
    Run,
    SideRun,
    SkipRecord,
    TaskExtra,
    _Task,
)

CALENDAR = Kind.CALENDAR
PENDING, RUNNING, PAUSED, CANCELLED, DONE = (
    TaskState.PENDING,
    TaskState.RUNNING,
    TaskState.PAUSED,
    TaskState.CANCELLED,
    TaskState.DONE,
)


class ControlMixin:
    """The controlled path of :class:`SchedulerCore` (see the module docstring)."""

    if TYPE_CHECKING:
        _tasks: dict[int, _Task]
        wall_offset: int
        _stopping: int
        _rng: Any

        def _push(self, tid: int, task: _Task) -> None: ...
        def _drop(self, tid: int, task: _Task) -> None: ...
        def _bury(self) -> None: ...
        def _side_admitted(self, tid: int, task: _Task, entry: tuple[int, int, int], side: SideRun) -> bool: ...
        @staticmethod
        def _extra(task: _Task) -> TaskExtra: ...

    def _init_control(self) -> None:
        self._side: list[tuple[int, int, int]] = []  # (due, seq, task id)
        self._side_runs: dict[int, SideRun] = {}  # seq -> the run
        self._side_seq = itertools.count(1)
        self._flight_order = itertools.count(1)
        #: Skipped slots, in order; the runner takes them (``take_skips``).
        self.skips: list[SkipRecord] = []
        #: Runs to end for a newer slot ("replace"), (task id, run): the
        #: runner takes them (``take_replaced``) and reports each "cancelled".
        self.replaced: list[tuple[int, int]] = []

    # -- the runner's side ------------------------------------------------

    def take_skips(self) -> list[SkipRecord]:
        skips, self.skips = self.skips, []
        return skips

    def take_replaced(self) -> list[tuple[int, int]]:
        replaced, self.replaced = self.replaced, []
        return replaced

    def cause_of(self, task_id: int, run: int) -> str | None:
        """Why a run in flight runs (None: not in flight, or a plain task's: "schedule")."""
        task = self._tasks.get(task_id)
        control = None if task is None or task.extra is None else task.extra.control
        flight = None if control is None else control.inflight.get(run)
        return None if flight is None else flight.cause

    def running(self, task_id: int) -> int:
        """How many runs of the task are in flight."""
        task = self._tasks.get(task_id)
        if task is None:
            return 0
        control = None if task.extra is None else task.extra.control
        return len(control.inflight) if control is not None else int(task.active)

    # -- on demand -----------------------------------------------------------

    def run_now(self, task_id: int, now: int) -> bool:
        """One extra run of a periodic task, now (its next slot does not
        move; a paused task stays paused), subject to ``max_concurrent`` /
        ``overlap``: False if "skip" finds it full (or the task is not live
        or not periodic)."""
        task = self._tasks.get(task_id)
        if task is None or task.state is CANCELLED or task.kind is Kind.ONCE or task.state.terminal:
            return False
        schedule = task.schedule
        if schedule.overlap is Overlap.SKIP and self.running(task_id) >= schedule.max_concurrent:
            return False
        self._control_of(task_id, task)
        self._queue_side(SideRun(task_id, 0, 1, now, now + self.wall_offset, MANUAL), now)
        return True

    def backfill_slots(self, task_id: int, start_wall: int, end_wall: int, now: int) -> list[tuple[int, int]]:
        """The task's regular slots ``start_wall <= slot < end_wall`` and
        ``slot <= now``, as (monotonic ns, wall ns), in order. Raises
        ValueError for a one-shot or fixed-delay task and past BACKFILL_MAX."""
        task = self._tasks.get(task_id)
        if task is None or task.state.terminal:
            raise ValueError(f"task {task_id!r} is not a live task")
        schedule = task.schedule
        if schedule.kind is not Kind.FIXED_RATE and schedule.kind is not CALENDAR:
            raise ValueError(
                f"backfill needs a fixed-rate or cron task; task {task_id} is {schedule.kind.value.replace('_', '-')}"
            )
        if start_wall >= end_wall:
            raise ValueError(f"backfill start must be before end, not {start_wall} >= {end_wall} (ns)")
        offset = self.wall_offset
        end = min(end_wall, now + offset + 1)
        slots: list[tuple[int, int]] = []
        if schedule.trigger is None:
            period = schedule.period_ns
            extra = task.extra
            # any point of its grid: the run in flight's slot, a queued retry's slot, or the next slot
            anchor = extra.base if extra is not None and (task.active or extra.retrying) else task.due
            wall = anchor + offset + -(-(start_wall - anchor - offset) // period) * period
            while wall < end:
                slots.append((wall - offset, wall))
                if len(slots) > BACKFILL_MAX:
                    break
                wall += period
        else:
            for instant in schedule.trigger.iter_ns(start_wall - 1):
                if instant >= end:
                    break
                slots.append((instant - offset, instant))
                if len(slots) > BACKFILL_MAX:
                    break
        if len(slots) > BACKFILL_MAX:
            raise ValueError(f"backfill covers more than {BACKFILL_MAX} slots of task {task_id}: narrow start..end")
        return slots

    def backfill(self, task_id: int, slots: list[tuple[int, int]], now: int) -> bool:
        """Run ``slots`` (from ``backfill_slots``) one after another, in order."""
        task = self._tasks.get(task_id)
        if task is None or task.state is CANCELLED or task.state.terminal or task.kind is Kind.ONCE:
            return False
        control = self._control_of(task_id, task)
        control.backfill.extend(slots)
        if not control.backfilling:
            self._next_backfill(task_id, control, now)
        return True

    # -- internals: the side heap --------------------------------------------

    def _queue_side(self, side: SideRun, due: int) -> None:
        seq = next(self._side_seq)
        self._side_runs[seq] = side
        heappush(self._side, (due, seq, side.task_id))

    def _side_due(self) -> int | None:
        """The earliest live side run's due time (dead entries dropped)."""
        side = self._side
        while side:
            _, seq, tid = side[0]
            task = self._tasks.get(tid)
            if seq in self._side_runs and task is not None and task.state is not CANCELLED:
                return side[0][0]
            heappop(side)
            self._side_runs.pop(seq, None)
        return None

    def _claim_side(self, now: int) -> Run | None:
        side = self._side
        while side and side[0][0] <= now:
            due, seq, tid = heappop(side)
            waiting = self._side_runs.pop(seq, None)
            task = self._tasks.get(tid)
            if waiting is None or task is None or task.state is CANCELLED or task.extra is None:
                continue
            control = task.extra.control
            if control is None:
                continue
            if not self._side_admitted(tid, task, (due, seq, tid), waiting):  # its group is full (_limits.py)
                continue
            run = self._start_side(tid, task, control, waiting, now)
            if run is not None:
                return run
        return None

    def _start_side(self, tid: int, task: _Task, control: Control, side: SideRun, now: int) -> Run | None:
        schedule = task.schedule
        if len(control.inflight) >= schedule.max_concurrent:
            if schedule.overlap is Overlap.REPLACE:
                self._replace_oldest(tid, control)
            elif side.cause == BACKFILL and schedule.overlap is Overlap.SKIP:
                self.skips.append(SkipRecord(tid, side.slot_ns, side.wall_ns, "overlap"))
                control.backfilling = False
                self._next_backfill(tid, control, now)
                return None
            else:
                control.waiting.append(side)
                return None
        run = side.run
        if run == 0:
            run = task.runs = task.runs + 1
        control.inflight[run] = Flight(side.slot_ns, side.wall_ns, side.cause, side.attempt, next(self._flight_order))
        task.active = True
        extra = task.extra
        assert extra is not None
        return Run(
            tid,
            run,
            side.slot_ns,
            task.timeout,
            task.payload,
            task.name,
            side.attempt,
            side.wall_ns,
            extra.retry_on,
            side.cause,
        )

    def _next_backfill(self, tid: int, control: Control, now: int) -> None:
        if control.backfill:
            slot, wall = control.backfill.popleft()
            control.backfilling = True
            self._queue_side(SideRun(tid, 0, 1, slot, wall, BACKFILL), now)
        else:
            control.backfilling = False

    def _replace_oldest(self, tid: int, control: Control) -> None:
        candidates = [(f.order, run) for run, f in control.inflight.items() if run not in control.replacing]
        if candidates:
            run = min(candidates)[1]
            control.replacing.add(run)
            self.replaced.append((tid, run))

    # -- internals: the task's own slots ---------------------------------------

    def _control_of(self, tid: int, task: _Task) -> Control:
        """The task's Control, made (its run in flight, or its queued retry,
        moved onto the controlled path) if it has none yet."""
        extra = self._extra(task)
        control = extra.control
        if control is not None:
            return control
        control = extra.control = Control()
        control.scheduled = task.runs
        calendar = task.kind is CALENDAR
        if task.active:  # its scheduled run is in flight (a plain task: one at a time)
            wall = extra.slot if calendar else extra.base + self.wall_offset
            control.inflight[task.runs] = Flight(extra.base, wall, SCHEDULE, extra.attempt, next(self._flight_order))
        elif extra.retrying and task.state is PENDING:  # its retry is queued as its entry: a side run now
            extra.retrying = False
            wall = extra.slot if calendar else extra.base + self.wall_offset
            retry = SideRun(tid, task.runs, extra.attempt + 1, extra.base, wall, SCHEDULE)
            self._queue_side(retry, task.due)
            task.state = transition(task.state, "claim")  # its slots go on when that retry ends
            self._bury()
        return control

    def _late(self, tid: int, task: _Task, extra: TaskExtra, now: int) -> None:
        """The task's due slot is past its misfire_grace: skipped ("late");
        the task goes on at its first slot that is not late (a one-shot
        ends CANCELLED)."""
        schedule = task.schedule
        grace = schedule.misfire_grace_ns
        assert grace is not None
        calendar = task.kind is CALENDAR
        offset = self.wall_offset
        slot = extra.slot if calendar else task.due
        if task.kind is Kind.ONCE:
            task.state = transition(task.state, "cancel")
            self._drop(tid, task)
            self.skips.append(SkipRecord(tid, task.due, task.due + offset, "late", CANCELLED))
            return
        floor = now - grace + (offset if calendar else 0)
        following = schedule.next_after(slot)
        if task.kind is Kind.FIXED_DELAY:
            resumed: int | None = now + schedule.period_ns
        else:
            resumed = None if following is None else schedule.not_before(following, floor)
        stop = resumed if resumed is not None else (slot + 1 if following is None else following)
        self._record_between(tid, task, slot, stop, "late", include_first=True)
        self._go_on(tid, task, extra, resumed, skipped=True)

    def _go_on(self, tid: int, task: _Task, extra: TaskExtra, slot: int | None, skipped: bool = False) -> None:
        """Queue the task (PENDING, popped) at ``slot`` (its base: wall for a
        calendar), or end it (DONE) when no slot is left: at once if no run
        is in flight, else when they end (``exhausted``). ``skipped``: the
        last skip record is this task's slot that just did not run (it says
        so if the task ended there)."""
        calendar = task.kind is CALENDAR
        control = extra.control
        if slot is None or (extra.limit is not None and slot > extra.limit):
            if control is not None and (control.inflight or control.waiting or control.backfilling):
                control.exhausted = True
                task.state = transition(task.state, "claim")
                return
            task.state = transition(transition(task.state, "claim"), "finish")
            self._drop(tid, task)
            if skipped and self.skips:
                self.skips[-1] = self.skips[-1]._replace(state=DONE)
            return
        if calendar:
            extra.slot = slot
            task.due = slot - self.wall_offset
        else:
            task.due = slot
        self._push(tid, task)

    def _start_controlled(self, tid: int, task: _Task, extra: TaskExtra, control: Control, now: int) -> Run | None:
        """Start the task's due slot (popped, PENDING), or skip, replace or wait."""
        schedule = task.schedule
        calendar = task.kind is CALENDAR
        slot = task.due
        wall = extra.slot if calendar else slot + self.wall_offset
        if len(control.inflight) >= schedule.max_concurrent:
            overlap = schedule.overlap
            if overlap is Overlap.SKIP:
                self.skips.append(SkipRecord(tid, slot, wall, "overlap"))
                following = schedule.next_after(extra.slot if calendar else slot)
                if task.kind is Kind.FIXED_DELAY:
                    following = now + schedule.period_ns
                self._go_on(tid, task, extra, following, skipped=True)
                return None
            if overlap is Overlap.WAIT:
                control.blocked = True
                task.state = transition(task.state, "claim")  # RUNNING: waits for a run to end
                return None
            self._replace_oldest(tid, control)
        task.runs += 1
        run = task.runs
        control.scheduled += 1
        extra.attempt = 1
        extra.base = slot
        control.inflight[run] = Flight(slot, wall, SCHEDULE, 1, next(self._flight_order))
        task.active = True
        if schedule.chained:
            task.state = transition(task.state, "claim")
        else:  # detached: its next slot is queued now
            max_runs = schedule.max_runs
            following = (
                None
                if max_runs is not None and control.scheduled >= max_runs
                else schedule.next_after(extra.slot if calendar else slot)
            )
            self._go_on(tid, task, extra, following)
        return Run(tid, run, slot, task.timeout, task.payload, task.name, 1, wall if calendar else None, extra.retry_on)

    def _complete_controlled(
        self, tid: int, task: _Task, extra: TaskExtra, control: Control, run: int, outcome: str, now: int, matched: bool
    ) -> Completion | None:
        flight = control.inflight.pop(run, None)
        if flight is None:
            return None
        task.active = bool(control.inflight)
        reason = None
        if run in control.replacing:
            control.replacing.discard(run)
            reason = "replaced"
        if task.state is CANCELLED:
            if not task.active:
                self._stopping -= 1
                self._drop(tid, task)
            return Completion(tid, run, outcome, CANCELLED, None, 0, False, None, False, True, reason)
        schedule = task.schedule
        retry: RetryPolicy | None = extra.retry
        if (
            outcome != "ok"
            and reason is None
            and retry is not None
            and flight.attempt < retry.attempts
            and (outcome in retry.outcomes or (outcome == "error" and matched))
        ):
            due = now + retry.delay_after(flight.attempt, self._rng)
            self._queue_side(SideRun(tid, run, flight.attempt + 1, flight.slot_ns, flight.wall_ns, flight.cause), due)
            self._release(tid, task, extra, control, now)
            return Completion(tid, run, outcome, self._public(task), due, 0, False, None, True, True, reason)
        if flight.cause == BACKFILL:
            self._next_backfill(tid, control, now)
        missed = 0
        state = task.state
        if not outcome == "ok" and schedule.stop_on_error and flight.cause == SCHEDULE:
            if state is PENDING:
                self._bury()  # its queued slot is dead
            elif state is PAUSED:
                state = transition(state, "resume")
            task.state = transition(state if state is RUNNING else transition(state, "claim"), "fail")
            if task.active:
                for other in control.inflight:  # its other runs end with it
                    control.replacing.add(other)
                    self.replaced.append((tid, other))
            self._drop(tid, task)
            return Completion(tid, run, outcome, task.state, None, 0, True, None, False, True, reason)
        if flight.cause == SCHEDULE and schedule.chained and state is RUNNING and not control.blocked:
            # the scheduled run of a chained task ended: its next slot, as a plain task's
            calendar = task.kind is CALENDAR
            base = flight.wall_ns if calendar else flight.slot_ns
            ended_at = now + self.wall_offset if calendar else now
            following, missed = schedule.after_run(base, ended_at, outcome)
            if missed and following is not None:
                first = schedule.next_after(base)
                if first is not None:
                    self._record_between(tid, task, first, following, "misfire", include_first=True)
            if schedule.max_runs is not None and control.scheduled >= schedule.max_runs:
                following = None
            task.state = transition(state, "requeue")
            if extra.pause_asked and following is not None:
                extra.pause_asked = False
                if calendar:
                    extra.slot = following
                    task.due = following - self.wall_offset
                else:
                    task.due = following
                task.state = transition(task.state, "pause")
            else:
                self._go_on(tid, task, extra, following)
        self._release(tid, task, extra, control, now)
        ended = False
        if (
            control.exhausted
            and not control.inflight
            and not control.waiting
            and not control.backfilling
            and task.state is RUNNING
        ):
            task.state = transition(task.state, "finish")
            self._drop(tid, task)
            ended = True
        elif task.state is DONE:
            ended = True
        public = self._public(task)
        next_due = task.due if public is PENDING or (public is RUNNING and task.state is PENDING) else None
        next_wall = extra.slot if task.kind is CALENDAR and next_due is not None else None
        return Completion(tid, run, outcome, public, next_due, missed, ended, next_wall, False, True, reason)

    def _release(self, tid: int, task: _Task, extra: TaskExtra, control: Control, now: int) -> None:
        """A run ended: a slot that waits for one may go (its blocked slot
        first, by the misfire policy; then a side run that found it full)."""
        schedule = task.schedule
        if control.blocked and len(control.inflight) < schedule.max_concurrent and task.state is RUNNING:
            control.blocked = False
            calendar = task.kind is CALENDAR
            slot = extra.slot if calendar else task.due
            resumed = schedule.resume(slot, now + self.wall_offset if calendar else now)
            if resumed != slot:
                self._record_between(tid, task, slot, resumed, "misfire", include_first=True)
            task.state = transition(task.state, "requeue")
            if extra.pause_asked:
                extra.pause_asked = False
                task.state = transition(task.state, "pause")
                if calendar:
                    extra.slot = resumed
                task.due = resumed - self.wall_offset if calendar else resumed
            else:
                self._go_on(tid, task, extra, resumed)
        if control.waiting and len(control.inflight) < schedule.max_concurrent:
            self._queue_side(control.waiting.popleft(), now)

    def _public(self, task: _Task) -> TaskState:
        return RUNNING if task.active and task.state is PENDING else task.state

    def _record_between(
        self, tid: int, task: _Task, first: int, stop: int, reason: str, include_first: bool = False
    ) -> None:
        """Record the task's regular slots from ``first`` (a slot; included
        if ``include_first``) up to ``stop`` (excluded) as skipped, the
        newest RECORDS_PER_STEP of them. Slots in the task's base (wall
        for a calendar)."""
        schedule = task.schedule
        offset = self.wall_offset
        if schedule.kind is Kind.FIXED_RATE:  # grid points: one record
            span = grid_span(schedule.period_ns, first, stop, include_first)
            if span is not None:
                slot, slots = span
                self.skips.append(SkipRecord(tid, slot, slot + offset, reason, None, schedule.period_ns, slots))
            return
        calendar = task.kind is CALENDAR
        for slot in regular_slots(schedule, first, stop, include_first):
            self.skips.append(
                SkipRecord(tid, slot - offset if calendar else slot, slot if calendar else slot + offset, reason)
            )


def grid_span(period: int, first: int, stop: int, include_first: bool) -> tuple[int, int] | None:
    """The grid points ``first + k * period`` before ``stop`` (``first``
    itself if ``include_first``), the newest RECORDS_PER_STEP of them, as
    (the first kept, how many); None if there are none."""
    count = -(-(stop - first) // period)
    start_k = max(0 if include_first else 1, count - RECORDS_PER_STEP)
    if start_k >= count:
        return None
    return first + start_k * period, count - start_k


def regular_slots(schedule: Schedule, first: int, stop: int, include_first: bool = True) -> list[int]:
    """The schedule's slots from ``first`` (itself a slot) up to ``stop``
    (excluded), the newest RECORDS_PER_STEP of them."""
    if first >= stop:
        return []
    if schedule.trigger is not None:
        kept: deque[int] = deque(maxlen=RECORDS_PER_STEP)
        if include_first:
            kept.append(first)
        for n, instant in enumerate(schedule.trigger.iter_ns(first)):
            if instant >= stop or n >= BACKFILL_MAX:
                break
            kept.append(instant)
        return list(kept)
    return [first] if include_first else []
