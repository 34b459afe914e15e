"""The embedded store: one SQLite file, through the standard library.

WAL mode (readers never block the writer), ``isolation_level=None`` (we say
when a transaction starts), every write transaction ``BEGIN IMMEDIATE`` (the
write lock is taken at the start, so two writers serialise there instead of
failing at their first write), and ``busy_timeout`` (a writer waits for the
lock inside SQLite, up to that long, then fails with StoreError).

Durability: ``synchronous=FULL`` by default - each commit is fsynced, so a
committed turn survives a power cut; batching makes that one fsync per
dispatcher turn, not per run. ``synchronous="NORMAL"`` survives a crash of
any process (SIGKILL) but may lose the last turns on a power cut.
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any, Callable

from .._errors import StoreError
from ._sql import KEEP_RUNS, SQLStore


class SQLiteStore(SQLStore):
    """A store in the SQLite file at ``path`` (created if missing, in an
    existing directory). ``clock``: the store clock for leases (UTC ns;
    default ``time.time_ns``; see ``_sql``'s docstring on skew)."""

    RUNS_SUFFIX = " WITHOUT ROWID"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        keep_runs: int = KEEP_RUNS,
        busy_timeout: float = 10.0,
        synchronous: str = "FULL",
        clock: Callable[[], int] | None = None,
        _connect: Callable[..., Any] = sqlite3.connect,
    ) -> None:
        super().__init__(keep_runs=keep_runs, clock=clock)
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
        if not isinstance(busy_timeout, (int, float)) or not busy_timeout >= 0:
            raise ValueError(f"busy_timeout must be seconds >= 0, got {busy_timeout!r}")
        self.path = os.path.abspath(os.fspath(path))
        self.describe = f"SQLite store {self.path}"
        directory = os.path.dirname(self.path)
        if not os.path.isdir(directory):
            raise StoreError(f"{self.describe}: the directory {directory} does not exist")
        if os.path.isdir(self.path):
            raise StoreError(f"{self.describe}: is a directory, not a database file")
        try:
            self.conn = _connect(self.path, isolation_level=None, timeout=busy_timeout, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.describe}: cannot open: {exc}") from exc
        try:
            self.conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            mode = self.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"{self.describe}: cannot use WAL mode (journal_mode is {mode})")
            self.conn.execute(f"PRAGMA synchronous = {synchronous}")
            self._init_schema()
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            if "not a database" in str(exc) or "malformed" in str(exc):
                raise StoreError(f"{self.describe}: not a SQLite database, or corrupted: {exc}") from exc
            raise StoreError(f"{self.describe}: cannot open: {exc}") from exc
        except BaseException:
            self.conn.close()
            raise

    def _cursor(self) -> Any:
        return self.conn.cursor()

    def _begin(self, cur: Any, write: bool) -> None:
        # A writer takes the lock up front (waiting busy_timeout for it); a
        # reader reads a WAL snapshot and never blocks the writer.
        cur.execute("BEGIN IMMEDIATE" if write else "BEGIN DEFERRED")

    def _has_schema(self, cur: Any) -> bool:
        row = cur.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'procsched_version'").fetchone()
        return row is not None

    def _now(self, cur: Any) -> int:
        return (self._clock or time.time_ns)()

    def _errors(self) -> tuple[type[BaseException], ...]:
        return (sqlite3.Error,)

    def close(self) -> None:
        self.conn.close()

    def size_bytes(self) -> int:
        """Bytes of the database (its pages in use), for the benchmarks."""
        with self._tx("measuring", write=False) as cur:
            count = cur.execute("PRAGMA page_count").fetchone()[0]
            free = cur.execute("PRAGMA freelist_count").fetchone()[0]
            size = cur.execute("PRAGMA page_size").fetchone()[0]
        return int((count - free) * size)
