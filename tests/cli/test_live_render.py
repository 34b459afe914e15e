"""The live view rendered to fixed-size consoles (issue 14.2 and the live half of 14.1)."""

from __future__ import annotations

import io
import time

import pytest

from procsched import InlineScheduler, ManualClock
from procsched._cli._board import Board
from procsched._cli._lines import Lines
from procsched._cli._live import LiveView
from procsched._jobs import Job

rich = pytest.importorskip("rich")
from rich.console import Console  # noqa: E402

NAMES = ["count_primes", "hash_chain_with_a_long_name", "heartbeat", "segfaulter", "hangs"]


def _noop() -> None:
    pass


def _board() -> Board:
    sched = InlineScheduler(ManualClock(time.monotonic()))
    board = Board()
    for i, name in enumerate(NAMES):
        options = {
            "name": name,
            "priority": 10 if name == "heartbeat" else 0,
            "timeout": 1 if name == "hangs" else None,
            "args": (),
            "kwargs": {},
            "initial_delay": 0.5 * i,
        }
        job = Job(_noop, "rate", [1.0, 0.5, 0.25, 1.0, 4.0][i], options)
        board.add(job, job.start(sched), time.monotonic())
    for task_id, outcome, output in [
        (1, "ok", None),
        (2, "ok", "hello from a job\nsecond line"),
        (
            4,
            "crashed",
            "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f (most recent call first):\n"
            '  File "demo.py", line 55 in segfaulter',
        ),
        (5, "timeout", None),
        (3, "ok", None),
    ] * 3:
        board.on_event(
            {
                "event": {"ok": "run_finished", "crashed": "run_crashed", "timeout": "run_timeout"}[outcome],
                "task_id": task_id,
                "name": NAMES[task_id - 1],
                "run": 1,
                "worker": 1234,
                "outcome": outcome,
                "scheduled_for": 0.0,
                "started_at": 0.0,
                "finished_at": 0.01,
                "duration": 0.0123,
                "lateness": 0.0031,
                "state": "pending",
                "next_run": 1.0,
                "error": None if outcome == "ok" else "WorkerCrashedError: SIGSEGV",
                "traceback": None,
                "output": output,
            }
        )
    board.workers = [
        {"slot": i, "pid": 14000 + i, "state": "busy", "rss": 22_000_000, "runs": 20, "restarts": 6, "task": 1}
        for i in range(2)
    ]
    return board


def _render(width: int, height: int, board: Board | None = None, status: str = "up 12 s - Ctrl-C to stop") -> str:
    console = Console(width=width, height=height, file=io.StringIO(), color_system=None, legacy_windows=False)
    board = board or _board()
    lines = Lines("live", io.StringIO(), board)
    title = "procsched - 5 jobs from the demo jobs on 2 worker processes"
    view = LiveView(lines, board, title, console=console)
    with console.capture() as capture:
        console.print(view.render(status))
    return capture.get()


@pytest.mark.parametrize(("width", "height"), [(80, 24), (150, 50)])
def test_readable_at_this_size(width: int, height: int) -> None:
    screen = _render(width, height)
    rows = screen.splitlines()
    assert all(len(row) <= width for row in rows), "\n".join(r for r in rows if len(r) > width)
    for name in NAMES:  # never cut
        assert any(name in row for row in rows), name
    assert "…" not in screen and "..." not in screen.split("output")[0]
    # the title on one line, never wrapped; the status beside it, or on the next line when it does not fit
    assert rows[0].startswith("procsched - 5 jobs")
    if width >= 150:
        assert rows[0] == "procsched - 5 jobs from the demo jobs on 2 worker processes - up 12 s - Ctrl-C to stop"
    else:
        assert rows[0] == "procsched - 5 jobs from the demo jobs on 2 worker processes" and rows[1] == (
            "up 12 s - Ctrl-C to stop"
        )
    job_row = next(row for row in rows if "segfaulter" in row)
    if width >= 150:
        assert "lateness p99" in screen and "crashed" in screen
    else:
        assert "ok/err/crash/t.o." in screen
        assert "0/0/3/0" in job_row  # the merged counts: ok/error/crashed/timeout
    assert len(rows) <= height


def test_the_output_pane_shows_what_runs_printed_and_crash_traces_with_the_crash() -> None:
    screen = _render(100, 60)
    pane = screen[screen.index("output") :]
    assert "hash_chain_with_a_long_name run 1 ok" in pane and "│ hello from a job" in pane
    crash = pane.index("segfaulter run 1 crashed")
    assert pane.index("│ Fatal Python error: Segmentation fault", crash) > crash


def test_the_output_pane_gives_way_on_a_short_terminal() -> None:
    screen = _render(80, 24)
    assert len(screen.splitlines()) <= 24
    assert "workers" in screen  # the tables come first


def test_a_busy_log_leaves_the_output_pane_room() -> None:
    """The log lines take at most half the rows left: a burst of them (a
    crash, skipped slots) once pushed every run's output off a 24-line
    terminal under load."""
    board = _board()
    long = "heartbeat: 14 slots skipped (misfire), the last 12:00:00.100; " * 3
    board.recent.extend(f"{i}: {long}" for i in range(5))
    screen = _render(80, 30, board)
    assert len(screen.splitlines()) <= 30
    assert "recent" in screen and "│ Fatal Python error: Segmentation fault" in screen


def test_after_shutdown_no_worker_is_busy() -> None:
    board = _board()
    board.stopped()
    screen = _render(150, 50, board, "stopped after 12.0 s")
    workers = screen[screen.index("workers") :]
    assert "busy" not in workers and "stopped" in workers


def test_a_worker_exit_event_updates_the_last_picture() -> None:
    board = _board()
    board.on_event(
        {
            "event": "worker_exited",
            "task_id": None,
            "name": None,
            "worker": 14001,
            "slot": 1,
            "exitcode": -11,
            "signal": "SIGSEGV",
            "crashed": True,
        }
    )
    assert [w["state"] for w in board.workers] == ["busy", "crashed"]


def test_a_crash_trace_stays_in_view_among_chatty_runs() -> None:
    board = _board()
    for run in range(2, 30):  # many newer chatty runs after the crashes
        board.on_event(
            {
                "event": "run_finished",
                "task_id": 2,
                "name": NAMES[1],
                "run": run,
                "worker": 1,
                "outcome": "ok",
                "scheduled_for": 0.0,
                "started_at": 0.0,
                "finished_at": 0.0,
                "duration": 0.0,
                "lateness": 0.0,
                "state": "pending",
                "next_run": 1.0,
                "error": None,
                "traceback": None,
                "output": "chatter\nchatter",
            }
        )
    screen = _render(100, 40, board)
    pane = screen[screen.index("output") :]
    assert "segfaulter run 1 crashed" in pane and "│ Fatal Python error: Segmentation fault" in pane
    assert "hash_chain_with_a_long_name run 29 ok" in pane
    assert pane.index("segfaulter run 1 crashed") < pane.index("run 29 ok")  # oldest first
