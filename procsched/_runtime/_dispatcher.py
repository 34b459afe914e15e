"""The dispatcher process: owns the core and the pool of worker processes.

    user process                      dispatcher (this module)                 workers
    ┌───────────┐ cmd pipe ("add",   ┌──────────────────────────────────┐ own  ┌────────┐
    │ Scheduler │ "cancel", ...) ──▶ │ loop: wait(cmd, wakeup, worker   │ pipe │ worker │
    │ listener  │ ◀── event pipe ─── │   pipes, worker sentinels,       │ ◀──▶ │ loop   │
    └───────────┘  (event batches)   │   timeout = next deadline)       │      └────────┘
                                     │ -> Engine (core + pool state)    │ sentinel: death
                                     └──────────────────────────────────┘

The loop does three things only: wait - in one blocking ``select`` on
everything at once, registered once and updated as workers come and go,
with the engine's next deadline as timeout, so it never polls - translate
what arrived into Engine calls, and carry out what the engine asks
(``ProcessCarrier``). Each readable pipe is read with one ``os.read`` that
brings every message waiting in it; event batches go back to the user
process once per turn of the loop. No pipe is ever written with a blocking
write: what a pipe cannot take waits in a buffer (the event pipe's
``out``; each worker's ``out``, a queue of views of the frames, so a large
argument goes out of the task's own bytes, never copied here) and the
selector watches that pipe for writability only while its buffer is not
empty. A worker that takes nothing for STALLED_WRITE_NS is killed.

It is started with ``subprocess`` (fork+exec, safe with threads in the user
process) in a session of its own, so Ctrl-C at a terminal reaches only the
user process, which then shuts down cleanly. If the user process dies, the
command pipe reads EOF and the dispatcher kills every worker and exits.
Workers are started with the configured multiprocessing start method
(forkserver by default, preloaded with the worker module, so a replacement
is up in milliseconds); each dies with its parent (see ``_worker.py``).
The forkserver is started first thing (``_boot``), as a fork of this
process (no second interpreter start), so that its preload overlaps this
process's own imports: the first result after ``Scheduler()`` waits for both.

User code is never unpickled here: payloads and results are opaque bytes.
"""

from __future__ import annotations

import os
import pickle
import sys

from ._worker_main import name_process  # (a module that imports nothing)

#: What the forkserver imports before it forks the first worker.
#: (ctypes: each new worker's PR_SET_PDEATHSIG call, ~3 ms if imported there)
FORKSERVER_PRELOAD = ["procsched._runtime._worker", "procsched._runtime._worker_main", "procsched._runtime._forkserver",
                      "ctypes"]
#: A wall-clock reading is trusted if taken within this of the monotonic
#: readings around it (see Dispatcher.wall_offset).
WALL_READ_NS = 50_000
#: The Pythons whose multiprocessing forkserver we start by forking (see
#: _fork_forkserver): its ``main()`` and its client's three fields are known
#: there (and checked: a different ``main()`` signature, e.g. 3.14's
#: authenticated one, falls back). Elsewhere the forkserver is started as
#: multiprocessing does.
ZYGOTE_PYTHONS = ((3, 11), (3, 12), (3, 13))


