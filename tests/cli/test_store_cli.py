"""``procsched run --store``, ``procsched jobs`` and ``procsched history`` on a real SQLite store."""

from __future__ import annotations

import json

import pytest
from cli_helpers import cli

JOBS = """\
from procsched import every

@every(0.05)
def beat():
    pass
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_run_with_a_store_goes_on_after_a_restart(tmp_path):
    (tmp_path / "jobs.py").write_text(JOBS)
    db = str(tmp_path / "s.db")
    for _ in range(2):
        done = cli("run", "jobs.py", "--store", db, "--duration", "0.5", "--json", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    jobs = [json.loads(line) for line in cli("jobs", "--store", db, "--json").stdout.splitlines()]
    assert [(j["key"], j["schedule"], j["paused"], j["unloadable"]) for j in jobs] == [
        ("beat", "every 0.05s", False, None)]
    assert jobs[0]["runs"] >= 2 and jobs[0]["function"] == "jobs:beat"
    runs = [json.loads(line) for line in cli("history", "--store", db, "beat", "-n", "1000", "--json").stdout.splitlines()]
    assert [r["run"] for r in runs] == list(range(1, len(runs) + 1))  # run numbers went on across the restart
    assert len({r["pid"] for r in runs}) == 2 and all(r["outcome"] == "ok" for r in runs)
    table = cli("history", "--store", db, "-n", "2").stdout.splitlines()
    assert table[0].split()[:3] == ["key", "run", "attempt"] and len(table) == 3


def test_jobs_and_history_on_a_bad_store_say_why(tmp_path):
    done = cli("jobs", "--store", str(tmp_path / "missing" / "s.db"))
    assert done.returncode == 1 and "does not exist" in done.stderr
    done = cli("history", "--store", str(tmp_path / "s.db"), "-n", "0")
    assert done.returncode == 2
    (tmp_path / "jobs.py").write_text(JOBS)
    done = cli("run", "jobs.py", "--store", str(tmp_path / "missing" / "s.db"), "--plain", cwd=tmp_path)
    assert done.returncode == 1 and "cannot open the store" in done.stderr and "does not exist" in done.stderr
