"""Fixtures of the trust tests (issue 24): every store test on SQLite and on
a real PostgreSQL server (the store tests' throwaway cluster), schedulers
that are shut down at teardown and leave no process behind."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psutil
import pytest

import procsched
from tests.store.conftest import pg_url as pg_url


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/store.db"
    return str(request.getfixturevalue("pg_url"))


def _mine() -> set[int]:
    """The procsched processes below this one (dispatchers, their forks, workers)."""
    found = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if "procsched._runtime" in " ".join(p.cmdline()) or p.name().startswith("psc-"):
                found.add(p.pid)
        except psutil.Error:
            pass
    return found


@pytest.fixture
def schedulers() -> Iterator[Any]:
    """Make Schedulers here; at teardown shut them down and fail if a
    process they started is left behind."""
    before = _mine()
    made: list[procsched.Scheduler] = []

    def make(*args: Any, **kwargs: Any) -> procsched.Scheduler:
        s = procsched.Scheduler(*args, **kwargs)
        made.append(s)
        return s

    yield make
    for s in made:
        s.shutdown(wait=True, cancel_futures=True)
    left = [psutil.Process(pid) for pid in _mine() - before if psutil.pid_exists(pid)]
    _, still = psutil.wait_procs(left, timeout=15)
    for p in still:
        p.kill()
    assert not still, f"processes left behind: {[(p.pid, p.name()) for p in still]}"
