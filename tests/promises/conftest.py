"""Fixtures of the issue-20 reproductions: a throwaway PostgreSQL server
(our own, tests/campaign/pg.py), a fresh database per test, a TCP proxy in
front of it, schedulers that are shut down and whose processes are checked
gone at teardown."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psutil
import pytest

import procsched
from tests.campaign.pg import Cluster
from tests.campaign.proxy import Proxy
from tests.promises.helpers import Program, alive, kill_tree


@pytest.fixture
def pg_db(pg_server: Cluster) -> str:
    """A fresh database's name (left in place: the schedulers of a test may
    still be connected at teardown; the server goes at the session's end)."""
    return pg_server.create_db("p")


@pytest.fixture
def pg_url(pg_server: Cluster, pg_db: str) -> str:
    return pg_server.url_for(pg_db)


@pytest.fixture
def pg_proxy(pg_server: Cluster) -> Iterator[Proxy]:
    proxy = Proxy(pg_server.socket)
    yield proxy
    proxy.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/store.db?keep_runs=100000"
    return request.getfixturevalue("pg_url") + "&keep_runs=100000"


@pytest.fixture
def sqlite_url(tmp_path: Any) -> str:
    return f"sqlite:///{tmp_path}/store.db?keep_runs=100000"


def _mine() -> list[psutil.Process]:
    """This process's descendants that procsched started (dispatcher, its forks, workers)."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "procsched._runtime" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


@pytest.fixture
def schedulers() -> Iterator[Any]:
    """Make Schedulers in this process; at teardown shut them down (without
    waiting for runs) and fail if a process they started is left behind."""
    before = {p.pid for p in _mine()}
    made: list[procsched.Scheduler] = []

    def make(*args: Any, **kwargs: Any) -> procsched.Scheduler:
        s = procsched.Scheduler(*args, **kwargs)
        made.append(s)
        return s

    yield make
    for s in made:
        try:
            s.shutdown(wait=False, cancel_futures=True)
        except Exception:  # noqa: BLE001 - a scheduler the test broke: ending the others matters
            pass
    left = [p for p in _mine() if p.pid not in before]
    _, still = psutil.wait_procs(alive(left), timeout=15)
    kill_tree(still)
    assert not still, f"processes left behind: {[(p.pid, p.name()) for p in still]}"


@pytest.fixture
def programs(tmp_path: Any) -> Iterator[Any]:
    """Start user programs (helpers.Program); every one's tree is ended at teardown."""
    made: list[Program] = []

    def start(body: str, *args: str, **kwargs: Any) -> Program:
        p = Program(tmp_path, body, *args, name=f"prog{len(made)}", **kwargs)
        made.append(p)
        return p

    yield start
    for p in made:
        p.close()


@pytest.fixture
def instances(tmp_path: Any) -> Iterator[Any]:
    """Start instances (tests/campaign/instance.py); at teardown end what is
    left of each and fail if a process any of them had outlived it."""
    from tests.campaign.instances import Instance

    made: list[Instance] = []

    def start(name: str, cfg: dict[str, Any], **kwargs: Any) -> Instance:
        inst = Instance(name, cfg, str(tmp_path), **kwargs)
        made.append(inst)
        return inst

    yield start
    clean = all(not i.alive() for i in made)
    for i in made:
        i.close()
    if clean:  # each test ended its instances itself: then none may have left a process behind
        left = [(i.name, p.pid) for i in made for p in i.left()]
        assert not left, f"processes left behind: {left}"
