"""Opening a store: its URL, its options, its secrets (issue 20 item 19,
issue 26 items 4 and 7, issue 24's secret).

A password given as ``user:pw@`` or ``?password=`` is never printed - not
in an error, a log line, a retry line or a repr; numeric options take
ASCII digits only and name themselves when refused; a bad URL is a
one-line StoreError (also a ValueError), never a traceback from deep
inside; ``lease=`` and ``secret=`` reach the store.
"""

from __future__ import annotations

import math
import os
import socket

import pytest

import procsched
from procsched._errors import StoreError
from procsched._store import SQLStore, open_store
from procsched._store._pgcluster import PORT
from procsched._store._url import StoreURLError, redact, scrub
from tests.durable import jobs_mod
from tests.promises.helpers import wait_until
from tests.runtime.rt_helpers import Waiter
from tests.store.pgproxy import Proxy, socket_path

PW = "hunter2"


@pytest.mark.parametrize(
    "url, shown",
    [
        ("postgresql://u:hunter2@h/db", "postgresql://u:***@h/db"),
        ("postgresql://h/db?password=hunter2", "postgresql://h/db?password=***"),
        (
            "postgres://u@h:5/db?sslmode=disable&password=hunter2&application_name=a@b",
            "postgres://u@h:5/db?sslmode=disable&password=***&application_name=a@b",
        ),
        (
            "postgresql://u:hunter2@/db?host=/tmp/x&sslpassword=hunter2",
            "postgresql://u:***@/db?host=/tmp/x&sslpassword=***",
        ),
        ("postgresql://u:pw%40hunter2@h/db?PASSWORD=hunter2#x", "postgresql://u:***@h/db?PASSWORD=***#x"),
        ("mysql://u:hunter2@h/db", "mysql://u:***@h/db"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("/a/path:with@colon.db", "/a/path:with@colon.db"),
    ],
)
def test_redact_hides_every_form_of_password(url, shown):
    assert redact(url) == shown
    assert "hunter2" not in scrub(f"driver says: bad URI {url!r}", url)


def test_an_unreachable_server_s_error_shows_no_password():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for url in (
        f"postgresql://u:{PW}@127.0.0.1:{port}/db",
        f"postgresql://u@127.0.0.1:{port}/db?password={PW}",
        f"postgresql://u:{PW}@[::1/db?password={PW}",
    ):  # the last one: libpq echoes the URL
        with pytest.raises(StoreError) as info:
            open_store(url, connect_timeout=2)
        assert PW not in str(info.value) and "***" in str(info.value)
        cause = info.value.__cause__
        assert cause is None or PW not in str(cause)


def test_a_working_store_shows_no_password(proxy, pg_url):
    store = open_store(proxy.url_for(_dbname(pg_url), f"password={PW}"))  # (the cluster trusts: any password)
    try:
        assert PW not in repr(store) and PW not in store.describe
        assert "password=***" in repr(store)
        proxy.cut_all()
        with pytest.raises(StoreError) as info:
            store.jobs()
        assert PW not in str(info.value)
        assert store.jobs() == []  # reconnected
    finally:
        store.close()


@pytest.mark.timeout(60)
def test_the_scheduler_s_retry_lines_show_no_password(proxy, pg_url, caplog, capfd):
    """A store outage while keyed tasks run: the dispatcher's retry lines
    name the store, never its password; the store comes back, runs go on."""
    url = proxy.url_for(_dbname(pg_url), f"password={PW}")
    with procsched.Scheduler(1, store=url) as s:
        waiter = Waiter(s)
        h = s.schedule_at_fixed_rate(jobs_mod.add, 0.02, args=(1, 2), key="tick")
        waiter.until(lambda: len(h.runs) >= 2)
        proxy.refuse(True)
        proxy.cut_all()
        waiter.until(lambda: "could not record a turn" in caplog.text, timeout=30)
        proxy.refuse(False)
        seen = len(h.runs)
        waiter.until(lambda: len(h.runs) >= seen + 3, timeout=30)
        h.cancel()
    out, err = capfd.readouterr()
    assert "password=***" in caplog.text
    assert PW not in caplog.text and PW not in out and PW not in err


@pytest.mark.parametrize(
    "option, values",
    [
        ("busy_timeout", ["inf", "nan", "-1", "1e3", "１０", "٣", "86401", ""]),
        ("keep_runs", ["²", "٣", "１０", "abc", "0", "-1", "1.5", "9" * 5000, ""]),
        ("lease", ["0", "0.05", "inf", "nan", "²", "86401"]),
        ("synchronous", ["OFF", "full;"]),
    ],
)
def test_a_bad_option_in_the_url_is_a_store_url_error_naming_it(tmp_path, option, values):
    for value in values:
        with pytest.raises(StoreURLError) as info:
            open_store(f"sqlite:///{tmp_path}/s.db?{option}={value}")
        message = str(info.value)
        assert option in message and "\n" not in message, message
        assert isinstance(info.value, StoreError) and isinstance(info.value, ValueError)
    assert os.listdir(tmp_path) == []  # refused before anything was created


def test_bad_option_values_as_keywords_are_value_errors_naming_them(tmp_path):
    for bad in (math.inf, math.nan, -1.0, 86_401):
        with pytest.raises(ValueError, match="busy_timeout"):
            open_store(str(tmp_path / "s.db"), busy_timeout=bad)
        with pytest.raises(ValueError, match="lease"):
            open_store(str(tmp_path / "s.db"), lease=bad)
    with pytest.raises(TypeError, match="busy_timeout"):
        open_store(str(tmp_path / "s.db"), busy_timeout="10")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "target, words",
    [
        ("sqlite:///{tmp}/x.db?keep_runs=abc", "keep_runs"),
        ("mysql://u:hunter2@x/y", "scheme not supported"),
        ("sqlite:///{tmp}/x.db?journal=off", "journal=off"),
        ("sqlite:///{tmp}/x.db?password=hunter2", "password=***"),
        ("sqlite:///{tmp}/x.db?keep_runs=5&keep_runs=6", "given twice"),
        ("sqlite://host/x.db", "sqlite:///path"),
        ("", "non-empty"),
    ],
)
def test_a_bad_store_url_is_a_one_line_store_error(tmp_path, target, words):
    with pytest.raises(StoreURLError) as info:
        open_store(target.format(tmp=tmp_path))
    message = str(info.value)
    assert words in message and "\n" not in message and "hunter2" not in message, message
    assert os.listdir(tmp_path) == []


