"""Issue 14.9: ``async def`` tasks run to completion in the worker, on every
runner; timeouts and cancel(interrupt=True) stop them; current_run() works
inside; the decorators accept them."""

from __future__ import annotations

import asyncio
import os
import pickle
import threading

import cloudpickle
import pytest

import procsched
from procsched import InlineScheduler, ManualClock, TaskTimeoutError, every, once
from procsched._async import AsyncCall, as_sync

pytestmark = pytest.mark.timeout(60)


async def add(a: int, b: int = 0) -> tuple[int, int, int]:
    await asyncio.sleep(0.01)
    return a + b, os.getpid(), procsched.current_run().run


async def gather_three() -> list[int]:
    async def one(i: int) -> int:
        await asyncio.sleep(0.01 * i)
        return i

    return list(await asyncio.gather(one(1), one(2), one(3)))


async def hang(path: str) -> None:
    with open(path, "w") as f:  # a FIFO: the test reads the pid, so it knows the run is on
        f.write(str(os.getpid()))
    await asyncio.sleep(3600)


async def fail() -> None:
    await asyncio.sleep(0)
    raise LookupError("async failure")


class Callable_:
    async def __call__(self, x: int) -> int:
        return x * 2


def test_as_sync_wraps_coroutine_functions_only() -> None:
    assert as_sync(len) is len
    wrapped = as_sync(add)
    assert isinstance(wrapped, AsyncCall) and as_sync(wrapped) is wrapped
    assert wrapped.__name__ == "add" and wrapped.__module__ == __name__
    assert isinstance(as_sync(Callable_()), AsyncCall)
    again = pickle.loads(cloudpickle.dumps(wrapped))
    assert again == wrapped and again.fn is add


def test_inline_runs_the_coroutine_with_current_run() -> None:
    sched = InlineScheduler(ManualClock())
    handle = sched.schedule(add, 1, args=(2,), kwargs={"b": 3})
    rate = sched.schedule_at_fixed_rate(gather_three, 1)
    sched.run_until(2)
    assert handle.result()[0] == 5 and handle.result()[2] == 1
    assert [r.outcome for r in rate.runs] == ["ok"] * 3
    failing = sched.schedule(fail)
    sched.run_due()
    with pytest.raises(LookupError, match="async failure"):
        failing.result()


def test_inline_inside_a_running_loop() -> None:
    async def main() -> int:
        sched = InlineScheduler(ManualClock())
        handle = sched.submit(add, 20, b=1)
        sched.run_due()
        return handle.result()[0]

    assert asyncio.run(main()) == 21


def test_decorators_accept_async_functions() -> None:
    sched = InlineScheduler(ManualClock())
    every(1, scheduler=sched, name="ticks")(gather_three)
    once(delay=0.5, scheduler=sched)(Callable_())  # no args: fails, but is accepted and named
    assert sched.run_until(2) == 4


@pytest.mark.parametrize("runner", ["processes", "threads"])
def test_runs_to_completion_in_the_worker(runner: str) -> None:
    with procsched.Scheduler(2, runner=runner) as sched:
        value, pid, run = sched.submit(add, 40, b=2).result(30)
        assert value == 42 and run == 1
        assert (pid != os.getpid()) == (runner == "processes")
        assert sched.submit(gather_three).result(30) == [1, 2, 3]
        assert sched.submit(Callable_(), 21).result(30) == 42
        three = threading.Event()
        sched.add_listener(lambda e: e["run"] >= 3 and three.set(), events="run_finished")
        rate = sched.schedule_at_fixed_rate(add, 0.05, args=(1,))
        assert three.wait(30)
        rate.cancel()
        assert [r.outcome for r in rate.runs[:3]] == ["ok"] * 3
        with pytest.raises(LookupError, match="async failure"):
            sched.submit(fail).result(30)


async def hang_quietly(path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(os.getpid()))
    os.replace(tmp, path)
    await asyncio.sleep(3600)


@pytest.mark.parametrize("runner", ["processes", "threads"])
def test_timeout_stops_an_async_task(runner: str, tmp_path) -> None:
    marker = tmp_path / "pid"
    with procsched.Scheduler(1, runner=runner) as sched:
        handle = sched.schedule(hang_quietly, args=(str(marker),), timeout=1.0)
        with pytest.raises(TaskTimeoutError):
            handle.result(30)
        assert handle.runs[0].outcome == "timeout"
        assert sched.submit(add, 1).result(30)[0] == 1  # the pool goes on
    if runner == "processes" and marker.exists():  # (under heavy load the run may be killed before it writes)
        assert not _alive(int(marker.read_text()))  # its worker was killed


def test_cancel_with_interrupt_kills_the_worker(tmp_path) -> None:
    fifo = tmp_path / "pid"
    os.mkfifo(fifo)
    with procsched.Scheduler(1) as sched:
        handle = sched.schedule(hang, args=(str(fifo),))
        pid = int(fifo.read_text())  # the coroutine is running
        assert handle.cancel(interrupt=True)
        assert handle.cancelled()
        assert sched.submit(add, 2).result(30)[0] == 2
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_threads_are_left_clean() -> None:
    before = threading.active_count()
    sched = InlineScheduler(ManualClock())
    sched.submit(add, 1)
    sched.run_due()
    assert threading.active_count() == before
