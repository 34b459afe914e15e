"""``procsched run`` and ``procsched demo``, as a user runs them: a subprocess.

Synchronised on output lines and process exits; the timeouts are only
deadlock guards."""

from __future__ import annotations

import json
import re
import signal
import sys
from pathlib import Path

import psutil
import pytest
from cli_helpers import REPO, assert_all_gone, cli, cli_env, read_until, run_in_pty, start_cli

pytestmark = pytest.mark.timeout(60)


def test_plain_output_with_duration(jobs_file) -> None:
    path = jobs_file()
    done = cli("run", str(path), "--duration", "1", "--workers", "2")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"starting 3 jobs from {path.name} on 2 worker processes, for 1 s" in out.splitlines()[0]
    assert " tick " in out and " steady " in out
    boom = next(line for line in out.splitlines() if " boom " in line and "run 1" in line)
    assert "error" in boom and "RuntimeError: boom once" in boom
    # the final table, then the one-line summary
    assert "lateness p99" in out and "workers (last seen)" in out
    table = out[out.index("lateness p99") :]
    assert "every 0.1s" in table and "every 0.15s after each run" in table and "once in 0.05s" in table
    assert "procsched: stopped after 1.0 s:" in out.splitlines()[-1]


def test_json_output_names_the_job_on_every_line(jobs_file) -> None:
    done = cli("run", str(jobs_file()), "--duration", "1", "--json", "--workers", "2")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert records[0]["event"] == "procsched_started"
    assert [j["name"] for j in records[0]["jobs"]] == ["tick", "steady", "boom"]
    summary = records[-1]
    assert summary["event"] == "procsched_summary"
    by_name = {j["name"]: j for j in summary["jobs"]}
    assert by_name["boom"]["error"] == 1 and by_name["tick"]["ok"] >= 5
    runs = [r for r in records if r["event"].startswith("run_")]
    assert runs and all("ts" in r and "name" in r for r in records)
    assert {r["name"] for r in runs} == {"tick", "steady", "boom"}
    ticks = [r for r in runs if r["name"] == "tick" and r["event"] == "run_finished"]
    # by-reference pickling worked: the job ran in a worker process, not in the CLI
    cli_pids = {r["worker"] for r in ticks}
    assert all(isinstance(pid, int) for pid in cli_pids)
    assert not {r["event"] for r in records} - {
        "procsched_started",
        "procsched_summary",
        "run_started",
        "run_finished",
        "run_failed",
        "task_cancelled",
        "worker_started",
        "worker_exited",
    }


def test_threads_runner(jobs_file) -> None:
    done = cli("run", str(jobs_file()), "--duration", "0.5", "--runner", "threads", "--json")
    assert done.returncode == 0, done.stderr
    finished = [json.loads(line) for line in done.stdout.splitlines() if '"run_finished"' in line]
    assert finished and all(str(r["worker"]).startswith("procsched-worker") for r in finished)


def test_a_file_that_is_not_an_importable_name_is_pickled_by_value(jobs_file) -> None:
    """'my-jobs.py' cannot be imported by name in a worker: it is loaded by value."""
    path = jobs_file(name="my-jobs.py")
    done = cli("run", str(path), "--duration", "0.5", "--json", "--workers", "1")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert any(r["event"] == "run_finished" and r["name"] == "tick" for r in records)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_gracefully_and_leaves_no_process(jobs_file, sig: signal.Signals) -> None:
    proc = start_cli("run", str(jobs_file()), "--workers", "2")
    try:
        read_until(proc.stdout, "tick                 run 3 ")
        family = psutil.Process(proc.pid).children(recursive=True)
        assert family, "the dispatcher and the workers"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "procsched: stopped after" in out
    assert_all_gone(family)


