"""The dispatcher process dies (SIGKILL, or an internal error) mid-load.

Every unfinished handle must fail promptly with a SchedulerError - result()
never hangs - finished handles keep their results, every worker (and what
the workers started) is gone within seconds, the broken Scheduler refuses
new work cleanly, and a new Scheduler in the same process works.
"""

from __future__ import annotations

import signal
import time

import psutil
import pytest
import rel_tasks
from rel_helpers import descendants, dispatcher, wait_all_gone, wait_for_lines

import procsched
from procsched import SchedulerError, TaskState

#: How soon after the dispatcher dies every handle must have failed.
PROMPT = 5.0


def _load(s: procsched.Scheduler, tmp_path) -> tuple[list, list, str]:
    """Put a two-worker scheduler under load: finished, running, pending and
    periodic tasks; return (finished handles, unfinished handles, started-file)."""
    started = str(tmp_path / "started")
    finished = [s.submit(rel_tasks.hello, i) for i in range(20)]
    for h in finished:
        h.result(timeout=30)
    running = [s.schedule(rel_tasks.touch_and_sleep, args=(started, 3600), priority=10) for _ in range(2)]
    wait_for_lines(started, 2)
    pending = [s.schedule(rel_tasks.hello, 3600, args=(i,)) for i in range(50)]
    pending += [s.submit(rel_tasks.hello, i) for i in range(50)]  # queued: every worker is busy
    periodic = [s.schedule_at_fixed_rate(rel_tasks.nothing, 3600, initial_delay=1800) for _ in range(5)]
    periodic += [s.schedule_with_fixed_delay(rel_tasks.nothing, 0.05) for _ in range(1)]
    return finished, running + pending + periodic, started


@pytest.mark.timeout(60)
def test_sigkill_dispatcher_fails_every_unfinished_handle(new_scheduler, tmp_path):
    s = new_scheduler(2)
    finished, unfinished, _ = _load(s, tmp_path)
    proc = dispatcher(s)
    tree = descendants(proc.pid)
    workers = set(w["pid"] for w in s.stats()["workers"])
    assert workers <= {p.pid for p in tree}

    proc.send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    for h in unfinished:
        with pytest.raises(SchedulerError) as info:
            h.result(timeout=PROMPT)
        assert "dispatcher" in str(info.value)
        assert h.state is TaskState.FAILED and h.done()
    elapsed = time.monotonic() - t0
    assert elapsed < PROMPT, f"handles took {elapsed:.1f}s to fail"

    for i, h in enumerate(finished):  # what finished stays finished
        assert h.state is TaskState.DONE and h.result(0).startswith(f"hello {i} ")
    wait_all_gone(tree, 10)

    # The broken scheduler refuses work at once and says why; nothing hangs.
    assert s.pending() == 0
    with pytest.raises(SchedulerError, match="dispatcher"):
        s.submit(rel_tasks.hello)
    with pytest.raises(SchedulerError):
        s.stats()
    assert s.cancel(unfinished[0].id) is False
    t0 = time.monotonic()
    s.shutdown(wait=True)
    assert time.monotonic() - t0 < PROMPT

    # A new Scheduler in the same process works.
    with procsched.Scheduler(2) as fresh:
        assert fresh.submit(rel_tasks.hello, 7).result(timeout=30).startswith("hello 7 ")
        h = fresh.schedule_with_fixed_delay(rel_tasks.nothing, 0.01)
        assert fresh.handle(h.id) is h
        assert h.cancel()


@pytest.mark.timeout(60)
def test_sigkill_dispatcher_while_workers_run_trees(new_scheduler, tmp_path, reaper):
    """The workers' own children die with them (they are in the workers'
    process groups, and nobody is left to feed them)."""
    s = new_scheduler(2)
    pidfiles = [str(tmp_path / f"tree{i}") for i in range(2)]
    handles = [s.submit(rel_tasks.fork_tree_and_hang, p) for p in pidfiles]
    pids = set()
    for p in pidfiles:
        lines = wait_for_lines(p, 7)
        assert lines[-1] == "ready"
        pids |= {int(x) for x in lines[:-1]}
    procs = [psutil.Process(pid) for pid in pids]
    reaper.extend(procs)
    tree = descendants(dispatcher(s).pid)
    dispatcher(s).send_signal(signal.SIGKILL)
    for h in handles:
        with pytest.raises(SchedulerError):
            h.result(timeout=PROMPT)
    wait_all_gone(tree + procs, 10)


@pytest.mark.timeout(60)
def test_sigterm_dispatcher(new_scheduler):
    """SIGTERM is the dispatcher's own "kill everything and exit"."""
    s = new_scheduler(2)
    h = s.schedule(rel_tasks.hello, 3600)
    proc = dispatcher(s)
    tree = descendants(proc.pid)
    proc.send_signal(signal.SIGTERM)
    with pytest.raises(SchedulerError):
        h.result(timeout=PROMPT)
    wait_all_gone(tree + [proc], 10)


@pytest.mark.timeout(60)
def test_corrupt_command_stops_the_dispatcher_cleanly(new_scheduler, tmp_path):
    """A command the dispatcher cannot make sense of (a corrupt shared
    channel) is fatal - but the dispatcher must still die cleanly: exit, take
    its workers with it, and let every handle fail. It must never sit in
    multiprocessing's exit-time join of workers that wait for work."""
    s = new_scheduler(2)
    started = str(tmp_path / "started")
    running = s.submit(rel_tasks.touch_and_sleep, started, 3600)
    wait_for_lines(started, 1)
    pending = s.schedule(rel_tasks.hello, 3600)
    proc = dispatcher(s)
    tree = descendants(proc.pid)
    s._backend.send(("add", "not", "a", "valid", "command"))
    for h in (running, pending):
        with pytest.raises(SchedulerError, match="dispatcher"):
            h.result(timeout=PROMPT)
    wait_all_gone(tree + [proc], 10)
    with procsched.Scheduler(1) as fresh:
        assert fresh.submit(rel_tasks.hello, 1).result(timeout=30).startswith("hello 1 ")
