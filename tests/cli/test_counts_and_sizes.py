"""Issue 26 items 9 and 11: runs and attempts counted one way everywhere (the
table, the stop summary, the demo, JSON, the metrics), and an 80 x 24
terminal: a title that does not wrap, "recent" lines never cut, a summary
that fits."""

from __future__ import annotations

import io
import json
import re
import time

import pytest
from cli_helpers import cli, run_in_pty

from procsched import InlineScheduler, ManualClock, Retry
from procsched._cli._board import Board
from procsched._cli._lines import Lines
from procsched._cli._live import LiveView, title_lines
from procsched._cli._verdict import verdict
from procsched._jobs import Job

pytestmark = pytest.mark.timeout(60)

RETRIED = """
    import procsched
    from procsched import Retry, every

    @every(0.2, retry=Retry(attempts=3, delay=0.02))
    def flaky():
        if procsched.current_run().attempt == 1:
            raise ConnectionError("not yet")

    @every(0.2)
    def fine():
        pass
"""


def _end(task_id: int, run: int, attempt: int, outcome: str, name: str = "flaky") -> dict[str, object]:
    return {
        "event": {"ok": "run_finished", "error": "run_failed"}[outcome],
        "task_id": task_id,
        "name": name,
        "run": run,
        "attempt": attempt,
        "worker": 1,
        "outcome": outcome,
        "scheduled_for": 0.0,
        "started_at": 0.0,
        "finished_at": 0.0,
        "duration": 0.0,
        "lateness": 0.0,
        "state": "pending",
        "next_run": 1.0,
        "error": None if outcome == "ok" else "ConnectionError: not yet",
        "traceback": None,
        "output": None,
    }


def _noop() -> None:
    pass


def _board_with(job_name: str = "flaky") -> Board:
    board = Board()
    job = Job(_noop, "rate", 1.0, {"name": job_name, "args": (), "kwargs": {}, "retry": Retry(attempts=3)})
    board.add(job, job.start(InlineScheduler(ManualClock())), time.monotonic())
    return board


def test_a_run_counts_once_by_its_last_attempt() -> None:
    board = _board_with()
    for event in [
        _end(1, 1, 1, "error"),
        _end(1, 1, 2, "ok"),
        _end(1, 2, 1, "ok"),
        _end(1, 3, 1, "error"),
        _end(1, 3, 2, "error"),
        _end(1, 3, 3, "error"),
    ]:
        board.on_event(event)
    row = board.rows[0]
    assert (row.runs, row.counts["ok"], row.counts["error"], row.retries) == (3, 2, 1, 3)
    headers, rows = board.job_table(time.monotonic())
    cells = dict(zip(headers, rows[0], strict=True))
    assert (cells["runs"], cells["ok"], cells["error"], cells["retries"]) == ("3", "2", "1", "3")
    assert int(cells["runs"]) == sum(int(cells[o]) for o in ("ok", "error", "crashed", "timeout"))


def test_the_command_counts_runs_one_way_in_table_summary_and_json(jobs_file) -> None:
    path = jobs_file(RETRIED)
    plain = cli("run", str(path), "--duration", "1.2", "--plain", "--workers", "2")
    assert plain.returncode == 0, plain.stderr
    table = plain.stdout[plain.stdout.index("lateness p99") :]
    flaky = next(line.split() for line in table.splitlines() if line.strip().startswith("flaky"))
    # job, every, 0.2s,, retry, 3x, next run, runs, ok, error, crashed, timeout, retries, ...
    runs, ok, error, crashed, timeout, retries = map(int, flaky[6:12])
    # (a run ends "error" when the stop comes between its failed first attempt and its retry, or
    # when that attempt ended so late that its retry would reach the next slot - the documented
    # rule, seen once under a loaded CI: 5 ok, 2 error)
    assert runs == ok + error and ok >= 3 and crashed == timeout == 0 and retries == ok
    fine = next(line.split() for line in table.splitlines() if line.strip().startswith("fine"))
    summary = re.search(
        r"stopped after [\d.]+ s: (\d+) runs \((\d+) ok, (\d+) error, 0 crashed, 0 timeout\), "
        r"(\d+) retr",
        plain.stdout,
    )
    assert summary, plain.stdout
    assert list(map(int, summary.groups())) == [runs + int(fine[4]), ok + int(fine[5]), error, retries]
    records = [json.loads(line) for line in cli("run", str(path), "--duration", "1.2", "--json").stdout.splitlines()]
    jobs = {j["name"]: j for j in records[-1]["jobs"]}
    assert jobs["flaky"]["runs"] == jobs["flaky"]["ok"] + jobs["flaky"]["error"]
    assert jobs["flaky"]["retries"] == jobs["flaky"]["ok"] >= 3


# -- 80 x 24 ------------------------------------------------------------------


