"""The core's records: a task, what it keeps beyond a plain one, and what the core hands out.

``SchedulerCore`` (``_scheduler.py``) owns every one of these; its paths
for controlled tasks (``_control.py``) and for limits and jitter
(``_limits.py``) read and change them. Nothing here acts: these are the
shapes, in one place below all three, so none of them imports another's.
"""

from __future__ import annotations

import enum
import random
from collections import deque
from typing import Any, Final, NamedTuple

from ._schedule import Kind, Schedule
from ._state import TaskState

#: Why a run ran (``Run.cause``).
SCHEDULE: Final = "schedule"
MANUAL: Final = "manual"
BACKFILL: Final = "backfill"
#: A backfill covers at most this many slots.
BACKFILL_MAX: Final = 10_000
#: Skipped slots recorded in one step at most (the newest are kept).
RECORDS_PER_STEP: Final = 100


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


class RetryPolicy(NamedTuple):
    """``procsched.Retry`` in core units (validated by the public class)."""

    attempts: int
    delay_ns: int
    backoff: float
    max_delay_ns: int
    jitter: float
    outcomes: frozenset[str]
    """Outcomes retried whatever the error ("error", "crashed", "timeout")."""

    def delay_after(self, attempt: int, rng: random.Random) -> int:
        """Backoff after failed attempt ``attempt`` (1-based), in ns."""
        try:
            grown = self.delay_ns * self.backoff ** (attempt - 1) if self.delay_ns else 0.0
        except OverflowError:  # past a float (issue 20 item 8): max_delay caps it
            grown = self.max_delay_ns
        delay = min(grown, self.max_delay_ns)
        if self.jitter:
            delay *= 1 + self.jitter * rng.uniform(-1.0, 1.0)
        return max(0, int(delay))

    def to_wire(self) -> tuple[int, int, float, int, float, tuple[str, ...]]:
        """Plain values for another process (the outcomes sorted)."""
        return (
            self.attempts,
            self.delay_ns,
            self.backoff,
            self.max_delay_ns,
            self.jitter,
            tuple(sorted(self.outcomes)),
        )

    @staticmethod
    def from_wire(wire: tuple[int, int, float, int, float, tuple[str, ...]]) -> RetryPolicy:
        attempts, delay_ns, backoff, max_delay_ns, jitter, outcomes = wire
        return RetryPolicy(attempts, delay_ns, backoff, max_delay_ns, jitter, frozenset(outcomes))


class TaskExtra:
    """The state a calendar, retried, limited or paused task keeps beyond a
    plain one's (made by the core: see ``SchedulerCore.add``)."""

    __slots__ = (
        "limit",
        "retry",
        "retry_on",
        "slot",
        "base",
        "attempt",
        "retrying",
        "pause_asked",
        "control",
        "delayed",
    )

    def __init__(self, limit: int | None = None, retry: RetryPolicy | None = None, retry_on: Any = None) -> None:
        self.limit = limit  # no slot after this (the schedule's until): wall (calendar) or monotonic
        self.retry = retry
        self.retry_on = retry_on
        self.slot = 0  # calendar: the wall-clock instant of the current (or next) slot
        self.base = 0  # the current run's regular due time (its retries move task.due)
        self.attempt = 0  # attempts of the current run so far
        self.retrying = False  # the pending entry is a retry of the current run
        self.pause_asked = False  # pause once the current run ends
        self.control: Control | None = None  # its runs counted one by one (see _control.py)
        self.delayed: int | None = None  # the schedule's jitter added to task.due (its slot) for this run


class _TaskHead:
    """The fields that cancel and claim read, first in memory.

    CPython lays slots out in sorted name order after those of the base
    class, so these (sorted: active, extra, payload, seq, state) sit within
    56 bytes of the object header, which every reference touches anyway: at
    a million pending, a cancel then misses one or two cache lines of the
    record, not three (with one class, ``state`` sat 112 bytes in).
    """

    __slots__ = ("active", "extra", "payload", "seq", "state")
    state: TaskState
    extra: TaskExtra | None
    payload: Any
    seq: int  # submission order; re-stamped when the task is re-queued out of turn
    active: bool  # a run is in flight


