"""The task state machine.

Theory of operation
-------------------
A task is in exactly one state at a time::

    PENDING ──claim──▶ RUNNING ──finish──▶ DONE        (one-shot ran ok; a limit reached)
     │ │  ▲               │ │ └──fail────▶ FAILED      (one-shot failed, or stop_on_error)
     │ │  └──requeue──────┘ │ └──cancel──▶ CANCELLED   (periodic, or interrupt=True)
     │ └──cancel────────────┼────────────▶ CANCELLED
     │    ┌──────pause──────┘ (its run ended while a pause was asked)
     └─pause─▶ PAUSED ──cancel──────────▶ CANCELLED
         ◀─resume─┘  (back to PENDING, at its next slot from now)

A periodic task goes back to PENDING after each run (and so does a task
whose failed attempt will be retried). A PAUSED task runs nothing until it
is resumed. DONE, FAILED and CANCELLED are terminal: nothing leaves them. How a single *run* ended
("ok", "error", "crashed", "timeout", "cancelled") is the run's outcome, not a
task state. Every change goes through :func:`transition`, the only place that
knows the table; an illegal change raises :class:`InvalidTransition` and
leaves the state as it was.
"""

from __future__ import annotations

import enum
from typing import Literal

from .._errors import InvalidTransition

Outcome = Literal["ok", "error", "crashed", "timeout", "cancelled"]
OUTCOMES: tuple[str, ...] = ("ok", "error", "crashed", "timeout", "cancelled")


class Priority(enum.IntEnum):
    """Named priorities; any int is a priority too (higher runs first)."""

    LOW = -10
    NORMAL = 0
    HIGH = 10


class TaskState(enum.Enum):
    """Where a task is in its life."""

    PENDING = "pending"
    """Waiting for its due time, or due and waiting for a free worker."""
    RUNNING = "running"
    """A run is in progress on a worker."""
    DONE = "done"
    """Terminal: a one-shot task that returned."""
    FAILED = "failed"
    """Terminal: a one-shot task whose run raised, crashed or timed out, or a
    periodic task with ``stop_on_error=True`` whose run did."""
    CANCELLED = "cancelled"
    """Terminal: cancelled before it could finish; no further runs."""
    PAUSED = "paused"
    """Paused by ``TaskHandle.pause()``: runs no slot until resumed."""

    # Members are singletons: identity hashing is correct, and much cheaper
    # than Enum.__hash__ on the transition table's hot path.
    __hash__ = object.__hash__

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL

    def __repr__(self) -> str:
        return f"TaskState.{self.name}"


_TERMINAL = frozenset({TaskState.DONE, TaskState.FAILED, TaskState.CANCELLED})

Event = Literal["claim", "requeue", "finish", "fail", "cancel", "pause", "resume"]

_TABLE: dict[tuple[TaskState, str], TaskState] = {
    (TaskState.PENDING, "claim"): TaskState.RUNNING,
    (TaskState.PENDING, "cancel"): TaskState.CANCELLED,
    (TaskState.RUNNING, "requeue"): TaskState.PENDING,
    (TaskState.RUNNING, "finish"): TaskState.DONE,
    (TaskState.RUNNING, "fail"): TaskState.FAILED,
    (TaskState.RUNNING, "cancel"): TaskState.CANCELLED,
    (TaskState.PENDING, "pause"): TaskState.PAUSED,
    (TaskState.RUNNING, "pause"): TaskState.PAUSED,
    (TaskState.PAUSED, "resume"): TaskState.PENDING,
    (TaskState.PAUSED, "cancel"): TaskState.CANCELLED,
}


def transition(state: TaskState, event: Event) -> TaskState:
    """The state after ``event``; raises :class:`InvalidTransition` if illegal."""
    try:
        return _TABLE[state, event]
    except KeyError:
        raise InvalidTransition(f"no transition from {state.name} on {event!r}") from None
