"""Shared limits: at most N runs of a group's tasks at once (the core's gate).

Theory of operation
-------------------
``Scheduler(limits={"db": 2})`` and ``group="db"`` on a scheduling method:
at most 2 runs of tasks of group ``"db"`` are in flight at once. The group
is the task's, a field of its :class:`~._schedule.Schedule` beside
``max_concurrent`` and ``overlap`` (the other rules of how its runs may run
at once): so it reaches every runner in the schedule's wire form and the
store in its record (and the definition's ``grp`` column the claims count
by) with no message of its own, and the core reads it where it reads them.
The limits are the scheduler's (``SchedulerCore(limits=...)``).

The gate counts units. The core asks it at each claim: a due task whose
group is full does not start; its heap entry is parked here, in its group's
waiting list, exactly as the core's heap held it (the same tuple, so it
keeps its rank: priority, due time, submission order, by the core's
policy). When a run of the group ends (``release``), every waiting entry
of that group goes back to the core's heap of due entries: the next claim
takes the best of them (and of every other due task) and parks the others
again. So priority order holds among the waiting, a waiting task that was
cancelled or paused meanwhile never blocks the group (its entry is dead
there and dropped as any dead entry), and the gate holds no copy of a
task's state: only entries, counts, and which task holds how many units.

A task with no group, or a group with no limit here, is never gated; a
core with no limits has no gate at all (its claim path is unchanged).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ._task import Policy, Run, SideRun, _Task

#: A run holding a unit: (task id, run number).
Holder = tuple[int, int]


class Gate:
    """Units in use per group, the entries waiting for one, and who holds them."""

    __slots__ = ("limits", "in_use", "waiting", "sides", "held")

    def __init__(self, limits: Mapping[str, int]) -> None:
        self.limits: Final[dict[str, int]] = dict(limits)
        self.in_use: dict[str, int] = dict.fromkeys(self.limits, 0)
        self.waiting: dict[str, list[tuple[int, ...]]] = {name: [] for name in self.limits}
        self.sides: dict[str, list[tuple[int, int, int]]] = {name: [] for name in self.limits}  # side-heap entries
        self.held: dict[Holder, str] = {}  # the runs in flight that hold a unit -> its group

    def gated(self, group: str | None) -> bool:
        """Does this group have a limit here?"""
        return group is not None and group in self.limits

    def full(self, group: str) -> bool:
        return self.in_use[group] >= self.limits[group]

    def wait(self, group: str, entry: tuple[int, ...]) -> None:
        """A due task of a full group: its heap entry waits here."""
        self.waiting[group].append(entry)

    def acquire(self, group: str, holder: Holder) -> None:
        """The run ``holder`` (of ``group``, which has room) starts."""
        self.in_use[group] += 1
        self.held[holder] = group

    def release(self, holder: Holder) -> tuple[list[tuple[int, ...]], list[tuple[int, int, int]]]:
        """The run ``holder`` ended: its unit (if it held one) is free.
        Returns the entries that waited for its group - the core's heap
        entries and its side runs' - now the caller's to queue again."""
        group = self.held.pop(holder, None)
        if group is None:
            return [], []
        self.in_use[group] -= 1
        waiting, sides = self.waiting[group], self.sides[group]
        if waiting:
            self.waiting[group] = []
        if sides:
            self.sides[group] = []
        return waiting, sides

    def take_all(self) -> list[tuple[int, ...]]:
        """Every waiting entry (the core compacts its heaps: they go back there)."""
        entries = [entry for waiting in self.waiting.values() for entry in waiting]
        for waiting in self.waiting.values():
            waiting.clear()
        return entries

    def count(self) -> int:
        """Waiting entries, live or dead."""
        return sum(len(waiting) for waiting in self.waiting.values())


class LimitsMixin:
    """The limits and jitter path of :class:`SchedulerCore`'s claim (see
    the module docstring); ``_scheduler.py`` calls it from a few hooks."""

    if TYPE_CHECKING:
        policy: Policy
        _timers: list[tuple[int, ...]]
        _ready: list[tuple[int, ...]]
        _side: list[tuple[int, int, int]]
        _side_runs: dict[int, SideRun]
        _tasks: dict[int, _Task]

        def _live(self, task_id: int, seq: int) -> _Task | None: ...
        def _discard(self, entry: tuple[int, ...]) -> None: ...
        def _repush(self, tid: int, task: _Task) -> None: ...
        def _start(self, tid: int, task: _Task, now: int) -> Run | None: ...
        def _claim_side(self, now: int) -> Run | None: ...

    def _init_limits(self, limits: Mapping[str, int] | None, seed: int | None) -> None:
        self.gate = Gate(limits) if limits else None
        self._jitter_rng = random.Random(seed)  # None: a random seed, so instances on one grid differ
        self._slow = self.gate is not None  # claim takes _claim_slow (a gate, or a task with jitter)
        self._ranked = self.policy.value == "priority"  # due entries in _ready (else in _timers)

    def _claim_slow(self, now: int) -> Run | None:
        """``claim`` with a gate or jittered tasks: a slot of a jittered
        task is put off by a random delay in [0, jitter) the first time it
        comes due; a due run whose group is full waits in the gate."""
        gate = self.gate
        if self._side and self._side[0][0] <= now:  # runs outside the schedule (run now, backfill) first
            run = self._claim_side(now)  # (its _side_admitted asks the gate)
            if run is not None:
                return self._took(run)
        timers, live = self._timers, self._live
        ranked = self._ranked
        while True:
            if ranked:
                ready = self._ready
                while timers and timers[0][0] <= now:
                    entry = heappop(timers)
                    due, seq, tid = entry
                    task = live(tid, seq)
                    if task is not None:
                        heappush(ready, (-task.priority, due, seq, tid))
                    else:
                        self._discard(entry)
            heap = self._ready if ranked else timers
            while heap and (ranked or heap[0][0] <= now):
                entry = heappop(heap)
                tid = entry[-1]
                task = live(tid, entry[-2])
                if task is None:
                    self._discard(entry)
                    continue
                extra, schedule = task.extra, task.schedule
                if extra is not None and schedule.jitter_ns and extra.delayed is None and not extra.retrying:
                    extra.delayed = self._jitter_rng.randrange(schedule.jitter_ns)
                    if extra.delayed:
                        task.due += extra.delayed
                        self._repush(tid, task)
                        continue
                group = schedule.group
                if gate is not None and group is not None and group in gate.limits and gate.full(group):
                    gate.wait(group, entry)
                    continue
                run = self._start(tid, task, now)
                if run is not None:
                    return self._took(run)
            if not (ranked and timers and timers[0][0] <= now):  # (a skipped slot's next one may be due too)
                return None

    def _took(self, run: Run) -> Run:
        """A run starts: if its group has a limit, it holds a unit."""
        gate = self.gate
        if gate is not None:
            group = self._group_of(run.task_id)
            if group is not None and group in gate.limits:
                gate.acquire(group, (run.task_id, run.run))
        return run

    def _group_of(self, tid: int) -> str | None:
        task = self._tasks.get(tid)
        return None if task is None else task.schedule.group

    def _side_admitted(self, tid: int, task: _Task, entry: tuple[int, int, int], side: SideRun) -> bool:
        """A side run (run now, backfill, a retry) of ``task`` is due: False
        if its group is full - it waits in the gate, as popped."""
        gate, group = self.gate, task.schedule.group
        if gate is None or group is None or group not in gate.limits or not gate.full(group):
            return True
        self._side_runs[entry[1]] = side
        gate.sides[group].append(entry)
        return False

    def _unit_free(self, holder: Holder, in_flight: bool) -> None:
        """The run ``holder`` ended (``in_flight``: the core takes the report):
        its unit is free; what waited for its group is due again."""
        gate = self.gate
        if gate is None or not in_flight or holder not in gate.held:
            return
        waiting, sides = gate.release(holder)
        heap = self._ready if self._ranked else self._timers
        for entry in waiting:
            heappush(heap, entry)
        for side in sides:
            heappush(self._side, side)


def undelay(task: _Task) -> int:
    """A task put off by its jitter starts, or is moved (paused,
    realigned): its due time is its slot again (the next claim draws a fresh
    delay). Returns the delay it had (0: none)."""
    extra = task.extra
    if extra is None or extra.delayed is None:
        return 0
    delayed = extra.delayed
    task.due -= delayed
    extra.delayed = None
    return delayed


def checked_limits(value: object) -> dict[str, int]:
    """``limits=``: a mapping of group name (non-empty str) to an int >= 1.

    Raises:
        TypeError: not a mapping, a name not a str, a limit not an int.
        ValueError: an empty name, a limit < 1.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"limits must be a mapping of group name to an int >= 1, not {_describe(value)}")
    limits: dict[str, int] = {}
    for name, lim in value.items():
        if not isinstance(name, str):
            raise TypeError(f"limits: a group name must be a str, not {_describe(name)}")
        if not name:
            raise ValueError("limits: a group name must not be empty, not ''")
        if isinstance(lim, bool) or not isinstance(lim, int):
            raise TypeError(f"limits[{name!r}] must be an int >= 1, not {_describe(lim)}")
        if lim < 1:
            raise ValueError(f"limits[{name!r}] must be an int >= 1, not {lim!r}")
        limits[name] = int(lim)
    return limits


def checked_group(value: object, limits: Mapping[str, int]) -> str | None:
    """``group=``: None, or the name of one of the scheduler's ``limits``.

    Raises:
        TypeError: not a str or None.
        ValueError: a group the scheduler has no limit for.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"group must be a str or None, not {_describe(value)}")
    if value not in limits:
        known = ", ".join(repr(name) for name in limits) or "none"
        raise ValueError(f"group {value!r} is not one of this scheduler's limits (limits=: {known})")
    return value


def _describe(value: object) -> str:
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(value).__name__} {text}"
