"""The SQLite store's files are its owner's only (issue 24, "Files").

A database procsched creates, SQLite's -wal and -shm beside it and
procsched's ``-procsched.lock`` are 0600 whatever the umask (tested under
umask 000, where SQLite alone made them 0644); an existing database keeps
the mode its user chose, and the files procsched adds follow it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat

import pytest

import procsched
from procsched._store import TaskDefinition, TaskState, open_store
from tests.durable import jobs_mod

T0 = 1_700_000_000 * 10**9
SUFFIXES = ("", "-wal", "-shm", "-procsched.lock")


@contextlib.contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _modes(path: str) -> dict[str, str]:
    return {suffix or "db": oct(stat.S_IMODE(os.stat(path + suffix).st_mode)) for suffix in SUFFIXES}


def _write(store) -> None:
    store.gate_writes()  # the lock file, as the dispatcher's writer makes it
    b = store.batch()
    b.upsert(TaskDefinition("k", "m:f", b"", {"kind": "once"}), TaskState(next_due_ns=T0))
    b.commit()  # the -wal and -shm


def test_a_new_store_s_files_are_private_whatever_the_umask(tmp_path):
    path = str(tmp_path / "s.db")
    with umask(0o000):
        store = open_store(path)
        _write(store)
        modes = _modes(path)
        store.close()
    assert modes == dict.fromkeys(("db", "-wal", "-shm", "-procsched.lock"), "0o600")


def test_temporary_storage_is_in_memory(tmp_path):
    """A savepoint's sub-journal (a batch's set-wise group) spills past 64
    KiB to a temporary file, by default on disk: in memory instead (faster,
    and no file of the store's data outside its directory)."""
    path = str(tmp_path / "s.db")
    store = open_store(path)
    _write(store)
    reader = open_store(path, read_only=True)
    assert [s.conn.execute("PRAGMA temp_store").fetchone()[0] for s in (store, reader)] == [2, 2]  # MEMORY
    reader.close()
    store.close()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o660])
def test_an_existing_database_keeps_its_mode_and_the_added_files_follow_it(tmp_path, mode):
    path = str(tmp_path / "s.db")
    sqlite3.connect(path).close()  # an empty database the user made, with the mode the user chose
    os.chmod(path, mode)
    with umask(0o000):
        store = open_store(path)
        _write(store)
        modes = _modes(path)
        store.close()
    assert modes == dict.fromkeys(("db", "-wal", "-shm", "-procsched.lock"), oct(mode))


@pytest.mark.timeout(60)
def test_a_scheduler_s_store_files_are_private_under_umask_000(tmp_path):
    """The real Scheduler: the facade creates the database, the dispatcher
    and its writer thread the -wal, -shm and lock files."""
    path = str(tmp_path / "s.db")
    with umask(0o000), procsched.Scheduler(1, store=path) as s:
        assert s.schedule(jobs_mod.add, 0, args=(1, 2), key="k").result(30) == 3
        modes = _modes(path)
    assert modes == dict.fromkeys(("db", "-wal", "-shm", "-procsched.lock"), "0o600")
