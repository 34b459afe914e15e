"""Slots missed while no scheduler ran: recorded as skipped slots (reason "down") at a restart.

    Scheduler(store=...) ─▶ _recovery.recover / plan (as of ``wall``)
                         ─▶ record_down: no other instance alive on the store?
                              per adopted task: down_slots (``_stored``): the slots its misfire policy
                              dropped between its stored next slot and where it goes on
                         ─▶ one batch: batch.skipped(key, slot, "down") (the newest 100 per task)

A slot is "down" only when nobody could have run it: another instance
alive on the store (its lease renewed) runs the shared tasks, so a restart
next to it records nothing (what it skips, it records itself). ``catch_up``
runs every missed slot (nothing is recorded), ``skip`` drops them all,
``coalesce`` all but the one it runs; a paused task would not have run them.
A slot recorded twice (two instances restarting at once) keeps its first
record.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from ..._store import RunRecord, StoredTask
from ._stored import down_slots


def record_down(
    store: Any, tasks: list[StoredTask], crashed: dict[str, RunRecord], slots: dict[str, int], adopted: Any, wall: int
) -> dict[str, tuple[int, ...]]:
    """Record the slots the adopted tasks (``adopted``: their keys) missed
    while down, as of ``wall`` (the plan's time); the slots recorded, per
    key (the adoption tells them: ``AdoptRow.down``). Nothing when another
    instance is alive on the store."""
    me = (socket.gethostname(), os.getpid())
    if any((h.host, h.pid) != me for h in store.schedulers()):
        return {}
    batch = store.batch()
    recorded: dict[str, tuple[int, ...]] = {}
    for task in tasks:
        due = task.state.next_due_ns
        if due is not None and due >= wall and not crashed:
            continue  # (due from now on, nothing crashed: it missed nothing - a restart's usual case, cheaply)
        key = task.definition.key
        if key not in adopted or (key not in crashed and (due is None or due >= wall)):
            continue
        missed = down_slots(task, crashed.get(key), wall, slots.get(key))
        for slot in missed:
            batch.skipped(key, slot, "down")
        if missed:
            recorded[key] = tuple(missed)
    if recorded:
        batch.commit()
    return recorded
