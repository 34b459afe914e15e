"""Scheduler events and listeners: names, fields, order per task, validation,
and a raising listener that breaks nothing. Inline (virtual time, exact)
first, then the real runners, synchronised on events and handles."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import defaultdict
from datetime import timedelta
from typing import Any

import pytest

import procsched
from procsched import InlineScheduler, ManualClock
from procsched._events import EVENTS, RUN_END

RUN_ENDS = set(RUN_END.values())


class Recorder:
    """Collects events; ``wait_for`` blocks until a predicate over them holds."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.cond = threading.Condition()

    def __call__(self, event: dict[str, Any]) -> None:
        with self.cond:
            self.events.append(event)
            self.cond.notify_all()

    def of(self, kind: str, name: str | None = None) -> list[dict[str, Any]]:
        with self.cond:
            return [e for e in self.events if e["event"] == kind and (name is None or e["name"] == name)]

    def wait_for(self, predicate: Any, timeout: float = 30.0) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: predicate(self), timeout), f"timed out; events: {self.events}"


def per_task(events: list[dict[str, Any]]) -> dict[int, list[tuple[str, int | None]]]:
    out: dict[int, list[tuple[str, int | None]]] = defaultdict(list)
    for e in events:
        if e["task_id"] is not None:
            out[e["task_id"]].append((e["event"], e.get("run")))
    return out


def assert_runs_never_overlap(events: list[dict[str, Any]]) -> None:
    """Per task: started(n), end(n), started(n+1), end(n+1)...; missed right after an end."""
    for task_id, seq in per_task(events).items():
        expect_run, open_run, last = 1, None, None
        for kind, run in seq:
            if kind == "run_started":
                assert open_run is None and run == expect_run, (task_id, seq)
                open_run = run
            elif kind in RUN_ENDS:
                assert run == open_run, (task_id, seq)
                open_run, expect_run = None, run + 1
            elif kind == "run_missed":
                assert last in RUN_ENDS and run == expect_run - 1, (task_id, seq)
            last = kind


# -- inline: exact, on a ManualClock ----------------------------------------------


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sched(clock: ManualClock) -> InlineScheduler:
    return InlineScheduler(clock)


def test_inline_one_shot_events_and_fields(sched: InlineScheduler, clock: ManualClock) -> None:
    rec = Recorder()
    sched.add_listener(rec)

    def work() -> str:
        clock.advance(0.25)
        return "done"

    handle = sched.schedule(work, 2, name="job")
    sched.run_until(5)
    assert handle.result() == "done"
    started, finished = rec.events
    assert started == {
        "event": "run_started",
        "task_id": handle.id,
        "name": "job",
        "run": 1,
        "worker": threading.current_thread().name,
        "scheduled_for": 2.0,
        "cause": "schedule",
    }
    assert finished == {
        "event": "run_finished",
        "task_id": handle.id,
        "name": "job",
        "run": 1,
        "worker": threading.current_thread().name,
        "outcome": "ok",
        "scheduled_for": 2.0,
        "started_at": 2.0,
        "finished_at": 2.25,
        "duration": 0.25,
        "lateness": 0.0,
        "state": "done",
        "next_run": None,
        "error": None,
        "traceback": None,
        "output": None,
        "attempt": 1,
        "scheduled_at": handle.runs[0].scheduled_at.isoformat(),
        "cause": "schedule",
        "reason": None,
    }
    assert handle.runs[0].scheduled_at == clock.wall_now() - timedelta(seconds=3)  # the clock is at 5.0
    json.dumps(rec.events)  # plain values only


def test_inline_periodic_failures_and_cancel(sched: InlineScheduler) -> None:
    rec = Recorder()
    sched.add_listener(rec)

    def flaky() -> None:
        if procsched.current_run().run == 2:
            raise KeyError("two")

    handle = sched.schedule_at_fixed_rate(flaky, 1, name="flaky")
    sched.run_until(2.5)
    assert handle.cancel()
    kinds = [(e["event"], e.get("run")) for e in rec.events]
    assert kinds == [
        ("run_started", 1),
        ("run_finished", 1),
        ("run_started", 2),
        ("run_failed", 2),
        ("run_started", 3),
        ("run_finished", 3),
        ("task_cancelled", None),
    ]
    failed = rec.of("run_failed")[0]
    assert failed["error"] == "KeyError: 'two'"
    assert failed["state"] == "pending" and failed["next_run"] == 2.0
    assert rec.events[-1] == {"event": "task_cancelled", "task_id": handle.id, "name": "flaky", "running": False}


