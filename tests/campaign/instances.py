"""Instances (tests/campaign/instance.py) as seen from a test or the
campaign: start one, ask it things, and fault it - SIGKILL its tree or its
user process alone, SIGSTOP/SIGCONT its tree, shut it down cleanly.

Every process an instance ever had (its user process, dispatcher,
forkserver, workers: found by walking its tree at each look) is kept, so
the end of a test can check that all of them are gone.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from typing import Any

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


class InstanceGone(AssertionError):
    """The instance exited (or said nothing in time) while we waited for it."""


class Instance:
    def __init__(self, name: str, cfg: dict[str, Any], tmp: str, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.cfg = {**cfg, "name": name}
        self.err_path = os.path.join(tmp, f"{name}.{time.monotonic_ns()}.err")
        self._err = open(self.err_path, "wb")
        full_env = {**os.environ, "PYTHONPATH": ROOT, **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.campaign.instance", json.dumps(self.cfg)], cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, env=full_env,
        )  # fmt: skip
        self.pid = self.proc.pid
        self.buf = b""
        self.seen: dict[int, psutil.Process] = {}
        self.stopped = False
        self.started_at = time.time()
        self.ready_at: float | None = None
        self.look()

    # -- processes -------------------------------------------------------------

    def look(self) -> list[psutil.Process]:
        """The instance's live tree now (and remember every member)."""
        try:
            me = psutil.Process(self.pid)
            procs = [me, *me.children(recursive=True)]
        except psutil.NoSuchProcess:
            procs = []
        for p in procs:
            self.seen.setdefault(p.pid, p)
        return procs

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal_tree(self, sig: int) -> None:
        for p in self.look():
            try:
                p.send_signal(sig)
            except psutil.NoSuchProcess:
                pass

    def stop(self) -> None:
        """SIGSTOP the whole tree (a VM paused, a long GC stall)."""
        self.signal_tree(signal.SIGSTOP)
        self.stopped = True

    def cont(self) -> None:
        self.signal_tree(signal.SIGCONT)
        self.stopped = False

    def kill(self, tree: bool = True) -> None:
        """SIGKILL the whole tree (a host lost) or the user process alone (its
        dispatcher and workers then end by themselves)."""
        procs = self.look()
        targets = procs if tree else procs[:1]
        for p in targets:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        if self.stopped:  # a stopped process cannot die until continued
            for p in procs:
                try:
                    p.send_signal(signal.SIGCONT)
                except psutil.NoSuchProcess:
                    pass
            self.stopped = False
        self.proc.wait(30)
        self._close_streams()

    def left(self) -> list[psutil.Process]:
        """Every process this instance ever had that still runs."""
        out = []
        for p in self.seen.values():
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.NoSuchProcess:
                pass
        return out

    # -- talk ------------------------------------------------------------------

    def line(self, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self.buf:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    raise InstanceGone(f"{self.name}: no answer in {timeout}s; stderr:\n{self.stderr()[-3000:]}")
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise InstanceGone(f"{self.name} exited ({self.proc.poll()}); stderr:\n{self.stderr()[-3000:]}")
                self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        self.look()
        return json.loads(line)  # type: ignore[no-any-return]

    def ready(self, timeout: float = 60.0) -> Instance:
        """Wait for its Scheduler to be made and its tasks scheduled (``ready_at``: then, its wall time)."""
        got = self.line(timeout)
        assert "ready" in got, got
        self.ready_at = float(got["t"])
        return self

    def ask(self, command: str, timeout: float = 30.0) -> dict[str, Any]:
        self.proc.stdin.write((command + "\n").encode())  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        return self.line(timeout)

    def quit(self, timeout: float = 60.0) -> dict[str, Any]:
        """A clean shutdown(wait=True); returns its answer (with ``took``)."""
        got = self.ask("quit", timeout)
        if got.get("quitting"):
            got = self.line(timeout)
        self.proc.wait(timeout)
        self._close_streams()
        return got

    def stderr(self) -> str:
        self._err.flush()
        with open(self.err_path, errors="replace") as f:
            return f.read()

    def _close_streams(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:
                pass

    def close(self) -> None:
        """End whatever is left (a test's teardown)."""
        if self.alive():
            try:
                self.kill()
            except (subprocess.TimeoutExpired, OSError):
                pass
        for p in self.left():
            try:
                p.send_signal(signal.SIGCONT)
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(self.left(), timeout=10)
        self._close_streams()
        self._err.close()
