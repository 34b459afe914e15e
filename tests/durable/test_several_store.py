"""Several schedulers on one store, the store side (no scheduler processes):
the claim's slot guard, take-over with reschedule, the upsert guard, the
re-read, and ``procsched jobs`` naming the holder. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from procsched._store import TaskDefinition, TaskState
from tests.store.conftest import store as store
from tests.store.conftest import store_url as store_url

NS = 1_000_000_000
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _task(store, key="k", period=NS, due=10 * NS) -> TaskDefinition:
    d = TaskDefinition(
        key,
        "tests.durable.peer_jobs:mark",
        b"x",
        {"kind": "fixed_rate", "period_ns": period, "initial_delay_ns": 0, "misfire": "catch_up"},
    )
    b = store.batch()
    b.upsert(d, TaskState(0, due))
    b.commit()
    return d


def test_a_claim_of_a_slot_not_after_the_previous_runs_is_lost(store) -> None:
    _task(store)
    a, b = store.register(), store.register()
    assert store.claim_run(a, "k", 1, 1, 10 * NS)
    assert store.finish_run(a, "k", 1, 1, "ok", 11 * NS, 11 * NS)
    # b's core drifted: it has run 2 at the slot a ran as run 1
    assert not store.claim_run(b, "k", 2, 1, 10 * NS)
    assert store.claim_run(b, "k", 2, 1, 11 * NS)


def test_take_over_reschedules_in_its_own_transaction(store) -> None:
    _task(store)
    dead, me = store.register(lease_ns=1), store.register()
    assert store.claim_run(dead, "k", 1, 1, 10 * NS)
    seen = []

    def reschedule(task, crashed, slot):
        seen.append((task.key, task.holder, crashed.run, crashed.outcome))
        assert slot is None  # (a first attempt: its own slot is the regular one)
        return {"run_count": crashed.run, "next_attempt": 1, "next_due_ns": crashed.scheduled_ns + NS}

    runs = store.take_over(dead, me, reschedule=reschedule)
    assert [r.outcome for r in runs] == ["crashed"] and seen == [("k", None, 1, "crashed")]
    st = store.get("k").state
    assert (st.run_count, st.next_attempt, st.next_due_ns) == (1, 1, 11 * NS)
    assert store.take_over(dead, me, reschedule=reschedule) is None  # once


def test_take_over_gives_a_crashed_retry_its_runs_regular_slot(store) -> None:
    """The grid goes on from the regular slot of a crashed retry's run, not
    from the retry's time (the fault campaign, seed 2503)."""
    _task(store)
    dead, me = store.register(lease_ns=1), store.register()
    assert store.claim_run(dead, "k", 1, 1, 10 * NS)
    assert store.finish_run(dead, "k", 1, 1, "error", 10 * NS + 5, 10 * NS + 300, retry=True)
    assert store.claim_run(dead, "k", 1, 2, 10 * NS + 300)
    seen = []
    store.take_over(dead, me, reschedule=lambda task, crashed, slot: seen.append((crashed.attempt, slot)) or {})
    assert seen == [(2, 10 * NS)]


def test_an_upsert_from_a_scheduler_behind_the_claims_keeps_the_stored_state(store) -> None:
    d = _task(store)
    a = store.register()
    assert store.claim_run(a, "k", 1, 1, 10 * NS)
    b = store.batch()
    b.upsert(d, TaskState(0, 99 * NS))  # adopted before run 1 was claimed
    b.commit()
    st = store.get("k").state
    assert (st.run_count, st.next_due_ns) == (1, 10 * NS)
    assert store.finish_run(a, "k", 1, 1, "ok", 11 * NS, 11 * NS)
    b = store.batch()
    b.upsert(d, TaskState(1, 12 * NS))  # up to date: written
    b.commit()
    assert store.get("k").state.next_due_ns == 12 * NS


def test_peers_view_shows_changes_count_and_schedulers(store) -> None:
    me = store.register()
    t0 = store.now_ns()
    _task(store, "k1")
    changed, count, holders, now = store.peers_view(t0)
    assert [t.key for t in changed] == ["k1"] and count == 1 and [h.id for h in holders] == [me.id] and now >= t0
    b = store.batch()
    b.delete("k1")
    b.commit()
    assert store.peers_view(now)[:2] == ([], 0) and store.keys() == set()


def test_procsched_jobs_names_the_scheduler_holding_a_run(store, store_url) -> None:
    _task(store)
    a = store.register(host="hostA", pid=4242)
    assert store.claim_run(a, "k", 1, 1, 10 * NS)
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run(
        [sys.executable, "-m", "procsched", "jobs", "--store", store_url, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["held_by"] == {
        "host": "hostA",
        "pid": 4242,
        "registered": True,
        "lease": "alive",
        "process": None,  # (another host: its process is not known here)
    }
    table = subprocess.run(
        [sys.executable, "-m", "procsched", "jobs", "--store", store_url],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    ).stdout
    assert "held_by" in table and "hostA/4242" in table
