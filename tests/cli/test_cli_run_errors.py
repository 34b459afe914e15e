"""Issue 26 item 3 at the command line: a failed run's line says its error,
the last run of a job that ends at ``max_runs`` included (it said nothing,
and ``--json`` had ``"error": null``); the job's failed runs are logged once
per burst, not once a run."""

from __future__ import annotations

import json

import pytest
from cli_helpers import cli

pytestmark = pytest.mark.timeout(60)

FAILING = """
    from procsched import every

    @every(0.05, max_runs=3)
    def fetch():
        raise ValueError("no data")
"""


def test_plain_lines_say_every_failed_runs_error_and_the_log_says_it_once(jobs_file) -> None:
    done = cli("run", str(jobs_file(FAILING)), "--plain", "--duration", "1", "--workers", "1")
    assert done.returncode == 0, done.stderr
    runs = [line for line in done.stdout.splitlines() if " fetch " in line and " error " in line]
    assert len(runs) == 3, runs
    assert all(line.endswith("ValueError: no data") for line in runs), runs  # the last one too
    first, summary = done.stderr.splitlines()
    assert first.startswith("procsched: task ") and first.endswith(
        " (fetch) run 1 failed: ValueError: no data (its further failures are summed up until a run succeeds)"
    )
    assert summary.endswith(" (fetch) failed 2 more time(s) before it ended; the last: ValueError: no data")


def test_json_has_the_last_runs_error_and_traceback(jobs_file) -> None:
    done = cli("run", str(jobs_file(FAILING)), "--json", "--duration", "1", "--workers", "1")
    assert done.returncode == 0, done.stderr
    failed = [r for r in map(json.loads, done.stdout.splitlines()) if r["event"] == "run_failed"]
    assert [(r["run"], r["error"]) for r in failed] == [(n, "ValueError: no data") for n in (1, 2, 3)]
    last = failed[-1]
    assert last["state"] == "done" and 'raise ValueError("no data")' in last["traceback"]
