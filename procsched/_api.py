"""The scheduling methods every scheduler shares.

Each method validates its arguments (naming the argument and the value on
error), builds a :class:`TaskSpec` and hands it to the runner's ``_add``.
A runner implements ``_add``, ``cancel`` and ``_check_open`` only.
"""

from __future__ import annotations

import abc
from datetime import datetime, timedelta
from typing import Any, Callable, Mapping, Sequence

from . import _validate as v
from ._core import Kind, Misfire, Priority
from ._handle import TaskHandle

Seconds = float | int | timedelta


class SchedulingAPI(abc.ABC):
    """``schedule``, ``schedule_at``, fixed rate, fixed delay, ``submit``, ``cancel``."""

    #: Runs on Ray: the scheduling methods accept ``ray_options=``.
    _ray_runner = False

    @abc.abstractmethod
    def _check_open(self) -> None:
        """Raise SchedulerClosedError if the scheduler accepts no more work."""

    @abc.abstractmethod
    def _add(
        self, spec: v.TaskSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> TaskHandle:
        """Schedule a validated task; return its handle."""

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
        ray_options: Mapping[str, Any] | None = None,
    ) -> TaskHandle:
        """Run ``fn`` once, ``delay`` seconds (or a timedelta) from now."""
        self._check_open()
        call = v.call(fn, args, kwargs)
        delay_ns = v.duration_ns("delay", delay)
        return self._once(call, delay_ns, priority, name, timeout, ray_options)

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
        ray_options: Mapping[str, Any] | None = None,
    ) -> TaskHandle:
        """Run ``fn`` once at ``when``, an aware datetime (naive ones are rejected).

        ``when`` is turned into a delay from the current wall-clock time, once,
        here; a time in the past means now.
        """
        self._check_open()
        call = v.call(fn, args, kwargs)
        delay_ns = v.delay_until_ns(when)
        return self._once(call, delay_ns, priority, name, timeout, ray_options)

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
        ray_options: Mapping[str, Any] | None = None,
    ) -> TaskHandle:
        """Run ``fn`` at ``initial_delay``, then every ``period`` on a fixed grid.

        Next due = previous *scheduled* start + period. ``misfire`` says what
        happens to grid slots missed during an overrun: "catch_up" runs them
        back to back, "skip" drops them, "coalesce" runs once for all of them.
        """
        self._check_open()
        call = v.call(fn, args, kwargs)
        spec = v.TaskSpec(
            Kind.FIXED_RATE,
            v.duration_ns("initial_delay", initial_delay),
            v.duration_ns("period", period, positive=True),
            v.priority(priority),
            v.choice("misfire", misfire, Misfire),
            v.flag("stop_on_error", stop_on_error),
            v.optional_timeout_ns(timeout),
            v.name(name),
            v.ray_options(ray_options, self._ray_runner),
        )
        return self._add(spec, *call)

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
        ray_options: Mapping[str, Any] | None = None,
    ) -> TaskHandle:
        """Run ``fn`` at ``initial_delay``, then ``delay`` after each run *finishes*."""
        self._check_open()
        call = v.call(fn, args, kwargs)
        spec = v.TaskSpec(
            Kind.FIXED_DELAY,
            v.duration_ns("initial_delay", initial_delay),
            v.duration_ns("delay", delay, positive=True),
            v.priority(priority),
            Misfire.CATCH_UP,
            v.flag("stop_on_error", stop_on_error),
            v.optional_timeout_ns(timeout),
            v.name(name),
            v.ray_options(ray_options, self._ray_runner),
        )
        return self._add(spec, *call)

    def _once(
        self, call: tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]], delay_ns: int,
        priority: object, name: object, timeout: object, ray_options: object = None,
    ) -> TaskHandle:  # fmt: skip
        spec = v.TaskSpec(
            Kind.ONCE, delay_ns, 0, v.priority(priority), Misfire.CATCH_UP, False,
            v.optional_timeout_ns(timeout), v.name(name), v.ray_options(ray_options, self._ray_runner),
        )  # fmt: skip
        return self._add(spec, *call)
