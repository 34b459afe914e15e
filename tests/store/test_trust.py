"""Signed definitions (issue 24, store side), on SQLite and PostgreSQL.

``open_signed`` gives a store object the secret as the stores' constructors
do (``secret=``, from ``open_store(..., secret=...)``). Rows are tampered
with plain SQL, as whoever can write the store would.
"""

from __future__ import annotations

import logging
import pickle

import pytest
import schema1

from procsched._store import SQLStore, TaskDefinition, TaskState, _trust, open_store
from procsched._store._model import BAD_SIGNATURE, UNSIGNED

P = 1_000_000_000
T0 = 1_700_000_000 * P


def open_signed(url: str, secret) -> SQLStore:
    store = open_store(url)
    store._use_secret(secret)
    return store


def add(store, key, args=b"args", fn_ref="store_funcs:plain"):
    b = store.batch()
    b.upsert(
        TaskDefinition(key, fn_ref, args, {"kind": "fixed_rate", "period_ns": P}, {"name": key}),
        TaskState(next_due_ns=T0),
    )
    assert b.commit().ok


def sql(url: str, statement: str, params: tuple = ()) -> None:
    conn = schema1.connect(url)
    try:
        if url.startswith("postgresql://"):
            statement = statement.replace("?", "%s")
        conn.execute(statement, params)
    finally:
        conn.close()


def trusted(store) -> dict[str, str | None]:
    return {t.key: t.untrusted for t in store.load().tasks}


class Planted:
    """A payload that runs code when unpickled (it creates a file)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_signed_rows_load_and_tampered_ones_never_do(store_url, tmp_path):
    store = open_signed(store_url, b"k1")
    assert store.signed
    add(store, "a")
    add(store, "b", args=b"other args")
    assert trusted(store) == {"a": None, "b": None}
    # a tampered payload
    planted = pickle.dumps(((Planted(str(tmp_path / "ran")),), {}))
    sql(store_url, "UPDATE procsched_definitions SET args = ? WHERE key = 'a'", (planted,))
    a = store.get("a")
    assert (a.untrusted, a.unloadable, a.definition.args) == (BAD_SIGNATURE, BAD_SIGNATURE, b"")
    assert store.get("b").untrusted is None  # the others load
    # a valid payload (with its signature) copied to another key
    sql(
        store_url,
        "UPDATE procsched_definitions SET args = (SELECT d.args FROM procsched_definitions d WHERE "
        "d.key = 'b'), signature = (SELECT d.signature FROM procsched_definitions d WHERE d.key = 'b') "
        "WHERE key = 'a'",
    )
    assert store.get("a").untrusted == BAD_SIGNATURE
    # another function reference
    add(store, "c")
    sql(store_url, "UPDATE procsched_definitions SET fn_ref = 'os:system' WHERE key = 'c'")
    assert store.get("c").untrusted == BAD_SIGNATURE
    # nothing of the store's reads ever unpickles or imports a payload
    store.load(), store.jobs(), store.jobs_view(), store.job_view("a"), store.changed_since(0), store.peers_view(0)
    store.history(None), store.counts()
    assert not (tmp_path / "ran").exists()
    # the program declares the task again: signed again, trusted again
    add(store, "a")
    assert store.get("a").untrusted is None and store.get("a").unloadable is None
    store.close()


def test_another_secret_an_unsigned_row_and_rotation(store_url):
    old = open_signed(store_url, "old secret")
    add(old, "signed-old")
    plain = open_store(store_url)  # no secret: writes unsigned rows, trusts every row
    add(plain, "unsigned")
    assert trusted(plain) == {"signed-old": None, "unsigned": None}
    new = open_signed(store_url, ["new secret", "old secret"])  # rotation: sign with new, accept both
    assert trusted(new) == {"signed-old": None, "unsigned": UNSIGNED}
    add(new, "signed-new")
    only_new = open_signed(store_url, "new secret")
    assert trusted(only_new) == {"signed-new": None, "signed-old": BAD_SIGNATURE, "unsigned": UNSIGNED}
    add(new, "signed-old")  # declared again under rotation: signed with the new secret
    assert trusted(only_new)["signed-old"] is None
    assert trusted(old)["signed-new"] == BAD_SIGNATURE  # a row written with another secret
    for s in (old, plain, new, only_new):
        s.close()


def test_a_definition_moved_to_another_key_fails(store_url):
    store = open_signed(store_url, b"k")
    add(store, "a")
    for table in ("procsched_definitions", "procsched_tasks"):
        sql(store_url, f"UPDATE {table} SET key = 'z' WHERE key = 'a'")
    (z,) = store.load().tasks
    assert (z.key, z.untrusted) == ("z", BAD_SIGNATURE)
    store.close()


def test_a_row_with_garbage_schedule_is_listed_untrusted_not_a_failure(store_url):
    store = open_signed(store_url, b"k")
    add(store, "a")
    add(store, "b")
    sql(store_url, "UPDATE procsched_definitions SET schedule = 'not json', options = '[1]' WHERE key = 'a'")
    tasks = {t.key: t for t in store.load().tasks}
    assert tasks["a"].untrusted == BAD_SIGNATURE and tasks["b"].untrusted is None
    assert {j.key for j in store.jobs_view()} == {"a", "b"}
    store.close()


def test_the_migrated_rows_are_unsigned(tmp_path):
    url = schema1.place("sqlite", tmp_path)
    store = open_signed(url, b"k")
    assert set(trusted(store).values()) == {UNSIGNED}
    store.close()


def test_without_a_secret_the_first_open_says_rows_are_trusted_as_code(store_url, caplog, monkeypatch):
    monkeypatch.setattr(_trust, "_told", False)
    with caplog.at_level(logging.INFO, logger="procsched"):
        open_store(store_url).close()
        open_store(store_url).close()
    said = [r.getMessage() for r in caplog.records if "trusted as code" in r.getMessage()]
    assert len(said) == 1, said


def test_bad_secrets_are_refused_and_never_shown():
    with pytest.raises(ValueError, match="non-empty"):
        _trust.Keyring(b"")
    with pytest.raises(ValueError, match="non-empty"):
        _trust.Keyring(["ok", ""])
    with pytest.raises(TypeError, match="secret must be"):
        _trust.Keyring(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="secret must be"):
        _trust.Keyring([])
    assert "hunter2" not in repr(_trust.Keyring("hunter2"))
