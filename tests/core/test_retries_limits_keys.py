"""Retries, limits, keys, get/jobs and pause/resume on InlineScheduler + ManualClock,
and the bad input of issue 9 (an error naming the argument and the value; nothing scheduled)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import pytest

from procsched import InlineScheduler, ManualClock, Retry, TaskState, current_run

UTC = UTC


class Boom(Exception):
    pass


def failing(times: int, exc: type[BaseException] = Boom):
    calls = []

    def job() -> int:
        info = current_run()
        calls.append((info.run, info.attempt, info.started_at))
        if info.attempt <= times:
            raise exc(info.attempt)
        return info.attempt

    return job, calls


# -- retries --------------------------------------------------------------------


def test_one_shot_retries_with_exponential_backoff(sched: InlineScheduler, clock: ManualClock) -> None:
    job, calls = failing(3)
    handle = sched.schedule(job, retry=Retry(attempts=4, delay=1, backoff=2, max_delay=3))
    sched.run_until(100)
    # attempt 1 at 0; +1 s; +2 s; +min(4, 3) s
    assert calls == [(1, 1, 0.0), (1, 2, 1.0), (1, 3, 3.0), (1, 4, 6.0)]
    assert handle.result() == 4 and handle.state is TaskState.DONE
    assert [(r.run, r.attempt, r.outcome) for r in handle.runs] == [
        (1, 1, "error"),
        (1, 2, "error"),
        (1, 3, "error"),
        (1, 4, "ok"),
    ]


def test_pending_between_attempts_and_cancel_cancels(sched: InlineScheduler) -> None:
    job, calls = failing(5)
    handle = sched.schedule(job, retry=Retry(attempts=3, delay=10))
    sched.run_until(1)
    assert handle.state is TaskState.PENDING and handle.next_run == 10.0 and not handle.done()
    assert handle.cancel() and handle.cancelled()
    sched.run_until(100)
    assert len(calls) == 1


def test_one_shot_fails_with_the_last_attempts_exception(sched: InlineScheduler) -> None:
    job, calls = failing(5)
    handle = sched.schedule(job, retry=Retry(attempts=2, delay=0))
    sched.run_until(1)
    with pytest.raises(Boom) as info:
        handle.result()
    assert info.value.args == (2,) and len(calls) == 2 and handle.state is TaskState.FAILED


def test_retry_on_filters_by_exception_class(sched: InlineScheduler) -> None:
    job, calls = failing(1, KeyError)
    handle = sched.schedule(job, retry=Retry(attempts=3, delay=0, on=(LookupError,)))
    sched.run_until(1)
    assert handle.result() == 2
    job2, calls2 = failing(1, ValueError)
    handle2 = sched.schedule(job2, retry=Retry(attempts=3, delay=0, on=(LookupError, "crashed")))
    sched.run_until(2)
    with pytest.raises(ValueError):
        handle2.result()
    assert len(calls2) == 1


def test_retry_of_a_timeout(sched: InlineScheduler, clock: ManualClock) -> None:
    def slow_first() -> str:
        if current_run().attempt == 1:
            clock.advance(5)
        return "ok"

    handle = sched.schedule(slow_first, timeout=1, retry=Retry(attempts=2, delay=0, on="timeout"))
    sched.run_until(10)
    assert [r.outcome for r in handle.runs] == ["timeout", "ok"] and handle.result() == "ok"


def test_jitter_stays_within_its_fraction(sched: InlineScheduler) -> None:
    job, calls = failing(10)
    sched.schedule(job, retry=Retry(attempts=6, delay=10, backoff=1, jitter=0.5))
    sched.run_until(1000)
    gaps = [b[2] - a[2] for a, b in zip(calls, calls[1:])]
    assert len(gaps) == 5 and all(5.0 <= g <= 15.0 for g in gaps) and len(set(gaps)) > 1


def test_periodic_retry_that_would_reach_the_next_slot_is_not_made(sched: InlineScheduler) -> None:
    job, calls = failing(100)
    handle = sched.schedule_at_fixed_rate(job, 10, retry=Retry(attempts=5, delay=4, backoff=1))
    sched.run_until(25)
    # run 1: attempts at 0, 4, 8 (12 >= 10: not made); run 2 at 10, 14, 18; run 3 at 20, 24
    assert [(r, a, t) for r, a, t in calls] == [
        (1, 1, 0.0),
        (1, 2, 4.0),
        (1, 3, 8.0),
        (2, 1, 10.0),
        (2, 2, 14.0),
        (2, 3, 18.0),
        (3, 1, 20.0),
        (3, 2, 24.0),
    ]
    assert handle.state is TaskState.PENDING


def test_stop_on_error_counts_a_run_failed_only_after_its_last_attempt(sched: InlineScheduler) -> None:
    job, calls = failing(1)
    ok = sched.schedule_with_fixed_delay(job, 10, stop_on_error=True, retry=Retry(attempts=2, delay=1), max_runs=2)
    sched.run_until(100)
    assert ok.state is TaskState.DONE and [(r.run, r.attempt, r.outcome) for r in ok.runs] == [
        (1, 1, "error"),
        (1, 2, "ok"),
        (2, 1, "error"),
        (2, 2, "ok"),
    ]
    job2, _ = failing(5)
    bad = sched.schedule_with_fixed_delay(job2, 10, stop_on_error=True, retry=Retry(attempts=2, delay=1))
    sched.run_until(200)
    assert bad.state is TaskState.FAILED and len(bad.runs) == 2


# -- limits ----------------------------------------------------------------------


def test_max_runs_ends_done_with_none(sched: InlineScheduler) -> None:
    handle = sched.schedule_at_fixed_rate(lambda: 42, 5, max_runs=3)
    sched.run_until(100)
    assert [r.scheduled_for for r in handle.runs] == [0.0, 5.0, 10.0]
    assert handle.state is TaskState.DONE and handle.result() is None and sched.pending() == 0


def test_until_in_seconds_and_as_a_datetime(sched: InlineScheduler, clock: ManualClock) -> None:
    a = sched.schedule_at_fixed_rate(lambda: None, 5, until=12)
    b = sched.schedule_with_fixed_delay(lambda: None, 5, until=clock.wall_now() + timedelta(seconds=10))
    sched.run_until(100)
    assert [r.scheduled_for for r in a.runs] == [0.0, 5.0, 10.0]
    assert [r.scheduled_for for r in b.runs] == [0.0, 5.0, 10.0]  # a run due exactly at until runs
    assert a.state is b.state is TaskState.DONE


# -- keys, get, jobs ---------------------------------------------------------------


def test_keys_get_and_jobs(sched: InlineScheduler) -> None:
    a = sched.schedule(lambda: 1, 10, key="report")
    b = sched.schedule_at_fixed_rate(lambda: 2, 5, initial_delay=1, key="poll")
    assert a.key == "report" and sched.get("report") is a and sched.get(b.id) is b
    assert sched.get("nope") is None and sched.get(999) is None
    assert sched.jobs() == [a, b]
    with pytest.raises(ValueError, match="'report'"):
        sched.schedule(lambda: 3, 1, key="report")
    assert sched.jobs() == [a, b]  # nothing scheduled
    c = sched.schedule(lambda: 3, 1, key="report", replace_existing=True)
    assert a.cancelled() and sched.get("report") is c and sched.jobs() == [b, c]
    sched.run_until(10)
    assert c.result() == 3 and sched.get("report") is None
    d = sched.schedule(lambda: 4, 1, key="report")  # a finished task's key is free again
    assert sched.get("report") is d


# -- pause / resume -----------------------------------------------------------------


def test_pause_and_resume_a_fixed_rate_task(sched: InlineScheduler) -> None:
    handle = sched.schedule_at_fixed_rate(lambda: None, 10)
    sched.run_until(15)
    assert handle.pause() and handle.state is TaskState.PAUSED and handle.next_run is None
    assert handle.pause()  # already paused
    sched.run_until(47)
    assert len(handle.runs) == 2
    assert handle.resume() and handle.state is TaskState.PENDING
    assert handle.next_run == 50.0 and not handle.resume()  # next grid slot from now
    sched.run_until(50)
    assert [r.scheduled_for for r in handle.runs] == [0.0, 10.0, 50.0]


def test_pause_while_running_takes_effect_after_the_run(sched: InlineScheduler) -> None:
    handles = []

    def job() -> None:
        if current_run().run == 1:
            assert handles[0].pause()

    handles.append(sched.schedule_with_fixed_delay(job, 5))
    sched.run_until(100)
    assert len(handles[0].runs) == 1 and handles[0].state is TaskState.PAUSED
    assert handles[0].cancel() and handles[0].state is TaskState.CANCELLED


def test_pause_a_calendar_task_resumes_at_its_next_slot_from_now() -> None:
    clock = ManualClock(wall=datetime(2026, 6, 1, tzinfo=UTC))
    sched = InlineScheduler(clock)
    handle = sched.schedule_cron(lambda: None, "0 * * * *", tz="UTC")
    assert handle.pause()
    sched.run_until(3 * 3600 + 60)
    assert handle.runs == [] and handle.resume()
    assert handle.next_run_at == datetime(2026, 6, 1, 4, tzinfo=UTC)


def test_a_paused_one_shot_and_a_running_one_shot(sched: InlineScheduler) -> None:
    handle = sched.schedule(lambda: 7, 5)
    assert handle.pause()
    sched.run_until(10)
    assert handle.runs == [] and handle.resume() and handle.next_run == 10.0
    sched.run_due()
    assert handle.result() == 7 and not handle.pause() and not handle.resume()
    inner: list[bool] = []
    h2 = sched.schedule(lambda: inner.append(sched.pause(h2.id)))
    sched.run_due()
    assert inner == [False]


# -- wall-clock times at the surface ----------------------------------------------------


def test_scheduled_at_and_next_run_at_are_aware_utc() -> None:
    start = datetime(2026, 6, 1, 12, tzinfo=UTC)
    clock = ManualClock(10.0, wall=start)
    sched = InlineScheduler(clock)
    handle = sched.schedule_at_fixed_rate(lambda: None, 5)
    assert handle.next_run_at == start
    sched.run_until(16)
    assert [r.scheduled_at for r in handle.runs] == [start, start + timedelta(seconds=5)]
    assert handle.next_run_at == start + timedelta(seconds=10)
    at = sched.schedule_at(lambda: None, start + timedelta(seconds=60))  # read from the clock's wall time
    assert at.next_run == 16.0 + 60 - 6


def test_manual_clock_wall() -> None:
    clock = ManualClock(5.0, wall=datetime(2026, 1, 1, 1, tzinfo=timezone(timedelta(hours=1))))
    assert clock.wall_now() == datetime(2026, 1, 1, tzinfo=UTC) and clock.wall_now().tzinfo is UTC
    clock.advance(2)
    assert clock.wall_now() == datetime(2026, 1, 1, 0, 0, 2, tzinfo=UTC) and clock.now() == 7.0
    clock.set_wall(datetime(2030, 1, 1, tzinfo=UTC))
    assert clock.now() == 7.0 and clock.wall_now() == datetime(2030, 1, 1, tzinfo=UTC)
    assert abs(ManualClock().wall_now() - datetime.now(UTC)) < timedelta(seconds=5)
    with pytest.raises(ValueError, match="wall"):
        ManualClock(wall=datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="when"):
        clock.set_wall(datetime(2026, 1, 1))


# -- bad input ------------------------------------------------------------------------


BAD_CRON = [
    ("60 * * * *", ValueError, "60 \\* \\* \\* \\*"),
    ("* 24 * * *", ValueError, "24"),
    ("* * 32 * *", ValueError, "32"),
    ("* * * 13 *", ValueError, "13"),
    ("* * * * 8", ValueError, "8"),
    ("* * * *", ValueError, "expr"),
    ("1 2 3 4 5 6 7", ValueError, "expr"),
    ("@sometimes", ValueError, "@sometimes"),
    ("", ValueError, "expr"),
    ("0 0 31 2 *", ValueError, "31 2"),
    ("a b c d e", ValueError, "a b c d e"),
    (5, TypeError, "expr"),
]


@pytest.mark.parametrize(("expr", "error", "match"), BAD_CRON)
def test_bad_cron_expressions(sched: InlineScheduler, expr: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        sched.schedule_cron(lambda: None, expr)  # type: ignore[arg-type]
    assert sched.pending() == 0


@pytest.mark.parametrize("tz", ["Mars/Olympus_Mons", "", "../../etc/passwd", 3])
def test_bad_zones(sched: InlineScheduler, tz: object) -> None:
    with pytest.raises((ValueError, TypeError), match="tz"):
        sched.schedule_cron(lambda: None, "0 * * * *", tz=tz)  # type: ignore[arg-type]
    assert sched.pending() == 0


BAD_RETRY = [
    (dict(attempts=0), ValueError, "attempts"),
    (dict(attempts=1.5), TypeError, "attempts"),
    (dict(attempts=True), TypeError, "attempts"),
    (dict(delay=-1), ValueError, "delay"),
    (dict(delay=math.nan), ValueError, "delay"),
    (dict(max_delay=-0.5), ValueError, "max_delay"),
    (dict(backoff=0.5), ValueError, "backoff"),
    (dict(backoff=math.nan), ValueError, "backoff"),
    (dict(jitter=-0.1), ValueError, "jitter"),
    (dict(jitter=2), ValueError, "jitter"),
    (dict(on=("error", "ok")), ValueError, "'ok'"),
    (dict(on=("boom",)), ValueError, "'boom'"),
    (dict(on=(42,)), TypeError, "42"),
    (dict(on=(int,)), TypeError, "int"),
    (dict(on=5), TypeError, "on"),
]


@pytest.mark.parametrize(("kwargs", "error", "match"), BAD_RETRY)
def test_bad_retry(kwargs: dict, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        Retry(**kwargs)


def test_bad_options(sched: InlineScheduler, clock: ManualClock) -> None:
    cases = [
        (dict(until=datetime(2030, 1, 1)), ValueError, "until"),  # naive
        (dict(until=-5), ValueError, "until"),
        (dict(until=clock.wall_now() - timedelta(seconds=1)), ValueError, "until"),
        (dict(until="soon"), TypeError, "until"),
        (dict(max_runs=0), ValueError, "max_runs"),
        (dict(max_runs=2.0), TypeError, "max_runs"),
        (dict(max_runs=True), TypeError, "max_runs"),
        (dict(key=""), ValueError, "key"),
        (dict(key=5), TypeError, "key"),
        (dict(retry=3), TypeError, "retry"),
        (dict(replace_existing="yes"), TypeError, "replace_existing"),
        (dict(initial_delay=20, until=10), ValueError, "until"),  # no run before until
    ]
    for kwargs, error, match in cases:
        with pytest.raises(error, match=match):
            sched.schedule_at_fixed_rate(lambda: None, 5, **kwargs)
    with pytest.raises(ValueError, match="until"):
        sched.schedule_cron(lambda: None, "0 0 1 1 *", until=60)
    with pytest.raises(ValueError, match="misfire"):
        sched.schedule_cron(lambda: None, "0 0 1 1 *", misfire="later")
    assert sched.pending() == 0 and sched.jobs() == []


def test_shutdown_cancels_a_paused_one_shot(sched: InlineScheduler) -> None:
    handle = sched.schedule(lambda: 1, 5)
    other = sched.schedule(lambda: 2, 5)
    assert handle.pause()
    sched.shutdown(wait=True)
    assert handle.cancelled() and other.result() == 2 and sched.pending() == 0