def test_a_second_ctrl_c_kills_the_running_tasks(jobs_file) -> None:
    path = jobs_file("""
        import time
        from procsched import every

        @every(0.05)
        def quick():
            pass

        @every(60)
        def stuck():
            time.sleep(60)
    """)
    proc = start_cli("run", str(path), "--workers", "2")
    try:
        read_until(proc.stdout, "quick                run 2 ")
        family = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGINT)
        # "stuck" runs; "quick" may be mid-run at the signal too (1 or 2 running)
        read_until(proc.stdout, "running task(s) to finish")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert "second signal: killing" in out
    assert_all_gone(family)  # the dispatcher saw the CLI go and killed the stuck worker


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("import procsched\n@procsched.every(1)\ndef f(): pass\n1/0\n", "ZeroDivisionError: division by zero"),
        ("def f(:\n", "SyntaxError"),
        ("x = 1\n", "declares no jobs"),
        ("import procsched\n@procsched.every(0)\ndef f(): pass\n", "period must be > 0"),
        ("import procsched\n@procsched.every(-1)\ndef f(): pass\n", "period must be > 0, not -1"),
        ("import procsched\n@procsched.every\ndef f(): pass\n", "write @every(5), not @every"),
    ],
)
def test_a_broken_jobs_file_exits_non_zero_with_the_reason(jobs_file, body: str, reason: str) -> None:
    path = jobs_file(body)
    done = cli("run", str(path))
    assert done.returncode == 1
    assert f"procsched: cannot load {path}" in done.stderr and reason in done.stderr
    assert "importlib" not in done.stderr  # the traceback starts in the user's file
    assert done.stdout == ""


def test_a_missing_jobs_file(tmp_path: Path) -> None:
    done = cli("run", str(tmp_path / "nope.py"))
    assert done.returncode == 1 and "no such file" in done.stderr


def test_bad_command_lines() -> None:
    assert cli().returncode == 2
    assert cli("run", "x.py", "--duration", "-1").returncode == 2
    assert cli("run", "x.py", "--runner", "fibers").returncode == 2


@pytest.mark.timeout(90)
def test_demo_counts_crashes_and_timeouts_and_keeps_the_rest(tmp_path: Path) -> None:
    done = cli("demo", "--duration", "4.5", "--json", timeout=80)  # segfaulter crashes at 2.5 s: 2 s of slack
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    jobs = {j["name"]: j for j in summary["jobs"]}
    assert set(jobs) == {
        "count_primes",
        "hash_chain",
        "heartbeat",
        "on_the_clock",
        "flaky_fetch",
        "segfaulter",
        "hangs",
    }
    assert jobs["on_the_clock"]["schedule"] == "cron */2 * * * * *" and jobs["on_the_clock"]["runs"] >= 1
    assert jobs["flaky_fetch"]["schedule"] == "every 2s, retry 3x"
    # each run of flaky_fetch fails once and succeeds on its retry: a run counts once, by its last attempt
    flaky = jobs["flaky_fetch"]
    assert flaky["retries"] >= 1 and flaky["ok"] >= 1 and flaky["error"] == 0 and flaky["runs"] == flaky["ok"]
    assert jobs["segfaulter"]["crashed"] >= 1 and jobs["segfaulter"]["ok"] >= 1
    assert jobs["hangs"]["timeout"] >= 1
    for name in ("count_primes", "hash_chain", "heartbeat", "on_the_clock"):
        assert jobs[name]["crashed"] == jobs[name]["timeout"] == jobs[name]["error"] == 0
        assert jobs[name]["runs"] >= 1


def test_demo_plain_summary(tmp_path: Path) -> None:
    done = cli("demo", "--duration", "1.5", "--plain")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "procsched demo: 1.5 s on" in out
    assert "runs  expected  lateness p99" in out
    assert "segfault(s) and" in out and "worker process(es) were replaced" in out


def test_live_view_on_a_terminal(jobs_file) -> None:
    pytest.importorskip("rich")
    code, screen = run_in_pty("run", str(jobs_file()), "--duration", "2.5")
    assert code == 0, screen
    assert "┃ job" in screen and "lateness p99" in screen and "restarts" in screen
    assert re.search(r"up [12] s - Ctrl-C to stop", screen), screen  # the view was redrawn as time went
    stopped = re.search(r"stopped after (\d+\.\d) s", screen)
    assert stopped and 2.5 <= float(stopped[1]) < 10, screen  # (later under load: the stop waits for runs)
    assert "procsched: stopped after" in screen


def test_plain_lines_on_a_terminal_without_rich(jobs_file, tmp_path: Path) -> None:
    no_rich = tmp_path / "no_rich" / "rich"
    no_rich.mkdir(parents=True)
    (no_rich / "__init__.py").write_text("raise ImportError('rich is not installed here')\n")
    code, screen = run_in_pty("run", str(jobs_file()), "--duration", "0.5", pythonpath=str(no_rich.parent))
    assert code == 0, screen
    assert "procsched: starting 3 jobs" in screen and "┃" not in screen
    assert " tick                 run 1    ok" in screen


