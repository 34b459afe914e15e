"""The store writer: the dispatcher's commits, in a thread of their own.

    dispatcher thread                                 writer thread (this module)
    Journal.turn: the turn's batch + the keyed  ──▶  submit ──▶ batch.commit() on its own
                  runs whose start it records                  connection (sqlite3 and psycopg
      ... serves workers and commands, collects                release the GIL while the
          the next turn's changes in the next batch ...        database works)
    select() wakes on the pipe  ◀── one byte ◀────────  done: (the runs, BatchResult or error)
    Journal.committed: sends those runs (or drops the lost ones); the next turn submits the next batch

Why: with a commit in the dispatcher's own loop, every worker waits for
every commit (a keyed run reaches its worker only after the transaction
recording its start committed), and the dispatcher serves nobody while the
database works. Here the dispatcher goes on with unkeyed work, finished runs
and commands while a commit is in flight, and the changes that arrive
meanwhile wait for the next commit: one commit carries more runs the busier
the scheduler is (group commit).

Order and the write discipline: one commit in flight at a time, so batches
commit in the order they were made; a batch's runs are sent only when the
writer says it committed; a run's end and its task's reschedule are one
``Batch.finished`` op, so in one transaction as before.

The writer has its own connection (``open_store`` of the same target): the
dispatcher's connection (register, lease renewal, reads) is never used by
two threads, and a transaction of one never spans the other's statements.
With SQLite, the writer takes the WAL checkpoints itself, after a commit
has been reported (every CHECKPOINT_ROWS rows written; see
``Store.manual_checkpoints``): no commit's runs wait for one, the
changes that arrive meanwhile go with the next commit, and with no other
writer the checkpoint completes, so the WAL starts over instead of growing.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from ..._errors import StoreError
from ..._store import SQLStore, open_store

#: The writer checkpoints the WAL after this many rows written (SQLite; a
#: row is 2-3 pages of WAL: the WAL stays around 10 MB).
CHECKPOINT_ROWS = 1000
T = TypeVar("T")
#: How long a starting dispatcher tries to open its store, and to register
#: on it, before it gives up: the program opened it a moment ago, so a
#: failure now is a store busy for a while (a SQLite file another process
#: keeps locked, a connection dropped) - the dispatcher waits it out (back-off
#: from 50 ms, doubling to 1 s) rather than dying of it.
PATIENCE_S = 30.0


class Spent(NamedTuple):
    """What the last commit took: its wall time, and the writer thread's CPU
    time in it (SQLite computes a commit in this thread; a server's commit is
    mostly waiting for its answer)."""

    wall_ns: int = 0
    cpu_ns: int = 0

    @property
    def computed(self) -> bool:
        """The commit was mostly this thread's own work (not a wait)."""
        return 2 * self.cpu_ns >= self.wall_ns


def patiently(what: Callable[[], T]) -> T:
    """``what()``, tried again on a StoreError until PATIENCE_S have passed (then its error)."""
    deadline = time.monotonic() + PATIENCE_S
    pause = 0.05
    while True:
        try:
            return what()
        except StoreError:
            if time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)  # (start-up: nothing else to do meanwhile)
            pause = min(2 * pause, 1.0)


def open_patiently(target: str, secret: list[bytes] | None) -> SQLStore:
    """``open_store(target)``, patiently (see PATIENCE_S)."""
    return patiently(lambda: open_store(target, secret=secret))


class Writer:
    """Commits batches one at a time in a daemon thread; ``fd`` becomes
    readable when the batch submitted last has committed (or failed)."""

    def __init__(self, target: str, secret: list[bytes] | None = None) -> None:
        # StoreError: the dispatcher's Journal opened it a moment ago. With a
        # secret, it signs the definitions it writes.
        self.store = open_patiently(target, secret)
        self.busy = False  # a batch is in flight (only the dispatcher thread reads or writes this)
        self.spent = Spent()  # the last commit's (written by the writer thread before it says it ended)
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._result: Any = None
        self._done = threading.Event()
        self.fd, self._wfd = os.pipe()
        self._written = 0  # rows written since the last checkpoint
        # SQLite: checkpoints out of the commits, writers of several schedulers queue (not nap); else no-ops
        self._checkpoint: Callable[[], None] | None = self.store.manual_checkpoints()
        self.store.gate_writes()
        self._thread = threading.Thread(target=self._run, name="procsched-store-writer", daemon=True)
        self._thread.start()

    def submit(self, batch: Any, held: Any) -> None:
        """Commit ``batch`` (``held``: what to give back with its result - the
        runs to send and the events to emit once it committed)."""
        assert not self.busy, "one commit in flight at a time"
        self.busy = True
        self._done.clear()
        self._inbox.put((batch, held))

    def collect(self) -> tuple[Any, Any]:
        """The batch in flight has ended (``fd`` was readable, or ``wait``
        said so): (what came with it, its BatchResult or the exception it raised)."""
        self._done.wait()
        os.read(self.fd, 1)
        self.busy = False
        result, self._result = self._result, None
        return result  # type: ignore[no-any-return]

    def wait(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` s (None: until it ends) for the batch in
        flight; True if it has ended (then ``collect`` it)."""
        return self._done.wait(timeout)

    def close(self) -> None:
        """Let the batch in flight end, stop the thread, close the connection."""
        self._inbox.put(None)
        self._thread.join()
        self.store.close()
        os.close(self.fd)
        os.close(self._wfd)

    def _run(self) -> None:
        while True:
            job = self._inbox.get()
            if job is None:
                return
            batch, held = job
            wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
            try:
                outcome: Any = batch.commit()
            except BaseException as exc:  # noqa: BLE001 - StoreError (logged) or a bug (re-raised) in the dispatcher
                outcome = exc
            self.spent = Spent(time.perf_counter_ns() - wall, time.thread_time_ns() - cpu)
            self._result = (held, outcome)
            os.write(self._wfd, b"c")  # before _done: collect() after wait() finds the byte there
            self._done.set()
            self._written += len(batch)
            if self._checkpoint is not None and self._written >= CHECKPOINT_ROWS:
                self._written = 0
                self._checkpoint()
