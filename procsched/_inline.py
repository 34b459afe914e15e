"""InlineScheduler: the core driven in the calling thread, under any clock.

    caller ──schedule()──▶ SchedulerCore ◀──claim/complete── run_due() / run_until(t)
                                                              runs fn in this thread

Nothing runs until the caller says so, which makes it the runner for
deterministic tests: pair it with a ManualClock and time moves only when
``run_until`` (or ``ManualClock.advance``) moves it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, final

from . import _validate as v
from ._api import LiveTasks, SchedulingAPI
from ._clock import Clock, MonotonicClock
from ._context import running
from ._core import CancelResult, Policy, Run, SchedulerCore, TaskState
from ._core._limits import checked_limits
from ._core._units import NS
from ._errors import SchedulerClosedError, TaskTimeoutError
from ._events import (
    RUN_END,
    RUN_MISSED,
    RUN_SKIPPED,
    RUN_STARTED,
    TASK_CANCELLED,
    Listener,
    Listeners,
    format_traceback,
    run_ended,
    run_skipped,
    run_started,
)
from ._failure_log import FailureLog
from ._handle import HANDLE_RUNS, RunError, RunInfo, TaskHandle, run_in_progress, skipped_slots
from ._handle import handle_runs as checked_handle_runs


def check_clock(clock: object) -> Clock:
    if clock is None:
        return MonotonicClock()
    if not isinstance(clock, Clock):
        raise TypeError(
            f"clock must have now_ns(), wall_ns() and sleep_until_ns(), not {type(clock).__name__} {clock!r}"
        )
    return clock


@final
class InlineScheduler(LiveTasks, SchedulingAPI):
    """Same scheduling API as ``Scheduler``; runs tasks in the calling thread.

    ``run_due()`` runs every task due now (and runs that come due during
    the call); ``run_until(t)`` moves a ManualClock (or sleeps, on the real
    clock) to each due time up to ``t`` and runs what is due. A run over its
    ``timeout`` cannot be stopped in the calling thread: it is recorded as
    ``"timeout"`` when it returns and its value is discarded.
    """

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        policy: Policy | str = "priority",
        limits: Mapping[str, int] | None = None,
        handle_runs: int = HANDLE_RUNS,
    ) -> None:
        self.handle_runs = checked_handle_runs(handle_runs)
        self._clock = check_clock(clock)
        self._limits = checked_limits(limits)  # (one run at a time here: a limit only orders the waiting)
        self._core = SchedulerCore(v.policy(policy), self._limits)
        self._handles: dict[int, TaskHandle] = {}
        self._keys: dict[str, TaskHandle] = {}
        self._interrupted: set[int] = set()
        self._closed = False
        self._listeners = Listeners()
        self._failures = FailureLog()

    @property
    def clock(self) -> Clock:
        return self._clock

    def __repr__(self) -> str:
        return f"<InlineScheduler pending={self.pending()} clock={self._clock!r}>"

    def __enter__(self) -> InlineScheduler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown(wait=exc_info[0] is None)

    # -- SchedulingAPI ----------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SchedulerClosedError("this InlineScheduler was shut down")

    def _wall_now_ns(self) -> int:
        return self._clock.wall_ns()

    def _sync_wall(self) -> None:
        """Tell the core where the wall clock stands (calendar tasks follow it)."""
        now = self._clock.now_ns()
        self._core.set_wall_offset(self._clock.wall_ns() - now, now)

    def _add(
        self, spec: v.TaskSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> TaskHandle:
        now = self._clock.now_ns()
        due = now + spec.delay_ns
        core = self._core
        if spec.key is not None:
            self._claim_key(self._keys, spec)
        schedule, retry = spec.schedule, spec.retry
        if retry is None and not schedule.limited:
            task_id = core.add(due, spec.priority, schedule, spec.timeout_ns, (fn, args, kwargs), spec.name)
            handle = TaskHandle(self, task_id, spec.name, due / NS, spec.key, self._clock.wall_ns() + spec.delay_ns)
        else:
            self._sync_wall()
            task_id = core.add(
                due,
                spec.priority,
                schedule,
                spec.timeout_ns,
                (fn, args, kwargs),
                spec.name,
                retry=None if retry is None else retry.policy(),
                retry_on=None if retry is None else retry.classes or None,
                start_wall_ns=spec.start_wall_ns,
                now=now,
            )
            due = core.due(task_id)  # type: ignore[assignment]
            handle = TaskHandle(self, task_id, spec.name, due / NS, spec.key, core.next_wall(task_id))
        self._handles[task_id] = handle
        if spec.key is not None:
            self._keys[spec.key] = handle
        return handle

    def pause(self, task_id: int) -> bool:
        """Pause a task (see ``TaskHandle.pause``)."""
        task_id = v.task_id(task_id)
        paused = self._core.pause(task_id)
        handle = self._handles.get(task_id)
        if paused and handle is not None and self._core.state(task_id) is TaskState.PAUSED:
            handle._on_paused()  # (a running task pauses when its run ends)
        return paused

    def resume(self, task_id: int) -> bool:
        """Resume a paused task at its next slot from now (see ``TaskHandle.resume``)."""
        task_id = v.task_id(task_id)
        self._sync_wall()
        resumed = self._core.resume(task_id, self._clock.now_ns())
        self._take_control()
        handle = self._handles.get(task_id)
        if resumed and handle is not None:
            due = self._core.due(task_id)
            handle._on_resumed(None if due is None else due / NS, self._core.next_wall(task_id))
        return resumed

    def cancel(self, task_id: int, *, interrupt: bool = False) -> bool:
        v.flag("interrupt", interrupt)
        task_id = v.task_id(task_id)
        decision = self._core.cancel(task_id, interrupt)
        if decision.accepted:
            handle = self._handles[task_id]
            if decision is CancelResult.CANCELLED:
                del self._handles[task_id]
            elif decision is CancelResult.INTERRUPT:
                # The run is this thread's own caller: it cannot be stopped,
                # so it finishes and is recorded as "cancelled".
                self._interrupted.add(task_id)
            handle._on_cancelled()
            self._notify_cancelled(handle, decision is not CancelResult.CANCELLED)
        return decision.accepted

    def pending(self) -> int:
        """Tasks not yet finished or cancelled."""
        return len(self._core)

    def add_listener(self, callback: Listener, events: object = None) -> None:
        """Call ``callback(event)`` for each event, or those named in ``events``,
        in the calling thread, as ``Scheduler.add_listener`` does (no worker
        events here: there are no workers).

        Raises:
            TypeError: ``callback`` is not callable.
            ValueError: ``events`` names an unknown event.
        """
        self._listeners.add(callback, events)

    def remove_listener(self, callback: Listener) -> bool:
        """Stop calling ``callback``; True if it was a listener."""
        return self._listeners.remove(callback)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Accept no more work; cancel periodic tasks (and all pending ones
        with ``cancel_futures``); with ``wait``, run the remaining one-shot
        tasks at their due times."""
        self._closed = True
        for task_id, decision in self._core.cancel_all(periodic_only=not cancel_futures):
            if decision is CancelResult.CANCELLED:
                handle = self._handles.pop(task_id)
                handle._on_cancelled()
                self._notify_cancelled(handle, False)
            elif decision is CancelResult.STOPPED:
                # Called from inside this task's own run: _execute still needs
                # the handle, and drops it when the run completes.
                self._handles[task_id]._on_cancelled()
                self._notify_cancelled(self._handles[task_id], True)
        while wait:
            deadline = self._core.next_deadline()
            if deadline is None:
                break
            self._clock.sleep_until_ns(deadline)
            self.run_due()

    # -- driving ----------------------------------------------------------

    def run_due(self) -> int:
        """Run every task due now, including runs that come due meanwhile."""
        count = 0
        self._sync_wall()
        while (run := self._core.claim(self._clock.now_ns())) is not None:
            self._take_control()
            self._execute(run)
            count += 1
        self._take_control()
        return count

    def _run_now(self, task_id: int) -> bool:
        return self._core.run_now(task_id, self._clock.now_ns())

    def _backfill(self, task_id: int, start_ns: int, end_ns: int, dry_run: bool) -> list[int]:
        self._sync_wall()
        slots = self._core.backfill_slots(task_id, start_ns, end_ns, self._clock.now_ns())
        if not dry_run:
            self._core.backfill(task_id, slots, self._clock.now_ns())
        return [wall for _, wall in slots]

    def _take_control(self) -> None:
        """Carry out what schedule control decided: skipped slots recorded
        (and a task that ended at one resolved), replaced runs (here only a
        task's own caller can be running: it finishes, recorded "cancelled")."""
        core = self._core
        for task_id, _ in core.take_replaced():
            self._interrupted.add(task_id)
        for skip in core.take_skips():
            handle = self._handles.get(skip.task_id)
            if handle is None:
                continue
            for info in skipped_slots(
                skip.task_id, skip.scheduled_ns, skip.wall_ns, skip.reason, skip.period_ns, skip.slots
            ):
                handle._on_skipped(info)
                if self._listeners:
                    self._listeners.notify(RUN_SKIPPED, run_skipped(info, handle.name))
            if skip.state is TaskState.CANCELLED:
                del self._handles[skip.task_id]
                handle._on_cancelled()
                self._notify_cancelled(handle, False)
            elif skip.state is not None:
                del self._handles[skip.task_id]
                self._failures.ended(skip.task_id)
                handle._on_result(skip.state, None)

    def run_until(self, t: float) -> int:
        """Run everything due up to ``t`` (seconds on this scheduler's clock),
        moving the clock to each due time; leave the clock at ``t``."""
        if isinstance(t, bool) or not isinstance(t, (int, float)) or t != t or t in (float("inf"), float("-inf")):
            raise TypeError(f"t must be a finite number of seconds, not {type(t).__name__} {t!r}")
        t_ns = round(t * NS)
        count = self.run_due()
        while (deadline := self._core.next_deadline()) is not None and deadline <= t_ns:
            self._clock.sleep_until_ns(deadline)
            count += self.run_due()
        self._clock.sleep_until_ns(t_ns)
        self._sync_wall()
        return count

    def _execute(self, run: Run) -> None:
        handle = self._handles[run.task_id]
        handle._on_started()
        fn, args, kwargs = run.payload
        if self._listeners:
            self._listeners.notify(
                RUN_STARTED,
                run_started(
                    run.task_id, handle.name, run.run, threading.current_thread().name, run.scheduled_ns / NS, run.cause
                ),
            )
        started = self._clock.now_ns()
        wall = run.wall_ns if run.wall_ns is not None else run.scheduled_ns + self._core.wall_offset
        info = run_in_progress(
            run.task_id,
            run.run,
            run.scheduled_ns,
            started,
            threading.current_thread().name,
            run.attempt,
            wall,
            run.cause,
        )
        value: Any = None
        error: BaseException | None = None
        try:
            with running(info, self):
                value = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - recorded, re-raised below if not an Exception
            error = exc
        finished = self._clock.now_ns()
        outcome = "ok" if error is None else "error"
        if error is None and run.timeout_ns is not None and finished - started > run.timeout_ns:
            outcome = "timeout"
            error = TaskTimeoutError(
                f"task {run.task_id} run {run.run} took {(finished - started) / NS:.6g}s, "
                f"over its timeout of {run.timeout_ns / NS:g}s"
            )
        if run.task_id in self._interrupted:
            self._interrupted.discard(run.task_id)
            outcome = "cancelled"
        matched = outcome == "error" and run.retry_on is not None and isinstance(error, run.retry_on)
        completion = self._core.complete(run.task_id, run.run, outcome, finished, matched)  # type: ignore[arg-type]
        assert completion is not None, "an inline run is always the task's current run"
        next_run = None if completion.next_due_ns is None else completion.next_due_ns / NS
        next_wall = completion.next_wall_ns
        if next_wall is None and completion.next_due_ns is not None:
            next_wall = completion.next_due_ns + self._core.wall_offset
        if outcome in ("ok", "cancelled") or error is None:
            run_error = None
        else:
            run_error = RunError.of(error, format_traceback(error))
        ended = RunInfo(
            info.task_id,
            info.run,
            info.scheduled_for,
            info.started_at,
            finished / NS,
            info.worker,
            outcome,  # type: ignore[arg-type]
            info.attempt,
            info.scheduled_at,
            None,
            run.cause,
            completion.reason,
            run_error,
        )
        handle._on_run(ended, completion.state, next_run, next_wall)
        if completion.state.terminal:
            del self._handles[run.task_id]
            if completion.ended:
                if completion.periodic and completion.state is TaskState.DONE:
                    value = None  # a periodic task that reached its limit: result() is None
                handle._on_result(completion.state, value, None if completion.state is TaskState.DONE else error)
        self._failures.run_ended(ended, handle.name or handle.key, completion.state)
        if self._listeners:
            fields = run_ended(ended, handle.name, completion.state.value, next_run)
            self._listeners.notify(RUN_END[outcome], fields)
            if completion.missed:
                self._listeners.notify(
                    RUN_MISSED,
                    {
                        "task_id": run.task_id,
                        "name": handle.name,
                        "run": run.run,
                        "missed": completion.missed,
                        "next_run": next_run,
                    },
                )
        self._take_control()
        if error is not None and not isinstance(error, Exception):
            raise error  # KeyboardInterrupt, SystemExit: recorded, then passed on

    def _notify_cancelled(self, handle: TaskHandle, running: bool) -> None:
        if not running:
            self._failures.ended(handle.id)
        if self._listeners:
            self._listeners.notify(TASK_CANCELLED, {"task_id": handle.id, "name": handle.name, "running": running})
