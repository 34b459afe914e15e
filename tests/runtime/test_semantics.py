"""Scheduling semantics on real time, on both runners (processes and threads)."""

from __future__ import annotations

import concurrent.futures
import random
import threading

import pytest
import rt_tasks as t
from rt_helpers import Waiter, release

import procsched

pytestmark = pytest.mark.timeout(60)
#: Seconds: generous - real time on a loaded 2-core machine (the suite runs
#: beside itself: 80 ms was seen missed), and Ray adds its own latency to each
#: run (a Ray task's scheduling, sometimes a Ray worker to start first). Still
#: under the 200 ms steps the timelines tell apart; precision is the
#: benchmarks' (benchmarks/scenarios/fixed_rate.py), not these tests'.
TOLERANCE = TOLERANCE_RAY = 0.15


def _warm_up(s):
    """Wait until both workers have run something: startup is not what is measured."""
    import concurrent.futures

    concurrent.futures.wait([s.submit(t.sleep_for, 0.05) for _ in range(2)], timeout=30)


def _ms_from(handle, origin):
    return [round((r.started_at - origin) * 1000) for r in handle.runs]


@pytest.mark.slow
def test_fixed_rate_catches_up_after_overrun(runner, make_scheduler):
    # DESIGN.md: 400 ms period, first run at 200 ms taking 1 s -> 200, ~1200, ~1200, 1400, 1800.
    s = make_scheduler(2, runner=runner)
    waiter = Waiter(s)
    _warm_up(s)
    h = s.schedule_at_fixed_rate(t.first_run_slow, 0.4, initial_delay=0.2, args=(1.0,))
    origin = h.next_run - 0.2
    waiter.until(lambda: len(h.runs) >= 5, timeout=10)
    h.cancel()
    starts = [r.started_at - origin for r in h.runs[:5]]
    for got, want in zip(starts, [0.2, 1.2, 1.2, 1.4, 1.8]):
        assert got == pytest.approx(want, abs=TOLERANCE_RAY if runner == "ray" else TOLERANCE), _ms_from(h, origin)
    assert [r.scheduled_for - origin for r in h.runs[:5]] == pytest.approx([0.2, 0.6, 1.0, 1.4, 1.8], abs=1e-6)


@pytest.mark.slow
def test_fixed_delay_never_catches_up(runner, make_scheduler):
    # Same experiment with fixed delay: 200, ~1600, ~2000.
    s = make_scheduler(2, runner=runner)
    waiter = Waiter(s)
    _warm_up(s)
    h = s.schedule_with_fixed_delay(t.first_run_slow, 0.4, initial_delay=0.2, args=(1.0,))
    origin = h.next_run - 0.2
    waiter.until(lambda: len(h.runs) >= 3, timeout=10)
    h.cancel()
    starts = [r.started_at - origin for r in h.runs[:3]]
    for got, want in zip(starts, [0.2, 1.6, 2.0]):
        assert got == pytest.approx(want, abs=TOLERANCE_RAY if runner == "ray" else TOLERANCE), _ms_from(h, origin)


def test_priorities_when_all_workers_are_busy(runner, make_scheduler, fifo):
    s = make_scheduler(1, runner=runner)
    waiter = Waiter(s)
    blocker = s.submit(t.wait_for_fifo, fifo)
    waiter.until(lambda: blocker.state is procsched.TaskState.RUNNING)
    handles = [s.schedule(t.pid, priority=p, name=str(p)) for p in (0, -10, 10, 5, 10, -3)]
    release(fifo)
    concurrent.futures.wait(handles, timeout=30)
    order = sorted(handles, key=lambda h: h.runs[0].started_at)
    assert [h.name for h in order] == ["10", "10", "5", "0", "-3", "-10"]
    assert order[0].id < order[1].id  # equal priority: submission order