def test_inline_missed_slots_are_reported(sched: InlineScheduler, clock: ManualClock) -> None:
    rec = Recorder()
    sched.add_listener(rec)

    def overrun() -> None:
        if procsched.current_run().run == 1:
            clock.advance(3.5)  # slots at 1, 2, 3 go by

    sched.schedule_at_fixed_rate(overrun, 1, misfire="skip", name="skipper")
    sched.run_until(4.5)
    missed = rec.of("run_missed")
    assert len(missed) == 1 and missed[0]["missed"] == 3 and missed[0]["run"] == 1 and missed[0]["next_run"] == 4.0
    assert_runs_never_overlap(rec.events)


def test_inline_cancel_from_inside_a_run(sched: InlineScheduler) -> None:
    rec = Recorder()
    sched.add_listener(rec)

    def stop_me() -> None:
        procsched.current_scheduler().cancel(procsched.current_run().task_id)

    sched.schedule_at_fixed_rate(stop_me, 1, name="self")
    sched.run_until(5)
    assert [e["event"] for e in rec.events] == ["run_started", "task_cancelled", "run_finished"]
    assert rec.events[1]["running"] is True
    assert rec.events[2]["state"] == "cancelled"


def test_event_filter_and_remove(sched: InlineScheduler) -> None:
    only_ends, everything = Recorder(), Recorder()
    sched.add_listener(only_ends, events=["run_finished", "run_failed"])
    sched.add_listener(everything)
    sched.add_listener(only_ends, events="task_cancelled")  # a str is one name
    sched.schedule(int)
    sched.run_due()
    assert [e["event"] for e in only_ends.events] == ["run_finished"]
    assert sched.remove_listener(only_ends) is True
    assert sched.remove_listener(only_ends) is False
    sched.schedule(int).cancel()
    assert [e["event"] for e in only_ends.events] == ["run_finished"]
    assert [e["event"] for e in everything.events][-1] == "task_cancelled"


@pytest.mark.parametrize("events", [["run_finished", "run_exploded"], "finished", ["RUN_STARTED"]])
def test_unknown_event_names_are_rejected(sched: InlineScheduler, events: Any) -> None:
    with pytest.raises(ValueError, match="unknown event") as info:
        sched.add_listener(print, events=events)
    bad = next(n for n in ([events] if isinstance(events, str) else events) if n not in EVENTS)
    assert repr(bad) in str(info.value)


def test_bad_listener_arguments(sched: InlineScheduler) -> None:
    with pytest.raises(TypeError, match="callable"):
        sched.add_listener("not a function")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="events"):
        sched.add_listener(print, events=42)


def test_a_raising_listener_is_logged_and_skipped(sched: InlineScheduler, caplog: pytest.LogCaptureFixture) -> None:
    rec = Recorder()

    def broken(event: dict[str, Any]) -> None:
        event["event"] = "tampered"  # each listener gets its own copy
        raise RuntimeError("listener bug")

    sched.add_listener(broken)
    sched.add_listener(rec)
    with caplog.at_level(logging.ERROR, logger="procsched"):
        handle = sched.schedule(lambda: 7)
        sched.run_due()
    assert handle.result() == 7
    assert [e["event"] for e in rec.events] == ["run_started", "run_finished"]
    assert "listener bug" in caplog.text and "run_started" in caplog.text


# -- the real runners -----------------------------------------------------------


def boom() -> None:
    raise ValueError("boom")


def nap(seconds: float) -> None:
    time.sleep(seconds)


def die() -> None:
    os._exit(7)


def spawn_follow_up() -> int:
    return procsched.current_scheduler().schedule(int, name="follow-up").id


def skip_after_overrun() -> None:
    if procsched.current_run().run == 1:
        time.sleep(0.35)


@pytest.fixture(params=["processes", "threads"])
def real(request: pytest.FixtureRequest) -> Any:
    scheduler = procsched.Scheduler(2, runner=request.param)
    yield scheduler
    scheduler.shutdown(wait=True, cancel_futures=True)


