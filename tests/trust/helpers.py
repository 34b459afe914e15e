"""Helpers of the trust tests: rows written as whoever can write the store
would (plain SQL), payloads that run code when unpickled, waits."""

from __future__ import annotations

import dataclasses
import os
import pickle
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import procsched
from procsched._store import TaskState, open_store
from tests.trust import tasks

P = 1_000_000_000
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Planted:
    """An object whose unpickling runs code: it appends the unpickling
    process's pid and name (``psc-worker`` for a worker) to ``marker``, and
    unpickles as ``value`` - so a run that unpickles it goes on as a normal run."""

    def __init__(self, marker: str, value: Any) -> None:
        self.marker, self.value = marker, value

    def __reduce__(self) -> tuple[Any, ...]:
        expr = (
            f"(open({self.marker!r}, 'a').write('%d %s\\n' % (__import__('os').getpid(), "
            f"open('/proc/self/comm').read().strip())), {self.value!r})[1]"
        )
        return (eval, (expr,))


def planted(marker: str, out: str) -> bytes:
    """A stored argument blob that runs code when unpickled (see ``Planted``),
    then is the call ``tasks.tick(out, "planted")``."""
    return pickle.dumps(Planted(marker, ((out, "planted"), {})))


def plant(url: str, secret: bytes | None, marker: str, out: str, keys: tuple[str, ...] = ("planted",)) -> None:
    """Stored tasks whose arguments run code when unpickled, due now, each
    with a past run that has output and a traceback; written by a program
    that has ``secret`` (so signed with it: a stolen secret)."""
    with procsched.Scheduler(1, store=url, secret=secret) as s:
        for key in keys:
            s.schedule_at_fixed_rate(tasks.tick, 3600, initial_delay=3600, args=(out, key), key=key)
    store = open_store(url, secret=secret)
    now = time.time_ns()
    b = store.batch()
    for key in keys:
        stored = store.get(key)
        assert stored is not None and stored.untrusted is None
        b.upsert(dataclasses.replace(stored.definition, args=planted(marker, out), def_hash=""), TaskState(0, now - P))
    assert b.commit().ok
    holder = store.register(lease_ns=60 * P)
    for key in keys:
        assert store.claim_run(holder, key, 1, 1, now - P, now - P)
        assert store.finish_run(
            holder, key, 1, 1, "error", now, now, error_type="ValueError", error_message="no",
            error_traceback="Traceback: no", output="some output",
        )  # fmt: skip
    store.unregister(holder)
    store.close()


def unpickled_by(marker: str) -> list[tuple[int, str]]:
    """(pid, process name) of every process that unpickled a planted payload."""
    try:
        with open(marker) as f:
            return [(int(pid), name) for pid, _, name in (line.strip().partition(" ") for line in f if line.strip())]
    except FileNotFoundError:
        return []


def sqlite_path(url: str) -> str:
    return url[len("sqlite:///") :] if url.startswith("sqlite:///") else url


def sql(url: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on the store's database, as anyone who can write it could."""
    if url.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            cur = conn.execute(statement.replace("?", "%s"), params)
            return [tuple(r) for r in cur.fetchall()] if cur.description else []
    conn = sqlite3.connect(sqlite_path(url), isolation_level=None)
    try:
        return [tuple(r) for r in conn.execute(statement, params).fetchall()]
    finally:
        conn.close()


def lines(path: str) -> list[str]:
    try:
        with open(path) as f:
            return [x.rstrip("\n") for x in f]
    except FileNotFoundError:
        return []


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Look every 20 ms until ``predicate()`` is true (a deadlock guard, not a timing)."""
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)
    return result


def procsched_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Any:
    """Run ``python -m procsched ARGS`` to completion (a CompletedProcess)."""
    return subprocess.run(
        [sys.executable, "-m", "procsched", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli_env(env),
        cwd=ROOT,
    )


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    env.pop("PROCSCHED_SECRET", None)
    env.update(extra or {})
    return env


def mode(path: str) -> int:
    return os.stat(path).st_mode & 0o777
