"""Declaring jobs: the ``every``, ``cron`` and ``once`` decorators, and jobs files.

A *jobs file* is a Python file whose module-level functions are declared
as jobs; ``procsched run FILE.py`` imports it and starts them::

    from procsched import Retry, cron, every, once

    @every(5)                                   # fixed rate: at 0, 5, 10, ... s
    def poll_inbox(): ...

    @cron("0 3 * * *", tz="Europe/Berlin", retry=Retry(attempts=3))
    def nightly_report(): ...                   # 03:00 Berlin time, whatever DST does

    @every(60, fixed_delay=True, initial_delay=10, timeout=30)
    def compact(): ...                          # 60 s after each run finishes

    @once(delay=2, priority=10)
    def warm_cache(): ...

Each decorator returns the function itself, so it stays an ordinary,
callable, picklable function (stack them to declare several jobs on one
function). Without ``scheduler=``, declaring starts nothing: it records a
:class:`Job` for the function's module, and whoever loads the module -
``procsched run`` - starts the jobs on its scheduler. With ``scheduler=s``
the job is scheduled on ``s`` at once, when the decorator runs (in the
process that runs it); call ``s.schedule_at_fixed_rate`` and friends
directly when you need the ``TaskHandle``.

Arguments are checked when the decorator runs, so a bad period fails at
import, naming the argument, as the scheduling methods do.

Loading a jobs file (``load_jobs_file``): worker processes must be able to
unpickle the job functions. The file's directory goes first on ``sys.path``
and the file is imported under its own module name, so cloudpickle pickles
its functions *by reference* and each worker imports the file (once) - as
``python FILE.py`` would see it. If that name is taken (a stdlib module, a
module already imported from elsewhere, not an identifier), the file is
loaded under a private name and its functions are pickled *by value*
(``cloudpickle.register_pickle_by_value``) instead.
"""

from __future__ import annotations

import importlib
import importlib.util
import keyword
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from types import ModuleType
from typing import Any, TypeVar

from . import _validate as v
from ._api import SchedulingAPI, Seconds
from ._core import Misfire, Overlap, Priority
from ._core._units import NS
from ._handle import TaskHandle
from ._retry import Retry, checked_retry

F = TypeVar("F", bound=Callable[..., Any])

#: Jobs declared without a scheduler, by the module that declared them, in order.
_declared: dict[str, list[Job]] = {}


@dataclass(frozen=True)
class Job:
    """One declared job: a function and how to schedule it.

    ``kind`` is ``"rate"`` (fixed rate), ``"delay"`` (fixed delay),
    ``"cron"`` (calendar) or ``"once"``; ``period`` is the period or delay in
    seconds (None for ``once`` and ``cron``); ``options`` are the keyword
    arguments of the scheduling method (for ``cron``, ``expr`` among them).
    """

    fn: Callable[..., Any]
    kind: str
    period: float | None
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.options["name"])

    @property
    def initial_delay(self) -> float:
        """Seconds from now (if started now) to the first run."""
        if "when" in self.options:
            return v.delay_until_ns(self.options["when"]) / NS
        if self.kind == "cron":
            now = time.time_ns()
            trigger, first = v.cron(self.options["expr"], self.options.get("tz"), now)
            return (first - now) / NS
        delay = self.options.get("initial_delay", self.options.get("delay", 0))
        return v.duration_ns("delay", delay) / NS

    def describe(self) -> str:
        """``"every 5s"``, ``"every 5s after each run"``, ``"cron 0 3 * * * Europe/Berlin"``,
        ``"once in 2s"``, ... with ``", retry 3x"`` and the limits when there are any."""
        if self.kind == "rate":
            text = f"every {_seconds(self.period)}"
        elif self.kind == "delay":
            text = f"every {_seconds(self.period)} after each run"
        elif self.kind == "cron":
            tz = self.options.get("tz")
            zone = "" if tz is None else " " + (tz if isinstance(tz, str) else str(getattr(tz, "key", None) or tz))
            text = f"cron {self.options['expr']}{zone}"
        elif "when" in self.options:
            text = f"once at {self.options['when'].isoformat(timespec='seconds')}"
        else:
            text = f"once in {_seconds(self.initial_delay)}"
        parts = [text]
        retry = self.options.get("retry")
        if retry is not None:
            parts.append(retry.describe())
        if self.options.get("max_runs") is not None:
            parts.append(f"max {self.options['max_runs']} runs")
        if "max_concurrent" in self.options:
            parts.append(f"{self.options['max_concurrent']} at once")
        if "overlap" in self.options:
            parts.append(f"overlap {self.options['overlap']}")
        for option in ("misfire_grace", "jitter"):
            if option in self.options:
                parts.append(f"{option.replace('_', ' ')} {_seconds(v.duration_ns(option, self.options[option]) / NS)}")
        until = self.options.get("until")
        if until is not None:
            parts.append(
                f"until {until.isoformat(timespec='seconds')}"
                if isinstance(until, datetime)
                else f"for {_seconds(v.duration_ns('until', until) / NS)}"
            )
        return ", ".join(parts)

    def start(self, scheduler: SchedulingAPI, key: str | None = None) -> TaskHandle:
        """Schedule this job on ``scheduler`` (with ``key``: a durable keyed
        task on a scheduler with a store); return its handle."""
        options = dict(self.options)
        if key is not None:
            options["key"] = key
        if self.kind == "cron":
            return scheduler.schedule_cron(self.fn, options.pop("expr"), **options)
        if self.kind == "rate":
            return scheduler.schedule_at_fixed_rate(self.fn, self.period, **options)  # type: ignore[arg-type]
        if self.kind == "delay":
            return scheduler.schedule_with_fixed_delay(self.fn, self.period, **options)  # type: ignore[arg-type]
        if "when" in options:
            return scheduler.schedule_at(self.fn, **options)
        return scheduler.schedule(self.fn, **options)


