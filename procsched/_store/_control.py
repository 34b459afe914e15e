"""Control from outside (DESIGN part three): pause, resume, remove, limits, requests.

    any process (instance, CLI, console)        the instance that runs the task
    pause / resume / remove ── state row ──────▶ follows it at its re-read (<= 1 s)
    ask(run_now | backfill) ── request row ────▶ open_requests + take, or take_requests (once, fenced)
                                                 ──▶ carries it out (_runtime/_durable/_requests.py)
    request(id) ◀── result / error ───────────── Batch.answer, with the claims it caused

The contract of each function is on the ``SQLStore`` method that calls it;
``_sql``'s theory of operation says how the pieces fit ("Control from outside").
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._model import REQUEST_KINDS, ControlRequest, Holder
from ._writes import delete

if TYPE_CHECKING:
    from ._access import StoreAccess

#: Control requests asked this long ago are forgotten (answered or not: the
#: asker gave up long since, or the key is gone).
REQUEST_TTL_NS = 86_400 * 1_000_000_000


def _control(store: StoreAccess, what: str, key: str, sql: str, params: tuple[Any, ...]) -> bool:
    with store._tx(what) as cur:
        now = store._now(cur)
        cur = store._x(cur, sql, (now, *params, key))
        if cur.rowcount == 1:
            store._bump(cur, None)
            return True
        if store._x(cur, "SELECT 1 FROM procsched_tasks WHERE key = ?", (key,)).fetchone() is None:
            raise KeyError(key)
        return False


def pause(store: StoreAccess, key: str) -> bool:
    return _control(
        store,
        "pausing a task",
        key,
        "UPDATE procsched_tasks SET paused = 1, updated_ns = ? WHERE key = ? AND paused = 0",
        (),
    )


def resume(store: StoreAccess, key: str) -> bool:
    return _control(
        store,
        "resuming a task",
        key,
        "UPDATE procsched_tasks SET paused = 0, updated_ns = ? WHERE key = ? AND paused = 1",
        (),
    )


def remove(store: StoreAccess, key: str) -> bool:
    with store._tx("removing a task") as cur:
        gone = delete(store, cur, key, False)
        if gone:
            store._bump(cur, None)
        return gone


def set_limits(store: StoreAccess, limits: Mapping[str, int]) -> None:
    rows = []
    for name, lim in limits.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"a limit's group must be a non-empty str, got {name!r}")
        if type(lim) is not int or lim < 1:
            raise ValueError(f"the limit of group {name!r} must be an int >= 1, got {lim!r}")
        rows.append((name, lim))
    if not rows:
        return
    with store._tx("setting limits") as cur:
        now = store._now(cur)
        for name, lim in rows:
            store._x(
                cur,
                "INSERT INTO procsched_limits (name, lim, updated_ns) VALUES (?, ?, ?) ON CONFLICT (name) "
                "DO UPDATE SET lim = excluded.lim, updated_ns = excluded.updated_ns",
                (name, lim, now),
            )
        store._bump(cur, None)


def limits(store: StoreAccess) -> dict[str, int]:
    with store._tx("reading limits", write=False) as cur:
        return {name: int(lim) for name, lim in store._x(cur, "SELECT name, lim FROM procsched_limits").fetchall()}


def ask(
    store: StoreAccess,
    key: str,
    kind: str,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    dry_run: bool = False,
    asked_by: str | None = None,
) -> int:
    if kind not in REQUEST_KINDS:
        raise ValueError(f"kind must be one of {REQUEST_KINDS}, got {kind!r}")
    if kind == "backfill":
        if type(start_ns) is not int or type(end_ns) is not int:
            raise TypeError(f"a backfill needs start_ns and end_ns (ints, UTC ns), got {start_ns!r}, {end_ns!r}")
        if start_ns >= end_ns:
            raise ValueError(f"a backfill needs start_ns < end_ns, got {start_ns} >= {end_ns}")
    elif start_ns is not None or end_ns is not None or dry_run:
        raise ValueError("start_ns, end_ns and dry_run are a backfill's")
    with store._tx("asking for a run") as cur:
        now = store._now(cur)
        if store._x(cur, "SELECT 1 FROM procsched_tasks WHERE key = ?", (key,)).fetchone() is None:
            raise KeyError(key)
        store._x(cur, "DELETE FROM procsched_requests WHERE asked_ns < ?", (now - REQUEST_TTL_NS,))
        row = store._x(
            cur,
            "INSERT INTO procsched_requests (key, kind, start_ns, end_ns, dry_run, asked_ns, asked_by) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (key, kind, start_ns, end_ns, int(dry_run), now, asked_by),
        ).fetchone()
        store._bump(cur, None)
    return int(row[0])


REQUEST_COLS = (
    "id, key, kind, asked_ns, start_ns, end_ns, dry_run, asked_by, taken_by, taken_ns, done_ns, result, error"
)


def _request(row: Any) -> ControlRequest:
    (rid, key, kind, asked, start, end, dry, asked_by, taken_by, taken_ns, done_ns, result, error) = row
    return ControlRequest(
        int(rid),
        key,
        kind,
        asked,
        start,
        end,
        bool(dry),
        asked_by,
        taken_by,
        taken_ns,
        done_ns,
        None if result is None else json.loads(result),
        error,
    )


def request(store: StoreAccess, request_id: int) -> ControlRequest | None:
    with store._tx("reading a request", write=False) as cur:
        row = store._x(
            cur, f"SELECT {REQUEST_COLS} FROM procsched_requests WHERE id = ?", (int(request_id),)
        ).fetchone()
    return None if row is None else _request(row)


@dataclass(frozen=True, slots=True)
class OpenRequest:
    """A request nobody took yet, with what the store says of its task:
    ``stored`` False - no such task any more (cancelled, or a one-shot that
    ended, after the ask); ``unloadable``: why no instance can run it."""

    id: int
    key: str
    kind: str
    stored: bool
    unloadable: str | None


def open_requests(store: StoreAccess) -> list[OpenRequest]:
    """The requests nobody took yet, oldest first: one read of the open
    requests' index (cheap when there is none)."""
    with store._tx("reading requests", write=False) as cur:
        rows = store._x(
            cur,
            "SELECT r.id, r.key, r.kind, t.key, t.unloadable FROM procsched_requests r "
            "LEFT JOIN procsched_tasks t ON t.key = r.key "
            "WHERE r.done_ns IS NULL AND r.taken_by IS NULL ORDER BY r.id",
        ).fetchall()
    return [OpenRequest(int(rid), key, kind, found is not None, why) for rid, key, kind, found, why in rows]


