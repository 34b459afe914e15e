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
much. Cancel is O(1): it marks the task CANCELLED, drops it from the table
(freeing its payload at once) and leaves its heap entry behind ("lazy
deletion"). A popped entry whose task is no longer PENDING is dropped.
Once dead entries outnumber live ones, both heaps are rebuilt without them,
so any number of schedule/cancel pairs keeps memory flat. Each task has at
most one heap entry: a periodic task is re-queued only when its run
completes, which is also why it never runs concurrently with itself.
"""

from __future__ import annotations

import enum
import itertools
from heapq import heapify, heappop, heappush
from typing import Any, NamedTuple

from ._state import OUTCOMES, Outcome, TaskState, transition

PENDING = TaskState.PENDING
RUNNING = TaskState.RUNNING
CANCELLED = TaskState.CANCELLED

#: Rebuild the heaps only past this many dead entries (and once they outnumber live ones).
COMPACT_MIN_DEAD = 64


class Kind(enum.Enum):
    ONCE = "once"
    FIXED_RATE = "fixed_rate"
    FIXED_DELAY = "fixed_delay"


class Misfire(enum.Enum):
    """What a fixed-rate task does about grid slots it missed while overrunning."""

    CATCH_UP = "catch_up"
    """Run every missed slot, back to back (Java's ScheduledThreadPoolExecutor)."""
    SKIP = "skip"
    """Drop the missed slots; next run at the first grid point at or after now."""
    COALESCE = "coalesce"
    """Run once, now, for all missed slots; then resume the grid."""


class Policy(enum.Enum):
    """Which due task runs first when several are due."""

    PRIORITY = "priority"
    """Highest priority, then earliest due time, then submission order."""
    DUE = "due"
    """Earliest due time, then highest priority, then submission order."""
    FIFO = "fifo"
    """Earliest due time, then submission order; priority is ignored."""


class CancelResult(enum.Enum):
    """The core's answer to a cancel; ``accepted`` is what ``cancel()`` returns."""

    CANCELLED = "cancelled"
    """It was PENDING: now CANCELLED, it will never run."""
    STOPPED = "stopped"
    """A running periodic task: now CANCELLED; the current run finishes."""
    INTERRUPT = "interrupt"
    """Now CANCELLED; the runtime must kill the current run and then report
    it with ``complete(..., "cancelled", ...)``."""
    REFUSED = "refused"
    """A running one-shot task without ``interrupt=True``: left alone."""
    UNKNOWN = "unknown"
    """Finished, already cancelled, or never existed."""

    @property
    def accepted(self) -> bool:
        return self in (CancelResult.CANCELLED, CancelResult.STOPPED, CancelResult.INTERRUPT)


class Run(NamedTuple):
    """A run handed out by :meth:`SchedulerCore.claim`."""

    task_id: int
    run: int
    scheduled_ns: int
    timeout_ns: int | None
    payload: Any
    name: str | None


class Completion(NamedTuple):
    """What :meth:`SchedulerCore.complete` changed."""

    task_id: int
    run: int
    outcome: str
    state: TaskState
    next_due_ns: int | None
    missed: int
    """Grid slots dropped by the misfire policy (0 unless some were)."""
    ended: bool
    """The task reached a terminal state in this step (it was not already)."""


class _Task:
    __slots__ = (
        "id", "seq", "kind", "priority", "due", "period", "misfire",
        "stop_on_error", "state", "runs", "active", "timeout", "payload", "name",
    )  # fmt: skip
    id: int
    seq: int
    kind: Kind
    priority: int
    due: int  # the scheduled time of the current (or next) run
    period: int
    misfire: Misfire
    stop_on_error: bool
    state: TaskState
    runs: int  # runs claimed so far; the current run's number
    active: bool  # a run is in flight
    timeout: int | None
    payload: Any
    name: str | None

    def __repr__(self) -> str:
        return f"<task {self.id} {self.kind.value} {self.state.name} due={self.due} runs={self.runs}>"


class SchedulerCore:
    """The deterministic heart of every runner. See the module docstring."""

    def __init__(self, policy: Policy | str = Policy.PRIORITY) -> None:
        self.policy = Policy(policy)
        self._tasks: dict[int, _Task] = {}  # every task that is not finished
        self._timers: list[tuple[Any, ...]] = []
        self._ready: list[tuple[Any, ...]] = []  # "priority" policy only
        self._dead = 0  # heap entries whose task is no longer PENDING
        self._stopping = 0  # CANCELLED tasks whose last run is still in flight
        self._seq = itertools.count(1)

    # -- questions -------------------------------------------------------

    def __len__(self) -> int:
        """Tasks not yet finished or cancelled."""
        return len(self._tasks) - self._stopping

    def state(self, task_id: int) -> TaskState | None:
        """The task's state, or ``None`` once it is terminal (or unknown)."""
        task = self._tasks.get(task_id)
        return None if task is None else task.state

    def kind(self, task_id: int) -> Kind | None:
        task = self._tasks.get(task_id)
        return None if task is None else task.kind

    def task_ids(self) -> list[int]:
        """Ids of every task not yet finished, in submission order."""
        return sorted(self._tasks, key=lambda i: self._tasks[i].seq)

    def next_deadline(self) -> int | None:
        """The earliest due time among PENDING tasks (ns), or ``None`` if none.

        It may lie in the past: then something is due now.
        """
        ready = self._ready
        while ready and self._live(ready[0][-1]) is None:
            heappop(ready)
            self._dead -= 1
        if ready:
            return ready[0][1]  # (-prio, due, seq, id): already due
        timers = self._timers
        while timers and self._live(timers[0][-1]) is None:
            heappop(timers)
            self._dead -= 1
        return timers[0][0] if timers else None

    # -- events ----------------------------------------------------------

    def add(
        self,
        due_ns: int,
        priority: int = 0,
        kind: Kind = Kind.ONCE,
        period_ns: int = 0,
        misfire: Misfire = Misfire.CATCH_UP,
        stop_on_error: bool = False,
        timeout_ns: int | None = None,
        payload: Any = None,
        name: str | None = None,
        task_id: int | None = None,
    ) -> int:
        """Add a PENDING task first due at ``due_ns``; return its id.

        ``task_id`` lets a runner choose ids (they must be unique); by
        default the core numbers tasks 1, 2, 3, ... Arguments are assumed
        valid: the public API validates them.
        """
        seq = next(self._seq)
        tid = seq if task_id is None else task_id
        if tid in self._tasks:
            raise ValueError(f"task_id {tid!r} is already in use")
        task = _Task()
        task.id = tid
        task.seq = seq
        task.kind = kind
        task.priority = priority
        task.due = due_ns
        task.period = period_ns
        task.misfire = misfire
        task.stop_on_error = stop_on_error
        task.state = PENDING
        task.runs = 0
        task.active = False
        task.timeout = timeout_ns
        task.payload = payload
        task.name = name
        self._tasks[tid] = task
        self._push(task)
        return tid

    def claim(self, now: int) -> Run | None:
        """Hand out the next run due at ``now`` under the policy (task -> RUNNING).

        Returns ``None`` when nothing is due.
        """
        timers, live = self._timers, self._live
        if self.policy is Policy.PRIORITY:
            ready = self._ready
            while timers and timers[0][0] <= now:
                due, seq, tid = heappop(timers)
                task = live(tid)
                if task is not None:
                    heappush(ready, (-task.priority, due, seq, tid))
                else:
                    self._dead -= 1
            while ready:
                task = live(heappop(ready)[-1])
                if task is not None:
                    return self._start(task)
                self._dead -= 1
            return None
        while timers and timers[0][0] <= now:
            task = live(heappop(timers)[-1])
            if task is not None:
                return self._start(task)
            self._dead -= 1
        return None

    def complete(self, task_id: int, run: int, outcome: Outcome, now: int) -> Completion | None:
        """The run ``run`` of ``task_id`` ended with ``outcome`` at ``now``.

        Returns what changed, or ``None`` if that run is not in flight (a
        stale or duplicate report, which changes nothing).
        """
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, not {outcome!r}")
        task = self._tasks.get(task_id)
        if task is None or not task.active or task.runs != run:
            return None
        task.active = False
        if task.state is CANCELLED:  # cancelled while this run was in flight
            self._stopping -= 1
            del self._tasks[task_id]
            return Completion(task_id, run, outcome, CANCELLED, None, 0, False)
        ok = outcome == "ok"
        if task.kind is Kind.ONCE or (not ok and task.stop_on_error):
            task.state = transition(task.state, "finish" if ok and task.kind is Kind.ONCE else "fail")
            del self._tasks[task_id]
            return Completion(task_id, run, outcome, task.state, None, 0, True)
        missed = 0
        if task.kind is Kind.FIXED_DELAY:
            task.due = now + task.period
        else:
            task.due, missed = self._next_slot(task, outcome, now)
        task.state = transition(task.state, "requeue")
        self._push(task)
        return Completion(task_id, run, outcome, PENDING, task.due, missed, False)

    def cancel(self, task_id: int, interrupt: bool = False) -> CancelResult:
        """Decide a cancel. See :class:`CancelResult` for what each answer asks."""
        task = self._tasks.get(task_id)
        if task is None:
            return CancelResult.UNKNOWN
        state = task.state
        if state is PENDING:
            task.state = transition(state, "cancel")
            del self._tasks[task_id]
            self._dead += 1  # its heap entry stays behind until popped or compacted
            if self._dead > COMPACT_MIN_DEAD and self._dead * 2 > len(self._timers) + len(self._ready):
                self._compact()
            return CancelResult.CANCELLED
        if state is RUNNING:
            if not interrupt and task.kind is Kind.ONCE:
                return CancelResult.REFUSED
            task.state = transition(state, "cancel")
            self._stopping += 1
            return CancelResult.INTERRUPT if interrupt else CancelResult.STOPPED
        return CancelResult.UNKNOWN  # cancelled already, its last run still in flight

    def cancel_all(self, *, periodic_only: bool = False) -> list[tuple[int, CancelResult]]:
        """Cancel every task (or every periodic one), in submission order.

        Running one-shot tasks are left to finish (REFUSED); this is what
        shutdown uses.
        """
        return [
            (tid, self.cancel(tid))
            for tid in self.task_ids()
            if not periodic_only or self._tasks[tid].kind is not Kind.ONCE
        ]

    # -- internals -------------------------------------------------------

    def _push(self, task: _Task) -> None:
        if self.policy is Policy.DUE:
            heappush(self._timers, (task.due, -task.priority, task.seq, task.id))
        else:
            heappush(self._timers, (task.due, task.seq, task.id))

    def _live(self, task_id: int) -> _Task | None:
        """The task behind a heap entry, or None if the entry is dead."""
        task = self._tasks.get(task_id)
        return task if task is not None and task.state is PENDING else None

    def _start(self, task: _Task) -> Run:
        task.state = transition(task.state, "claim")
        task.runs += 1
        task.active = True
        return Run(task.id, task.runs, task.due, task.timeout, task.payload, task.name)

    @staticmethod
    def _next_slot(task: _Task, outcome: str, now: int) -> tuple[int, int]:
        """Fixed rate: the next grid point after the run scheduled at ``task.due``."""
        scheduled, period = task.due, task.period
        following = scheduled + period
        if following >= now:
            return following, 0
        mode = task.misfire
        if mode is Misfire.CATCH_UP and outcome in ("crashed", "timeout"):
            # A run that crashed or timed out is not caught up back to back:
            # a task that crashes every run would otherwise loop on its backlog.
            mode = Misfire.SKIP
        if mode is Misfire.CATCH_UP:
            return following, 0
        if mode is Misfire.SKIP:
            k = -(-(now - scheduled) // period)  # first grid point >= now
        else:  # COALESCE: the last grid point <= now runs once, late
            k = (now - scheduled) // period
        return scheduled + k * period, k - 1

    def _compact(self) -> None:
        self._timers = [e for e in self._timers if self._live(e[-1]) is not None]
        self._ready = [e for e in self._ready if self._live(e[-1]) is not None]
        heapify(self._timers)
        heapify(self._ready)
        self._dead = 0
        assert len(self._timers) + len(self._ready) == sum(t.state is PENDING for t in self._tasks.values())
