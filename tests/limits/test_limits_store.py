"""Shared limits with a store: the limit holds across two instances on one
SQLite file and on one PostgreSQL database (counted in the store's claim
transaction). Overlaps are read from the tasks' own O_APPEND log; starts
are seen on a rendezvous socket (blocking, with deadlines)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import procsched
from tests.limits.limit_tasks import Rendezvous, hold, most_at_once
from tests.store.conftest import pg_url as pg_url
from tests.store.conftest import store_url as store_url

WAIT = 60
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


@pytest.fixture
def meet(tmp_path: Any) -> Iterator[Rendezvous]:
    rendezvous = Rendezvous(str(tmp_path / "meet.sock"))
    yield rendezvous
    rendezvous.close()


@pytest.mark.timeout(120)
def test_a_limit_holds_across_two_instances_on_one_store(store_url: str, meet: Rendezvous, tmp_path: Any) -> None:
    log = str(tmp_path / "log")
    one = procsched.Scheduler(2, store=store_url, limits={"db": 2}, lease=5)
    two = procsched.Scheduler(3, store=store_url, limits={"db": 2}, lease=5)
    try:
        handles = {}
        for i in range(3):
            handles[f"a{i}"] = one.schedule(hold, args=(log, f"a{i}", meet.path), key=f"a{i}", group="db")
        running = {meet.started(), meet.started()}
        # the limit is full (on the store): the other instance's runs, due now, wait
        for i in range(3):
            handles[f"b{i}"] = two.schedule(hold, args=(log, f"b{i}", meet.path), key=f"b{i}", group="db")
        # a run of no group, after them: when it starts, they were claimed (and refused) before it
        probe = two.schedule(hold, args=(log, "probe", meet.path), key="probe", priority=-1)
        assert meet.started() == "probe"
        meet.release("probe")
        assert probe.result(timeout=WAIT) == "probe"
        seen = set(running)
        while running:
            name = sorted(running)[0]
            meet.release(name)
            assert handles[name].result(timeout=WAIT) == name
            running.discard(name)
            if len(seen) < 6:
                started = meet.started()
                seen.add(started)
                running.add(started)
        assert seen == set(handles)
    finally:
        one.shutdown(wait=True, cancel_futures=True)
        two.shutdown(wait=True, cancel_futures=True)
    assert most_at_once(log, set(handles)) == 2


@pytest.mark.timeout(120)
def test_a_sigkill_while_holding_a_unit_never_leaks_it(store_url: str, meet: Rendezvous, tmp_path: Any) -> None:
    log = str(tmp_path / "log")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, *sys.path]))
    child = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "limit_child.py"), store_url, log, meet.path],
        stdin=subprocess.PIPE,
        env=env,
    )
    try:
        assert meet.started() == "held"  # the child's run holds the group's only unit
        os.kill(child.pid, signal.SIGKILL)  # its dispatcher and worker follow it (they watch their parent)
        child.wait(timeout=WAIT)
        with procsched.Scheduler(1, store=store_url, limits={"db": 1}, lease=1) as s:
            after = s.schedule(hold, args=(log, "after", meet.path), key="after", group="db")
            # the dead instance's lease ends, its run is recorded crashed: the unit is free
            assert meet.started() == "after"
            meet.release("after")
            assert after.result(timeout=WAIT) == "after"
            held = s.history("held")
        assert [r.outcome for r in held] == ["crashed"]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