@pytest.mark.timeout(60)
def test_real_runner_events_in_order_per_task(real: procsched.Scheduler) -> None:
    rec = Recorder()
    real.add_listener(rec)
    ok = real.submit(pow, 2, 5)
    bad = real.schedule(boom, name="boom")
    ticker = real.schedule_at_fixed_rate(nap, 0.02, args=(0.001,), name="ticker")
    slow = real.schedule(nap, args=(30,), name="slow", timeout=0.3)
    skipper = real.schedule_at_fixed_rate(skip_after_overrun, 0.1, misfire="skip", name="skipper")
    assert ok.result(30) == 32
    with pytest.raises(ValueError):
        bad.result(30)
    with pytest.raises(procsched.TaskTimeoutError):
        slow.result(30)
    rec.wait_for(lambda r: len(r.of("run_finished", "ticker")) >= 5 and r.of("run_missed", "skipper"))
    assert ticker.cancel() and skipper.cancel()
    real.shutdown(wait=True)  # every event has been delivered once this returns

    assert_runs_never_overlap(rec.events)
    assert rec.of("run_failed", "boom")[0]["error"] == "ValueError: boom"
    timeout = rec.of("run_timeout", "slow")[0]
    assert timeout["error"].startswith("TaskTimeoutError") and timeout["state"] == "failed"
    assert rec.of("run_missed", "skipper")[0]["missed"] >= 1
    assert {e["task_id"] for e in rec.of("task_cancelled")} >= {ticker.id, skipper.id}
    for e in rec.events:
        assert e["event"] in EVENTS
        if e["task_id"] == ticker.id:
            assert e["name"] == "ticker"
        if e["event"] in RUN_ENDS:
            assert e["duration"] >= 0 and e["lateness"] >= 0 and e["finished_at"] >= e["started_at"]
    json.dumps(rec.events)
    # A periodic task that ends by cancel: the cancel, then (if a run was in flight) its end.
    ticker_seq = [k for k, _ in per_task(rec.events)[ticker.id]]
    assert "task_cancelled" in ticker_seq[-2:]


@pytest.mark.timeout(60)
def test_cancel_with_interrupt_reports_the_run(real: procsched.Scheduler) -> None:
    rec = Recorder()
    real.add_listener(rec)
    handle = real.schedule(nap, args=(30,), name="long")
    rec.wait_for(lambda r: r.of("run_started", "long"))
    assert handle.cancel(interrupt=True)
    real.shutdown(wait=True)
    seq = [e["event"] for e in rec.events if e["task_id"] == handle.id]
    assert seq == ["run_started", "task_cancelled", "run_cancelled"]
    assert rec.of("task_cancelled", "long")[0]["running"] is True


@pytest.mark.timeout(60)
def test_follow_up_tasks_carry_their_names(real: procsched.Scheduler) -> None:
    rec = Recorder()
    real.add_listener(rec, events="run_finished")
    inner_id = real.submit(spawn_follow_up).result(30)
    rec.wait_for(lambda r: r.of("run_finished", "follow-up"))
    assert rec.of("run_finished", "follow-up")[0]["task_id"] == inner_id


@pytest.mark.timeout(60)
def test_raising_listener_does_not_break_a_real_scheduler(real: procsched.Scheduler) -> None:
    calls = []

    def broken(event: dict[str, Any]) -> None:
        calls.append(event["event"])
        raise RuntimeError("listener bug")

    real.add_listener(broken)
    results = [real.submit(pow, 3, i) for i in range(5)]
    assert [h.result(30) for h in results] == [3**i for i in range(5)]
    assert real.stats()["pending"] == 0
    assert calls.count("run_finished") == 5


@pytest.mark.timeout(60)
def test_crash_and_worker_events() -> None:
    rec = Recorder()
    with procsched.Scheduler(1) as scheduler:
        scheduler.add_listener(rec)
        crashed = scheduler.submit(die)
        with pytest.raises(procsched.WorkerCrashedError):
            crashed.result(30)
        after = scheduler.submit(os.getpid)
        pid = after.result(30)
    died = rec.of("worker_exited")
    crash = next(e for e in died if e["crashed"])
    assert crash["exitcode"] == 7 and crash["signal"] is None and crash["task_id"] is None
    run_crashed = rec.of("run_crashed")[0]
    assert run_crashed["task_id"] == crashed.id and run_crashed["worker"] == crash["worker"]
    assert "WorkerCrashedError" in run_crashed["error"] and "exit code 7" in run_crashed["error"]
    assert any(e["worker"] == pid for e in rec.of("worker_started"))  # the replacement
    # the worker's death is reported before the run it cost
    kinds = [e["event"] for e in rec.events]
    assert kinds.index("worker_exited") < kinds.index("run_crashed")
