"""The task state machine, one transition at a time (after h11's test_state).

First the transition table itself, then the same transitions stepped through
SchedulerCore, and every illegal step checked to change nothing.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from procsched import TaskState
from procsched._core import CancelResult, Kind, Schedule, SchedulerCore, transition
from procsched._errors import InvalidTransition, SchedulerError

LEGAL = {
    (TaskState.PENDING, "claim"): TaskState.RUNNING,
    (TaskState.PENDING, "cancel"): TaskState.CANCELLED,
    (TaskState.RUNNING, "requeue"): TaskState.PENDING,
    (TaskState.RUNNING, "finish"): TaskState.DONE,
    (TaskState.RUNNING, "fail"): TaskState.FAILED,
    (TaskState.RUNNING, "cancel"): TaskState.CANCELLED,
    (TaskState.PENDING, "pause"): TaskState.PAUSED,
    (TaskState.RUNNING, "pause"): TaskState.PAUSED,
    (TaskState.PAUSED, "resume"): TaskState.PENDING,
    (TaskState.PAUSED, "cancel"): TaskState.CANCELLED,
}
EVENTS = ("claim", "requeue", "finish", "fail", "cancel", "pause", "resume")
ILLEGAL = [pair for pair in itertools.product(TaskState, EVENTS) if pair not in LEGAL]
TERMINAL = (TaskState.DONE, TaskState.FAILED, TaskState.CANCELLED)


# -- the table ----------------------------------------------------------------


@pytest.mark.parametrize(("state", "event"), list(LEGAL), ids=lambda x: getattr(x, "name", x))
def test_legal_transition(state: TaskState, event: str) -> None:
    assert transition(state, event) is LEGAL[state, event]  # type: ignore[arg-type]


@pytest.mark.parametrize(("state", "event"), ILLEGAL, ids=lambda x: getattr(x, "name", x))
def test_illegal_transition_raises_and_leaves_state(state: TaskState, event: str) -> None:
    current = state
    with pytest.raises(InvalidTransition) as info:
        current = transition(current, event)  # type: ignore[arg-type]
    assert current is state
    assert state.name in str(info.value) and event in str(info.value)
    assert isinstance(info.value, SchedulerError)


@pytest.mark.parametrize("state", TERMINAL, ids=lambda s: s.name)
def test_terminal_states_have_no_exits(state: TaskState) -> None:
    assert state.terminal
    for event in EVENTS:
        with pytest.raises(InvalidTransition):
            transition(state, event)  # type: ignore[arg-type]


def test_only_terminal_states_are_terminal() -> None:
    assert {s for s in TaskState if s.terminal} == set(TERMINAL)
    assert repr(TaskState.PENDING) == "TaskState.PENDING"


# -- stepping the core ------------------------------------------------------------


def snapshot(core: SchedulerCore) -> Any:
    """Everything observable about the core (and its private task records)."""
    return (
        [(tid, core.state(tid), core.kind(tid)) for tid in core.task_ids()],
        len(core),
        core.next_deadline(),
        sorted((tid, t.state, t.runs, t.active, t.due) for tid, t in core._tasks.items()),
        len(core._timers) + len(core._ready),
    )


def test_step_pending_claim_running() -> None:
    core = SchedulerCore()
    tid = core.add(10)
    assert core.state(tid) is TaskState.PENDING
    assert core.claim(9) is None
    run = core.claim(10)
    assert run is not None and (run.task_id, run.run, run.scheduled_ns) == (tid, 1, 10)
    assert core.state(tid) is TaskState.RUNNING
    assert len(core) == 1


def test_step_running_finish_done() -> None:
    core = SchedulerCore()
    tid = core.add(0, payload="p", name="n")
    run = core.claim(0)
    assert run is not None and run.payload == "p" and run.name == "n"
    done = core.complete(tid, 1, "ok", 5)
    assert done is not None
    assert (done.state, done.ended, done.next_due_ns, done.missed) == (TaskState.DONE, True, None, 0)
    assert core.state(tid) is None and len(core) == 0


@pytest.mark.parametrize("outcome", ["error", "crashed", "timeout"])
def test_step_running_fail_failed(outcome: str) -> None:
    core = SchedulerCore()
    tid = core.add(0)
    core.claim(0)
    done = core.complete(tid, 1, outcome, 5)  # type: ignore[arg-type]
    assert done is not None and (done.state, done.ended, done.outcome) == (TaskState.FAILED, True, outcome)
    assert core.state(tid) is None


@pytest.mark.parametrize("kind", [Kind.FIXED_RATE, Kind.FIXED_DELAY])
def test_step_running_requeue_pending(kind: Kind) -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=Schedule(kind, 100))
    core.claim(0)
    done = core.complete(tid, 1, "ok", 30)
    assert done is not None and (done.state, done.ended) == (TaskState.PENDING, False)
    assert done.next_due_ns == (100 if kind is Kind.FIXED_RATE else 130)
    assert core.state(tid) is TaskState.PENDING


@pytest.mark.parametrize("kind", [Kind.FIXED_RATE, Kind.FIXED_DELAY])
def test_step_periodic_stop_on_error_failed(kind: Kind) -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=Schedule(kind, 100, stop_on_error=True))
    core.claim(0)
    done = core.complete(tid, 1, "error", 30)
    assert done is not None and (done.state, done.ended, done.next_due_ns) == (TaskState.FAILED, True, None)
    assert core.state(tid) is None and core.next_deadline() is None


def test_step_pending_cancel_cancelled() -> None:
    core = SchedulerCore()
    tid = core.add(10)
    assert core.cancel(tid) is CancelResult.CANCELLED
    assert core.state(tid) is None and len(core) == 0
    assert core.claim(10**12) is None


def test_step_running_cancel_cancelled() -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=Schedule(Kind.FIXED_RATE, 100))
    core.claim(0)
    assert core.cancel(tid) is CancelResult.STOPPED
    assert core.state(tid) is TaskState.CANCELLED and len(core) == 0
    done = core.complete(tid, 1, "ok", 10)
    assert done is not None and (done.state, done.ended, done.next_due_ns) == (TaskState.CANCELLED, False, None)
    assert core.state(tid) is None and core.claim(10**12) is None


def test_runs_are_numbered_from_one() -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=Schedule(Kind.FIXED_RATE, 10))
    for n in range(1, 6):
        run = core.claim(10**6)
        assert run is not None and run.run == n
        core.complete(tid, n, "ok", 10**6)


# -- illegal steps change nothing --------------------------------------------------


def populated() -> tuple[SchedulerCore, dict[str, int]]:
    """A core with a task in every state that a task id can still name."""
    core = SchedulerCore()
    ids = {
        "pending": core.add(100),
        "running_once": core.add(0),
        "running_rate": core.add(0, schedule=Schedule(Kind.FIXED_RATE, 50)),
        "stopping": core.add(0, schedule=Schedule(Kind.FIXED_DELAY, 50)),
        "done": core.add(0),
        "failed": core.add(0),
        "cancelled": core.add(100),
    }
    runs = {}
    while (run := core.claim(0)) is not None:
        runs[run.task_id] = run
    core.complete(ids["done"], 1, "ok", 0)
    core.complete(ids["failed"], 1, "error", 0)
    core.cancel(ids["cancelled"])
    assert core.cancel(ids["stopping"]) is CancelResult.STOPPED
    assert set(runs) == {ids[k] for k in ("running_once", "running_rate", "stopping", "done", "failed")}
    return core, ids


@pytest.mark.parametrize("who", ["pending", "done", "failed", "cancelled", "unknown"])
@pytest.mark.parametrize("outcome", ["ok", "error", "crashed", "timeout", "cancelled"])
def test_complete_of_a_task_not_running_changes_nothing(who: str, outcome: str) -> None:
    core, ids = populated()
    tid = ids.get(who, 999)
    before = snapshot(core)
    assert core.complete(tid, 1, outcome, 10) is None  # type: ignore[arg-type]
    assert snapshot(core) == before


@pytest.mark.parametrize("who", ["running_once", "running_rate", "stopping"])
@pytest.mark.parametrize("run", [0, 2, -1])
def test_complete_of_a_stale_run_changes_nothing(who: str, run: int) -> None:
    core, ids = populated()
    before = snapshot(core)
    assert core.complete(ids[who], run, "ok", 10) is None
    assert snapshot(core) == before


def test_duplicate_complete_changes_nothing() -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=Schedule(Kind.FIXED_RATE, 50))
    core.claim(0)
    assert core.complete(tid, 1, "ok", 1) is not None
    before = snapshot(core)
    assert core.complete(tid, 1, "ok", 2) is None
    assert snapshot(core) == before


def test_complete_with_unknown_outcome_raises_and_changes_nothing() -> None:
    core, ids = populated()
    before = snapshot(core)
    with pytest.raises(ValueError, match="bogus"):
        core.complete(ids["running_once"], 1, "bogus", 10)  # type: ignore[arg-type]
    assert snapshot(core) == before


@pytest.mark.parametrize("who", ["done", "failed", "cancelled", "stopping", "unknown"])
@pytest.mark.parametrize("interrupt", [False, True])
def test_cancel_without_a_legal_transition_changes_nothing(who: str, interrupt: bool) -> None:
    core, ids = populated()
    before = snapshot(core)
    result = core.cancel(ids.get(who, 999), interrupt)
    assert result is CancelResult.UNKNOWN and not result.accepted
    assert snapshot(core) == before


def test_refused_cancel_changes_nothing() -> None:
    core, ids = populated()
    before = snapshot(core)
    assert core.cancel(ids["running_once"]) is CancelResult.REFUSED
    assert snapshot(core) == before


def test_claim_with_nothing_due_changes_nothing() -> None:
    core, _ = populated()
    before = snapshot(core)
    assert core.claim(99) is None
    assert snapshot(core) == before


def test_duplicate_task_id_is_rejected_and_changes_nothing() -> None:
    core = SchedulerCore()
    core.add(0, task_id=7)
    before = snapshot(core)
    with pytest.raises(ValueError, match="7"):
        core.add(5, task_id=7)
    assert snapshot(core) == before


def test_every_live_task_is_in_exactly_one_state() -> None:
    core, ids = populated()
    states = {who: core.state(tid) for who, tid in ids.items()}
    assert states == {
        "pending": TaskState.PENDING,
        "running_once": TaskState.RUNNING,
        "running_rate": TaskState.RUNNING,
        "stopping": TaskState.CANCELLED,
        "done": None,
        "failed": None,
        "cancelled": None,
    }
    # "Tasks not yet finished or cancelled": the stopping task no longer counts.
    assert len(core) == 3
    assert core.task_ids() == [ids["pending"], ids["running_once"], ids["running_rate"], ids["stopping"]]


def test_task_repr_shows_state() -> None:
    core = SchedulerCore()
    tid = core.add(0)
    assert "PENDING" in repr(core._tasks[tid])
