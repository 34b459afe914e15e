"""Helpers for the ``procsched`` command tests: run it as a subprocess, and
check that nothing it started is left behind."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]

QUICK_JOBS = """
    import os
    from procsched import every, once

    @every(0.1)
    def tick():
        return os.getpid()

    @every(0.15, fixed_delay=True, name="steady")
    def work():
        sum(range(1000))

    @once(delay=0.05)
    def boom():
        raise RuntimeError("boom once")
"""


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("COLUMNS", None)
    return env


def cli(*args: str, timeout: float = 60, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run ``python -m procsched ARGS`` to completion."""
    return subprocess.run(
        [sys.executable, "-m", "procsched", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli_env(),
        **kwargs,  # type: ignore[call-overload]
    )


def cli_here(*args: str, cwd: object = None) -> subprocess.CompletedProcess[str]:
    """``procsched ARGS`` run by its ``main()`` in this process, with the
    result ``cli()`` gives: for the quick commands (jobs, history, remove,
    next) that tests call many times, sparing an interpreter start each."""
    from procsched._cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd or os.getcwd()), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse
            code = int(exc.code or 0)
    return subprocess.CompletedProcess(["procsched", *args], code, out.getvalue(), err.getvalue())


def start_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "procsched", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )


def read_until(stream: object, needle: str, limit: int = 10_000) -> list[str]:
    """Lines from ``stream`` up to and including the first that contains
    ``needle`` (the test's own timeout guards against a hang)."""
    seen = []
    for _ in range(limit):
        line = stream.readline()  # type: ignore[attr-defined]
        if not line:
            raise AssertionError(f"stream ended before {needle!r}; got:\n{''.join(seen)}")
        seen.append(line)
        if needle in line:
            return seen
    raise AssertionError(f"{needle!r} not in the first {limit} lines")


def assert_all_gone(procs: list[psutil.Process], timeout: float = 15) -> None:
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"left behind: {[(p.pid, p.cmdline()) for p in alive]}"


def run_in_pty(
    *args: str,
    pythonpath: str | None = None,
    columns: int = 150,
    lines: int = 50,
    extra_env: dict[str, str] | None = None,
) -> tuple[int, str]:
    """Run ``python -m procsched ARGS`` on a pseudo-terminal, 150 columns wide;
    return its exit status and everything it printed, without ANSI codes."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    env = dict(cli_env(), TERM="xterm", COLUMNS=str(columns), LINES=str(lines), **(extra_env or {}))
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([pythonpath, env["PYTHONPATH"]])
    proc = subprocess.Popen(
        [sys.executable, "-m", "procsched", *args], stdin=follower, stdout=follower, stderr=follower, env=env
    )
    os.close(follower)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 30)
            assert ready, "no output for 30 s"
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the other side is closed
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(30)
    finally:
        proc.kill()
        os.close(leader)
    return code, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode(errors="replace"))


NS = 1_000_000_000
#: The stored history's first slot (UTC ns): 2026-09-21T14:13:20Z.
T0 = 1_790_000_000 * NS


def fill_store(store) -> object:
    """Two keyed tasks, written as an instance writes them: "report" (every
    minute) ran twice - run 1 ok on worker 4242, a slot skipped (overlap),
    run 2 a manual run that raised ValueError (with its traceback) - and
    "idle", paused. Returns the instance's registration."""
    from procsched._store import TaskDefinition, TaskState

    batch = store.batch()
    for key in ("report", "idle"):
        batch.upsert(
            TaskDefinition(key, "jobs:f", b"", {"kind": "fixed_rate", "period_ns": 60 * NS}, {"name": key}),
            TaskState(next_due_ns=T0),
        )
    assert batch.commit().ok
    assert store.pause("idle")
    me = store.register()
    for build in (
        lambda b: b.started("report", 1, 1, T0, T0 + NS // 100, worker_pid=4242),
        lambda b: b.finished("report", 1, 1, "ok", T0 + NS // 10, T0 + 60 * NS, worker_pid=4242),
        lambda b: b.skipped("report", T0 + 60 * NS, "overlap"),
        lambda b: b.started("report", 2, 1, T0 + 90 * NS, T0 + 90 * NS, cause="manual", worker_pid=4242),
        lambda b: b.finished(
            "report",
            2,
            1,
            "error",
            T0 + 91 * NS,
            T0 + 120 * NS,
            worker_pid=4242,
            error_type="ValueError",
            error_message="bad\nluck",
            error_traceback="Traceback (most recent call last):\nValueError: bad\nluck\n",
        ),
    ):
        batch = store.batch(me)
        build(batch)
        assert batch.commit().ok
    return me
