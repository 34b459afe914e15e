"""Shared limits: at most N runs of a group's tasks at once (the core's gate).

Theory of operation
-------------------
``Scheduler(limits={"db": 2})`` and ``group="db"`` on a scheduling method:
at most 2 runs of tasks of group ``"db"`` are in flight at once. The group
is the task's (``Schedule.group``: it travels with the schedule to every
runner); the limits are the scheduler's (``SchedulerCore(limits=...)``).

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

from collections.abc import Mapping
from typing import Final


class Gate:
    """Units in use per group, the entries waiting for one, and who holds them."""

    __slots__ = ("limits", "in_use", "waiting", "held")

    def __init__(self, limits: Mapping[str, int]) -> None:
        self.limits: Final[dict[str, int]] = dict(limits)
        self.in_use: dict[str, int] = dict.fromkeys(self.limits, 0)
        self.waiting: dict[str, list[tuple[int, ...]]] = {name: [] for name in self.limits}
        self.held: dict[int, int] = {}  # task id -> units its runs in flight hold

    def gated(self, group: str | None) -> bool:
        """Does this group have a limit here?"""
        return group is not None and group in self.limits

    def full(self, group: str) -> bool:
        return self.in_use[group] >= self.limits[group]

    def wait(self, group: str, entry: tuple[int, ...]) -> None:
        """A due task of a full group: its heap entry waits here."""
        self.waiting[group].append(entry)

    def acquire(self, group: str, task_id: int) -> None:
        """A run of ``task_id`` (of ``group``, which has room) starts."""
        self.in_use[group] += 1
        self.held[task_id] = self.held.get(task_id, 0) + 1

    def release(self, group: str | None, task_id: int) -> list[tuple[int, ...]]:
        """A run of ``task_id`` ended: its unit (if it held one) is free.
        Returns the entries that waited for the group (now the caller's, to
        queue again), or [] if nothing was held."""
        held = self.held.get(task_id)
        if held is None or group is None:
            return []
        if held == 1:
            del self.held[task_id]
        else:
            self.held[task_id] = held - 1
        self.in_use[group] -= 1
        waiting = self.waiting[group]
        if not waiting:
            return []
        self.waiting[group] = []
        return waiting

    def take_all(self) -> list[tuple[int, ...]]:
        """Every waiting entry (the core compacts its heaps: they go back there)."""
        entries = [entry for waiting in self.waiting.values() for entry in waiting]
        for waiting in self.waiting.values():
            waiting.clear()
        return entries

    def count(self) -> int:
        """Waiting entries, live or dead."""
        return sum(len(waiting) for waiting in self.waiting.values())


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
