"""The console over a store's read model and control channel, on SQLite and
PostgreSQL: every field a store keeps reaches the API and the pages, and run
now / backfill are asked of the instance that runs the job, their state and
answer shown. No scheduler runs here: the history is written as an instance
writes it, and the test plays the instance's side of a request with the
store's own calls (take_requests, a batch's answer) - what the runtime does
at its re-read (end to end, with real instances: test_browser.py,
test_api.py and tests/control_store/)."""

from __future__ import annotations

import html
import os
import socket
from datetime import UTC, datetime

import pytest
from web_helpers import MINUTE, NS, T0, add_job, serve, store_source, stored_history

from procsched._store import open_store

ME = f"{socket.gethostname()}/{os.getpid()}"


def utc(ns: int) -> str:
    return datetime.fromtimestamp(ns / NS, UTC).isoformat(timespec="milliseconds")


@pytest.fixture
def console(store_url):
    served = serve(store_source(store_url))
    try:
        yield served
    finally:
        served.close()


@pytest.fixture
def instance(store_url):
    """The store as the instance that runs the jobs opens it."""
    store = open_store(store_url)
    try:
        yield store
    finally:
        store.close()


def test_a_job_shows_its_runs_and_skipped_slots_as_the_store_keeps_them(instance, console):
    stored_history(instance)
    job = console.client.get("/api/jobs/report").json()
    assert [(s["run"], s["outcome"], s["cause"], s["reason"]) for s in job["slots"]] == [
        (1, "ok", "schedule", None),
        (None, "skipped", None, "overlap"),
        (2, "error", "manual", None),
        (3, "cancelled", "schedule", "replaced"),
        (None, "skipped", None, "down"),
        (4, None, "schedule", None),
    ]
    assert [r["run"] for r in job["runs"]] == [1, 2, 3, 4]
    ok, failed = job["runs"][0], job["runs"][1]
    assert (ok["worker"], ok["instance"], ok["output"]) == ("4242", ME, "hello from report\n")
    assert (ok["scheduled_at"], ok["started_at"], ok["duration"]) == (utc(T0), utc(T0 + 2_000_000), 0.05)
    assert failed["error"] == "ValueError: bad luck" and failed["traceback"].endswith("ValueError: bad luck\n")
    assert job["slots"][1]["scheduled_at"] == utc(T0 + MINUTE) and job["slots"][1]["instance"] == ME
    assert job["totals"] == {
        "runs": {"ok": 1, "error": 1, "crashed": 0, "timeout": 0, "cancelled": 1},
        "skipped": {"overlap": 1, "misfire": 0, "late": 0, "paused": 0, "down": 1},
    }
    assert job["function"] == "web_jobs:tick" and job["state"] == "running" and job["held_by"] == ME
    assert job["next_slots"][:2] == [utc(T0 + 5 * MINUTE), utc(T0 + 6 * MINUTE)]
    assert len(console.client.get("/api/jobs/report?limit=2").json()["slots"]) == 2
    listed = {j["key"]: j for j in console.client.get("/api/jobs").json()}
    assert (listed["report"]["state"], listed["report"]["held_by"], listed["report"]["kept_by"]) == ("running", ME, ME)
    assert (listed["other"]["state"], listed["other"]["held_by"], listed["other"]["next_run_at"]) == (
        "paused",
        None,
        None,
    )
    page = console.client.get("/jobs/report").text
    for shown in ("bad luck", "replaced", "overlap", "down", "manual", "hello from report", "4243", "1 cancelled"):
        assert shown in page, shown


def test_instances_workers_and_metrics_from_the_store(instance, console):
    stored_history(instance)
    [shown] = console.client.get("/api/instances").json()
    assert (shown["host"], shown["pid"], shown["alive"], shown["lease"]) == (
        socket.gethostname(),
        os.getpid(),
        True,
        3600.0,
    )
    assert (shown["holding"], shown["keeping"], shown["standby"], shown["runner"]) == (
        ["report"],
        1,
        ["other"],
        "processes",
    )
    assert [(w["pid"], w["rss"], w["runs"], w["restarts"]) for w in console.client.get("/api/workers").json()] == [
        (4242, 30 << 20, 3, 0),
        (4243, None, 2, 1),
    ]
    assert "4243" in console.client.get("/workers").text and "other" in console.client.get("/instances").text
    text = console.client.get("/metrics").text
    for line in (
        "procsched_store_jobs 2.0",
        'procsched_store_instances{lease="alive"} 1.0',
        'procsched_store_attempts_total{job="report",outcome="error"} 1.0',
        'procsched_skipped_slots_total{job="report",reason="overlap"} 1.0',
        'procsched_skipped_slots_total{job="report",reason="down"} 1.0',
    ):
        assert line in text.splitlines(), line
    assert 'outcome="crashed"' not in text  # zero counts are left out: 10,000 jobs x 5 outcomes of zeros
    assert "bad luck" not in text and "hello" not in text


def test_an_instance_that_publishes_nothing_shows_no_workers(instance, console):
    instance.register()
    [shown] = console.client.get("/api/instances").json()
    assert shown["workers"] is None and shown["alive"] is True
    assert "published no workers" in console.client.get("/workers").text


def _answer(instance, me, ident, **answer):
    [taken] = instance.take_requests(me, {"report"})
    assert taken.id == ident
    batch = instance.batch(me)
    batch.answer(ident, **answer)
    assert batch.commit().ok


