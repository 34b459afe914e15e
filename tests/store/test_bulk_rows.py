"""A read of the stored tasks (``_rows.stored_tasks``: one loop that fills
the records' slots without their ``__init__``, issue 25) makes the records
their checked constructors make, field for field, in a bulk read
(``load()``, ``jobs()``) as in a read by key (``get()``), on rows of every
kind - signed, tampered, unsigned, paused, held, grouped, with a retry
pending, unloadable - on SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import replace

import schema1

from procsched._store import SQLStore, TaskDefinition, TaskState, open_store
from procsched._store._model import BAD_SIGNATURE, UNSIGNED

P = 1_000_000_000
T0 = 1_700_000_000 * P


def fill(store: SQLStore) -> None:
    b = store.batch()
    b.upsert(TaskDefinition("plain", "store_funcs:plain", b"", {"kind": "fixed_rate", "period_ns": P}, {}),
             TaskState(next_due_ns=T0))  # fmt: skip
    b.upsert(TaskDefinition("args", "store_funcs:plain", b"xy", {"kind": "once"}, {"name": "n"}),
             TaskState(3, None, 2, paused=True))  # fmt: skip
    b.upsert(TaskDefinition("grouped", "store_funcs:plain", b"", {"kind": "fixed_delay", "period_ns": P}, {},
                            max_concurrent=3, group="g"), TaskState(7, T0 + P))  # fmt: skip
    b.upsert(TaskDefinition("held", "store_funcs:plain", b"", {"kind": "fixed_rate", "period_ns": P}, {}),
             TaskState(0, T0))  # fmt: skip
    assert b.commit().ok
    h = store.register()
    b = store.batch(h)
    b.started("held", 1, 1, T0)
    assert b.commit().ok


def same(store: SQLStore) -> None:
    by_row = {key: store.get(key) for key in store.keys()}
    loaded = {t.key: t for t in store.load().tasks}
    assert loaded == by_row
    assert {t.key: t for t in store.jobs()} == by_row
    for key, task in loaded.items():  # shared dicts, as before: equal texts parsed once
        assert task.definition.schedule == by_row[key].definition.schedule
    assert loaded["held"].holder is not None and loaded["args"].state.paused is True
    for task in loaded.values():  # as the checked constructors make them
        assert task == replace(task, definition=replace(task.definition), state=replace(task.state))


def test_a_bulk_read_makes_the_tasks_a_read_by_key_makes(store_url):
    store = open_store(store_url)
    fill(store)
    same(store)
    store.close()


def sql(url: str, statement: str) -> None:
    conn = schema1.connect(url)
    try:
        conn.execute(statement)
    finally:
        conn.close()


def test_a_bulk_read_checks_every_row_s_signature(store_url):
    plain = open_store(store_url)
    fill(plain)  # unsigned
    signed = open_store(store_url)
    signed._use_secret(b"k")
    b = signed.batch()
    b.upsert(TaskDefinition("signed", "store_funcs:plain", b"a", {"kind": "once"}, {}), TaskState(0, T0))
    b.upsert(TaskDefinition("tampered", "store_funcs:plain", b"a", {"kind": "once"}, {}), TaskState(0, T0))
    assert b.commit().ok
    conn_store = open_store(store_url)
    b = conn_store.batch()  # rewritten unsigned over a signed row: its signature goes
    b.upsert(TaskDefinition("tampered", "os:system", b"a", {"kind": "once"}, {}), TaskState(0, T0))
    assert b.commit().ok
    b = signed.batch()
    b.upsert(TaskDefinition("bad", "store_funcs:plain", b"a", {"kind": "once"}, {}), TaskState(0, T0))
    assert b.commit().ok
    sql(store_url, "UPDATE procsched_definitions SET fn_ref = 'os:system' WHERE key = 'bad'")  # signed, tampered
    same(signed)
    untrusted = {t.key: t.untrusted for t in signed.load().tasks}
    assert untrusted == {"plain": UNSIGNED, "args": UNSIGNED, "grouped": UNSIGNED, "held": UNSIGNED,
                         "signed": None, "tampered": UNSIGNED, "bad": BAD_SIGNATURE}  # fmt: skip
    assert {t.key: t.definition.args for t in signed.load().tasks if t.untrusted}["bad"] == b""  # withheld
    for s in (plain, signed, conn_store):
        s.close()


def test_a_bulk_read_shares_what_the_tasks_of_one_definition_share(store_url):
    """Without a secret, a definition's function, arguments, schedule and
    options are read once (by its digest) and shared by its tasks."""
    store = open_store(store_url)
    b = store.batch()
    for i in range(3):
        b.upsert(TaskDefinition(f"t{i}", "store_funcs:plain", b"ab", {"kind": "fixed_rate", "period_ns": P}, {}),
                 TaskState(0, T0 + i))  # fmt: skip
    assert b.commit().ok
    fill(store)
    same(store)
    tasks = [t for t in store.load().tasks if t.key.startswith("t")]
    assert len({id(t.definition.args) for t in tasks}) == len({id(t.definition.schedule) for t in tasks}) == 1
    assert [t.state.next_due_ns for t in sorted(tasks, key=lambda t: t.key)] == [T0, T0 + 1, T0 + 2]
    store.close()


def test_a_digest_that_stands_for_two_definitions_reads_each_task_whole(store_url):
    """A store written by hand: two different definitions under one digest.
    Each task still gets its own definition (then every row is read whole)."""
    store = open_store(store_url)
    fill(store)
    sql(store_url, "UPDATE procsched_definitions SET def_hash = 'same' WHERE key IN ('plain', 'args')")
    loaded = {t.key: t.definition for t in store.load().tasks}
    assert (loaded["plain"].args, loaded["plain"].schedule["kind"]) == (b"", "fixed_rate")
    args = loaded["args"]
    assert (args.args, args.schedule["kind"], args.options) == (b"xy", "once", {"name": "n"})
    same(store)
    store.close()
