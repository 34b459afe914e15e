"""TaskHandle (a Future per task) and RunInfo (the record of one run).

A handle is written by exactly one thread, its scheduler's event thread (the
calling thread for InlineScheduler, the listener thread otherwise), through
the ``_on_*`` methods below; users only read it. The Future part never enters
the Future "RUNNING" state, so that ``Future.cancel`` semantics stay ours:
``cancel()`` asks the scheduler, and the scheduler resolves the handle.
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ._core import TaskState

if TYPE_CHECKING:
    from ._api import SchedulingAPI

RunOutcome = Literal["ok", "error", "crashed", "timeout", "cancelled"]


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run of a task. Times are seconds on the scheduler's clock.

    Inside a running task (``current_run()``), ``finished_at`` and
    ``outcome`` are ``None``.
    """

    task_id: int
    run: int
    scheduled_for: float
    started_at: float
    finished_at: float | None
    worker: int | str
    outcome: RunOutcome | None
    #: The run's captured stdout and stderr (the last 64 KiB), with
    #: ``Scheduler(capture_output=True)``; None otherwise.
    output: str | None = None


class TaskHandle(concurrent.futures.Future):  # type: ignore[type-arg]
    """A scheduled task: a ``concurrent.futures.Future`` with task details.

    ``result()`` returns a one-shot task's return value, or re-raises its
    exception; a periodic task's ``result()`` returns only when the task
    ends (``CancelledError`` if it was cancelled).
    """

    def __init__(self, owner: SchedulingAPI, task_id: int, name: str | None, next_run: float | None) -> None:
        super().__init__()
        self._owner = owner
        self.id = task_id
        self.name = name
        self._task_state = TaskState.PENDING
        self.runs: list[RunInfo] = []
        self.next_run = next_run

    @property
    def state(self) -> TaskState:
        return self._task_state

    def cancel(self, interrupt: bool = False) -> bool:  # type: ignore[override]
        """Cancel the task (see ``Scheduler.cancel``); True if it was cancelled."""
        return self._owner.cancel(self.id, interrupt=interrupt)

    def running(self) -> bool:
        return self._task_state is TaskState.RUNNING

    def __repr__(self) -> str:
        name = f" name={self.name!r}" if self.name else ""
        return f"<TaskHandle id={self.id}{name} state={self._task_state.name} runs={len(self.runs)}>"

    # -- written only by the owner's event thread ------------------------

    def _on_started(self) -> None:
        if self._task_state is TaskState.PENDING:
            self._task_state = TaskState.RUNNING

    def _on_run(self, info: RunInfo, state: TaskState, next_run: float | None) -> None:
        """A run finished; the task is now in ``state``."""
        self.runs.append(info)
        if not self._task_state.terminal:
            self._task_state = state
            self.next_run = next_run

    def _on_result(self, state: TaskState, value: Any = None, exc: BaseException | None = None) -> None:
        """The task ended in ``state`` (DONE/FAILED) with a value or exception."""
        self._task_state = state
        self.next_run = None
        if exc is not None:
            self.set_exception(exc)
        else:
            self.set_result(value)

    def _on_cancelled(self) -> None:
        self._task_state = TaskState.CANCELLED
        self.next_run = None
        concurrent.futures.Future.cancel(self)
        self.set_running_or_notify_cancel()  # wakes wait() / as_completed()
