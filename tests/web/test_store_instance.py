"""What a real instance records in its store, as the console over the store
shows it (``procsched web --store``), on SQLite and PostgreSQL: a run's
output, traceback and worker pid (in flight too), and the instance's
workers - pid, RSS, runs, restarts - published with its lease."""

from __future__ import annotations

import os
import socket
import tempfile
from typing import Any

import pytest
import web_jobs
from web_helpers import T0, add_job, serve, store_source, wait_until

import procsched
from procsched._store import InstanceStatus, WorkerStatus, open_store


def run_of(served: Any, key: str, outcome: str | None) -> dict[str, Any] | None:
    """The newest run of ``key`` with ``outcome`` the store shows, if any."""
    answer = served.client.get(f"/api/jobs/{key}")
    if answer.status_code == 404:
        return None  # not written yet
    runs = answer.json()["runs"]
    return next((r for r in reversed(runs) if r["outcome"] == outcome), None)


def worker_pids(s: procsched.Scheduler) -> set[int]:
    return {w["pid"] for w in s.stats()["workers"] if w["pid"] is not None}


@pytest.mark.timeout(90)
def test_a_real_instance_records_output_tracebacks_worker_pids_and_its_workers(store_url):
    gate = socket.socket(socket.AF_UNIX)  # "held" runs until it is closed
    where = tempfile.mkdtemp(prefix="psch-gate-")  # (a short path: a socket's is at most 107 bytes)
    gate.bind(os.path.join(where, "gate"))
    gate.listen()
    # A lease of 0.6 s: the instance publishes its status every 0.2 s (a third of it).
    s = procsched.Scheduler(workers=2, store=store_url, capture_output=True, lease=0.6)
    served = serve(store_source(store_url))
    running = None  # held's connection, once it has started
    try:
        chatty = s.schedule_at_fixed_rate(web_jobs.chatty, 0.2, key="chatty")
        s.schedule_at_fixed_rate(web_jobs.fails, 0.3, key="fails")
        s.schedule_at_fixed_rate(web_jobs.crash, 3600, key="crash")
        s.schedule_at_fixed_rate(web_jobs.wait, 3600, args=(gate.getsockname(),), key="held")

        def printed() -> dict[str, Any] | None:
            """chatty's newest run the store shows ended, once its handle has it too."""
            run = run_of(served, "chatty", "ok")
            return run if run is not None and any(r.run == run["run"] for r in chatty.runs) else None

        # What the instance captured (its handle's RunInfo.output) is what the store keeps.
        ok = wait_until(lambda: (run := printed()) and run["output"] and run, what="chatty's output in the store")
        captured = {r.run: r.output or None for r in chatty.runs}
        assert ok["output"] == captured[ok["run"]] == "hello from chatty\nto stderr\n", (ok, captured)
        failed = wait_until(lambda: run_of(served, "fails", "error"), what="fails' run in the store")
        assert failed["error"] == "ValueError: bad luck"
        assert 'raise ValueError("bad luck")' in failed["traceback"] and failed["output"] is None
        crashed = wait_until(lambda: run_of(served, "crash", "crashed"), what="crash's run in the store")
        gate.settimeout(30)
        running, _ = gate.accept()  # held has started: its worker says which it is
        with running.makefile() as said:
            pid = said.readline().strip()
        # In flight, its row names that worker - also when it was given ahead to another first
        # and taken back before it started (the row named the first until its end: seen in CI).
        held = wait_until(
            lambda: (run := run_of(served, "held", None)) and run["worker"] == pid and run,
            what=f"held's run in flight, on worker {pid}",
        )
        # Each run names its worker: a pid, the pid of one of the instance's workers at the time.
        for run in (ok, failed, crashed, held):
            assert run["worker"] is not None and run["worker"].isdigit(), run
        assert int(held["worker"]) in worker_pids(s)  # in flight: the worker it was given to, still there

        def published() -> list[dict[str, Any]] | None:
            workers = served.client.get("/api/workers").json()
            pids = {w["pid"] for w in workers}
            restarted = sum(w["restarts"] for w in workers) >= 1
            return workers if restarted and pids == worker_pids(s) else None

        workers = wait_until(published, what="the instance's workers after the crash, published with its lease")
        assert len(workers) == 2
        assert all(w["rss"] > 1 << 20 and w["state"] == "alive" for w in workers), workers
        assert all(type(w["runs"]) is int for w in workers)  # (a worker's runs: since it started)
        assert int(crashed["worker"]) not in {w["pid"] for w in workers}  # the crashed worker was replaced
        page = served.client.get("/workers").text
        assert all(str(w["pid"]) in page for w in workers) and "MiB" in page
        page = served.client.get("/jobs/chatty").text
        assert "hello from chatty" in page and ok["worker"] in page
        assert "bad luck" in served.client.get("/jobs/fails").text

        running.close()
        done = wait_until(lambda: run_of(served, "held", "ok"), what="held's end in the store")
        assert done["worker"] == held["worker"]
    finally:
        gate.close()
        if running is not None:
            running.close()
        served.close()
        s.shutdown(wait=True, cancel_futures=True)
        os.unlink(os.path.join(where, "gate"))
        os.rmdir(where)


