"""The throwaway PostgreSQL cluster of the store tests, for the durable tests too."""

from tests.store.conftest import pg_url as pg_url
