"""Fixtures for the console tests: a console served on a free loopback port
(per test) over a real Scheduler, one headless Chromium per session (per
xdist worker), and stores - SQLite and a throwaway PostgreSQL server, one
per session (per xdist worker). Helpers: web_helpers.py.

The browser is Debian's chromium (/usr/bin/chromium), driven by Playwright
through ``executable_path``: Playwright's own browser download never runs.
Without it the browser tests FAIL when CI is set (``.ci/run`` installs the
package) and are skipped, saying why, locally.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from web_helpers import CHROMIUM, CHROMIUM_ARGS, in_ci, rate, serve

import procsched
from procsched._web._program import ProgramSource

_databases = itertools.count()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium, for one test module at a time: Playwright's sync API keeps
    its event loop set as running in this thread while it is open, and
    ``asyncio.run`` in a later test of this xdist worker would refuse to
    start (``cannot be called from a running event loop``)."""
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
    for fn, period, args, name in (
        (web_jobs.mark, 0.2, (log,), "tick"),
        (web_jobs.chatty, 0.3, (), "chatty"),
        (web_jobs.fails, 0.4, (), "fails"),
    ):
        handle = scheduler.schedule_at_fixed_rate(fn, period, args=args, name=name)
        source.add(handle, rate(period))
    served = serve(source)
    served.log = log  # type: ignore[attr-defined]
    served.scheduler = scheduler  # type: ignore[attr-defined]
    try:
        yield served
    finally:
        served.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: Any, tmp_path: Path) -> Iterator[str]:
    """A new empty store: a SQLite file, or a database of its own on the throwaway PostgreSQL server."""
    from procsched._store import open_store

    if request.param == "sqlite":
        target = str(tmp_path / "store.db")
        open_store(target).close()
        yield target
        return
    import psycopg

    cluster = request.getfixturevalue("pg_cluster")
    name = f"web{os.getpid()}_{next(_databases)}"
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    target = cluster.url_for(name)
    open_store(target).close()
    try:
        yield target
    finally:
        with psycopg.connect(cluster.url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
