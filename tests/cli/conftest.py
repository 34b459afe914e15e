"""Fixtures for the ``procsched`` command tests (helpers: cli_helpers.py)."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import pytest
from cli_helpers import QUICK_JOBS

_databases = itertools.count()


@pytest.fixture
def jobs_file(tmp_path: Path):
    """write(body, name=...) -> the path of a jobs file with that body."""

    def write(body: str = QUICK_JOBS, name: str | None = None) -> Path:
        path = tmp_path / (name or f"jobs_{tmp_path.name.replace('-', '_')}.py")
        path.write_text(textwrap.dedent(body))
        return path

    return write


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """A new empty store: a SQLite file, or a database of its own on the throwaway PostgreSQL server."""
    import os

    from procsched._store import open_store

    if request.param == "sqlite":
        target = str(tmp_path / "store.db")
        open_store(target).close()
        yield target
        return
    import psycopg

    cluster = request.getfixturevalue("pg_cluster")
    name = f"cli{os.getpid()}_{next(_databases)}"
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    target = cluster.url_for(name)
    open_store(target).close()
    try:
        yield target
    finally:
        with psycopg.connect(cluster.url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
