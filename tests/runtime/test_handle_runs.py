"""A handle keeps its runs as the event thread heard them (RunRecord) and
makes them RunInfo when ``runs`` is read: what a reader sees is the same
either way, trimmed to ``handle_runs``, and a copy."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

from procsched._core import TaskState
from procsched._handle import RunInfo, RunRecord, TaskHandle

WALL = 1_767_225_600_000_000_000  # 2026-01-01 00:00 UTC, in ns


def record(run: int) -> RunRecord:
    ns = run * 1_000_000_000
    return RunRecord(7, run, ns, ns + 1000, ns + 2000, 4242, "ok", 1, WALL + ns, None, "schedule", None, None)


def test_records_read_as_the_runinfo_made_at_once_trimmed_in_order() -> None:
    handle = TaskHandle(SimpleNamespace(handle_runs=3), 7, "t", None)  # type: ignore[arg-type]
    for run in range(1, 6):
        # A listener makes some of them RunInfo at once: the two kinds mix in the list.
        handle._on_run(record(run).info() if run == 4 else record(run), TaskState.PENDING, None)
    runs = handle.runs
    assert [r.run for r in runs] == [3, 4, 5] and handle.run_count == 5
    assert all(type(r) is RunInfo for r in runs)
    assert runs[0] == RunInfo(7, 3, 3.0, 3.000001, 3.000002, 4242, "ok", 1, datetime(2026, 1, 1, 0, 0, 3, tzinfo=UTC))
    runs.clear()  # a copy: the handle's list is its own
    handle._on_run(record(6), TaskState.PENDING, None)
    assert [r.run for r in handle.runs] == [4, 5, 6]
    assert [r.run for r in handle.slots(2)] == [5, 6]
