"""Issue 14.1: what jobs print never breaks the CLI's output; each run's
output is shown with its run (JSON field, framed plain lines, the live view's
output pane), a crash's faulthandler trace with the crash.

Run against the real ``procsched`` command, which schedules with
``Scheduler(capture_output=True)``."""

from __future__ import annotations

import json

import pytest
from cli_helpers import cli, run_in_pty

pytestmark = pytest.mark.timeout(60)

NOISY = """
    import ctypes, faulthandler, sys
    import procsched
    from procsched import every

    @every(0.1)
    def chatty():
        print("hello from a job")
        print("to stderr too", file=sys.stderr)

    @every(0.3, initial_delay=0.1)
    def segfaulter():
        faulthandler.enable()
        ctypes.string_at(0)
"""


def test_json_lines_stay_json_whatever_jobs_print(jobs_file) -> None:
    done = cli("run", str(jobs_file(NOISY)), "--duration", "1.2", "--json", "--workers", "2")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]  # every line is JSON
    assert any(r["event"] == "run_crashed" and r["name"] == "segfaulter" for r in records)
    assert "hello from a job" not in done.stdout.replace('"hello from a job', "")


def test_json_carries_each_runs_output_and_the_crash_trace(jobs_file) -> None:
    done = cli("run", str(jobs_file(NOISY)), "--duration", "1.2", "--json", "--workers", "2")
    records = [json.loads(line) for line in done.stdout.splitlines()]
    chatty = [r for r in records if r["event"] == "run_finished" and r["name"] == "chatty"]
    assert chatty and all("hello from a job" in r["output"] and "to stderr too" in r["output"] for r in chatty)
    crashed = [r for r in records if r["event"] == "run_crashed"]
    assert crashed and all("Fatal Python error: Segmentation fault" in r["output"] for r in crashed)
    assert "hello from a job" not in done.stderr  # captured, not leaked


def test_plain_lines_frame_each_runs_output(jobs_file) -> None:
    done = cli("run", str(jobs_file(NOISY)), "--duration", "1.2", "--plain", "--workers", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if " chatty " in line and " ok " in line)
    assert lines[first + 1].startswith("    ┌─ chatty run")
    assert lines[first + 2] == "    │ hello from a job"
    crash = next(i for i, line in enumerate(lines) if " segfaulter " in line and " crashed " in line)
    block = lines[crash + 1 : crash + 12]
    assert any(line.startswith("    │ Fatal Python error: Segmentation fault") for line in block)
    assert not any(line.startswith("hello from a job") for line in lines)


def test_the_live_view_at_80_columns_is_not_torn(jobs_file) -> None:
    pytest.importorskip("rich")
    code, screen = run_in_pty("run", str(jobs_file(NOISY)), "--duration", "2.5", columns=80, lines=24)
    assert code == 0, screen
    rows = screen.replace("\r", "\n").splitlines()
    table_rows = [r for r in rows if r.startswith("│ ") and ("every" in r)]
    assert table_rows, screen
    for row in table_rows:  # a job's print or a crash trace never lands inside a table row
        assert "hello from a job" not in row and "Fatal Python" not in row, row
        assert len(row) <= 80
    assert any("segfaulter" in r for r in table_rows) and any("chatty" in r for r in table_rows)
    # what the jobs printed shows under the table, framed: at 24 lines the pane may hold only the
    # newest crash's trace (shown first by design) when the log lines take their half of the room
    framed = ("│ hello from a job", "│ to stderr too", "│ Fatal Python error")
    assert any(line in screen for line in framed), screen


def test_the_live_view_shows_a_crash_trace_with_its_crash(jobs_file) -> None:
    pytest.importorskip("rich")
    code, screen = run_in_pty("run", str(jobs_file(NOISY)), "--duration", "1.5", columns=100, lines=40)
    assert code == 0, screen
    last = screen[screen.rindex("output\r\n") :]
    crash = last.index("segfaulter run ")
    assert "crashed" in last[crash : crash + 80]
    assert last.index("│ Fatal Python error: Segmentation fault", crash) > crash


def test_json_lines_stay_json_on_the_threads_runner(jobs_file) -> None:
    path = jobs_file(NOISY.split("    @every(0.3")[0])  # printing only: a segfault would take the process
    done = cli("run", str(path), "--duration", "0.6", "--json", "--runner", "threads")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert any(r["event"] == "run_finished" and r["name"] == "chatty" for r in records)
