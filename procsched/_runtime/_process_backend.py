"""The user-process end of the processes runner: starts the dispatcher
process and carries commands to it and event batches back (see _dispatcher.py)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import procsched

from .._events import signal_name
from .._secret import ENV as SECRET_ENV
from ._wire import pack_call, recv, send, send_command

#: How long shutdown waits for the dispatcher to exit once it said "closed".
EXIT_GRACE = 10.0
#: The command pipe's size (Linux; the default is 64 KiB): a restart's chunks
#: of stored tasks (~0.5 MB each) are written while the dispatcher adopts the
#: one before, not after it - 100,000 stored tasks, SQLite: the writes took
#: 0.15 s of the constructor's 0.9 s, 0.06 s with this.
CMD_PIPE_BYTES = 1 << 20


class ProcessBackend:
    pickled = True
    aborted = False

    def __init__(self, config: dict[str, Any]) -> None:
        # The dispatcher's temporary directory (multiprocessing's, for the
        # forkserver socket, and the runs' captured output) is made here, so
        # that it is removed even when the dispatcher is SIGKILLed.
        self.tempdir = config["tempdir"] = tempfile.mkdtemp(
            prefix="psch-"
        )  # short: the forkserver socket path must fit AF_UNIX
        #: Live workers (pid = process group id), from the event stream: if the
        #: dispatcher dies, their process groups are killed from here.
        self.workers: set[int] = set()
        cmd_r, cmd_w = os.pipe()
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError):  # (over the user's pipe quota: the default size)
                fcntl.fcntl(cmd_w, fcntl.F_SETPIPE_SZ, CMD_PIPE_BYTES)
        evt_r, evt_w = os.pipe()
        env = dict(os.environ)
        env.pop(SECRET_ENV, None)  # the store's secret goes in the configuration frame: workers never inherit it
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(procsched.__file__)))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "procsched._runtime._dispatcher", str(cmd_r), str(evt_w)],
                pass_fds=(cmd_r, evt_w),
                start_new_session=True,  # Ctrl-C at a terminal is the user process's to handle
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except BaseException:
            shutil.rmtree(self.tempdir, ignore_errors=True)
            raise
        finally:
            os.close(cmd_r)
            os.close(evt_w)
        self.cmd = Connection(cmd_w, readable=False)
        #: One command written at a time: the program's threads and the listener
        #: (adopting other schedulers' tasks) send; a command is several writes.
        self.send_lock = threading.Lock()
        self.evt = Connection(evt_r, writable=False)
        send(self.cmd, config)

    def pack(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bytes, bytes]:
        return pack_call(fn, args, kwargs)

    def send(self, message: tuple[Any, ...]) -> None:
        with self.send_lock:
            send_command(self.cmd, message)

    def next_batch(self) -> list[tuple[Any, ...]]:
        return recv(self.evt)  # type: ignore[no-any-return]

    def finished(self) -> bool:
        return self.proc.poll() is not None

    def worker_event(self, what: str, pid: int) -> None:
        if what == "started":
            self.workers.add(pid)
        else:
            self.workers.discard(pid)

    def death_reason(self) -> str:
        """The event stream broke: why (and clean up after the dispatcher)."""
        if self.aborted:
            return "the scheduler was stopped at interpreter exit"
        code = self.proc.poll()
        if code is None:
            try:
                code = self.proc.wait(5)
            except subprocess.TimeoutExpired:
                return "the dispatcher process stopped answering"
        self._clean_up()
        how = f"signal {signal_name(code)}" if code < 0 else f"exit code {code}"
        return f"the dispatcher process (pid {self.proc.pid}) died ({how})"

    def _clean_up(self) -> None:
        """The dispatcher is gone. Its workers die with it (PR_SET_PDEATHSIG),
        but what their tasks started would live on in their process groups:
        end those groups (whatever the start method), and remove the
        temporary directory."""
        for pgid in self.workers:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.workers.clear()
        shutil.rmtree(self.tempdir, ignore_errors=True)

    def forked(self) -> None:
        """In a forked child: let go of the parent's pipes (see the facade)."""
        for conn in (self.cmd, self.evt):
            if not conn.closed:
                conn.close()

    def abort(self) -> None:
        """Close the command pipe: the dispatcher takes it as the user process
        dying, kills every worker and exits."""
        self.aborted = True
        if not self.cmd.closed:
            self.cmd.close()
        try:
            self.proc.wait(EXIT_GRACE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self._clean_up()

    def join(self) -> None:
        try:
            self.proc.wait(EXIT_GRACE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self._clean_up()
        for conn in (self.cmd, self.evt):
            if not conn.closed:
                conn.close()
        shutil.rmtree(self.tempdir, ignore_errors=True)
