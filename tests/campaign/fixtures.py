"""Fixtures shared by tests/promises and tests/campaign (tests/conftest.py
imports them: one server a session, not one a conftest): our own throwaway
PostgreSQL server (tests/campaign/pg.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.campaign.pg import Cluster, binaries


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Cluster]:
    """One server per session (per xdist worker); without the server binaries
    the PostgreSQL tests fail in CI and are skipped, saying why, locally."""
    if binaries() is None:
        why = "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found"
        if _in_ci():
            pytest.fail(f"{why}: CI must run the PostgreSQL tests")
        pytest.skip(why)
    cluster = Cluster().start()
    yield cluster
    cluster.stop()
