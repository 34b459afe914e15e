"""The embedded store: one SQLite file, through the standard library.

WAL mode (readers never block the writer), ``isolation_level=None`` (we say
when a transaction starts), every write transaction ``BEGIN IMMEDIATE`` (the
write lock is taken at the start, so two writers serialise there instead of
failing at their first write), and ``busy_timeout`` (a writer waits for the
lock inside SQLite, up to that long, then fails with StoreError).

Durability: ``synchronous=NORMAL`` by default - a commit is written to the
WAL (the OS has it) but not fsynced, so every committed turn survives a
crash of any process, SIGKILL and OOM kill included, which is what a
scheduler's restart recovery is about; a power cut or an OS crash may lose
the last turns (the database stays consistent: SQLite's WAL is checksummed,
a torn tail is dropped). ``synchronous="FULL"`` (``sqlite:///path?synchronous=FULL``)
fsyncs each commit and survives those too, at one fsync per dispatcher turn
(3-5x fewer keyed runs per second on this project's test machine). WAL
checkpoints are taken off the commit path (``manual_checkpoints``);
temporary storage (a savepoint's sub-journal) is in memory.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Any

from .._errors import StoreError
from ._schema import check_schema
from ._sql import KEEP_RUNS, SQLStore
from ._url import lease_ns, seconds


class SQLiteStore(SQLStore):
    """A store in the SQLite file at ``path`` (created if missing, in an
    existing directory). ``clock``: the store clock for leases (UTC ns;
    default ``time.time_ns``; see ``_sql``'s docstring on skew).

    Files: a database this creates is readable by its owner only (0600,
    whatever the umask); an existing one keeps its mode (the user chose
    it). The files next to it - SQLite's ``-wal`` and ``-shm``, the
    ``-procsched.lock`` of ``gate_writes`` - take the database's mode
    (SQLite does so for its own; ``gate_writes`` for the lock).

    ``read_only``: read an existing store, create and change nothing: a
    missing file is a StoreError, a write fails (StoreError). The store
    may be on a read-only file system (a backup snapshot): with a WAL file
    beside it, the database is opened ``mode=ro`` (its ``-shm`` must be
    there too: reading a WAL needs one, and creating it is a change);
    without one, the file holds every committed change and is opened
    ``immutable=1`` (no lock, no ``-wal``/``-shm`` created; a scheduler
    that starts on it while it is read cannot be seen by this read).
    ``lease``: seconds, from ``lease=`` in the store URL (``lease_ns``).
    ``secret``: the key(s) signing stored payloads, for the shared code.
    """

    RUNS_SUFFIX = " WITHOUT ROWID"
    _gate: int | None = None  # the write gate's file (gate_writes)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        keep_runs: int = KEEP_RUNS,
        busy_timeout: float = 10.0,
        synchronous: str = "NORMAL",
        read_only: bool = False,
        lease: float | None = None,
        secret: Any = None,
        clock: Callable[[], int] | None = None,
        _connect: Callable[..., Any] = sqlite3.connect,
    ) -> None:
        super().__init__(keep_runs=keep_runs, clock=clock, secret=secret)
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
        busy_timeout = seconds("busy_timeout", busy_timeout)
        self.lease_ns = lease_ns(lease)
        self.read_only = read_only
        self.path = os.path.abspath(os.fspath(path))
        self.describe = f"SQLite store {self.path}"
        directory = os.path.dirname(self.path)
        if read_only:
            try:
                os.stat(self.path)
            except (FileNotFoundError, NotADirectoryError):
                raise StoreError(f"no store at {self.path} (opened read-only: nothing was created)") from None
            except OSError as exc:
                raise StoreError(f"{self.describe}: cannot open: {exc}") from exc
        if not os.path.isdir(directory):
            raise StoreError(f"{self.describe}: the directory {directory} does not exist")
        if os.path.isdir(self.path):
            raise StoreError(f"{self.describe}: is a directory, not a database file")
        try:
            if read_only:
                self.conn = _connect(
                    self._read_only_uri(), uri=True, isolation_level=None, timeout=busy_timeout, check_same_thread=False
                )
            else:
                _create_private(self.path)
                self.conn = _connect(
                    self.path,
                    isolation_level=None,
                    timeout=busy_timeout,
                    check_same_thread=False,
                )
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"{self.describe}: cannot open: {exc}") from exc
        try:
            self.conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            # A statement inside a savepoint (a batch's set-wise group) keeps the pages it changes
            # in a sub-journal, which spills to a temporary file past 64 KiB: a group of 20 keyed
            # tasks' ends or claims did (a lone commit of 20 ends and claims: 0.67 -> 0.50 ms in
            # memory; of 100: 3.2 -> 2.4 ms). In memory, and no temporary file on disk.
            self.conn.execute("PRAGMA temp_store = MEMORY")
            if read_only:
                self.conn.execute("PRAGMA schema_version").fetchone()  # reads the header: is it a database?
                check_schema(self)
                return
            with _one_opener(self.path):
                mode = self.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise StoreError(f"{self.describe}: cannot use WAL mode (journal_mode is {mode})")
                self.conn.execute(f"PRAGMA synchronous = {synchronous}")
                self._init_schema()
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            if "not a database" in str(exc) or "malformed" in str(exc):
                raise StoreError(f"{self.describe}: not a SQLite database, or corrupted: {exc}") from exc
            raise StoreError(f"{self.describe}: cannot open: {exc}") from exc
        except BaseException:
            self.conn.close()
            raise

    def _read_only_uri(self) -> str:
        """The URI that reads this store without creating anything (see the class docstring)."""
        from urllib.parse import quote

        if not os.path.exists(self.path + "-wal"):
            return f"file:{quote(self.path)}?immutable=1"
        if not os.path.exists(self.path + "-shm"):
            raise StoreError(
                f"{self.describe}: has a write-ahead log ({self.path}-wal) but no {self.path}-shm: "
                "reading the log needs one, and opened read-only nothing is created; copy the "
                "store with its -wal and -shm files, or open it read-write"
            )
        return f"file:{quote(self.path)}?mode=ro"

    def __repr__(self) -> str:
        return f"<SQLiteStore {self.path}{' read-only' if self.read_only else ''}>"

    def _cursor(self) -> Any:
        return self.conn.cursor()

    def _begin(self, cur: Any, write: bool, pipelined: bool = False) -> None:
        # A writer takes the lock up front (waiting busy_timeout for it); a
        # reader reads a WAL snapshot and never blocks the writer.
        cur.execute("BEGIN IMMEDIATE" if write else "BEGIN DEFERRED")

    def gate_writes(self) -> None:
        """Make this connection's write transactions wait for each other
        across processes on a blocking file lock (``<db>-procsched.lock``)
        before ``BEGIN IMMEDIATE``. SQLite's own wait for its write lock is
        a sleep-and-retry (1, 2, 5 ... 100 ms naps): with several
        schedulers on one file, their writers slept more than they wrote. A
        kernel file lock wakes the next writer the moment the last one is
        done, and dies with its holder. For the store writer thread only
        (its waits hold up no dispatcher); other connections keep SQLite's
        bounded wait."""
        import fcntl

        if self.read_only:
            return  # it writes nothing, and creates nothing
        try:
            self._gate = _open_beside(self.path, self.path + "-procsched.lock")
        except OSError:
            return  # (a read-only directory) SQLite's own wait it is
        self._flock = fcntl.flock
        self._gate_ops = (fcntl.LOCK_EX, fcntl.LOCK_UN)

    def _tx(self, what: str, write: bool = True, pipelined: bool = False) -> Any:
        if not write or self._gate is None:
            return super()._tx(what, write)
        return self._gated(what)  # (pipelined: no round trips to save)

    @contextlib.contextmanager
    def _gated(self, what: str) -> Iterator[Any]:
        lock, unlock = self._gate_ops
        gate = self._gate
        assert gate is not None  # (_tx comes here only with a gate)
        self._flock(gate, lock)
        try:
            with super()._tx(what, True) as cur:
                yield cur
        finally:
            self._flock(gate, unlock)

    def manual_checkpoints(self) -> Callable[[], None]:
        """Take WAL checkpoints out of this connection's commits, for a
        caller that runs the returned checkpoint itself when it suits it.
        SQLite otherwise copies the WAL back into the database (and fsyncs
        it, whatever ``synchronous`` says) inside the commit that grows the
        WAL past 1,000 pages: a stall of milliseconds every ~150 turns,
        a fifth of a busy writer's time. The caller must checkpoint: the WAL
        grows until a checkpoint with no other writer between completes."""
        self.conn.execute("PRAGMA wal_autocheckpoint = 0")

        def checkpoint() -> None:
            try:
                self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            except sqlite3.Error:
                pass  # busy: the next one copies what this one did not

        return checkpoint

    def _has_schema(self, cur: Any) -> bool:
        row = cur.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'procsched_version'").fetchone()
        return row is not None

    def _now(self, cur: Any) -> int:
        return (self._clock or time.time_ns)()

    def _errors(self) -> tuple[type[BaseException], ...]:
        return (sqlite3.Error,)

    def close(self) -> None:
        self.conn.close()
        if self._gate is not None:
            os.close(self._gate)
            self._gate = None

    def size_bytes(self) -> int:
        """Bytes of the database (its pages in use), for the benchmarks."""
        with self._tx("measuring", write=False) as cur:
            count = cur.execute("PRAGMA page_count").fetchone()[0]
            free = cur.execute("PRAGMA freelist_count").fetchone()[0]
            size = cur.execute("PRAGMA page_size").fetchone()[0]
        return int((count - free) * size)


def _create_private(path: str) -> None:
    """Create the empty database file ``path`` readable by its owner only
    (0600 whatever the umask: SQLite would make it 0644 less the umask);
    an existing file keeps its mode. SQLite gives its -wal and -shm files
    the database's mode, so they are private too."""
    try:
        fd = os.open(
            path,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW,
            0o600,
        )
    except FileExistsError:
        return
    try:
        os.fchmod(fd, 0o600)  # a umask removes bits from open()'s mode, and only that
    finally:
        os.close(fd)


@contextlib.contextmanager
def _one_opener(db: str) -> Iterator[None]:
    """Processes opening the store ``db`` set it up one at a time, queued on
    a kernel lock of its directory (no file is made for it): two that made a
    new store at once both switched it to WAL, and that switch does not
    wait for a lock: "database is locked" (two instances started together,
    in the suite). The directory, not the database: closing any descriptor
    of the database would drop SQLite's own locks on it in this process."""
    import fcntl

    try:
        fd = os.open(os.path.dirname(db) or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        yield  # (SQLite's own wait)
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (unlocks)


def _open_beside(db: str, path: str) -> int:
    """Open (creating it if needed) the file ``path`` that procsched keeps
    next to the database ``db``, with the database's mode whatever the umask."""
    mode = os.stat(db).st_mode & 0o777
    try:
        fd = os.open(
            path,
            os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW,
            mode,
        )
    except FileExistsError:
        return os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd
