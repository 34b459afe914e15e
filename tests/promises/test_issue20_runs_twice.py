"""Issue 20, "Runs twice or on two instances at once" (item 1): a fenced
instance starts, after SIGCONT, the runs it had been given ahead before it
was stopped - runs another instance has meanwhile recorded crashed and
retried. The promise: a run starts only while its claim is known valid.

Real instances (tests/campaign/instance.py) on a real PostgreSQL server
(the store's clock judges leases; on SQLite a stopped instance may hold the
file's write lock, a documented limit); every run appends a line to a log.
"""

from __future__ import annotations

import pytest

from tests.campaign import storesql
from tests.promises.helpers import log, make_fifo, release, starts, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
TASKS = "tests.promises.tasks"
RETRY = {"attempts": 3, "delay": 0, "on": ["crashed"]}


FAST = ["k1", "k2", "k3"]


def _blocked_with_runs_given_ahead(instances, pg_url, tmp_path) -> tuple:
    """A: one worker, blocked in run 1 of "long" (on a FIFO), with a run of
    each fast task given ahead to it (claimed: recorded in flight). (A, the
    runs' log, the FIFO)."""
    out, fifo = str(tmp_path / "runs.log"), make_fifo(str(tmp_path / "hold"))
    specs = [{"key": "long", "kind": "rate", "period": 0.5, "fn": f"{TASKS}:hold_first", "args": [out, fifo, "long"]}]
    specs += [
        {"key": k, "kind": "rate", "period": 0.1, "fn": f"{TASKS}:mark", "args": [out, k], "retry": RETRY} for k in FAST
    ]
    a = instances("A", {"store": pg_url, "lease": 1.0, "workers": 1, "tasks": specs}).ready()
    wait_until(lambda: [x for x in starts(out) if x.tag == "long"], 30, "A's worker to block in run 1 of long")
    in_flight = "SELECT key FROM procsched_runs WHERE outcome IS NULL"
    wait_until(
        lambda: {r[0] for r in storesql.query(pg_url, in_flight)} >= {"long", *FAST},
        30,
        "A to claim a run of each fast task (given ahead, queued behind the blocked one)",
    )
    return a, out, fifo


def test_a_fenced_instance_never_starts_the_runs_it_was_given_ahead_before_it_stopped(
    instances, pg_url, tmp_path
) -> None:
    a, out, fifo = _blocked_with_runs_given_ahead(instances, pg_url, tmp_path)
    b = instances("B", {"store": pg_url, "lease": 1.0, "workers": 2}).ready()  # adopts the tasks, A holds them
    a.stop()  # A's whole tree, past its lease
    taken = "SELECT key, run, attempt FROM procsched_runs WHERE outcome = 'crashed' AND error_type = 'SchedulerDied'"
    crashed = wait_until(
        lambda: {r for r in storesql.query(pg_url, taken) if r[0] in FAST},
        30,
        "B to take A over (A's runs given ahead recorded crashed)",
    )
    wait_until(
        lambda: [x for x in starts(out) if x.inst == "B" and x.tag in FAST and x.attempt == 2], 30, "B to retry them"
    )
    a.cont()
    release(fifo)  # A's worker goes on: its run ends, then its queue
    end = wait_until(
        lambda: [x for x in log(out) if x.tag == "long" and x.ev == "end" and x.inst == "A"], 30, "A's long run to end"
    )[0]
    wait_until(lambda: len([x for x in starts(out) if x.t > end.t]) >= 10, 30, "runs to go on after it")
    for inst in (a, b):
        assert inst.quit()["closed"]
    again = [x for x in starts(out) if x.inst == "A" and (x.tag, x.run, x.attempt) in crashed]
    assert not again, (
        f"A started, after SIGCONT, runs B had recorded crashed (and retried): {again}; taken over: {sorted(crashed)}"
    )
    both = {(x.tag, x.run) for x in starts(out) if x.inst == "A"} & {
        (x.tag, x.run) for x in starts(out) if x.inst == "B"
    }
    assert not both, f"the same (key, run) ran on both instances: {sorted(both)}"


SLOW_IMPORT = '''"""A task module whose import, in instance A's workers only, waits on a FIFO."""
import multiprocessing
import os

if multiprocessing.current_process().name.startswith("procsched-worker") and os.environ.get("CAMPAIGN_INSTANCE") == "A":
    with open({fifo!r}) as f:
        f.read()

from tests.promises import tasks  # noqa: E402


def mark(path, tag=""):
    tasks.mark(path, tag)
'''


