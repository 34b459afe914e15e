"""The scheduling methods every scheduler shares.

Each method validates its arguments (naming the argument and the value on
error), builds a :class:`TaskSpec` and hands it to the runner's ``_add``.
A runner implements ``_add``, ``cancel`` and ``_check_open`` only.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, tzinfo
from typing import Any

from . import _validate as v
from ._core import ONCE, Misfire, Priority, Schedule
from ._core._limits import checked_group
from ._core._units import wall_datetime
from ._errors import SchedulerError
from ._handle import HANDLE_RUNS, TaskHandle
from ._retry import Retry, checked_retry

Seconds = float | int | timedelta


class SchedulingAPI(abc.ABC):
    """``schedule``, ``schedule_at``, fixed rate, fixed delay, ``submit``, ``cancel``."""

    #: Runs on Ray: the scheduling methods accept ``ray_options=``.
    _ray_runner = False
    #: How many RunInfo each TaskHandle keeps in ``runs`` (the newest).
    handle_runs = HANDLE_RUNS
    #: Tasks go to another process: a cron task's zone must be one that can
    #: travel (an IANA name, a fixed offset, or the local zone).
    _zones_travel = False
    #: The scheduler's shared limits (group -> runs at once): ``group=`` names one.
    _limits: Mapping[str, int] = {}

    @abc.abstractmethod
    def _check_open(self) -> None:
        """Raise SchedulerClosedError if the scheduler accepts no more work."""

    @abc.abstractmethod
    def _add(
        self, spec: v.TaskSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> TaskHandle:
        """Schedule a validated task; return its handle."""

    def _wall_now_ns(self) -> int:
        """The scheduler clock's wall time, ns since the epoch."""
        return time.time_ns()

    def pause(self, task_id: int) -> bool:
        """Pause a task (see ``TaskHandle.pause``)."""
        raise SchedulerError(f"pause is not available on {type(self).__name__}")

    def resume(self, task_id: int) -> bool:
        """Resume a paused task (see ``TaskHandle.resume``)."""
        raise SchedulerError(f"resume is not available on {type(self).__name__}")

    def run_now(self, key_or_id: str | int) -> bool:
        """One extra run of a periodic task now, outside its schedule (its
        next slot does not move; a paused task stays paused), subject to
        ``max_concurrent``/``overlap``: False if "skip" finds it full, or
        for an unknown, finished or one-shot task. The run's ``cause`` is
        "manual"."""
        self._check_open()
        task_id = self._task_id_of(key_or_id)
        return False if task_id is None else self._run_now(task_id)

    def backfill(
        self, key_or_id: str | int, start: datetime, end: datetime, *, dry_run: bool = False
    ) -> list[datetime]:
        """Run the task's own slots with ``start <= slot < end`` (and not
        after now), one after another in slot order (see
        ``TaskHandle.backfill``); returns them (``dry_run=True``: only that)."""
        self._check_open()
        start_ns, end_ns, dry = v.backfill_range(start, end, dry_run)
        task_id = self._task_id_of(key_or_id)
        if task_id is None:
            raise ValueError(f"no live task {key_or_id!r}")
        return [wall_datetime(ns) for ns in self._backfill(task_id, start_ns, end_ns, dry)]

    def _task_id_of(self, key_or_id: str | int) -> int | None:
        """The id of a live task named by key (str) or id (int)."""
        if isinstance(key_or_id, str):
            raise SchedulerError(f"tasks by key are not available on {type(self).__name__}")
        return v.task_id(key_or_id)

    def _run_now(self, task_id: int) -> bool:
        raise SchedulerError(f"run_now is not available on {type(self).__name__}")

    def _backfill(self, task_id: int, start_ns: int, end_ns: int, dry_run: bool) -> list[int]:
        """The slots (wall ns) of ``backfill``, run unless ``dry_run``."""
        raise SchedulerError(f"backfill is not available on {type(self).__name__}")

    @abc.abstractmethod
    def cancel(self, task_id: int, *, interrupt: bool = False) -> bool:
        """Cancel a task by id.

        A PENDING task is cancelled (True). A running periodic task is
        cancelled and its current run finishes (True). A running one-shot task
        is left alone (False) unless ``interrupt=True``, which stops that run
        (True). Finished, already cancelled or unknown tasks: False.
        """

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> TaskHandle:
        """Run ``fn(*args, **kwargs)`` as soon as a worker is free (Executor API)."""
        return self.schedule(fn, 0, args=args, kwargs=kwargs)

    def schedule(
        self,
        fn: Callable[..., Any],
        delay: Seconds = 0,
        *,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        priority: int = Priority.NORMAL,
        name: str | None = None,
        timeout: Seconds | None = None,
        retry: Retry | None = None,
        key: str | None = None,
        replace_existing: bool = False,
        ray_options: Mapping[str, Any] | None = None,
        misfire_grace: Seconds | None = None,
        group: str | None = None,
    ) -> TaskHandle:
        """Run ``fn`` once, ``delay`` seconds (or a timedelta) from now.

        ``retry``: a ``procsched.Retry`` for failed attempts. ``key``: a
        stable name; scheduling a key a live task holds raises ValueError
        unless ``replace_existing=True`` (which cancels that task).
        """
        self._check_open()
        call = v.call(fn, args, kwargs)
        delay_ns = v.duration_ns("delay", delay)
        return self._once(
            call, delay_ns, priority, name, timeout, retry, key, replace_existing, ray_options, misfire_grace, group
        )

    def schedule_at(
        self,
        fn: Callable[..., Any],
        when: datetime,
        *,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        priority: int = Priority.NORMAL,
        name: str | None = None,
        timeout: Seconds | None = None,
        retry: Retry | None = None,
        key: str | None = None,
        replace_existing: bool = False,
        ray_options: Mapping[str, Any] | None = None,
        misfire_grace: Seconds | None = None,
        group: str | None = None,
    ) -> TaskHandle:
        """Run ``fn`` once at ``when``, an aware datetime (naive ones are rejected).

        ``when`` is turned into a delay from the scheduler clock's wall time,
        once, here; a time in the past means now.
        """
        self._check_open()
        call = v.call(fn, args, kwargs)
        delay_ns = v.delay_until_ns(when, self._wall_now_ns())
        return self._once(
            call, delay_ns, priority, name, timeout, retry, key, replace_existing, ray_options, misfire_grace, group
        )

    def schedule_at_fixed_rate(
        self,
        fn: Callable[..., Any],
        period: Seconds,
        *,
        initial_delay: Seconds = 0,
        misfire: str = "catch_up",
        stop_on_error: bool = False,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        priority: int = Priority.NORMAL,
        name: str | None = None,
        timeout: Seconds | None = None,
        retry: Retry | None = None,
        until: datetime | Seconds | None = None,
        max_runs: int | None = None,
        key: str | None = None,
        replace_existing: bool = False,
        ray_options: Mapping[str, Any] | None = None,
        max_concurrent: int = 1,
        overlap: str = "wait",
        misfire_grace: Seconds | None = None,
        jitter: Seconds = 0.0,
        group: str | None = None,
    ) -> TaskHandle:
        """Run ``fn`` at ``initial_delay``, then every ``period`` on a fixed grid.

        Next due = previous *scheduled* start + period. ``misfire`` says what
        happens to grid slots missed during an overrun: "catch_up" runs them
        back to back, "skip" drops them, "coalesce" runs once for all of them.
        ``until`` (an aware datetime, or seconds from now) and ``max_runs``
        end the task (DONE) when no run is left within them.
        ``max_concurrent`` runs may run at once; a slot that comes due while
        that many run does what ``overlap`` says ("wait", "skip",
        "replace"); a run that would start later than its slot +
        ``misfire_grace`` seconds is skipped (see README "Schedule control").
        ``jitter``: each slot starts a random delay in ``[0, jitter)``
        seconds after it (its ``scheduled_at`` stays the slot). ``group``:
        one of the scheduler's ``limits``; at most that many runs of its
        tasks at once.
        """
        self._check_open()
        call = v.call(fn, args, kwargs)
        delay_ns = v.duration_ns("initial_delay", initial_delay)
        schedule = Schedule.fixed_rate(
            v.duration_ns("period", period, positive=True),
            v.choice("misfire", misfire, Misfire),
            v.flag("stop_on_error", stop_on_error),
        )
        schedule = v.control(schedule, max_concurrent, overlap, misfire_grace)
        schedule = self._shared(schedule, group, jitter)
        spec = v.TaskSpec(
            schedule,
            delay_ns,
            v.priority(priority),
            v.optional_timeout_ns(timeout),
            v.name(name),
            ray_options=v.ray_options(ray_options, self._ray_runner),
        )
        return self._add(self._with_options(spec, retry, until, max_runs, key, replace_existing), *call)

    def schedule_with_fixed_delay(
        self,
        fn: Callable[..., Any],
        delay: Seconds,
        *,
        initial_delay: Seconds = 0,
        stop_on_error: bool = False,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        priority: int = Priority.NORMAL,
        name: str | None = None,
        timeout: Seconds | None = None,
        retry: Retry | None = None,
        until: datetime | Seconds | None = None,
        max_runs: int | None = None,
        key: str | None = None,
        replace_existing: bool = False,
        ray_options: Mapping[str, Any] | None = None,
        max_concurrent: int = 1,
        overlap: str = "wait",
        misfire_grace: Seconds | None = None,
        jitter: Seconds = 0.0,
        group: str | None = None,
    ) -> TaskHandle:
        """Run ``fn`` at ``initial_delay``, then ``delay`` after each run *finishes*.
        Its own slots never overlap; ``max_concurrent``/``overlap`` apply to
        ``run_now()``."""
        self._check_open()
        call = v.call(fn, args, kwargs)
        delay_ns = v.duration_ns("initial_delay", initial_delay)
        schedule = Schedule.fixed_delay(
            v.duration_ns("delay", delay, positive=True), v.flag("stop_on_error", stop_on_error)
        )
        schedule = v.control(schedule, max_concurrent, overlap, misfire_grace)
        schedule = self._shared(schedule, group, jitter)
        spec = v.TaskSpec(
            schedule,
            delay_ns,
            v.priority(priority),
            v.optional_timeout_ns(timeout),
            v.name(name),
            ray_options=v.ray_options(ray_options, self._ray_runner),
        )
        return self._add(self._with_options(spec, retry, until, max_runs, key, replace_existing), *call)

    def schedule_cron(
        self,
        fn: Callable[..., Any],
        expr: str,
        *,
        tz: str | tzinfo | None = None,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        priority: int = Priority.NORMAL,
        name: str | None = None,
        timeout: Seconds | None = None,
        misfire: str = "coalesce",
        stop_on_error: bool = False,
        retry: Retry | None = None,
        until: datetime | Seconds | None = None,
        max_runs: int | None = None,
        key: str | None = None,
        replace_existing: bool = False,
        ray_options: Mapping[str, Any] | None = None,
        max_concurrent: int = 1,
        overlap: str = "wait",
        misfire_grace: Seconds | None = None,
        jitter: Seconds = 0.0,
        group: str | None = None,
    ) -> TaskHandle:
        """Run ``fn`` at every time the cron expression ``expr`` names, on the
        wall clock of ``tz`` (an IANA name or a tzinfo; None: this machine's
        zone, with its DST rules).

        ``expr``: ``minute hour day-of-month month day-of-week``, or six
        fields with seconds first, or an alias (``@daily`` ...). The first
        run is at the first match strictly after now. DST as cron does it
        (see README); the task follows wall-clock steps. Runs missed while
        overrunning or asleep follow ``misfire`` ("coalesce": one run for
        all of them; "skip"; "catch_up").

        Raises:
            ValueError: a malformed expression, an out-of-range field, an
                unknown zone (naming it), or any other bad option.
        """
        self._check_open()
        call = v.call(fn, args, kwargs)
        wall = self._wall_now_ns()
        trigger, first = v.cron(expr, tz, wall, self._zones_travel)
        schedule = Schedule.calendar(
            trigger, v.choice("misfire", misfire, Misfire), v.flag("stop_on_error", stop_on_error)
        )
        schedule = v.control(schedule, max_concurrent, overlap, misfire_grace)
        schedule = self._shared(schedule, group, jitter)
        spec = v.TaskSpec(
            schedule,
            0,
            v.priority(priority),
            v.optional_timeout_ns(timeout),
            v.name(name),
            start_wall_ns=wall,
            ray_options=v.ray_options(ray_options, self._ray_runner),
        )
        return self._add(self._with_options(spec, retry, until, max_runs, key, replace_existing, wall, first), *call)

    def _once(
        self,
        call: tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]],
        delay_ns: int,
        priority: object,
        name: object,
        timeout: object,
        retry: object = None,
        key: object = None,
        replace_existing: object = False,
        ray_options: object = None,
        misfire_grace: object = None,
        group: object = None,
    ) -> TaskHandle:
        once = ONCE if misfire_grace is None else v.control(ONCE, 1, "wait", misfire_grace)  # (every submit)
        spec = v.TaskSpec(
            once if group is None else self._shared(once, group),
            delay_ns,
            v.priority(priority),
            v.optional_timeout_ns(timeout),
            v.name(name),
            ray_options=v.ray_options(ray_options, self._ray_runner),
        )
        if retry is not None or key is not None or replace_existing is not False:
            spec = self._with_options(spec, retry, None, None, key, replace_existing)
        return self._add(spec, *call)

    def _shared(self, schedule: Schedule, group: object, jitter: object = 0.0) -> Schedule:
        """``group=`` (one of the scheduler's limits) and ``jitter=`` (seconds)
        into ``schedule`` (see ``_core/_limits.py``; ``Schedule.jitter_ns``)."""
        checked = checked_group(group, self._limits)
        jitter_ns = 0 if jitter == 0.0 and type(jitter) is float else v.duration_ns("jitter", jitter)
        if checked is None and not jitter_ns:
            return schedule
        return schedule._replace(group=checked, jitter_ns=jitter_ns)

    def _with_options(
        self,
        spec: v.TaskSpec,
        retry: object,
        until: object,
        max_runs: object,
        key: object,
        replace_existing: object,
        wall: int | None = None,
        first_slot: int | None = None,
    ) -> v.TaskSpec:
        """Validate the options of part two (retries, limits, keys) into ``spec``."""
        if retry is None and until is None and max_runs is None and key is None and replace_existing is False:
            return spec
        until_rel = None
        if until is not None:
            if wall is None:
                wall = self._wall_now_ns()
            until_rel = v.until_ns(until, wall)
            assert until_rel is not None
            first = spec.delay_ns if first_slot is None else first_slot - wall
            if first > until_rel:
                raise ValueError(f"until is before the task's first run: {until!r}")
        limits = v.max_runs(max_runs)
        schedule = spec.schedule
        if until_rel is not None or limits is not None:
            schedule = schedule._replace(until_ns=until_rel, max_runs=limits)
        return spec._replace(
            schedule=schedule,
            retry=checked_retry(retry),
            key=v.key(key),
            replace_existing=v.flag("replace_existing", replace_existing),
        )

    def _cancel_replaced(self, task_id: int) -> bool:
        """Cancel a task that a new one of its key replaces (see ``_claim_key``;
        a scheduler with a store keeps the key's row for the new one)."""
        return self.cancel(task_id)

    def _claim_key(self, keys: dict[str, TaskHandle], spec: v.TaskSpec) -> None:
        """Before adding ``spec``: its key must be free, or replaced (the holder cancelled)."""
        key = spec.key
        if key is None:
            return
        holder = keys.get(key)
        if holder is None or holder.done():
            return
        if not spec.replace_existing:
            raise ValueError(f"key {key!r} is held by live task {holder.id}; pass replace_existing=True to replace it")
        if not self._cancel_replaced(holder.id) and not holder.done():  # (ended meanwhile: the key is free)
            raise ValueError(f"key {key!r}: its task {holder.id} is running its only run and cannot be replaced")


class LiveTasks:
    """``get`` and ``jobs`` for a scheduler that keeps the handles of its live
    tasks (``_handles``: id -> handle, in submission order) and their keys
    (``_keys``: key -> handle)."""

    _handles: dict[int, TaskHandle]
    _keys: dict[str, TaskHandle]

    def _task_id_of(self, key_or_id: str | int) -> int | None:
        handle = self.get(key_or_id)
        return None if handle is None else handle.id

    def get(self, key_or_id: str | int) -> TaskHandle | None:
        """The live task with this key (str) or id (int), or None."""
        if isinstance(key_or_id, str):
            handle = self._keys.get(key_or_id)
            return handle if handle is not None and not handle.done() else None
        return self._handles.get(v.task_id(key_or_id))

    def jobs(self) -> list[TaskHandle]:
        """The live tasks (not finished or cancelled), in submission order."""
        return list(self._handles.values())
