"""Ray's in-process records: what its callback threads put on the Ray
carrier's queue, beside ``_messages.Finished`` and ``Exited``, and what a
run's Ray task returns.

    Ray's callback threads ──Landed / Mail / RayLost──▶ RayCarrier inbox ──▶ dispatcher thread
    the user process exiting ──Abort──────────────────▶
    _ray_task.run (on a Ray worker) ──returns RayOutcome──▶ Landed.future

Records as in ``_messages.py``: a ``NamedTuple``, its tag first, travelling
as a plain tuple (``wire``), read with ``_messages.view``. Their tags are
distinct from ``_messages.IN_PROCESS``'s (the same queue).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, NamedTuple

from ._messages import Message

if TYPE_CHECKING:
    from .._handle import RunError

LANDED: Final = "landed"
MAIL: Final = "mail"
ABORT: Final = "abort"
RAY_LOST: Final = "ray_lost"


class Landed(NamedTuple):
    """Ray: the run ``worker`` carries ended (its ObjectRef's future is done)."""

    tag: str
    worker: Any
    task_id: int
    run: int
    sent_ns: int
    """When the run was submitted."""
    future: Any
    now_ns: int
    """When Ray said so (its callback thread's clock reading)."""

    @staticmethod
    def wire(worker: Any, task_id: int, run: int, sent_ns: int, future: Any, now_ns: int) -> Message:
        return (LANDED, worker, task_id, run, sent_ns, future, now_ns)


class RayOutcome(NamedTuple):
    """Ray: what a run's Ray task returns (``_ray_task.run``); times on its
    node's wall clock (ns)."""

    outcome: str
    started_ns: int
    finished_ns: int
    blob_kind: int
    blob: bytes
    matched: bool
    """The run raised one of the classes its ``Retry.on`` names."""
    output: str | None = None
    """Its captured stdout and stderr (the tail), with ``capture_output``."""
    error: RunError | None = None
    """An "error"'s exception as text."""


class Mail(NamedTuple):
    """Ray: requests from runs (``current_scheduler()``) came in (the mailbox's future)."""

    tag: str
    future: Any

    @staticmethod
    def wire(future: Any) -> Message:
        return (MAIL, future)


class Abort(NamedTuple):
    """Ray: stop at once (the user process is exiting)."""

    tag: str

    @staticmethod
    def wire() -> Message:
        return (ABORT,)


class RayLost(NamedTuple):
    """Ray: the cluster procsched started is gone (one of its processes died)."""

    tag: str
    detail: str  # which process, e.g. "Ray's raylet (pid 123) exited"

    @staticmethod
    def wire(detail: str) -> Message:
        return (RAY_LOST, detail)


#: The records above that travel on the carrier's queue (for the tests' round trip).
RAY: Final = (Landed, Mail, Abort, RayLost)