def test_a_run_stopped_while_its_worker_loads_it_never_starts_once_taken_over(instances, pg_url, tmp_path) -> None:
    """The fault campaign, seed 2222: a fresh worker was given a run and
    stopped (SIGSTOP, with its whole instance) while importing the task's
    module; another instance took over and retried the run; after SIGCONT
    the import ended and the run started - after its retry. The worker had
    taken the run's ticket before loading it. Here A's worker blocks in the
    import (on a FIFO) while A is stopped, taken over and continued."""
    from tests.campaign.instances import ROOT

    out, fifo = str(tmp_path / "runs.log"), make_fifo(str(tmp_path / "import"))
    (tmp_path / "slow_import_task.py").write_text(SLOW_IMPORT.format(fifo=fifo))
    env = {"PYTHONPATH": f"{ROOT}:{tmp_path}", "CAMPAIGN_LOG_INFO": "1"}
    spec = {"key": "k", "kind": "rate", "period": 0.5, "fn": "slow_import_task:mark", "args": [out, "k"]}
    spec["retry"] = RETRY
    a = instances("A", {"store": pg_url, "lease": 1.0, "workers": 1, "tasks": [spec]}, env=env).ready()
    in_flight = "SELECT run, attempt FROM procsched_runs WHERE key = 'k' AND outcome IS NULL"
    assert wait_until(lambda: storesql.query(pg_url, in_flight), 30, "A to give run 1 (its worker imports)") == [(1, 1)]
    a.stop()
    b = instances("B", {"store": pg_url, "lease": 1.0, "workers": 1}, env=env).ready()
    wait_until(lambda: [x for x in starts(out) if x.inst == "B" and x.run == 1], 30, "B to take A over and retry run 1")
    a.cont()
    wait_until(lambda: "was taken over" in a.stderr(), 30, "A to find it was taken over")
    release(fifo)  # the import ends
    wait_until(lambda: len({x.run for x in starts(out)}) >= 4, 30, "k to go on")
    for inst in (a, b):
        assert inst.quit()["closed"]
    stale = [x for x in starts(out) if x.inst == "A" and x.run == 1]
    assert not stale, f"A started run 1 after SIGCONT, B having retried it: {stale}"


def test_a_run_given_ahead_waits_for_a_check_when_its_dispatcher_is_stuck_past_the_lease(
    instances, pg_url, tmp_path
) -> None:
    """The dispatcher alone is stuck (here SIGSTOPped; in life, blocked in a
    store call on a stalled connection) while its worker goes on: the worker
    ends its long run, then would start the keyed runs given ahead behind it
    - after the lease they were given under ran out, another instance having
    taken this one over and retried them. A keyed run carries a start-by
    time; past it, the worker asks its dispatcher to check first. The
    worker is never stopped here (a SIGCONT makes it check anyway)."""
    import signal

    a, out, fifo = _blocked_with_runs_given_ahead(instances, pg_url, tmp_path)
    b = instances("B", {"store": pg_url, "lease": 1.0, "workers": 2}).ready()
    taken = "SELECT key, run, attempt FROM procsched_runs WHERE outcome = 'crashed' AND error_type = 'SchedulerDied'"
    (user,) = [p for p in a.look() if p.pid == a.pid]
    (dispatcher,) = [p for p in user.children() if "procsched._runtime._dispatcher" in p.cmdline()]
    dispatcher.send_signal(signal.SIGSTOP)
    try:
        crashed = wait_until(
            lambda: {r for r in storesql.query(pg_url, taken) if r[0] in FAST},
            30,
            "B to take A over (A's runs given ahead recorded crashed)",
        )

        def retried() -> list:
            return [x for x in starts(out) if x.inst == "B" and x.tag in FAST and x.attempt == 2]

        wait_until(retried, 30, "B to retry them")
        release(fifo)  # A's worker goes on (its dispatcher still stuck): its run ends, then its queue
        end = wait_until(
            lambda: [x for x in log(out) if x.tag == "long" and x.ev == "end" and x.inst == "A"], 30, "long to end"
        )[0]
        wait_until(lambda: len([x for x in starts(out) if x.t > end.t]) >= 5, 30, "B's runs to go on after it")
    finally:
        dispatcher.send_signal(signal.SIGCONT)
    wait_until(lambda: "was taken over" in a.stderr(), 30, "A to find it was taken over")
    for inst in (a, b):
        assert inst.quit()["closed"]
    again = [x for x in starts(out) if x.inst == "A" and (x.tag, x.run, x.attempt) in crashed]
    assert not again, f"A's worker started runs B had recorded crashed (and retried): {again}"
