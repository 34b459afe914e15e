"""Fixtures for the store tests: every store test runs on SQLite and on a
real PostgreSQL server.

The server is a throwaway cluster (``_pgcluster.ThrowawayCluster``) started
once per session (per xdist worker) from the PostgreSQL server binaries,
on a Unix socket in a temp dir, and removed at the end; each test gets a
fresh database in it. Without the binaries the PostgreSQL tests FAIL when
CI is set (``.ci/run`` installs them) and are skipped, saying why, locally.
"""

from __future__ import annotations

import itertools
import os

import pytest

from procsched._store import open_store
from procsched._store._pgcluster import ThrowawayCluster, find_binaries

STORES = ["sqlite", "postgresql"]
_names = itertools.count()


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="session")
def pg_cluster():
    if find_binaries() is None:
        why = "PostgreSQL server binaries (initdb, pg_ctl, postgres) not in /usr/lib/postgresql/*/bin nor on PATH"
        if _in_ci():
            pytest.fail(f"{why}: CI must run the PostgreSQL tests (.ci/run installs the server)")
        pytest.skip(why)
    cluster = ThrowawayCluster(fsync=False).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_url(pg_cluster):
    import psycopg

    name = f"t{os.getpid()}_{next(_names)}"
    with psycopg.connect(pg_cluster.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield pg_cluster.url_for(name)
    with psycopg.connect(pg_cluster.url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture(params=STORES)
def store_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def store(store_url):
    s = open_store(store_url)
    yield s
    s.close()
