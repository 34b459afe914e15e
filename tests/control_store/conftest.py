"""Fixtures of the control-from-outside tests: every test runs on SQLite and
on the throwaway PostgreSQL server (tests/store/conftest.py)."""

from tests.store.conftest import pg_url as pg_url
from tests.store.conftest import store_url as store_url
