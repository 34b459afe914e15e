"""Issue 20, "Slots or tasks lost" (items 2-5): a clean restart, a replace,
a deploy with a changed definition or a lost COMMIT answer loses slots,
whole tasks, or the change itself.

The promises (README, "durable" and "Running several instances"): with
``catch_up`` every slot missed while down runs at restart; a replaced or
re-defined keyed task goes on with its new definition on every instance;
a store outage ends, and the waiting runs go on, when the store records
again. Each run appends a line to a log (tests/promises/tasks.py).
"""

from __future__ import annotations

import itertools
import json
import time

import pytest

import procsched
from tests.campaign import storesql
from tests.promises import tasks
from tests.promises.helpers import log, make_fifo, release, starts, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
TASKS = "tests.promises.tasks"


def _grid_gaps(slots_us: list[int], period_us: int) -> list[tuple[int, int]]:
    """(slot, slots missing after it) wherever consecutive slots are more than one period apart."""
    slots = sorted(set(slots_us))
    return [(a, round((b - a) / period_us) - 1) for a, b in itertools.pairwise(slots) if round((b - a) / period_us) > 1]


def test_a_clean_shutdown_and_restart_run_every_catch_up_slot(instances, sqlite_url, tmp_path) -> None:
    out, fifo = str(tmp_path / "runs.log"), make_fifo(str(tmp_path / "hold"))
    period = 0.2
    rate = {
        "key": "r",
        "kind": "rate",
        "period": period,
        "misfire": "catch_up",
        "fn": f"{TASKS}:mark",
        "args": [out, "r"],
    }
    blocker = {"key": "blocker", "kind": "once", "fn": f"{TASKS}:hold", "args": [out, fifo, "blocker"]}
    a = instances("A", {"store": sqlite_url, "workers": 1, "tasks": [rate]}).ready()
    wait_until(lambda: len(starts(out)) >= 3, 30, "r to run")
    a.ask("add " + json.dumps(blocker))
    wait_until(lambda: [x for x in starts(out) if x.tag == "blocker"], 30, "the blocker to hold the only worker")
    in_flight = "SELECT run FROM procsched_runs WHERE key = 'r' AND outcome IS NULL"
    ahead = wait_until(lambda: storesql.query(sqlite_url, in_flight), 30, "a run of r to be given ahead (queued)")
    assert a.ask("quit")["quitting"]  # a clean shutdown while a run of r is given ahead
    try:  # the shutdown took that run back (today: recorded cancelled); only then may the worker go on
        wait_until(lambda: storesql.query(sqlite_url, in_flight) != ahead, 5, "the run given ahead to be taken back")
    except AssertionError:
        pass
    release(fifo)  # the blocker (a one-shot) ends; the shutdown completes
    assert a.line()["closed"]
    a.proc.wait(30)
    b = instances("B", {"store": sqlite_url, "workers": 1, "tasks": [rate]}).ready()  # the same definition
    restarted = b.started_at
    wait_until(
        lambda: [x for x in starts(out) if x.tag == "r" and (x.slot_us or 0) / 1e6 > restarted + 1],
        30,
        "r to run slots after the restart",
    )
    assert b.quit()["closed"]
    slots = [x.slot_us for x in starts(out) if x.tag == "r" and x.attempt == 1 and x.slot_us is not None]
    gaps = _grid_gaps(slots, round(period * 1e6))
    cancelled = storesql.query(
        sqlite_url, "SELECT run, scheduled_ns FROM procsched_runs WHERE key = 'r' AND outcome = 'cancelled'"
    )
    assert not gaps, f"slots never run (catch_up): {gaps}; runs recorded cancelled: {cancelled}"


