from __future__ import annotations

import os

import psutil
import pytest

import procsched

RUNNERS = ["processes", "threads"]


def _descendants() -> set[int]:
    try:
        return {p.pid for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return set()


@pytest.fixture(params=RUNNERS)
def runner(request) -> str:
    return request.param


@pytest.fixture
def make_scheduler():
    """Start schedulers; at teardown shut them down and check nothing is left."""
    made: list[procsched.Scheduler] = []
    before = _descendants()

    def make(*args, **kwargs) -> procsched.Scheduler:
        scheduler = procsched.Scheduler(*args, **kwargs)
        made.append(scheduler)
        return scheduler

    yield make
    for scheduler in made:
        scheduler.shutdown(wait=True, cancel_futures=True)
    left = [psutil.Process(p) for p in _descendants() - before if psutil.pid_exists(p)]
    gone, alive = psutil.wait_procs(left, timeout=5)
    assert not alive, f"processes left behind: {alive}"


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return str(path)
