"""``procsched pause | resume | cancel | run-now KEY --store S`` (control from
outside, DESIGN part three) and what ``jobs`` / ``history`` read, on SQLite
and PostgreSQL. No scheduler runs here: where a request needs an answer, a
thread plays the instance that runs the task, with the store's own calls
(it takes the request at its re-read and answers it in a batch) - what the
runtime does once issue 22 wires it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
import time

import pytest
from cli_helpers import NS, T0, cli_here, fill_store

from procsched._store import open_store

ME = f"{socket.gethostname()}/{os.getpid()}"


@pytest.fixture
def store(store_url):
    s = open_store(store_url)
    try:
        yield s
    finally:
        s.close()


def lines_of(done) -> list[str]:
    return done.stdout.splitlines()


def test_pause_resume_cancel(store, store_url):
    fill_store(store)
    done = cli_here("pause", "report", "--store", store_url)
    assert (done.returncode, done.stderr) == (0, "")
    assert lines_of(done) == ["procsched: paused 'report': the instance that runs it follows within a second"]
    assert store.get("report").state.paused
    done = cli_here("pause", "report", "--store", store_url, "--json")
    assert json.loads(done.stdout) == {"key": "report", "action": "pause", "ok": True, "changed": False}
    assert cli_here("resume", "report", "--store", store_url).stdout.startswith("procsched: resumed 'report'")
    assert not store.get("report").state.paused
    done = cli_here("resume", "report", "--store", store_url)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "procsched: cannot resume 'report': it is not paused\n"
    done = cli_here("cancel", "idle", "--store", store_url)
    assert done.returncode == 0 and "its history is kept" in done.stdout and store.get("idle") is None
    for action in ("pause", "resume", "cancel", "run-now"):
        done = cli_here(action, "idle", "--store", store_url)
        assert done.returncode == 1, action
        assert done.stderr == "procsched: no task 'idle' in the store (see procsched jobs --store ...)\n", action


def _instance(url: str, answer: dict, ready: threading.Event, box: list) -> threading.Thread:
    """A thread that registers on the store, takes the first request for
    "report" (re-reading every 50 ms, as an instance re-reads its store)
    and answers it with ``answer``."""

    def run() -> None:
        with open_store(url) as store:
            me = store.register()
            ready.set()
            deadline = time.monotonic() + 20
            while not (taken := store.take_requests(me, {"report"})):
                assert time.monotonic() < deadline, "no request came"
                time.sleep(0.05)
            batch = store.batch(me)
            if "result" in answer:
                batch.started("report", 3, 1, T0 + 150 * NS, cause="manual")
            batch.answer(taken[0].id, **answer)
            assert batch.commit().ok
            box.append(taken[0])

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_run_now_asks_and_waits_for_the_answer(store, store_url):
    fill_store(store)
    done = cli_here("run-now", "report", "--store", store_url)
    assert done.returncode == 0 and done.stderr == ""
    [line] = lines_of(done)
    ident = int(line.split("(request ")[1].split(")")[0])
    assert line == (
        f"procsched: asked the instance that runs 'report' to run it now (request {ident}); it starts the "
        "run within a second (--wait S waits for its answer)"
    )
    asked = store.request(ident)
    assert (asked.key, asked.kind, asked.asked_by, asked.done) == ("report", "run_now", f"cli {ME}", False)

    me = store.register()  # the instance that runs it takes the request at its re-read, and says it was not run
    [taken] = store.take_requests(me, {"report"})
    assert store.answer(me, taken.id, result={"accepted": False})

    ready, box = threading.Event(), []
    instance = _instance(store_url, {"result": {"run": 3}}, ready, box)
    try:
        done = cli_here("run-now", "report", "--store", store_url, "--wait", "20", "--json")
    finally:
        instance.join(30)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert (answer["ok"], answer["request"]["state"], answer["request"]["run"]) == (True, "done", 3)
    assert answer["request"]["id"] == box[0].id != ident
    assert [(r.run, r.cause) for r in store.history("report")][-1] == (3, "manual")


def test_run_now_refused_or_not_answered(store, store_url):
    fill_store(store)
    ready, box = threading.Event(), []
    instance = _instance(store_url, {"error": "its overlap policy (skip) skipped it"}, ready, box)
    try:
        done = cli_here("run-now", "report", "--store", store_url, "--wait", "20")
    finally:
        instance.join(30)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"procsched: 'report' was not run now: its overlap policy (skip) skipped it (request {box[0].id})\n"
    )
    started = time.monotonic()
    done = cli_here("run-now", "report", "--store", store_url, "--wait", "0.3")
    assert time.monotonic() - started < 5
    assert done.returncode == 3 and done.stdout == "" and done.stderr.count("\n") == 1
    ident = int(done.stderr.split("request ")[1].split(" ")[0])
    assert "no instance took it" in done.stderr and "it stands" in done.stderr
    assert not store.request(ident).done and store.request(ident).taken_by is None  # it stands
    done = cli_here("run-now", "report", "--store", store_url, "--wait", "nope")
    assert done.returncode == 2 and "--wait" in done.stderr


def test_jobs_and_history_show_what_the_store_keeps(store, store_url):
    fill_store(store)
    table = lines_of(cli_here("jobs", "--store", store_url))
    assert table[0].split() == ["key", "schedule", "state", "next_run", "runs", "last_outcome", "held_by", "unloadable"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    # (the manual run 2 did not move the next slot: the one after run 1)
    assert rows["report"][:7] == ["report", "every", "60s", "pending", "2026-09-21T14:14:20.000Z", "2", "error"]
    assert rows["idle"][3] == "paused"
    jobs = {j["key"]: j for j in map(json.loads, lines_of(cli_here("jobs", "--store", store_url, "--json")))}
    assert (jobs["report"]["state"], jobs["report"]["kept_by"]["pid"], jobs["idle"]["paused"]) == (
        "pending",
        os.getpid(),
        True,
    )

    history = lines_of(cli_here("history", "report", "--store", store_url))
    assert history[0].split() == [
        "key",
        "run",
        "attempt",
        "cause",
        "scheduled",
        "finished",
        "outcome",
        "reason",
        "instance",
        "worker",
        "error",
    ]
    assert [line.split()[:4] + line.split()[6:] for line in history[1:]] == [
        ["report", "1", "1", "schedule", "ok", "-", ME, "4242", "-"],
        ["report", "2", "1", "manual", "error", "-", ME, "4242", "ValueError:", "bad", "luck"],  # one line each
    ]
    skipped = lines_of(cli_here("history", "report", "--store", store_url, "--skipped"))
    assert [line.split()[6:8] for line in skipped[1:]] == [["ok", "-"], ["skipped", "overlap"], ["error", "-"]]
    assert skipped[2].split()[4] == "2026-09-21T14:14:20.000Z"
    records = [json.loads(line) for line in lines_of(cli_here("history", "--store", store_url, "--skipped", "--json"))]
    assert [(r["run"], r["outcome"], r["reason"], r["cause"]) for r in records] == [
        (1, "ok", None, "schedule"),
        (None, "skipped", "overlap", None),
        (2, "error", None, "manual"),
    ]
    assert records[2]["worker_pid"] == 4242 and records[2]["traceback"].endswith("ValueError: bad\nluck\n")
    assert records[1]["instance"] == {"host": socket.gethostname(), "pid": os.getpid()}
    assert (
        lines_of(cli_here("history", "report", "--store", store_url, "-n", "1", "--skipped"))[1].split()[6] == "error"
    )
    done = cli_here("history", "nope", "--store", store_url)
    assert done.returncode == 1 and done.stdout == "" and "no task 'nope'" in done.stderr


def test_a_snapshot_on_a_read_only_file_system_is_listed(tmp_path):
    """As root chmod stops nothing: the listing runs in a child that dropped to ``nobody``."""
    import pwd

    path = str(tmp_path / "s.db")
    with open_store(path) as store:
        fill_store(store)
    snap = tempfile.mkdtemp(prefix="procsched-snap-")  # (pytest's tmp dirs are root's only)
    shutil.copy(path, os.path.join(snap, "s.db"))
    os.chmod(os.path.join(snap, "s.db"), 0o444)
    os.chmod(snap, 0o555)
    try:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: drop root, list, report, leave at once
            code = 99
            try:
                os.close(r)
                if os.geteuid() == 0:
                    nobody = pwd.getpwnam("nobody")
                    os.setgroups([])
                    os.setgid(nobody.pw_gid)
                    os.setuid(nobody.pw_uid)
                out = [
                    cli_here(*argv, "--store", os.path.join(snap, "s.db"))
                    for argv in (["jobs"], ["history", "report", "--skipped"])
                ]
                os.write(w, json.dumps([(d.returncode, d.stdout, d.stderr) for d in out]).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            listed = json.loads(f.read() or b"null")
        assert os.waitpid(pid, 0)[1] == 0
        assert listed is not None
        (jobs_code, jobs, jobs_err), (history_code, history, history_err) = listed
        assert (jobs_code, jobs_err, history_code, history_err) == (0, "", 0, "")
        assert [line.split()[0] for line in jobs.splitlines()] == ["key", "idle", "report"]
        assert [line.split()[6] for line in history.splitlines()[1:]] == ["ok", "skipped", "error"]
        assert sorted(os.listdir(snap)) == ["s.db"]  # nothing created beside it
    finally:
        os.chmod(snap, 0o755)
        shutil.rmtree(snap)
