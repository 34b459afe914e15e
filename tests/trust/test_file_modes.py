"""The files procsched creates are its owner's only, whatever the umask
(issue 24): under umask 000, the dispatcher's temporary directory (0700),
each run's capture file and the forkserver's socket in it (0600), the SQLite
database, its -wal, -shm and lock files (0600)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.trust import tasks
from tests.trust.helpers import mode


@pytest.fixture
def umask_000() -> Iterator[None]:
    """umask 000 here, so in the dispatcher and the workers this process starts."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize("start_method", ["forkserver", "spawn", "fork"])
def test_temporary_files_are_private_under_umask_000(umask_000, schedulers, start_method):
    s = schedulers(1, capture_output=True, mp_context=start_method)
    seen = s.submit(tasks.files).result(30)
    again = s.submit(tasks.files).result(30)  # a second run: a second capture file
    s.shutdown()
    assert seen["dir_mode"] == 0o700, oct(seen["dir_mode"])
    assert seen["capture_mode"] == again["capture_mode"] == 0o600
    others = {name: oct(m) for name, m in {**seen["entries"], **again["entries"]}.items() if m & 0o077}
    assert not others, f"files in the dispatcher's directory that others can read: {others}"
    assert not os.path.exists(os.path.dirname(seen["capture"])), "the temporary directory outlived the scheduler"


def test_the_sqlite_files_are_private_under_umask_000(umask_000, schedulers, tmp_path):
    db = str(tmp_path / "store.db")
    s = schedulers(1, store=db)
    s.schedule(tasks.tick, args=(str(tmp_path / "runs"), "x"), key="k").result(30)  # a write: the WAL exists
    made = {p: mode(p) for p in (db, db + "-wal", db + "-shm", db + "-procsched.lock") if os.path.exists(p)}
    s.shutdown()
    assert db in made and db + "-wal" in made, sorted(made)
    assert {p: oct(m) for p, m in made.items()} == {p: "0o600" for p in made}
