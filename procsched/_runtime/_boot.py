"""The dispatcher process's first steps, before it imports the rest of the package.

    python -m procsched._runtime._dispatcher CMD_FD EVT_FD
      └─ boot(): read the configuration frame from the command pipe
                 forkserver: fork multiprocessing's resource tracker and its
                 forkserver from this process now (no second or third
                 interpreter start), preloaded with the worker's modules, so
                 their start overlaps this process's own imports
      └─ then _dispatcher.py imports the rest and runs its loop

Everything here imports only what the forkserver imports too (the fork is
as clean as an exec); the tricks on multiprocessing's private state are
checked against the Pythons they were written for (``ZYGOTE_PYTHONS``), and
fall back to multiprocessing's own start elsewhere.
"""

from __future__ import annotations

import os
import pickle
import sys
from typing import TYPE_CHECKING, Any

from ._worker_main import FORKSERVER_PRELOAD, name_process  # (a module that imports nothing but sys)

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

#: The Pythons whose multiprocessing forkserver we start by forking (see
#: _fork_forkserver): its ``main()`` and its client's three fields are known
#: there (and checked: a different ``main()`` signature, e.g. 3.14's
#: authenticated one, falls back). Elsewhere the forkserver is started as
#: multiprocessing does.
ZYGOTE_PYTHONS = ((3, 11), (3, 12), (3, 13))


def boot() -> tuple[Connection, Connection, dict[str, Any]]:
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
        from multiprocessing import forkserver

        from . import _engine, _wire  # noqa: F401

        tracker: Any = multiprocessing.resource_tracker._resource_tracker
        code = forkserver.main.__code__
        if (
            sys.version_info[:2] in ZYGOTE_PYTHONS
            and _client_fields(forkserver._forkserver) == (None, None, None)
            and code.co_varnames[:5] == ("listener_fd", "alive_r", "preload", "main_path", "sys_path")
            and code.co_argcount == 5
            and not code.co_kwonlyargcount
            and _tracker_fields(tracker) == (None, None)
        ):
            tracker._fd, tracker._pid = _fork_resource_tracker((cmd_fd, evt_fd))
            zygote = _fork_forkserver(config, (cmd_fd, evt_fd, tracker._fd))
    process: Any = multiprocessing.process.current_process()
    process._config["tempdir"] = config["tempdir"]
    # Started with `-m`, this module is __main__, and multiprocessing would
    # re-run it as __mp_main__ in every new worker: ~15 ms per replacement.
    main_module = sys.modules["__main__"]
    main_module.__spec__ = None
    vars(main_module).pop("__file__", None)
    if config["start_method"] == "forkserver":
        from multiprocessing import forkserver

        # (also what a forkserver started again after a death preloads)
        multiprocessing.get_context("forkserver").set_forkserver_preload(FORKSERVER_PRELOAD)
        if zygote is not None:
            # The client's side of what ensure_running() does: where to connect,
            # the "alive" pipe, the pid (whose death makes the next start()
            # start a forkserver the usual way).
            server: Any = forkserver._forkserver
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


def _fork_forkserver(config: dict[str, Any], ours: tuple[int, ...]) -> tuple[str, int, int] | None:
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
            config.pop("secret", None)  # the store's: the workers forked from here need none of it
            name_process("psc-forkserver")
            dispatcher_module = sys.modules["__main__"]  # noqa: F841 - kept alive: this code is its
            import builtins

            main = type(sys)("__main__")  # what `python -c` runs in
            main.__builtins__ = builtins  # type: ignore[attr-defined]
            sys.modules["__main__"] = main
            from multiprocessing import forkserver

            sys.excepthook = _orphan_quiet  # (what a forked child's error goes through; a worker resets it)
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


def _orphan_quiet(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    """The forkserver's children report an error that ends them before they
    run (multiprocessing's handshake) through ``sys.excepthook``. An
    ``EOFError`` there means the start data never came: the dispatcher died
    while it started this worker (the fault campaign, seed 6516: the
    stdlib's traceback, on the program's stderr, after a kill -9). The
    orphan exits without a word; anything else is printed as before."""
    if not issubclass(kind, EOFError):
        sys.__excepthook__(kind, value, tb)


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


def _tracker_fields(tracker: Any) -> tuple[Any, ...] | None:
    """The ResourceTracker fields ensure_running() sets, if it has exactly those."""
    try:
        return tracker._fd, tracker._pid
    except AttributeError:
        return None
