"""The store writer thread (_commit.py) on a real SQLite file: commits in
order, reports each one through its pipe, keeps the WAL bounded."""

from __future__ import annotations

import os
import select

from procsched._runtime._durable._writer import Writer
from procsched._store import TaskDefinition, TaskState, open_store
from procsched._store._model import BatchResult

OPTS = {
    "priority": 0,
    "timeout_ns": None,
    "stop_on_error": False,
    "name": None,
    "max_runs": None,
    "retry": None,
    "until_wall_ns": None,
}
SCHED = {"kind": "fixed_rate", "period_ns": 10**9, "initial_delay_ns": 0, "misfire": "skip"}


def _committed(writer: Writer) -> tuple[object, object]:
    ready, _, _ = select.select([writer.fd], [], [], 30)  # the pipe says when
    assert ready, "the writer did not report its commit"
    return writer.collect()


def test_commits_in_order_and_reports_each(tmp_path):
    path = str(tmp_path / "w.db")
    open_store(path).close()
    writer = Writer(path)
    try:
        for i in range(50):
            batch = writer.store.batch()
            batch.upsert(TaskDefinition("k", "m:f", b"x", SCHED, OPTS), TaskState(i, i))
            writer.submit(batch, [i])
            held, result = _committed(writer)
            assert held == [i] and isinstance(result, BatchResult)
        assert open_store(path).get("k").state.run_count == 49  # the last one written last
    finally:
        writer.close()


def test_the_wal_stays_bounded(tmp_path):
    path = str(tmp_path / "w.db")
    open_store(path).close()
    writer = Writer(path)
    try:
        for i in range(4000):  # ~50 MB of WAL if nothing checkpointed it
            batch = writer.store.batch()
            batch.upsert(TaskDefinition(f"k{i % 500}", "m:f", b"x" * 200, SCHED, OPTS), TaskState(i, i))
            writer.submit(batch, [])
            _committed(writer)
        assert os.path.getsize(path + "-wal") < 20_000_000
    finally:
        writer.close()
