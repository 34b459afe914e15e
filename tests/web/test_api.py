"""The JSON API and /metrics, over a running program and over a store
(DESIGN "The console": the paths and fields are the contract)."""

from __future__ import annotations

import os
import time
from datetime import datetime

import pytest
from web_helpers import lines, serve, store_source, wait_until

import procsched

JOB_FIELDS = {"key", "name", "state", "paused", "schedule", "next_run_at", "last_outcome"}
SLOT_FIELDS = {"run", "attempt", "outcome", "reason", "cause", "scheduled_at", "started_at", "finished_at"}


def by_name(served, name):
    return next(j for j in served.client.get("/api/jobs").json() if j["name"] == name)


def test_jobs_and_one_job(program):
    wait_until(
        lambda: (
            by_name(program, "fails")["last_outcome"] == "error" and by_name(program, "chatty")["last_outcome"] == "ok"
        ),
        what="a run of each",
    )
    jobs = program.client.get("/api/jobs").json()
    assert [j["name"] for j in jobs] == ["tick", "chatty", "fails"]
    for job in jobs:
        assert JOB_FIELDS <= set(job)
        assert job["key"] is None and job["ref"].startswith("~")
        assert job["state"] in ("pending", "running") and job["paused"] is False
        datetime.fromisoformat(job["next_run_at"])
    assert jobs[0]["schedule"] == "every 200 ms"
    fails = program.client.get(f"/api/jobs/{by_name(program, 'fails')['ref']}").json()
    assert JOB_FIELDS <= set(fails) and len(fails["next_slots"]) == 10
    run = [r for r in fails["runs"] if r["outcome"] is not None][-1]  # (the next run may be in flight)
    assert SLOT_FIELDS <= set(run)
    assert run["outcome"] == "error" and run["cause"] == "schedule" and run["error"] == "ValueError: bad luck"
    assert "ValueError: bad luck" in run["traceback"]
    assert datetime.fromisoformat(run["finished_at"]) >= datetime.fromisoformat(run["started_at"])
    chatty = program.client.get(f"/api/jobs/{by_name(program, 'chatty')['ref']}?limit=1").json()
    assert len(chatty["runs"]) == 1
    chatty = program.client.get(f"/api/jobs/{by_name(program, 'chatty')['ref']}?limit=3").json()
    done = [r for r in chatty["runs"] if r["outcome"] is not None][-1]  # (the newest may be in flight: seen on CI)
    assert "hello from chatty" in done["output"]
    assert program.client.get("/api/jobs?q=chat").json()[0]["name"] == "chatty"
    assert program.client.get("/api/jobs?state=paused").json() == []


def test_bad_requests_are_4xx_with_an_error(program):
    missing = program.client.get("/api/jobs/nope")
    assert missing.status_code == 404 and "nope" in missing.json()["error"]
    assert program.client.post("/api/jobs/nope/pause").status_code == 404
    assert program.client.post("/api/jobs/~1/explode").status_code == 404
    assert program.client.get("/api/jobs/~1?limit=0").status_code == 400
    for body, word in (
        ({"end": "2026-01-02T00:00:00Z"}, "start"),
        ({"start": "2026-01-01T00:00:00", "end": "2026-01-02T00:00:00Z"}, "start"),
        ({"start": "2026-01-01T00:00:00Z", "end": "soon"}, "end"),
        ({"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z", "dry_run": "yes"}, "dry_run"),
    ):
        answer = program.client.post("/api/jobs/~1/backfill", json=body)
        assert answer.status_code == 400 and word in answer.json()["error"], body
    assert program.client.post("/api/jobs/~1/backfill", content=b"[1]").status_code == 400


