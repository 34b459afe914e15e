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

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from .._errors import StoreError
from ._access import NOW_SETTING
from ._model import Holder
from ._schema import check_schema
from ._sql import KEEP_RUNS, SQLStore
from ._url import lease_ns, redact, scrub, seconds

#: The server's clock, UTC ns (microseconds: what PostgreSQL keeps).
_CLOCK = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint * 1000"
#: Serialises concurrent schema creation (CREATE TABLE races in PostgreSQL).
_SCHEMA_LOCK_ID = 0x70726F63  # "proc"


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise StoreError("a postgresql:// store needs psycopg 3: pip install 'procsched[postgres]'") from exc
    return psycopg


@functools.lru_cache(maxsize=256)
def _pg_sql(sql: str) -> str:
    return sql.replace("?", "%s")


class PostgresStore(SQLStore):
    """A store in the PostgreSQL database at ``url`` (``postgresql://...``).

    ``read_only``: read an existing store (its tables must be there), every
    transaction read-only, nothing created. ``lease``: seconds, from
    ``lease=`` in the store URL (``lease_ns``). ``secret``: the key(s)
    signing stored payloads, for the shared code. The URL's password
    (``user:pw@`` or ``?password=``) is never shown: messages carry the
    URL ``redact``-ed and the driver's messages ``scrub``-bed."""

    BLOB = "BYTEA"

    def __init__(
        self,
        url: str,
        *,
        keep_runs: int = KEEP_RUNS,
        connect_timeout: float = 5.0,
        read_only: bool = False,
        lease: float | None = None,
        secret: Any = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(keep_runs=keep_runs, clock=clock, secret=secret)
        self.psycopg = _psycopg()
        self.url = url
        connect_timeout = seconds("connect_timeout", connect_timeout)
        self.connect_timeout = max(2, int(connect_timeout + 0.999))  # libpq: whole seconds, at least 2
        self.lease_ns = lease_ns(lease)
        self.read_only = read_only
        self.describe = f"PostgreSQL store {redact(url)}"
        # Session settings, made again on every new connection (a reconnect must not drop them).
        self._session: dict[str, str] = {"default_transaction_read_only": "on"} if read_only else {}
        self.conn: Any = None
        self._pipe: contextlib.ExitStack | None = None  # an open pipeline (see _begin)
        self._connect()
        try:
            if read_only:
                check_schema(self)
            else:
                self._init_schema()
        except BaseException:
            self.close()
            raise

    def _connect(self) -> None:
        psycopg = self.psycopg
        try:
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=self.connect_timeout)
            try:
                for name, value in self._session.items():
                    conn.execute("SELECT set_config(%s, %s, false)", (name, value))
            except BaseException:
                conn.close()
                raise
            self.conn = conn
        except psycopg.Error as exc:
            message = str(exc).strip()
            clean = scrub(message, self.url)
            raise StoreError(f"{self.describe}: cannot connect: {clean}") from (exc if clean == message else None)

    def bound_idle_transactions(self, ms: int) -> None:
        """Have the server end this session if it sits inside a transaction
        for ``ms`` without a statement (the process was stopped or hangs):
        its row locks would otherwise stall the schedulers taking it over.
        Kept for the connections this store makes after a drop too."""
        self._session["idle_in_transaction_session_timeout"] = str(int(ms))
        with self._tx("bounding idle transactions", write=False) as cur:
            cur.execute(
                "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
                (str(int(ms)),),
            )

    def __repr__(self) -> str:
        return f"<PostgresStore {redact(self.url)}{' read-only' if self.read_only else ''}>"

    def _dropped(self) -> bool:
        return self.conn is not None and (self.conn.closed or self.conn.broken)

    def _cursor(self) -> Any:
        if self.conn is None or self._dropped():
            self._connect()
        return self.conn.cursor()

    def _begin(self, cur: Any, write: bool, pipelined: bool = False) -> None:
        if write and pipelined:
            # psycopg's pipeline mode: BEGIN and what follows are sent, not
            # waited for, until _now or _renewed needs its answer (then the
            # pipeline ends: every later statement has its result at once).
            self._pipe = contextlib.ExitStack()
            self._pipe.enter_context(self.conn.pipeline())
        cur.execute("BEGIN" if write else "BEGIN READ ONLY, ISOLATION LEVEL REPEATABLE READ")  # reads: one snapshot

    def _unpipe(self) -> None:
        """End the pipeline, if one is open: what was sent is answered (an error raises here)."""
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            pipe.close()

    def _end(self, cur: Any, how: str) -> None:
        try:
            self._unpipe()
        except BaseException:
            if how == "ROLLBACK":  # (a COMMIT that raises here is rolled back by _tx)
                cur.execute(how)
            raise
        cur.execute(how)

    def _has_schema(self, cur: Any) -> bool:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_ID,))
        # The catalog read by this statement's snapshot: taken after the lock, so it sees a schema
        # that another instance created while this one waited (to_regclass did not: a name this
        # session looked up and missed before stays missing in its cache until the next
        # transaction, and both instances then created the tables - DuplicateTable).
        return bool(
            cur.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE tablename = 'procsched_version' "
                "AND schemaname = ANY (current_schemas(false)))"
            ).fetchone()[0]
        )

    def _now(self, cur: Any) -> int:
        """The store clock, kept in the transaction's ``NOW_SETTING`` too."""
        if self._clock is not None:
            now = self._clock()
            cur.execute("SELECT set_config(%s, %s, true)", (NOW_SETTING, str(now)))
            self._unpipe()
            return now
        cur.execute(f"SELECT n, set_config(%s, n::text, true) FROM (SELECT {_CLOCK} AS n) c", (NOW_SETTING,))
        self._unpipe()
        return int(cur.fetchone()[0])

    def _renewed(self, cur: Any, holder: Holder, status: str | None) -> int | None:
        return self._renewal_sent(cur, holder, status)()

    def _renewal_sent(self, cur: Any, holder: Holder, status: str | None) -> Callable[[], int | None]:
        """The lease renewed with the clock read in the same statement, kept
        in ``NOW_SETTING`` for the statements sent before its answer (and,
        pipelined, in the BEGIN's round trip: see ``_begin``)."""
        if self._clock is not None:
            now = super()._renewed(cur, holder, status)
            return lambda: now
        cur.execute(
            "UPDATE procsched_schedulers SET heartbeat_ns = c.now, lease_until_ns = c.now + lease_ns, "
            f"changes = changes + 1, status = COALESCE(%s, status) FROM (SELECT {_CLOCK} AS now) c "
            "WHERE id = %s AND token = %s RETURNING c.now, set_config(%s, c.now::text, true)",
            (status, holder.id, holder.token, NOW_SETTING),
        )

        def answer() -> int | None:
            self._unpipe()
            row = cur.fetchone()
            return None if row is None else int(row[0])

        return answer

    @contextlib.contextmanager
    def _together(self) -> Iterator[None]:
        """Pipeline mode: what is executed inside is sent, and its results read
        when the block ends (one round trip)."""
        with self.conn.pipeline():
            yield

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
                "'procsched_definitions', 'procsched_skipped', 'procsched_limits', 'procsched_requests', "
                "'procsched_schedulers', 'procsched_version']::regclass[]) AS c"
            ).fetchone()
        return int(row[0])
