"""Issue 14: the CLI's conventions (item 8), wall-clock times (item 7) and the
header wording (item 2), through the real ``procsched`` command."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from cli_helpers import cli

import procsched

pytestmark = pytest.mark.timeout(60)


def test_version() -> None:
    done = cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"procsched {procsched.__version__}"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "x.py", "--workers", "abc"], "argument --workers: must be a whole number, not 'abc'"),
        (["run", "x.py", "--workers", "0"], "argument --workers: must be at least 1, not 0"),
        (["run", "x.py", "--duration", "soon"], "argument --duration: must be a number of seconds, not 'soon'"),
        (["run", "x.py", "--timeout", "-1"], "argument --timeout: must be a positive number of seconds"),
        (["run", "x.py", "--policy", "random"], "argument --policy: invalid choice: 'random'"),
        (["run", "x.py", "--metrics-port", "http"], "argument --metrics-port: must be a port number"),
        (["demo", "--workers", "1"], "argument --workers: must be at least 2, not 1"),
    ],
)
def test_a_bad_option_is_named(argv: list[str], message: str) -> None:
    done = cli(*argv)
    assert done.returncode == 2
    assert message in done.stderr
    assert "_positive_int" not in done.stderr and "_seconds" not in done.stderr


def test_demo_help_matches_what_it_accepts() -> None:
    shown = cli("demo", "--help").stdout
    assert "at least 2" in " ".join(shown.split())


def test_help_documents_the_exit_statuses() -> None:
    shown = cli("run", "--help").stdout
    for code in ("0 ", "1 ", "2 ", "3 ", "4 ", "5 ", "130 "):
        assert re.search(rf"^\s+{code}", shown, re.M), code
    assert "--fail-on-error" in shown and "--log-level" in shown and "--mp-context" in shown


def test_options_reach_the_scheduler(jobs_file) -> None:
    path = jobs_file("""
        import time
        from procsched import every

        @every(0.2)
        def slow():
            time.sleep(5)
    """)
    done = cli(
        "run",
        str(path),
        "--duration",
        "1.5",
        "--json",
        "--workers",
        "1",
        "--timeout",
        "0.3",
        "--policy",
        "fifo",
        "--mp-context",
        "spawn",
        "--grace",
        "5",
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert any(r["event"] == "run_timeout" and r["name"] == "slow" for r in records)


def test_duplicate_job_names_name_both_definitions(jobs_file) -> None:
    path = jobs_file("""
        from procsched import every, once

        @every(1)
        def report():
            pass

        def other():
            pass

        once(delay=1, name="report")(other)
    """)
    done = cli("run", str(path))
    assert done.returncode == 1
    assert "two jobs are named 'report'" in done.stderr
    assert f"{path.name}:4" in done.stderr and f"{path.name}:8" in done.stderr


FAILING = """
    from procsched import every, once

    @every(0.1)
    def fine():
        pass

    @once(delay=0.05)
    def sometimes():
        raise ValueError("once")

    @every(0.1)
    def always():
        raise KeyError("always")