def _boot() -> tuple[Connection, Connection, dict[str, Any]]:
    """The process's first steps, before it imports the rest of the package:
    read the configuration and, with forkserver, start the forkserver (and
    multiprocessing's resource tracker) now, as forks of this process, so
    that the forkserver's preload (the worker's modules) runs alongside this
    process's own imports - the first result after ``Scheduler()`` waits for
    both - and no second or third interpreter has to start."""
    cmd_fd, evt_fd = int(sys.argv[1]), int(sys.argv[2])
    try:
        config = pickle.loads(_read_frame(cmd_fd))
    except EOFError:
        os._exit(0)
    import multiprocessing
    from multiprocessing.connection import Connection

    zygote = None
    if config["start_method"] == "forkserver":
        # What both processes need, imported once, before the fork: the
        # forkserver's machinery, and the modules the dispatcher and the
        # workers share (the dispatcher's own come after the fork).
        from multiprocessing import forkserver  # noqa: F401

        from . import _engine, _wire  # noqa: F401

        tracker = multiprocessing.resource_tracker._resource_tracker  # type: ignore[attr-defined]
        code = forkserver.main.__code__
        if (sys.version_info[:2] in ZYGOTE_PYTHONS and _client_fields(forkserver._forkserver) == (None, None, None)  # type: ignore[attr-defined]
                and code.co_varnames[:5] == ("listener_fd", "alive_r", "preload", "main_path", "sys_path")
                and code.co_argcount == 5 and not code.co_kwonlyargcount
                and (getattr(tracker, "_fd", 0), getattr(tracker, "_pid", 0)) == (None, None)):  # fmt: skip
            tracker._fd, tracker._pid = _fork_resource_tracker((cmd_fd, evt_fd))
            zygote = _fork_forkserver(config, (cmd_fd, evt_fd, tracker._fd))
    multiprocessing.process.current_process()._config["tempdir"] = config["tempdir"]  # type: ignore[attr-defined]
    # Started with `-m`, this module is __main__, and multiprocessing would
    # re-run it as __mp_main__ in every new worker: ~15 ms per replacement.
    main_module = sys.modules["__main__"]
    main_module.__spec__ = None
    vars(main_module).pop("__file__", None)
    if config["start_method"] == "forkserver":
        from multiprocessing import forkserver

        # (also what a forkserver started again after a death preloads)
        multiprocessing.get_context("forkserver").set_forkserver_preload(FORKSERVER_PRELOAD)  # type: ignore[attr-defined]
        if zygote is not None:
            # The client's side of what ensure_running() does: where to connect,
            # the "alive" pipe, the pid (whose death makes the next start()
            # start a forkserver the usual way).
            server = forkserver._forkserver  # type: ignore[attr-defined]
            server._forkserver_address, server._forkserver_alive_fd, server._forkserver_pid = zygote
        else:
            # The forkserver (so every worker) gets the user's sys.path; this
            # process takes it only after its own imports (main()), so a module
            # in the user's directories cannot shadow one the dispatcher imports.
            own_path = sys.path[:]
            sys.path[:] = config["sys_path"]
            try:
                forkserver.ensure_running()  # returns once it is started, not once it has imported
            except Exception:  # noqa: BLE001 - the first worker's start tries again, and reports
                pass
            finally:
                sys.path[:] = own_path
    return Connection(cmd_fd, writable=False), Connection(evt_fd, readable=False), config


def _read_frame(fd: int) -> bytes:
    """One ``Connection.send_bytes`` frame, read with exactly its size (what
    follows it in the pipe - the first commands - stays there for the loop)."""

    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = os.read(fd, n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    size = int.from_bytes(exactly(4), "big", signed=True)
    if size == -1:
        size = int.from_bytes(exactly(8), "big")
    return exactly(size)


def _fork_forkserver(config: dict[str, Any], ours: tuple[int, int]) -> tuple[str, int, int] | None:
    """Start multiprocessing's forkserver as a fork of this process, not as
    a fresh interpreter: it skips an interpreter start (and ``site``, and its
    imports of multiprocessing), ~20-40 ms that the first result waited for.

    Safe here: this process is single-threaded and has imported only what
    the forkserver imports too (the fork is as clean as an exec). The child becomes exactly
    what ``ensure_running()`` would have started: it is given the same
    listening socket and "alive" pipe, a ``python -c``'s empty ``__main__``,
    none of our descriptors, and runs ``forkserver.main`` with the same
    arguments (preload, the user's sys.path) in the same session and group.
    Returns (socket path, "alive" write end, pid) for the client side, or
    None if the socket cannot be made (the usual start then runs)."""
    import socket

    address = os.path.join(config["tempdir"], "forkserver")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(address)
        os.chmod(address, 0o600)
        listener.listen()
        alive_r, alive_w = os.pipe()
    except OSError:
        listener.close()
        return None
    pid = os.fork()
    if pid == 0:  # the forkserver: never returns into the dispatcher's code
        code = 1
        try:
            for fd in (*ours, alive_w):
                os.close(fd)
            name_process("psc-forkserver")
            dispatcher_module = sys.modules["__main__"]  # noqa: F841 - kept alive: this code is its
            import builtins

            main = type(sys)("__main__")  # what `python -c` runs in
            main.__builtins__ = builtins  # type: ignore[attr-defined]
            sys.modules["__main__"] = main
            from multiprocessing import forkserver

            forkserver.main(listener.detach(), alive_r, FORKSERVER_PRELOAD, sys_path=config["sys_path"])
            code = 0
        except SystemExit as exc:  # main() ends so when the "alive" pipe closes
            code = exc.code if isinstance(exc.code, int) else 0
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc()
        raise SystemExit(code)  # (atexit runs: _forkserver.py's kill of the workers' groups)
    listener.close()
    os.close(alive_r)
    return address, alive_w, pid


def _fork_resource_tracker(ours: tuple[int, ...]) -> tuple[int, int]:
    """Start multiprocessing's resource tracker (it removes the named
    semaphores and shared memory that tasks leak; the first worker's start
    would start it) as a fork of this process too: a third interpreter
    start, competing for the CPU with the first worker's, saved. The child
    is what ``ResourceTracker.ensure_running()`` starts: ``main()`` on the
    read end of a pipe whose write end the workers get, with stderr and none
    of our other descriptors. Returns (write end, pid) for our tracker's
    ``_fd`` and ``_pid``."""
    from multiprocessing import resource_tracker

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for fd in (*ours, w):
                os.close(fd)
            name_process("psc-rtracker")
            resource_tracker.main(r)  # returns when every holder of w is gone
            code = 0
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)  # never into the dispatcher's code (or its atexit)
    os.close(r)
    return w, pid


