"""Issue 26 items 1, 2, 5 and 6 through the real command on a real SQLite
store: every run reported right after a restart from the store (a real
``kill -9`` first), what start-up recovered and what it will make up said,
standby and take-over said, the store's jobs made to match the jobs file.

Synchronised on the jobs' own O_APPEND logs and on the command's JSON lines;
the sleeps here are the downtime the tests are about (slots missed while no
instance runs)."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

import psutil
import pytest
from cli_helpers import assert_all_gone, cli, cli_env, cli_here, read_until, run_in_pty

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]

JOBS = """
import os, time
from procsched import every

LOG = os.environ["JOBS_LOG"]

def _log(what):
    import procsched
    run = procsched.current_run()
    with open(LOG, "a") as f:
        f.write(f"{os.environ['SESSION']} {what} {run.run} {run.attempt}\\n")

@every(0.1)
def tick():
    _log("tick")

@every(30)
def slow():
    _log("slow-started")
    time.sleep(60)
"""


#: JOBS with slow every 0.5 s, held for a minute by the first instance (SESSION "one") only:
#: a second instance's claim of slow's next run loses, and it stands by.
HELD = JOBS.replace("@every(30)", "@every(0.5)").replace(
    "time.sleep(60)", "time.sleep(60 if os.environ['SESSION'] == 'one' else 0)"
)


def _start(tmp_path: Path, session: str, *args: str) -> subprocess.Popen[str]:
    env = dict(cli_env(), JOBS_LOG=str(tmp_path / "runs.log"), SESSION=session)
    return subprocess.Popen(
        [sys.executable, "-m", "procsched", "run", "jobs.py", "--json", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )


def _log(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "runs.log"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def _wait_log(tmp_path: Path, what: str, deadline: float = 30) -> None:
    """Until the jobs' log has a line of ``what`` (the test's timeout guards a hang)."""
    end = time.monotonic() + deadline
    while not any(line[1] == what for line in _log(tmp_path)):
        assert time.monotonic() < end, f"no {what} in the log"
        time.sleep(0.05)  # the log is written by another process: nothing to block on


def _kill_tree(proc: subprocess.Popen[str]) -> list[psutil.Process]:
    family = psutil.Process(proc.pid).children(recursive=True)
    proc.kill()
    proc.wait(30)
    return family


class Restart(NamedTuple):
    """A kill -9 and a restart of ``procsched run --store --json`` (see ``restarted``)."""

    tmp_path: Path
    records: list[dict[str, Any]]  # the second run's JSON lines
    stderr: str


@pytest.fixture(scope="module")
def restarted(tmp_path_factory: pytest.TempPathFactory) -> Restart:
    """The first run is killed -9 while slow's run is in flight; down a while (tick misses ~15 slots,
    made up back to back at the restart: misfire catch_up), then a second run for 2 s."""
    tmp_path = tmp_path_factory.mktemp("restart")
    (tmp_path / "jobs.py").write_text(JOBS)
    first = _start(tmp_path, "one", "--store", "s.db", "--workers", "2")
    try:
        _wait_log(tmp_path, "slow-started")  # its run is in flight: recorded crashed at the restart
        read_until(first.stdout, '"run": 3')
    finally:
        family = _kill_tree(first)
    assert_all_gone(family)  # the dispatcher and the workers saw the CLI go
    time.sleep(1.5)  # down
    # One worker: the made-up runs and the pool's first run queue for it (the runs made up before
    # that first run ended went unreported: issue 26 item 1).
    second = _start(tmp_path, "two", "--store", "s.db", "--workers", "1", "--duration", "2")
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    return Restart(tmp_path, [json.loads(line) for line in out.splitlines()], err)


def test_every_run_after_a_kill_9_restart_is_reported_and_the_recovery_is_said(restarted: Restart) -> None:
    records = restarted.records
    reported = {r["run"] for r in records if r["event"] == "run_finished" and r["name"] == "tick"}
    ran = {int(line[2]) for line in _log(restarted.tmp_path) if line[:2] == ["two", "tick"]}
    assert len(ran) >= 20 and ran == reported, f"ran but not reported: {sorted(ran - reported)}"
    said = {r["event"]: r for r in records if r["event"].startswith("procsched_")}
    assert said["procsched_resumed"]["keys"] == ["tick", "slow"]
    catching_up = said["procsched_catching_up"]
    assert catching_up["name"] == "tick" and catching_up["misfire"] == "catch_up"
    assert catching_up["missed"] >= 10 and catching_up["makes_up"] == catching_up["missed"]
    assert "back to back" in catching_up["message"]
    recovered = said["procsched_recovered"]
    assert recovered["name"] == "slow" and recovered["outcome"] == "crashed"
    history = cli_here("history", "--store", str(restarted.tmp_path / "s.db"), "slow", "--json").stdout
    runs = [json.loads(line) for line in history.splitlines()]
    assert (runs[0]["run"], runs[0]["outcome"]) == (recovered["run"], "crashed")
    summary = records[-1]
    tick = next(j for j in summary["jobs"] if j["name"] == "tick")
    assert tick["runs"] == len(reported)  # the summary counted them too


def test_the_runtime_logs_its_recovery_at_info(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from procsched import Scheduler
    from procsched._demo_jobs import heartbeat  # importable by reference anywhere

    db = str(tmp_path / "s.db")
    with Scheduler(workers=1, store=db) as s:
        s.schedule_at_fixed_rate(heartbeat, 0.05, key="beat")
        time.sleep(0.3)  # a few runs
    time.sleep(0.5)  # down: it misses ~10 slots
    with caplog.at_level(logging.INFO, logger="procsched"), Scheduler(workers=1, store=db) as s:
        s.submit(int).result(30)
    logged = [r.getMessage() for r in caplog.records]
    assert any("beat" in line and "resum" in line for line in logged), logged
    assert any("beat" in line and "missed" in line for line in logged), logged


class _Said(logging.Handler):
    """Sets ``seen`` when the "procsched" logger says something containing ``words``."""

    def __init__(self, words: str) -> None:
        super().__init__(logging.INFO)
        self.words, self.seen, self.lines = words, threading.Event(), []  # type: ignore[var-annotated]

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        if self.words in record.getMessage():
            self.seen.set()


def test_the_runtime_says_standby_at_info(tmp_path: Path) -> None:
    from procsched import Scheduler

    db = str(tmp_path / "s.db")
    said = _Said("keyed task quick: on standby while")
    logger = logging.getLogger("procsched")
    logger.addHandler(said)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        with Scheduler(workers=1, store=db, lease=2) as a, Scheduler(workers=1, store=db, lease=2) as b:
            for s in (a, b):  # one task, two schedulers: one runs it, the other stands by and says so
                s.schedule_at_fixed_rate(time.sleep, 0.1, args=(0.3,), key="held", replace_existing=True)
                s.schedule_at_fixed_rate(int, 0.1, key="quick", replace_existing=True)  # mostly between runs
            assert said.seen.wait(30), said.lines
            me = f"scheduler {os.uname().nodename}/{os.getpid()}"  # (both schedulers are this process)
            standby = [line for line in said.lines if "on standby while" in line]
            assert standby and all(f"while {me} runs it" in line for line in standby), standby
            a.shutdown(wait=False, cancel_futures=True)
            b.shutdown(wait=False, cancel_futures=True)
    finally:
        logger.removeHandler(said)
        logger.setLevel(old_level)


def _record(stream: object, event: str, until: object = lambda record: True) -> dict[str, object]:
    """The next JSON record whose event starts with ``event`` on ``stream`` for which ``until(record)`` holds."""
    while True:
        record = json.loads(read_until(stream, f'"event": "{event}')[-1])
        if until(record):  # type: ignore[operator]
            return record


def test_standby_and_take_over_are_said(tmp_path: Path) -> None:
    # slow's first run holds it on the first instance: the second one's claim of run 2 loses -> standby
    (tmp_path / "jobs.py").write_text(HELD)
    first = _start(tmp_path, "one", "--store", "s.db", "--workers", "2", "--lease", "2")
    second = None
    try:
        _wait_log(tmp_path, "slow-started")  # the first instance holds slow's run from now on
        second = _start(tmp_path, "two", "--store", "s.db", "--workers", "2", "--lease", "2")
        other = f"{os.uname().nodename}/{first.pid}"
        # said at start ("procsched_peers"), or once seen (under load its lease may look stale at first)
        _record(second.stdout, "procsched_pee", lambda r: other in r.get("instances", []) or r.get("instance") == other)
        standby = _record(second.stdout, "procsched_standby", lambda r: "slow" in r["keys"])
        assert standby["held_by"] == [other] and "this instance takes over" in standby["message"]
        family = _kill_tree(first)
        said: dict[str, dict[str, object]] = {}  # in an order the store's re-reads decide
        while not {"procsched_took_over", "procsched_active", "procsched_peer_left"} <= said.keys():
            record = _record(second.stdout, "procsched_")
            if record["event"] != "procsched_active" or "slow" in record["keys"]:  # type: ignore[operator]
                said[record["event"]] = record  # type: ignore[index]
        assert said["procsched_took_over"]["instances"] == 1 and said["procsched_peer_left"]["instance"] == other
        second.send_signal(signal.SIGINT)
        second.communicate(timeout=30)
    finally:
        first.kill()
        if second is not None:
            second.kill()
    assert second.returncode == 0
    assert_all_gone(family)


TWO_JOBS = """
from procsched import every