def every(
    period: Seconds,
    *,
    fixed_delay: bool = False,
    initial_delay: Seconds = 0,
    misfire: str = "catch_up",
    stop_on_error: bool = False,
    priority: int = Priority.NORMAL,
    timeout: Seconds | None = None,
    name: str | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    scheduler: SchedulingAPI | None = None,
    retry: Retry | None = None,
    until: datetime | Seconds | None = None,
    max_runs: int | None = None,
    max_concurrent: int = 1,
    overlap: str = "wait",
    misfire_grace: Seconds | None = None,
    jitter: Seconds = 0.0,
) -> Callable[[F], F]:
    """Declare the decorated function as a periodic job.

    By default at a fixed rate (``schedule_at_fixed_rate``: runs at
    ``initial_delay + k * period``, with ``misfire`` for overruns); with
    ``fixed_delay=True``, ``period`` seconds after each run finishes
    (``schedule_with_fixed_delay``). ``name`` defaults to the function's
    name. The other options are those of the scheduling methods.

    Args:
        scheduler: schedule on this scheduler now, instead of declaring a
            job for ``procsched run`` to start.

    Returns:
        A decorator that returns the function unchanged.

    Raises:
        TypeError, ValueError: a bad option (at decoration time).
    """
    if callable(period) and not isinstance(period, (int, float)):
        raise TypeError("every() needs a period: write @every(5), not @every")
    v.duration_ns("delay" if fixed_delay else "period", period, positive=True)
    v.flag("fixed_delay", fixed_delay)
    options: dict[str, Any] = {
        "initial_delay": _checked(v.duration_ns, "initial_delay", initial_delay),
        "stop_on_error": v.flag("stop_on_error", stop_on_error),
    }
    if fixed_delay:
        if misfire != "catch_up":
            raise ValueError(f"misfire applies to fixed-rate jobs only, not with fixed_delay=True (got {misfire!r})")
    else:
        v.choice("misfire", misfire, Misfire)
        options["misfire"] = misfire
    kind = "delay" if fixed_delay else "rate"
    options.update(_limits(retry, until, max_runs))
    options.update(_control(max_concurrent, overlap, misfire_grace, jitter))
    return _declare(kind, period, options, priority, timeout, name, args, kwargs, scheduler)