def test_a_batch_publishes_the_status_with_its_heartbeat_or_on_its_own(store_url):
    """``Batch.publish``: with the lease a batch of claims renews (one
    statement), or in a statement of its own in a batch of other changes;
    a failed batch's status goes on with the one that carries it."""
    store = open_store(store_url)
    served = serve(store_source(store_url))
    try:
        add_job(store)
        me = store.register()
        first = InstanceStatus((WorkerStatus(11, 1 << 20, 1, 0),), runner="processes")
        batch = store.batch(me)
        batch.started("report", 1, 1, T0, worker_pid=11)
        batch.publish(first)
        assert batch.commit().ok
        assert [(w["pid"], w["runs"]) for w in served.client.get("/api/workers").json()] == [(11, 1)]
        assert served.client.get("/api/jobs/report").json()["runs"][0]["worker"] == "11"
        second = InstanceStatus((WorkerStatus(12, None, 0, 1),), ("report",), 1, "processes")
        batch = store.batch(me)
        batch.update("report", paused=True)  # not fenced: no lease renewal
        batch.publish(second)
        later = store.batch(me)
        later.carry(batch)
        assert later.status == second
        assert later.commit().ok
        [shown] = served.client.get("/api/instances").json()
        assert shown["standby"] == ["report"] and [w["pid"] for w in shown["workers"]] == [12]
        with pytest.raises(TypeError, match="status must be an InstanceStatus"):
            store.batch(me).publish({"workers": []})  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="needs a batch made with the scheduler's holder"):
            store.batch().publish(second)
    finally:
        served.close()
        store.close()


@pytest.mark.timeout(90)
def test_a_run_taken_back_from_a_busy_worker_names_the_worker_that_runs_it(store_url):
    """A keyed run given ahead to a busy worker, taken back before it
    started and run by the other worker once that one was free: its row in
    flight named the first worker until its end (seen in CI: the console
    showed a worker that was not running it). It names the one running it.
    Real workers; each gated run says its worker's pid on a socket."""
    where = tempfile.mkdtemp(prefix="psch-gate-")
    gates = {}
    for name in ("a", "b", "k"):
        gates[name] = socket.socket(socket.AF_UNIX)
        gates[name].bind(os.path.join(where, name))
        gates[name].listen()
        gates[name].settimeout(30)
    conns: dict[str, socket.socket] = {}

    def started(name: str) -> int:
        conns[name], _ = gates[name].accept()
        with conns[name].makefile() as said:
            return int(said.readline())

    s = procsched.Scheduler(workers=2, store=store_url, lease=0.6)
    store = open_store(store_url)
    try:
        s.schedule(web_jobs.wait, args=(os.path.join(where, "a"),))
        s.schedule(web_jobs.wait, args=(os.path.join(where, "b"),))
        busy = {"a": started("a"), "b": started("b")}  # both workers run a gated run
        s.schedule_at_fixed_rate(web_jobs.wait, 3600, args=(os.path.join(where, "k"),), key="k")

        def in_flight() -> int | None:
            runs = [r for r in store.load().in_flight if r.key == "k"]
            return runs[0].worker_pid if runs else None

        given = wait_until(in_flight, what="k's run claimed, given ahead to a busy worker")
        assert given in busy.values()
        other = next(name for name, pid in busy.items() if pid != given)
        conns[other].close()  # the other worker is free: it takes k's run over
        ran = started("k")
        assert ran == busy[other] != given
        wait_until(lambda: in_flight() == ran, what=f"k's row in flight naming worker {ran}")
        conns["k"].close()
        done = wait_until(lambda: [r for r in store.history("k") if r.outcome == "ok"], what="k's end")
        assert done[0].worker_pid == ran
    finally:
        for sock in (*conns.values(), *gates.values()):
            sock.close()
        s.shutdown(wait=True, cancel_futures=True)
        store.close()
        for name in gates:
            os.unlink(os.path.join(where, name))
        os.rmdir(where)
