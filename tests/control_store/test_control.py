"""Control from outside (DESIGN part three) with real instances: pause,
resume, cancel, run now and backfill asked of the store - by ``procsched
pause|resume|cancel|run-now KEY --store S``, the console or another program -
are carried out once, by the instance that holds the task, within its
re-read interval. SQLite and PostgreSQL."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

import procsched
from procsched import TaskState
from procsched._store import TaskDefinition, open_store
from procsched._store import TaskState as StoredState
from tests.cli.cli_helpers import cli_here

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import ctl_jobs  # noqa: E402

#: lease 3 s: the instances re-read the store every second (lease/3, at most 1 s)
LEASE = 3.0
MS = 1_000_000


def count(path: Path) -> int:
    try:
        return len(path.read_text().splitlines())
    except FileNotFoundError:
        return 0


def wait_until(predicate, timeout: float = 15.0, what: str = ""):
    """Wait (a deadlock guard, not a timing) until ``predicate()`` is truthy."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what or predicate}"
        time.sleep(0.02)
    return value


def test_pause_resume_cancel_from_the_cli_reach_the_holder(store_url, tmp_path):
    log = tmp_path / "tick.log"
    with procsched.Scheduler(workers=1, store=store_url, lease=LEASE) as s:
        tick = s.schedule_at_fixed_rate(ctl_jobs.mark, 0.1, args=(str(log),), key="tick")
        wait_until(lambda: count(log) >= 2, what="tick's runs")
        asked = time.monotonic()
        done = cli_here("pause", "tick", "--store", store_url)
        assert done.returncode == 0, done.stderr
        wait_until(lambda: tick.state is TaskState.PAUSED, what="the holder following the pause")
        assert time.monotonic() - asked < LEASE  # the re-read interval (1 s), and a loaded machine's slack
        seen = count(log)
        time.sleep(0.5)  # an absence: five periods of tick with no run
        assert count(log) <= seen + 1  # (a run that had started before the pause may end meanwhile)
        seen = count(log)
        assert cli_here("resume", "tick", "--store", store_url).returncode == 0
        wait_until(lambda: count(log) > seen, what="a run after the resume")
        assert cli_here("cancel", "tick", "--store", store_url).returncode == 0
        wait_until(lambda: tick.state is TaskState.CANCELLED, what="the holder dropping the task")
        assert s.get("tick") is None
        assert [r.run for r in s.history("tick")][:2] == [1, 2]  # its history is kept


def test_a_request_for_a_task_nobody_can_run_is_answered(store_url, tmp_path):
    # "gone": asked while no instance ran, then cancelled; "broken": its function imports nowhere
    with open_store(store_url) as store:
        batch = store.batch()
        schedule = {"kind": "fixed_rate", "period_ns": 3600 * 10**9, "initial_delay_ns": 0, "misfire": "skip"}
        for key, ref in (("gone", "ctl_jobs:mark"), ("broken", "no_such_module_here:mark")):
            batch.upsert(
                TaskDefinition(key, ref, b"", schedule, {"name": key}), StoredState(0, time.time_ns() + 3600 * 10**9)
            )
        batch.commit()
        gone = store.ask("gone", "run_now", asked_by="test")
        store.remove("gone")
        broken = store.ask("broken", "run_now", asked_by="test")
        with procsched.Scheduler(workers=1, store=store_url, lease=LEASE):
            answered = wait_until(
                lambda: all((r := store.request(i)) is not None and r.done for i in (gone, broken)),
                what="the instance's answers",
            )
            assert answered
            said = {i: store.request(i) for i in (gone, broken)}
    assert said[gone].error == "no task 'gone' in the store any more (cancelled, or it ended)"
    assert said[broken].error.startswith("no instance can run 'broken': ")
    assert "no_such_module_here" in said[broken].error
    assert all(r.result is None and r.taken_by is not None for r in said.values())


def test_run_now_from_the_cli_runs_once_on_the_holder(store_url, tmp_path):
    log = tmp_path / "tick.log"
    with procsched.Scheduler(workers=1, store=store_url, lease=LEASE) as s:
        tick = s.schedule_at_fixed_rate(ctl_jobs.mark, 0.1, args=(str(log),), key="tick")
        wait_until(lambda: count(log) >= 2, what="tick's runs")
        assert cli_here("pause", "tick", "--store", store_url).returncode == 0
        wait_until(lambda: tick.state is TaskState.PAUSED, what="the holder following the pause")
        wait_until(lambda: not any(r.outcome is None for r in s.history("tick")), what="no run in flight")
        seen = count(log)
        done = cli_here("run-now", "tick", "--store", store_url, "--wait", "20")
        assert done.returncode == 0, done.stderr
        said = re.fullmatch(r"procsched: (\S+) started run (\d+) of 'tick' now \(request (\d+)\)\n", done.stdout)
        assert said, done.stdout
        wait_until(lambda: count(log) == seen + 1, what="the manual run")
        run = int(said[2])
        wait_until(lambda: any(r.run == run and r.outcome == "ok" for r in s.history("tick")), what="its end")
        [record] = [r for r in s.history("tick") if r.run == run]
        assert record.cause == "manual"
        time.sleep(0.3)  # an absence: no scheduled run of the paused task, no second manual run
        assert count(log) == seen + 1 and tick.state is TaskState.PAUSED
        assert (log.read_text().splitlines()[-1]) == f"{run} -"


def test_backfill_requests_list_then_run_the_slots(tmp_path):
    store_url = str(tmp_path / "store.db")  # (SQLite: the store side is the same SQL on both)
    log = tmp_path / "tick.log"
    with procsched.Scheduler(workers=1, store=store_url, lease=LEASE) as s:
        tick = s.schedule_at_fixed_rate(ctl_jobs.mark, 0.2, args=(str(log),), key="tick")
        wait_until(lambda: len(tick.runs) >= 3, what="tick's runs")
        tick.pause()
        wait_until(lambda: not any(r.outcome is None for r in s.history("tick")), what="no run in flight")
        with open_store(store_url) as store:
            grid = [r.scheduled_ns for r in store.history("tick", 100)][:3]
            # (a slot's wall time is its monotonic time plus the clocks' offset as read then: within a ms)
            start, end = grid[0] - MS, grid[2] + MS
            dry = store.ask("tick", "backfill", start_ns=start, end_ns=end, dry_run=True, asked_by="test")
            answer = wait_until(lambda: (r := store.request(dry)) is not None and r.done and r, what="the dry run")
            assert answer.error is None
            slots = answer.result["slots"]
            assert len(slots) == 3 and all(abs(a - b) < MS for a, b in zip(slots, grid, strict=True))
            seen = count(log)
            assert count(log) == seen  # a dry run runs nothing
            real = store.ask("tick", "backfill", start_ns=start, end_ns=end, asked_by="test")
            answer = wait_until(lambda: (r := store.request(real)) is not None and r.done and r, what="the backfill")
            assert answer.error is None and answer.result["slots"] == slots
            wait_until(lambda: count(log) == seen + 3, what="the three backfill runs")
            wait_until(
                lambda: len([r for r in s.history("tick") if r.cause == "backfill" and r.outcome == "ok"]) == 3,
                what="their ends in the store",
            )
            backfilled = [r for r in store.history("tick", 100) if r.cause == "backfill"]
            assert [r.scheduled_ns for r in backfilled] == slots  # each run's slot, in slot order
            # a one-shot cannot be backfilled: refused with why
            once = s.schedule(ctl_jobs.mark, 3600, args=(str(log),), key="once")
            wait_until(lambda: store.get("once") is not None, what="the one-shot stored")
            bad = store.ask("once", "backfill", start_ns=start, end_ns=end, asked_by="test")
            answer = wait_until(lambda: (r := store.request(bad)) is not None and r.done and r, what="the refusal")
            assert answer.result is None and "backfill needs a fixed-rate or cron task" in answer.error
            once.cancel()


@pytest.mark.timeout(120)
def test_requests_are_carried_out_once_among_two_instances(store_url, tmp_path):
    from tests.durable.peers import Peer, lines, wait_for

    out = str(tmp_path / "k")
    cfg = {"store": store_url, "lease": 1.5, "tasks": [{"kind": "rate", "key": "k", "period": 0.1, "out": out}]}
    peers = [Peer(name, cfg, str(tmp_path)) for name in ("a", "b")]
    try:
        for p in peers:
            p.ready()
        wait_for(lambda: len(lines(out)) >= 3, 20, "k to run", peers)
        assert cli_here("pause", "k", "--store", store_url).returncode == 0
        wait_for(lambda: all(p.ask("stats")["keys"].get("k") == "paused" for p in peers), 30, "both paused", peers)
        with open_store(store_url) as store:
            wait_for(lambda: store.get("k").holder is None, 30, "no run in flight", peers)
            seen = len(lines(out))
            asked = [store.ask("k", "run_now", asked_by="test") for _ in range(3)]
            answers = wait_for(
                lambda: (
                    all((r := store.request(i)) is not None and r.done for i in asked)
                    and [store.request(i) for i in asked]
                ),
                20,
                "the answers",
                peers,
            )
            wait_for(lambda: len(lines(out)) == seen + 3, 20, "three manual runs", peers)
            time.sleep(0.3)  # an absence: no fourth run
            assert len(lines(out)) == seen + 3
            runs = [a.result["run"] for a in answers]
            assert all(a.error is None for a in answers) and len(set(runs)) == 3
            manual = [r for r in store.history("k", 100) if r.cause == "manual"]
            assert sorted(r.run for r in manual) == sorted(runs)  # each run once, in the store too
            assert {run for run, *_ in lines(out)[seen:]} == set(runs)
        for p in peers:
            p.quit()
    finally:
        for p in peers:
            p.close()


@pytest.mark.timeout(120)
def test_a_take_over_records_the_slots_missed_while_nobody_ran_the_task(tmp_path):
    """The instance holding a long run of a cron task (every second,
    misfire "coalesce") is SIGKILLed: the survivor takes it over after the
    lease, records the run crashed, and the slots its policy drops (those
    that passed while the run was held and the lease ran out) as skipped,
    reason "down"."""
    store_url = str(tmp_path / "store.db")  # (SQLite: the store side is the same SQL on both)
    from tests.durable.peers import Peer, lines, wait_for

    out = str(tmp_path / "long")
    task = {"kind": "cron", "key": "long", "expr": "* * * * * *", "out": out, "long_runs": 1, "long_s": 120}
    cfg = {"store": store_url, "lease": 1.5, "tasks": [task]}
    peers = [Peer(name, cfg, str(tmp_path)) for name in ("a", "b")]
    try:
        for p in peers:
            p.ready()
        first = wait_for(lambda: lines(out), 30, "run 1 to start", peers)[0]
        holder = next(p for p in peers if p.name == first[3])
        survivor = next(p for p in peers if p is not holder)
        time.sleep(2.5)  # slots pass while the holder runs run 1 (and renews its lease): they wait for it
        holder.kill()
        with open_store(store_url) as store:
            wait_for(
                lambda: any(r.run == 1 and r.outcome == "crashed" for r in store.history("long")),
                20,
                "run 1 recorded crashed",
                peers,
            )
            wait_for(lambda: [x for x in lines(out) if x[3] == survivor.name], 20, "the survivor's run", peers)
            survivor.quit()
            slots = store.history("long", 100, skipped=True)
        down = [r.slot_ns for r in slots if r.outcome == "skipped" and r.reason == "down"]
        assert down, slots
        ran = sorted(r.scheduled_ns for r in slots if r.outcome != "skipped")
        assert not set(down) & set(ran)  # a slot either ran or is skipped
        assert all(ran[0] < slot < ran[-1] for slot in down)  # between run 1 and the run the survivor coalesced to
        assert all(b - a == 10**9 for a, b in zip(down, down[1:], strict=False))  # every second, none left out
    finally:
        for p in peers:
            p.close()


def test_a_pause_and_resume_from_the_cli_record_every_slot_they_skipped(store_url, tmp_path):
    """The slots a task is paused over are recorded skipped ("paused") by the
    instance that runs it, as it follows the resume - asked from the command
    line, which knows nothing of the task's grid. Every slot from the first
    run to the last is then a run or a recorded skip (it recorded none)."""
    log = tmp_path / "tick.log"
    period = 0.1
    with procsched.Scheduler(workers=1, store=store_url, lease=LEASE) as s:
        tick = s.schedule_at_fixed_rate(ctl_jobs.mark, period, args=(str(log),), key="tick")
        wait_until(lambda: count(log) >= 2, what="tick's runs")
        assert cli_here("pause", "tick", "--store", store_url).returncode == 0
        wait_until(lambda: tick.state is TaskState.PAUSED, what="the holder following the pause")
        time.sleep(0.5)  # an absence: five periods of tick paused
        assert cli_here("resume", "tick", "--store", store_url).returncode == 0
        wait_until(lambda: tick.state is not TaskState.PAUSED, what="the holder following the resume")
        seen = count(log)
        wait_until(lambda: count(log) >= seen + 2, what="runs after the resume")
        s.shutdown(wait=True)
        rows = s.history("tick", 1000, skipped=True)
    ran = [r.scheduled_for for r in rows if r.outcome == "ok" and r.attempt == 1]
    paused = [r.scheduled_for for r in rows if r.outcome == "skipped" and r.reason == "paused"]
    assert len(paused) >= 4, rows  # the half second paused, and the re-read's second on either side
    slots = sorted(ran + paused)
    steps = [round((b - a) / period, 3) for a, b in zip(slots, slots[1:], strict=False)]
    assert steps == [1.0] * len(steps), steps  # one grid, every slot once: run or recorded (none made up)
