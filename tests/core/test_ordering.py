"""Heap order: the three policies, FIFO ties, and nothing before it is due."""

from __future__ import annotations

import random

import pytest

import procsched
from procsched import Priority
from procsched._core import Kind, Policy, Schedule, SchedulerCore

POLICIES = ["priority", "due", "fifo"]

# (name, due_ns, priority), submitted in this order.
MIX = [
    ("a", 30, 0),
    ("b", 10, 0),
    ("c", 20, 5),
    ("d", 10, 5),
    ("e", 30, 5),
    ("f", 10, 0),
    ("g", 20, -5),
    ("h", 0, -5),
]
EXPECTED = {
    # highest priority, then earliest due, then submission order
    "priority": ["d", "c", "e", "b", "f", "a", "h", "g"],
    # earliest due, then highest priority, then submission order
    "due": ["h", "d", "b", "f", "c", "g", "e", "a"],
    # earliest due, then submission order
    "fifo": ["h", "b", "d", "f", "c", "g", "a", "e"],
}


def drain(core: SchedulerCore, now: int) -> list[object]:
    order = []
    while (run := core.claim(now)) is not None:
        order.append(run.payload)
        core.complete(run.task_id, run.run, "ok", now)
    return order


@pytest.mark.parametrize("policy", POLICIES)
def test_policy_order_on_the_core(policy: str) -> None:
    core = SchedulerCore(policy)
    for name, due, prio in MIX:
        core.add(due, prio, payload=name)
    assert drain(core, 100) == EXPECTED[policy]


@pytest.mark.parametrize("policy", POLICIES)
def test_policy_order_on_the_inline_scheduler(policy: str) -> None:
    clock = procsched.ManualClock()
    sched = procsched.InlineScheduler(clock, policy=policy)
    order: list[str] = []
    for name, due, prio in MIX:
        sched.schedule(order.append, due / 1e9, args=(name,), priority=prio)
    clock.advance(1)
    assert sched.run_due() == len(MIX)
    assert order == EXPECTED[policy]


def test_policy_accepts_the_enum() -> None:
    assert SchedulerCore(Policy.DUE).policy is Policy.DUE
    assert procsched.InlineScheduler(policy=Policy.FIFO)._core.policy is Policy.FIFO


@pytest.mark.parametrize("policy", POLICIES)
def test_ties_are_fifo(policy: str) -> None:
    core = SchedulerCore(policy)
    ids = [core.add(50, 3, payload=i) for i in range(200)]
    # Cancelling some entries must not disturb the order of the rest (bpo-19270).
    for tid in ids[::7]:
        core.cancel(tid)
    assert drain(core, 50) == [i for i in range(200) if i % 7]


@pytest.mark.parametrize("policy", POLICIES)
def test_ties_are_fifo_across_requeues(policy: str) -> None:
    """Periodic tasks with the same grid keep their submission order on every round."""
    core = SchedulerCore(policy)
    for i in range(5):
        core.add(0, schedule=Schedule(Kind.FIXED_RATE, 10), payload=i)
    for now in range(0, 50, 10):
        assert drain(core, now) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("policy", POLICIES)
def test_nothing_runs_before_it_is_due(policy: str) -> None:
    core = SchedulerCore(policy)
    core.add(100, 99, payload="late-high")
    core.add(50, -99, payload="early-low")
    assert core.claim(49) is None
    assert drain(core, 50) == ["early-low"]
    assert core.claim(99) is None
    assert drain(core, 100) == ["late-high"]


def test_priority_policy_lets_a_newly_due_task_overtake() -> None:
    """Under "priority", what counts is the priority among tasks due *at claim time*."""
    core = SchedulerCore("priority")
    core.add(0, 0, payload="low-1")
    core.add(0, 0, payload="low-2")
    core.add(20, Priority.HIGH, payload="high")
    first = core.claim(10)
    assert first is not None and first.payload == "low-1"
    core.complete(first.task_id, 1, "ok", 20)
    assert drain(core, 20) == ["high", "low-2"]


@pytest.mark.parametrize("policy", ["due", "fifo"])
def test_time_ordered_policies_do_not_let_a_later_task_overtake(policy: str) -> None:
    core = SchedulerCore(policy)
    core.add(0, 0, payload="low-1")
    core.add(0, 0, payload="low-2")
    core.add(20, Priority.HIGH, payload="high")
    assert drain(core, 20) == ["low-1", "low-2", "high"]


def test_named_priorities_are_ordered_and_any_int_is_a_priority() -> None:
    assert Priority.LOW < Priority.NORMAL < Priority.HIGH
    core = SchedulerCore()
    core.add(0, Priority.LOW, payload="low")
    core.add(0, Priority.HIGH + 1, payload="higher")
    core.add(0, Priority.NORMAL, payload="normal")
    core.add(0, Priority.HIGH, payload="high")
    core.add(0, -(2**40), payload="lowest")
    assert drain(core, 0) == ["higher", "high", "normal", "low", "lowest"]


@pytest.mark.parametrize("policy", POLICIES)
def test_next_deadline(policy: str) -> None:
    core = SchedulerCore(policy)
    assert core.next_deadline() is None
    a = core.add(30)
    core.add(20, 5)
    b = core.add(10, -5)
    assert core.next_deadline() == 10
    core.cancel(b)  # a dead head is skipped
    assert core.next_deadline() == 20
    drain(core, 20)
    assert core.next_deadline() == 30
    core.cancel(a)
    assert core.next_deadline() is None


def test_next_deadline_may_lie_in_the_past_while_ready_tasks_wait() -> None:
    core = SchedulerCore("priority")
    core.add(5, 1)
    core.add(7, 2)
    core.add(100)
    first = core.claim(50)  # both due tasks moved to the ready heap; one handed out
    assert first is not None and first.scheduled_ns == 7
    assert core.next_deadline() == 5
    core.cancel(core.claim(50).task_id, interrupt=True)  # type: ignore[union-attr]
    assert core.next_deadline() == 100


def trace(policy: str, seed: int) -> list[tuple[int, int, int]]:
    rng = random.Random(seed)
    core = SchedulerCore(policy)
    out = []
    now = 0
    live: list[int] = []
    for _ in range(2000):
        step = rng.random()
        if step < 0.4:
            kind = rng.choice([Kind.ONCE, Kind.FIXED_RATE, Kind.FIXED_DELAY])  # (a calendar needs a trigger)
            period = rng.randint(1, 50) if kind is not Kind.ONCE else 0
            live.append(core.add(now + rng.randint(0, 100), rng.randint(-2, 2), Schedule(kind, period)))
        elif step < 0.5 and live:
            core.cancel(rng.choice(live))
        else:
            now += rng.randint(0, 20)
            for _ in range(rng.randint(1, 5)):
                run = core.claim(now)
                if run is None:
                    break
                out.append((run.task_id, run.run, run.scheduled_ns))
                core.complete(run.task_id, run.run, rng.choice(["ok", "error"]), now + rng.randint(0, 30))
    return out


@pytest.mark.parametrize("policy", POLICIES)
def test_same_inputs_same_trace(policy: str) -> None:
    first = trace(policy, 1234)
    assert len(first) > 500
    assert trace(policy, 1234) == first
