"""How the suite spreads over xdist workers (the README's ``pytest -q -n 2``),
and one preparation before they start.

- Tests marked ``slow`` are collected first, and xdist hands tests out one
  at a time as workers free up (``_Schedule`` below), so the long ones start
  early and the short ones fill in at the end, instead of a long test
  starting last on one worker while the other sits idle.
- The tests on the Ray cluster go to one worker, together: it starts the one
  cluster (a start costs ~10 s of a 2-core machine) and runs them all; the
  other worker never starts one. They are found by name (``_on_ray``): the
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
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def pytest_configure(config: pytest.Config) -> None:
    if "PYTEST_XDIST_WORKER" not in os.environ:  # the controller (or a run without xdist), once
        for path in (os.path.join(ROOT, "procsched"), HERE):
            compileall.compile_dir(path, quiet=1)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests first, else the order kept (a stable sort). The Ray tests
    keep theirs: they run as one unit wherever they stand, and the real-time
    ones among them run best after the others have warmed the fresh cluster."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None or _on_ray(item.nodeid))


def _on_ray(nodeid: str) -> bool:
    """A test of tests/runtime/test_ray.py, or one with a ``ray`` parameter
    (the runner fixtures take the Ray cluster for it)."""
    path, _, name = nodeid.partition("::")
    return os.path.basename(path) == "test_ray.py" or "ray" in re.split(r"[\[\]\-]", name)


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
