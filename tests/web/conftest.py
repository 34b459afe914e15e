"""Fixtures for the console tests: a console served on a free loopback port
(per test) over a real Scheduler or a real store, an HTTP client, and one
headless Chromium per session (per xdist worker).

The browser is Debian's chromium (/usr/bin/chromium), driven by Playwright
through ``executable_path``: Playwright's own browser download never runs.
Without it the browser tests FAIL when CI is set (``.ci/run`` installs the
package) and are skipped, saying why, locally.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import procsched
from procsched._web import Console
from procsched._web._program import ProgramSource

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


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        why = f"{CHROMIUM} is missing (Debian's chromium package)"
        if in_ci():
            pytest.fail(f"{why}: CI must run the browser tests (.ci/run installs it)")
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(10_000)
    pg.on("dialog", lambda dialog: dialog.accept())
    try:
        yield pg
    finally:
        context.close()


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


def serve(source: Any, **options: Any) -> Served:
    console = Console(source, host="127.0.0.1", port=0, token=TOKEN, **options)
    console.start()
    return Served(console)


@pytest.fixture
def scheduler() -> Iterator[procsched.Scheduler]:
    s = procsched.Scheduler(workers=2, capture_output=True)
    try:
        yield s
    finally:
        s.shutdown(wait=True, cancel_futures=True)


@pytest.fixture
def program(scheduler: procsched.Scheduler, tmp_path: Path) -> Iterator[Any]:
    """A console over a program with three jobs: tick (every 0.2 s, its runs
    logged by the task in tmp_path/tick.log), chatty (every 0.3 s, prints)
    and fails (every 0.4 s, raises)."""
    import web_jobs

    source = ProgramSource(scheduler, "test program")
    log = str(tmp_path / "tick.log")
    for fn, period, args, name in ((web_jobs.mark, 0.2, (log,), "tick"), (web_jobs.chatty, 0.3, (), "chatty"),
                                   (web_jobs.fails, 0.4, (), "fails")):  # fmt: skip
        handle = scheduler.schedule_at_fixed_rate(fn, period, args=args, name=name)
        source.add(handle, rate(period))
    served = serve(source)
    served.log = log  # type: ignore[attr-defined]
    served.scheduler = scheduler  # type: ignore[attr-defined]
    try:
        yield served
    finally:
        served.close()


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
