"""The campaign's fixtures (shared with tests/promises: tests/campaign/fixtures.py)."""

from tests.campaign.fixtures import pg_server as pg_server