def test_a_retry_given_ahead_at_a_clean_shutdown_is_tried_after_the_restart_on_its_runs_grid(
    instances, sqlite_url, tmp_path
) -> None:
    """The campaign's lost slots of r1 (issue 20, "Beyond the list"): a retry given ahead to a
    busy worker and taken back by a clean shutdown was recorded as a new run due at the retry's
    time, so after the restart the fixed-rate grid had moved by the retry's delay and its own
    slots were never run. Now it stays a retry: tried after the restart, the grid kept."""
    out, fifo = str(tmp_path / "runs.log"), make_fifo(str(tmp_path / "hold"))
    period, delay = 1.0, 0.5
    rate = {
        "key": "r",
        "kind": "rate",
        "period": period,
        "misfire": "catch_up",
        "fn": f"{TASKS}:fail_first",
        "args": [out, "r"],
        "retry": {"attempts": 3, "delay": delay, "backoff": 1.0, "jitter": 0.0},
    }
    blocker = {"key": "blocker", "kind": "once", "fn": f"{TASKS}:hold", "args": [out, fifo, "blocker"]}
    a = instances("A", {"store": sqlite_url, "workers": 1, "tasks": [rate]}).ready()
    wait_until(lambda: [x for x in starts(out) if x.tag == "r" and x.attempt == 1], 30, "a first attempt of r")
    a.ask("add " + json.dumps(blocker))  # due now: it takes the only worker before the retry, due 0.5 s on
    wait_until(lambda: [x for x in starts(out) if x.tag == "blocker"], 30, "the blocker to hold the only worker")
    in_flight = "SELECT run, attempt FROM procsched_runs WHERE key = 'r' AND outcome IS NULL"
    ahead = wait_until(lambda: storesql.query(sqlite_url, in_flight), 30, "a run of r to be given ahead")
    assert ahead[0][1] == 2, f"the run given ahead is not a retry: {ahead}"
    assert a.ask("quit")["quitting"]  # a clean shutdown while the retry is given ahead
    try:
        wait_until(lambda: storesql.query(sqlite_url, in_flight) != ahead, 5, "the retry to be taken back")
    except AssertionError:
        pass
    release(fifo)
    assert a.line()["closed"]
    a.proc.wait(30)
    b = instances("B", {"store": sqlite_url, "workers": 1, "tasks": [rate]}).ready()  # the same definition
    restarted = b.started_at
    wait_until(
        lambda: [x for x in starts(out) if x.tag == "r" and x.attempt == 1 and (x.slot_us or 0) / 1e6 > restarted + 1],
        30,
        "r to run slots after the restart",
    )
    assert b.quit()["closed"]
    firsts = [x for x in starts(out) if x.tag == "r" and x.attempt == 1 and x.slot_us is not None]
    off = [x.slot_us for x in firsts if abs((x.slot_us - firsts[0].slot_us) / (period * 1e6) % 1 - 0.5) < 0.4]
    assert not off, f"regular slots off the grid after the restart (moved by the retry): {off}"
    gaps = _grid_gaps([x.slot_us for x in firsts], round(period * 1e6))
    assert not gaps, f"slots never run (catch_up): {gaps}"
    retried = [x for x in starts(out) if x.tag == "r" and x.run == ahead[0][0] and x.attempt > 1]
    assert retried, f"run {ahead[0][0]}'s retry never ran"


def test_replace_existing_while_the_old_run_is_in_flight_keeps_the_replacement(schedulers, store_url, tmp_path) -> None:
    out, fifo = str(tmp_path / "runs.log"), make_fifo(str(tmp_path / "hold"))
    s = schedulers(2, store=store_url)
    s.schedule_at_fixed_rate(tasks.hold_first, 0.2, args=(out, fifo, "v1"), key="k")
    wait_until(lambda: starts(out), 30, "run 1 of v1 to start (it holds)")
    new = s.schedule_at_fixed_rate(tasks.mark, 0.2, args=(out, "v2"), key="k", replace_existing=True)
    release(fifo)  # the old run ends now, after the replacement
    wait_until(lambda: [x for x in log(out) if x.tag == "v1" and x.ev == "end"], 30, "the old run to end")
    try:
        wait_until(lambda: len([x for x in starts(out) if x.tag == "v2"]) >= 3, 5, "the replacement to run")
    finally:
        state, keys = new.state, storesql.tasks(store_url)
    assert state in (procsched.TaskState.PENDING, procsched.TaskState.RUNNING), state
    assert "k" in keys, "the key is gone from the store"
    assert s.get("k") is new


