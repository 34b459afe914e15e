"""Helpers of the several-schedulers tests: scheduler processes, their files."""

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
CHILD = os.path.join(HERE, "peer_child.py")


class Peer:
    """A scheduler process (peer_child.py): its user process, dispatcher and workers."""

    def __init__(self, name: str, cfg: dict[str, Any], tmp: str) -> None:
        self.name = name
        self.stderr_path = os.path.join(tmp, f"{name}.{time.monotonic_ns()}.err")
        env = dict(os.environ, PYTHONPATH=ROOT)
        self.proc = subprocess.Popen(
            [sys.executable, CHILD, json.dumps({**cfg, "name": name})],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(self.stderr_path, "wb"),
            env=env,
            text=True,
            bufsize=1,
        )
        self.buf = ""
        self.pid = self.proc.pid

    def readline(self, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while "\n" not in self.buf:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    raise AssertionError(f"{self.name}: no line in {timeout}s; stderr:\n{self.stderr()[-3000:]}")
                chunk = os.read(fd, 65536).decode()
                if not chunk:
                    raise AssertionError(f"{self.name} exited ({self.proc.poll()}); stderr:\n{self.stderr()[-3000:]}")
                self.buf += chunk
        line, self.buf = self.buf.split("\n", 1)
        return line

    def ready(self, timeout: float = 60.0) -> Peer:
        line = self.readline(timeout)
        assert line.startswith("ready"), line
        return self

    def ask(self, command: str, timeout: float = 30.0) -> Any:
        self.proc.stdin.write(command + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        line = self.readline(timeout)
        return line if command.startswith("add") else json.loads(line)

    def tree(self) -> list[psutil.Process]:
        try:
            me = psutil.Process(self.pid)
            return [me, *me.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def dispatcher(self) -> psutil.Process:
        """The dispatcher process (the one holding the store registration and lease)."""
        for p in psutil.Process(self.pid).children():
            if "procsched._runtime._dispatcher" in " ".join(p.cmdline()):
                return p
        raise AssertionError(f"{self.name}: no dispatcher among {psutil.Process(self.pid).children()}")

    def signal(self, sig: int, procs: list[psutil.Process] | None = None) -> None:
        for p in self.tree() if procs is None else procs:
            try:
                p.send_signal(sig)
            except psutil.NoSuchProcess:
                pass

    def kill(self, wait: bool = True) -> list[psutil.Process]:
        """SIGKILL the whole scheduler (a host dies): user process, dispatcher,
        workers; returns them. The user process is reaped at once (its pid,
        the registration's, is gone); with ``wait``, also wait until the rest
        are gone (orphans: reaped by init, here up to ~2 s later)."""
        procs = self.tree()
        self.signal(signal.SIGKILL, procs)
        self.proc.wait(10)
        if wait:
            psutil.wait_procs(procs, timeout=10)
        return procs

    def quit(self, timeout: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
            assert self.readline(timeout) == "closed"
            self.proc.wait(timeout)

    def stderr(self) -> str:
        with open(self.stderr_path, errors="replace") as f:
            return f.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:
                pass


def lines(path: str) -> list[tuple[int, int, int, str, int]]:
    """(run, attempt, scheduled_at_us, peer, worker_pid) per run started."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        out = []
        for line in f:
            run, attempt, at, peer, pid = line.split()
            out.append((int(run), int(attempt), int(at), peer, int(pid)))
        return out


def wait_for(predicate: Any, timeout: float, what: str, peers: list[Peer] = ()) -> Any:  # type: ignore[assignment]
    """Wait (on a file or a store the processes write) until ``predicate()``; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            logs = "".join(f"\n--- {p.name} stderr:\n{p.stderr()[-2000:]}" for p in peers)
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{logs}")
        time.sleep(0.02)
    return result


def check_once(rows: list[tuple[int, int, int, str, int]], period_us: int | None = None) -> None:
    """Every run number and every slot at most once; slots on the grid."""
    firsts = [r for r in rows if r[1] == 1]
    runs = [r[0] for r in firsts]
    dup_runs = sorted({n for n in runs if runs.count(n) > 1})
    assert not dup_runs, f"runs started twice: {dup_runs}"
    slots = sorted(r[2] for r in firsts)
    dup_slots = sorted({s for s in slots if slots.count(s) > 1})
    assert not dup_slots, f"slots run twice: {dup_slots}"
    gaps = [b - a for a, b in zip(slots, slots[1:])]
    # A worker reads its run's wall time as scheduled + (time_ns() - its monotonic
    # start): a preemption between the two readings makes it late by that much
    # (milliseconds on a loaded machine). So two runs of one slot are two lines
    # within half a period, and a slot is on the grid within a quarter period.
    near = 1000 if period_us is None else period_us // 2
    assert all(g >= near for g in gaps), f"two runs of one slot (times within {near} us): {gaps}"
    if period_us is not None:
        off = [g for g in gaps if abs(g - period_us * round(g / period_us)) > period_us // 4]
        assert not off, f"slots off the grid of {period_us} us: {off[:10]}"