def test_pause_resume_cancel_through_the_api(program):
    ref = by_name(program, "tick")["ref"]
    wait_until(lambda: lines(program.log) >= 2, what="tick's runs")
    assert program.client.post(f"/api/jobs/{ref}/pause").json() == {"key": ref, "action": "pause", "ok": True}
    handle = program.scheduler.get(int(ref[1:]))
    wait_until(lambda: handle.state.value == "paused", what="the pause")
    job = by_name(program, "tick")
    assert job["state"] == "paused" and job["paused"] is True and job["next_run_at"] is None
    seen = lines(program.log)
    time.sleep(0.7)  # an absence: three periods of tick with no run
    assert lines(program.log) == seen
    assert program.client.post(f"/api/jobs/{ref}/pause").json()["ok"] is True  # paused already: still paused
    assert program.client.post(f"/api/jobs/{ref}/resume").json()["ok"] is True
    wait_until(lambda: lines(program.log) > seen, what="a run after the resume")
    assert program.client.post(f"/api/jobs/{ref}/cancel").json()["ok"] is True
    wait_until(lambda: by_name(program, "tick")["state"] == "cancelled", what="the cancel")
    assert program.client.post(f"/api/jobs/{ref}/cancel").status_code == 409


def test_run_now_and_backfill_refusals(program):
    body = {"start": "2026-01-01T00:00:02Z", "end": "2026-01-01T00:00:00Z", "dry_run": True}
    answer = program.client.post("/api/jobs/~1/backfill", json=body)
    assert 400 <= answer.status_code < 500 and "start must be before end" in answer.json()["error"]
    assert program.client.post("/api/jobs/nobody/run-now").status_code == 404


def test_run_now_and_backfill_through_the_api(program):
    ref = by_name(program, "tick")["ref"]
    wait_until(lambda: lines(program.log) >= 2, what="two scheduled runs")  # slots to backfill
    assert program.client.post(f"/api/jobs/{ref}/pause").json()["ok"] is True
    seen = lines(program.log)
    assert program.client.post(f"/api/jobs/{ref}/run-now").json()["ok"] is True
    wait_until(lambda: lines(program.log) == seen + 1, what="the manual run")
    runs = program.client.get(f"/api/jobs/{ref}").json()["runs"]
    assert runs[-1]["cause"] == "manual"
    start = runs[0]["scheduled_at"]
    body = {"start": start, "end": runs[-1]["scheduled_at"], "dry_run": True}
    slots = program.client.post(f"/api/jobs/{ref}/backfill", json=body).json()["slots"]
    assert slots and slots[0] == start
    done = program.client.post(f"/api/jobs/{ref}/backfill", json={**body, "dry_run": False}).json()
    assert done["slots"] == slots


def test_instances_workers_and_metrics(program):
    wait_until(lambda: by_name(program, "fails")["last_outcome"] == "error", what="a failed run")
    [instance] = program.client.get("/api/instances").json()
    assert instance["lease"] is None and instance["alive"] is True
    workers = program.client.get("/api/workers").json()
    assert len(workers) == 2 and all(w["pid"] and w["rss"] for w in workers)
    text = program.client.get("/metrics").text
    assert 'procsched_runs_total{job="fails",outcome="error"}' in text
    assert "procsched_workers_alive 2.0" in text
    assert "bad luck" not in text and "hello" not in text  # job names as labels, nothing else


# -- over a store -------------------------------------------------------------------


@pytest.fixture
def stored(tmp_path):
    """A program with a store (two keyed tasks) and a console over that store."""
    import web_jobs

    db = str(tmp_path / "jobs.db")
    log = str(tmp_path / "tick.log")
    s = procsched.Scheduler(workers=2, store=db, lease=1.5)
    tick = s.schedule_at_fixed_rate(web_jobs.mark, 0.2, args=(log,), key="tick")
    s.schedule_cron(web_jobs.tick, "0 3 * * *", tz="Europe/Berlin", key="nightly")
    served = serve(store_source(db))
    served.log, served.handle, served.scheduler = log, tick, s  # type: ignore[attr-defined]
    try:
        yield served
    finally:
        served.close()
        s.shutdown(wait=True, cancel_futures=True)


def test_store_jobs_and_history(stored):
    wait_until(lambda: len(stored.handle.runs) >= 2, what="two runs of tick")
    wait_until(lambda: by_name(stored, "tick")["last_outcome"] == "ok", what="tick's runs in the store")
    jobs = {j["key"]: j for j in stored.client.get("/api/jobs").json()}
    assert set(jobs) == {"nightly", "tick"}
    assert jobs["nightly"]["schedule"] == "at 03:00 Europe/Berlin, every day"
    assert jobs["tick"]["schedule"] == "every 200 ms"
    assert all(JOB_FIELDS <= set(j) for j in jobs.values())
    tick = stored.client.get("/api/jobs/tick").json()
    assert tick["function"] == "web_jobs:mark"
    assert tick["runs"] and tick["runs"][-1]["outcome"] in ("ok", None)
    assert all(SLOT_FIELDS <= set(r) for r in tick["runs"])
    [instance] = stored.client.get("/api/instances").json()
    assert instance["alive"] is True and instance["lease"] == 1.5
    text = stored.client.get("/metrics").text
    assert "procsched_store_jobs 2.0" in text and 'procsched_store_attempts_total{job="tick",outcome="ok"}' in text
    assert 'procsched_store_instances{lease="alive"} 1.0' in text