def test_python_dash_m_and_console_script_agree() -> None:
    script = Path(sys.executable).with_name("procsched")
    if not script.exists():
        pytest.skip("the console script is not installed in this environment")
    import subprocess

    shown = subprocess.run([str(script), "--help"], capture_output=True, text=True, env=cli_env(), timeout=30)
    assert shown.returncode == 0 and "run" in shown.stdout and "demo" in shown.stdout
    assert cli("--help").stdout.replace("__main__.py", "procsched") == shown.stdout
    assert (REPO / "procsched" / "__main__.py").exists()


def test_the_dispatcher_dying_is_reported(jobs_file) -> None:
    proc = start_cli("run", str(jobs_file()), "--workers", "1")
    try:
        read_until(proc.stdout, "tick                 run 2 ")
        family = psutil.Process(proc.pid).children(recursive=True)
        dispatcher = next(p for p in psutil.Process(proc.pid).children() if "_dispatcher" in " ".join(p.cmdline()))
        dispatcher.kill()
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 3, err
    assert "procsched: the scheduler broke: the dispatcher process" in err
    assert_all_gone(family)


def test_next_prints_fire_times_with_dst() -> None:
    done = cli("next", "30 2 * * *", "--tz", "America/New_York", "-n", "2", "--after", "2026-03-07T12:00:00+00:00")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("2026-03-08 03:00:00 EDT (-04:00)   2026-03-08T07:00:00Z")
    assert "DST gap" in lines[0]
    assert lines[1].startswith("2026-03-09 02:30:00 EDT (-04:00)   2026-03-09T06:30:00Z")
    done = cli(
        "next", "0 * * * *", "--tz", "Europe/Berlin", "-n", "3", "--after", "2026-10-25T00:30:00+00:00", "--json"
    )
    assert [json.loads(line)["utc"] for line in done.stdout.splitlines()] == [
        "2026-10-25T01:00:00Z",
        "2026-10-25T02:00:00Z",
        "2026-10-25T03:00:00Z",
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("next", "61 * * * *"), "61 * * * *"),
        (("next", "@daily", "--tz", "Nowhere/Special"), "Nowhere/Special"),
        (("next", "@daily", "--after", "tomorrow"), "--after"),
        (("next", "0 0 * * *", "--tz", "America/New_York", "--after", "0001-01-01T00:00:00+00:00"), "year 1 to 9999"),
    ],
)
def test_next_bad_input(argv: tuple[str, ...], message: str) -> None:
    done = cli(*argv)
    assert done.returncode == 2 and message in done.stderr and done.stdout == ""
    assert "Traceback" not in done.stderr


def test_next_reads_a_naive_after_in_its_zone_and_notes_only_real_gaps() -> None:
    """Issue 26 item 12, issue 20 item 21."""
    done = cli("next", "0 3 * * *", "--tz", "America/New_York", "-n", "2", "--after", "2026-03-07T12:00")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()  # 03:00 EDT is the first instant after the gap, but it is the time named
    assert lines == [
        "2026-03-08 03:00:00 EDT (-04:00)   2026-03-08T07:00:00Z",
        "2026-03-09 03:00:00 EDT (-04:00)   2026-03-09T07:00:00Z",
    ]
    moved = cli("next", "30 2 * * *", "--tz", "America/New_York", "-n", "1", "--after", "2026-03-07T12:00")
    assert moved.stdout.splitlines() == [
        "2026-03-08 03:00:00 EDT (-04:00)   2026-03-08T07:00:00Z   (02:30:00 does not exist that day: DST gap)"
    ]
    hourly = cli("next", "0 * * * *", "--tz", "America/New_York", "-n", "2", "--after", "2026-03-08T01:30")
    assert "DST" not in hourly.stdout and "03:00:00 EDT" in hourly.stdout  # 02:00 is skipped, not moved


def test_next_prints_offsets_with_seconds_and_stops_at_the_end_of_the_calendar() -> None:
    done = cli("next", "0 0 1 1 *", "--tz", "Europe/Paris", "-n", "1", "--after", "1900-06-01T00:00:00+00:00")
    assert done.stdout.splitlines() == ["1901-01-01 00:00:00 PMT (+00:09:21)   1900-12-31T23:50:39Z"]
    done = cli("next", "0 0 1 1 *", "-n", "3", "--after", "9997-06-01T00:00:00+00:00", "--tz", "UTC")
    assert done.returncode == 0 and "Traceback" not in done.stderr
    assert [line[:10] for line in done.stdout.splitlines()] == ["9998-01-01", "9999-01-01"]
    assert "ends in the year 9999" in done.stderr
