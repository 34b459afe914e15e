"""What the engine asks of a runtime: the carrier interface (see ``_engine.py``).

    Engine ──spawn / send_run / kill / retire / revoke──▶ carrier ──▶ its workers
           ◀──finished / started / skipped / worker_exited── the carrier's loop

Three carriers: ``ProcessCarrier`` (worker processes, ``_process_carrier.py``),
``ThreadCarrier`` (threads, ``_threads.py``), ``RayCarrier`` (Ray tasks,
``_ray.py``); the engine tests' fake one (tests/runtime/test_engine.py).
"""

from __future__ import annotations

import abc
from typing import Any, Protocol

from .._core import Run


class Worker(Protocol):
    """A carrier's worker, as the engine sees it: opaque but for its name."""

    ident: Any
    """What events and logs call it: a pid (processes), a thread name, a Ray slot."""


class Carrier(abc.ABC):
    """What the engine asks of a runtime: start, feed and stop workers.

    The four abstract methods are every carrier's; the rest are abilities
    a carrier may have, with the defaults of one that has none of them
    (``ProcessCarrier`` has them all)."""

    prefetch: int = 0
    """How many runs a busy worker may hold queued behind its current one
    (0: none; see "Prefetch" above). A carrier that sets it implements ``revoke``."""
    early_ns: int = 0
    """How long before its due time an idle worker may be given a run (see
    "Early hand-off"; only with ``prefetch``)."""
    reports_start: bool = False
    """The carrier calls ``Engine.started`` when a run with a timeout starts
    (its timeout then counts from there, with a load grace before)."""

    @abc.abstractmethod
    def spawn(self, slot: int) -> Worker:
        """Start a worker for ``slot``; return it."""

    @abc.abstractmethod
    def send_run(self, worker: Any, run: Run) -> None:
        """Give ``run`` to ``worker`` (idle, or with ``prefetch``: to run after its current runs)."""

    @abc.abstractmethod
    def kill(self, worker: Any, hard: bool) -> None:
        """Stop ``worker`` and everything it started (hard: no grace)."""

    @abc.abstractmethod
    def retire(self, worker: Any) -> None:
        """Ask an idle ``worker`` to exit cleanly."""

    def rss(self, worker: Any) -> int | None:
        """The worker's resident memory in bytes, if it can be known."""
        return None

    def health(self, worker: Any) -> str:
        """``"ok"``, ``"stopped"`` or ``"dead"``."""
        return "ok"

    def output(self, worker: Any) -> str | None:
        """The captured output of the worker's last run (its tail), or None."""
        return None

    def revoke(self, worker: Any, run: Run) -> bool:
        """Take back the last run given to ``worker`` and not revoked yet:
        True if it will never start (the worker passes over it and says so:
        ``Engine.skipped``), False if the worker has started it (also after
        the worker died). Only a carrier with ``prefetch`` gives runs ahead."""
        return False
