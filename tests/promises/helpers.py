"""Helpers of the issue-20 reproductions: waiting with a deadline, the
tasks' logs, user programs in subprocesses, process trees."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Look at a file, a store or a process every 20 ms until ``predicate()``
    is true; fail after ``timeout`` (a guard against a hang, not a guess)."""
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)
    return result


@dataclass(frozen=True)
class Line:
    """One line a run wrote (tasks._me)."""

    ev: str  # "start" or "end"
    tag: str
    run: int
    attempt: int
    slot_us: int | None
    pid: int
    t: float  # time.time() when written
    inst: str  # CAMPAIGN_INSTANCE of the writer's scheduler


def log(path: str) -> list[Line]:
    try:
        with open(path) as f:
            return [Line(**json.loads(x)) for x in f if x.strip()]
    except FileNotFoundError:
        return []


def starts(path: str) -> list[Line]:
    return [x for x in log(path) if x.ev == "start"]


def make_fifo(path: str) -> str:
    os.mkfifo(path, 0o600)
    return path


def release(fifo: str, timeout: float = 30.0) -> None:
    """Let the run blocked in ``tasks.hold`` on ``fifo`` go on (once it is
    blocked there: opening a FIFO to write without a reader fails)."""
    wait_until(lambda: _open_writer(fifo), timeout, f"a run to wait on {fifo}")


def _open_writer(fifo: str) -> bool:
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        return True
    except OSError:
        return False


def tree(pid: int) -> list[psutil.Process]:
    try:
        me = psutil.Process(pid)
        return [me, *me.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def kill_tree(procs: list[psutil.Process], sig: int = signal.SIGKILL) -> None:
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    left = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p)
        except psutil.NoSuchProcess:
            pass
    return left


class Program:
    """A user program (``body``, dedented) in a subprocess: lines on stdout,
    stderr kept in a file; ``close()`` ends its whole tree."""

    def __init__(self, tmp: Any, body: str, *args: str, env: dict[str, str] | None = None, name: str = "prog") -> None:
        script = os.path.join(str(tmp), f"{name}.py")
        with open(script, "w") as f:
            f.write("import os, sys, json, time\n" + textwrap.dedent(body))
        self.err_path = os.path.join(str(tmp), f"{name}.{time.monotonic_ns()}.err")
        self._err = open(self.err_path, "wb")
        full_env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE]), **(env or {}))
        self.proc = subprocess.Popen([sys.executable, script, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._err, env=full_env, text=True, bufsize=1)  # fmt: skip
        self._procs: list[psutil.Process] = tree(self.proc.pid)

    def line(self, timeout: float = 30.0) -> str:
        import selectors

        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
            if not sel.select(timeout):
                raise AssertionError(f"no line from the program in {timeout}s; stderr:\n{self.stderr()[-3000:]}")
        out = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not out:
            raise AssertionError(f"the program exited ({self.proc.wait()}); stderr:\n{self.stderr()[-3000:]}")
        self._procs = list({p.pid: p for p in [*self._procs, *tree(self.proc.pid)]}.values())
        return out.rstrip("\n")

    def expect(self, prefix: str, timeout: float = 30.0) -> str:
        while True:
            got = self.line(timeout)
            if got.startswith(prefix):
                return got

    def send(self, text: str) -> None:
        self.proc.stdin.write(text + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def stderr(self) -> str:
        self._err.flush()
        with open(self.err_path, errors="replace") as f:
            return f.read()

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def close(self) -> None:
        procs = list({p.pid: p for p in [*self._procs, *tree(self.proc.pid)]}.values())
        if self.proc.poll() is None:
            kill_tree(procs)
        kill_tree(alive(procs))
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        psutil.wait_procs(alive(procs), timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:
                pass
        self._err.close()
