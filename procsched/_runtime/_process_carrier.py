"""The processes runner's carrier: worker processes started, fed and killed for the engine.

    Engine ──spawn / send_run / revoke / kill / retire──▶ ProcessCarrier ──▶ worker processes
                                                           │  each: a duplex pipe (RunOrder out,
                                                           │  reports in), a ticket pipe, a
                                                           │  process sentinel, its process group
                                                           └─ registers them in the dispatcher's
                                                              selector (ON_WORKER, ON_EXIT)

It runs in the dispatcher process, on the dispatcher's loop (``_dispatcher.py``),
and never blocks on a worker's pipe (see ``ProcessCarrier``).
"""

from __future__ import annotations

import collections
import itertools
import multiprocessing
import os
import pickle
import select
import selectors
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from .._core import Run
from . import _messages as m
from . import _worker_main  # the target, not the worker (see _worker_main.py)
from ._carrier import Carrier
from ._wire import PROTOCOL, FrameReader, frame_head
from ._worker_main import FORKSERVER_PRELOAD

#: psutil, imported on first use (``_psutil``): listing a worker's tree, its
#: RSS, its state. Not at start, where its ~10 ms import would delay the
#: first result; the first kill or stats() pays it instead.
psutil: Any = None

#: At most this many buffers per writev(2) (IOV_MAX is 1024 on Linux).
IOV_MAX = 512
#: A run whose function and arguments are smaller than this goes out as one
#: joined buffer (copying a few KiB is cheaper than a writev of six).
SMALL_RUN = 64 * 1024
#: Runs a busy worker may hold queued behind its current one (see _engine.py,
#: "Prefetch"); PROCSCHED_PREFETCH overrides it (0: off), for measurements.
#: Deep enough that a worker's refills come many runs to a write and a turn
#: of the dispatcher's loop (no-op tasks, 2 workers: 2 -> 16 cut the CPU per
#: task of the dispatcher by about a third); an idle worker takes over what
#: waits queued behind a long run (_engine.py, "_steal").
PREFETCH = int(os.environ.get("PROCSCHED_PREFETCH", "16"))
#: An idle worker gets a run this long before it is due, and waits for the
#: due time itself (see _engine.py, "Early hand-off"); PROCSCHED_EARLY_US overrides it.
EARLY_NS = int(os.environ.get("PROCSCHED_EARLY_US", "3000")) * 1000
#: How long a forkserver that closed its sockets (it is dying) is given to exit.
FORKSERVER_EXIT_S = 2.0
#: What the dispatcher's selector keys carry (``key.data[0]``): what became ready.
ON_COMMANDS, ON_SIGNAL, ON_WORKER, ON_EXIT, ON_WRITABLE, ON_COMMIT = range(6)


class ProcessWorker:
    __slots__ = (
        "proc",
        "conn",
        "fd",
        "reader",
        "ident",
        "sentinel",
        "ps",
        "tree",
        "out",
        "out_since",
        "capture",
        "tickets",
        "ticket_w",
        "unwritten",
        "pidfd",
        "server",
    )

    def __init__(self, proc: multiprocessing.process.BaseProcess, conn: Connection, capture: str | None) -> None:
        self.proc = proc
        self.conn: Connection | None = conn
        self.fd = conn.fileno()
        self.reader = FrameReader(self.fd)
        self.ident: int = proc.pid  # type: ignore[assignment]
        self.sentinel = proc.sentinel
        self.ps: Any = None  # its psutil.Process
        self.tree: list[Any] = []  # its descendants (psutil.Process), listed before it is stopped
        # Bytes for the worker that its pipe has not taken yet: views, never
        # copies, of the frames (a 300 MB argument is written from its own
        # buffer, a piece per turn of the loop, as the pipe takes it).
        self.out: collections.deque[memoryview] = collections.deque()
        self.out_since = 0  # when the pipe last took something (while out is not empty)
        self.capture = capture  # the file the worker's stdout/stderr go to
        self.tickets = -1  # the read and write ends of its ticket pipe (see ProcessCarrier)
        self.ticket_w = -1
        self.unwritten = 0  # tickets of this turn's runs, written by flush before the runs
        self.pidfd = -1  # its sentinel once it outlived its forkserver (see ProcessCarrier.outlived)
        self.server: int | None = None  # the pid of the forkserver that forked it

    def __repr__(self) -> str:
        return f"<worker {self.ident}>"


def _any_time(run: Run) -> int:
    return 0


