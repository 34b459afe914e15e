"""TaskHandle: a concurrent.futures.Future with task details."""

from __future__ import annotations

import concurrent.futures

import pytest

import procsched
from procsched import TaskState


class Boom(Exception):
    pass


def fail() -> None:
    raise Boom("no")


def test_handle_is_a_future(sched: procsched.InlineScheduler) -> None:
    handle = sched.schedule(lambda: 7, 1, name="seven")
    assert isinstance(handle, concurrent.futures.Future)
    assert isinstance(handle, procsched.TaskHandle)
    assert handle.name == "seven" and isinstance(handle.id, int)
    assert not handle.done() and not handle.cancelled()
    with pytest.raises(concurrent.futures.TimeoutError):
        handle.result(timeout=0)
    sched.run_until(1)
    assert handle.done() and handle.result(timeout=0) == 7 and handle.exception(timeout=0) is None


def test_ids_are_unique(sched: procsched.InlineScheduler) -> None:
    ids = {sched.submit(print).id for _ in range(100)}
    assert len(ids) == 100


def test_failed_handle(sched: procsched.InlineScheduler) -> None:
    handle = sched.submit(fail)
    sched.run_due()
    assert handle.state is TaskState.FAILED
    assert isinstance(handle.exception(timeout=0), Boom)
    with pytest.raises(Boom):
        handle.result(timeout=0)


def test_futures_wait_works_on_handles(sched: procsched.InlineScheduler) -> None:
    ok = sched.schedule(lambda: 1, 1)
    bad = sched.schedule(fail, 1)
    cancelled = sched.schedule(lambda: 3, 1)
    waiting = sched.schedule(lambda: 4, 5)
    periodic = sched.schedule_at_fixed_rate(lambda: None, 1)
    cancelled.cancel()
    done, not_done = concurrent.futures.wait([ok, bad, cancelled, waiting, periodic], timeout=0)
    assert done == {cancelled} and not_done == {ok, bad, waiting, periodic}
    sched.run_until(2)
    done, not_done = concurrent.futures.wait([ok, bad, cancelled, waiting, periodic], timeout=0)
    assert done == {ok, bad, cancelled} and not_done == {waiting, periodic}
    first = concurrent.futures.wait([bad, waiting], timeout=0, return_when=concurrent.futures.FIRST_EXCEPTION)
    assert first.done == {bad}
    assert list(concurrent.futures.as_completed([ok, bad, cancelled], timeout=0)) != []


def test_done_callbacks_fire_when_the_task_ends(sched: procsched.InlineScheduler) -> None:
    fired: list[object] = []
    once = sched.schedule(lambda: "v", 1)
    periodic = sched.schedule_at_fixed_rate(lambda: None, 1)
    once.add_done_callback(lambda f: fired.append(("once", f.result())))
    periodic.add_done_callback(lambda f: fired.append(("periodic", f.cancelled())))
    sched.run_until(3)
    assert fired == [("once", "v")]
    periodic.cancel()
    assert fired == [("once", "v"), ("periodic", True)]


def test_runs_newest_last_with_run_info(sched: procsched.InlineScheduler, clock: procsched.ManualClock) -> None:
    def job() -> None:
        clock.advance(0.25)
        if procsched.current_run().run == 2:
            raise Boom("second")

    handle = sched.schedule_at_fixed_rate(job, 1, initial_delay=0.5)
    assert handle.runs == [] and handle.next_run == 0.5
    sched.run_until(3)
    assert [r.run for r in handle.runs] == [1, 2, 3]
    assert [r.outcome for r in handle.runs] == ["ok", "error", "ok"]
    first = handle.runs[0]
    assert first.task_id == handle.id
    assert (first.scheduled_for, first.started_at, first.finished_at) == (0.5, 0.5, 0.75)
    assert isinstance(first.worker, str)
    assert handle.next_run == 3.5
    with pytest.raises(AttributeError):
        first.run = 9  # type: ignore[misc]


def test_next_run(sched: procsched.InlineScheduler, clock: procsched.ManualClock) -> None:
    clock.advance(10)
    once = sched.schedule(lambda: None, 2)
    fixed_delay = sched.schedule_with_fixed_delay(lambda: clock.advance(1), 3, initial_delay=1)
    assert once.next_run == 12.0 and fixed_delay.next_run == 11.0
    sched.run_until(11)
    assert fixed_delay.next_run == 15.0  # finished at 12, + 3
    sched.run_until(12.5)
    assert once.next_run is None and once.state is TaskState.DONE
    fixed_delay.cancel()
    assert fixed_delay.next_run is None


def test_state_and_repr(sched: procsched.InlineScheduler) -> None:
    handle = sched.schedule(lambda: None, 1, name="job")
    assert handle.state is TaskState.PENDING
    assert "state=PENDING" in repr(handle) and "job" in repr(handle)
    sched.run_until(1)
    assert handle.state is TaskState.DONE and "state=DONE" in repr(handle)


def test_submit_is_schedule_now(sched: procsched.InlineScheduler) -> None:
    handle = sched.submit(lambda a, b=0: a + b, 1, b=2)
    assert handle.next_run == 0.0
    sched.run_due()
    assert handle.result(timeout=0) == 3


def test_args_and_kwargs(sched: procsched.InlineScheduler) -> None:
    handle = sched.schedule(lambda *a, **k: (a, k), 0, args=[1, 2], kwargs={"x": 3})
    sched.run_due()
    assert handle.result(timeout=0) == ((1, 2), {"x": 3})


def test_a_handle_cancelled_with_nobody_waiting_is_a_cancelled_future(sched: procsched.InlineScheduler) -> None:
    """Cancelled before anyone waited on it or gave it a callback (a
    shutdown's every pending handle): the handle makes no Condition, and is
    every bit a cancelled Future after."""
    handle = sched.schedule(lambda: 1, 5)
    assert handle.cancel()
    assert "_condition" not in vars(handle)
    assert handle.cancelled() and handle.done() and handle.state is TaskState.CANCELLED and handle.next_run is None
    with pytest.raises(concurrent.futures.CancelledError):
        handle.result(timeout=0)
    with pytest.raises(concurrent.futures.CancelledError):
        handle.exception(timeout=0)
    fired: list[bool] = []
    handle.add_done_callback(lambda f: fired.append(f.cancelled()))
    assert fired == [True]
    assert list(concurrent.futures.as_completed([handle], timeout=0)) == [handle]
    assert not handle.cancel() or handle.cancelled()  # (a second cancel changes nothing)
    assert handle.cancelled()


def test_a_handle_waited_on_is_woken_by_its_cancel(sched: procsched.InlineScheduler) -> None:
    handle = sched.schedule(lambda: 1, 5)
    done, not_done = concurrent.futures.wait([handle], timeout=0)  # (made its Condition and lists)
    assert not done
    fired: list[bool] = []
    handle.add_done_callback(lambda f: fired.append(f.cancelled()))
    assert handle.cancel()
    assert fired == [True] and handle.cancelled()
    assert concurrent.futures.wait([handle], timeout=0).done == {handle}
