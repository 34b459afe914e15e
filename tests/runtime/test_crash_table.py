"""The crash table: each fault costs its own run only (processes and Ray runners).

Ray does not say how its worker died: there, WorkerCrashedError carries
Ray's reason, not an exit code or a signal."""

from __future__ import annotations

import os
import pickle
import signal

import psutil
import pytest
import rt_tasks as t
from rt_helpers import Waiter

import procsched

pytestmark = pytest.mark.timeout(60)
WORKERS = 2


def _read_pid(path, waiter: Waiter) -> int:
    return int(waiter.until(lambda: os.path.exists(path) and open(path).read().strip() or None).split()[0])


def _expect(handle, outcome: str, error: type[BaseException]):
    with pytest.raises(error) as info:
        handle.result(30)
    assert handle.state is procsched.TaskState.FAILED
    assert [r.outcome for r in handle.runs] == [outcome]
    return info.value


def case_segfault(s, tmp_path, waiter):
    err = _expect(s.submit(t.segfault), "crashed", procsched.WorkerCrashedError)
    if s.runner == "processes":
        assert err.signal == "SIGSEGV" and err.exitcode == -signal.SIGSEGV


def case_os_exit(s, tmp_path, waiter):
    err = _expect(s.submit(t.hard_exit, 7), "crashed", procsched.WorkerCrashedError)
    assert err.exitcode == (7 if s.runner == "processes" else None) and err.signal is None


def case_sys_exit(s, tmp_path, waiter):
    # SystemExit is an exception like any other: the worker catches it and lives.
    err = _expect(s.submit(t.sys_exit, 3), "error", SystemExit)
    assert err.code == 3


def case_sigkill_from_outside(s, tmp_path, waiter):
    path = str(tmp_path / "pid")
    handle = s.submit(t.report_pid_then_hang, path)
    os.kill(_read_pid(path, waiter), signal.SIGKILL)
    err = _expect(handle, "crashed", procsched.WorkerCrashedError)
    assert err.signal == ("SIGKILL" if s.runner == "processes" else None)


def case_hang_past_timeout(s, tmp_path, waiter):
    _expect(s.schedule(t.hang, timeout=0.3), "timeout", procsched.TaskTimeoutError)


def case_child_process_hangs(s, tmp_path, waiter):
    path = str(tmp_path / "child")
    handle = s.schedule(t.child_then_hang, args=(path,), timeout=1.0)
    _expect(handle, "timeout", procsched.TaskTimeoutError)
    child = _read_pid(path, waiter)
    try:
        psutil.Process(child).wait(5)  # the task's own child dies with its worker
    except psutil.NoSuchProcess:
        pass
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def case_unpicklable_argument(s, tmp_path, waiter):
    import threading

    before = s.pending()
    with pytest.raises(TypeError, match=r"args\[0\]"):
        s.submit(t.square, threading.Lock())
    assert s.pending() == before


def case_unpicklable_result(s, tmp_path, waiter):
    pids = {w["pid"] for w in s.stats()["workers"]}
    err = _expect(s.submit(t.unpicklable_result), "error", pickle.PicklingError)
    assert "cannot be pickled" in str(err)
    stats = s.stats()
    assert {w["pid"] for w in stats["workers"]} == pids  # the worker lives on
    assert sum(w["restarts"] for w in stats["workers"]) == 0


def case_raising_task(s, tmp_path, waiter):
    err = _expect(s.submit(t.raise_value_error, "boom"), "error", ValueError)
    assert str(err) == "boom"
    assert "raise_value_error" in str(err.__cause__)  # the remote traceback


def case_big_result(s, tmp_path, waiter):
    assert len(s.submit(t.big_result, 50 * 2**20).result(60)) == 50 * 2**20


CASES = [f for name, f in sorted(globals().items()) if name.startswith("case_")]


@pytest.fixture(params=["processes", "ray"])
def crash_runner(request) -> str:
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")
    return request.param


@pytest.mark.parametrize("case", CASES, ids=[f.__name__[5:] for f in CASES])
def test_fault_costs_only_its_run(case, crash_runner, make_scheduler, tmp_path):
    s = make_scheduler(WORKERS, runner=crash_runner)
    waiter = Waiter(s)
    before = [s.submit(t.square, i) for i in range(4)]
    later = s.schedule(t.square, 0.2, args=(9,))
    case(s, tmp_path, waiter)
    after = [s.submit(t.square, i) for i in range(4)]
    assert [h.result(30) for h in before] == [0, 1, 4, 9]
    assert [h.result(30) for h in after] == [0, 1, 4, 9]
    assert later.result(30) == 81
    stats = s.stats()
    assert len([w for w in stats["workers"] if w["pid"] is not None]) == WORKERS  # the pool is whole
    if s.runner == "processes":  # Ray's workers are virtual slots
        assert all(psutil.pid_exists(w["pid"]) for w in stats["workers"])
