"""Argument checks for the public API: each names the argument and the value.

Every check runs before anything is scheduled, so a bad call changes nothing.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, NamedTuple

from ._async import as_sync
from ._core import Kind, Misfire, Policy
from ._core._calendar import CronTrigger, zone
from ._core._scheduler import TaskExtra

NS = 1_000_000_000
#: The longest delay or period accepted: about 146 years.
MAX_NS = 2**62
MAX_PRIORITY = 2**63 - 1


def _describe(value: object) -> str:
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(value).__name__} {text}"


def duration_ns(arg: str, value: object, *, positive: bool = False) -> int:
    """Seconds (int, float, any real) or a ``timedelta`` -> integer nanoseconds."""
    if isinstance(value, timedelta):
        ns = ((value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds) * 1_000
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{arg} must be a number of seconds or a timedelta, not {_describe(value)}")
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
        raise TypeError(f"priority must be an int, not {_describe(value)}")
    try:
        prio = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"priority must be an int, not {_describe(value)}") from None
    if not -MAX_PRIORITY <= prio <= MAX_PRIORITY:
        raise ValueError(f"priority must fit in 64 bits, not {value!r}")
    return int(prio)


def choice(arg: str, value: object, enum_type: type[Any]) -> Any:
    if isinstance(value, enum_type):
        return value
    allowed = ", ".join(repr(m.value) for m in enum_type)
    if not isinstance(value, str):
        raise TypeError(f"{arg} must be one of {allowed}, not {_describe(value)}")
    try:
        return enum_type(value)
    except ValueError:
        raise ValueError(f"{arg} must be one of {allowed}, not {value!r}") from None


def policy(value: object) -> Policy:
    return choice("policy", value, Policy)  # type: ignore[no-any-return]


def flag(arg: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{arg} must be True or False, not {_describe(value)}")
    return value


def task_id(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"task_id must be an int, not {_describe(value)}")
    return int(value)


def name(value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"name must be a str or None, not {_describe(value)}")
    return value


def call(fn: object, args: object, kwargs: object) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    if not callable(fn):
        raise TypeError(f"fn must be callable, not {_describe(fn)}")
    fn = as_sync(fn)  # an async def runs to completion in the worker (see _async.py)
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args must be a tuple or list, not {_describe(args)}")
    if kwargs is None or (type(kwargs) is dict and not kwargs):  # (the usual case, without an ABC check)
        kwargs = {}
    elif not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise TypeError(f"kwargs must be a mapping of str keys or None, not {_describe(kwargs)}")
    return fn, tuple(args), dict(kwargs)


def delay_until_ns(when: object, wall_now_ns: int | None = None, arg: str = "when") -> int:
    """An aware datetime -> a delay in ns from the wall-clock time ``wall_now_ns``
    (default: the real one), >= 0."""
    if not isinstance(when, datetime):
        raise TypeError(f"{arg} must be an aware datetime, not {_describe(when)}")
    if when.tzinfo is None or when.tzinfo.utcoffset(when) is None:
        raise ValueError(f"{arg} must be an aware datetime (with tzinfo), not naive {when!r}")
    now = datetime.now(timezone.utc) if wall_now_ns is None else _EPOCH + timedelta(microseconds=wall_now_ns // 1000)
    try:
        delta = when - now
    except OverflowError:
        raise ValueError(f"{arg} is out of range: {when!r}") from None
    if delta <= timedelta(0):
        return 0  # in the past: due now
    return duration_ns(arg, delta)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def until_ns(value: object, wall_now_ns: int) -> int | None:
    """``until=``: an aware datetime or seconds from now -> ns from now (>= 0: now included), or None."""
    if value is None:
        return None
    if isinstance(value, datetime):
        delta = delay_until_ns(value, wall_now_ns, "until")
        if delta == 0 and value < _EPOCH + timedelta(microseconds=wall_now_ns // 1000):
            raise ValueError(f"until must not lie in the past, not {value!r}")
        return delta
    return duration_ns("until", value)  # 0: now (a run due exactly at until runs)


def max_runs(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_runs must be a positive int or None, not {_describe(value)}")
    if value < 1:
        raise ValueError(f"max_runs must be >= 1, not {value!r}")
    return int(value)


def key(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"key must be a non-empty str or None, not {_describe(value)}")
    from ._store._keys import check_key  # (here: the store package loads on the first key only)

    return check_key(value)  # a key both stores can hold: length, characters


def retry(value: object) -> Any:
    from ._retry import Retry

    if value is not None and not isinstance(value, Retry):
        raise TypeError(f"retry must be a procsched.Retry or None, not {_describe(value)}")
    return value


def cron(expr: object, tz: object, wall_now_ns: int) -> tuple[CronTrigger, int]:
    """A cron expression in a zone -> its trigger and its first slot (wall ns)."""
    from . import _tz  # noqa: F401 - installs the local zone

    if not isinstance(expr, str):
        raise TypeError(f"expr must be a cron expression (str), not {_describe(expr)}")
    trigger = CronTrigger(expr, zone(tz))  # type: ignore[arg-type]
    first = trigger.next_ns(wall_now_ns)
    if first is None:
        raise ValueError(f"expr never fires after now: {expr!r}")
    return trigger, first


#: The Ray task options ``ray_options=`` may set (Scheduler(runner="ray") only).
#: Retries are not among them: procsched never re-runs a run behind the user's back.
RAY_OPTIONS = (
    "num_cpus", "num_gpus", "memory", "resources", "accelerator_type", "scheduling_strategy",
    "runtime_env", "label_selector", "placement_group", "placement_group_bundle_index", "max_calls",
)  # fmt: skip


def ray_options(value: object, on_ray: bool) -> dict[str, Any] | None:
    """``ray_options=``: None, or a mapping of Ray task options (resources
    non-negative finite numbers). Ray checks the values further at the call."""
    if value is None:
        return None
    if not on_ray:
        raise ValueError(f"ray_options is only for Scheduler(runner='ray'); this scheduler cannot use {_describe(value)}")
    if not isinstance(value, Mapping):
        raise TypeError(f"ray_options must be a mapping of Ray task options or None, not {_describe(value)}")
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
                raise TypeError(f"ray_options['resources'] must be a mapping of str keys, not {_describe(item)}")
            for name_, amount in item.items():
                _resource(f"ray_options['resources'][{name_!r}]", amount)
        elif key in ("runtime_env", "label_selector") and not isinstance(item, Mapping):
            raise TypeError(f"ray_options[{key!r}] must be a mapping, not {_describe(item)}")
        elif key == "scheduling_strategy" and isinstance(item, str) and item not in ("DEFAULT", "SPREAD"):
            raise ValueError(f"ray_options['scheduling_strategy'] must be 'DEFAULT', 'SPREAD' or a Ray strategy, not {item!r}")
        elif key == "accelerator_type" and not isinstance(item, str):
            raise TypeError(f"ray_options['accelerator_type'] must be a str, not {_describe(item)}")
    return options


def _resource(arg: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{arg} must be a number, not {_describe(value)}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{arg} must be a finite number >= 0, not {value!r}")


class TaskSpec(NamedTuple):
    """A validated scheduling request (delays relative to submission)."""

    kind: Kind
    delay_ns: int
    period_ns: int
    priority: int
    misfire: Misfire
    stop_on_error: bool
    timeout_ns: int | None
    name: str | None
    trigger: CronTrigger | None = None
    tz: Any = None  # as given (str, tzinfo or None): what crosses to the dispatcher
    after_wall_ns: int = 0  # the call's wall-clock time (calendar)
    until_ns: int | None = None  # from the call
    max_runs: int | None = None
    retry: Any = None  # a procsched.Retry
    key: str | None = None
    replace_existing: bool = False
    ray_options: dict[str, Any] | None = None

    def extra(self, retry_on: Any = None) -> TaskExtra | None:
        """The core's TaskExtra for this spec (None for a plain task).
        ``retry_on``: how this runner carries ``Retry``'s exception classes."""
        if self.trigger is None and self.until_ns is None and self.max_runs is None and self.retry is None:
            return None
        policy = None if self.retry is None else self.retry.policy()
        return TaskExtra(self.trigger, self.after_wall_ns, self.until_ns, self.max_runs, policy, retry_on)

    @property
    def has_extra(self) -> bool:
        return not (self.trigger is None and self.until_ns is None and self.max_runs is None and self.retry is None)


def wire_extra(spec: TaskSpec, now: int, pickled: bool) -> tuple[Any, ...] | None:
    """A spec's calendar, retry and limits as plain values for ``Engine.add``
    (None for a plain task). With ``pickled`` (the dispatcher is another
    process) the zone travels as an IANA key and ``Retry.on``'s exception
    classes as cloudpickled bytes that only a worker unpickles; otherwise as
    objects. Raises ValueError for a zone that cannot travel."""
    if not spec.has_extra:
        return None
    from ._tz import to_wire

    cron = None
    if spec.trigger is not None:
        tz = spec.tz
        if not isinstance(tz, str) and tz is not None:
            tz = to_wire(tz) if pickled else tz
        cron = (spec.trigger.expr, tz)
    retry = retry_on = None
    if spec.retry is not None:
        retry = spec.retry.to_wire()
        classes = spec.retry.classes
        if classes:
            if pickled:
                import cloudpickle

                retry_on = cloudpickle.dumps(classes)
            else:
                retry_on = classes
    return (cron, spec.after_wall_ns, spec.until_ns, spec.max_runs, retry, retry_on, now)
