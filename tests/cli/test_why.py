"""``procsched why KEY --store S [-n N]``: a stored task's last slots, each
explained, and its next 5 - against a real store (SQLite and PostgreSQL)
with real runs and the slots a restart found missed while down."""

from __future__ import annotations

import re
import time
from datetime import datetime

import pytest
import why_jobs
from cli_helpers import NS, cli_here

import procsched
from procsched._store import open_store

LOCAL = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{3}| {4})"


def local(ns: int) -> str:
    return datetime.fromtimestamp(ns / NS).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def wait_until(predicate, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.timeout(90)
def test_why_explains_runs_and_slots_missed_while_down(tmp_path) -> None:
    store_url = str(tmp_path / "store.db")  # (SQLite: why reads what history reads, tested on both)
    with procsched.Scheduler(workers=1, store=store_url) as s:
        tick = s.schedule_at_fixed_rate(why_jobs.ok, 0.1, misfire="skip", key="tick", name="heartbeat")
        fails = s.schedule_at_fixed_rate(why_jobs.fails, 3600, key="fails")
        wait_until(lambda: len(tick.runs) >= 2 and fails.runs, what="runs of both")
    time.sleep(0.6)  # down: tick misses ~6 slots; its misfire policy (skip) drops them
    with procsched.Scheduler(workers=1, store=store_url) as s:
        wait_until(lambda: s.get("tick") is not None and s.get("tick").runs, what="a run after the restart")
        slots = s.history("tick", 200, skipped=True)  # Scheduler.history: skipped slots too, as RunInfo
        missed = [r for r in slots if r.outcome == "skipped"]
        assert any(r.reason == "down" for r in missed)  # (and "misfire": slots its policy dropped while it ran late)
        assert all(r.reason in ("down", "misfire") and r.run is None and r.started_at is None for r in missed)
        assert all(r.outcome != "skipped" and r.cause == "schedule" for r in s.history("tick", 200))
        stamps = [r.scheduled_at for r in slots]
        assert stamps == sorted(stamps)
    with open_store(store_url) as store:
        history = store.history("tick", 200, skipped=True)
    down = [r for r in history if r.outcome == "skipped" and r.reason == "down"]
    assert down
    runs = [r for r in history if r.outcome != "skipped"]
    assert runs[-1].scheduled_ns > down[-1].slot_ns > down[0].slot_ns > runs[0].scheduled_ns

    done = cli_here("why", "tick", "--store", store_url, "-n", "200")
    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    assert lines[0].startswith("tick (heartbeat): every 100 ms - ")
    assert lines[1] == f"last {len(history)} slots:"
    body = lines[2 : 2 + len(history)]
    for line, record in zip(body, history, strict=True):
        assert re.match(rf"  {LOCAL}  ", line), line
        slot = record.slot_ns if record.outcome == "skipped" else record.scheduled_ns
        assert line[2:21] == local(slot)
        if record.outcome == "skipped" and record.reason == "down":
            assert re.search(r"  skipped down +not run: no scheduler was running then \(found at a restart\)$", line), (
                line
            )
        elif record.outcome == "skipped":
            why = "not run: missed while the task ran late; its misfire policy dropped it (skip/coalesce)"
            assert line.endswith(f"skipped misfire  {why}"), line  # (the widest "what")
        else:
            assert f"run {record.run}" in line and " ok " in line and "took " in line, line
    assert lines[2 + len(history)] == "next 5 slots:"
    assert all(re.fullmatch(rf"  {LOCAL}", line) for line in lines[3 + len(history) :])
    assert len(lines) == 3 + len(history) + 5

    done = cli_here("why", "fails", "--store", store_url, "-n", "1")
    lines = done.stdout.splitlines()
    assert lines[1] == "last 1 slot:"
    assert "run 1  error" in lines[2] and "took " in lines[2]
    assert "raised ValueError: no data" in lines[2]  # the worker's error, stored (issue 26)


def test_why_of_an_unknown_key_or_store_is_an_error(store_url, tmp_path) -> None:
    done = cli_here("why", "nope", "--store", store_url)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "procsched: no task 'nope' in the store (see procsched jobs --store ...)\n"
    missing = str(tmp_path / "missing.db")
    done = cli_here("why", "tick", "--store", missing)
    assert done.returncode == 1 and done.stderr.startswith("procsched: cannot open the store: ")
    assert not (tmp_path / "missing.db").exists()
    assert cli_here("why", "tick", "--store", store_url, "-n", "0").returncode == 2
