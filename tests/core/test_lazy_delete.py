"""Lazy deletion: cancel leaves the heap alone; compaction keeps it bounded."""

from __future__ import annotations

import gc
import weakref

import pytest

import procsched
from procsched._core import Kind, Schedule, SchedulerCore, _scheduler

BOUND = 2 * _scheduler.COMPACT_MIN_DEAD + 2


def heap_size(core: SchedulerCore) -> int:
    return len(core._timers) + len(core._ready)


def dead(core: SchedulerCore) -> int:
    """Dead heap entries (a buried task's entry counts in ``_buried``)."""
    return core._dead + core._buried


def test_cancel_does_not_touch_the_heap() -> None:
    core = SchedulerCore()
    ids = [core.add(i) for i in range(10)]
    timers = list(core._timers)
    core.cancel(ids[0])
    core.cancel(ids[5])
    assert core._timers == timers  # O(1): marked, not removed
    assert dead(core) == 2


@pytest.mark.parametrize("policy", ["priority", "due", "fifo"])
def test_schedule_cancel_pairs_keep_the_heap_bounded(policy: str) -> None:
    core = SchedulerCore(policy)
    live = [core.add(10**12 + i) for i in range(100)]
    peak = 0
    for i in range(200_000):
        core.cancel(core.add(i % 1000))
        peak = max(peak, heap_size(core))
    assert peak <= 2 * len(live) + BOUND
    assert len(core) == len(live)
    # cancelled records stay (buried) only while their dead heap entry does
    assert len(core._tasks) - len(live) == core._buried <= dead(core) <= BOUND
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
    a, b, _c = core.add(1, payload="a"), core.add(2, payload="b"), core.add(3, payload="c")
    core.cancel(a)
    core.cancel(b)
    run = core.claim(5)
    assert run is not None and run.payload == "c"
    assert dead(core) == 0 and heap_size(core) == 0


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
    tids = [core.add(0, schedule=Schedule(Kind.FIXED_RATE, 10)) for _ in range(10)]
    for now in range(0, 100_000, 10):
        while (run := core.claim(now)) is not None:
            core.complete(run.task_id, run.run, "ok", now)
    assert heap_size(core) == len(tids)


class Payload:
    pass


def test_cancel_frees_the_payload_at_once_and_the_record_with_its_entry() -> None:
    core = SchedulerCore()
    payload = Payload()
    gone = weakref.ref(payload)
    tid = core.add(10, payload=payload)
    keep = core.add(20)
    del payload
    assert core.cancel(tid).accepted
    gc.collect()
    assert gone() is None  # freed by the cancel, not when its entry goes
    # the record is buried: invisible to every question, kept for its heap entry
    assert core.state(tid) is None and core.kind(tid) is None and core.task_ids() == [keep]
    assert core.next_claim(tid) is None and core.due(tid) is None and len(core) == 1
    assert not core.pause(tid) and not core.resume(tid, 0) and core.complete(tid, 1, "ok", 0) is None
    assert core.cancel(tid) is _scheduler.CancelResult.UNKNOWN
    assert tid in core._tasks and core._buried == 1
    assert core.next_deadline() == 20  # pops the dead entry: the record goes with it
    assert tid not in core._tasks and dead(core) == 0


def test_compaction_frees_the_buried_records() -> None:
    core = SchedulerCore()
    ids = [core.add(i) for i in range(1000)]
    for tid in ids[:-1]:
        core.cancel(tid)
    assert len(core._tasks) < 1000 and core._buried == len(core._tasks) - 1
    assert core._buried <= dead(core) <= BOUND


@pytest.mark.parametrize("policy", ["priority", "due", "fifo"])
def test_a_cancelled_tasks_id_can_be_chosen_again(policy: str) -> None:
    core = SchedulerCore(policy)
    core.add(5, task_id=7, payload="old")
    other = core.add(6, task_id=8)
    assert core.cancel(7).accepted
    core.add(1, task_id=7, payload="new")  # while the old one is still buried
    assert core.task_ids() == [other, 7] and len(core) == 2 and core._buried == 0
    run = core.claim(10)
    assert run is not None and run.task_id == 7 and run.payload == "new"
    assert core.complete(7, 1, "ok", 10) is not None
    run = core.claim(10)  # the old entry of id 7 is dead and skipped
    assert run is not None and run.task_id == 8
    assert core.claim(10) is None and dead(core) == 0
    with pytest.raises(ValueError, match="already in use"):
        core.add(1, task_id=8)


def test_own_ids_skip_the_in_use_check_only_until_an_id_is_chosen() -> None:
    core = SchedulerCore()
    assert [core.add(0), core.add(0)] == [1, 2]
    core.add(0, task_id=4)  # the runner chooses the id the core gives next (this add takes seq 3)
    with pytest.raises(ValueError, match="already in use"):
        core.add(0)  # seq 4: the chosen task holds it
    assert core.add(0) == 5 and len(core) == 4
