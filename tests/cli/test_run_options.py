"""Issue 26 item 4: ``procsched run`` exposes the Scheduler options an
operator tunes (--lease, --max-tasks-per-worker, --max-worker-memory,
--no-capture), each reaching the real scheduler; ``lease=`` in the store
URL is accepted too, and the option wins."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import cli, read_until, start_cli

pytestmark = pytest.mark.timeout(60)


def _records(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines()]


def test_run_help_matches_the_scheduler_options() -> None:
    shown = " ".join(cli("run", "--help").stdout.split())
    for option in ("--workers", "--runner", "--policy", "--timeout", "--mp-context", "--store", "--lease",
                   "--max-tasks-per-worker", "--max-worker-memory", "--no-capture", "--keep-others"):  # fmt: skip
        assert option in shown, option
    assert "@cron" in shown and "@every" in shown and "@once" in shown


def test_lease_reaches_the_store_registration(jobs_file, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    proc = start_cli("run", str(jobs_file()), "--store", str(db), "--lease", "4.5", "--json", "--workers", "1")
    try:
        read_until(proc.stdout, '"run_finished"')
        with sqlite3.connect(db) as conn:
            leases = [row[0] for row in conn.execute("SELECT lease_ns FROM procsched_schedulers")]
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert leases == [4_500_000_000]


def test_max_tasks_per_worker_recycles_workers(jobs_file) -> None:
    path = jobs_file("from procsched import every\n\n@every(0.05)\ndef quick():\n    pass\n")
    done = cli("run", str(path), "--duration", "1", "--json", "--workers", "1", "--max-tasks-per-worker", "2")
    assert done.returncode == 0, done.stderr
    records = _records(done.stdout)
    exits = [r for r in records if r["event"] == "worker_exited" and r["exitcode"] == 0]
    assert len(exits) >= 3 and not any(r["crashed"] for r in exits)


def test_max_worker_memory_recycles_a_worker_that_grew(jobs_file) -> None:
    path = jobs_file("""
        from procsched import every

        kept = []

        @every(0.1)
        def grow():
            kept.append(bytearray(40 * 2**20))
    """)
    done = cli("run", str(path), "--duration", "1", "--json", "--workers", "1", "--max-worker-memory", "30M")
    assert done.returncode == 0, done.stderr
    assert sum(r["event"] == "worker_started" for r in _records(done.stdout)) >= 3


@pytest.mark.parametrize(("size", "message"), [("lots", "must be a size in bytes"), ("0", "must be a positive size"),
                                               ("2TB", "must be a size in bytes")])  # fmt: skip
def test_a_bad_size_is_named(size: str, message: str) -> None:
    done = cli("run", "x.py", "--max-worker-memory", size)
    assert done.returncode == 2 and f"argument --max-worker-memory: {message}" in done.stderr


def test_no_capture_lets_runs_write_straight_through(jobs_file) -> None:
    path = jobs_file('from procsched import once\n\n@once(delay=0.05)\ndef hello():\n    print("hello, unframed")\n')
    framed = cli("run", str(path), "--duration", "0.6", "--plain", "--workers", "1")
    straight = cli("run", str(path), "--duration", "0.6", "--plain", "--workers", "1", "--no-capture")
    assert "    │ hello, unframed" in framed.stdout
    assert "hello, unframed" in straight.stdout.splitlines() and "│ hello" not in straight.stdout


def test_an_option_the_runner_refuses_is_one_line(jobs_file) -> None:
    done = cli("run", str(jobs_file()), "--runner", "ray", "--max-tasks-per-worker", "5", "--plain")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("procsched: cannot start the scheduler: ") and done.stderr.count("\n") == 1