def cron(
    expr: str,
    *,
    tz: str | tzinfo | None = None,
    misfire: str = "coalesce",
    stop_on_error: bool = False,
    retry: Retry | None = None,
    until: datetime | Seconds | None = None,
    max_runs: int | None = None,
    priority: int = Priority.NORMAL,
    timeout: Seconds | None = None,
    name: str | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    scheduler: SchedulingAPI | None = None,
    max_concurrent: int = 1,
    overlap: str = "wait",
    misfire_grace: Seconds | None = None,
    jitter: Seconds = 0.0,
) -> Callable[[F], F]:
    """Declare the decorated function as a calendar job (``schedule_cron``):
    at every time the cron expression ``expr`` names, on the wall clock of
    ``tz`` (an IANA name or a tzinfo; None: this machine's zone).
    ``name`` defaults to the function's name.

    Returns:
        A decorator that returns the function unchanged.

    Raises:
        TypeError, ValueError: a bad expression, zone or option (at decoration time).
    """
    if callable(expr):
        raise TypeError('cron() needs an expression: write @cron("0 3 * * *"), not @cron')
    v.cron(expr, tz, time.time_ns())
    options: dict[str, Any] = {
        "expr": expr,
        "tz": tz,
        "misfire": v.choice("misfire", misfire, Misfire).value,
        "stop_on_error": v.flag("stop_on_error", stop_on_error),
    }
    options.update(_limits(retry, until, max_runs))
    options.update(_control(max_concurrent, overlap, misfire_grace, jitter))
    return _declare("cron", None, options, priority, timeout, name, args, kwargs, scheduler)


def _limits(retry: object, until: object, max_runs: object) -> dict[str, Any]:
    """Check ``retry``, ``until`` and ``max_runs``; the options that are set."""
    options: dict[str, Any] = {}
    if checked_retry(retry) is not None:
        options["retry"] = retry
    if until is not None:
        v.until_ns(until, time.time_ns())
        options["until"] = until
    if v.max_runs(max_runs) is not None:
        options["max_runs"] = max_runs
    return options


def _control(max_concurrent: object, overlap: object, misfire_grace: object, jitter: object) -> dict[str, Any]:
    """Check the schedule-control options (README "Schedule control"); the ones not at their default."""
    options: dict[str, Any] = {}
    if v.max_concurrent(max_concurrent) != 1:
        options["max_concurrent"] = max_concurrent
    if v.choice("overlap", overlap, Overlap) is not Overlap.WAIT:
        options["overlap"] = overlap
    if misfire_grace is not None:
        options["misfire_grace"] = _checked(v.duration_ns, "misfire_grace", misfire_grace)
    if v.duration_ns("jitter", jitter):
        options["jitter"] = jitter
    return options


def once(
    delay: Seconds = 0,
    *,
    at: datetime | None = None,
    priority: int = Priority.NORMAL,
    timeout: Seconds | None = None,
    name: str | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    scheduler: SchedulingAPI | None = None,
    retry: Retry | None = None,
    misfire_grace: Seconds | None = None,
) -> Callable[[F], F]:
    """Declare the decorated function as a one-shot job: ``delay`` seconds
    after the start (``schedule``), or at ``at``, an aware datetime
    (``schedule_at``). ``name`` defaults to the function's name. ``retry``:
    a ``procsched.Retry`` for failed attempts (``until`` and ``max_runs``
    are for periodic jobs).

    Returns:
        A decorator that returns the function unchanged.

    Raises:
        TypeError, ValueError: a bad option (at decoration time).
    """
    if callable(delay) and not isinstance(delay, (int, float)):
        raise TypeError("once() is a decorator factory: write @once() or @once(delay=5), not @once")
    options: dict[str, Any]
    if at is not None:
        if delay != 0:
            raise ValueError("give once() a delay or an at= datetime, not both")
        v.delay_until_ns(at)  # aware, in range
        options = {"when": at}
    else:
        options = {"delay": _checked(v.duration_ns, "delay", delay)}
    options.update(_limits(retry, None, None))
    if misfire_grace is not None:
        options["misfire_grace"] = _checked(v.duration_ns, "misfire_grace", misfire_grace)
    return _declare("once", None, options, priority, timeout, name, args, kwargs, scheduler)


