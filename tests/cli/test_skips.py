"""Issue 22: ``procsched run`` shows each skipped slot as it happens - a
plain line, a JSON record, a line in the live view - counts them per job in
the summary, and Prometheus gets ``procsched_skipped_slots_total{job,reason}``.

The job's first run blocks reading a FIFO that the test opens only once it
has seen a skipped slot: so the skip is shown while the run it overlapped is
still running (as it happens), never with that run's end.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cli_helpers import read_until, start_cli

pytestmark = pytest.mark.timeout(60)

JOBS = """
    import os
    import procsched
    from procsched import every

    @every(0.02, overlap="skip")
    def slow():
        if procsched.current_run().run == 1:
            with open(os.environ["SKIPS_FIFO"]) as fifo:  # blocks until the test opens it
                fifo.read()
"""


@pytest.fixture
def fifo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "release"
    os.mkfifo(path)
    monkeypatch.setenv("SKIPS_FIFO", str(path))
    return path


def _release(fifo: Path) -> None:
    """Let the first run end (it holds the FIFO's reading end open)."""
    with open(fifo, "w") as end:
        end.write("go")


def test_plain_lines_show_each_skipped_slot_as_it_happens_and_the_summary_counts_them(jobs_file, fifo) -> None:
    proc = start_cli("run", str(jobs_file(JOBS)), "--plain", "--workers", "1")
    try:
        seen = read_until(proc.stdout, " skipped ")
        assert not any(" run 1 " in line for line in seen)  # run 1 is still running
        line = seen[-1]
        stamp = r"\d\d:\d\d:\d\d\.\d{3}"
        assert re.fullmatch(rf"{stamp}  slow +skipped +overlap +\(slot {stamp}\)\n", line), line
        _release(fifo)
        read_until(proc.stdout, " run 3 ")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    table = out[out.index("procsched - 1 job") :]
    header = next(line for line in table.splitlines() if line.strip().startswith("job"))
    assert "skipped" in header.split()
    row = next(line for line in table.splitlines() if line.strip().startswith("slow"))
    skipped = int(row.split()[header.split().index("skipped") - len(header.split())])
    assert skipped >= 1
    assert re.search(rf"; {skipped} skipped slots?;", out), out[-300:]


def test_a_slot_dropped_by_the_misfire_policy_is_one_line(jobs_file) -> None:
    """Run 1 takes 0.4 s of a 0.05 s grid: misfire="skip" drops the slots it
    overlapped, and each is told once (its "skipped misfire" line), never
    twice (once more in a count of missed slots)."""
    body = """
        import time
        import procsched
        from procsched import every

        @every(0.05, misfire="skip")
        def slow():
            if procsched.current_run().run == 1:
                time.sleep(0.4)
    """
    proc = start_cli("run", str(jobs_file(body)), "--plain", "--workers", "1")
    try:
        seen = read_until(proc.stdout, " run 2 ")
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    skipped = [line for line in seen if " skipped " in line]
    assert len(skipped) >= 5, "".join(seen)  # (0.4 s of a 0.05 s grid)
    assert all(re.search(r"  slow +skipped +misfire +\(slot [\d:.]+\)$", line) for line in skipped), skipped
    slots = [line.split("(slot ")[1] for line in skipped]
    assert len(set(slots)) == len(slots)  # one line per slot


def test_a_restart_from_a_store_shows_each_slot_missed_while_down(jobs_file, tmp_path) -> None:
    body = """
        from procsched import every

        @every(0.1, misfire="skip")
        def tick():
            pass
    """
    jobs, store = str(jobs_file(body)), str(tmp_path / "jobs.db")
    for restart in (False, True):
        proc = start_cli("run", jobs, "--plain", "--workers", "1", "--store", store)
        try:
            seen = read_until(proc.stdout, " ok ")  # the first run's line
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)
        finally:
            proc.kill()
        if not restart:
            time.sleep(0.5)  # down: ~5 slots pass while no scheduler runs
    down = [line for line in seen if re.search(r"  tick +skipped +down +\(slot [\d:.]+\)$", line)]
    assert len(down) >= 3, "".join(seen)
    assert seen.index(down[-1]) < len(seen) - 1  # told before the first run after the restart


