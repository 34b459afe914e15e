"""What the engine asks of a durable store: its hooks into dispatch (see
"With a durable store" in ``_handoff.py``); ``_durable/_journal.Journal``
is the store's, ``NO_STORE`` the engine's without one. (Beside
``_carrier.py``: the other interface the engine programs against.)"""

from __future__ import annotations

from typing import Any

from .._core import Run
from ._messages import Message


class Durable:
    """A durable store's hooks into dispatch (``_durable/_journal.py``);
    this base is the null object: no store, nothing held."""

    active: bool = False
    """A store is attached (keyed runs may be held)."""
    prefetch: int | None = None
    """With a store, a busy worker holds at most this many runs ahead (None: the carrier's)."""

    def hold(self, worker: Any, run: Run) -> bool:
        """Keep ``run`` (just given to ``worker``) back: True if it is held,
        and sent by the store once the transaction recording its start has
        committed; False: send it now."""
        return False

    def withdraw(self, worker: Any, run: Run, peek: bool = False) -> bool:
        """Take back ``run``, the last run given to ``worker``, if it is still
        held (True: it was never sent). ``peek``: only say whether ``run`` is
        held, wherever it is in the worker's queue."""
        return False

    def unstarted(self, run: Run, now: int, events: list[Message], paused_at: int | None = None) -> bool:
        """A claimed run that never started ends cancelled (``events``: the
        engine's, to record first what happened before it). True if the
        store records it so (its start was written): its slot is accounted
        for. ``paused_at``: taken back by a pause, the task's next slot (wall
        ns), kept as its next due time."""
        return False

    def pause_asked(self, task_id: int, events: list[Message], paused: bool) -> None:
        """The task's pause was asked while a run of it is running (it
        pauses when that run ends), or taken back by a resume before that
        (``paused`` False): a store has it now, not at the run's end - a
        shutdown or a kill before it would lose it (``events``: the
        engine's, recorded first)."""


NO_STORE: Durable = Durable()
