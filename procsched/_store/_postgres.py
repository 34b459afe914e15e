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
from ._open import check_schema, lease_ns, redact, scrub, seconds
from ._sql import _REPLACE_RUN, _RUN_COLS, KEEP_RUNS, SLOT_GAP_NS, SQLStore

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
            cur.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, false)", (str(int(ms)),))

    def __repr__(self) -> str:
        return f"<PostgresStore {redact(self.url)}{' read-only' if self.read_only else ''}>"

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

    def _lock_tasks(self, cur: Any, ops: list[tuple[Any, ...]]) -> None:
        # Two schedulers' batches updating the same task rows in different
        # orders deadlock (the server aborts one after deadlock_timeout, 1 s,
        # and its turn is retried): the rows are locked first, by key. The
        # claims' WHERE clauses then read the rows as the lock left them.
        keys = sorted({op[1] if op[0] != "upsert" else op[1].key for op in ops})
        if len(keys) > 1:
            cur.execute("SELECT 1 FROM procsched_tasks WHERE key = ANY(%s) ORDER BY key FOR UPDATE", (keys,))

    # A busy turn's claims and finishes, one statement per group instead of
    # two or three per run: each statement costs a round trip plus ~50 us of
    # server work, which made a 100-run turn ~3x slower one by one. Same
    # conditions as ``_op_started`` / ``_op_finished``; RETURNING says which
    # rows matched, so lost claims and stale finishes are known exactly.
    SET_OPS = frozenset({"started", "finished"})

    def _set_started(self, cur: Any, now: int, h: Any, result: Any, group: list[tuple[Any, ...]]) -> None:
        values, params = _values([op[1:] for op in group], ("text", "bigint", "int", "bigint", "bigint"))
        won = {tuple(r) for r in cur.execute(
            f"""WITH v (key, run, attempt, scheduled_ns, started_ns) AS (VALUES {values}),
            won AS (UPDATE procsched_tasks t SET run_count = v.run, next_attempt = v.attempt,
                next_due_ns = v.scheduled_ns, holder = %s, token = %s, updated_ns = %s
                FROM v WHERE t.key = v.key AND ((t.holder IS NULL AND t.paused = 0 AND t.next_attempt = v.attempt
                AND t.run_count + (CASE WHEN t.next_attempt = 1 THEN 1 ELSE 0 END) = v.run
                AND NOT EXISTS (SELECT 1 FROM procsched_runs r WHERE r.key = v.key AND v.attempt = 1
                    AND r.run = v.run - 1 AND r.attempt = 1 AND r.scheduled_ns > v.scheduled_ns - %s))
                OR (t.holder = %s AND t.token = %s AND t.run_count = v.run AND t.next_attempt = v.attempt))
                RETURNING t.key)
            INSERT INTO procsched_runs ({_RUN_COLS})
            SELECT v.key, v.run, v.attempt, v.scheduled_ns, v.started_ns, NULL, %s, %s, NULL, NULL, NULL, %s, %s
            FROM v JOIN won USING (key) {_REPLACE_RUN} RETURNING key, run, attempt""",
            [*params, h.id, h.token, now, SLOT_GAP_NS, h.id, h.token, h.host, h.pid, h.id, h.token]).fetchall()}  # fmt: skip
        result.lost.extend(op[1:4] for op in group if op[1:4] not in won)

    def _set_finished(self, cur: Any, now: int, h: Any, result: Any, group: list[tuple[Any, ...]]) -> None:
        rows = [(key, run, attempt, outcome, fin, due, attempt + 1 if retry else 1, et, em)
                for _, key, run, attempt, outcome, fin, due, retry, et, em in group]  # fmt: skip
        values, params = _values(rows, ("text", "bigint", "int", "text", "bigint", "bigint", "int", "text", "text"))
        done = {tuple(r) for r in cur.execute(
            f"""WITH v (key, run, attempt, outcome, finished_ns, next_due_ns, next_attempt, error_type,
                error_message) AS (VALUES {values}),
            done AS (UPDATE procsched_runs r SET finished_ns = v.finished_ns, outcome = v.outcome,
                error_type = v.error_type, error_message = v.error_message
                FROM v WHERE r.key = v.key AND r.run = v.run AND r.attempt = v.attempt AND r.outcome IS NULL
                AND r.holder = %s AND r.token = %s RETURNING r.key, r.run, r.attempt),
            resched AS (UPDATE procsched_tasks t SET next_due_ns = v.next_due_ns, next_attempt = v.next_attempt,
                last_outcome = v.outcome, holder = NULL, token = NULL, updated_ns = %s
                FROM v JOIN done USING (key, run, attempt) WHERE t.key = v.key AND t.holder = %s AND t.token = %s)
            SELECT key, run, attempt FROM done""",
            [*params, h.id, h.token, now, h.id, h.token]).fetchall()}  # fmt: skip
        result.stale.extend(op[1:4] for op in group if op[1:4] not in done)
        trim = [(op[1], op[2] - self.keep_runs) for op in group if op[1:4] in done and op[2] > self.keep_runs]
        if trim:
            values, params = _values(trim, ("text", "bigint"))
            cur.execute(f"""DELETE FROM procsched_runs r USING (VALUES {values}) AS v (key, upto)
                WHERE r.key = v.key AND r.run <= v.upto AND r.outcome IS NOT NULL""", params)  # fmt: skip

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


def _values(rows: list[tuple[Any, ...]], types: tuple[str, ...]) -> tuple[str, list[Any]]:
    """A typed ``VALUES`` list of ``rows`` and its flat parameters."""
    one = "(" + ", ".join(f"%s::{t}" for t in types) + ")"
    return ", ".join([one] * len(rows)), [x for row in rows for x in row]
