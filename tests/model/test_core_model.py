"""Model-based tests: the scheduler against a deliberately naive model.

The model is a plain list of task records, scanned in full at every step
(after hypothesis' tests/nocover/test_database_agreement.py). Two machines:

* ``InlineMachine`` drives InlineScheduler + ManualClock through the public
  API with tasks that raise, overrun, cancel themselves or schedule
  follow-ups, and checks the exact run trace (task, run, scheduled ns, start
  ns) against the model.
* ``CoreMachine`` drives SchedulerCore directly as a runner with several
  runs in flight would: claims, completions with every outcome (including
  "crashed" and "timeout"), cancels of running tasks and stale reports.

Both run under each policy. Time is sampled in coarse units so that ties are
common, plus a few odd microseconds so that a drifting grid would show.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import procsched
from procsched import TaskState
from procsched._core import CancelResult, Kind, Misfire, Schedule, SchedulerCore

NS = 1_000_000_000
US = 1_000
UNIT_US = 100_000  # one time unit: 100 ms
POLICIES = ("priority", "due", "fifo")
PENDING, RUNNING, DONE, FAILED, CANCELLED, PAUSED = (
    TaskState.PENDING,
    TaskState.RUNNING,
    TaskState.DONE,
    TaskState.FAILED,
    TaskState.CANCELLED,
    TaskState.PAUSED,
)

# A passing run takes a few seconds; a failing one spends minutes shrinking,
# and should be reported shrunk rather than cut off by the default timeout.
pytestmark = pytest.mark.timeout(900)

SETTINGS = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow],
)

priorities = st.sampled_from([-1, 0, 0, 1, 10])
units = st.integers(0, 12)
# A duration in microseconds: whole units, sometimes plus an odd few microseconds.
durations_us = st.builds(lambda u, extra: u * UNIT_US + extra, st.integers(0, 12), st.sampled_from([0, 0, 1, 37]))
periods_us = st.builds(lambda u, extra: u * UNIT_US + extra, st.integers(1, 6), st.sampled_from([0, 0, 1, 37]))
timeouts_us = st.none() | st.integers(1, 8).map(lambda u: u * UNIT_US)
# How long a "slow" task's first run takes (later runs are instant, so a
# catch-up backlog always drains).
overruns_us = st.builds(lambda u, extra: u * UNIT_US + extra, st.integers(1, 25), st.sampled_from([0, 3]))
behaviours = st.one_of(
    st.just(("ok",)),
    st.just(("raise",)),
    st.tuples(st.just("slow"), overruns_us),
    st.just(("cancel_self",)),
    st.just(("interrupt_self",)),
    st.tuples(st.just("follow_up"), durations_us, priorities),
)
misfires = st.sampled_from(list(Misfire))


def order_key(policy: str, priority: int, due: int, seq: int) -> tuple[int, ...]:
    if policy == "priority":
        return (-priority, due, seq)
    if policy == "due":
        return (due, -priority, seq)
    return (due, seq)


def next_rate_slot(scheduled: int, period: int, misfire: Misfire, outcome: str, finish: int) -> int:
    """Fixed rate, the slow way: walk the grid one point at a time."""
    following = scheduled + period
    if following >= finish:
        return following
    if misfire is Misfire.CATCH_UP and outcome not in ("crashed", "timeout"):
        return following
    k = 1
    if misfire is Misfire.COALESCE:
        while scheduled + (k + 1) * period <= finish:
            k += 1
    else:  # SKIP, or CATCH_UP after a crash or timeout
        while scheduled + k * period < finish:
            k += 1
    return scheduled + k * period


@dataclass
class MTask:
    key: int  # creation order = submission order
    kind: Kind
    priority: int
    due: int
    period: int = 0
    misfire: Misfire = Misfire.CATCH_UP
    stop_on_error: bool = False
    timeout: int | None = None
    behaviour: tuple[Any, ...] = ("ok",)
    state: TaskState = PENDING
    first: int = 0
    runs: int = 0
    outcomes: list[str] = field(default_factory=list)
    runs_at_cancel: int | None = None
    pause_asked: bool = False

    def __post_init__(self) -> None:
        self.first = self.due


# -- InlineScheduler against the model ---------------------------------------------


class InlineMachine(RuleBasedStateMachine):
    policy = "priority"

    @initialize()
    def start(self) -> None:
        self.clock = procsched.ManualClock()
        self.sched = procsched.InlineScheduler(self.clock, policy=self.policy)
        self.model: list[MTask] = []
        self.now = 0
        self.created: list[procsched.TaskHandle] = []  # actual handles, in creation order
        self.actual: list[tuple[int, int, int, int]] = []  # (task id, run, scheduled ns, start ns)
        self.expected: list[tuple[int, int, int, int]] = []  # (key, run, scheduled ns, start ns)
        self.answers: list[bool] = []  # what cancel() said inside tasks
        self.expected_answers: list[bool] = []
        self.order_violations: list[str] = []
        core = self.sched._core
        claim = core.claim

        def spying_claim(now: int) -> Any:
            # Independent of the model: the run handed out must be the policy's
            # first among every task due right now.
            due = [(tid, t) for tid, t in core._tasks.items() if t.state is PENDING and t.due <= now]
            run = claim(now)
            if due:
                best_id, best = min(due, key=lambda e: order_key(self.policy, e[1].priority, e[1].due, e[1].seq))
                if run is None or run.task_id != best_id:
                    self.order_violations.append(f"claimed {run} but {best} was first")
            elif run is not None:
                self.order_violations.append(f"claimed {run} with nothing due")
            if run is not None:
                self.actual.append((run.task_id, run.run, run.scheduled_ns, now))
            return run

        core.claim = spying_claim  # type: ignore[method-assign]

    # -- the actual side -------------------------------------------------------

    def job(self, behaviour: tuple[Any, ...]) -> Any:
        def run() -> str:
            info = procsched.current_run()
            scheduler = procsched.current_scheduler()
            what = behaviour[0]
            if what == "raise":
                raise ValueError(f"task {info.task_id} run {info.run}")
            if what == "slow" and info.run == 1:
                self.clock.advance(timedelta(microseconds=behaviour[1]))
            elif what == "cancel_self":
                self.answers.append(scheduler.cancel(info.task_id))
            elif what == "interrupt_self":
                self.answers.append(scheduler.cancel(info.task_id, interrupt=True))
            elif what == "follow_up":
                child = scheduler.schedule(
                    self.job(("ok",)), timedelta(microseconds=behaviour[1]), priority=behaviour[2]
                )
                self.created.append(child)
            return what

        return run

    # -- the model side -------------------------------------------------------

    def model_add(self, kind: Kind, delay: int, priority: int, **extra: Any) -> MTask:
        task = MTask(len(self.model), kind, priority, self.now + delay, **extra)
        self.model.append(task)
        return task

    def model_run_due(self) -> int:
        count = 0
        while True:
            due = [t for t in self.model if t.state is PENDING and t.due <= self.now]
            if not due:
                return count
            task = min(due, key=lambda t: order_key(self.policy, t.priority, t.due, t.key))
            self.model_run(task)
            count += 1

    def model_run(self, task: MTask) -> None:
        start = self.now
        task.runs += 1
        self.expected.append((task.key, task.runs, task.due, start))
        outcome = "ok"
        what = task.behaviour[0]
        if what == "raise":
            outcome = "error"
        elif what == "slow" and task.runs == 1:
            self.now += task.behaviour[1] * US
        elif what == "cancel_self":
            accepted = task.kind is not Kind.ONCE
            self.expected_answers.append(accepted)
            if accepted:
                task.state, task.runs_at_cancel = CANCELLED, task.runs
        elif what == "interrupt_self":
            self.expected_answers.append(True)
            task.state, task.runs_at_cancel = CANCELLED, task.runs
        elif what == "follow_up":
            self.model_add(Kind.ONCE, task.behaviour[1] * US, task.behaviour[2])
        finish = self.now
        if outcome == "ok" and task.timeout is not None and finish - start > task.timeout:
            outcome = "timeout"
        if what == "interrupt_self":
            outcome = "cancelled"
        task.outcomes.append(outcome)
        if task.state is CANCELLED:
            return
        if task.kind is Kind.ONCE:
            task.state = DONE if outcome == "ok" else FAILED
        elif outcome != "ok" and task.stop_on_error:
            task.state = FAILED
        elif task.kind is Kind.FIXED_DELAY:
            task.due = finish + task.period
        else:
            task.due = next_rate_slot(task.due, task.period, task.misfire, outcome, finish)

    # -- rules ------------------------------------------------------------------

    def added(self, handle: procsched.TaskHandle, task: MTask) -> None:
        self.created.append(handle)
        assert len(self.created) == len(self.model)

    @rule(delay=durations_us, priority=priorities, behaviour=behaviours, timeout=timeouts_us)
    def schedule_once(self, delay: int, priority: int, behaviour: tuple[Any, ...], timeout: int | None) -> None:
        handle = self.sched.schedule(
            self.job(behaviour),
            timedelta(microseconds=delay),
            priority=priority,
            timeout=None if timeout is None else timedelta(microseconds=timeout),
        )
        self.added(
            handle,
            self.model_add(
                Kind.ONCE, delay * US, priority, behaviour=behaviour, timeout=None if timeout is None else timeout * US
            ),
        )

    @rule(
        period=periods_us,
        initial=durations_us,
        misfire=misfires,
        stop=st.booleans(),
        priority=priorities,
        behaviour=behaviours,
        timeout=timeouts_us,
    )
    def schedule_fixed_rate(
        self,
        period: int,
        initial: int,
        misfire: Misfire,
        stop: bool,
        priority: int,
        behaviour: tuple[Any, ...],
        timeout: int | None,
    ) -> None:
        handle = self.sched.schedule_at_fixed_rate(
            self.job(behaviour),
            timedelta(microseconds=period),
            initial_delay=timedelta(microseconds=initial),
            misfire=misfire.value,
            stop_on_error=stop,
            priority=priority,
            timeout=None if timeout is None else timedelta(microseconds=timeout),
        )
        task = self.model_add(
            Kind.FIXED_RATE,
            initial * US,
            priority,
            period=period * US,
            misfire=misfire,
            stop_on_error=stop,
            behaviour=behaviour,
            timeout=None if timeout is None else timeout * US,
        )
        self.added(handle, task)

    @rule(
        delay=periods_us,
        initial=durations_us,
        stop=st.booleans(),
        priority=priorities,
        behaviour=behaviours,
        timeout=timeouts_us,
    )
    def schedule_fixed_delay(
        self, delay: int, initial: int, stop: bool, priority: int, behaviour: tuple[Any, ...], timeout: int | None
    ) -> None:
        handle = self.sched.schedule_with_fixed_delay(
            self.job(behaviour),
            timedelta(microseconds=delay),
            initial_delay=timedelta(microseconds=initial),
            stop_on_error=stop,
            priority=priority,
            timeout=None if timeout is None else timedelta(microseconds=timeout),
        )
        task = self.model_add(
            Kind.FIXED_DELAY,
            initial * US,
            priority,
            period=delay * US,
            stop_on_error=stop,
            behaviour=behaviour,
            timeout=None if timeout is None else timeout * US,
        )
        self.added(handle, task)

    @precondition(lambda self: self.model)
    @rule(data=st.data(), interrupt=st.booleans())
    def cancel(self, data: st.DataObject, interrupt: bool) -> None:
        key = data.draw(st.integers(0, len(self.model) - 1))
        task = self.model[key]
        accepted = self.sched.cancel(self.created[key].id, interrupt=interrupt)
        # Between steps nothing is running: only a PENDING task can be cancelled.
        assert accepted == (task.state is PENDING)
        if accepted:
            task.state, task.runs_at_cancel = CANCELLED, task.runs

    @rule(task_id=st.integers(-5, 10**6))
    def cancel_unknown(self, task_id: int) -> None:
        if task_id not in {h.id for h in self.created}:
            assert self.sched.cancel(task_id) is False

    @rule(step=durations_us)
    def advance(self, step: int) -> None:
        self.clock.advance(timedelta(microseconds=step))
        self.now += step * US

    @rule()
    def run_due(self) -> None:
        assert self.sched.run_due() == self.model_run_due()

    @rule(ahead=durations_us)
    def run_until(self, ahead: int) -> None:
        target = (self.now + ahead * US) / NS
        t_ns = round(target * NS)
        count = self.model_run_due()
        while True:
            dues = [t.due for t in self.model if t.state is PENDING]
            if not dues or min(dues) > t_ns:
                break
            self.now = max(self.now, min(dues))
            count += self.model_run_due()
        self.now = max(self.now, t_ns)
        assert self.sched.run_until(target) == count

    # -- invariants -------------------------------------------------------------

    @invariant()
    def same_trace_as_the_model(self) -> None:
        key_of = {h.id: i for i, h in enumerate(self.created)}
        assert len(self.created) == len(self.model)
        assert [(key_of[tid], run, sched, start) for tid, run, sched, start in self.actual] == self.expected
        assert self.answers == self.expected_answers
        assert self.clock.now_ns() == self.now

    @invariant()
    def policy_order_holds(self) -> None:
        assert not self.order_violations, self.order_violations[0]

    @invariant()
    def nothing_runs_before_it_is_due(self) -> None:
        assert all(start >= scheduled for _, _, scheduled, start in self.actual)
        for handle in self.created:
            assert all(r.started_at >= r.scheduled_for for r in handle.runs)

    @invariant()
    def fixed_rate_runs_land_on_the_grid(self) -> None:
        key_of = {h.id: i for i, h in enumerate(self.created)}
        for tid, _, scheduled, _ in self.actual:
            task = self.model[key_of[tid]]
            if task.kind is Kind.FIXED_RATE:
                assert scheduled >= task.first and (scheduled - task.first) % task.period == 0

    @invariant()
    def nothing_both_runs_and_is_cancelled(self) -> None:
        for task, handle in zip(self.model, self.created):
            if task.state is CANCELLED:
                assert len(handle.runs) == task.runs_at_cancel
                assert sum(1 for tid, *_ in self.actual if tid == handle.id) == task.runs_at_cancel
                assert handle.cancelled()
            else:
                assert not handle.cancelled()

    @invariant()
    def every_task_is_in_exactly_one_state(self) -> None:
        core = self.sched._core
        by_state: dict[TaskState, set[int]] = {s: set() for s in TaskState}
        for task, handle in zip(self.model, self.created):
            assert handle.state is task.state
            by_state[handle.state].add(task.key)
            assert [r.outcome for r in handle.runs] == task.outcomes
            assert handle.done() == task.state.terminal
            assert core.state(handle.id) is (None if task.state.terminal else task.state)
            assert handle.next_run == (task.due / NS if task.state is PENDING else None)
        assert sum(map(len, by_state.values())) == len(self.model)  # disjoint and complete
        assert not by_state[RUNNING]  # nothing runs between steps
        assert self.sched.pending() == len(by_state[PENDING]) == len(core)
        pending_ids = [self.created[k].id for k in sorted(by_state[PENDING])]
        assert core.task_ids() == pending_ids


# -- SchedulerCore as a pool runner drives it -------------------------------------------


@dataclass
class InFlight:
    task_id: int
    run: int
    scheduled: int
    started: int


class CoreMachine(RuleBasedStateMachine):
    policy = "priority"
    WORKERS = 3

    @initialize()
    def start(self) -> None:
        self.core = SchedulerCore(self.policy)
        self.model: dict[int, MTask] = {}  # by task id
        self.order: list[int] = []  # ids in submission order
        self.now = 0
        self.in_flight: list[InFlight] = []
        self.interrupted: set[int] = set()
        self.runs: list[tuple[int, int, int, int]] = []

    def due_now(self) -> list[MTask]:
        return [t for t in self.model.values() if t.state is PENDING and t.due <= self.now]

    @rule(
        kind=st.sampled_from([Kind.ONCE, Kind.FIXED_RATE, Kind.FIXED_DELAY]),
        delay=units,
        priority=priorities,
        period=st.integers(1, 6),
        misfire=misfires,
        stop=st.booleans(),
    )
    def add(self, kind: Kind, delay: int, priority: int, period: int, misfire: Misfire, stop: bool) -> None:
        period_ns = 0 if kind is Kind.ONCE else period * UNIT_US * US + 1
        tid = self.core.add(self.now + delay * UNIT_US * US, priority, Schedule(kind, period_ns, misfire, stop))
        assert tid not in self.model
        self.model[tid] = MTask(tid, kind, priority, self.now + delay * UNIT_US * US, period_ns, misfire, stop)
        self.order.append(tid)

    @rule(step=units)
    def advance(self, step: int) -> None:
        self.now += step * UNIT_US * US

    @precondition(lambda self: len(self.in_flight) < self.WORKERS)
    @rule()
    def claim(self) -> None:
        due = self.due_now()
        run = self.core.claim(self.now)
        if not due:
            assert run is None
            return
        best = min(due, key=lambda t: order_key(self.policy, t.priority, t.due, self.order.index(t.key)))
        assert run is not None and run.task_id == best.key
        assert run.scheduled_ns == best.due <= self.now
        best.state = RUNNING
        best.runs += 1
        assert run.run == best.runs
        self.in_flight.append(InFlight(run.task_id, run.run, run.scheduled_ns, self.now))
        self.runs.append((run.task_id, run.run, run.scheduled_ns, self.now))

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data(), outcome=st.sampled_from(["ok", "ok", "error", "crashed", "timeout"]), took=units)
    def complete(self, data: st.DataObject, outcome: str, took: int) -> None:
        flight = self.in_flight.pop(data.draw(st.integers(0, len(self.in_flight) - 1)))
        task = self.model[flight.task_id]
        if flight.task_id in self.interrupted:
            outcome = "cancelled"
            self.interrupted.discard(flight.task_id)
        self.now = max(self.now, flight.started + took * UNIT_US * US)
        done = self.core.complete(flight.task_id, flight.run, outcome, self.now)  # type: ignore[arg-type]
        assert done is not None and done.outcome == outcome
        task.outcomes.append(outcome)
        if task.state is CANCELLED:  # stopped or interrupted while running
            assert (done.state, done.ended, done.next_due_ns) == (CANCELLED, False, None)
            return
        if task.kind is Kind.ONCE:
            task.state = DONE if outcome == "ok" else FAILED
        elif outcome != "ok" and task.stop_on_error:
            task.state = FAILED
        else:
            task.state = PAUSED if task.pause_asked else PENDING
            task.pause_asked = False
            if task.kind is Kind.FIXED_DELAY:
                task.due = self.now + task.period
            else:
                task.due = next_rate_slot(task.due, task.period, task.misfire, outcome, self.now)
        assert done.state is task.state and done.ended == task.state.terminal
        assert done.next_due_ns == (task.due if task.state is PENDING else None)

    @precondition(lambda self: self.model)
    @rule(data=st.data(), interrupt=st.booleans())
    def cancel(self, data: st.DataObject, interrupt: bool) -> None:
        tid = data.draw(st.sampled_from(self.order))
        task = self.model[tid]
        result = self.core.cancel(tid, interrupt)
        if task.state in (PENDING, PAUSED):
            expected = CancelResult.CANCELLED
        elif task.state is RUNNING:
            if interrupt:
                expected = CancelResult.INTERRUPT
            else:
                expected = CancelResult.REFUSED if task.kind is Kind.ONCE else CancelResult.STOPPED
        else:
            expected = CancelResult.UNKNOWN
        assert result is expected
        if expected is CancelResult.INTERRUPT:
            self.interrupted.add(tid)
        if result.accepted:
            task.state, task.runs_at_cancel = CANCELLED, task.runs

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def pause(self, data: st.DataObject) -> None:
        tid = data.draw(st.sampled_from(self.order))
        task = self.model[tid]
        accepted = self.core.pause(tid)
        if task.state is PENDING:
            assert accepted
            task.state = PAUSED
        elif task.state is RUNNING:
            assert accepted == (task.kind is not Kind.ONCE)
            task.pause_asked = task.pause_asked or accepted
        else:
            assert accepted == (task.state is PAUSED)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def resume(self, data: st.DataObject) -> None:
        tid = data.draw(st.sampled_from(self.order))
        task = self.model[tid]
        accepted = self.core.resume(tid, self.now)
        if task.state is PAUSED:
            assert accepted
            task.state = PENDING
            self.order.remove(tid)  # a resumed task ties as if submitted now
            self.order.append(tid)
            if task.due < self.now:  # at its next slot from now
                if task.kind is Kind.FIXED_RATE:
                    k = 0
                    while task.due + k * task.period < self.now:
                        k += 1
                    task.due += k * task.period
                else:
                    task.due = self.now
        elif task.state is RUNNING and task.pause_asked:
            assert accepted
            task.pause_asked = False
        else:
            assert not accepted

    @rule(task_id=st.integers(-3, 200), run=st.integers(-1, 5), outcome=st.sampled_from(["ok", "error", "crashed"]))
    def stale_report(self, task_id: int, run: int, outcome: str) -> None:
        if any((f.task_id, f.run) == (task_id, run) for f in self.in_flight):
            return
        before = (len(self.core), self.core.task_ids(), [self.core.state(t) for t in self.order])
        assert self.core.complete(task_id, run, outcome, self.now) is None  # type: ignore[arg-type]
        assert (len(self.core), self.core.task_ids(), [self.core.state(t) for t in self.order]) == before

    @rule()
    def next_deadline(self) -> None:
        dues = [t.due for t in self.model.values() if t.state is PENDING]
        deadline = self.core.next_deadline()
        if not dues:
            assert deadline is None
        elif self.due_now():
            # something is due: the answer may be any due time, but it is due
            assert deadline is not None and deadline <= self.now
        else:
            assert deadline == min(dues)

    @invariant()
    def states_agree(self) -> None:
        live = 0
        for tid, task in self.model.items():
            in_flight = any(f.task_id == tid for f in self.in_flight)
            expected = task.state
            if task.state is CANCELLED and not in_flight:
                expected = None  # gone from the table once its last run ended
            elif task.state.terminal and task.state is not CANCELLED:
                expected = None
            assert self.core.state(tid) is expected
            live += task.state in (PENDING, RUNNING, PAUSED)
            # RUNNING in the model exactly when a run is in flight (and not stopped)
            assert (task.state is RUNNING) == (in_flight and task.runs_at_cancel is None)
        assert len(self.core) == live

    @invariant()
    def runs_respect_due_times_and_grid(self) -> None:
        for tid, _, scheduled, started in self.runs:
            task = self.model[tid]
            assert started >= scheduled
            if task.kind is Kind.FIXED_RATE:
                assert (scheduled - task.first) % task.period == 0

    @invariant()
    def nothing_both_runs_and_is_cancelled(self) -> None:
        for tid, task in self.model.items():
            if task.runs_at_cancel is not None:
                assert sum(1 for r in self.runs if r[0] == tid) == task.runs_at_cancel

    @invariant()
    def heaps_stay_bounded(self) -> None:
        pending = sum(t.state is PENDING for t in self.model.values())
        assert len(self.core._timers) + len(self.core._ready) <= 2 * pending + 2 * 64 + 2


def machine_tests(machine: type[RuleBasedStateMachine]) -> dict[str, Any]:
    tests = {}
    for policy in POLICIES:
        subclass = type(f"{machine.__name__}_{policy}", (machine,), {"policy": policy})
        case = subclass.TestCase
        case.settings = SETTINGS
        tests[f"Test{machine.__name__}_{policy}"] = case
    return tests


globals().update(machine_tests(InlineMachine))
globals().update(machine_tests(CoreMachine))


@pytest.mark.parametrize("misfire", list(Misfire))
def test_naive_grid_walk_matches_the_design_table(misfire: Misfire) -> None:
    """Sanity of the model itself, on the DESIGN.md 400 ms experiment."""
    ms = 1_000_000
    expected = {Misfire.CATCH_UP: 600, Misfire.SKIP: 1400, Misfire.COALESCE: 1000}[misfire]
    assert next_rate_slot(200 * ms, 400 * ms, misfire, "ok", 1200 * ms) == expected * ms
