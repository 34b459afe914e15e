"""Helpers for the console tests: constants, a served console, waits."""

from __future__ import annotations

import os
from typing import Any

import httpx

from procsched._web import Console

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "test-token-0123456789abcdef"
NS = 1_000_000_000


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def rate(seconds: float) -> dict[str, Any]:
    return {"kind": "fixed_rate", "period_ns": round(seconds * NS)}


class Served:
    """A console being served, and a client logged in with the bearer token."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.url = console.url.rstrip("/")
        self.client = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        self.anonymous = httpx.Client(base_url=self.url, timeout=10)

    def close(self) -> None:
        self.client.close()
        self.anonymous.close()
        self.console.close()


def store_source(target: str) -> Any:
    """The console's source over the store ``target`` (which must exist), as ``procsched web`` opens it."""
    from procsched._store import open_store
    from procsched._web._store_source import StoreSource

    return StoreSource(open_store(target), target)


def serve(source: Any, **options: Any) -> Served:
    console = Console(source, host="127.0.0.1", port=0, token=TOKEN, **options)
    console.start()
    return Served(console)


def wait_until(predicate: Any, timeout: float = 10.0, what: str = "") -> Any:
    """Wait (a deadlock guard, not a timing) until ``predicate()`` is truthy."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(0.02)


def lines(path: str) -> int:
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


#: The slots of the stored history (UTC ns): 2026-09-21T14:13:20Z, a minute apart.
T0 = 1_790_000_000 * NS
MS = 1_000_000
MINUTE = 60 * NS


def add_job(store: Any, key: str = "report", *, period_ns: int = MINUTE, due: int | None = None) -> None:
    """A keyed fixed-rate task written straight into ``store`` (no scheduler runs it)."""
    from procsched._store import TaskDefinition, TaskState

    batch = store.batch()
    batch.upsert(
        TaskDefinition(key, "web_jobs:tick", b"", {"kind": "fixed_rate", "period_ns": period_ns}, {"name": key}),
        TaskState(next_due_ns=T0 if due is None else due),
    )
    assert batch.commit().ok


def stored_history(store: Any, key: str = "report") -> Any:
    """A task whose history shows what a store keeps, written as an instance
    writes it (claims, ends, skipped slots, its published status):

        run 1   schedule  ok         worker 4242, output "hello from report"
        slot 2  skipped   overlap
        run 2   manual    error      ValueError: bad luck, with its traceback
        run 3   schedule  cancelled  replaced
        slot 5  skipped   down
        run 4   schedule  in flight  worker 4243

    and "other" (paused), kept on standby. Returns the instance's registration.
    """
    from procsched._store import InstanceStatus, WorkerStatus

    add_job(store, key)
    add_job(store, "other")
    assert store.pause("other")
    me = store.register(lease_ns=3600 * NS)

    def commit(build: Any) -> None:
        batch = store.batch(me)
        build(batch)
        result = batch.commit()
        assert result.ok, result

    commit(lambda b: b.started(key, 1, 1, T0, T0 + 2 * MS, worker_pid=4242))
    commit(
        lambda b: b.finished(key, 1, 1, "ok", T0 + 52 * MS, T0 + MINUTE, worker_pid=4242, output="hello from report\n")
    )
    commit(lambda b: b.skipped(key, T0 + MINUTE, "overlap"))
    commit(lambda b: b.started(key, 2, 1, T0 + 90 * NS, T0 + 90 * NS + MS, cause="manual", worker_pid=4242))
    commit(
        lambda b: b.finished(
            key,
            2,
            1,
            "error",
            T0 + 91 * NS,
            T0 + 2 * MINUTE,
            worker_pid=4242,
            error_type="ValueError",
            error_message="bad luck",
            error_traceback='Traceback (most recent call last):\n  File "jobs.py", line 3\nValueError: bad luck\n',
        )
    )
    commit(lambda b: b.started(key, 3, 1, T0 + 2 * MINUTE, T0 + 2 * MINUTE + MS, worker_pid=4243))
    commit(
        lambda b: b.finished(
            key, 3, 1, "cancelled", T0 + 3 * MINUTE, T0 + 3 * MINUTE, reason="replaced", worker_pid=4243
        )
    )
    commit(lambda b: b.skipped(key, T0 + 4 * MINUTE, "down"))
    commit(lambda b: b.started(key, 4, 1, T0 + 5 * MINUTE, T0 + 5 * MINUTE + MS, worker_pid=4243))
    status = InstanceStatus(
        (WorkerStatus(4242, 30 << 20, 3, 0), WorkerStatus(4243, None, 2, 1)), ("other",), 1, "processes"
    )
    assert store.renew_lease(me, status=status)
    return me
