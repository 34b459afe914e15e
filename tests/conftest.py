"""How the suite spreads over xdist workers (the README's ``pytest -q -n 4``),
and one preparation before they start.

- xdist hands the tests out one at a time, in collection order, as workers
  free up (``_Schedule`` below), instead of its default batches of
  consecutive tests (a quarter of the suite per worker at first): no batch
  of long tests waits behind one worker while the other sits idle. The
  order is kept: the last directories hold short tests, and moving the
  slow ones first would run the real-time tests beside the heaviest.
- The tests on the Ray cluster go to one worker, together: it starts the one
  cluster (a start costs ~10 s of a 2-core machine) and runs them all; the
  other workers never start one. They are found by name (``_on_ray``): the
  scheduler sees node ids only. (xdist's own ``--dist loadgroup`` cannot do
  it here: with pytest 9.2 its ``xdist_group`` marks are silently ignored,
  pytest-dev/pytest-xdist#1386.) The PostgreSQL cluster stays one per
  worker: ~1 s to start, and used everywhere.
- procsched's modules and the tests' helper modules are byte-compiled once,
  before the workers start, as an install does: every scheduler's dispatcher
  is a fresh interpreter, and where PYTHONDONTWRITEBYTECODE is set (it is on
  the CI machine) each would compile every module it imports again.
"""

from __future__ import annotations

import compileall
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

from tests.campaign.fixtures import pg_server as pg_server  # (the campaign's own server: one too)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def pytest_configure(config: pytest.Config) -> None:
    if "PYTEST_XDIST_WORKER" not in os.environ:  # the controller (or a run without xdist), once
        compileall.compile_dir(os.path.join(ROOT, "procsched"), quiet=1)
        compileall.compile_dir(HERE, quiet=1, rx=_REWRITTEN)  # (the test modules: rewritten, below)
        if sys.dont_write_bytecode:
            _rewrite_ahead(config)


#: The modules pytest rewrites (their asserts): test modules and conftests.
_REWRITTEN = re.compile(r"(^|/)(test_[^/]*|conftest)\.py$")


def _rewrite_ahead(config: pytest.Config) -> None:
    """Write pytest's cache of the rewritten test modules, once, before the
    workers start. Where PYTHONDONTWRITEBYTECODE is set pytest writes none,
    and each worker rewrote all of them at its collection: ~9 s of CPU each,
    four at once on two cores (the suite's first ~18 s). Done the way
    pytest's import hook does it (its cache is checked against the source
    when read), in one process per CPU; if pytest's internals differ, the
    workers rewrite them as before."""
    try:
        from _pytest.assertion.rewrite import (
            PYC_TAIL,
            _read_pyc,
            _rewrite_test,
            _write_pyc,
            assertstate_key,
            get_cache_dir,
        )
    except ImportError:
        return

    def rewrite(files: list[Path]) -> None:
        for fn in files:
            directory = get_cache_dir(fn)
            pyc = directory / (fn.name[:-3] + PYC_TAIL)
            if _read_pyc(fn, pyc) is None:  # (none yet, or of another source)
                directory.mkdir(exist_ok=True)
                source_stat, co = _rewrite_test(fn, config)
                _write_pyc(state, co, source_stat, pyc)

    state = config.stash.get(assertstate_key, None)
    if state is None:  # (--assert=plain: nothing is rewritten)
        return
    files = sorted(p for p in Path(HERE).rglob("*.py") if _REWRITTEN.search(p.as_posix()))
    parts = max(1, min(os.cpu_count() or 1, 4))
    children = []
    for i in range(1, parts):
        pid = os.fork()
        if pid == 0:  # a child: its share, then out (never back into pytest)
            code = 1
            try:
                rewrite(files[i::parts])
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    try:
        rewrite(files[0::parts])
    finally:
        for pid in children:
            os.waitpid(pid, 0)


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Any]:
    """The throwaway PostgreSQL server (``_pgcluster.ThrowawayCluster``) of
    the session - of an xdist worker - started at its first use from the
    PostgreSQL server binaries and removed at the end; the tests make
    databases of their own in it (e.g. ``tests/store``'s ``pg_url``).
    Defined here once: a session fixture is one per place it is defined or
    imported, and the conftests that each had their own started up to six
    servers a worker (an initdb, ~1 s of CPU, each). Without the binaries
    the PostgreSQL tests FAIL when CI is set (``.ci/run`` installs them) and
    are skipped, saying why, locally."""
    from procsched._store._pgcluster import ThrowawayCluster, find_binaries

    if find_binaries() is None:
        why = "PostgreSQL server binaries (initdb, pg_ctl, postgres) not in /usr/lib/postgresql/*/bin nor on PATH"
        if _in_ci():
            pytest.fail(f"{why}: CI must run the PostgreSQL tests (.ci/run installs the server)")
        pytest.skip(why)
    cluster = ThrowawayCluster(fsync=False).start()
    yield cluster
    cluster.stop()


def _on_ray(nodeid: str) -> bool:
    """A test of a ``test_ray*.py`` file (the shared cluster's, or the CLI's
    that share one run of a cluster of their own), or one with a ``ray``
    parameter (the runner fixtures take the Ray cluster for it)."""
    path, _, name = nodeid.partition("::")
    return os.path.basename(path).startswith("test_ray") or "ray" in re.split(r"[\[\]\-]", name)


class _Schedule(LoadScopeScheduling):
    """xdist's scope scheduling with one test per scope (each worker holds
    at most three tests not yet run, and gets the next one in collection
    order as it frees up), except the Ray tests: one scope, handed to one
    worker as a whole (first: the largest scope goes first)."""

    def _split_scope(self, nodeid: str) -> str:
        return "ray" if _on_ray(nodeid) else nodeid


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadScopeScheduling | None:
    """``-n N`` without another ``--dist``: this schedule; else xdist's."""
    return _Schedule(config, log) if config.getvalue("dist") == "load" else None