@every(0.1)
def kept():
    pass

@every(0.1)
def dropped():
    pass
"""


def test_the_store_follows_the_jobs_file_and_remove_removes(tmp_path: Path) -> None:
    (tmp_path / "jobs.py").write_text(TWO_JOBS)
    db = str(tmp_path / "s.db")
    assert cli("run", "jobs.py", "--store", db, "--duration", "0.5", "--json", cwd=tmp_path).returncode == 0
    (tmp_path / "jobs.py").write_text(TWO_JOBS.split("@every(0.1)\ndef dropped")[0])
    done = cli("run", "jobs.py", "--store", db, "--duration", "0.5", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    removed = next(r for r in records if r["event"] == "procsched_store_removed")
    assert removed["keys"] == ["dropped"] and "history kept" in removed["message"]
    assert not any(r["name"] == "dropped" for r in records if r["event"].startswith("run_"))
    assert "dropped" not in done.stderr  # no "cannot be loaded" warning: it is gone
    keys = [json.loads(line)["key"] for line in cli_here("jobs", "--store", db, "--json").stdout.splitlines()]
    assert keys == ["kept"]
    history = cli_here("history", "--store", db, "dropped", "--json")
    assert history.returncode == 0 and history.stdout.count('"key": "dropped"') >= 2  # its history stays

    # --keep-others: a store shared with a program that declares other jobs
    (tmp_path / "other.py").write_text("from procsched import every\n\n@every(60)\ndef other():\n    pass\n")
    assert cli("run", "other.py", "--store", db, "--duration", "0.3", "--json", cwd=tmp_path).returncode == 0
    done = cli("run", "jobs.py", "--store", db, "--duration", "0.3", "--json", "--keep-others", cwd=tmp_path)
    assert not any(json.loads(line)["event"] == "procsched_store_removed" for line in done.stdout.splitlines())
    keys = [json.loads(line)["key"] for line in cli_here("jobs", "--store", db, "--json").stdout.splitlines()]
    assert keys == ["kept", "other"]

    done = cli_here("remove", "other", "--store", db)
    assert done.returncode == 0 and "removed 'other'" in done.stdout
    keys = [json.loads(line)["key"] for line in cli_here("jobs", "--store", db, "--json").stdout.splitlines()]
    assert keys == ["kept"]
    assert cli_here("history", "--store", db, "other", "--json").returncode == 0  # kept
    done = cli_here("remove", "other", "--store", db)
    assert done.returncode == 1 and done.stderr.startswith("procsched: no task 'other' in the store")


def test_a_dead_holder_is_shown_dead_and_history_names_the_instance(tmp_path: Path) -> None:
    (tmp_path / "jobs.py").write_text(JOBS)
    proc = _start(tmp_path, "one", "--store", "s.db", "--workers", "2")
    try:
        _wait_log(tmp_path, "slow-started")
        read_until(proc.stdout, '"run": 2')
    finally:
        family = _kill_tree(proc)
    assert_all_gone(family)
    db = str(tmp_path / "s.db")
    jobs = {j["key"]: j for j in map(json.loads, cli_here("jobs", "--store", db, "--json").stdout.splitlines())}
    held = jobs["slow"]["held_by"]
    assert (held["pid"], held["process"], held["lease"]) == (proc.pid, "dead", "alive")  # lease: 30 s, not run out
    table = cli_here("jobs", "--store", db).stdout
    assert f"/{proc.pid} (dead)" in next(line for line in table.splitlines() if line.startswith("slow"))
    history = cli_here("history", "--store", db, "slow").stdout.splitlines()
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
    assert history[1].split()[6:9] == ["running", "-", f"{os.uname().nodename}/{proc.pid}"]


def test_on_postgresql_the_store_follows_the_file_and_its_url_is_never_printed_whole(pg_cluster, tmp_path) -> None:
    (tmp_path / "jobs.py").write_text(TWO_JOBS)
    url = pg_cluster.url + "&application_name=secret-ish"
    assert cli("run", "jobs.py", "--store", url, "--duration", "0.5", "--json", cwd=tmp_path).returncode == 0
    (tmp_path / "jobs.py").write_text(TWO_JOBS.split("@every(0.1)\ndef dropped")[0])
    done = cli("run", "jobs.py", "--store", url, "--duration", "0.5", "--plain", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "removed 1 stored job the jobs file no longer declares from postgresql://postgres@/postgres: dropped" in (
        done.stdout
    )
    assert "secret-ish" not in done.stdout and "host=" not in done.stdout
    jobs = [json.loads(line) for line in cli_here("jobs", "--store", url, "--json").stdout.splitlines()]
    assert [j["key"] for j in jobs] == ["kept"] and jobs[0]["runs"] >= 2
    assert cli_here("remove", "kept", "--store", url).returncode == 0
    assert cli_here("jobs", "--store", url, "--json").stdout == ""


def test_plain_lines_say_standby_for_whom_and_the_take_over_and_no_false_skips(tmp_path: Path) -> None:
    """Item 2 in plain lines: the standby instance names the one it stands by for; after a real
    ``kill -9`` of that one it says it took over, and the slots the other ran while this one stood
    by are not told as skipped ("paused": the user paused nothing)."""
    (tmp_path / "jobs.py").write_text(HELD)
    first = _start(tmp_path, "one", "--store", "s.db", "--workers", "2", "--lease", "2")
    second = None
    try:
        _wait_log(tmp_path, "slow-started")  # the first instance holds slow's run from now on
        env = dict(cli_env(), JOBS_LOG=str(tmp_path / "runs.log"), SESSION="two")
        second = subprocess.Popen(
            [sys.executable, "-m", "procsched", "run", "jobs.py", "--plain", "--store", "s.db", "--lease", "2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        other = f"{os.uname().nodename}/{first.pid}"
        seen = read_until(second.stdout, "procsched: on standby for")
        while "slow" not in seen[-1].split(":")[1]:  # (tick may go on standby first, or with it)
            seen += read_until(second.stdout, "procsched: on standby for")
        assert f"{other} runs " in seen[-1] and "this instance takes over if that stops" in seen[-1], seen[-1]
        family = _kill_tree(first)
        seen += read_until(second.stdout, "procsched: took over from 1 instance whose lease expired")
        left = f"procsched: instance {other} left s.db"
        if not any(left in line for line in seen):  # (said before the take-over, or by a later re-read)
            seen += read_until(second.stdout, left)
        for needle in ("procsched: no longer on standby for slow", "slow                 run"):
            if not any(needle in line for line in seen):  # (told once a second: before or after its run here)
                seen += read_until(second.stdout, needle)
        second.send_signal(signal.SIGINT)
        out, err = second.communicate(timeout=30)
    finally:
        first.kill()
        if second is not None:
            second.kill()
    assert second.returncode == 0, err
    lines = seen + out.splitlines(keepends=True)
    assert any("procsched: no longer on standby for slow" in line for line in lines), "".join(lines)
    false_skips = [line for line in lines if "skipped" in line and "paused" in line]
    assert not false_skips, "".join(false_skips)
    assert_all_gone(family)


PRINTS = """
import os
from procsched import every

