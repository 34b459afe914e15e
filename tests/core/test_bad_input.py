"""Bad input: a clear exception at the call, naming the argument and the value,
and nothing scheduled."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

import procsched

NAN, INF = math.nan, math.inf
NAIVE = object()  # placeholder: a naive datetime 5 s ahead, built at call time


def ok() -> None:
    pass


# (method, kwargs to pass, the bad argument's name, its value, the exception type)
CASES: list[tuple[str, dict[str, Any], str, Any, type[Exception]]] = []


def case(method: str, arg: str, value: Any, exc: type[Exception], **extra: Any) -> None:
    CASES.append((method, {arg: value, **extra}, arg, value, exc))


BAD_DELAYS = [
    (-1, ValueError),
    (-0.5, ValueError),
    (NAN, ValueError),
    (INF, ValueError),
    (-INF, ValueError),
    (timedelta(seconds=-1), ValueError),
    ("1", TypeError),
    (None, TypeError),
    (True, TypeError),
    (1e300, ValueError),
]
BAD_PERIODS = BAD_DELAYS + [(0, ValueError), (0.0, ValueError), (timedelta(0), ValueError), (1e-12, ValueError)]
BAD_PRIORITIES = [
    (1.5, TypeError),
    ("high", TypeError),
    (True, TypeError),
    (False, TypeError),
    (None, TypeError),
    (2**70, ValueError),
]

for value, exc in BAD_DELAYS:
    case("schedule", "delay", value, exc)
    for m in ("schedule_at_fixed_rate", "schedule_with_fixed_delay"):
        case(m, "initial_delay", value, exc, **{"period" if "rate" in m else "delay": 1})
for value, exc in BAD_PERIODS:
    case("schedule_at_fixed_rate", "period", value, exc)
    case("schedule_with_fixed_delay", "delay", value, exc)
for m in ("schedule", "schedule_at", "schedule_at_fixed_rate", "schedule_with_fixed_delay"):
    for value, exc in BAD_PRIORITIES:
        case(m, "priority", value, exc)
    for value, exc in [(0, ValueError), (-1, ValueError), (NAN, ValueError), (INF, ValueError), ("1", TypeError)]:
        case(m, "timeout", value, exc)
    case(m, "fn", 42, TypeError)
    case(m, "fn", "print", TypeError)
    case(m, "name", 5, TypeError)
    case(m, "args", 5, TypeError)
    case(m, "kwargs", [1], TypeError)
    case(m, "kwargs", {1: 2}, TypeError)
for m in ("schedule_at_fixed_rate", "schedule_with_fixed_delay"):
    case(m, "stop_on_error", "yes", TypeError)
    case(m, "stop_on_error", 1, TypeError)
case("schedule_at_fixed_rate", "misfire", "bogus", ValueError)
case("schedule_at_fixed_rate", "misfire", "CATCH_UP", ValueError)
case("schedule_at_fixed_rate", "misfire", None, TypeError)
case("schedule_at_fixed_rate", "misfire", 1, TypeError)
case("schedule_at", "when", NAIVE, ValueError)  # naive
case("schedule_at", "when", 5, TypeError)
case("schedule_at", "when", "2030-01-01T00:00:00+00:00", TypeError)

DEFAULTS: dict[str, dict[str, Any]] = {
    "schedule": {"fn": ok},
    "schedule_at": {"fn": ok, "when": datetime.now(UTC) + timedelta(days=1)},
    "schedule_at_fixed_rate": {"fn": ok, "period": 1},
    "schedule_with_fixed_delay": {"fn": ok, "delay": 1},
}


def call(sched: procsched.InlineScheduler, method: str, kwargs: dict[str, Any]) -> Any:
    merged = {**DEFAULTS[method], **kwargs}
    fn = merged.pop("fn")
    if method == "schedule_at":
        when = merged.pop("when")
        return sched.schedule_at(fn, when, **merged)
    key = "period" if method == "schedule_at_fixed_rate" else "delay"
    if key not in merged:  # schedule() with its default delay
        return sched.schedule(fn, **merged)
    return getattr(sched, method)(fn, merged.pop(key), **merged)


def case_id(c: tuple[str, dict[str, Any], str, Any, type[Exception]]) -> str:
    method, _, arg, value, _ = c
    shown = "naive" if value is NAIVE else repr(value)[:20]
    return f"{method}-{arg}={shown}"


@pytest.mark.parametrize("c", CASES, ids=[case_id(c) for c in CASES])
def test_bad_argument_is_rejected_and_nothing_is_scheduled(
    c: tuple[str, dict[str, Any], str, Any, type[Exception]],
) -> None:
    method, kwargs, arg, value, exc = c
    if value is NAIVE:
        value = datetime.now() + timedelta(seconds=5)
        kwargs = {arg: value}
    clock = procsched.ManualClock()
    sched = procsched.InlineScheduler(clock)
    sched.schedule(ok, 1)
    heap = list(sched._core._timers)
    with pytest.raises(exc) as info:
        call(sched, method, kwargs)
    message = str(info.value)
    assert arg in message, message
    shown = repr(value)
    if len(shown) <= 60:
        assert shown in message, message
    assert sched.pending() == 1
    assert sched._core._timers == heap and len(sched._handles) == 1
    assert sched.run_until(10**6) == 1  # only the good task ever runs


@pytest.mark.parametrize("value", [42, None, "print"])
def test_submit_rejects_a_non_callable(sched: procsched.InlineScheduler, value: Any) -> None:
    with pytest.raises(TypeError) as info:
        sched.submit(value)
    assert "fn" in str(info.value) and repr(value) in str(info.value)
    assert sched.pending() == 0


@pytest.mark.parametrize(
    ("value", "exc"), [("bogus", ValueError), ("PRIORITY", ValueError), (None, TypeError), (1, TypeError)]
)
def test_unknown_policy_is_rejected(value: Any, exc: type[Exception]) -> None:
    with pytest.raises(exc) as info:
        procsched.InlineScheduler(policy=value)
    assert "policy" in str(info.value) and repr(value) in str(info.value)


def test_a_bad_clock_is_rejected() -> None:
    with pytest.raises(TypeError, match="clock"):
        procsched.InlineScheduler(clock=object())  # type: ignore[arg-type]


@pytest.mark.parametrize("t", [NAN, INF, "1", None, True])
def test_run_until_rejects_a_non_finite_time(sched: procsched.InlineScheduler, t: Any) -> None:
    with pytest.raises(TypeError, match="t must be"):
        sched.run_until(t)


@pytest.mark.parametrize(
    "schedule",
    [
        lambda s: s.submit(ok),
        lambda s: s.schedule(ok, 1),
        lambda s: s.schedule_at(ok, datetime.now(UTC)),
        lambda s: s.schedule_at_fixed_rate(ok, 1),
        lambda s: s.schedule_with_fixed_delay(ok, 1),
    ],
)
def test_any_call_after_shutdown_is_refused(schedule: Callable[[procsched.InlineScheduler], Any]) -> None:
    sched = procsched.InlineScheduler(procsched.ManualClock())
    sched.shutdown()
    with pytest.raises(procsched.SchedulerClosedError) as info:
        schedule(sched)
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, procsched.SchedulerError)
    assert sched.pending() == 0


# -- good input that looks odd -------------------------------------------------------


@pytest.mark.parametrize("delay", [0, 0.0, 1, 2.5, timedelta(milliseconds=1500)])
def test_delays_in_seconds_or_timedelta(sched: procsched.InlineScheduler, delay: Any) -> None:
    handle = sched.schedule(ok, delay)
    expected = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    assert handle.next_run == expected


@pytest.mark.parametrize("tz", [UTC, timezone(timedelta(hours=5, minutes=30))])
def test_schedule_at_an_aware_datetime_five_seconds_ahead(sched: procsched.InlineScheduler, tz: timezone) -> None:
    handle = sched.schedule_at(ok, datetime.now(tz) + timedelta(seconds=5))
    # The delay is taken from the scheduler clock's wall time: a ManualClock's
    # wall clock is the real time when it was made (a moment before `when` was
    # built) and stands still, so the delay is 5 s plus that moment.
    due = handle.next_run
    assert due is not None and 5.0 <= due < 5.5
    assert due == pytest.approx(5.0, abs=0.05)
    assert sched.run_until(4.4) == 0
    assert sched.run_until(5.5) == 1
    assert handle.runs[0].scheduled_for == handle.runs[0].started_at == due


def test_schedule_at_a_past_datetime_is_due_now(sched: procsched.InlineScheduler, clock: procsched.ManualClock) -> None:
    clock.advance(7)
    handle = sched.schedule_at(ok, datetime.now(UTC) - timedelta(hours=1))
    assert handle.next_run == 7.0
    assert sched.run_due() == 1


def test_priority_accepts_any_int_like(sched: procsched.InlineScheduler) -> None:
    for prio in (procsched.Priority.HIGH, -(2**62), 2**62, 0):
        sched.schedule(ok, 1, priority=prio)
    assert sched.pending() == 4