"""


@pytest.mark.parametrize(
    ("jobs", "flag", "status"),
    [
        ("always", True, 5),
        ("always", False, 0),
        ("sometimes", True, 5),  # a one-shot whose only run failed: every run of it failed
        ("fine", True, 0),
    ],
)
def test_fail_on_error_exit_status(jobs_file, jobs: str, flag: bool, status: int) -> None:
    body = FAILING
    if jobs == "fine":
        body = FAILING.split("@once")[0]
    elif jobs == "sometimes":
        body = FAILING.split("@every(0.1)\n    def always")[0] + (
            "\n    @every(0.1)\n    def flaky():\n        import procsched\n"
            "        if procsched.current_run().run == 2:\n            raise OSError('flaky')\n"
        )
    path = jobs_file(body)
    done = cli("run", str(path), "--duration", "1", "--json", "--workers", "2", *(["--fail-on-error"] if flag else []))
    summary = json.loads(done.stdout.splitlines()[-1])
    assert done.returncode == status, done.stderr
    assert summary["exit_status"] == status
    if status == 5:
        assert "always" in summary["every_run_failed"] or jobs != "always"
        assert "sometimes" in summary["every_run_failed"] or jobs != "sometimes"


def test_fail_on_error_some_runs_failed(jobs_file) -> None:
    path = jobs_file("""
        import procsched
        from procsched import every

        @every(0.1)
        def flaky():
            if procsched.current_run().run == 2:
                raise OSError("flaky")
    """)
    done = cli("run", str(path), "--duration", "1", "--plain", "--workers", "1", "--fail-on-error")
    assert done.returncode == 4, done.stdout + done.stderr


def test_tracebacks_show_the_whole_traceback(jobs_file) -> None:
    path = jobs_file("""
        from procsched import once

        def inner():
            raise LookupError("deep down")

        @once(delay=0.05)
        def outer():
            inner()
    """)
    short = cli("run", str(path), "--duration", "0.6", "--plain", "--workers", "1")
    long = cli("run", str(path), "--duration", "0.6", "--plain", "--workers", "1", "--tracebacks")
    line = next(line for line in short.stdout.splitlines() if " outer " in line and " error " in line)
    assert line.endswith("LookupError: deep down")
    assert "Traceback" not in short.stdout
    assert "    │ Traceback (most recent call last):" in long.stdout
    assert re.search(r"│ .*in inner", long.stdout), long.stdout


def test_log_level_options(jobs_file) -> None:
    path = jobs_file("""
        import os, signal
        from procsched import every

        @every(0.2)
        def dies():
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    noisy = cli("run", str(path), "--duration", "0.8", "--plain", "--workers", "1")
    quiet = cli("run", str(path), "--duration", "0.8", "--plain", "--workers", "1", "-q")
    assert "crashed its worker" in noisy.stderr  # WARNING by default
    assert "crashed its worker" not in quiet.stderr


def test_json_times_are_iso_8601_utc_wall_clock(jobs_file) -> None:
    before = datetime.now(UTC)
    done = cli("run", str(jobs_file()), "--duration", "1", "--json", "--workers", "2")
    after = datetime.now(UTC)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    ends = [r for r in records if r["event"] == "run_finished"]
    assert ends
    for record in ends:
        assert "scheduled_for" not in record and "next_run" not in record
        for key in ("ts", "scheduled_at", "started_at", "finished_at"):
            when = datetime.fromisoformat(record[key])
            assert when.utcoffset() == timedelta(0)
            assert before - timedelta(seconds=1) <= when <= after, (key, record)
    assert any(r.get("next_run_at") for r in ends)
    # a run that ends after the stop began has no next run (its task was cancelled)
    tick = [r for r in ends if r["name"] == "tick" and r["next_run_at"]]
    assert datetime.fromisoformat(tick[-1]["next_run_at"]) > datetime.fromisoformat(tick[-1]["scheduled_at"])


def test_header_counts_workers_in_words(jobs_file) -> None:
    one = cli("run", str(jobs_file()), "--duration", "0.3", "--plain", "--workers", "1")
    threads = cli("run", str(jobs_file()), "--duration", "0.3", "--plain", "--workers", "3", "--runner", "threads")
    assert "on 1 worker process," in one.stdout.splitlines()[0]
    assert "on 3 worker threads," in threads.stdout.splitlines()[0]


def test_workers_after_shutdown_are_not_busy(jobs_file) -> None:
    path = jobs_file("""
        import time
        from procsched import every

        @every(0.05)
        def busy():
            time.sleep(0.3)
    """)
    done = cli("run", str(path), "--duration", "1", "--plain", "--workers", "1")
    assert done.returncode == 0, done.stderr
    workers = done.stdout[done.stdout.index("workers (last seen)") :]
    assert " busy " not in workers and ("stopped" in workers or "exited" in workers), workers


def test_the_workers_table_counts_the_jobs_runs_only(jobs_file) -> None:
    """The command's own warm-up run (before the jobs start: start-up is not lateness) is no
    job's run: the workers table does not count it (it said one run more than the summary)."""
    path = jobs_file("""
        from procsched import every

        @every(0.05)
        def quick():
            pass
    """)
    done = cli("run", str(path), "--duration", "1", "--plain", "--workers", "1")
    assert done.returncode == 0, done.stderr
    workers = done.stdout[done.stdout.index("workers (last seen)") :].splitlines()
    # worker, pid, state, RSS, MiB, runs, restarts (the table is read when the stop begins)
    counted = int(workers[3].split()[5])
    runs = int(re.search(r"stopped after [\d.]+ s: (\d+) runs", done.stdout).group(1))
    assert runs - 1 <= counted <= runs, done.stdout
