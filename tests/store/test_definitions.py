"""A definition is written once: claims and ends touch only state rows (issue 20 item 18).

With schema 1 a keyed task's pickled arguments lived in its state row, so
every claim and every end rewrote them: a 10 MB argument grew the SQLite
WAL to ~740 MB in 8 s. Here a run writes its state row and its run row, and
the definition's row - arguments included - is written when the program
schedules or changes the task, and never again.
"""

from __future__ import annotations

import os

from procsched._store import TaskDefinition, TaskState, open_store

P = 1_000_000_000
T0 = 1_700_000_000 * P
BIG = os.urandom(4 * 1024 * 1024)  # a 4 MB argument blob (random: it does not compress, in the WAL or anywhere)
RUNS = 100


def big(args: bytes = BIG) -> TaskDefinition:
    return TaskDefinition("big", "store_funcs:plain", args, {"kind": "fixed_rate", "period_ns": P}, {"name": "big"})


def cycles(store, h, first: int, n: int) -> None:
    """Runs first..first+n-1, one batch per run as a dispatcher turn: the
    previous run's end and this run's claim."""
    for run in range(first, first + n):
        b = store.batch(h)
        if run > 1:
            b.finished("big", run - 1, 1, "ok", T0 + (run - 1) * P, T0 + (run - 1) * P)
        b.started("big", run, 1, T0 + (run - 1) * P, T0 + (run - 1) * P + 1)
        assert b.commit().ok


def test_sqlite_runs_never_rewrite_the_arguments(tmp_path):
    path = str(tmp_path / "s.db")
    store = open_store(path)
    store.manual_checkpoints()  # no checkpoint resets the WAL: it holds every page written from here on
    b = store.batch()
    b.upsert(big(), TaskState(next_due_ns=T0))
    assert b.commit().ok
    h = store.register()
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    assert os.path.getsize(path + "-wal") == 0
    cycles(store, h, 1, RUNS)
    # 100 claims and 100 ends wrote less than ONE copy of the argument
    # (schema 1: 200 copies, 800 MB)
    assert os.path.getsize(path + "-wal") < len(BIG)
    # the same definition declared again (a restart) does not write it either
    b = store.batch(h)
    b.upsert(big(), TaskState(RUNS, T0 + RUNS * P))
    assert b.commit().ok
    assert os.path.getsize(path + "-wal") < len(BIG)
    # a changed definition is written (once)
    b = store.batch(h)
    b.upsert(big(BIG + b"!"))  # (another size: SQLite rewrites a same-sized blob in place, changed pages only)
    assert b.commit().ok
    assert os.path.getsize(path + "-wal") > len(BIG)
    task = store.get("big")
    assert task.definition.args[-1:] == b"!" and task.state.run_count == RUNS and task.in_flight == 1
    store.close()


def test_postgresql_runs_never_rewrite_the_definition_row(pg_url):
    """PostgreSQL writes a new row version for every UPDATE: the
    definition's row version (``xmin``, the transaction that wrote it) must
    stay the one its upsert wrote."""
    import psycopg

    store = open_store(pg_url)
    b = store.batch()
    b.upsert(big(), TaskState(next_due_ns=T0))
    assert b.commit().ok
    h = store.register()

    def versions() -> tuple[str, str]:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            d = conn.execute("SELECT xmin::text FROM procsched_definitions WHERE key = 'big'").fetchone()[0]
            t = conn.execute("SELECT xmin::text FROM procsched_tasks WHERE key = 'big'").fetchone()[0]
        return d, t

    written, state = versions()
    cycles(store, h, 1, 20)
    assert versions()[0] == written and versions()[1] != state  # the state row moved, the definition did not
    b = store.batch(h)
    b.upsert(big(), TaskState(20, T0 + 20 * P))
    assert b.commit().ok
    assert versions()[0] == written  # declared again unchanged: not written
    b = store.batch(h)
    b.upsert(big(b"small"))
    assert b.commit().ok
    assert versions()[0] != written
    store.close()


def test_a_re_read_can_leave_the_arguments_out(store):
    """What another instance's re-read needs of a changed task is its state
    and schedule: ``peers_view(arguments=False)`` does not read (nor check)
    its arguments; ``get`` reads the whole definition."""
    store._use_secret(b"k")
    b = store.batch()
    b.upsert(big(), TaskState(next_due_ns=T0))
    assert b.commit().ok
    (light,), count, _, _ = store.peers_view(0, arguments=False)
    (whole,), _, _, _ = store.peers_view(0)
    assert count == 1 and light.definition.args == b"" and whole.definition.args == BIG
    assert light.untrusted is None and whole.untrusted is None
    assert (light.state, light.definition.schedule, light.definition.def_hash) == (
        whole.state,
        whole.definition.schedule,
        whole.definition.def_hash,
    )
