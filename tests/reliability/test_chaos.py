"""Chaos: thousands of short runs while a thread SIGKILLs random workers.

The claim under test is the crash contract at scale: a SIGKILLed worker
costs exactly the run it held (outcome "crashed"), every other run happens
exactly once with outcome "ok", nothing is lost or run twice, and the pool
heals. Each run appends "task_id run pid" to a file with one O_APPEND write,
so after shutdown the file is the ground truth to hold ``handle.runs``
against.
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import random
import signal
import threading

import psutil
import pytest
import rel_tasks
from rel_helpers import dispatcher, pool_whole, wait_for_lines, wait_until

import procsched
from procsched import Priority, TaskState, WorkerCrashedError

ONE_SHOTS = 4000
PERIODIC = 20  # half fixed rate, half fixed delay
PERIODIC_RUNS = 50  # each cancels itself at this run number
PRIORITIES = [Priority.LOW, Priority.NORMAL, Priority.HIGH, -7, 3, 1000]


class Killer(threading.Thread):
    """SIGKILLs a random worker every few milliseconds until stopped."""

    def __init__(self, scheduler: procsched.Scheduler, rng: random.Random) -> None:
        super().__init__(name="chaos-killer", daemon=True)
        self.scheduler = scheduler
        self.rng = rng
        self.stop = threading.Event()
        self.killed: set[int] = set()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.wait(self.rng.uniform(0.002, 0.04)):
                pids = [w["pid"] for w in self.scheduler.stats()["workers"] if w["pid"] is not None]
                if not pids:
                    continue
                pid = self.rng.choice(pids)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                self.killed.add(pid)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_chaos_sigkill_random_workers(new_scheduler, log_path):
    rng = random.Random(20240611)
    s = new_scheduler(4)
    killer = Killer(s, rng)
    killer.start()

    one_shots = []
    for i in range(ONE_SHOTS):
        delay = rng.choice([0, 0, rng.uniform(0, 0.5)])
        handle = s.schedule(rel_tasks.record, delay, args=(log_path, i), priority=rng.choice(PRIORITIES))
        one_shots.append((i, handle))
    periodic = []
    for k in range(PERIODIC):
        prio = rng.choice(PRIORITIES)
        if k % 2:
            h = s.schedule_at_fixed_rate(
                rel_tasks.record_until, rng.uniform(0.005, 0.03), args=(log_path, PERIODIC_RUNS), priority=prio
            )
        else:
            h = s.schedule_with_fixed_delay(
                rel_tasks.record_until, rng.uniform(0.002, 0.02), args=(log_path, PERIODIC_RUNS), priority=prio
            )
        periodic.append(h)

    every = [h for _, h in one_shots] + periodic
    done, not_done = concurrent.futures.wait(every, timeout=180)
    killer.stop.set()
    killer.join(10)
    assert killer.error is None, killer.error
    assert not not_done, f"{len(not_done)} handles never finished: {list(not_done)[:5]}"

    # The pool heals: every slot gets a live idle worker (after any backoff).
    wait_until(lambda: pool_whole(s), 15, "the pool to be whole again")
    stats = s.stats()
    s.shutdown(wait=True)

    with open(log_path) as f:
        lines = collections.Counter(tuple(map(int, line.split()[:2])) for line in f)
    assert max(lines.values()) == 1, f"runs recorded twice: {[k for k, n in lines.items() if n > 1][:10]}"

    seen_runs = set()
    crashed = []
    for i, h in one_shots:
        assert h.done() and len(h.runs) == 1, (h, h.runs)
        (run,) = h.runs
        seen_runs.add((h.id, 1))
        if run.outcome == "ok":
            assert h.state is TaskState.DONE and h.result() == i
            assert lines[(h.id, 1)] == 1, f"task {h.id} finished ok but its run is not in the file"
        else:
            assert run.outcome == "crashed", run
            assert h.state is TaskState.FAILED
            exc = h.exception()
            assert isinstance(exc, WorkerCrashedError) and exc.signal == "SIGKILL", exc
            assert exc.task_id == h.id and exc.run == 1
            crashed.append(run)
    for h in periodic:
        assert h.state is TaskState.CANCELLED and h.cancelled()
        numbers = [r.run for r in h.runs]
        assert numbers == list(range(1, len(numbers) + 1)), f"runs lost or repeated: {numbers}"
        assert numbers[-1] >= PERIODIC_RUNS
        for run in h.runs:
            seen_runs.add((h.id, run.run))
            if run.outcome == "ok":
                assert lines[(h.id, run.run)] == 1, f"task {h.id} run {run.run} ok but not in the file"
            else:
                assert run.outcome == "crashed", run
                crashed.append(run)
    # Nothing ran that the handles do not know of (a crashed run may or may not have written).
    assert not set(lines) - seen_runs

    # Only killed workers crashed runs, and each cost at most one run.
    per_worker = collections.Counter(run.worker for run in crashed)
    assert set(per_worker) <= killer.killed, set(per_worker) - killer.killed
    assert max(per_worker.values(), default=0) <= 1
    total_runs = len(seen_runs)
    assert total_runs >= ONE_SHOTS + PERIODIC * PERIODIC_RUNS
    assert stats["outcomes"]["crashed"] == len(crashed)
    assert stats["outcomes"]["ok"] == total_runs - len(crashed)
    assert sum(stats["outcomes"].values()) == total_runs
    # The chaos was real: many kills, some of them mid-run.
    assert len(killer.killed) >= 20, len(killer.killed)
    assert crashed, "no run was ever hit: the killer did nothing useful"
    print(
        f"\nchaos: {total_runs} runs, {len(killer.killed)} kills, {len(crashed)} crashed runs, "
        f"{stats['spawned']} workers spawned"
    )


@pytest.mark.timeout(60)
def test_sigkill_the_forkserver(new_scheduler, tmp_path):
    """The workers' parent, multiprocessing's forkserver, dies: its workers
    live on (issue 20 item 15: a helper's death costs no run), the dispatcher
    starts a new forkserver on the next spawn (here: the replacements of the
    workers two cancels kill), and every other run happens, once."""
    s = new_scheduler(2)
    wait_until(lambda: pool_whole(s), 10, "the pool to start")
    proc = dispatcher(s)
    (forkserver,) = [p for p in proc.children() if "forkserver" in p.name() + " ".join(p.cmdline())]
    started = str(tmp_path / "started")
    running = [s.submit(rel_tasks.touch_and_sleep, started, 30) for _ in range(2)]
    queued = [s.submit(rel_tasks.hello, i) for i in range(20)]
    periodic = s.schedule_with_fixed_delay(rel_tasks.nothing, 0.01)
    wait_for_lines(started, 2)
    forkserver.send_signal(signal.SIGKILL)
    for h in running:
        assert not h.done()  # not crashed: their workers are alive
        assert h.cancel(interrupt=True)  # their workers are killed: new ones need a new forkserver
    for h in running:
        wait_until(lambda h=h: len(h.runs) == 1, 30, "the cancelled run's end")
        assert h.runs[0].outcome == "cancelled"
    for i, h in enumerate(queued):
        assert h.result(timeout=30).startswith(f"hello {i} ")
        assert len(h.runs) == 1
    n = len(periodic.runs)
    wait_until(lambda: len(periodic.runs) >= n + 10, 15, "the periodic task to go on")
    assert periodic.cancel()
    wait_until(lambda: pool_whole(s), 15, "the pool to be whole again")
    (new_forkserver,) = [p for p in proc.children() if "forkserver" in p.name() + " ".join(p.cmdline())]
    assert new_forkserver.pid != forkserver.pid
    assert not forkserver.is_running() or forkserver.status() == psutil.STATUS_ZOMBIE
