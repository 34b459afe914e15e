"""The schema-1 fixtures: stores written by the release before schema 2.

``fixtures/schema1.sqlite`` and ``fixtures/schema1.postgresql.sql`` were
written by a real program of commit 7945013 (``fixtures/make_schema1.py``),
killed with SIGKILL while a run was in flight. ``place(kind, ...)`` puts a
fresh copy where a test can open it (a copy of the SQLite file; the dump
restored into a throwaway PostgreSQL database) and returns its URL; the
fixture files themselves are never written.

``shift(...)``: move every time in the store (schema 1's columns) by whole
seconds, so that the program looks killed a moment ago - a real scheduler
started on it then catches up a few slots, not every slot since the day
the fixture was written.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")
SQLITE = os.path.join(FIXTURES, "schema1.sqlite")
DUMP = os.path.join(FIXTURES, "schema1.postgresql.sql")
NS = 1_000_000_000

# schema 1's time columns
TIMES = {
    "procsched_tasks": ("next_due_ns", "updated_ns"),
    "procsched_runs": ("scheduled_ns", "started_ns", "finished_ns"),
    "procsched_schedulers": ("lease_until_ns", "heartbeat_ns"),
}


def place(kind: str, tmp_path: Any, pg_url: str | None = None) -> str:
    """A fresh schema-1 store of ``kind`` ("sqlite" | "postgresql"); its URL."""
    if kind == "sqlite":
        path = str(tmp_path / "schema1.db")
        shutil.copyfile(SQLITE, path)
        return path
    import psycopg

    assert pg_url is not None
    with open(DUMP) as f:
        sql = "".join(line for line in f if not line.startswith("\\"))  # (psql meta-commands, if any)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]
    return pg_url


def connect(url: str) -> Any:
    """A plain DB-API connection to the store (autocommit), for raw SQL."""
    if url.startswith("postgresql://"):
        import psycopg

        return psycopg.connect(url, autocommit=True)
    return sqlite3.connect(url, isolation_level=None)


def rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    conn = connect(url)
    try:
        return [tuple(r) for r in conn.execute(sql).fetchall()]
    finally:
        conn.close()


def shift(url: str, now_ns: int, lease_ended_ago_ns: int = NS, host: str | None = None) -> int:
    """Move every time by whole seconds so the last lease ended
    ``lease_ended_ago_ns`` before ``now_ns`` (negative: it ends that much
    later); ``host``: say the dead instance ran there. Returns the shift."""
    conn = connect(url)
    try:
        last = conn.execute("SELECT max(lease_until_ns) FROM procsched_schedulers").fetchone()[0]
        delta = (now_ns - lease_ended_ago_ns - last) // NS * NS
        ph = "%s" if url.startswith("postgresql://") else "?"
        for table, cols in TIMES.items():
            sets = ", ".join(f"{c} = {c} + {ph}" for c in cols)
            conn.execute(f"UPDATE {table} SET {sets}", (delta,) * len(cols))
        if host is not None:
            conn.execute(f"UPDATE procsched_schedulers SET host = {ph}", (host,))
        return int(delta)
    finally:
        conn.close()