def _client_fields(server: Any) -> tuple[Any, ...] | None:
    """The ForkServer fields ensure_running() sets, if it has exactly those."""
    try:
        return server._forkserver_address, server._forkserver_alive_fd, server._forkserver_pid
    except AttributeError:
        return None


if __name__ == "__main__":  # the dispatcher process (python -m), not an import
    _BOOT = _boot()

import collections  # noqa: E402 - after the boot, see _boot()
import itertools  # noqa: E402
import selectors  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import multiprocessing  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from multiprocessing.connection import Connection  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

from .._core import Policy, Run  # noqa: E402
from .._errors import SchedulerClosedError  # noqa: E402
from . import _messages as m  # noqa: E402
from . import _worker_main  # noqa: E402 - the target, not the worker (see _worker_main.py)
from ._gc import FreezeOnGrowth  # noqa: E402
from ._engine import LOAD_GRACE_NS, NO_STORE, WALL_CHECK_S, Carrier, Engine  # noqa: E402
from ._wire import PROTOCOL, CommandReader, FrameReader, frame_head  # noqa: E402

if TYPE_CHECKING:
    from ._durable._journal import Journal

#: psutil, imported on first use (``_psutil``): listing a worker's tree, its
#: RSS, its state. Not at start, where its ~10 ms import would delay the
#: first result; the first kill or stats() pays it instead.
psutil: Any = None

NS = 1_000_000_000
#: Ids of tasks added from inside tasks (the user process numbers its own from 1).
INNER_IDS_START = 1 << 48
#: The longest single wait: epoll and poll reject timeouts over ~24.8 days
#: (OverflowError), and a task may be due in a century.
MAX_WAIT_S = 3600.0
#: A worker whose half-received message has not grown for this long is not
#: sending one (a task wrote a frame header to its pipe): it is killed.
STALLED_FRAME_NS = 5 * NS
#: A worker that takes nothing from its pipe for this long while we have
#: something to send it is stuck (SIGSTOPped, or a task thread blocked the
#: process): it is killed, as a crash. A healthy worker reads at memory speed
#: whenever it is idle or waiting for a reply, the only times we write to it.
STALLED_WRITE_NS = 10 * NS
#: Captured output kept per run (the tail).
OUTPUT_TAIL = 64 * 1024
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


