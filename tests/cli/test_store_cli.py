"""``procsched run --store``, ``procsched jobs`` and ``procsched history`` on a real SQLite store."""

from __future__ import annotations

import json

import pytest
from cli_helpers import cli, cli_here

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
    jobs = [json.loads(line) for line in cli_here("jobs", "--store", db, "--json").stdout.splitlines()]
    assert [(j["key"], j["schedule"], j["paused"], j["unloadable"]) for j in jobs] == [
        ("beat", "every 0.05s", False, None)
    ]
    assert jobs[0]["runs"] >= 2 and jobs[0]["function"] == "jobs:beat"
    runs = [
        json.loads(line)
        for line in cli_here("history", "--store", db, "beat", "-n", "1000", "--json").stdout.splitlines()
    ]
    assert [r["run"] for r in runs] == list(range(1, len(runs) + 1))  # run numbers went on across the restart
    assert len({r["instance"]["pid"] for r in runs}) == 2 and all(r["outcome"] == "ok" for r in runs)
    table = cli_here("history", "--store", db, "-n", "2").stdout.splitlines()
    assert table[0].split()[:3] == ["key", "run", "attempt"] and len(table) == 3


def test_jobs_and_history_on_a_bad_store_say_why(tmp_path):
    done = cli_here("jobs", "--store", str(tmp_path / "missing" / "s.db"))
    assert done.returncode == 1 and "no store at" in done.stderr
    done = cli_here("history", "--store", str(tmp_path / "s.db"), "-n", "0")
    assert done.returncode == 2
    (tmp_path / "jobs.py").write_text(JOBS)
    done = cli("run", "jobs.py", "--store", str(tmp_path / "missing" / "s.db"), "--plain", cwd=tmp_path)
    assert done.returncode == 1 and "cannot open the store" in done.stderr and "does not exist" in done.stderr


def test_read_only_commands_never_create_a_store(tmp_path):
    """Issue 26 item 7: a mistyped path is an error, and no file appears."""
    for argv in (
        ["jobs"],
        ["history", "beat"],
        ["remove", "beat"],
        ["pause", "beat"],
        ["resume", "beat"],
        ["cancel", "beat"],
        ["run-now", "beat", "--wait", "1"],
        ["web", "--port", "0"],
    ):
        done = (cli if argv[0] == "jobs" else cli_here)(*argv, "--store", str(tmp_path / "typo.db"))
        assert done.returncode == 1, argv
        assert done.stderr.startswith(f"procsched: cannot open the store: no store at {tmp_path / 'typo.db'} "), argv
        assert done.stderr.count("\n") == 1 and done.stdout == "", argv
    done = cli_here("history", "--store", "sqlite:///typo.db", cwd=tmp_path)
    assert done.returncode == 1 and f"no store at {tmp_path / 'typo.db'}" in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///s.db?keep_runs=abc",
        "mysql://x/y",
        "sqlite:///s.db?nope=1",
        "postgresql://nobody@127.0.0.1:1/nothing?connect_timeout=5",
    ],
)
def test_a_bad_store_url_is_one_line_everywhere(tmp_path, url):
    (tmp_path / "s.db").touch()  # so that the reading commands get as far as the URL
    (tmp_path / "jobs.py").write_text(JOBS)
    for argv in (["jobs"], ["history"], ["remove", "beat"], ["run", "jobs.py", "--duration", "0.5", "--plain"]):
        done = (cli if argv[0] == "run" else cli_here)(*argv, "--store", url, cwd=tmp_path)
        assert done.returncode == 1, (argv, done.stderr)
        assert done.stderr.startswith("procsched: cannot open the store: ") and done.stderr.count("\n") == 1, (
            argv,
            done.stderr,
        )
        assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.timeout(60)
def test_an_unknown_key_is_an_error_not_an_empty_table(tmp_path):
    (tmp_path / "jobs.py").write_text(JOBS)
    db = str(tmp_path / "s.db")
    assert cli("run", "jobs.py", "--store", db, "--duration", "0.3", "--json", cwd=tmp_path).returncode == 0
    done = cli_here("history", "--store", db, "beet")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == "procsched: no task 'beet' in the store (see procsched jobs --store ...)\n"
    assert cli_here("history", "--store", db, "beat", "-n", "1").returncode == 0