def test_run_now_is_asked_of_the_instance_and_its_answer_shown(instance, console):
    add_job(instance)
    answer = console.client.post("/api/jobs/report/run-now")
    assert answer.status_code == 202
    asked = answer.json()["request"]
    assert (asked["kind"], asked["state"], asked["key"]) == ("run_now", "asked", "report")
    recorded = instance.request(asked["id"])  # in the store, for the instance that runs the job
    assert (recorded.key, recorded.kind, recorded.done) == ("report", "run_now", False)
    assert recorded.asked_by == f"console {ME}"
    fragment = console.client.get(f"/fragments/requests/{asked['id']}").text
    assert "waiting for the instance that runs report" in fragment and 'hx-trigger="pschange' in fragment
    me = instance.register()
    [taken] = instance.take_requests(me, {"report"})
    shown = console.client.get(f"/api/requests/{asked['id']}").json()
    assert (shown["state"], shown["taken_by"]) == ("taken", ME)
    batch = instance.batch(me)  # carried out: the manual run's claim and the answer, one transaction
    batch.started("report", 1, 1, T0, cause="manual")
    batch.answer(taken.id, result={"run": 1})
    assert batch.commit().ok
    shown = console.client.get(f"/api/requests/{asked['id']}").json()
    assert (shown["state"], shown["run"], shown["error"]) == ("done", 1, None)
    fragment = console.client.get(f"/fragments/requests/{asked['id']}").text
    assert "started a run now: run 1" in fragment and "hx-trigger" not in fragment  # done: it stops following
    assert console.client.get("/api/jobs/report").json()["runs"][-1]["cause"] == "manual"

    refused = console.client.post("/api/jobs/report/run-now").json()["request"]
    _answer(instance, me, refused["id"], result={"accepted": False})
    shown = console.client.get(f"/api/requests/{refused['id']}").json()
    assert shown["state"] == "refused" and "overlap policy" in shown["error"]
    assert console.client.post("/api/jobs/nope/run-now").status_code == 404
    assert console.client.get("/api/requests/999999").status_code == 404


def test_backfill_dry_run_then_backfill_through_the_store(instance, console):
    add_job(instance)
    me = instance.register()
    body = {"start": utc(T0), "end": utc(T0 + 3 * MINUTE), "dry_run": True}
    answer = console.client.post("/api/jobs/report/backfill", json=body)
    assert answer.status_code == 202
    dry = answer.json()
    assert (dry["dry_run"], dry["slots"], dry["request"]["state"]) == (True, None, "asked")
    recorded = instance.request(dry["request"]["id"])
    assert (recorded.kind, recorded.start_ns, recorded.end_ns, recorded.dry_run) == (
        "backfill",
        T0,
        T0 + 3 * MINUTE,
        True,
    )
    slots = [T0, T0 + MINUTE, T0 + 2 * MINUTE]
    _answer(instance, me, recorded.id, result=slots)
    shown = console.client.get(f"/api/requests/{recorded.id}").json()
    assert (shown["state"], shown["slots"], shown["count"]) == ("done", [utc(t) for t in slots], 3)
    fragment = console.client.get(f"/fragments/requests/{recorded.id}").text
    assert "3 slot(s) would run" in fragment and "Run these 3 slot(s)" in fragment  # the confirmation
    done = console.client.post("/api/jobs/report/backfill", json={**body, "dry_run": False}).json()
    _answer(instance, me, done["request"]["id"], error="a fixed-delay task has no slots to backfill")
    shown = console.client.get(f"/api/requests/{done['request']['id']}").json()
    refused = ("refused", False, "a fixed-delay task has no slots to backfill")
    assert (shown["state"], shown["dry_run"], shown["error"]) == refused
    backwards = {**body, "start": body["end"], "end": body["start"]}
    answer = console.client.post("/api/jobs/report/backfill", json=backwards)
    assert answer.status_code == 400 and "before end" in answer.json()["error"]
    assert console.client.post("/api/jobs/nope/backfill", json=body).status_code == 404


def test_pause_resume_cancel_through_the_store_and_what_the_store_refuses(instance, console):
    add_job(instance)
    mark = console.console.live.source.change_mark()
    assert console.client.post("/api/jobs/report/pause").json()["ok"] is True
    assert instance.get("report").state.paused  # the write every instance follows at its re-read
    assert console.console.live.source.change_mark() != mark  # the live pages see it
    assert console.client.post("/api/jobs/report/pause").json()["ok"] is True  # paused already: paused
    assert console.client.post("/api/jobs/report/resume").json()["ok"] is True
    answer = console.client.post("/api/jobs/report/resume")
    assert answer.status_code == 409 and "not paused" in answer.json()["error"]
    assert console.client.post("/api/jobs/report/cancel").json()["ok"] is True
    assert instance.get("report") is None and console.client.get("/api/jobs").json() == []
    for action in ("pause", "resume", "cancel", "run-now"):
        assert console.client.post(f"/api/jobs/report/{action}").status_code == 404, action


def test_the_pages_name_the_store_as_given_never_with_its_password(store_url):
    given = f"{store_url}&password=hunter2" if "://" in store_url else store_url
    shown = html.escape(f"store {given.replace('hunter2', '***')}")
    served = serve(store_source(given))
    try:
        for path in ("/", "/instances", "/workers"):
            page = served.client.get(path).text
            assert shown in page and "hunter2" not in page, path
    finally:
        served.close()
