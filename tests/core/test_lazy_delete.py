"""Lazy deletion: cancel leaves the heap alone; compaction keeps it bounded."""

from __future__ import annotations

import pytest

import procsched
from procsched._core import Kind, SchedulerCore, _scheduler

BOUND = 2 * _scheduler.COMPACT_MIN_DEAD + 2


def heap_size(core: SchedulerCore) -> int:
    return len(core._timers) + len(core._ready)


def test_cancel_does_not_touch_the_heap() -> None:
    core = SchedulerCore()
    ids = [core.add(i) for i in range(10)]
    timers = list(core._timers)
    core.cancel(ids[0])
    core.cancel(ids[5])
    assert core._timers == timers  # O(1): marked, not removed
    assert core._dead == 2


@pytest.mark.parametrize("policy", ["priority", "due", "fifo"])
def test_schedule_cancel_pairs_keep_the_heap_bounded(policy: str) -> None:
    core = SchedulerCore(policy)
    live = [core.add(10**12 + i) for i in range(100)]
    peak = 0
    for i in range(200_000):
        core.cancel(core.add(i % 1000))
        peak = max(peak, heap_size(core))
    assert peak <= 2 * len(live) + BOUND
    assert len(core) == len(live) and len(core._tasks) == len(live)
    assert core.next_deadline() == 10**12


def test_dead_entries_in_the_ready_heap_are_compacted_too() -> None:
    core = SchedulerCore("priority")
    ids = [core.add(0, i % 3) for i in range(10_000)]
    first = core.claim(0)  # moves every due task into the ready heap
    assert first is not None and len(core._ready) == 9_999 and not core._timers
    for tid in ids:
        core.cancel(tid)
    assert heap_size(core) <= BOUND
    assert core.claim(0) is None and len(core) == 1  # only the running one is left


def test_stale_heads_are_skipped_and_counted() -> None:
    core = SchedulerCore()
    a, b, c = core.add(1, payload="a"), core.add(2, payload="b"), core.add(3, payload="c")
    core.cancel(a)
    core.cancel(b)
    run = core.claim(5)
    assert run is not None and run.payload == "c"
    assert core._dead == 0 and heap_size(core) == 0


def test_compaction_keeps_the_live_tasks_and_their_order() -> None:
    core = SchedulerCore("priority")
    ids = [core.add(i % 50, i % 4, payload=i) for i in range(1000)]
    keep = set(range(0, 1000, 3))
    for i, tid in enumerate(ids):
        if i not in keep:
            core.cancel(tid)
    assert heap_size(core) < 1000  # compacted at least once
    order = []
    while (run := core.claim(100)) is not None:
        order.append(run.payload)
    assert order == sorted(keep, key=lambda i: (-(i % 4), i % 50, i))


def test_inline_scheduler_memory_stays_flat_under_schedule_cancel(sched: procsched.InlineScheduler) -> None:
    for _ in range(20_000):
        sched.schedule(print, 1).cancel()
    assert sched.pending() == 0
    assert heap_size(sched._core) <= BOUND and not sched._handles


def test_periodic_requeue_does_not_leak_entries() -> None:
    core = SchedulerCore()
    tids = [core.add(0, kind=Kind.FIXED_RATE, period_ns=10) for _ in range(10)]
    for now in range(0, 100_000, 10):
        while (run := core.claim(now)) is not None:
            core.complete(run.task_id, run.run, "ok", now)
    assert heap_size(core) == len(tids)
