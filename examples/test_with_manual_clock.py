"""Testing your own scheduled code: InlineScheduler + ManualClock, in pytest.

The code under test below, ``CacheRefresher``, refreshes a value every 60 s
and, when a refresh fails, retries after 1, 2 and 4 s before giving up until
the next regular refresh. Testing that against real time would take
minutes and be flaky. Instead the tests give it an ``InlineScheduler`` on a
``ManualClock``: nothing runs until the test says ``run_until(t)``, which
moves the clock from due time to due time and runs what is due, in the
test's own thread. Same scheduling API as ``Scheduler``; every test below
takes milliseconds and always gives the same answer.

    python examples/test_with_manual_clock.py      # runs these tests with pytest
    python -m pytest examples/test_with_manual_clock.py
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest

import procsched
from procsched import InlineScheduler, ManualClock, every

# -- the code under test (yours) -----------------------------------------------


class CacheRefresher:
    """Keeps ``value`` fresh: ``fetch()`` every ``period`` seconds; after a
    failure, retries after 1, 2, 4 s, then waits for the next period. A
    failed run still raises, so that monitoring sees it (``run_failed``)."""

    RETRIES = (1, 2, 4)

    def __init__(self, scheduler: Any, fetch: Callable[[], Any], period: float = 60) -> None:
        self.scheduler = scheduler
        self.fetch = fetch
        self.period = period
        self.value: Any = None
        self.errors = 0
        self.handle: procsched.TaskHandle | None = None

    def start(self) -> None:
        self.handle = self.scheduler.schedule_at_fixed_rate(self.refresh, self.period, name="refresh")

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.cancel()

    def refresh(self, attempt: int = 0) -> None:
        try:
            self.value = self.fetch()
        except OSError:
            self.errors += 1
            if attempt < len(self.RETRIES):
                self.scheduler.schedule(self.refresh, self.RETRIES[attempt], args=(attempt + 1,), name="retry")
            raise


# -- the tests -------------------------------------------------------------------


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sched(clock: ManualClock) -> InlineScheduler:
    return InlineScheduler(clock)


def test_refreshes_every_period(sched: InlineScheduler, clock: ManualClock) -> None:
    calls: list[float] = []
    refresher = CacheRefresher(sched, lambda: calls.append(clock.now()) or len(calls))
    refresher.start()
    assert sched.run_until(180) == 4  # at 0, 60, 120 and 180 s
    assert calls == [0, 60, 120, 180]
    assert refresher.value == 4
    assert clock.now() == 180


def test_retries_with_backoff_then_waits_for_the_next_period(sched: InlineScheduler, clock: ManualClock) -> None:
    attempts: list[float] = []

    def always_down() -> None:
        attempts.append(clock.now())
        raise ConnectionError("backend down")

    CacheRefresher(sched, always_down).start()
    sched.run_until(60)
    # 0, then retries 1 s, 2 s and 4 s after each failure; the next period at 60
    assert attempts == [0, 1, 3, 7, 60]


def test_recovers_on_a_retry(sched: InlineScheduler, clock: ManualClock) -> None:
    replies = iter([ConnectionError("blip"), "fresh"])

    def flaky() -> str:
        reply = next(replies)
        if isinstance(reply, Exception):
            raise reply
        return reply

    refresher = CacheRefresher(sched, flaky)
    refresher.start()
    sched.run_until(1)
    assert (refresher.value, refresher.errors) == ("fresh", 1)


def test_stop_cancels_the_schedule(sched: InlineScheduler) -> None:
    refresher = CacheRefresher(sched, lambda: "v")
    refresher.start()
    sched.run_until(60)
    refresher.stop()
    assert refresher.handle is not None and refresher.handle.cancelled()
    assert sched.run_until(600) == 0
    assert sched.pending() == 0


def test_events_tell_the_story(sched: InlineScheduler) -> None:
    """Listeners work inline too: here they record the run outcomes by name."""
    seen: list[tuple[str, str, float]] = []
    sched.add_listener(lambda e: seen.append((e["event"], e["name"], e["started_at"])),
                       events=("run_finished", "run_failed"))  # fmt: skip
    down = iter([True, False])

    def fetch() -> str:
        if next(down):
            raise ConnectionError("down")
        return "ok"

    CacheRefresher(sched, fetch).start()
    sched.run_until(1)
    assert seen == [("run_failed", "refresh", 0.0), ("run_finished", "retry", 1.0)]


def test_decorated_jobs_on_an_inline_scheduler(sched: InlineScheduler, clock: ManualClock) -> None:
    """``@every(..., scheduler=s)`` schedules at once; the function stays a function."""
    ticks: list[float] = []

    @every(10, initial_delay=5, scheduler=sched)
    def tick() -> None:
        ticks.append(clock.now())

    sched.run_until(30)
    assert ticks == [5, 15, 25]
    tick()  # still an ordinary function
    assert ticks == [5, 15, 25, 30]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
