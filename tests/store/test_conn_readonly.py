"""``open_store(target, read_only=True)`` never creates or changes anything
(issue 26 item 7, store side).

A mistyped path is a StoreError ("no store at PATH"), not a new empty
database; a store on a read-only file system (a backup snapshot) can be
listed. As root, chmod stops nothing, so the read-only file system is
proven twice: no file appears next to the database in a writable
directory (no -wal, -shm or lock file), and a child process that has
dropped to ``nobody`` reads a snapshot it cannot write.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import pwd
import shutil
import sqlite3
import tempfile

import pytest

from procsched._errors import StoreError
from procsched._store import TaskDefinition, TaskState, open_store

T0 = 1_700_000_000 * 10**9
P = 10**9


def _fill(target: str) -> None:
    with open_store(target) as store:
        b = store.batch()
        b.upsert(TaskDefinition("k", "m:f", b"", {"kind": "fixed_rate", "period_ns": P}), TaskState(next_due_ns=T0))
        b.commit()
        me = store.register()
        assert store.claim_run(me, "k", 1, 1, T0)
        assert store.finish_run(me, "k", 1, 1, "ok", T0 + 1, T0 + P)


def _listing(directory) -> dict[str, str]:
    return {
        name: hashlib.sha256(open(os.path.join(directory, name), "rb").read()).hexdigest()
        for name in sorted(os.listdir(directory))
    }


def _read(store) -> tuple[list[str], list[tuple[str, int, str]]]:
    return [t.key for t in store.jobs()], [(r.key, r.run, r.outcome) for r in store.history("k")]


def test_a_missing_sqlite_store_is_an_error_and_nothing_is_created(tmp_path):
    for target in (tmp_path / "typo.db", f"sqlite:///{tmp_path}/typo.db", tmp_path / "no-dir" / "s.db"):
        with pytest.raises(StoreError, match="no store at .*typo.db|no store at .*no-dir"):
            open_store(target, read_only=True)
    assert os.listdir(tmp_path) == []


def test_a_closed_store_is_read_and_nothing_changes(tmp_path):
    path = tmp_path / "s.db"
    _fill(str(path))
    assert os.listdir(tmp_path) == ["s.db"]  # the last connection closed: no -wal left
    before = _listing(tmp_path)
    store = open_store(f"sqlite:///{path}", read_only=True)
    assert _read(store) == (["k"], [("k", 1, "ok")])
    assert store.lease_ns is None and store.read_only
    with pytest.raises(StoreError):
        store.register()  # a write
    store.gate_writes()  # (creates no lock file either)
    store.close()
    assert _listing(tmp_path) == before


def test_a_live_store_is_read_through_its_wal_and_nothing_is_created(tmp_path):
    path = str(tmp_path / "s.db")
    _fill(path)
    live = open_store(path)  # a scheduler's connection: the -wal and -shm exist
    b = live.batch()
    b.upsert(TaskDefinition("late", "m:f", b"", {"kind": "once"}), TaskState(next_due_ns=T0))
    b.commit()  # in the WAL only
    names = sorted(os.listdir(tmp_path))
    assert names == ["s.db", "s.db-shm", "s.db-wal"]
    with open_store(path, read_only=True) as store:
        assert [t.key for t in store.jobs()] == ["k", "late"]
    assert sorted(os.listdir(tmp_path)) == names
    live.close()


def test_a_wal_without_its_shm_is_refused_saying_why(tmp_path):
    path = str(tmp_path / "s.db")
    _fill(path)
    live = open_store(path)
    snap = tmp_path / "snap"
    snap.mkdir()
    for name in ("s.db", "s.db-wal"):
        shutil.copy(tmp_path / name, snap / name)
    live.close()
    with pytest.raises(StoreError, match="-shm"):
        open_store(str(snap / "s.db"), read_only=True)
    assert sorted(os.listdir(snap)) == ["s.db", "s.db-wal"]


def test_a_file_that_is_no_procsched_store_is_refused_and_left_alone(tmp_path):
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    before = _listing(tmp_path)
    with pytest.raises(StoreError, match="no procsched store"):
        open_store(other, read_only=True)
    (tmp_path / "text.db").write_text("not a database")
    with pytest.raises(StoreError, match="not a SQLite database"):
        open_store(tmp_path / "text.db", read_only=True)
    assert _listing(tmp_path) == {**before, "text.db": hashlib.sha256(b"not a database").hexdigest()}


def test_a_store_of_a_newer_schema_is_refused_read_only_too(tmp_path):
    path = tmp_path / "s.db"
    _fill(str(path))
    conn = sqlite3.connect(path)
    conn.execute("UPDATE procsched_version SET version = 99")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="schema version 99.*upgrade procsched"):
        open_store(path, read_only=True)


@pytest.mark.parametrize("shape", ["closed", "with-wal"])
def test_a_snapshot_on_a_read_only_file_system_is_listed(tmp_path, shape):
    """The snapshot's directory and files are read-only for the reader (a
    child dropped to ``nobody`` when the test runs as root)."""
    path = str(tmp_path / "s.db")
    _fill(path)
    live = open_store(path) if shape == "with-wal" else None
    snap = pathlib.Path(tempfile.mkdtemp(prefix="procsched-snap-"))  # (pytest's tmp dirs are root's only)
    for name in os.listdir(tmp_path):
        if name.startswith("s.db"):
            shutil.copy(tmp_path / name, snap / name)
    if live is not None:
        live.close()
    expected = sorted(os.listdir(snap))
    assert expected == (["s.db", "s.db-shm", "s.db-wal"] if shape == "with-wal" else ["s.db"])
    for name in expected:
        os.chmod(snap / name, 0o444)
    os.chmod(snap, 0o555)
    try:
        result = _as_reader(str(snap / "s.db"))
        assert result == "k 1 ok", result
        assert sorted(os.listdir(snap)) == expected
    finally:
        os.chmod(snap, 0o755)
        shutil.rmtree(snap)


def _as_reader(path: str) -> str:
    """List the store at ``path`` read-only, as an unprivileged user if we are root."""

    def read() -> str:
        try:
            with open_store(path, read_only=True) as store:
                (key,), [(_, run, outcome)] = _read(store)
                return f"{key} {run} {outcome}"
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            return f"{type(exc).__name__}: {exc}"

    if os.geteuid() != 0:
        return read()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop root, read, report, leave at once
        try:
            os.close(r)
            nobody = pwd.getpwnam("nobody")
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            os.write(w, read().encode()[:4000])
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        result = f.read().decode()
    os.waitpid(pid, 0)
    return result


def test_postgresql_read_only_creates_no_tables_and_writes_nothing(pg_cluster, pg_url):
    import psycopg

    with pytest.raises(StoreError, match="no procsched store"):
        open_store(pg_url, read_only=True)
    with psycopg.connect(pg_url, autocommit=True) as admin:
        assert admin.execute("SELECT to_regclass('procsched_version')").fetchone()[0] is None
    _fill(pg_url)
    store = open_store(pg_url, read_only=True)
    try:
        assert _read(store) == (["k"], [("k", 1, "ok")])
        with pytest.raises(StoreError, match="read-only transaction"):
            store.register()
        with psycopg.connect(pg_cluster.url, autocommit=True) as admin:  # a dropped connection...
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (pg_url.split("/")[3].split("?")[0],),
            )
        with pytest.raises(StoreError):
            store.jobs()
        with pytest.raises(StoreError, match="read-only transaction"):  # ...and the new one is read-only too
            store.register()
        assert _read(store) == (["k"], [("k", 1, "ok")])
    finally:
        store.close()
