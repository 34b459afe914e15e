"""How the CLI words events (in-process): wall-clock times (14.7), a run's
output framed in plain lines and carried in JSON (14.1), worker counts (14.2)."""

from __future__ import annotations

import io
import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from procsched._cli import _times
from procsched._cli._board import Board, pool_text
from procsched._cli._lines import Lines, json_record


def _end(**fields: object) -> dict[str, object]:
    event = {
        "event": "run_crashed",
        "task_id": 1,
        "name": "segfaulter",
        "run": 3,
        "worker": 4242,
        "outcome": "crashed",
        "scheduled_for": 100.0,
        "started_at": 100.5,
        "finished_at": 101.0,
        "duration": 0.5,
        "lateness": 0.5,
        "state": "pending",
        "next_run": 102.0,
        "error": "WorkerCrashedError: worker 4242 died (SIGSEGV)",
        "traceback": None,
        "output": "before the crash\nFatal Python error: Segmentation fault\n",
    }
    event.update(fields)
    return event


def test_until_text_is_relative_then_local_wall_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        off = datetime(2026, 12, 3, 1, 0, tzinfo=UTC).timestamp() - 1000.0  # mono 1000 = 02:00 CET
        assert _times.until_text(999.0, 1000.0, off) == "due"
        assert _times.until_text(1000.25, 1000.0, off) == "in 250 ms"
        assert _times.until_text(1003.2, 1000.0, off) == "in 3.2 s"
        assert _times.until_text(1042.0, 1000.0, off) == "in 42 s"
        assert _times.until_text(1000.0 + 600, 1000.0, off) == "02:10:00 CET"
        assert _times.until_text(1000.0 + 3600, 1000.0, off) == "03:00 CET"
        assert _times.until_text(1000.0 + 86400, 1000.0, off) == "Dec 04 02:00 CET"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_json_record_has_iso_utc_times_and_the_output() -> None:
    off = _times.offset()
    record = json_record(_end())
    assert list(record)[:2] == ["event", "name"]
    for key in ("scheduled_at", "started_at", "finished_at", "next_run_at"):
        when = datetime.fromisoformat(record[key])
        assert when.tzinfo is not None and when.utcoffset() == timedelta(0)
    assert "scheduled_for" not in record and "next_run" not in record
    started = datetime.fromisoformat(record["started_at"]).timestamp()
    assert started == pytest.approx(100.5 + off, abs=0.01)
    assert record["output"].startswith("before the crash")
    json.dumps(record)


def test_plain_line_frames_the_output_under_its_run() -> None:
    out = io.StringIO()
    lines = Lines("plain", out, Board())
    lines.on_event(_end())
    text = out.getvalue().splitlines()
    assert " segfaulter " in text[0] and " crashed " in text[0] and text[0].endswith("(SIGSEGV)")
    assert text[1] == "    ┌─ segfaulter run 3 crashed (WorkerCrashedError: worker 4242 died (SIGSEGV))"
    assert text[2:] == ["    │ before the crash", "    │ Fatal Python error: Segmentation fault", "    └─"]


def test_plain_line_without_output_is_one_line() -> None:
    out = io.StringIO()
    Lines("plain", out, Board()).on_event(_end(output=None, outcome="ok", event="run_finished", error=None))
    assert len(out.getvalue().splitlines()) == 1


def test_tracebacks_are_framed_only_when_asked() -> None:
    tb = "Traceback (most recent call last):\n  File \"jobs.py\", line 3, in f\nKeyError: 'x'\n"
    event = _end(output=None, outcome="error", event="run_failed", error="KeyError: 'x'", traceback=tb)
    short, long = io.StringIO(), io.StringIO()
    Lines("plain", short, Board()).on_event(dict(event))
    Lines("plain", long, Board(), tracebacks=True).on_event(dict(event))
    assert len(short.getvalue().splitlines()) == 1
    assert "    │ KeyError: 'x'" in long.getvalue()


@pytest.mark.parametrize(
    ("workers", "runner", "text"),
    [
        (1, "processes", "1 worker process"),
        (4, "processes", "4 worker processes"),
        (1, "threads", "1 worker thread"),
        (3, "threads", "3 worker threads"),
        (2, "ray", "2 ray workers"),
    ],
)
def test_pool_text(workers: int, runner: str, text: str) -> None:
    assert pool_text(workers, runner) == text


def test_plain_stamp_is_local_wall_time() -> None:
    out = io.StringIO()
    Lines("plain", out, Board()).on_event(_end(output=None))
    stamp = out.getvalue().split()[0]
    now = datetime.now().astimezone()
    parsed = datetime.combine(now.date(), datetime.strptime(stamp, "%H:%M:%S.%f").time(), now.tzinfo)
    apart = abs((parsed - now).total_seconds())
    assert min(apart, 86400 - apart) < 5  # (across midnight, a day apart)