def test_json_records_each_skip_and_prometheus_counts_them(jobs_file, fifo) -> None:
    pytest.importorskip("prometheus_client")
    proc = start_cli("run", str(jobs_file(JOBS)), "--json", "--workers", "1", "--metrics-port", "0")
    try:
        url = json.loads(read_until(proc.stdout, "procsched_started")[-1])["metrics"]
        seen = read_until(proc.stdout, '"run_skipped"')
        assert not any('"run_finished"' in line for line in seen)  # run 1 is still running
        record = json.loads(seen[-1])
        read_until(proc.stdout, '"run_skipped"')  # the metrics listener has seen the first one by now
        with urllib.request.urlopen(url, timeout=10) as response:
            metrics = response.read().decode()
        _release(fifo)
        read_until(proc.stdout, '"run": 3')
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert record["event"] == "run_skipped" and record["name"] == "slow" and record["reason"] == "overlap"
    slot = datetime.fromisoformat(record["scheduled_at"])
    assert slot.tzinfo is not None and abs((datetime.now(UTC) - slot).total_seconds()) < 60
    counted = re.search(r'^procsched_skipped_slots_total\{job="slow",reason="overlap"\} (\S+)$', metrics, re.M)
    assert counted is not None and float(counted.group(1)) >= 1, metrics
    summary = json.loads(out.splitlines()[-1])
    assert summary["event"] == "procsched_summary"
    (job,) = summary["jobs"]
    assert job["skipped"] >= 2 and job["skipped_by_reason"] == {"overlap": job["skipped"]}


def test_the_live_view_shows_skips_as_they_come_and_counts_them() -> None:
    pytest.importorskip("rich")
    from rich.console import Console

    from procsched import InlineScheduler, ManualClock
    from procsched._cli._board import Board
    from procsched._cli._lines import Lines
    from procsched._cli._live import LiveView
    from procsched._jobs import Job

    board = Board()
    job = Job(print, "rate", 0.02, {"name": "slow", "args": (), "kwargs": {}, "overlap": "skip"})
    board.add(job, job.start(InlineScheduler(ManualClock(time.monotonic()))), time.monotonic())
    slot = datetime.now(UTC).replace(microsecond=0)  # today: shown without its date

    def skip(reason: str, ms: int) -> None:
        at = slot.replace(microsecond=ms * 1000).isoformat()
        event = {"event": "run_skipped", "task_id": 1, "name": "slow", "scheduled_for": 1.0, "scheduled_at": at}
        board.on_event({**event, "reason": reason})

    def render() -> str:
        console = Console(width=150, height=30, file=io.StringIO(), color_system=None)
        view = LiveView(Lines("live", io.StringIO(), board), board, "procsched", console=console)
        with console.capture() as capture:
            console.print(view.render("up 1 s"))
        return capture.get()

    before = render()
    assert "skipped" not in before  # no column until a slot is skipped
    skip("overlap", 200)
    local = datetime.fromisoformat(slot.isoformat()).astimezone().strftime("%H:%M:%S")
    assert f"slow: slot {local}.200 skipped (overlap)" in render()
    for ms in (220, 240):
        skip("overlap", ms)
    shown = render()
    assert f"slow: 3 slots skipped (overlap), the last {local}.240" in shown  # one line, counted
    assert shown.count("skipped (overlap)") == 1
    skip("late", 260)
    shown = render()
    assert "slow: slot" in shown and "skipped (late)" in shown
    header = next(line for line in shown.splitlines() if "job" in line and "schedule" in line)
    row = next(line for line in shown.splitlines() if "slow" in line and "every" in line)
    cells = [c.strip() for c in row.split("│") if c.strip()]
    names = [c.strip() for c in header.split("┃") if c.strip()]
    assert cells[names.index("skipped")] == "4"


def test_the_decorators_refuse_bad_control_options_naming_them() -> None:
    from procsched import cron, every, once

    for declare in (lambda **kw: every(1, **kw), lambda **kw: cron("* * * * *", **kw)):
        for kwargs, error in (
            ({"overlap": "bogus"}, ValueError),
            ({"max_concurrent": 0}, ValueError),
            ({"max_concurrent": 1.5}, TypeError),
            ({"jitter": -1}, ValueError),
            ({"misfire_grace": float("nan")}, ValueError),
        ):
            with pytest.raises(error, match=next(iter(kwargs))):
                declare(**kwargs)
    with pytest.raises(ValueError, match="misfire_grace"):
        once(misfire_grace=-1)
