"""Real processes racing for claims of tasks with max_concurrent and a shared limit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from procsched._store import TaskDefinition, TaskState, open_store

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, HERE])}
P = 1_000_000
T0 = 1_700_000_000_000_000_000


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_three_processes_race_concurrent_runs_within_the_limits(store_url):
    """Three tasks of max_concurrent 2 in a group limited to 3, three
    racers each keeping up to two runs in flight: each run is won once, no
    task ever has more than 2 runs in flight, the group never more than 3."""
    nkeys, total = 3, 40
    store = open_store(store_url)
    store.set_limits({"g": 3})
    b = store.batch()
    for i in range(nkeys):
        b.upsert(
            TaskDefinition(
                f"k{i}", "store_funcs:plain", b"", {"kind": "fixed_rate", "period_ns": P}, max_concurrent=2, group="g"
            ),
            TaskState(next_due_ns=T0),
        )
    assert b.commit().ok
    racers = [
        subprocess.Popen(
            [sys.executable, os.path.join(HERE, "concurrency_racer.py"), store_url, str(nkeys), str(total)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        for _ in range(3)
    ]
    for r in racers:
        assert r.stdout.readline() == "ready\n"
    for r in racers:
        r.stdin.write("go\n")
        r.stdin.flush()
    results = [json.loads(r.communicate(timeout=240)[0]) for r in racers]
    assert all(r.returncode == 0 for r in racers)
    wins = [tuple(w) for res in results for w in res["won"]]
    assert len(wins) == len(set(wins)) == nkeys * total  # each run won exactly once
    assert max(res["task"] for res in results) <= 2
    assert max(res["group"] for res in results) <= 3
    assert sum(res["limited"] for res in results) > 0  # the limit was reached (and said so)
    for i in range(nkeys):
        hist = store.history(f"k{i}", 1000)
        assert [x.run for x in hist] == list(range(1, total + 1)) and all(x.outcome == "ok" for x in hist)
        t = store.get(f"k{i}")
        assert (t.in_flight, t.holder, t.state.run_count) == (0, None, total)
    store.close()


@pytest.mark.timeout(60)
def test_a_sigkill_never_leaks_a_unit_of_a_limit(store_url):
    """An instance SIGKILLed while its run holds the group's only unit: the
    unit counts until the instance is taken over (its lease, or - same
    host, its pid gone - at once), then it is free."""
    import signal

    from procsched._store import dead_here

    store = open_store(store_url)
    store.set_limits({"g": 1})
    b = store.batch()
    for key in ("held", "waiting"):
        b.upsert(TaskDefinition(key, "store_funcs:plain", b"", {"kind": "once"}, group="g"), TaskState(next_due_ns=T0))
    assert b.commit().ok
    child = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "limit_child.py"), store_url, "held"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    assert child.stdout.readline() == "claimed\n"
    child.send_signal(signal.SIGKILL)
    child.wait(30)
    me = store.register()
    b = store.batch(me)
    b.started("waiting", 1, 1, T0)
    assert b.commit().limited == [("waiting", 1, 1)]  # the dead instance's run still holds the unit
    (dead,) = dead_here(store.load().schedulers)
    crashed = store.take_over(dead, me, force=True)
    assert [(r.key, r.outcome, r.group) for r in crashed] == [("held", "crashed", "g")]
    b = store.batch(me)
    b.started("waiting", 1, 1, T0)
    assert b.commit().ok
    store.close()
