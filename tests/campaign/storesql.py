"""The store's tables, read with plain SQL (the public, documented schema of
``procsched jobs`` / ``history``), never through procsched's own store code.

A URL is what ``Scheduler(store=...)`` takes: a path, ``sqlite:///path?...``
or ``postgresql://...``.
"""

from __future__ import annotations

import pickle
import sqlite3
import urllib.parse
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RunRow:
    """One row of ``procsched_runs``: a (key, run, attempt) claimed by a scheduler."""

    key: str
    run: int
    attempt: int
    scheduled_ns: int
    started_ns: int | None
    finished_ns: int | None
    pid: int | None
    outcome: str | None
    error_type: str | None
    holder: str | None


@dataclass(frozen=True)
class TaskRow:
    """One row of ``procsched_tasks``: a live keyed task."""

    key: str
    fn_ref: str
    run_count: int
    next_due_ns: int | None
    paused: bool
    holder: str | None
    unloadable: str | None


def sqlite_path(url: str) -> str:
    if url.startswith("sqlite:///"):
        return urllib.parse.urlsplit(url).path
    return url


def _connect(url: str) -> Any:
    if url.startswith("postgresql://"):
        import psycopg

        parts = urllib.parse.urlsplit(url)
        query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k not in ("keep_runs",)]
        return psycopg.connect(
            urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query))),
            autocommit=True,
            connect_timeout=5,
        )
    conn = sqlite3.connect(sqlite_path(url), timeout=30, isolation_level=None)
    return conn


