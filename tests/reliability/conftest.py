"""Fixtures for the reliability tests (helpers live in rel_helpers.py, which
test modules - and the user programs some tests start - import by name)."""

from __future__ import annotations

from typing import Any

import psutil
import pytest
from rel_helpers import alive, descendants, stop, wait_all_gone

import procsched


@pytest.fixture
def new_scheduler():
    """Start Schedulers; at teardown shut them down and check that no process
    this test started is left behind (killing any that are, so one failure
    does not cascade)."""
    before = {p.pid for p in descendants()}
    made: list[procsched.Scheduler] = []

    def make(*args: Any, **kwargs: Any) -> procsched.Scheduler:
        scheduler = procsched.Scheduler(*args, **kwargs)
        made.append(scheduler)
        return scheduler

    yield make
    for scheduler in made:
        stop(scheduler)
    left = [p for p in descendants() if p.pid not in before]
    try:
        wait_all_gone(left, 10)
    finally:
        for proc in alive(left):
            try:
                proc.kill()
            except psutil.Error:
                pass


@pytest.fixture
def reaper():
    """A list of processes a test started on purpose (trees, orphans); any
    still alive at teardown are killed, so a failed test leaves nothing."""
    procs: list[psutil.Process] = []
    yield procs
    for proc in alive(procs):
        try:
            proc.kill()
        except psutil.Error:
            pass


@pytest.fixture
def log_path(tmp_path) -> str:
    return str(tmp_path / "runs.log")