def take_requests(store: StoreAccess, holder: Holder, keys: Collection[str]) -> list[ControlRequest]:
    return take(store, holder, [r.id for r in open_requests(store) if r.key in keys])


def take(store: StoreAccess, holder: Holder, ids: Collection[int]) -> list[ControlRequest]:
    """Take the requests ``ids`` that are still open, atomically, fenced by
    ``holder``'s registration (a holder taken over takes nothing)."""
    if not ids:
        return []
    taken = []
    with store._tx("taking requests") as cur:
        now = store._now(cur)
        cur = store._x(
            cur,
            "UPDATE procsched_schedulers SET changes = changes + 1 WHERE id = ? AND token = ?",
            (holder.id, holder.token),
        )
        if cur.rowcount != 1:
            return []  # taken over: it runs nothing any more
        for rid in ids:
            row = store._x(
                cur,
                f"UPDATE procsched_requests SET taken_by = ?, taken_token = ?, taken_ns = ? "
                f"WHERE id = ? AND taken_by IS NULL AND done_ns IS NULL RETURNING {REQUEST_COLS}",
                (holder.id, holder.token, now, rid),
            ).fetchone()
            if row is not None:
                taken.append(_request(row))
    return taken


def answer(
    store: StoreAccess, holder: Holder, request_id: int, *, result: Any = None, error: str | None = None
) -> bool:
    with store._tx("answering a request") as cur:
        now = store._now(cur)
        cur = store._x(
            cur,
            "UPDATE procsched_requests SET done_ns = ?, result = ?, error = ? WHERE id = ? "
            "AND taken_by = ? AND taken_token = ? AND done_ns IS NULL",
            (now, json.dumps(result), error, int(request_id), holder.id, holder.token),
        )
        if cur.rowcount != 1:
            return False
        store._bump(cur, holder)
        return True
