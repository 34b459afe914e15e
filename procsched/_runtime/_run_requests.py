"""What a run asks of its scheduler through ``current_scheduler()`` besides
adding tasks: cancel, pause, resume, run now, backfill - answered by the
engine that owns the task, for a worker process (``_dispatcher.py``) and a
Ray run (``_ray.py``) alike, so every runner's ``current_scheduler()`` offers
what ``Scheduler`` offers (the threads and inline runners hand the
scheduler itself).

    run ─▶ Cancel | Pause | Resume | RunNow | Backfill (request 0) ─▶ serve() ─▶ Reply | Refusal ─▶ run

A worker's cancel, pause and resume take the user's way instead
(``Dispatcher.asked_by``): with a store, a keyed task's is answered once
written, as the user's is.
"""

from __future__ import annotations

from collections.abc import Callable

from .._errors import SchedulerClosedError
from . import _messages as m
from ._engine import Engine

#: The tags ``serve`` answers.
TAGS = frozenset((m.CANCEL, m.PAUSE, m.RESUME, m.RUN_NOW, m.BACKFILL))


def serve(engine: Engine, message: m.Message, now: int, wall_offset: Callable[[], tuple[int, int]]) -> m.Message:
    """The answer to a run's request (its tag in ``TAGS``, its shape checked).
    ``wall_offset`` gives (wall - monotonic ns, now) for a backfill's slots.
    (A worker's cancel, pause and resume are the user's commands, through
    the dispatcher - a store writes them before they are answered.)"""
    tag = message[0]
    if tag == m.CANCEL:
        cancel = m.view(m.Cancel, message)
        return m.Reply.wire(engine.cancel(cancel.task_id, cancel.interrupt, now))
    if engine.closing:
        return m.Refusal.wire(SchedulerClosedError("the scheduler is shutting down"))
    if tag == m.PAUSE or tag == m.RESUME:
        task_id = m.view(m.Pause, message).task_id  # (Resume: the same fields)
        done = engine.pause(task_id, now) if tag == m.PAUSE else engine.resume(task_id, now)
        return m.Reply.wire(done)
    if tag == m.RUN_NOW:
        return m.Reply.wire(engine.run_now(m.view(m.RunNow, message).task_id, now))
    if tag == m.BACKFILL:
        backfill = m.view(m.Backfill, message)
        engine.set_wall_offset(*wall_offset())
        answer = engine.backfill(backfill.task_id, backfill.start_wall_ns, backfill.end_wall_ns, backfill.dry_run, now)
        return m.Reply.wire(answer)  # (a str: why not, the caller's ValueError)
    raise ValueError(f"unknown request {tag!r}")
