"""Schema 1 -> 2 on stores written by the previous release (real fixtures, SQLite and PostgreSQL).

The fixtures hold what a real program of commit 7945013 left when it was
killed with SIGKILL: keyed fixed-rate, fixed-delay (retried, failing), cron
(Europe/Paris, seconds), one-shot and paused tasks, a task that ended by
``max_runs`` (its history only), an unloadable one, and a run in flight
held by the dead instance.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest
import schema1

from procsched._errors import StoreError
from procsched._store import SCHEMA_VERSION, TaskDefinition, definition_hash, open_store

KINDS = ["sqlite", "postgresql"]


@pytest.fixture(params=KINDS)
def old_url(request, tmp_path):
    pg = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    return schema1.place(request.param, tmp_path, pg)


def _before(url: str) -> dict[str, object]:
    """What schema 1 holds, read with plain SQL before the migration."""
    return {
        "tasks": schema1.rows(
            url,
            "SELECT key, fn_ref, args, schedule, options, def_hash, run_count, next_due_ns, "
            "next_attempt, paused, last_outcome, unloadable, holder, token, updated_ns "
            "FROM procsched_tasks ORDER BY key",
        ),
        "runs": schema1.rows(
            url,
            "SELECT key, run, attempt, scheduled_ns, started_ns, finished_ns, host, pid, "
            "outcome, error_type, error_message, holder, token FROM procsched_runs "
            "ORDER BY key, run, attempt",
        ),
        "schedulers": schema1.rows(
            url, "SELECT id, token, host, pid, lease_ns, lease_until_ns, heartbeat_ns FROM procsched_schedulers"
        ),
        "fence": schema1.rows(url, "SELECT version, fence FROM procsched_version"),
    }


def test_a_schema_1_store_migrates_with_nothing_lost(old_url):
    before = _before(old_url)
    assert before["fence"][0][0] == 1
    store = open_store(old_url)
    try:
        assert store.schema_version() == SCHEMA_VERSION == 3
        loaded = store.load()
        tasks = {t.key: t for t in loaded.tasks}
        assert sorted(tasks) == [row[0] for row in before["tasks"]]
        assert set(tasks) == {"cron-paris", "flaky", "gone", "once-later", "paused", "slow", "tick"}
        for (
            key,
            fn_ref,
            args,
            sched,
            opts,
            def_hash,
            runs,
            due,
            attempt,
            paused,
            last,
            unloadable,
            holder,
            token,
            updated,
        ) in before["tasks"]:
            t = tasks[key]
            d = t.definition
            assert (d.fn_ref, d.args, d.def_hash) == (fn_ref, bytes(args), def_hash)
            import json

            assert (d.schedule, d.options) == (json.loads(sched), json.loads(opts))
            # the digest of a definition is unchanged by schema 2 (a restart sees the same task)
            assert definition_hash(d.fn_ref, d.args, d.schedule, d.options) == def_hash
            assert TaskDefinition(key, fn_ref, bytes(args), d.schedule, d.options).def_hash == def_hash
            assert (t.state.run_count, t.state.next_due_ns, t.state.next_attempt, t.state.paused) == (
                runs,
                due,
                attempt,
                bool(paused),
            )
            assert (t.last_outcome, t.unloadable, t.holder, t.token, t.updated_ns) == (
                last,
                unloadable,
                holder,
                token,
                updated,
            )
            assert t.in_flight == (1 if holder is not None else 0)
            assert t.untrusted is None and (d.max_concurrent, d.group) == (1, None)
        # every run, in flight too, with its new fields at their schema-1 meaning
        history = store.history(None, 10_000)
        assert sorted(
            (
                r.key,
                r.run,
                r.attempt,
                r.scheduled_ns,
                r.started_ns,
                r.finished_ns,
                r.host,
                r.pid,
                r.outcome,
                r.error_type,
                r.error_message,
                r.holder,
                r.token,
            )
            for r in history
        ) == [tuple(r) for r in before["runs"]]
        assert {r.cause for r in history} == {"schedule"} and not any(r.worker_pid for r in history)
        assert [(r.key, r.run) for r in loaded.in_flight] == [("slow", 1)]
        assert [
            (h.id, h.token, h.host, h.pid, h.lease_ns, h.lease_until_ns, h.heartbeat_ns) for h in loaded.schedulers
        ] == before["schedulers"]
        # the history of a task that ended ("limited", max_runs=3) is kept
        assert [r.run for r in store.history("limited")] == [1, 2, 3]
        # the totals of the stored tasks start from their history
        counts = store.counts()
        assert counts.runs["ok"] == sum(1 for r in before["runs"] if r[8] == "ok" and r[0] != "limited")
        assert counts.runs["error"] == sum(1 for r in before["runs"] if r[8] == "error") > 0
        assert counts.by_job["tick"][0]["ok"] == tasks["tick"].state.run_count
        assert counts.jobs == 7 and counts.instances == 1
        names = {j.key: j.name for j in store.jobs_view()}
        assert (names["tick"], names["flaky"], names["gone"], names["slow"]) == ("tick", "flaky", "gone", None)
        # a new registration's fencing token comes after the old ones
        me = store.register()
        assert me.token > before["fence"][0][1]
        # the dead instance is taken over: its run in flight crashes, once
        (dead,) = loaded.schedulers
        crashed = store.take_over(dead, me, force=True)
        assert [(r.key, r.run, r.outcome) for r in crashed] == [("slow", 1, "crashed")]
        slow = store.get("slow")
        assert (slow.in_flight, slow.holder, slow.last_outcome) == (0, None, "crashed")
        # and the tasks go on: the next run of tick is claimed and ended
        tick = tasks["tick"].state
        nxt = tick.run_count + 1
        assert store.claim_run(me, "tick", nxt, 1, tick.next_due_ns)
        assert not store.claim_run(store.register(), "tick", nxt, 1, tick.next_due_ns)  # never twice
        assert store.finish_run(me, "tick", nxt, 1, "ok", tick.next_due_ns + 1, tick.next_due_ns + 100_000_000)
        assert store.get("tick").state.run_count == nxt
        # an old slot is refused under a new number: the slot guard starts from the history
        assert not store.claim_run(me, "tick", nxt + 1, 1, tick.next_due_ns - 100_000_000)
    finally:
        store.close()
    # a second open finds schema 3 and changes nothing
    again = open_store(old_url)
    assert again.schema_version() == 3 and len(again.jobs()) == 7
    again.close()


def test_the_older_release_refuses_the_migrated_store(old_url):
    store = open_store(old_url)
    store.close()
    with pytest.raises(StoreError, match=r"schema version 3 .*upgrade procsched"):
        type("Schema1Reader", (type(store),), {"SCHEMA_VERSION": 1})(old_url)


def test_no_migration_under_a_live_older_instance(old_url):
    """An instance of the older release still running on the store (its
    lease alive, on another host) would fail every write after the
    migration: the migration is refused, nothing changes, until its lease ends."""
    now = time.time_ns()
    schema1.shift(old_url, now, lease_ended_ago_ns=-3600 * schema1.NS, host="elsewhere")
    with pytest.raises(StoreError, match=r"older procsched hold a live lease.*elsewhere/"):
        open_store(old_url)
    assert schema1.rows(old_url, "SELECT version FROM procsched_version") == [(1,)]
    schema1.shift(old_url, now)  # its lease ended a second ago
    store = open_store(old_url)
    assert store.schema_version() == 3
    store.close()


def test_two_instances_opening_a_schema_1_store_at_once(old_url):
    results: list[object] = []

    def opener() -> None:
        try:
            s = open_store(old_url)
            results.append((s.schema_version(), len(s.load().tasks)))
            s.close()
        except Exception as exc:  # noqa: BLE001 - reported below
            results.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == [(3, 7), (3, 7)]


@pytest.mark.timeout(60)
def test_a_real_scheduler_goes_on_from_a_schema_1_store(old_url, monkeypatch):
    """Today's Scheduler on the migrated store: it takes over the dead
    instance (the run in flight recorded crashed), resumes every stored
    task where it was (run numbers go on), and keeps the unloadable one."""
    monkeypatch.syspath_prepend(schema1.FIXTURES)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([schema1.FIXTURES, *sys.path]))
    import procsched

    schema1.shift(old_url, time.time_ns())
    before = {k: runs for k, runs in schema1.rows(old_url, "SELECT key, run_count FROM procsched_tasks")}
    went_on = threading.Event()

    def seen(event: dict) -> None:
        if event.get("name") == "tick" and event["run"] >= before["tick"] + 3:
            went_on.set()

    s = procsched.Scheduler(workers=2, store=old_url, lease=2.0)
    try:
        s.add_listener(seen, ["run_finished"])
        assert went_on.wait(30), "tick did not go on"
        assert "gone" in s.stats()["unloadable"]
    finally:
        s.shutdown(cancel_futures=True)  # (the one-shot is due in an hour: it stays stored)
    store = open_store(old_url)
    try:
        slow = [(r.run, r.outcome, r.error_type) for r in store.history("slow")]
        assert slow[0] == (1, "crashed", "SchedulerDied")
        tick = [r.run for r in store.history("tick", 10_000)]
        assert tick == sorted(set(tick)) and tick[: before["tick"]] == list(range(1, before["tick"] + 1))
        assert store.get("paused").state.paused
        assert store.get("gone").unloadable
    finally:
        store.close()