class _Worker:
    __slots__ = ("proc", "conn", "fd", "reader", "ident", "sentinel", "ps", "tree", "out", "out_since", "capture",
                 "tickets", "ticket_w", "unwritten")  # fmt: skip

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

    def __repr__(self) -> str:
        return f"<worker {self.ident}>"


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
        self, start_method: str, selector: selectors.BaseSelector, capture_dir: str | None = None
    ) -> None:
        self.selector = selector
        self.capture_dir = capture_dir  # capture each run's output in files here
        self.serial = itertools.count()
        self.writing: set[_Worker] = set()  # workers with output waiting
        self.ctx = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            self.ctx.set_forkserver_preload(FORKSERVER_PRELOAD)  # type: ignore[attr-defined]
        self.by_sentinel: dict[int, _Worker] = {}
        self.unflushed: set[_Worker] = set()  # workers given runs this turn (see flush)

    def spawn(self, slot: int) -> _Worker:
        parent, child = self.ctx.Pipe(duplex=True)
        tickets, ticket_w = os.pipe()
        os.set_blocking(tickets, False)
        child_tickets = Connection(os.dup(tickets), writable=False)  # the same open file, for the worker
        capture = None
        if self.capture_dir is not None:
            capture = os.path.join(self.capture_dir, f"output-{slot}-{next(self.serial)}")
        proc = self.ctx.Process(target=_worker_main.main, args=(child, capture, child_tickets), name=f"procsched-worker-{slot}")  # type: ignore[attr-defined]
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
        worker = _Worker(proc, parent, capture)
        worker.tickets, worker.ticket_w = tickets, ticket_w
        self.by_sentinel[worker.sentinel] = worker
        self.selector.register(parent, selectors.EVENT_READ, (ON_WORKER, worker))
        self.selector.register(worker.sentinel, selectors.EVENT_READ, (ON_EXIT, worker))
        return worker

    def send_run(self, worker: _Worker, run: Run) -> None:
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
            order = m.RunOrder.wire(run.task_id, run.run, run.scheduled_ns, report_start, run.attempt, run.wall_ns,
                                    run.retry_on, fn_blob, arg_blob)  # fmt: skip
            body = pickle.dumps(order, PROTOCOL)
            out.append(memoryview(frame_head(len(body)) + body))
        else:  # a header, then the blobs as raw frames, written from their own bytes
            header = pickle.dumps(m.RunHeader.wire(run.task_id, run.run, run.scheduled_ns, report_start, run.attempt,
                                                   run.wall_ns, run.retry_on), PROTOCOL)  # fmt: skip
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

    def revoke(self, worker: _Worker, run: Run) -> bool:
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

    def retire(self, worker: _Worker) -> None:
        # What its tasks left running (even in sessions of their own) ends
        # with it, as at a kill: listed now, killed once it has exited.
        try:
            worker.tree = self._ps(worker).children(recursive=True)
        except (psutil.Error, OSError):
            pass
        # Closing our end is enough: an idle worker exits on EOF.
        self._drop_conn(worker)

    def output(self, worker: _Worker) -> str | None:
        """The captured output of the worker's last run (its tail), or None
        without capture."""
        if worker.capture is None:
            return None
        try:
            with open(worker.capture, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                f.seek(max(0, size - OUTPUT_TAIL))
                data = f.read(OUTPUT_TAIL)
        except OSError:
            return ""
        return data.decode("utf-8", "replace")

    def kill(self, worker: _Worker, hard: bool) -> None:
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

    def rss(self, worker: _Worker) -> int | None:
        try:
            return int(self._ps(worker).memory_info().rss)
        except (psutil.Error, OSError):
            return None

    def health(self, worker: _Worker) -> str:
        try:
            status = self._ps(worker).status()
        except (psutil.Error, OSError):
            return "dead"
        if status == psutil.STATUS_STOPPED:
            return "stopped"
        return "dead" if status == psutil.STATUS_ZOMBIE else "ok"

    def forget(self, worker: _Worker) -> int | None:
        """The worker's sentinel fired: reap it and return its exit code."""
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
        # The sentinel closes as the process exits, a moment before it can be
        # reaped. A worker that closed the fd itself is still alive: kill it.
        worker.proc.join(0.1)
        if worker.proc.exitcode is None:
            worker.proc.kill()
            worker.proc.join()
        code = worker.proc.exitcode
        worker.proc.close()
        return code

    def forget_output(self, worker: _Worker) -> None:
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

    def _ps(self, worker: _Worker) -> Any:
        """The worker's psutil.Process (psutil is loaded by this first use)."""
        if worker.ps is None:
            worker.ps = _psutil().Process(worker.ident)
        return worker.ps

    def _send(self, worker: _Worker, message: tuple[Any, ...]) -> None:
        if worker.conn is None:
            return
        body = pickle.dumps(message, PROTOCOL)
        worker.out.append(memoryview(frame_head(len(body)) + body))
        self.write(worker)

    def write(self, worker: _Worker, now: int | None = None) -> None:
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
        if out and not was_waiting:
            self.writing.add(worker)
            worker.out_since = time.monotonic_ns() if now is None else now
            self.selector.modify(worker.conn, selectors.EVENT_READ | selectors.EVENT_WRITE, (ON_WORKER, worker))
        elif not out and was_waiting:
            self.writing.discard(worker)
            self.selector.modify(worker.conn, selectors.EVENT_READ, (ON_WORKER, worker))

    def _drop_conn(self, worker: _Worker) -> None:
        if worker.conn is not None:
            self.selector.unregister(worker.conn)
            worker.conn.close()
            worker.conn = None
            worker.out.clear()
            self.writing.discard(worker)


ON_COMMANDS, ON_SIGNAL, ON_WORKER, ON_EXIT, ON_WRITABLE, ON_COMMIT = range(6)


def _psutil() -> Any:
    global psutil
    if psutil is None:
        import psutil as module

        psutil = module
    return psutil


class Dispatcher:
    def __init__(self, cmd: Connection, evt: Connection, config: dict[str, Any]) -> None:
        self.cmd: Connection | None = cmd
        self.cmd_reader = FrameReader(cmd.fileno())
        self.commands = CommandReader()
        self.evt: Connection | None = evt
        os.set_blocking(evt.fileno(), False)
        self.out = bytearray()  # framed event batches the pipe has not taken yet
        self.out_waiting = False  # registered for EVENT_WRITE
        # Registered once, updated as workers come and go: one wait a turn.
        # select(2) takes its timeout in microseconds, epoll in milliseconds
        # (rounded up): a timer would fire up to 1 ms late. select handles
        # descriptors below 1024 only, so a very large pool falls back to epoll.
        few = config["workers"] <= 256
        self.selector = selectors.SelectSelector() if few else selectors.DefaultSelector()
        capture = config["tempdir"] if config.get("capture_output") else None
        self.carrier = ProcessCarrier(config["start_method"], self.selector, capture)
        self.journal: Journal | None = None
        if config.get("store") is not None:  # keyed tasks are durable (see _durable/_journal.py)
            from ._durable._journal import Journal

            self.journal = Journal(config["store"], config["owner_pid"], self.emit, config.get("lease_ns", 30 * NS))
            self.selector.register(self.journal.writer.fd, selectors.EVENT_READ, (ON_COMMIT, None))
        self.engine = Engine(
            self.carrier,
            workers=config["workers"],
            policy=Policy(config["policy"]),
            max_tasks_per_worker=config["max_tasks_per_worker"],
            max_worker_memory=config["max_worker_memory"],
            default_timeout_ns=config.get("default_timeout"),
            load_grace_ns=int(float(os.environ.get("PROCSCHED_LOAD_GRACE", LOAD_GRACE_NS / NS)) * NS),
            durable=NO_STORE if self.journal is None else self.journal,
        )
        self.inner_ids = itertools.count(INNER_IDS_START)
        self.wall_skew = 0  # tests step the dispatcher's wall clock with the "wall_step" command
        self.partial: dict[_Worker, int] = {}  # worker -> when its unfinished frame last grew
        self.blobs: dict[bytes, bytes] = {}  # see intern()
        self.freeze_gc = FreezeOnGrowth()  # after bulk adds (see _gc.py)
        self.wakeup_r, wakeup_w = os.pipe()
        os.set_blocking(wakeup_w, False)
        signal.set_wakeup_fd(wakeup_w)
        signal.signal(signal.SIGTERM, lambda *_: None)  # seen through the wakeup fd
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.selector.register(cmd, selectors.EVENT_READ, (ON_COMMANDS, None))
        self.selector.register(self.wakeup_r, selectors.EVENT_READ, (ON_SIGNAL, None))

    def run(self) -> None:
        engine, select, clock = self.engine, self.selector.select, time.monotonic_ns
        engine.start(clock())
        while not engine.closed:
            engine.set_wall_offset(*self.wall_offset())
            wake = engine.tick(clock())
            if self.journal is not None:  # one transaction per turn, before the keyed runs go out
                offset, now = self.wall_offset()
                renew = self.journal.turn(engine, self.carrier, offset, now)
                if renew is not None and (wake is None or renew < wake):
                    wake = renew
            if self.carrier.unflushed:
                self.carrier.flush()
            self.flush()
            if engine.closed:
                break
            if self.partial:
                wake = self.check_partial(wake, clock())
            if self.carrier.writing:
                wake = self.check_writing(wake, clock())
            timeout = MAX_WAIT_S if wake is None else min(max(0, wake - clock()) / NS, MAX_WAIT_S)
            if engine.watches_wall and timeout > WALL_CHECK_S:
                timeout = WALL_CHECK_S
            for key, mask in select(timeout):
                what, worker = key.data
                if what == ON_WORKER:
                    if mask & selectors.EVENT_WRITE and worker.conn is not None:
                        self.carrier.write(worker)
                    if mask & selectors.EVENT_READ and worker.conn is not None:  # not dropped earlier in this turn
                        self.on_worker(worker)
                elif what == ON_EXIT:
                    if worker.sentinel in self.carrier.by_sentinel:
                        while worker.conn is not None:  # what it said before it died (results of runs it ended)
                            self.on_worker(worker)
                        engine.worker_exited(worker, self.carrier.forget(worker), clock())
                        self.carrier.forget_output(worker)
                        # the crash reaches the user before the replacement is started (next tick)
                        if self.journal is None or self.journal.may_flush(engine):
                            self.flush()
                elif what == ON_COMMANDS:
                    if self.cmd is not None:
                        self.on_commands()
                elif what == ON_WRITABLE:
                    self.write_out()
                elif what == ON_COMMIT:  # the store writer committed a turn: its keyed runs go out
                    self.journal.committed(engine, self.carrier, clock())  # type: ignore[union-attr]
                else:
                    os.read(self.wakeup_r, 512)
                    engine.log(30, "dispatcher got SIGTERM: killing the workers and exiting")
                    engine.abort(clock())
        if self.journal is not None:
            if self.evt is not None:  # a clean end: the last turn's changes, then unregister
                offset, now = self.wall_offset()
                self.journal.drain(engine, self.carrier, offset, now)
                self.carrier.flush()
            self.journal.close(clean=self.evt is not None)
        self.flush()
        if self.evt is not None:
            self.emit([m.Closed.wire()])
        self.finish_output()

    def wall_offset(self) -> tuple[int, int]:
        """(the wall clock minus the monotonic clock, the monotonic clock), now (ns).

        The wall reading is taken between two monotonic ones: a preemption
        between two bare readings (milliseconds on a loaded machine) would
        shift every wall time derived from this offset - a fixed-rate run's
        slot stored off its grid. A pair further apart than WALL_READ_NS is
        read again (at most twice more)."""
        for _ in range(3):
            before = time.monotonic_ns()
            wall = time.time_ns()
            now = time.monotonic_ns()
            if now - before <= WALL_READ_NS:
                break
        return wall + self.wall_skew - (before + now) // 2, now

    def on_commands(self) -> None:
        engine = self.engine
        try:
            frames = self.cmd_reader.read()
        except (EOFError, OSError):
            self.user_gone()
            return
        journal = self.journal
        for message in self.commands.messages(frames):
            tag = message[0]
            if tag == m.ADD:
                add = m.Add.of(message)
                task_id: int = add.task_id  # type: ignore[assignment]  # the user process numbers its tasks
                keyed = journal is not None and task_id in journal.expected
                if keyed:
                    journal.sync(engine.events)  # what came before (a replaced task's cancel) is journalled first
                if keyed or add.schedule is not None:  # its wall-clock times matter
                    engine.set_wall_offset(*self.wall_offset())
                engine.add(add, task_id, time.monotonic_ns(), self.intern(add.payload))
                if keyed:
                    journal.added(engine, task_id)
            elif tag == m.ADOPT and journal is not None:  # a restart's stored tasks, a chunk at a time
                offset, now = self.wall_offset()
                engine.set_wall_offset(offset, now)
                adopt = m.Adopt.of(message)
                journal.adopt(engine, adopt.shapes, adopt.rows, offset)
            elif tag == m.DEFINE and journal is not None:
                journal.expect(m.Define.of(message))
            elif tag == m.UNLOADABLE and journal is not None:
                unloadable = m.Unloadable.of(message)
                journal.unloadable(unloadable.key, unloadable.why)
            elif tag == m.PAUSE or tag == m.RESUME:
                request = m.Pause.of(message)  # (Resume: the same fields)
                if journal is not None:  # the user's pause or resume: not on standby any more
                    journal.peers.wake(engine, request.task_id, time.monotonic_ns())
                if tag == m.PAUSE:
                    done = engine.pause(request.task_id)
                else:
                    done = engine.resume(request.task_id, time.monotonic_ns())
                engine.emit(m.Answer.wire(request.request, done))
            elif tag == m.WALL_STEP:  # tests: step this process's wall clock
                self.wall_skew += m.WallStep.of(message).ns
            elif tag == m.CANCEL:
                cancel = m.Cancel.of(message)
                accepted = engine.cancel(cancel.task_id, cancel.interrupt, time.monotonic_ns())
                engine.emit(m.Answer.wire(cancel.request, accepted))
            elif tag == m.STATS:
                stats = engine.stats(time.monotonic_ns())
                if journal is not None:
                    stats["store"] = journal.stats(engine)
                engine.emit(m.Answer.wire(m.Stats.of(message).request, stats))
            elif tag == m.SHUTDOWN:
                if journal is not None:  # what shutdown cancels stays stored
                    journal.sync(engine.events)
                    journal.closing = True
                engine.shutdown(m.Shutdown.of(message).cancel_futures, time.monotonic_ns())
        self.freeze_gc(engine.pending)

    def intern(self, payload: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
        """Share the bytes of a pickled function (and of small argument
        blobs) among the tasks that carry the same ones: a million pending
        calls of one function hold one copy of its pickle, not a million."""
        fn_blob, arg_blob = payload
        blobs = self.blobs
        if len(blobs) >= 4096:
            blobs.clear()
        fn_blob = blobs.setdefault(fn_blob, fn_blob) if len(fn_blob) < 512 else fn_blob
        arg_blob = blobs.setdefault(arg_blob, arg_blob) if len(arg_blob) < 64 else arg_blob
        return fn_blob, arg_blob

    def on_worker(self, worker: _Worker) -> None:
        engine = self.engine
        conn = worker.conn
        try:
            frames = worker.reader.read()
        except (EOFError, OSError):
            self.partial.pop(worker, None)
            self.carrier._drop_conn(worker)  # dying: its sentinel will tell
            return
        if worker.reader.buf:
            self.partial[worker] = time.monotonic_ns()
        else:
            self.partial.pop(worker, None)
        for frame in frames:
            if worker.conn is not conn:
                return  # it was killed (e.g. it cancelled itself with interrupt=True)
            try:
                message: Any = pickle.loads(frame)
                tag = m.check_report(message)
            except Exception as exc:  # noqa: BLE001 - anything a task wrote to the pipe
                self.protocol_violation(worker, f"{type(exc).__name__}: {exc}"[:200])
                return
            if tag == m.DONE:
                engine.finished(worker, m.Done.of(message))
            elif tag == m.STARTED:
                started = m.Started.of(message)
                engine.started(worker, started.task_id, started.run, started.at_ns)
            elif tag == m.SKIPPED:
                engine.skipped(worker)
            elif tag == m.ADD:
                self.carrier._send(worker, self.add_from_task(m.Add.of(message)))
            elif tag == m.CANCEL:
                cancel = m.Cancel.of(message)
                accepted = engine.cancel(cancel.task_id, cancel.interrupt, time.monotonic_ns())
                self.carrier._send(worker, m.Reply.wire(accepted))

    def add_from_task(self, add: m.Add) -> m.Message:
        """A task's follow-up (``current_scheduler()`` in a worker): number
        it, add it, tell the user process; the answer for the worker."""
        engine = self.engine
        if engine.closing:
            return m.Refusal.wire(SchedulerClosedError("the scheduler is shutting down"))
        task_id = next(self.inner_ids)
        if add.schedule is not None:
            engine.set_wall_offset(*self.wall_offset())
        why = engine.add(add, task_id, time.monotonic_ns(), self.intern(add.payload))
        if why is not None:
            return m.Refusal.wire(ValueError(f"task {task_id} cannot be scheduled: {why}"[:300]))
        due = engine.due(task_id)
        engine.emit(m.TaskAdded.wire(task_id, add.name, add.due_ns if due is None else due, add.key,
                                     engine.next_wall(task_id)))  # fmt: skip
        return m.Reply.wire((task_id, due))

    def check_partial(self, wake: int | None, now: int) -> int | None:
        """Kill workers whose unfinished frame stalled; return the next time to look."""
        for worker, since in list(self.partial.items()):
            if worker.conn is None:
                del self.partial[worker]
            elif since + STALLED_FRAME_NS <= now:
                del self.partial[worker]
                self.protocol_violation(worker, f"an unfinished message, stalled for {STALLED_FRAME_NS / NS:g}s")
            elif wake is None or since + STALLED_FRAME_NS < wake:
                wake = since + STALLED_FRAME_NS
        return wake

    def check_writing(self, wake: int | None, now: int) -> int | None:
        """Kill workers that took nothing from their pipe for STALLED_WRITE_NS
        while we had something for them; return the next time to look."""
        for worker in list(self.carrier.writing):
            due = worker.out_since + STALLED_WRITE_NS
            if due <= now:
                self.engine.log(30, f"worker {worker.ident} took nothing from its pipe for "
                                     f"{STALLED_WRITE_NS / NS:g}s (stopped?); killing it")  # fmt: skip
                self.carrier.kill(worker, hard=True)
            elif wake is None or due < wake:
                wake = due
        return wake

    def protocol_violation(self, worker: _Worker, what: str) -> None:
        """A worker sent something that is not a message of ours (a task wrote
        to the pipe it inherited, or sent a frame it never finished): its pipe
        cannot be trusted, so the worker goes, like a crash - never the
        dispatcher, which never blocks on a worker's pipe (``FrameReader``)
        and gives up on a frame that stops growing (``check_partial``)."""
        self.engine.log(30, f"worker {worker.ident} sent garbage ({what}); killing it")
        self.carrier.kill(worker, hard=True)

    def flush(self) -> None:
        if self.engine.events:
            events = self.engine.take_events()
            if self.evt is not None:
                self.emit(events)

    def emit(self, events: list[tuple[Any, ...]]) -> None:
        """Queue an event batch for the user process without ever blocking:
        a user callback that schedules work while both pipes are full would
        otherwise deadlock the two processes. What the pipe cannot take now
        waits in ``self.out`` until the selector says it is writable."""
        body = pickle.dumps(events, PROTOCOL)
        self.out += frame_head(len(body))
        self.out += body
        self.write_out()

    def write_out(self) -> None:
        evt = self.evt
        if evt is None:
            return
        try:
            written = os.write(evt.fileno(), self.out)
        except BlockingIOError:
            written = 0
        except OSError:
            self.user_gone()
            return
        del self.out[:written]
        if self.out and not self.out_waiting:
            self.selector.register(evt, selectors.EVENT_WRITE, (ON_WRITABLE, None))
        elif not self.out and self.out_waiting:
            self.selector.unregister(evt)
        self.out_waiting = bool(self.out)

    def user_gone(self) -> None:
        """The user process is gone (its pipes broke): kill everything, exit."""
        if self.cmd is not None:
            self.selector.unregister(self.cmd)
            self.cmd = None
        if self.evt is not None and self.out_waiting:
            self.selector.unregister(self.evt)
        self.evt = None
        self.out_waiting = False
        self.out.clear()
        self.engine.abort(time.monotonic_ns())

    def finish_output(self) -> None:
        """At exit: the last events (and "closed") must reach the user process."""
        if self.evt is not None and self.out:
            os.set_blocking(self.evt.fileno(), True)
            try:
                while self.out:
                    del self.out[: os.write(self.evt.fileno(), self.out)]
            except OSError:
                pass


def main() -> None:
    cmd, evt, config = _BOOT
    sys.path[:] = config["sys_path"]
    dispatcher = Dispatcher(cmd, evt, config)
    code = 0
    try:
        dispatcher.run()
    except BaseException:  # a bug: say so, and leave no worker behind
        traceback.print_exc()
        dispatcher.engine.abort(time.monotonic_ns())
        code = 1
    # os._exit skips multiprocessing's finalizers, among them the one that
    # removes its temporary directory (the forkserver's socket): do that here.
    # (It is the user process's directory: if we are SIGKILLed, it removes it.)
    tempdir = multiprocessing.process.current_process()._config.get("tempdir")  # type: ignore[attr-defined]
    if tempdir:
        shutil.rmtree(tempdir, ignore_errors=True)
    # Every worker is gone; skip multiprocessing's atexit joins.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
