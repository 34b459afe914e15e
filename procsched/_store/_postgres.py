"""The shared store: PostgreSQL, through psycopg 3 (the ``procsched[postgres]`` extra).

psycopg is imported when a PostgresStore is made, so procsched works
without it. The connection is in autocommit mode and every transaction is
an explicit ``BEGIN`` ... ``COMMIT`` (READ COMMITTED): a claim is an
``UPDATE`` of the task row whose ``WHERE`` re-checks the row after any
concurrent claimer commits, so one claimer wins (see ``_sql``). Lease times
come from the server's ``clock_timestamp()``: one clock for every host.

Connecting fails fast: ``connect_timeout`` (seconds, default 5) bounds it.
A connection that breaks (server restart) is replaced at the next call;
the call that saw it break raises StoreError, with nothing written.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from .._errors import StoreError
from ._sql import KEEP_RUNS, SQLStore

#: Serialises concurrent schema creation (CREATE TABLE races in PostgreSQL).
_SCHEMA_LOCK_ID = 0x70726F63  # "proc"


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise StoreError(
            "a postgresql:// store needs psycopg 3: pip install 'procsched[postgres]'"
        ) from exc
    return psycopg


@functools.lru_cache(maxsize=256)
def _pg_sql(sql: str) -> str:
    return sql.replace("?", "%s")


class PostgresStore(SQLStore):
    """A store in the PostgreSQL database at ``url`` (``postgresql://...``)."""

    BLOB = "BYTEA"

    def __init__(
        self,
        url: str,
        *,
        keep_runs: int = KEEP_RUNS,
        connect_timeout: float = 5.0,
        clock: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(keep_runs=keep_runs, clock=clock)
        self.psycopg = _psycopg()
        self.url = url
        self.connect_timeout = max(2, int(connect_timeout + 0.999))  # libpq: whole seconds, at least 2
        self.describe = f"PostgreSQL store {_redact(url)}"
        self.conn: Any = None
        self._connect()
        try:
            self._init_schema()
        except BaseException:
            self.close()
            raise

    def _connect(self) -> None:
        try:
            self.conn = self.psycopg.connect(self.url, autocommit=True, connect_timeout=self.connect_timeout)
        except self.psycopg.Error as exc:
            raise StoreError(f"{self.describe}: cannot connect: {str(exc).strip()}") from exc

    def _cursor(self) -> Any:
        if self.conn is None or self.conn.closed or self.conn.broken:
            self._connect()
        return self.conn.cursor()

    def _begin(self, cur: Any, write: bool) -> None:
        cur.execute("BEGIN" if write else "BEGIN READ ONLY, ISOLATION LEVEL REPEATABLE READ")  # reads: one snapshot

    def _has_schema(self, cur: Any) -> bool:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_ID,))
        return cur.execute("SELECT to_regclass('procsched_version')").fetchone()[0] is not None

    def _now(self, cur: Any) -> int:
        if self._clock is not None:
            return self._clock()
        return int(cur.execute(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint * 1000").fetchone()[0])  # fmt: skip

    def _q(self, sql: str) -> str:
        return _pg_sql(sql)

    def _errors(self) -> tuple[type[BaseException], ...]:
        return (self.psycopg.Error,)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()

    def size_bytes(self) -> int:
        """Bytes of the procsched tables with their indexes, for the benchmarks."""
        with self._tx("measuring", write=False) as cur:
            row = cur.execute(
                "SELECT sum(pg_total_relation_size(c)) FROM unnest(ARRAY['procsched_tasks', 'procsched_runs', "
                "'procsched_schedulers', 'procsched_version']::regclass[]) AS c"
            ).fetchone()
        return int(row[0])


def _redact(url: str) -> str:
    """The URL without its password, for messages."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest:
        cred, _, host = rest.rpartition("@")
        if ":" in cred:
            return f"{scheme}://{cred.split(':', 1)[0]}:***@{host}"
    return url