class ProcessCarrier(Carrier):
    """Starts, feeds and kills worker processes for the engine. Never blocks
    on a worker's pipe: what a pipe cannot take at once waits in the
    worker's ``out`` and goes as the selector says the pipe is writable.

    The atomic hand-off of prefetched runs: each worker has a *ticket pipe*
    whose read end both the worker and we hold (one open file, non-blocking).
    ``send_run`` writes one byte to it before the run. The worker starts a
    run only if it reads a byte for it; ``revoke`` reads one byte back. A
    byte is read by exactly one of the two (the kernel's pipe lock), so
    either the worker starts the run or ``revoke`` returns True and it never
    starts - decided at once, without waiting for the worker, even while it
    is busy with a long run or dead. Bytes carry no names: the worker takes
    them for its runs in order, and we only revoke the last runs given, so
    the bytes left always belong to the first runs not yet started. The
    engine gives a worker nothing new until it has passed over the runs
    revoked from it (it says "skipped"), so a revoked run cannot take the
    byte of a later one. Runs are written once per turn of the loop
    (``flush``): a turn's tickets for one worker in one write, then its runs
    in one write; a run revoked before that takes back an unwritten ticket."""

    prefetch = PREFETCH
    early_ns = EARLY_NS
    reports_start = True  # workers send "started" for runs with a timeout

    def __init__(
        self,
        start_method: str,
        selector: selectors.BaseSelector,
        capture_dir: str | None = None,
        start_by: Callable[[Run], int] | None = None,
    ) -> None:
        self.selector = selector
        #: A run's ``start_by`` (see ``RunOrder``): the journal's, with a store.
        self.start_by: Callable[[Run], int] = start_by or _any_time
        self.capture_dir = capture_dir  # capture each run's output in files here
        self.serial = itertools.count()
        self.writing: set[ProcessWorker] = set()  # workers with output waiting
        self.ctx: Any = multiprocessing.get_context(start_method)  # (a start method's context: typed as its base)
        self.forkserver = start_method == "forkserver"
        if start_method == "forkserver":
            self.ctx.set_forkserver_preload(FORKSERVER_PRELOAD)
        self.by_sentinel: dict[int, ProcessWorker] = {}
        self.unflushed: set[ProcessWorker] = set()  # workers given runs this turn (see flush)

    def spawn(self, slot: int) -> ProcessWorker:
        parent, child = self.ctx.Pipe(duplex=True)
        tickets, ticket_w = os.pipe()
        os.set_blocking(tickets, False)
        child_tickets = Connection(os.dup(tickets), writable=False)  # the same open file, for the worker
        capture = None
        if self.capture_dir is not None:
            capture = os.path.join(self.capture_dir, f"output-{slot}-{next(self.serial)}")
        proc = self.ctx.Process(
            target=_worker_main.main, args=(child, capture, child_tickets), name=f"procsched-worker-{slot}"
        )
        try:
            proc.start()  # a dead forkserver is restarted by the next start()
        except BaseException:
            parent.close()
            os.close(tickets)
            os.close(ticket_w)
            raise
        finally:
            child.close()
            child_tickets.close()
        os.set_blocking(parent.fileno(), False)
        worker = ProcessWorker(proc, parent, capture)
        if self.forkserver:
            worker.server = _forkserver_pid()
        worker.tickets, worker.ticket_w = tickets, ticket_w
        self.by_sentinel[worker.sentinel] = worker
        self.selector.register(parent, selectors.EVENT_READ, (ON_WORKER, worker))
        self.selector.register(worker.sentinel, selectors.EVENT_READ, (ON_EXIT, worker))
        return worker

    def send_run(self, worker: ProcessWorker, run: Run) -> None:
        """One frame; or, for a large payload, a small header frame, then the
        function and the arguments as two raw frames, written from the
        task's own bytes (never copied here)."""
        # Its ticket goes out first (flush), and always: to a dying worker
        # too, so that revoke counts right.
        worker.unwritten += 1
        self.unflushed.add(worker)
        if worker.conn is None:
            return
        fn_blob, arg_blob = run.payload
        report_start = run.timeout_ns is not None
        out = worker.out
        if len(fn_blob) + len(arg_blob) < SMALL_RUN:  # the usual case: one frame, one write
            order = m.RunOrder.wire(
                run.task_id,
                run.run,
                run.scheduled_ns,
                report_start,
                run.attempt,
                run.wall_ns,
                run.retry_on,
                fn_blob,
                arg_blob,
                None if run.cause == "schedule" else run.cause,
                self.start_by(run),
            )
            body = pickle.dumps(order, PROTOCOL)
            out.append(memoryview(frame_head(len(body)) + body))
        else:  # a header, then the blobs as raw frames, written from their own bytes
            header = pickle.dumps(
                m.RunHeader.wire(
                    run.task_id,
                    run.run,
                    run.scheduled_ns,
                    report_start,
                    run.attempt,
                    run.wall_ns,
                    run.retry_on,
                    None if run.cause == "schedule" else run.cause,
                    self.start_by(run),
                ),
                PROTOCOL,
            )
            for blob in (header, fn_blob, arg_blob):
                out.append(memoryview(frame_head(len(blob))))
                out.append(memoryview(blob))

    def flush(self) -> None:
        """Write the runs given this turn, each worker's tickets before its runs."""
        for worker in self.unflushed:
            if worker.unwritten and worker.ticket_w >= 0:
                os.write(worker.ticket_w, b"t" * worker.unwritten)  # (a pipe takes 64 KiB: never blocks)
                worker.unwritten = 0
            if worker.conn is not None:
                self.write(worker)
        self.unflushed.clear()

    def revoke(self, worker: ProcessWorker, run: Run) -> bool:
        """Take back ``run``, the last run given to ``worker`` and not
        revoked: True if the worker will never start it (its ticket was
        still there), False if it has started it. Works after its death too."""
        if worker.unwritten:  # given this turn, not written yet: the last runs' tickets
            worker.unwritten -= 1
            return True
        try:
            return os.read(worker.tickets, 1) != b""
        except BlockingIOError:
            return False

    def retire(self, worker: ProcessWorker) -> None:
        # What its tasks left running (even in sessions of their own) ends
        # with it, as at a kill: listed now, killed once it has exited.
        try:
            worker.tree = self._ps(worker).children(recursive=True)
        except (psutil.Error, OSError):
            pass
        # Closing our end is enough: an idle worker exits on EOF.
        self._drop_conn(worker)

    def output(self, worker: ProcessWorker) -> str | None:
        """The captured output of the worker's last run (its tail), or None
        without capture."""
        if worker.capture is None:
            return None
        try:
            with open(worker.capture, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                f.seek(max(0, size - m.OUTPUT_TAIL))
                data = f.read(m.OUTPUT_TAIL)
        except OSError:
            return ""
        return data.decode("utf-8", "replace")

    def kill(self, worker: ProcessWorker, hard: bool) -> None:
        """Signal the worker's process group and every descendant we can find.

        Descendants are listed before the first signal (once the worker dies,
        its children are re-parented and the tree is lost); the process group
        catches the ones that were orphaned already.
        """
        self._drop_conn(worker)
        if not worker.tree:
            try:
                worker.tree = self._ps(worker).children(recursive=True)
            except (psutil.Error, OSError):
                pass
        sig = signal.SIGKILL if hard else signal.SIGTERM
        for kill, target in ((os.killpg, worker.ident), (os.kill, worker.ident)):
            try:
                kill(target, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for child in worker.tree:
            try:
                child.send_signal(sig)  # psutil checks the pid was not reused
            except (psutil.Error, OSError):
                pass

    def rss(self, worker: ProcessWorker) -> int | None:
        try:
            return int(self._ps(worker).memory_info().rss)
        except (psutil.Error, OSError):
            return None

    def health(self, worker: ProcessWorker) -> str:
        try:
            status = self._ps(worker).status()
        except (psutil.Error, OSError):
            return "dead"
        if status == psutil.STATUS_STOPPED:
            return "stopped"
        return "dead" if status == psutil.STATUS_ZOMBIE else "ok"

    def outlived(self, worker: ProcessWorker) -> bool:
        """The worker's sentinel fired: did the worker outlive it? With
        forkserver, the sentinel is the forkserver's socket, which the
        forkserver's own death closes too: the workers go on (see
        ``_forkserver.py``), and each is watched from then on on a pidfd
        of its own (the next worker's start starts a new forkserver). True
        if so: the worker is alive and watched; False: it is gone."""
        if not self.forkserver or worker.pidfd >= 0:
            return False
        try:
            pidfd = os.pidfd_open(worker.ident)
        except OSError:  # gone (the forkserver reaped it before it told us)
            return False
        if _readable(pidfd, 0) or not _is_worker(worker.ident):
            os.close(pidfd)  # exiting, or a new process has its pid
            return False
        self.selector.unregister(worker.sentinel)
        del self.by_sentinel[worker.sentinel]
        worker.sentinel = worker.pidfd = pidfd
        self.by_sentinel[pidfd] = worker
        self.selector.register(pidfd, selectors.EVENT_READ, (ON_EXIT, worker))
        _restart_forkserver(worker.server)
        return True

    def forget(self, worker: ProcessWorker) -> int | None:
        """The worker's sentinel fired: reap it and return its exit code
        (None for one that outlived its forkserver: whoever adopted it
        reaped it)."""
        self._drop_conn(worker)
        if worker.tree:  # descendants listed before it was stopped (retired or killed)
            for child in worker.tree:
                try:
                    child.kill()  # psutil checks the pid was not reused
                except (psutil.Error, OSError):
                    pass
        del self.by_sentinel[worker.sentinel]
        self.selector.unregister(worker.sentinel)
        # Whatever the worker left in its process group dies with it: children
        # that ignored the SIGTERM of a timeout, a task's background processes.
        try:
            os.killpg(worker.ident, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if worker.pidfd >= 0:
            os.close(worker.pidfd)
            worker.pidfd = -1
            worker.proc.close()  # (its forkserver socket: closed, at EOF)
            return None
        # The sentinel closes as the process exits, a moment before it can be
        # reaped. A worker that closed the fd itself is still alive: kill it.
        worker.proc.join(0.1)
        if worker.proc.exitcode is None:
            worker.proc.kill()
            worker.proc.join()
        code = worker.proc.exitcode
        worker.proc.close()
        return code

    def forget_output(self, worker: ProcessWorker) -> None:
        """The engine is done with the dead worker: close its ticket pipe, remove its output file."""
        for fd in (worker.tickets, worker.ticket_w):
            if fd >= 0:
                os.close(fd)
        worker.tickets = worker.ticket_w = -1
        self.unflushed.discard(worker)
        if worker.capture is not None:
            try:
                os.unlink(worker.capture)
            except OSError:
                pass

    def _ps(self, worker: ProcessWorker) -> Any:
        """The worker's psutil.Process (psutil is loaded by this first use)."""
        if worker.ps is None:
            worker.ps = _psutil().Process(worker.ident)
        return worker.ps

    def _send(self, worker: ProcessWorker, message: tuple[Any, ...]) -> None:
        if worker.conn is None:
            return
        body = pickle.dumps(message, PROTOCOL)
        worker.out.append(memoryview(frame_head(len(body)) + body))
        self.write(worker)

    def write(self, worker: ProcessWorker, now: int | None = None) -> None:
        """Write what the worker's pipe takes now, without blocking; watch
        for writability while anything is left."""
        out = worker.out
        was_waiting = worker in self.writing
        try:
            while out:
                if len(out) == 1:
                    n = os.write(worker.fd, out[0])
                else:
                    n = os.writev(worker.fd, list(itertools.islice(out, IOV_MAX)))
                worker.out_since = time.monotonic_ns() if now is None else now
                while n:
                    head = out[0]
                    if n >= len(head):
                        n -= len(head)
                        out.popleft()
                    else:
                        out[0] = head[n:]
                        n = 0
        except BlockingIOError:
            pass
        except OSError:
            self._drop_conn(worker)  # it is dying: its sentinel will say so
            return
        assert worker.conn is not None  # (a dropped connection has nothing to write)
        if out and not was_waiting:
            self.writing.add(worker)
            worker.out_since = time.monotonic_ns() if now is None else now
            self.selector.modify(worker.conn, selectors.EVENT_READ | selectors.EVENT_WRITE, (ON_WORKER, worker))
        elif not out and was_waiting:
            self.writing.discard(worker)
            self.selector.modify(worker.conn, selectors.EVENT_READ, (ON_WORKER, worker))

    def _drop_conn(self, worker: ProcessWorker) -> None:
        if worker.conn is not None:
            self.selector.unregister(worker.conn)
            worker.conn.close()
            worker.conn = None
            worker.out.clear()
            self.writing.discard(worker)


def _forkserver_pid() -> int | None:
    """The pid of multiprocessing's forkserver (None if it knows none)."""
    from multiprocessing import forkserver

    from ._boot import _client_fields

    fields = _client_fields(forkserver._forkserver)
    pid = None if fields is None else fields[2]
    return pid if isinstance(pid, int) else None


def _restart_forkserver(dying: int | None) -> None:
    """The forkserver ``dying`` closed its sockets under live workers: wait
    for its end (it closes its files a moment before it exits), then reap
    it and start the next one, as the next worker's start would
    (multiprocessing's ``ensure_running``: it leaves a live one alone)."""
    from multiprocessing import forkserver

    if dying is not None:
        try:
            pidfd = os.pidfd_open(dying)
        except OSError:
            pass  # reaped already (another of its workers told us first)
        else:
            _readable(pidfd, FORKSERVER_EXIT_S)
            os.close(pidfd)
    try:
        forkserver.ensure_running()
    except Exception:  # noqa: BLE001 - the next worker's start tries again, and reports
        pass


def _readable(fd: int, timeout_s: float) -> bool:
    """Is ``fd`` readable within ``timeout_s`` (a pidfd: has its process exited)?"""
    poll = select.poll()
    poll.register(fd, select.POLLIN)
    return bool(poll.poll(timeout_s * 1000))


def _is_worker(pid: int) -> bool:
    """Is process ``pid`` a worker (named so, leading its own group)?"""
    try:
        with open(f"/proc/{pid}/comm") as f:
            named = f.read().strip() == "psc-worker"
        return named and os.getpgid(pid) == pid
    except OSError:
        return False


def _psutil() -> Any:
    global psutil
    if psutil is None:
        import psutil as module

        psutil = module
    return psutil