def test_a_deploy_with_a_changed_definition_during_a_catch_up_run_keeps_the_task(
    instances, sqlite_url, tmp_path
) -> None:
    out, fifo, gate = str(tmp_path / "runs.log"), make_fifo(str(tmp_path / "hold")), str(tmp_path / "gate")
    v1 = {
        "key": "k",
        "kind": "rate",
        "period": 0.3,
        "misfire": "catch_up",
        "fn": f"{TASKS}:hold_if",
        "args": [out, fifo, "v1", gate],
    }
    v2 = {"key": "k", "kind": "rate", "period": 0.3, "misfire": "catch_up", "fn": f"{TASKS}:mark", "args": [out, "v2"]}
    old = instances("v1", {"store": sqlite_url, "tasks": [v1]}).ready()
    wait_until(lambda: len(starts(out)) >= 2, 30, "v1 to run")
    assert old.quit()["closed"]
    open(gate, "w").close()  # from now on a v1 run holds until released
    new = instances("v2", {"store": sqlite_url}).ready()  # adopts the stored v1 task: its catch-up run starts
    wait_until(lambda: [x for x in starts(out) if x.inst == "v2"], 30, "the adopted v1 task's catch-up run")
    got = new.ask("add " + json.dumps(v2))  # the program schedules k with its new definition
    assert got.get("added") == "k", got
    release(fifo)
    wait_until(lambda: [x for x in log(out) if x.ev == "end" and x.inst == "v2"], 30, "the catch-up run to end")
    try:
        wait_until(lambda: len([x for x in starts(out) if x.tag == "v2"]) >= 3, 5, "the new definition to run")
    finally:
        jobs, keys = new.ask("jobs")["jobs"], storesql.tasks(sqlite_url)
        new.quit()
    assert "k" in jobs and "k" in keys, (jobs, sorted(keys))


def test_a_changed_definition_started_on_one_instance_is_what_every_instance_runs(
    instances, store_url, tmp_path
) -> None:
    """A holds k (its run 1 in flight, held on a FIFO); B starts with a
    changed definition of k. Promised: no second run of k while run 1 is in
    flight, and from the re-read interval on, only the new definition runs."""
    out, fifo = str(tmp_path / "runs.log"), make_fifo(str(tmp_path / "hold"))
    v1 = {"key": "k", "kind": "rate", "period": 0.1, "fn": f"{TASKS}:hold_first", "args": [out, fifo, "v1"]}
    v2 = {"key": "k", "kind": "rate", "period": 0.1, "fn": f"{TASKS}:mark", "args": [out, "v2"]}
    a = instances("A", {"store": store_url, "lease": 1.0, "tasks": [v1]}).ready()
    wait_until(lambda: starts(out), 30, "A's run 1 to start (it holds: A holds the task)")
    b = instances("B", {"store": store_url, "lease": 1.0, "tasks": [v2]}).ready()  # a deploy of the new definition
    wait_until(lambda: time.time() > b.started_at + 1.5, 5, "the re-read interval (an absence: real time)")
    release(fifo)
    first = wait_until(lambda: [x for x in log(out) if x.ev == "end" and x.run == 1], 30, "run 1 to end")[0]
    settle = first.t + 2.0  # the re-read interval (<= 1 s) and slack
    try:
        wait_until(lambda: [x for x in starts(out) if x.t > settle + 1.0], 15, "a second of runs after that")
    finally:
        for inst in (a, b):
            inst.quit()
    beside = [x for x in starts(out) if x.run != 1 and x.t < first.t]
    assert not beside, (
        f"{len(beside)} runs of k started while its run 1 was in flight on A, by "
        f"{sorted({(x.inst, x.tag) for x in beside})}"
    )
    late = [x for x in starts(out) if x.t > settle]
    stale = [x for x in late if x.tag == "v1"]
    assert not stale, (
        f"the old definition still ran after the new one was stored: {len(stale)} of {len(late)} "
        f"runs, by {sorted({x.inst for x in stale})}"
    )


def test_a_lost_commit_answer_does_not_stop_the_tasks_it_claimed(
    pg_server, pg_db, pg_proxy, schedulers, tmp_path
) -> None:
    out = str(tmp_path / "runs.log")
    url = pg_server.url_for(pg_db, "127.0.0.1", pg_proxy.port)
    s = schedulers(2, store=url, lease=2.0)
    keys = ["a", "b", "c"]
    for k in keys:
        s.schedule_at_fixed_rate(tasks.mark, 0.05, args=(out, k), key=k)
    wait_until(lambda: {x.tag for x in starts(out)} >= set(keys), 30, "every task to run")
    pg_proxy.lose_commit_answers(1)  # the next COMMIT is done on the server; its answer never arrives
    wait_until(lambda: pg_proxy.commits_cut, 30, "a COMMIT to be cut")
    cut = time.time()
    try:
        wait_until(
            lambda: {x.tag for x in starts(out) if x.t > cut + 1.0} >= set(keys),
            5,
            "every task to run again after the store records again",
        )
    finally:
        stuck = {k for k in keys if not [x for x in starts(out) if x.tag == k and x.t > cut + 1.0]}
    assert not stuck, f"stuck after a lost COMMIT answer: {sorted(stuck)}"
