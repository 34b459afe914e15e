"""Argument checks for the public API: each names the argument and the value.

Every check runs before anything is scheduled, so a bad call changes nothing.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import operator
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from . import _tz
from ._async import as_sync
from ._core import CronTrigger, Overlap, Policy, Schedule
from ._core._units import NS, wall_datetime

#: The longest delay or period accepted: about 146 years.
MAX_NS = 2**62
MAX_PRIORITY = 2**63 - 1


def describe(value: object) -> str:
    """A value for an error message: its type and a short repr."""
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(value).__name__} {text}"


def duration_ns(arg: str, value: object, *, positive: bool = False) -> int:
    """Seconds (int, float, any real) or a ``timedelta`` -> integer nanoseconds."""
    if type(value) is int:  # (every submit: no numbers ABC checks for a plain int)
        ns = value * NS
    elif isinstance(value, timedelta):
        ns = ((value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds) * 1_000
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{arg} must be a number of seconds or a timedelta, not {describe(value)}")
    elif isinstance(value, numbers.Integral):
        ns = int(value) * NS
    else:
        seconds = float(value)
        if math.isnan(seconds) or math.isinf(seconds):
            raise ValueError(f"{arg} must be a finite number of seconds, not {value!r}")
        if abs(seconds) > MAX_NS / NS:
            raise ValueError(f"{arg} must be at most {MAX_NS // NS} seconds, not {value!r}")
        ns = round(seconds * NS)
    if ns < 0:
        raise ValueError(f"{arg} must be {'> 0' if positive else '>= 0'}, not {value!r}")
    if positive and ns == 0:
        raise ValueError(f"{arg} must be > 0 (at least 1 ns), not {value!r}")
    if ns > MAX_NS:
        raise ValueError(f"{arg} must be at most {MAX_NS // NS} seconds, not {value!r}")
    return ns


def optional_timeout_ns(value: object) -> int | None:
    return None if value is None else duration_ns("timeout", value, positive=True)


def priority(value: object) -> int:
    if isinstance(value, bool):
        raise TypeError(f"priority must be an int, not {describe(value)}")
    try:
        prio = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"priority must be an int, not {describe(value)}") from None
    if not -MAX_PRIORITY <= prio <= MAX_PRIORITY:
        raise ValueError(f"priority must fit in 64 bits, not {value!r}")
    return int(prio)


def choice(arg: str, value: object, enum_type: type[Any]) -> Any:
    if isinstance(value, enum_type):
        return value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return enum_type(value)
    allowed = ", ".join(repr(m.value) for m in enum_type)  # (made for the message only: a submit's cost)
    if not isinstance(value, str):
        raise TypeError(f"{arg} must be one of {allowed}, not {describe(value)}")
    raise ValueError(f"{arg} must be one of {allowed}, not {value!r}")


def policy(value: object) -> Policy:
    return choice("policy", value, Policy)  # type: ignore[no-any-return]


def flag(arg: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{arg} must be True or False, not {describe(value)}")
    return value


def task_id(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"task_id must be an int, not {describe(value)}")
    return int(value)


def name(value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"name must be a str or None, not {describe(value)}")
    return value


def call(fn: object, args: object, kwargs: object) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    if not callable(fn):
        raise TypeError(f"fn must be callable, not {describe(fn)}")
    fn = as_sync(fn)  # an async def runs to completion in the worker (see _async.py)
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args must be a tuple or list, not {describe(args)}")
    if kwargs is None or (type(kwargs) is dict and not kwargs):  # (the usual case, without an ABC check)
        kwargs = {}
    elif not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise TypeError(f"kwargs must be a mapping of str keys or None, not {describe(kwargs)}")
    return fn, tuple(args), dict(kwargs)


def delay_until_ns(when: object, wall_now_ns: int | None = None, arg: str = "when") -> int:
    """An aware datetime -> a delay in ns from the wall-clock time ``wall_now_ns``
    (default: the real one), >= 0."""
    if not isinstance(when, datetime):
        raise TypeError(f"{arg} must be an aware datetime, not {describe(when)}")
    if when.tzinfo is None or when.tzinfo.utcoffset(when) is None:
        raise ValueError(f"{arg} must be an aware datetime (with tzinfo), not naive {when!r}")
    now = datetime.now(UTC) if wall_now_ns is None else wall_datetime(wall_now_ns)
    try:
        delta = when - now
    except OverflowError:
        raise ValueError(f"{arg} is out of range: {when!r}") from None
    if delta <= timedelta(0):
        return 0  # in the past: due now
    return duration_ns(arg, delta)


def until_ns(value: object, wall_now_ns: int) -> int | None:
    """``until=``: an aware datetime or seconds from now -> ns from now (>= 0: now included), or None."""
    if value is None:
        return None
    if isinstance(value, datetime):
        delta = delay_until_ns(value, wall_now_ns, "until")
        if delta == 0 and value < wall_datetime(wall_now_ns):
            raise ValueError(f"until must not lie in the past, not {value!r}")
        return delta
    return duration_ns("until", value)  # 0: now (a run due exactly at until runs)


def max_runs(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_runs must be a positive int or None, not {describe(value)}")
    if value < 1:
        raise ValueError(f"max_runs must be >= 1, not {value!r}")
    return int(value)


def max_concurrent(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_concurrent must be an int >= 1, not {describe(value)}")
    if value < 1:
        raise ValueError(f"max_concurrent must be >= 1, not {value!r}")
    return int(value)


def control(schedule: Schedule, max_concurrent_: object, overlap: object, misfire_grace: object) -> Schedule:
    """``max_concurrent=``, ``overlap=`` and ``misfire_grace=`` (seconds or
    None) into ``schedule`` (the same value when all are the defaults)."""
    concurrent = max_concurrent(max_concurrent_)
    mode = choice("overlap", overlap, Overlap)
    grace = None if misfire_grace is None else duration_ns("misfire_grace", misfire_grace)
    if concurrent == 1 and mode is Overlap.WAIT and grace is None:
        return schedule
    return schedule._replace(max_concurrent=concurrent, overlap=mode, misfire_grace_ns=grace)


def backfill_range(start: object, end: object, dry_run: object) -> tuple[int, int, bool]:
    """``backfill(start, end, dry_run=)``: aware datetimes -> wall ns since the epoch."""
    ends = []
    for arg, value in (("start", start), ("end", end)):
        if not isinstance(value, datetime):
            raise TypeError(f"{arg} must be an aware datetime, not {describe(value)}")
        if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
            raise ValueError(f"{arg} must be an aware datetime (with tzinfo), not naive {value!r}")
        delta = value - datetime(1970, 1, 1, tzinfo=UTC)
        ends.append(((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds) * 1_000)
    if ends[0] >= ends[1]:
        raise ValueError(f"start must be before end, not start={start!r} >= end={end!r}")
    return ends[0], ends[1], flag("dry_run", dry_run)


def key(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"key must be a non-empty str or None, not {describe(value)}")
    from ._store._keys import check_key  # (here: the store package loads on the first key only)

    return check_key(value)  # a key both stores can hold: length, characters


def cron(expr: object, tz: Any, wall_now_ns: int, portable: bool = False) -> tuple[CronTrigger, int]:
    """A cron expression in a zone -> its trigger and its first slot (wall ns).
    ``portable``: the zone must reach another process (an IANA name, a
    fixed offset or the local zone), and the trigger keeps it in that form."""
    if not isinstance(expr, str):
        raise TypeError(f"expr must be a cron expression (str), not {describe(expr)}")
    resolved = _tz.zone(tz)  # TypeError, ValueError: not a zone
    given = _tz.portable(tz) if portable else tz
    trigger = CronTrigger(expr, resolved, given)
    first = trigger.next_ns(wall_now_ns)
    if first is None:
        raise ValueError(f"expr never fires after now: {expr!r}")
    return trigger, first


#: The Ray task options ``ray_options=`` may set (Scheduler(runner="ray") only).
#: Retries are not among them: procsched never re-runs a run behind the user's back.
RAY_OPTIONS = (
    "num_cpus",
    "num_gpus",
    "memory",
    "resources",
    "accelerator_type",
    "scheduling_strategy",
    "runtime_env",
    "label_selector",
    "placement_group",
    "placement_group_bundle_index",
    "max_calls",
)


def ray_options(value: object, on_ray: bool) -> dict[str, Any] | None:
    """``ray_options=``: None, or a mapping of Ray task options (resources
    non-negative finite numbers). Ray checks the values further at the call."""
    if value is None:
        return None
    if not on_ray:
        raise ValueError(
            f"ray_options is only for Scheduler(runner='ray'); this scheduler cannot use {describe(value)}"
        )
    if not isinstance(value, Mapping):
        raise TypeError(f"ray_options must be a mapping of Ray task options or None, not {describe(value)}")
    options = dict(value)
    for key, item in options.items():
        if key not in RAY_OPTIONS:
            raise ValueError(
                f"ray_options has an unknown or unsupported key {key!r}; allowed: {', '.join(RAY_OPTIONS)} "
                "(retries are procsched's: see retry=)"
            )
        if key in ("num_cpus", "num_gpus", "memory"):
            _resource(f"ray_options[{key!r}]", item)
        elif key == "resources":
            if not isinstance(item, Mapping) or not all(isinstance(k, str) for k in item):
                raise TypeError(f"ray_options['resources'] must be a mapping of str keys, not {describe(item)}")
            for name_, amount in item.items():
                _resource(f"ray_options['resources'][{name_!r}]", amount)
        elif key in ("runtime_env", "label_selector") and not isinstance(item, Mapping):
            raise TypeError(f"ray_options[{key!r}] must be a mapping, not {describe(item)}")
        elif key == "scheduling_strategy" and isinstance(item, str) and item not in ("DEFAULT", "SPREAD"):
            raise ValueError(
                f"ray_options['scheduling_strategy'] must be 'DEFAULT', 'SPREAD' or a Ray strategy, not {item!r}"
            )
        elif key == "accelerator_type" and not isinstance(item, str):
            raise TypeError(f"ray_options['accelerator_type'] must be a str, not {describe(item)}")
    return options


def _resource(arg: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{arg} must be a number, not {describe(value)}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{arg} must be a finite number >= 0, not {value!r}")


class TaskSpec(NamedTuple):
    """A validated scheduling request."""

    schedule: Schedule
    delay_ns: int
    """The first run: this long after the call (0 for a calendar task: its first slot after the call)."""
    priority: int
    timeout_ns: int | None
    name: str | None
    start_wall_ns: int = 0
    """The call's wall-clock time (a calendar task's first slot is the first after it)."""
    retry: Any = None  # a procsched.Retry
    key: str | None = None
    replace_existing: bool = False
    ray_options: dict[str, Any] | None = None
