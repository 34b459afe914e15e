"""The user's process dies; nothing it started may outlive it.

A small user program runs in a subprocess with a Scheduler under load:
running tasks that started their own children (one ignores SIGTERM, one was
orphaned, one task returned leaving a background process), pending
one-shots, periodic tasks. It prints "ready" once its runs are under way. The test lists every
descendant of that program with psutil, then the program dies - SIGKILL
(no atexit, no cleanup: the dispatcher must notice on its own), SIGTERM, or
an unhandled exception (the normal interpreter exit) - and every one of those
processes must be gone within a few seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from rel_helpers import alive, descendants, read_file, wait_all_gone

HERE = os.path.dirname(os.path.abspath(__file__))

PROGRAM = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, {here!r})
    import procsched, rel_tasks
    from rel_helpers import wait_for_lines

    mode, workdir = sys.argv[1], sys.argv[2]
    started = os.path.join(workdir, "started")
    s = procsched.Scheduler(3)
    s.submit(rel_tasks.fork_tree_and_hang, os.path.join(workdir, "tree"))
    s.submit(rel_tasks.ignore_sigterm_and_hang, started)
    s.submit(rel_tasks.spawn_background_and_return, os.path.join(workdir, "background"))
    wait_for_lines(os.path.join(workdir, "tree"), 7)
    wait_for_lines(started, 1)
    wait_for_lines(os.path.join(workdir, "background"), 1)
    s.submit(rel_tasks.touch_and_sleep, started, 3600)
    wait_for_lines(started, 2)
    for i in range(20):
        s.schedule(rel_tasks.hello, 3600, args=(i,))
    for period in (0.01, 0.05, 60):
        s.schedule_at_fixed_rate(rel_tasks.nothing, period)
    s.schedule_with_fixed_delay(rel_tasks.nothing, 0.02)
    print("ready", flush=True)
    sys.stdin.readline()  # the test has listed the processes
    if mode == "exception":
        raise RuntimeError("the user program crashes")
    sys.stdin.read()  # until killed
    """
)


def _start(tmp_path, mode: str) -> tuple[subprocess.Popen, list[psutil.Process]]:
    script = tmp_path / "user_program.py"
    script.write_text(PROGRAM.format(here=HERE))
    proc = subprocess.Popen(
        [sys.executable, str(script), mode, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if line != "ready\n":
        proc.kill()
        raise AssertionError(f"the user program did not start: {line!r} {proc.stderr.read()}")
    tree = descendants(proc.pid)
    return proc, tree


def _extra_pids(tmp_path) -> list[psutil.Process]:
    """Processes the tasks started and reported (some were orphaned on purpose)."""
    procs = []
    for name in ("tree", "background", "started"):
        for line in read_file(str(tmp_path / name)).splitlines():
            if line.isdigit():
                try:
                    procs.append(psutil.Process(int(line)))
                except psutil.NoSuchProcess:
                    pass
    return procs


def _all_alive(extra: list[psutil.Process]) -> None:
    """The processes the tasks reported - 3 workers, a tree of 5, a background
    process - all run before the user process dies."""
    assert len(extra) == 9, [p.pid for p in extra]
    dead = [p.pid for p in extra if p not in alive(extra)]
    assert not dead, f"died before the test began: {dead}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_user_process_killed(tmp_path, sig):
    proc, tree = _start(tmp_path, "killed")
    extra = _extra_pids(tmp_path)
    everything = tree + [p for p in extra if p.pid not in {t.pid for t in tree}]
    _all_alive(extra)
    proc.send_signal(sig)
    assert proc.wait(10) == -sig
    t0 = time.monotonic()
    wait_all_gone(everything, 10)
    print(f"\n{len(everything)} descendants gone {time.monotonic() - t0:.2f}s after the user process")


@pytest.mark.timeout(60)
def test_user_process_dies_of_unhandled_exception(tmp_path):
    """The interpreter exits normally (atexit runs) with the scheduler never
    shut down: its work is stopped, not waited for - hung runs and tasks due
    in an hour must not hang the exit - and nothing is left behind."""
    proc, tree = _start(tmp_path, "exception")
    extra = _extra_pids(tmp_path)
    everything = tree + [p for p in extra if p.pid not in {t.pid for t in tree}]
    _all_alive(extra)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    t0 = time.monotonic()
    code = proc.wait(30)
    stderr = proc.stderr.read()
    assert code == 1 and "RuntimeError: the user program crashes" in stderr, stderr
    assert time.monotonic() - t0 < 10
    wait_all_gone(everything, 10)
