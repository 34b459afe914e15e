"""Fixtures for the store tests: every store test runs on SQLite and on a
real PostgreSQL server.

The server is the session's throwaway cluster (``pg_cluster``,
tests/conftest.py); each test gets a fresh database in it.
"""

from __future__ import annotations

import itertools
import os

import pytest

from procsched._store import open_store

STORES = ["sqlite", "postgresql"]
_names = itertools.count()


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