class _Task(_TaskHead):
    # No id (the table's key is the id; the heap entry holds it too) and one
    # ``schedule`` (shared: every one-shot's is ``ONCE``): 12 slots make 128
    # bytes with the GC header, two cache lines, not three (15 slots: 160).
    # Smaller records are what makes ``add`` cheaper at a million.
    __slots__ = ("runs", "due", "kind", "priority", "schedule", "timeout", "name")
    runs: int  # runs claimed so far; the current run's number
    due: int  # the scheduled time of the current (or next) run
    kind: Kind  # ``schedule.kind``, one attribute away on the per-task paths
    priority: int
    schedule: Schedule
    timeout: int | None
    name: str | None

    def __repr__(self) -> str:
        return f"<task {self.kind.value} {self.state.name} due={self.due} runs={self.runs}>"


class Run(NamedTuple):
    """A run handed out by :meth:`SchedulerCore.claim`."""

    task_id: int
    run: int
    scheduled_ns: int
    timeout_ns: int | None
    payload: Any
    name: str | None
    attempt: int = 1
    wall_ns: int | None = None
    """The slot's wall-clock time (calendar tasks, backfill); else scheduled_ns + the offset."""
    retry_on: Any = None
    """Exception classes ``Retry.on`` names (opaque here: the worker checks them)."""
    cause: str = SCHEDULE
    """"schedule", "manual" (run now) or "backfill"."""


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
    next_wall_ns: int | None = None
    """The next slot's wall-clock time (calendar tasks), else None."""
    retrying: bool = False
    """The next run is a retry of this one (same run number, next attempt)."""
    periodic: bool = False
    reason: str | None = None
    """None, or "replaced": the run was ended to start a newer slot."""


class SkipRecord(NamedTuple):
    """Slots that did not run, for one reason (see the module docstring):
    ``slots`` slots, ``period_ns`` apart from the first (a fixed-rate task's
    grid points dropped in one step are one record; other slots one each)."""

    task_id: int
    scheduled_ns: int
    """The first slot on the core's (monotonic) clock."""
    wall_ns: int
    """The first slot on the wall clock."""
    reason: str
    """"overlap", "misfire", "late" or "paused"."""
    state: TaskState | None = None
    """The state the task ended in at this skip (its last slot), else None."""
    period_ns: int = 0
    """The step between the slots (its task's period; unused when ``slots`` is 1)."""
    slots: int = 1
    """How many slots."""


class Flight(NamedTuple):
    """A run of a controlled task that is in flight."""

    slot_ns: int
    wall_ns: int
    cause: str
    attempt: int
    order: int
    """Start order: "replace" ends the lowest."""


class SideRun(NamedTuple):
    """A run waiting outside the task's regular slots."""

    task_id: int
    run: int
    """0: numbered when it starts; else a retry of that run."""
    attempt: int
    slot_ns: int
    wall_ns: int
    cause: str


class Control:
    """The state of a controlled task (``TaskExtra.control``)."""

    __slots__ = ("inflight", "waiting", "backfill", "backfilling", "blocked", "exhausted", "scheduled", "replacing")

    def __init__(self) -> None:
        self.inflight: dict[int, Flight] = {}
        self.waiting: deque[SideRun] = deque()  # side runs that found the task full
        self.backfill: deque[tuple[int, int]] = deque()  # (slot_ns, wall_ns) still to run
        self.backfilling = False  # a backfill slot is queued or in flight
        self.blocked = False  # its due slot waits for a run to end ("wait")
        self.exhausted = False  # no regular slot left: it ends when its runs do
        self.scheduled = 0  # scheduled runs started (max_runs counts these)
        self.replacing: set[int] = set()  # runs asked to end for a newer slot