def test_the_title_never_wraps_and_the_status_gets_its_own_line() -> None:
    title = "procsched - 7 jobs from the demo jobs on 2 worker processes"
    assert title_lines(title, "up 3 s - Ctrl-C to stop", 150) == [f"{title} - up 3 s - Ctrl-C to stop"]
    assert title_lines(title, "up 3 s - Ctrl-C to stop", 80) == [title, "up 3 s - Ctrl-C to stop"]
    lines = title_lines(title + " and a very long jobs file name indeed", "stopping", 40)
    assert lines == ["procsched", "stopping"]
    stop = "stopping on SIGINT: waiting for 1 running task(s) to finish (at most 10 s; Ctrl-C again to kill)"
    assert all(len(line) <= 80 for line in title_lines(title, stop, 80))


def test_recent_lines_are_wrapped_never_cut_at_80_columns() -> None:
    from rich.console import Console

    board = _board_with("segfaulter")
    long = (
        "task 7 (segfaulter) run 6 crashed its worker (signal SIGSEGV); replacing the worker, "
        "which takes a while on a loaded machine"
    )
    board.recent.extend(["first (older) message", long])
    console = Console(width=80, height=24, file=io.StringIO(), color_system=None, legacy_windows=False)
    view = LiveView(Lines("live", io.StringIO(), board), board, "procsched - 1 job from jobs.py", console=console)
    with console.capture() as capture:
        console.print(view.render("up 1 s - Ctrl-C to stop"))
    screen = capture.get()
    assert all(len(row) <= 80 for row in screen.splitlines())
    assert long in " ".join(row.strip() for row in screen.splitlines()).replace("recent: ", "")
    assert "..." not in screen and "(t..." not in screen


def test_the_demo_verdict_fits_80_columns() -> None:
    board = _board_with("a_job_with_quite_a_long_name")
    for run in range(1, 40):
        board.on_event(_end(1, run, 1, "ok", "a_job_with_quite_a_long_name"))
    lines = "\n".join(verdict(board, 20.0, time.monotonic(), 80)).splitlines()
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    assert any("a_job_with_quite_a_long_name" in line for line in lines)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_the_demo_on_an_80_x_24_terminal() -> None:
    pytest.importorskip("rich")
    code, screen = run_in_pty("demo", "--duration", "3", columns=80, lines=24)
    assert code == 0, screen
    summary = screen[screen.rindex("procsched demo:") :]
    assert all(len(line) <= 80 for line in summary.splitlines()), summary
    frames = screen[: screen.rindex("procsched demo:")]
    assert "procsched - 7 jobs from the demo jobs on 2 worker processes" in frames
    assert "(t..." not in frames


def test_the_live_view_says_what_this_instance_does_on_its_store() -> None:
    from rich.console import Console

    from procsched._cli._store_view import StoreWatch

    board = _board_with("tick")
    watch = StoreWatch("s.db", {})
    notes = watch.update(
        {
            "scheduler": {"id": "vm:1:a", "host": "vm", "pid": 1, "lease": 30.0},
            "holding": [],
            "peers": [{"id": "vm:2:b", "host": "vm", "pid": 2}],
            "taken_over": 0,
            "standby": ["tick"],
        }
    )
    assert [n.event for n in notes] == ["procsched_peer_joined", "procsched_standby"]
    board.store_status = watch.status
    console = Console(width=80, height=24, file=io.StringIO(), color_system=None, legacy_windows=False)
    view = LiveView(Lines("live", io.StringIO(), board), board, "procsched - 1 job from jobs.py", console=console)
    with console.capture() as capture:
        console.print(view.render("up 1 s - Ctrl-C to stop"))
    screen = " ".join(row.strip() for row in capture.get().splitlines())
    assert "store s.db: this instance vm/1, lease 30 s; 1 other: vm/2; standby for tick (held by vm/2)" in screen


def test_events_before_a_job_is_attached_go_to_its_row() -> None:
    """Issue 26 item 1: with a store, the resumed task runs before the job is started again."""
    job = Job(_noop, "rate", 1.0, {"name": "tick", "args": (), "kwargs": {}})
    keyed = Board(keyed=True)
    keyed.add_job(job)
    keyed.on_event(_end(41, 7, 1, "ok", "tick"))  # the stored task, resumed at once
    handle = job.start(InlineScheduler(ManualClock()))
    keyed.attach(job, handle, time.monotonic())
    keyed.on_event(_end(handle.id, 8, 1, "ok", "tick"))
    assert [(r.name, r.runs) for r in keyed.rows] == [("tick", 2)]
    # without a store: a follow-up task of the same name, once the job has its handle, has a row of its own
    plain = Board()
    plain.add(job, handle, time.monotonic())
    plain.on_event(_end(99, 1, 1, "ok", "tick"))
    assert [(r.name, r.runs) for r in plain.rows] == [("tick", 0), ("tick (from a task)", 1)]
