"""The exceptions procsched raises, as one small tree::

    SchedulerError
     ├── WorkerCrashedError       a worker process died during the run
     ├── TaskTimeoutError         the run overran its timeout (also a TimeoutError)
     ├── SchedulerClosedError     a call after shutdown (also a RuntimeError)
     ├── SchedulerBrokenError     the dispatcher process died; nothing more will run
     ├── InvalidTransition        a task-state change the state machine forbids (a bug)
     └── StoreError               a durable store cannot be opened, read or written

Bad arguments are not in this tree: they raise the builtin ``ValueError`` or
``TypeError`` at the call, naming the argument and the value.
"""

from __future__ import annotations


class SchedulerError(Exception):
    """Base class of every error procsched raises on its own account."""


class WorkerCrashedError(SchedulerError):
    """The worker process running the task died mid-run.

    ``exitcode`` is the process's exit status (negative: killed by a signal),
    ``signal`` the signal's name (``"SIGSEGV"``) or ``None``, ``pid`` the
    worker's pid, ``task_id`` and ``run`` the run that was lost.
    """

    def __init__(
        self,
        message: str,
        *,
        task_id: int | None = None,
        run: int | None = None,
        pid: int | None = None,
        exitcode: int | None = None,
        signal: str | None = None,
    ) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.run = run
        self.pid = pid
        self.exitcode = exitcode
        self.signal = signal

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (_rebuild_crash, (str(self), self.task_id, self.run, self.pid, self.exitcode, self.signal))


def _rebuild_crash(message: str, task_id, run, pid, exitcode, signal):  # type: ignore[no-untyped-def]
    return WorkerCrashedError(message, task_id=task_id, run=run, pid=pid, exitcode=exitcode, signal=signal)


class TaskTimeoutError(SchedulerError, TimeoutError):
    """The run took longer than its ``timeout``; its worker was killed and replaced."""


class SchedulerClosedError(SchedulerError, RuntimeError):
    """The scheduler was shut down; it accepts no new work."""


class SchedulerBrokenError(SchedulerError):
    """The dispatcher process died: every unfinished task fails with this."""


class InvalidTransition(SchedulerError):
    """A task-state change that the state machine does not allow.

    Seeing one means a bug in procsched: the state is left as it was.
    """


class StoreError(SchedulerError):
    """A durable store (``store=``) cannot be opened, read or written: a
    missing directory, a file that is not a database, a read-only or full
    disk, a store written by a newer procsched, an unreachable server, the
    missing ``procsched[postgres]`` extra. The message names the store; the
    database's own error is the ``__cause__``. A failed write wrote nothing.
    """
