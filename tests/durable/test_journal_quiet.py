"""What a re-read pass makes the engine do is the store's already: the
journal writes none of it back, even when something inside the pass (a
take-over) asks it to journal the events so far (the fault campaign, seed
1201: a pass followed a task's row, read just before a pause from outside
landed, and took over an expired scheduler; the take-over journalled the
"resume" the pass had followed, and its "paused = 0", written after the
pause, undid it). A real journal on a real SQLite store; the events are
the engine's records, made here."""

from __future__ import annotations

import os

from procsched._core import TaskState
from procsched._runtime import _messages as m
from procsched._runtime._durable._journal import Journal


def _journal(tmp_path) -> Journal:
    journal = Journal(str(tmp_path / "s.db"), os.getpid(), emit=lambda events: None)
    journal.keys[7] = "k"  # a keyed task of this scheduler
    return journal


def _resumed() -> list[m.Message]:
    return [m.TaskChanged.wire(7, TaskState.PENDING.value, 123, 1_700_000_000_000_000_000)]


def test_a_sync_inside_a_pass_journals_nothing_of_what_the_pass_followed(tmp_path) -> None:
    journal = _journal(tmp_path)
    try:
        events = _resumed()[:0]
        with journal.unwritten(events):
            events += _resumed()  # the pass follows the row: a resume, read from the store
            journal.sync(events)  # a take-over, later in the same pass
        journal.sync(events)  # the next turn
        assert [op for op in journal.batch.ops if op[0] == "update"] == []
        assert not journal.pausing
    finally:
        journal.close(clean=True)


def test_outside_a_pass_the_engine_s_own_resume_is_journalled(tmp_path) -> None:
    journal = _journal(tmp_path)
    try:
        events = _resumed()  # the user's resume, here
        with journal.unwritten(events):  # journalled before the pass
            pass
        updates = [op for op in journal.batch.ops if op[0] == "update"]
        assert [(op.key, op.fields["paused"]) for op in updates] == [("k", False)]
    finally:
        journal.close(clean=True)
