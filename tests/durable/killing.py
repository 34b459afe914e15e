"""The SIGKILL fault tests' shared parts: a user program killed at random
instants and restarted, then the store and the runs' own records checked.

A child program (fault_child.py, prefetch_child.py) runs keyed tasks on a
store; each run appends ``run attempt scheduled_us`` to ``<out>.<key>`` and
the child prints a line per event, which is what the test waits on (never a
sleep); the instant of each kill is random.
"""

from __future__ import annotations

import os
import random
import select
import subprocess
import sys
import time

import pytest

from procsched._store import open_store

HERE = os.path.dirname(os.path.abspath(__file__))


class Child:
    """A child program (``script`` in this directory), read line by line with a deadline."""

    def __init__(self, script: str, db: str, out: str, clean: bool = False) -> None:
        args = [sys.executable, os.path.join(HERE, script), db, out] + (["clean"] if clean else [])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), *sys.path]))
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.buf = b""

    def line(self, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        while b"\n" not in self.buf:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise AssertionError("the child said nothing in time")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise AssertionError(f"the child exited ({self.proc.wait()})")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode()

    def until(self, text: str) -> None:
        while self.line() != text:
            pass

    def close(self) -> None:
        self.proc.stdout.close()  # type: ignore[union-attr]
        self.proc.stdin.close()  # type: ignore[union-attr]


def lines(path: str) -> list[tuple[int, int, int]]:
    """(run, attempt, scheduled_us) per run that started."""
    try:
        with open(path) as f:
            return [tuple(int(x) for x in line.split()[:3]) for line in f if line.strip()]  # type: ignore[misc]
    except FileNotFoundError:
        return []


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store(request: pytest.FixtureRequest, tmp_path: str) -> str:
    """A store URL that keeps every run of the test in the history (the
    default keeps the last 100 per task: the crashes checked may go)."""
    keep = "keep_runs=100000"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/s.db?{keep}"
    return f"{request.getfixturevalue('pg_url')}&{keep}"


def kill_and_restart(script: str, db: str, out: str, *, most_lines: int, last_lines: int) -> None:
    """SIGKILL ``script`` 20 times, each after 0..``most_lines`` of its lines
    and a random instant; then run it once more to a clean stop after
    ``last_lines`` lines. ``PROCSCHED_FAULT_SEED`` fixes the instants."""
    rng = random.Random(int(os.environ.get("PROCSCHED_FAULT_SEED", "0")) or None)
    for _ in range(20):
        child = Child(script, db, out)
        child.until("ready")
        for _ in range(rng.randint(0, most_lines)):
            child.line()
        time.sleep(rng.uniform(0, 0.02))  # a random instant (not a synchronisation)
        child.proc.kill()
        child.proc.wait()  # reaped: its pid is gone, so the restart takes over at once
        child.close()
    child = Child(script, db, out, clean=True)
    child.until("ready")
    for _ in range(last_lines):
        child.line()
    child.proc.stdin.write(b"stop\n")  # type: ignore[union-attr]
    child.proc.stdin.flush()  # type: ignore[union-attr]
    child.until("closed")
    assert child.proc.wait(30) == 0
    child.close()


def check_exact(db: str, out: str, key: str, period_us: int, retried: bool) -> int:
    """After the kills: nothing run twice, nothing lost, nothing run
    unrecorded, every slot on its grid, crashes retried as the task's Retry
    says (3 attempts when ``retried``). Returns the runs recorded crashed."""
    with open_store(db) as store:
        history = store.history(key, 100_000)
    ran = lines(f"{out}.{key}")
    assert history and ran, key
    assert len(ran) == len({(r, a) for r, a, _s in ran}), f"{key}: a run attempt ran twice"
    assert all(h.outcome is not None for h in history), f"{key}: a run left in flight"
    first = history[0].run
    runs = sorted({h.run for h in history})
    assert runs == list(range(first, runs[-1] + 1)), f"{key}: a run number is missing (a slot lost)"
    recorded = {(h.run, h.attempt): h for h in history}
    assert all((r, a) in recorded for r, a, _s in ran if r >= first), f"{key}: a run ran unrecorded"
    ran_set = {(r, a) for r, a, _s in ran}
    assert all(k in ran_set for k, h in recorded.items() if h.outcome == "ok"), f"{key}: an ok run never ran"
    base = next(h for h in history if h.attempt == 1)
    for h in history:  # the grid: attempt 1 of run n is slot n
        if h.attempt == 1:
            assert abs((h.scheduled_ns - base.scheduled_ns) // 1000 - (h.run - base.run) * period_us) <= 1000
    by_run: dict[int, list] = {}
    for h in history:
        by_run.setdefault(h.run, []).append(h)
    for run, attempts in by_run.items():
        assert [h.attempt for h in attempts] == list(range(1, len(attempts) + 1)), (key, run)
        if retried and attempts[-1].outcome == "crashed":
            assert attempts[-1].attempt == 3, f"{key} run {run}: a crash the Retry covers was not retried"
        if not retried:
            assert len(attempts) == 1
    return sum(h.outcome == "crashed" for h in history)
