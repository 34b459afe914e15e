"""Helpers for the console tests: constants, a served console, waits."""

from __future__ import annotations

import os
from typing import Any

import httpx

from procsched._web import Console

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
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
        self.client = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
        )
        self.anonymous = httpx.Client(base_url=self.url, timeout=10)

    def close(self) -> None:
        self.client.close()
        self.anonymous.close()
        self.console.close()


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
            raise AssertionError(
                f"timed out after {timeout} s waiting for {what or predicate}"
            )
        time.sleep(0.02)


def lines(path: str) -> int:
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0
