"""Issue 20, "Runs twice or on two instances at once" (item 1): a fenced
instance starts, after SIGCONT, the runs it had been given ahead before it
was stopped - runs another instance has meanwhile recorded crashed and
retried. The promise: a run starts only while its claim is known valid.

Real instances (tests/campaign/instance.py) on a real PostgreSQL server
(the store's clock judges leases; on SQLite a stopped instance may hold the
file's write lock, a documented limit); every run appends a line to a log.
"""

from __future__ import annotations

import pytest

from tests.campaign import storesql
from tests.promises.helpers import log, make_fifo, release, starts, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
TASKS = "tests.promises.tasks"
RETRY = {"attempts": 3, "delay": 0, "on": ["crashed"]}


def test_a_fenced_instance_never_starts_the_runs_it_was_given_ahead_before_it_stopped(
    instances, pg_url, tmp_path
) -> None:
    out, fifo = str(tmp_path / "runs.log"), make_fifo(str(tmp_path / "hold"))
    fast = ["k1", "k2", "k3"]
    specs = [{"key": "long", "kind": "rate", "period": 0.5, "fn": f"{TASKS}:hold_first", "args": [out, fifo, "long"]}]
    specs += [
        {"key": k, "kind": "rate", "period": 0.1, "fn": f"{TASKS}:mark", "args": [out, k], "retry": RETRY} for k in fast
    ]
    # A: one worker, blocked in run 1 of "long" (on the FIFO): the fast tasks' runs are given ahead to it
    a = instances("A", {"store": pg_url, "lease": 1.0, "workers": 1, "tasks": specs}).ready()
    wait_until(lambda: [x for x in starts(out) if x.tag == "long"], 30, "A's worker to block in run 1 of long")
    in_flight = "SELECT key FROM procsched_runs WHERE outcome IS NULL"
    wait_until(
        lambda: {r[0] for r in storesql.query(pg_url, in_flight)} >= {"long", *fast},
        30,
        "A to claim a run of each fast task (given ahead, queued behind the blocked one)",
    )
    b = instances("B", {"store": pg_url, "lease": 1.0, "workers": 2}).ready()  # adopts the tasks, A holds them
    a.stop()  # A's whole tree, past its lease
    taken = "SELECT key, run, attempt FROM procsched_runs WHERE outcome = 'crashed' AND error_type = 'SchedulerDied'"
    crashed = wait_until(
        lambda: {r for r in storesql.query(pg_url, taken) if r[0] in fast},
        30,
        "B to take A over (A's runs given ahead recorded crashed)",
    )
    wait_until(
        lambda: [x for x in starts(out) if x.inst == "B" and x.tag in fast and x.attempt == 2], 30, "B to retry them"
    )
    a.cont()
    release(fifo)  # A's worker goes on: its run ends, then its queue
    end = wait_until(
        lambda: [x for x in log(out) if x.tag == "long" and x.ev == "end" and x.inst == "A"], 30, "A's long run to end"
    )[0]
    wait_until(lambda: len([x for x in starts(out) if x.t > end.t]) >= 10, 30, "runs to go on after it")
    for inst in (a, b):
        assert inst.quit()["closed"]
    again = [x for x in starts(out) if x.inst == "A" and (x.tag, x.run, x.attempt) in crashed]
    assert not again, (
        f"A started, after SIGCONT, runs B had recorded crashed (and retried): {again}; taken over: {sorted(crashed)}"
    )
    both = {(x.tag, x.run) for x in starts(out) if x.inst == "A"} & {
        (x.tag, x.run) for x in starts(out) if x.inst == "B"
    }
    assert not both, f"the same (key, run) ran on both instances: {sorted(both)}"