def test_run_or_cancel_is_exact_under_concurrent_cancels(runner, make_scheduler, tmp_path):
    s = make_scheduler(2, runner=runner)
    marks = str(tmp_path / "marks")
    rng = random.Random(7)
    handles = [s.schedule(t.append_line, rng.uniform(0, 0.3), args=(marks, i)) for i in range(300)]
    results: list[list[bool]] = [[] for _ in range(4)]

    def canceller(k):
        for h in handles[k::4]:
            results[k].append(h.cancel())

    threads = [threading.Thread(target=canceller, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    concurrent.futures.wait(handles, timeout=30)
    ran = open(marks).read().split() if (tmp_path / "marks").exists() else []
    for i, h in enumerate(handles):
        accepted = results[i % 4][i // 4]
        assert h.done()
        if accepted:
            assert h.cancelled() and h.state is procsched.TaskState.CANCELLED and h.runs == []
            assert str(i) not in ran
        else:
            assert h.result() == i and ran.count(str(i)) == 1 and len(h.runs) == 1
    assert len(ran) == len(set(ran))


def test_periodic_task_never_overlaps_itself(runner, make_scheduler):
    s = make_scheduler(2, runner=runner)
    waiter = Waiter(s)
    h = s.schedule_at_fixed_rate(t.sleep_for, 0.01, args=(0.03,))
    waiter.until(lambda: len(h.runs) >= 8, timeout=20)
    h.cancel()
    runs = h.runs
    for a, b in zip(runs, runs[1:]):
        assert b.started_at >= a.finished_at
        assert b.run == a.run + 1


def test_cancel_rules(runner, make_scheduler, fifo):
    s = make_scheduler(2, runner=runner)
    waiter = Waiter(s)
    later = s.schedule(t.pid, 60)
    assert s.cancel(later.id) is True and later.cancelled()
    assert s.cancel(later.id) is False  # already cancelled
    assert s.cancel(10**9) is False  # unknown
    running = s.submit(t.wait_for_fifo, fifo)
    waiter.until(lambda: running.state is procsched.TaskState.RUNNING)
    assert running.cancel() is False  # a running one-shot is left alone
    release(fifo, "done")
    assert running.result(30) == "done"
    assert s.cancel(running.id) is False  # finished
    periodic = s.schedule_at_fixed_rate(t.sleep_for, 0.05, args=(0.2,))
    waiter.until(lambda: periodic.state is procsched.TaskState.RUNNING)
    assert periodic.cancel() is True and periodic.cancelled()
    waiter.until(lambda: len(periodic.runs) == 1)  # its current run finishes
    assert periodic.runs[0].outcome == "ok"


def test_cancel_with_interrupt_stops_a_running_one_shot(runner, make_scheduler):
    s = make_scheduler(2, runner=runner)
    waiter = Waiter(s)
    h = s.submit(t.hang)
    waiter.until(lambda: h.state is procsched.TaskState.RUNNING)
    assert h.cancel(interrupt=True) is True
    assert h.cancelled()
    waiter.until(lambda: len(h.runs) == 1)
    assert h.runs[0].outcome == "cancelled"
    assert s.submit(t.square, 3).result(30) == 9  # the pool carries on


def test_periodic_task_keeps_its_schedule_after_errors(runner, make_scheduler):
    s = make_scheduler(2, runner=runner)
    waiter = Waiter(s)
    h = s.schedule_at_fixed_rate(t.raise_value_error, 0.02, args=("again",))
    waiter.until(lambda: len(h.runs) >= 3)
    assert h.state is not procsched.TaskState.FAILED
    h.cancel()
    stop = s.schedule_at_fixed_rate(t.raise_value_error, 0.02, args=("stop",), stop_on_error=True)
    with pytest.raises(ValueError, match="stop"):
        stop.result(30)
    assert stop.state is procsched.TaskState.FAILED and len(stop.runs) == 1


def test_follow_up_and_self_cancel_from_inside_a_task(runner, make_scheduler):
    s = make_scheduler(2, runner=runner)
    waiter = Waiter(s)
    follow_up_id = s.submit(t.schedule_follow_up, 6).result(30)
    follow_up = s.handle(follow_up_id)
    if follow_up is not None:  # may have finished already
        assert follow_up.result(30) == 36
    periodic = s.schedule_at_fixed_rate(t.cancel_self, 0.01)
    with pytest.raises(concurrent.futures.CancelledError):
        periodic.result(30)
    waiter.until(lambda: len(periodic.runs) == 1)
    one_shot = s.submit(t.cancel_self)
    assert one_shot.result(30) is False  # a running one-shot cannot cancel itself


def test_futures_api(runner, make_scheduler):
    import asyncio

    s = make_scheduler(2, runner=runner)
    handles = [s.submit(t.square, i) for i in range(10)]
    assert sorted(h.result() for h in concurrent.futures.as_completed(handles, timeout=30)) == [
        i * i for i in range(10)
    ]
    assert list(s.map(t.square, range(5), timeout=30)) == [0, 1, 4, 9, 16]

    async def main():
        return await asyncio.wrap_future(s.submit(t.square, 12))

    assert asyncio.run(main()) == 144


def test_calls_after_shutdown_raise(runner, make_scheduler):
    s = make_scheduler(1, runner=runner)
    h = s.schedule(t.square, 0.05, args=(4,))
    s.shutdown(wait=True)
    assert h.result(0) == 16  # one-shot tasks still run
    with pytest.raises(procsched.SchedulerError) as info:
        s.submit(t.square, 1)
    assert isinstance(info.value, RuntimeError)


def test_shutdown_cancels_periodic_and_with_cancel_futures_pending(runner, make_scheduler):
    s = make_scheduler(1, runner=runner)
    periodic = s.schedule_at_fixed_rate(t.pid, 10)
    far = s.schedule(t.pid, 3600)
    s.shutdown(wait=True, cancel_futures=True)
    assert periodic.cancelled() and far.cancelled()
    assert s.pending() == 0


def test_shutdown_lets_runs_in_flight_finish(runner, make_scheduler, fifo):
    s = make_scheduler(2, runner=runner)
    waiter = Waiter(s)
    running = s.submit(t.wait_for_fifo, fifo)
    waiter.until(lambda: running.state is procsched.TaskState.RUNNING)
    periodic = s.schedule_at_fixed_rate(t.pid, 3600, initial_delay=3600)
    s.shutdown(wait=False)
    waiter.until(periodic.cancelled)
    with pytest.raises(procsched.SchedulerError):
        s.submit(t.square, 2)
    release(fifo, "finished")
    assert running.result(30) == "finished" and running.runs[0].outcome == "ok"
    s.shutdown(wait=True)
    assert s.pending() == 0