def test_an_unknown_postgresql_option_is_libpq_s_one_line_store_error(pg_url):
    with pytest.raises(StoreError, match='invalid URI query parameter: "bogus"') as info:
        open_store(pg_url + "&bogus=1")
    assert "\n" not in str(info.value)


def test_lease_in_the_url_is_the_store_s_lease(store_url, tmp_path):
    sep = "&" if "?" in store_url else "?"
    url = store_url if "://" in store_url else f"sqlite:///{store_url}"
    with open_store(f"{url}{sep}lease=12.5&keep_runs=7") as store:
        assert store.lease_ns == 12_500_000_000 and store.keep_runs == 7
    with open_store(store_url) as store:
        assert store.lease_ns is None  # not given: the Scheduler's lease= (default 30 s) decides
    with open_store(store_url, lease=3) as store:
        assert store.lease_ns == 3_000_000_000


def test_a_secret_reaches_the_store_s_constructor(store_url, monkeypatch):
    """Issue 24: ``open_store(..., secret=)`` hands it to the store classes'
    shared code (which signs with it) as ``secret=``."""
    given = []
    init = SQLStore.__init__

    def spy(self, **kw):
        given.append(kw.get("secret"))
        init(self, **kw)

    monkeypatch.setattr(SQLStore, "__init__", spy)
    secret = [b"new-key", "old-key"]
    open_store(store_url, secret=secret).close()
    open_store(store_url).close()
    assert given == [secret, None]


# -- helpers ---------------------------------------------------------------------


@pytest.fixture
def proxy(pg_cluster):
    with Proxy(socket_path(pg_cluster.dir, PORT)) as p:
        yield p


def _dbname(pg_url: str) -> str:
    return pg_url.split("/")[3].split("?")[0]


def test_a_schema_created_while_this_instance_waited_for_the_lock_is_seen(pg_url):
    """Several instances opening one new PostgreSQL store at once (issue 20 item 9's test saw
    ``DuplicateTable``): an instance whose first read found no schema waits for the schema lock
    while another creates the tables; once it has the lock it must see them. (``to_regclass``
    answered from the session's cache of the earlier miss, and both created the tables.)"""
    import threading

    import psycopg

    from procsched._store._postgres import _SCHEMA_LOCK_ID, PostgresStore

    creator = psycopg.connect(pg_url, autocommit=True)
    waiter = psycopg.connect(pg_url, autocommit=True)
    try:
        assert waiter.execute("SELECT to_regclass('procsched_version')").fetchone()[0] is None  # its first read
        creator.execute("BEGIN")
        creator.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_ID,))
        creator.execute("CREATE TABLE procsched_version (id INTEGER)")
        seen: list[bool] = []

        def wait_then_check() -> None:
            waiter.execute("BEGIN")
            seen.append(PostgresStore._has_schema(None, waiter.cursor()))  # type: ignore[arg-type]
            waiter.execute("COMMIT")

        thread = threading.Thread(target=wait_then_check)
        thread.start()
        waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        wait_until(lambda: creator.execute(waiting).fetchone()[0] == 1, 30, "the second to wait for the lock")
        creator.execute("COMMIT")
        thread.join(30)
        assert seen == [True]
    finally:
        creator.close()
        waiter.close()


_OPEN_AT_ONCE = """
import sys
from procsched._store import open_store
print("ready", flush=True)
sys.stdin.read(1)  # all start together: released once every one is ready
open_store(sys.argv[1]).close()
"""


def test_processes_making_one_new_sqlite_store_at_once_all_open_it(tmp_path) -> None:
    """Two instances started together on a new SQLite file: each opens it
    (both switched it to WAL at once: "database is locked", now and then)."""
    import subprocess
    import sys

    for round_ in range(8):
        path = str(tmp_path / f"s{round_}.db")
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _OPEN_AT_ONCE, path],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for _ in range(4)
        ]
        for p in procs:
            assert p.stdout.readline() == b"ready\n"
        for p in procs:
            p.stdin.write(b"g")
            p.stdin.flush()
        for p in procs:
            _, err = p.communicate(timeout=60)
            assert p.returncode == 0, err.decode()[-2000:]
