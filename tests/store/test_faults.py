"""Bad stores and failing writes: a clear StoreError, never a hang, nothing half-written."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time

import pytest

from procsched import SchedulerError
from procsched._errors import StoreError
from procsched._store import SQLiteStore, TaskDefinition, TaskState, open_store

P = 1_000_000_000
T0 = 1_700_000_000 * P


def test_missing_directory(tmp_path):
    with pytest.raises(StoreError, match="directory .* does not exist"):
        open_store(str(tmp_path / "nope" / "store.db"))


def test_a_directory_is_not_a_store(tmp_path):
    with pytest.raises(StoreError, match="is a directory"):
        open_store(str(tmp_path))


@pytest.mark.parametrize("content", [b"this is not a database at all" * 100, b"SQLite format 3\x00" + b"\xff" * 4000])
def test_not_a_database_or_corrupted(tmp_path, content):
    path = tmp_path / "store.db"
    path.write_bytes(content)
    with pytest.raises(StoreError, match="not a SQLite database, or corrupted"):
        open_store(str(path))


def _try_to_write(path: str) -> str:
    try:
        store = open_store(path)
        b = store.batch()
        b.delete("x")
        b.commit()
    except StoreError as exc:
        return f"StoreError: {exc}"
    return "written"


def test_read_only_database():
    """Root ignores file modes, so as root the write is tried in a forked
    child that dropped to the ``nobody`` user, for whom the file is read-only."""
    import pwd
    import tempfile

    directory = tempfile.mkdtemp(prefix="procsched-ro-")
    try:
        path = os.path.join(directory, "store.db")
        open_store(path).close()
        os.chmod(path, 0o444)
        os.chmod(directory, 0o555)
        if os.geteuid() != 0:
            result = _try_to_write(path)
        else:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: drop root, try, report, leave at once
                try:
                    os.close(r)
                    nobody = pwd.getpwnam("nobody")
                    os.setgid(nobody.pw_gid)
                    os.setuid(nobody.pw_uid)
                    os.write(w, _try_to_write(path).encode()[:4000])
                finally:
                    os._exit(0)
            os.close(w)
            with os.fdopen(r, "rb") as f:
                result = f.read().decode()
            os.waitpid(pid, 0)
        assert result.startswith("StoreError:"), result
        assert "readonly" in result or "unable to open" in result, result
    finally:
        os.chmod(directory, 0o755)
        import shutil

        shutil.rmtree(directory, ignore_errors=True)


def test_newer_sqlite_url_forms(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    open_store("sqlite:///rel.db").close()
    assert (tmp_path / "rel.db").exists()
    open_store(f"sqlite:///{tmp_path}/abs.db").close()
    assert (tmp_path / "abs.db").exists()
    with pytest.raises(ValueError, match="scheme not supported"):
        open_store("mysql://x/y")
    with pytest.raises(ValueError, match="sqlite:///path"):
        open_store("sqlite://host/x")
    with pytest.raises(TypeError):
        open_store(3)  # type: ignore[arg-type]


def test_unreachable_postgresql_fails_fast():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(StoreError, match="cannot connect") as info:
        open_store(f"postgresql://u:secret@127.0.0.1:{port}/db", connect_timeout=2)
    assert time.monotonic() - start < 5
    assert "secret" not in str(info.value)
    assert isinstance(info.value, SchedulerError)


def test_blackholed_postgresql_times_out(tmp_path):
    """A server that accepts but never answers: connect_timeout bounds the wait."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        start = time.monotonic()
        with pytest.raises(StoreError, match="cannot connect"):
            open_store(f"postgresql://u@127.0.0.1:{port}/db", connect_timeout=2)
        assert time.monotonic() - start < 10


def test_without_psycopg_a_clear_error_names_the_extra():
    code = (
        "import sys\nsys.modules['psycopg'] = None  # as if not installed\n"
        "import procsched._store as st\nassert 'psycopg' not in [m for m in sys.modules if sys.modules[m]]\n"
        "try:\n    st.open_store('postgresql://x/y')\nexcept Exception as e:\n"
        "    print(type(e).__name__, e)\n"
        "st.open_store(sys.argv[1]).close(); print('sqlite ok')\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with_tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"nopg-{os.getpid()}.db")
    try:
        out = subprocess.run(
            [sys.executable, "-c", code, with_tmp],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": root},
        )
    finally:
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(with_tmp + suffix):
                os.unlink(with_tmp + suffix)
    assert "StoreError" in out.stdout and "procsched[postgres]" in out.stdout, out.stdout + out.stderr
    assert "sqlite ok" in out.stdout


# -- a failing write, injected inside the store layer ------------------------


class FailingConnection:
    """A real sqlite3 connection whose statements start failing with
    SQLITE_FULL once armed and a statement matches ``when`` - the store
    layer sees exactly what a full disk makes sqlite3 raise."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.when: str | None = None

    def execute(self, sql, params=()):
        return self.conn.execute(sql, params)

    def cursor(self):
        return FailingCursor(self)

    def close(self):
        self.conn.close()


class FailingCursor:
    def __init__(self, owner: FailingConnection) -> None:
        self.owner = owner
        self.cur = owner.conn.cursor()

    def execute(self, sql, params=()):
        if self.owner.when is not None and self.owner.when in sql:
            raise sqlite3.OperationalError("database or disk is full")
        self.cur.execute(sql, params)
        return self

    def fetchone(self):
        return self.cur.fetchone()

    def fetchall(self):
        return self.cur.fetchall()

    def fetchmany(self, size):
        return self.cur.fetchmany(size)

    @property
    def rowcount(self):
        return self.cur.rowcount


def test_failing_write_rolls_back_the_whole_batch_and_the_store_goes_on(tmp_path):
    made: list[FailingConnection] = []

    def connect(*a, **k):
        made.append(FailingConnection(sqlite3.connect(*a, **k)))
        return made[-1]

    store = SQLiteStore(tmp_path / "s.db", _connect=connect)
    b = store.batch()
    b.upsert(TaskDefinition("k", "m:f", b"", {"kind": "fixed_rate", "period_ns": P}), TaskState(next_due_ns=T0))
    b.commit()
    h = store.register()
    assert store.claim_run(h, "k", 1, 1, T0)
    before = store.load()
    # the run row is written, then the reschedule fails: neither may stay
    made[0].when = "UPDATE procsched_tasks SET next_due_ns"
    b = store.batch(h)
    b.finished("k", 1, 1, "ok", T0 + 1, T0 + P)
    with pytest.raises(StoreError, match="writing a batch.*database or disk is full") as info:
        b.commit()
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    made[0].when = None
    assert store.load() == before
    # the disk has room again: the same change goes through
    assert store.finish_run(h, "k", 1, 1, "ok", T0 + 1, T0 + P)
    assert store.get("k").state.next_due_ns == T0 + P
    store.close()


def test_locked_database_waits_busy_timeout_then_fails(tmp_path):
    path = tmp_path / "s.db"
    store = open_store(str(path), busy_timeout=0.2)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    start = time.monotonic()
    with pytest.raises(StoreError, match="locked"):
        store.register()
    assert 0.15 < time.monotonic() - start < 5
    blocker.execute("ROLLBACK")
    store.register()
    blocker.close()
    store.close()


def test_postgres_connection_lost_then_recovered(pg_cluster, pg_url):
    import psycopg

    store = open_store(pg_url)
    with psycopg.connect(pg_cluster.url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            (pg_url.split("/")[3].split("?")[0],),
        )
    with pytest.raises(StoreError):
        store.jobs()
    assert store.jobs() == []  # reconnected
    store.close()


def test_server_binaries_found_in_lib_dir_or_on_path(tmp_path, monkeypatch):
    from procsched._store._pgcluster import find_binaries

    real = find_binaries()
    if real is None:
        pytest.skip("no PostgreSQL server binaries here (the pg_cluster fixture says so loudly in CI)")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("initdb", "pg_ctl", "postgres"):
        (bindir / name).symlink_to(os.path.join(real, name))
    monkeypatch.setenv("PATH", str(bindir))
    assert find_binaries(str(tmp_path / "no-such-lib" / "*" / "bin")) == real  # via PATH, symlinks resolved
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert find_binaries(str(tmp_path / "no-such-lib" / "*" / "bin")) is None
    assert find_binaries() == real


def test_reads_do_not_wait_for_a_writer(tmp_path):
    """`procsched jobs` / `history` next to a busy scheduler: SQLite reads
    take a WAL snapshot, not the write lock."""
    path = tmp_path / "s.db"
    store = open_store(str(path), busy_timeout=0.1)
    b = store.batch()
    b.upsert(TaskDefinition("k", "m:f", b"", {"kind": "once"}), TaskState(next_due_ns=T0))
    b.commit()
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE procsched_tasks SET paused = 1")
    assert [t.state.paused for t in store.jobs()] == [False]  # the committed snapshot, at once
    assert len(store.load().tasks) == 1 and store.history("k") == []
    writer.execute("COMMIT")
    assert store.get("k").state.paused
    writer.close()
    store.close()


def test_dead_here_only_names_gone_processes_of_this_host():
    from procsched._store import Holder, dead_here

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    host = socket.gethostname()
    holders = [
        Holder("a", 1, host, gone.pid, P),
        Holder("b", 2, host, os.getppid(), P),
        Holder("c", 3, host, os.getpid(), P),
        Holder("d", 4, "elsewhere", gone.pid, P),
    ]
    assert [h.id for h in dead_here(holders)] == ["a"]
