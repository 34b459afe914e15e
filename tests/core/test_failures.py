"""A task that raises: the scheduler goes on; one-shot FAILED; periodic keeps going."""

from __future__ import annotations

import concurrent.futures

import pytest

import procsched
from procsched import TaskState


class Boom(Exception):
    pass


def boom() -> None:
    raise Boom("boom")


def test_one_shot_failure_does_not_stop_the_scheduler(sched: procsched.InlineScheduler) -> None:
    bad = sched.submit(boom)
    good = sched.submit(lambda: "fine")
    assert sched.run_due() == 2
    assert bad.state is TaskState.FAILED and bad.done() and not bad.cancelled()
    assert isinstance(bad.exception(timeout=0), Boom)
    with pytest.raises(Boom, match="boom"):
        bad.result(timeout=0)
    assert [r.outcome for r in bad.runs] == ["error"]
    assert good.result(timeout=0) == "fine"
    assert sched.pending() == 0


@pytest.mark.parametrize("method", ["schedule_at_fixed_rate", "schedule_with_fixed_delay"])
def test_periodic_keeps_its_schedule_after_an_error_by_default(sched: procsched.InlineScheduler, method: str) -> None:
    def flaky() -> None:
        if procsched.current_run().run % 2:
            raise Boom("odd run")

    handle = getattr(sched, method)(flaky, 1)
    assert sched.run_until(5.5) == 6
    assert [r.outcome for r in handle.runs] == ["error", "ok"] * 3
    assert [r.started_at for r in handle.runs] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert handle.state is TaskState.PENDING and not handle.done()
    assert handle.next_run == 6.0 and sched.pending() == 1


@pytest.mark.parametrize("method", ["schedule_at_fixed_rate", "schedule_with_fixed_delay"])
def test_stop_on_error_stops_a_periodic_task(sched: procsched.InlineScheduler, method: str) -> None:
    def fails_third() -> None:
        if procsched.current_run().run == 3:
            raise Boom("third")

    handle = getattr(sched, method)(fails_third, 1, stop_on_error=True)
    assert sched.run_until(10) == 3
    assert [r.outcome for r in handle.runs] == ["ok", "ok", "error"]
    assert handle.state is TaskState.FAILED and handle.next_run is None
    with pytest.raises(Boom, match="third"):
        handle.result(timeout=0)
    assert sched.pending() == 0


def test_periodic_result_waits_for_the_end(sched: procsched.InlineScheduler) -> None:
    handle = sched.schedule_at_fixed_rate(lambda: 42, 1)
    sched.run_until(3)
    with pytest.raises(concurrent.futures.TimeoutError):
        handle.result(timeout=0)
    handle.cancel()
    with pytest.raises(concurrent.futures.CancelledError):
        handle.result(timeout=0)


def test_timeout_outcome_on_the_inline_scheduler(
    sched: procsched.InlineScheduler, clock: procsched.ManualClock
) -> None:
    slow = sched.schedule(lambda: clock.advance(2), timeout=1)
    quick = sched.schedule(lambda: clock.advance(1), timeout=1)  # exactly at the limit: ok
    sched.run_due()
    assert [r.outcome for r in slow.runs] == ["timeout"]
    assert slow.state is TaskState.FAILED
    err = slow.exception(timeout=0)
    assert isinstance(err, procsched.TaskTimeoutError) and isinstance(err, TimeoutError)
    assert isinstance(err, procsched.SchedulerError)
    assert quick.state is TaskState.DONE


def test_base_exception_is_recorded_then_passed_on(sched: procsched.InlineScheduler) -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    handle = sched.submit(interrupted)
    after = sched.submit(lambda: "later")
    with pytest.raises(KeyboardInterrupt):
        sched.run_due()
    assert handle.state is TaskState.FAILED and [r.outcome for r in handle.runs] == ["error"]
    assert isinstance(handle.exception(timeout=0), KeyboardInterrupt)
    # the scheduler is intact: the next call runs what is left
    assert sched.run_due() == 1 and after.result(timeout=0) == "later"
