"""A restart's adoption comes in chunks (the facade's ``_adopt``, 5,000
stored tasks each): the dispatcher re-reads the store once after the last
one, never between two (issue 25). A re-read between two chunks found the
tasks of the chunks to come not adopted yet; a restart right after its
100,000 rows were written (the restart benchmark's first run) saw every
one of them in the re-read's overlap, and asked the facade to adopt each
one again (100,000 AdoptKey). A real journal on a real SQLite store; the
engine's carrier is a recorder (the engine's tests')."""

from __future__ import annotations

import os
import time

from procsched._core import Policy
from procsched._core._schedule import Schedule
from procsched._runtime import _messages as m
from procsched._runtime._durable._journal import Journal
from procsched._runtime._engine import Engine
from procsched._store import TaskDefinition, TaskState, open_store
from tests.runtime.test_engine import FakeCarrier

NS = 1_000_000_000
RATE = {"kind": "fixed_rate", "period_ns": 3600 * NS, "initial_delay_ns": 0, "misfire": "catch_up"}


def test_no_re_read_between_the_chunks_of_a_restart_s_adoption(tmp_path, monkeypatch) -> None:
    path = str(tmp_path / "s.db")
    store = open_store(path)
    due = time.time_ns() + 3600 * NS
    batch = store.batch()
    for key in ("k1", "k2"):
        batch.upsert(TaskDefinition(key, "m:f", b"", RATE), TaskState(0, due))
    batch.commit()
    journal = Journal(path, os.getpid(), emit=lambda events: None)
    try:
        engine = Engine(FakeCarrier(prefetch=2), workers=1, policy=Policy.PRIORITY, durable=journal)
        offset = time.time_ns() - time.monotonic_ns()
        engine.set_wall_offset(offset, time.monotonic_ns())
        reads: list[int] = []
        view = journal.store.peers_view
        monkeypatch.setattr(journal.store, "peers_view", lambda since, **kw: reads.append(since) or view(since, **kw))
        peers = journal.peers
        now = time.monotonic_ns()
        peers.turn(engine, now, offset, False)  # the dispatcher's first turn: a re-read an interval later
        shape = m.AdoptShape.wire(Schedule.fixed_rate(3600 * NS).to_wire(), due, 0, None, None, b"", None, None)
        row = m.AdoptRow.wire("k1", 0, 0, 1, due, due, False, False, 1, "h")
        journal.adopt(engine, [shape], [row], offset, last=False)
        later = now + 2 * peers.interval  # the chunks took longer than an interval (100,000 tasks, a busy machine)
        peers.turn(engine, later, offset, False)
        assert reads == []  # k2 is on its way
        journal.adopt(engine, [], [m.AdoptRow.wire("k2", 0, 0, 1, due, due, False, False, 2, "h")], offset)
        peers.turn(engine, later, offset, False)
        assert len(reads) == 1  # the last chunk came: re-read at once
    finally:
        journal.close(clean=True)
        store.close()