def _declare(
    kind: str,
    period: Seconds | None,
    options: dict[str, Any],
    priority: int,
    timeout: Seconds | None,
    name: str | None,
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None,
    scheduler: SchedulingAPI | None,
) -> Callable[[F], F]:
    v.priority(priority)
    v.optional_timeout_ns(timeout)
    v.name(name)
    if scheduler is not None and not isinstance(scheduler, SchedulingAPI):
        raise TypeError(f"scheduler must be a Scheduler or InlineScheduler, not {scheduler!r}")
    period_s = None if period is None else v.duration_ns("period", period, positive=True) / NS

    def decorate(fn: F) -> F:
        call_args = v.call(fn, args, kwargs)[1:]
        job_name = name if name is not None else getattr(fn, "__name__", None) or repr(fn)
        job = Job(
            fn,
            kind,
            period_s,
            {
                **options,
                "args": call_args[0],
                "kwargs": call_args[1],
                "priority": priority,
                "timeout": timeout,
                "name": job_name,
            },
        )
        if scheduler is not None:
            job.start(scheduler)
        else:
            _declared.setdefault(getattr(fn, "__module__", None) or "__main__", []).append(job)
        return fn

    return decorate


def _checked(check: Callable[..., Any], arg: str, value: Any) -> Any:
    check(arg, value)
    return value


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 3600 and value % 3600 == 0:
        return f"{value / 3600:g}h"
    if value >= 60 and value % 60 == 0:
        return f"{value / 60:g}min"
    return f"{value:g}s"


# -- jobs files ---------------------------------------------------------------


class JobsFileError(Exception):
    """A jobs file cannot be loaded; the message says why."""


def declared_jobs(module: ModuleType | str) -> list[Job]:
    """The jobs declared (without a scheduler) by functions of ``module``."""
    name = module if isinstance(module, str) else module.__name__
    return list(_declared.get(name, ()))


def load_jobs_file(path: str | os.PathLike[str]) -> tuple[ModuleType, list[Job]]:
    """Import the jobs file at ``path`` (see the module docstring) and return
    it with the jobs it declares, in declaration order.

    Raises:
        JobsFileError: no such file, or it declares no job.
        Exception: whatever the file raised while being imported (its
            traceback points into the file).
    """
    path = os.path.abspath(os.fspath(path))
    if not os.path.isfile(path):
        raise JobsFileError("no such file")
    directory, filename = os.path.split(path)
    stem = os.path.splitext(filename)[0]
    loaded = sys.modules.get(stem)
    if loaded is not None and _same_file(getattr(loaded, "__file__", None), path):
        module = loaded  # imported already (its jobs were declared then)
    elif _importable_as(stem, path, directory):
        _declared.pop(stem, None)
        module = importlib.import_module(stem)
    else:
        module = _load_by_value(stem, path)
    jobs = declared_jobs(module)
    if not jobs:
        raise JobsFileError(
            "it declares no jobs: decorate functions with @procsched.every(...), @procsched.cron(...) "
            "or @procsched.once()"
        )
    return module, jobs


def _importable_as(stem: str, path: str, directory: str) -> bool:
    """Put ``directory`` first on sys.path; True if ``import stem`` then
    finds the file at ``path`` without shadowing anything."""
    if not stem.isidentifier() or keyword.iskeyword(stem) or stem in sys.stdlib_module_names:
        return False
    if stem in sys.modules:
        return False  # another module by that name is imported already
    if directory not in sys.path:
        sys.path.insert(0, directory)
    importlib.invalidate_caches()
    try:
        spec = importlib.util.find_spec(stem)
    except (ImportError, ValueError):
        return False
    return spec is not None and _same_file(spec.origin, path)


def _load_by_value(stem: str, path: str) -> ModuleType:
    import cloudpickle

    name = "procsched_jobs_" + re.sub(r"\W", "_", stem)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise JobsFileError("not importable as Python")
    module = importlib.util.module_from_spec(spec)
    _declared.pop(name, None)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    cloudpickle.register_pickle_by_value(module)
    return module


def _same_file(a: str | None, b: str) -> bool:
    try:
        return a is not None and os.path.samefile(a, b)
    except OSError:
        return False