def test_store_pause_reaches_the_instance(stored):
    wait_until(lambda: lines(stored.log) >= 2, what="tick's runs")
    asked = time.monotonic()
    assert stored.client.post("/api/jobs/tick/pause").json()["ok"] is True
    wait_until(lambda: stored.handle.state.value == "paused", timeout=5, what="the instance following the pause")
    # Carried out at the instance's next re-read: lease/3 = 0.5 s here (DESIGN: <= 1 s), and a loaded machine's slack.
    assert time.monotonic() - asked < 1.5
    seen = lines(stored.log)
    time.sleep(0.7)  # an absence: three periods of tick with no run
    assert lines(stored.log) == seen
    assert by_name(stored, "tick")["state"] == "paused"
    assert stored.client.post("/api/jobs/tick/resume").json()["ok"] is True
    wait_until(lambda: lines(stored.log) > seen, timeout=5, what="a run after the resume")
    assert stored.client.post("/api/jobs/nightly/cancel").json()["ok"] is True
    assert [j["key"] for j in stored.client.get("/api/jobs").json()] == ["tick"]
    assert stored.client.get("/api/jobs/nightly").status_code == 404


@pytest.mark.timeout(30)
def test_store_run_now_is_carried_out_by_the_instance(stored):
    wait_until(lambda: lines(stored.log) >= 1, what="tick's first run")
    assert stored.client.post("/api/jobs/tick/pause").json()["ok"] is True
    wait_until(lambda: stored.handle.state.value == "paused", timeout=5, what="the instance following the pause")
    seen = lines(stored.log)
    started = time.monotonic()
    asked = stored.client.post("/api/jobs/tick/run-now").json()["request"]
    done = wait_until(
        lambda: (r := stored.client.get(f"/api/requests/{asked['id']}").json())["state"] == "done" and r,
        timeout=4,
        what="the instance's answer",
    )
    assert time.monotonic() - started < 1.5  # taken at the instance's next re-read (0.5 s here), carried out, answered
    wait_until(lambda: lines(stored.log) == seen + 1, timeout=4, what="the manual run")
    assert stored.client.get("/api/jobs/tick").json()["runs"][-1]["cause"] == "manual" and done["run"]


class _Trap:
    """Unpickling this creates a file: the console must never do it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_the_store_console_never_unpickles_a_payload(tmp_path):
    import pickle

    from procsched._store import TaskDefinition, TaskState, open_store

    db, trap = str(tmp_path / "trap.db"), str(tmp_path / "unpickled")
    store = open_store(db)
    store.register()  # an instance: the console reads its (empty) published status too
    batch = store.batch()
    schedule = {"kind": "fixed_rate", "period_ns": 10**9, "initial_delay_ns": 0, "misfire": "catch_up"}
    batch.upsert(
        TaskDefinition("trap", "web_jobs:tick", pickle.dumps(((_Trap(trap),), {})), schedule, {"name": "trap"}),
        TaskState(next_due_ns=time.time_ns()),
    )
    batch.commit()
    store.close()
    served = serve(store_source(db))
    try:
        for path in (
            "/api/jobs",
            "/api/jobs/trap",
            "/jobs/trap",
            "/",
            "/api/instances",
            "/workers",
            "/metrics",
            "/fragments/runs/trap",
        ):
            assert served.client.get(path).status_code == 200, path
        for action in ("pause", "resume", "run-now"):
            assert served.client.post(f"/api/jobs/trap/{action}").status_code in (200, 202), action
        body = {"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z", "dry_run": True}
        assert served.client.post("/api/jobs/trap/backfill", json=body).status_code == 202
    finally:
        served.close()
    assert not os.path.exists(trap)
