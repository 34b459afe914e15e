"""Failed runs of tasks that go on, told to the "procsched" logger once per burst.

A periodic task whose runs raise keeps its schedule (and one at its
``max_runs``/``until`` ends DONE, ``result()`` None), so nothing else would
say it: its failed runs are logged at WARNING, the first of a burst with its
error; the burst's further failures are counted, not logged, and summed up
every ``window`` seconds while they go on, and once when a run of the task
succeeds again or the task ends. A run whose task ends FAILED with it is not
logged (its handle's ``result()`` raises the error); crashes and timeouts are
logged by the dispatcher as they happen. Each scheduler's event thread owns
one ``FailureLog`` (the listener thread; ``InlineScheduler``'s caller).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ._core import TaskState
from ._handle import RunError, RunInfo

logger = logging.getLogger("procsched")

#: Seconds (scheduler clock) between two summaries of a burst that goes on.
BURST_WINDOW = 300.0


@dataclass(slots=True)
class _Burst:
    """A task's failed runs since its last success."""

    label: str
    since: float
    """When the last line about it was logged (scheduler-clock seconds)."""
    unlogged: int = 0
    """Failed runs since that line."""
    last: RunError | None = None


class FailureLog:
    """Logs failed runs of tasks that go on, once per task per burst (see the module)."""

    def __init__(self, window: float = BURST_WINDOW) -> None:
        self.window = window
        self._bursts: dict[int, _Burst] = {}

    def run_ended(self, info: RunInfo, name: str | None, state: TaskState) -> None:
        """A run ended, and its task is now in ``state`` (``name``: the task's name, or key)."""
        task_id = info.task_id
        burst = self._bursts.get(task_id)
        if info.outcome == "error" and info.error is not None and state is not TaskState.FAILED:
            now = info.finished_at if info.finished_at is not None else info.scheduled_for
            if burst is None:
                label = f"{task_id} ({name})" if name else str(task_id)
                logger.warning(
                    "task %s run %s failed: %s (its further failures are summed up until a run succeeds)",
                    label,
                    info.run,
                    info.error,
                )
                if not state.terminal:
                    self._bursts[task_id] = _Burst(label, now)
                return
            burst.unlogged += 1
            burst.last = info.error
            if now - burst.since >= self.window:
                self._sum_up(burst, f"in the last {now - burst.since:g} s")
                burst.since, burst.unlogged = now, 0
        elif info.outcome == "ok" and burst is not None:
            del self._bursts[task_id]
            if burst.unlogged:
                self._sum_up(burst, f"before run {info.run} succeeded")
            else:
                logger.info("task %s: run %s succeeded again", burst.label, info.run)
            return
        if state.terminal:
            self.ended(task_id)

    def __contains__(self, task_id: int) -> bool:
        """A burst of the task's failures is going on (a run that is not an
        error matters to this log only then)."""
        return task_id in self._bursts

    def ended(self, task_id: int) -> None:
        """The task is over: its burst's failures not yet logged are summed up."""
        burst = self._bursts.pop(task_id, None)
        if burst is not None and burst.unlogged:
            self._sum_up(burst, "before it ended")

    @staticmethod
    def _sum_up(burst: _Burst, when: str) -> None:
        logger.warning("task %s failed %d more time(s) %s; the last: %s", burst.label, burst.unlogged, when, burst.last)