def query(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Rows of one read-only statement (``?`` placeholders on both stores)."""
    conn = _connect(url)
    try:
        if url.startswith("postgresql://"):
            sql = sql.replace("?", "%s")
        return [tuple(r) for r in conn.execute(sql, params).fetchall()]
    finally:
        conn.close()


def dump(url: str, path: str) -> None:
    """The store's task, run and skipped-slot rows into ``path`` as text
    (a violating round's evidence where the store is not a file)."""
    with open(path, "w") as out:
        for table in ("procsched_tasks", "procsched_runs", "procsched_skipped"):
            names = "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position"
            columns = query(url, names, (table,))
            out.write(f"== {table}: {' | '.join(c[0] for c in columns)}\n")
            for row in query(url, f"SELECT * FROM {table} ORDER BY 1, 2"):
                out.write(" | ".join("" if x is None else str(x) for x in row) + "\n")


def watch(url: str) -> None:
    """Log, with triggers (in the writer's own transaction: a row is there
    once the write committed), every write of ``procsched_definitions`` into
    ``campaign_definitions`` and every task row deleted (a cancel, an end)
    into ``campaign_deleted``: when each change became the store's
    (``definitions_written``, ``deleted``). Once the schema is there. On
    PostgreSQL both are the time of the write itself (``clock_timestamp``,
    after any row lock it waited for: a cancel's delete and a deploy's write
    of one key are in the order they committed), not the row's
    ``written_ns`` - its transaction's clock, read at its start (seed 6323:
    a deploy written 1 ms after a cancel's delete, in a transaction begun
    before it, looked older than the delete, and its runs "after the
    cancel" a violation; "last deploy wins")."""
    if url.startswith("postgresql://"):
        statements = [
            "CREATE TABLE campaign_definitions (key TEXT, args BYTEA, written_ns BIGINT)",
            "CREATE FUNCTION campaign_definition_written() RETURNS trigger AS $$ BEGIN "
            "INSERT INTO campaign_definitions VALUES "
            "(NEW.key, NEW.args, (extract(epoch FROM clock_timestamp()) * 1e9)::bigint); RETURN NULL; END $$ "
            "LANGUAGE plpgsql",
            "CREATE TRIGGER campaign_definitions AFTER INSERT OR UPDATE ON procsched_definitions "
            "FOR EACH ROW EXECUTE FUNCTION campaign_definition_written()",
            "CREATE TABLE campaign_deleted (key TEXT, at_ns BIGINT)",
            "CREATE FUNCTION campaign_task_deleted() RETURNS trigger AS $$ BEGIN "
            "INSERT INTO campaign_deleted VALUES (OLD.key, (extract(epoch FROM clock_timestamp()) * 1e9)::bigint); "
            "RETURN NULL; END $$ LANGUAGE plpgsql",
            "CREATE TRIGGER campaign_deleted AFTER DELETE ON procsched_tasks "
            "FOR EACH ROW EXECUTE FUNCTION campaign_task_deleted()",
        ]
    else:
        statements = ["CREATE TABLE campaign_definitions (key TEXT, args BLOB, written_ns INTEGER)"] + [
            f"CREATE TRIGGER campaign_definitions_{event.lower()} AFTER {event} ON procsched_definitions BEGIN "
            "INSERT INTO campaign_definitions VALUES (NEW.key, NEW.args, NEW.written_ns); END"
            for event in ("INSERT", "UPDATE")
        ]
        statements += [
            "CREATE TABLE campaign_deleted (key TEXT, at_ns INTEGER)",
            "CREATE TRIGGER campaign_deleted AFTER DELETE ON procsched_tasks BEGIN INSERT INTO campaign_deleted "
            "VALUES (OLD.key, CAST((julianday('now') - 2440587.5) * 86400e9 AS INTEGER)); END",
        ]
    conn = _connect(url)
    try:
        for sql in statements:
            conn.execute(sql)
    finally:
        conn.close()


def definitions_written(url: str) -> dict[tuple[str, int], list[float]]:
    """(key, version) -> each time it was written (epoch s, ascending), as
    ``watch_definitions`` logged them; empty if nothing was watched."""
    if not has_table(url, "campaign_definitions"):
        return {}
    out: dict[tuple[str, int], list[float]] = {}
    for key, args, written_ns in query(url, "SELECT key, args, written_ns FROM campaign_definitions"):
        (call_args, _kwargs) = pickle.loads(bytes(args))
        out.setdefault((key, int(call_args[2])), []).append(written_ns / 1e9)
    for times in out.values():
        times.sort()
    return out


def deleted(url: str) -> dict[str, list[float]]:
    """key -> each time its task row was deleted (epoch s, ascending), as
    ``watch`` logged them; empty if nothing was watched."""
    if not has_table(url, "campaign_deleted"):
        return {}
    out: dict[str, list[float]] = {}
    for key, at_ns in query(url, "SELECT key, at_ns FROM campaign_deleted ORDER BY at_ns"):
        out.setdefault(key, []).append(at_ns / 1e9)
    return out


def runs(url: str, key: str | None = None) -> list[RunRow]:
    sql = (
        "SELECT key, run, attempt, scheduled_ns, started_ns, finished_ns, pid, outcome, error_type, holder "
        "FROM procsched_runs"
    )
    rows = query(
        url,
        sql + (" WHERE key = ?" if key is not None else "") + " ORDER BY key, run, attempt",
        (key,) if key is not None else (),
    )
    return [RunRow(*r) for r in rows]


def tasks(url: str) -> dict[str, TaskRow]:
    rows = query(
        url,
        "SELECT t.key, d.fn_ref, t.run_count, t.next_due_ns, t.paused, t.holder, t.unloadable "
        "FROM procsched_tasks t JOIN procsched_definitions d ON d.key = t.key",
    )
    return {r[0]: TaskRow(r[0], r[1], r[2], r[3], bool(r[4]), r[5], r[6]) for r in rows}


def definitions(url: str) -> dict[str, tuple[int, float]]:
    """key -> (the version its stored definition carries, when it was
    written: epoch s). The version travels in the arguments (see
    ``campaign.spec_for``): the campaign's own rows, unpickled here only."""
    out = {}
    for key, args, written_ns in query(url, "SELECT key, args, written_ns FROM procsched_definitions"):
        (call_args, _kwargs) = pickle.loads(bytes(args))
        out[key] = (int(call_args[2]), written_ns / 1e9)
    return out


def schedulers(url: str) -> list[tuple[str, str, int]]:
    """(id, host, pid) of every registered scheduler."""
    return [(r[0], r[1], r[2]) for r in query(url, "SELECT id, host, pid FROM procsched_schedulers")]


def has_table(url: str, name: str) -> bool:
    if url.startswith("postgresql://"):
        return query(url, "SELECT to_regclass(?)::text", (name,))[0][0] is not None
    return bool(query(url, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)))


def skipped(url: str) -> dict[str, set[int]]:
    """Slots (UTC µs) the store records as skipped, by key (issue 22): the
    rows of ``procsched_skipped`` (schema 3: a row is ``slots`` slots
    ``period_ns`` apart) and the misfire slots a run's end dropped, on its
    run's row. Empty for a store older than schema 3."""
    out: dict[str, set[int]] = {}
    if not has_table(url, "procsched_skipped"):
        return out
    try:
        rows = query(url, "SELECT key, slot_ns, period_ns, slots FROM procsched_skipped")
        rows += query(
            url, "SELECT key, skip_first_ns, skip_period_ns, skip_slots FROM procsched_runs WHERE skip_slots > 0"
        )
    except Exception:  # noqa: BLE001 - an older schema: no ranges to read
        return out
    for key, first, period, n in rows:
        out.setdefault(key, set()).update((first + i * period) // 1000 for i in range(n))
    return out