@every(0.1)
def chatty():
    print(f"hello from {os.getpid()}")
"""


def test_history_names_each_runs_worker_and_keeps_what_it_printed(tmp_path: Path) -> None:
    """Item 8: history's ``worker`` column is the worker process the run line named, and
    ``history --json`` has the run's output, as the README says (both were never written)."""
    (tmp_path / "jobs.py").write_text(PRINTS)
    done = cli("run", "jobs.py", "--store", "s.db", "--duration", "0.8", "--plain", "--workers", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    told = [line.split() for line in done.stdout.splitlines() if len(line.split()) > 3 and line.split()[1] == "chatty"]
    workers = {words[words.index("worker") + 1] for words in told if "worker" in words}
    assert len(workers) == 1, done.stdout  # one worker: every run line names it
    (worker,) = workers
    db = str(tmp_path / "s.db")
    runs = [json.loads(line) for line in cli_here("history", "chatty", "--store", db, "--json").stdout.splitlines()]
    ended = [r for r in runs if r["outcome"] == "ok"]
    assert ended and all(r["worker_pid"] == int(worker) for r in ended), runs
    assert all(r["output"] == f"hello from {worker}\n" for r in ended), runs
    table = cli_here("history", "chatty", "--store", db).stdout.splitlines()
    header = table[0].split()
    row = next(line.split() for line in table[1:] if " ok " in line)
    assert row[header.index("worker")] == worker and row[header.index("instance")] != worker  # two processes


def test_the_live_view_of_a_standby_instance_says_for_whom(tmp_path: Path) -> None:
    """Item 2 in the live view, with a real second instance: it keeps a line saying that it stands
    by, for which jobs and for which instance."""
    pytest.importorskip("rich")
    held = JOBS.replace("@every(30)", "@every(0.5)")
    (tmp_path / "jobs.py").write_text(held)
    first = _start(tmp_path, "one", "--store", "s.db", "--workers", "2", "--lease", "2")
    try:
        _wait_log(tmp_path, "slow-started")  # the first instance holds slow's run from now on
        read_until(first.stdout, '"event": "run_')  # and it is up: its lease is fresh
        code, screen = run_in_pty(
            "run",
            str(tmp_path / "jobs.py"),
            "--store",
            str(tmp_path / "s.db"),
            "--lease",
            "2",
            "--duration",
            "4",
            columns=200,
            extra_env={"JOBS_LOG": str(tmp_path / "runs.log"), "SESSION": "two"},
        )
    finally:
        family = _kill_tree(first)
    assert_all_gone(family)
    assert code == 0, screen
    other = f"{os.uname().nodename}/{first.pid}"
    text = " ".join(screen.split())
    assert re.search(rf"standby for [^()]*slow[^()]* \(held by {re.escape(other)}\)", text), screen[-3000:]
    assert "on standby for " in text and f"{other} runs" in text  # the note too, under the tables


def test_verbose_start_up_beside_a_live_instance_says_found_not_resumed(tmp_path: Path) -> None:
    """Item 2 with ``-v``: an instance started on the store of another live one is told that the
    stored jobs are that one's too and that it stands by for them, never that it resumed them
    (the runtime's start-up line; the CLI's own note says "found" too)."""
    (tmp_path / "jobs.py").write_text(JOBS)
    first = _start(tmp_path, "one", "--store", "s.db", "--workers", "2")
    second = None
    family: list[psutil.Process] = []
    try:
        _wait_log(tmp_path, "slow-started")  # both jobs are stored, and the first instance runs them
        read_until(first.stdout, '"event": "run_')  # it is up: its lease is fresh
        second = _start(tmp_path, "two", "--store", "s.db", "--workers", "1", "-v")
        said = read_until(second.stderr, "stored task(s)")[-1]
    finally:
        if second is not None:
            family += _kill_tree(second)
        family += _kill_tree(first)
    assert_all_gone(family)
    other = f"{os.uname().nodename}/{first.pid}"
    assert said.startswith("procsched: found 2 stored task(s) that scheduler "), said
    assert f"scheduler {other}, registered on the store, runs too" in said and "stands by" in said, said
    assert "resumed" not in said, said
