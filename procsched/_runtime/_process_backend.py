"""The user-process end of the processes runner: starts the dispatcher
process and carries commands to it and event batches back (see _dispatcher.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import Any, Callable

import procsched

from .._events import signal_name
from ._wire import pack_call, recv, send

#: How long shutdown waits for the dispatcher to exit once it said "closed".
EXIT_GRACE = 10.0


class ProcessBackend:
    pickled = True
    aborted = False

    def __init__(self, config: dict[str, Any]) -> None:
        cmd_r, cmd_w = os.pipe()
        evt_r, evt_w = os.pipe()
        env = dict(os.environ)
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
        finally:
            os.close(cmd_r)
            os.close(evt_w)
        self.cmd = Connection(cmd_w, readable=False)
        self.evt = Connection(evt_r, writable=False)
        send(self.cmd, config)

    def pack(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bytes, bytes]:
        return pack_call(fn, args, kwargs)

    def send(self, message: tuple[Any, ...]) -> None:
        send(self.cmd, message)

    def next_batch(self) -> list[tuple[Any, ...]]:
        return recv(self.evt)  # type: ignore[no-any-return]

    def finished(self) -> bool:
        return self.proc.poll() is not None

    def death_reason(self) -> str:
        if self.aborted:
            return "the scheduler was stopped at interpreter exit"
        code = self.proc.poll()
        if code is None:
            try:
                code = self.proc.wait(5)
            except subprocess.TimeoutExpired:
                return "the dispatcher process stopped answering"
        how = f"signal {signal_name(code)}" if code < 0 else f"exit code {code}"
        return f"the dispatcher process (pid {self.proc.pid}) died ({how})"

    def abort(self) -> None:
        """Close the command pipe: the dispatcher takes it as the user process
        dying, kills every worker and exits."""
        self.aborted = True
        self.cmd.close()
        try:
            self.proc.wait(EXIT_GRACE)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def join(self) -> None:
        try:
            self.proc.wait(EXIT_GRACE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for conn in (self.cmd, self.evt):
            if not conn.closed:
                conn.close()
