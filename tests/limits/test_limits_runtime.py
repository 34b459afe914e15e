"""Shared limits with real workers (processes, threads): at most N runs of a
group at once, read from the tasks' own O_APPEND log; the waiting start in
priority order; a crashed or interrupted run frees its unit; bad input is
refused at the call. Synchronised on a Manager queue and events (blocking,
with deadlines), never on sleeps."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import procsched
from tests.limits.limit_tasks import Rendezvous, hold, most_at_once

WAIT = 60


@pytest.fixture
def meet(tmp_path: Any) -> Iterator[Rendezvous]:
    rendezvous = Rendezvous(str(tmp_path / "meet.sock"))
    yield rendezvous
    rendezvous.close()


@pytest.mark.parametrize("runner", ["processes", "threads"])
def test_a_full_group_waits_and_its_waiting_start_by_priority(runner: str, meet: Rendezvous, tmp_path: Any) -> None:
    log = str(tmp_path / "log")
    with procsched.Scheduler(4, runner=runner, limits={"db": 2}) as s:
        handles = {name: s.schedule(hold, args=(log, name, meet.path), group="db") for name in ("a", "b")}
        assert {meet.started(), meet.started()} == {"a", "b"}
        for name, prio in (("low", -5), ("high", 10), ("mid", 0)):
            handles[name] = s.schedule(hold, args=(log, name, meet.path), priority=prio, group="db")
        # not in the group: a free worker takes it at once, though it ranks last
        handles["free"] = s.schedule(hold, args=(log, "free", meet.path), priority=-100)
        assert meet.started() == "free"  # (added after the three: they are all due, and waiting)
        assert meet.none_started()
        order = []
        for done in ("a", "b", "high", "mid", "low"):
            meet.release(done)
            assert handles[done].result(timeout=WAIT) == done
            if done in ("a", "b", "high"):
                order.append(meet.started())
        meet.release("free")
        assert handles["free"].result(timeout=WAIT) == "free"
    assert order == ["high", "mid", "low"]
    assert most_at_once(log, {"a", "b", "low", "high", "mid"}) == 2


def test_a_crashed_or_interrupted_run_frees_its_unit(meet: Rendezvous, tmp_path: Any) -> None:
    log = str(tmp_path / "log")
    with procsched.Scheduler(3, limits={"db": 1}) as s:
        crasher = s.schedule(hold, args=(log, "crash", meet.path, True), group="db")
        assert meet.started() == "crash"
        waiter = s.schedule(hold, args=(log, "stuck", meet.path), group="db", priority=5)
        after = s.schedule(hold, args=(log, "last", meet.path), group="db")
        meet.release("crash")
        with pytest.raises(procsched.WorkerCrashedError):
            crasher.result(timeout=WAIT)
        assert meet.started() == "stuck"  # the crash freed the unit
        assert waiter.cancel(interrupt=True)
        assert meet.started() == "last"  # and so did the interrupt
        meet.release("last")
        assert after.result(timeout=WAIT) == "last"


def test_periodic_tasks_share_a_limit(tmp_path: Any) -> None:
    log = str(tmp_path / "log")
    with procsched.Scheduler(4, limits={"db": 1}) as s:
        handles = [s.schedule_at_fixed_rate(hold, 0.05, args=(log, f"p{i}"), group="db", max_runs=3) for i in range(3)]
        for handle in handles:
            handle.result(timeout=WAIT)
    assert most_at_once(log) == 1
    with open(log) as f:
        starts = sorted(line.split()[1] for line in f if line[0] == "+")
    assert starts == sorted(f"p{i}" for i in range(3) for _ in range(3))


@pytest.mark.parametrize(
    ("kwargs", "error", "says"),
    [
        ({"limits": {"db": 0}}, ValueError, "limits['db'] must be an int >= 1, not 0"),
        ({"limits": {"db": "2"}}, TypeError, "limits['db'] must be an int >= 1, not str '2'"),
        ({"limits": {2: 2}}, TypeError, "a group name must be a str, not int 2"),
        ({"limits": ["db"]}, TypeError, "limits must be a mapping"),
    ],
)
def test_bad_limits_are_refused_at_the_call(kwargs: dict[str, Any], error: type[Exception], says: str) -> None:
    with pytest.raises(error) as info:
        procsched.Scheduler(1, runner="threads", **kwargs)
    assert says in str(info.value)


def test_a_bad_group_or_jitter_is_refused_at_the_call_and_nothing_is_scheduled() -> None:
    with procsched.Scheduler(1, runner="threads", limits={"db": 2}) as s:
        with pytest.raises(ValueError, match="group 'web' is not one of this scheduler's limits"):
            s.schedule(print, group="web")
        with pytest.raises(TypeError, match="group must be a str or None, not int 1"):
            s.schedule_at_fixed_rate(print, 1, group=1)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="jitter must be >= 0, not -1"):
            s.schedule_cron(print, "* * * * *", jitter=-1)
        with pytest.raises(ValueError, match="jitter must be a finite number of seconds, not nan"):
            s.schedule_with_fixed_delay(print, 1, jitter=float("nan"))
        with pytest.raises(TypeError, match="jitter must be a number of seconds or a timedelta, not str"):
            s.schedule_at_fixed_rate(print, 1, jitter="1")  # type: ignore[arg-type]
        assert s.jobs() == []
    with procsched.Scheduler(1, runner="threads") as s:
        with pytest.raises(ValueError, match=r"group 'db' is not one of this scheduler's limits \(limits=: none\)"):
            s.schedule(print, group="db")


def test_the_inline_scheduler_takes_limits_too() -> None:
    clock = procsched.ManualClock()
    s = procsched.InlineScheduler(clock, limits={"db": 1})
    order: list[str] = []
    for name, prio in (("low", -1), ("high", 5)):
        s.schedule(order.append, args=(name,), priority=prio, group="db")
    s.run_due()
    assert order == ["high", "low"]
    with pytest.raises(ValueError, match="group 'web' is not one of this scheduler's limits"):
        s.schedule(print, group="web")
    with pytest.raises(ValueError, match=r"limits\['db'\] must be an int >= 1, not -1"):
        procsched.InlineScheduler(clock, limits={"db": -1})
