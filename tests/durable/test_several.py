"""Several schedulers on one store (issue 11): real scheduler processes on a
real SQLite file and a real PostgreSQL server. Each keyed run exactly once
among them; a dead holder's runs recorded crashed by a survivor within the
lease; a stopped scheduler fenced out; adds, cancels, pauses seen by all.

Each task run appends ``run attempt scheduled_at peer worker`` to a file
(peer_jobs.mark); the checks read those files and the store. Leases are
short (1-2 s) so the module stays fast; real time passes, hence ``slow``.
"""

from __future__ import annotations

import os
import random
import signal
import time

import psutil
import pytest

from procsched._store import RunRecord, SkippedSlot, open_store
from tests.durable.peers import Peer, check_once, lines, wait_for
from tests.store.conftest import store_url as store_url

pytestmark = pytest.mark.slow
US = 1_000_000


@pytest.fixture
def peers():
    started: list[Peer] = []
    yield started
    for p in started:
        p.close()


def _start(peers: list[Peer], name: str, cfg: dict, tmp_path) -> Peer:
    return _start_all(peers, (name,), cfg, tmp_path)[0]


def _start_all(peers: list[Peer], names, cfg: dict, tmp_path) -> list[Peer]:
    """Start schedulers side by side (they register and claim concurrently),
    then wait until each is ready."""
    started = [Peer(name, cfg, str(tmp_path)) for name in names]
    peers.extend(started)
    return [p.ready() for p in started]


@pytest.mark.timeout(150)
def test_three_schedulers_run_every_slot_exactly_once(store_url, tmp_path, peers) -> None:
    rate, cron = str(tmp_path / "rate"), str(tmp_path / "cron")
    cfg = {
        "store": store_url,
        "lease": 2.0,
        "tasks": [
            {"kind": "rate", "key": "rate", "period": 0.05, "out": rate},
            {"kind": "cron", "key": "cron", "expr": "* * * * * *", "out": cron},
        ],
    }
    _start(peers, "p0", cfg, tmp_path)
    for name in ("p1", "p2"):
        _start(peers, name, cfg, tmp_path)
    wait_for(lambda: len(lines(rate)) >= 150 and len(lines(cron)) >= 9, 60, "ten seconds of slots", peers)
    views = [p.ask("stats") for p in peers]
    for p, view in zip(peers, views):
        assert view["store"]["scheduler"]["pid"] == p.pid
        assert {q["pid"] for q in view["store"]["peers"]} == {q.pid for q in peers if q is not p}
    for p in peers:
        p.quit()
    r, c = lines(rate), lines(cron)
    check_once(r, 50_000)
    check_once(c, US)
    for rows, least in ((r, 150), (c, 9)):
        runs = sorted(x[0] for x in rows)
        assert runs == list(range(1, runs[-1] + 1)), "a run number never started (lost)"
        assert len(rows) >= least
    with open_store(store_url) as store:
        for key, period in (("rate", 50_000), ("cron", US)):
            history = store.history(key)
            assert all(h.outcome == "ok" for h in history), history
            check_once(
                [(h.run, h.attempt, h.scheduled_ns // 1000, "", 0) for h in history], period
            )  # the claimed slots
        assert store.schedulers() == []  # all three unregistered


@pytest.mark.timeout(120)
def test_sigkill_of_the_holder_of_a_long_run_survivor_records_it_crashed_within_the_lease(
    store_url, tmp_path, peers
) -> None:
    out = str(tmp_path / "long")
    lease = 1.5
    cfg = {
        "store": store_url,
        "lease": lease,
        "tasks": [
            {"kind": "rate", "key": "long", "period": 0.5, "out": out, "long_runs": 1, "long_s": 120},
        ],
    }
    _start(peers, "p0", cfg, tmp_path)
    _start(peers, "p1", cfg, tmp_path)
    first = wait_for(lambda: lines(out), 30, "run 1 to start")[0]
    holder = next(p for p in peers if p.name == first[3])
    survivor = next(p for p in peers if p is not holder)
    holder.kill()  # run 1 under way: its worker wrote its line
    killed = time.time()
    with open_store(store_url) as store:
        crashed = wait_for(
            lambda: [h for h in store.history("long") if h.run == 1 and h.outcome == "crashed"],
            lease + 10,
            "run 1 recorded crashed",
        )[0]
        assert crashed.error_type == "SchedulerDied" and str(holder.pid) in crashed.error_message
        assert crashed.finished_ns / 1e9 - killed <= lease + 1.5, "not recorded crashed within the lease"
        wait_for(lambda: [x for x in lines(out) if x[0] >= 3 and x[3] == survivor.name], 15, "the schedule to go on")
        survivor.quit()
        rows = lines(out)
        check_once(rows, 500_000)
        assert [x[0] for x in rows if x[0] == 1] == [1]
        assert all(h.outcome is not None for h in store.history("long"))


@pytest.mark.timeout(120)
def test_a_stopped_scheduler_whose_lease_expired_records_and_runs_nothing_it_no_longer_holds(
    store_url, tmp_path, peers
) -> None:
    out = str(tmp_path / "r")
    lease = 1.5
    cfg = {"store": store_url, "lease": lease, "tasks": [{"kind": "rate", "key": "r", "period": 0.1, "out": out}]}
    a = _start(peers, "a", cfg, tmp_path)
    b = _start(peers, "b", cfg, tmp_path)
    wait_for(lambda: len(lines(out)) >= 5, 30, "slots to run")
    with open_store(store_url) as store:
        old = next(h for h in store.schedulers() if h.pid == a.pid)
        stopped = [a.tree()[0], a.dispatcher()]  # the scheduler (user process and dispatcher); workers idle
        # Stopped between two slots, not inside a transaction: a SQLite writer
        # stopped mid-transaction holds the file's write lock and stalls every
        # other scheduler until it goes on or dies (README: the SQLite limit).
        n = len(lines(out))
        run = wait_for(lambda: lines(out)[n:], 10, "a slot to start")[0][0]
        wait_for(
            lambda: any(h.run == run and h.outcome is not None for h in store.history("r")),
            10,
            "its end to be recorded",
        )  # its claim and its end committed; the next slot is ~100 ms away
        a.signal(signal.SIGSTOP, stopped)
        t_stop = time.time()
        wait_for(lambda: all(h.id != old.id for h in store.schedulers()), lease + 10, "b to take a over")
        t_over = time.time()
        wait_for(lambda: [x for x in lines(out) if x[2] / US > t_over], 10, "b to run slots after the take-over")
        a.signal(signal.SIGCONT, stopped)
        t_cont = time.time()
        wait_for(lambda: "was taken over" in a.stderr(), 15, "a to find itself fenced out")
        wait_for(lambda: any(h.pid == a.pid for h in store.schedulers()), 10, "a to register again")
        n = len(lines(out))
        wait_for(lambda: len(lines(out)) >= n + 5, 10, "slots to run again")
        for p in (a, b):
            p.quit()
        rows = lines(out)
        check_once(rows, 100_000)
        window = [x for x in rows if x[3] == "a" and t_stop + 0.3 < x[2] / US < t_cont - 0.1]
        assert not window, f"a ran slots it did not hold while stopped: {window}"
        check_once([(h.run, h.attempt, h.scheduled_ns // 1000, "", 0) for h in store.history("r")], 100_000)
        late = [h for h in store.history("r") if h.holder == old.id and (h.started_ns or 0) / 1e9 > t_over]
        assert not late, late
        assert all(h.outcome is not None for h in store.history("r"))


@pytest.mark.timeout(60)
def test_adds_cancels_pauses_and_resumes_are_seen_by_the_other_schedulers(store_url, tmp_path, peers) -> None:
    out = str(tmp_path / "k")
    cfg = {"store": store_url, "lease": 1.5}
    a = _start(peers, "a", cfg, tmp_path)
    b = _start(peers, "b", cfg, tmp_path)
    bound = 0.5 + 4.5  # the re-read interval (lease / 3) plus slack for a loaded machine (2 shared cores)

    def seen(p: Peer, state: str | None) -> bool:
        return p.ask("stats")["keys"].get("k") == state

    a.ask(f"add-rate k 0.1 {out}")
    t = time.monotonic()
    wait_for(lambda: seen(b, "pending") or seen(b, "running"), bound, "b to adopt k", [a, b])
    assert time.monotonic() - t <= bound
    # which scheduler wins a slot is a race (no balancing): b adopted k, k runs
    wait_for(lambda: len(lines(out)) >= 5, 10, "k to run")
    assert b.ask("pause k")
    wait_for(lambda: seen(a, "paused"), bound, "a to see k paused")
    n = len(lines(out))
    time.sleep(0.5)  # an absence (no run while paused) needs real time to pass
    assert len(lines(out)) <= n + 1  # at most a run that was under way
    assert a.ask("resume k")
    wait_for(lambda: seen(b, "pending") or seen(b, "running"), bound, "b to see k resumed")
    n = len(lines(out))
    wait_for(lambda: len(lines(out)) > n + 3, 10, "k to run again")
    assert a.ask("cancel k")
    wait_for(lambda: seen(b, None), bound, "b to drop k")
    n = len(lines(out))
    time.sleep(0.5)  # an absence (no run once cancelled) needs real time to pass
    assert len(lines(out)) <= n + 1
    for p in (a, b):
        p.quit()
    check_once(lines(out), 100_000)
    with open_store(store_url) as store:
        assert store.get("k") is None


@pytest.mark.timeout(90)
def test_clock_skew_between_schedulers_runs_no_slot_twice(store_url, tmp_path, peers) -> None:
    """One scheduler's wall clock runs 400 ms ahead (an injected skew): it
    tends to win the claims, slots stay on one grid, none runs twice."""
    rate, cron = str(tmp_path / "rate"), str(tmp_path / "cron")
    tasks = [
        {"kind": "rate", "key": "rate", "period": 0.1, "out": rate},
        {"kind": "cron", "key": "cron", "expr": "* * * * * *", "out": cron},
    ]
    _start(peers, "a", {"store": store_url, "lease": 1.5, "tasks": tasks}, tmp_path)
    _start(peers, "b", {"store": store_url, "lease": 1.5, "tasks": tasks, "skew_ns": 400_000_000}, tmp_path)
    wait_for(lambda: len(lines(rate)) >= 40 and len(lines(cron)) >= 4, 60, "five seconds of slots", peers)
    for p in peers:
        p.quit()
    with open_store(store_url) as store:
        for key, path, period in (("rate", rate, 100_000), ("cron", cron, US)):
            # The skew is injected into b's dispatcher alone: its workers read the
            # true clock, so b's lines say each fixed-rate slot 400 ms early (a
            # cron run carries its slot); the store has the slots as the
            # schedulers saw them.
            shift = 400_000 if key == "rate" else 0
            rows = [(r, a, at + shift if peer == "b" else at, peer, pid) for r, a, at, peer, pid in lines(path)]
            check_once(rows, period)
            runs = sorted(x[0] for x in rows)
            assert runs == list(range(1, runs[-1] + 1))
            history = store.history(key)
            check_once([(h.run, h.attempt, h.scheduled_ns // 1000, "", 0) for h in history], period)
            assert {h.host for h in history} and len({h.holder for h in history}) >= 1


@pytest.mark.timeout(120)
def test_twenty_random_sigkills_among_three_schedulers_nothing_lost_nothing_twice(store_url, tmp_path, peers) -> None:
    """Twenty SIGKILLs of one of three schedulers (its whole tree: a host
    dies) at random instants, each followed by a restart under the same name.
    The instants are drawn on the runs' own lines, not on the clock: after
    0-8 more runs of the 100 ms task (0: right after the last restart, while
    it may still be taking the dead one over), plus a random fraction of a
    period, so a kill lands anywhere in a claim, a run or a turn without
    seconds of waiting between kills. The victim is the rate task's claimer
    (the scheduler of its last run) half the time, else any of the three:
    with one claimer per task, a uniform choice would kill a run's holder
    only a third of the time."""
    rate, cron = str(tmp_path / "rate"), str(tmp_path / "cron")
    # Keep every run in the history (the default keeps each task's last 100): every kill's runs are checked.
    keep = "keep_runs=100000"
    store_url = f"{store_url}&{keep}" if "://" in store_url else f"sqlite:///{store_url}?{keep}"
    cfg = {
        "store": store_url,
        "lease": 1.0,
        "tasks": [
            {"kind": "rate", "key": "rate", "period": 0.1, "out": rate},
            {"kind": "cron", "key": "cron", "expr": "* * * * * *", "out": cron},
        ],
    }
    live = dict(zip(("p0", "p1", "p2"), _start_all(peers, ("p0", "p1", "p2"), cfg, tmp_path)))
    rng = random.Random(int(os.environ.get("PROCSCHED_SEED", "11")))
    killed: list[psutil.Process] = []
    begin = time.monotonic()
    for kill in range(20):
        want = len(lines(rate)) + rng.randint(0, 8)
        wait_for(lambda want=want: len(lines(rate)) >= want, 30, f"runs before kill {kill + 1}", peers)
        time.sleep(rng.uniform(0, 0.1))  # a random instant within a period (not a synchronisation)
        name = rng.choice(sorted(live))
        if rng.random() < 0.5 and lines(rate):
            name = lines(rate)[-1][3]  # the rate task's claimer: half the kills take a run's holder down
        killed += live[name].kill(wait=False)  # its dispatcher and workers die now; init reaps them later
        live[name] = _start(peers, name, cfg, tmp_path)
    elapsed = time.monotonic() - begin
    with open_store(store_url) as store:
        # Every dead scheduler taken over (at a restart, its pid gone; else by its lease) before the end.
        wait_for(
            lambda: {h.pid for h in store.schedulers()} == {p.pid for p in live.values()},
            10,
            "the dead schedulers to be taken over",
            peers,
        )
        for p in live.values():
            p.quit()
        for key, path, period in (("rate", rate, 100_000), ("cron", cron, US)):
            rows = lines(path)
            check_once(rows, period)
            task = store.get(key)
            assert task is not None and task.holder is None
            started = {x[0] for x in rows}
            claimed = task.state.run_count
            assert started <= set(range(1, claimed + 1))
            assert claimed - len(started) <= 2 * 20, "more runs claimed and never started than kills explain"
            history = store.history(key, 100_000)
            assert {h.run for h in history} == set(range(1, claimed + 1)), "a claimed run missing from the history"
            assert all(h.outcome is not None for h in history), "a run left in flight (lost)"
            assert len({(h.run, h.attempt) for h in history}) == len(history)
            assert all(h.error_type == "SchedulerDied" for h in history if h.outcome == "crashed")
        assert store.get("rate").state.run_count >= elapsed * 10 * 0.5, "the schedule did not go on"
        assert store.schedulers() == []
    assert not psutil.wait_procs(killed, timeout=15)[1], "a killed scheduler's process is still running"


@pytest.mark.timeout(120)
def test_a_scheduler_that_lost_a_task_stands_by_until_its_claimer_stops(store_url, tmp_path, peers) -> None:
    """One claimer per task: the scheduler that lost a claim stops trying the
    task's slots (standby) while the store shows the other keeping it up; a
    pause or resume said there still works; when the claimer stops (a clean
    shutdown: the task stays stored, nobody claims it), the standby claims
    it again within the re-read interval and its grace."""
    out = str(tmp_path / "s")
    cfg = {"store": store_url, "lease": 1.5, "tasks": [{"kind": "rate", "key": "s", "period": 0.05, "out": out}]}
    a, b = _start(peers, "a", cfg, tmp_path), _start(peers, "b", cfg, tmp_path)

    def standby(p: Peer) -> bool:
        return p.ask("stats")["store"]["standby"] == ["s"]

    idle = wait_for(lambda: next((p for p in (a, b) if standby(p)), None), 20, "a scheduler to stand by", [a, b])
    busy = b if idle is a else a
    assert not standby(busy)
    assert idle.ask("stats")["keys"]["s"] in ("pending", "running")  # the user paused nothing
    n = len(lines(out))
    wait_for(lambda: len(lines(out)) >= n + 11, 20, "s to run")
    assert {row[3] for row in lines(out)[n + 1 :]} == {busy.name}  # (the first may be idle's last claim)
    # the user's pause and resume, said on the standby scheduler
    assert idle.ask("pause s")
    wait_for(lambda: busy.ask("stats")["keys"]["s"] == "paused", 10, "the claimer to see s paused", [a, b])
    assert idle.ask("resume s")
    n = len(lines(out))
    wait_for(lambda: len(lines(out)) >= n + 5, 20, "s to run again", [a, b])
    idle = wait_for(lambda: next((p for p in (a, b) if standby(p)), None), 20, "a scheduler to stand by", [a, b])
    busy = b if idle is a else a
    busy.quit()
    n = len(lines(out))
    t = time.monotonic()
    wait_for(lambda: any(row[3] == idle.name for row in lines(out)[n:]), 20, "the standby to take s on", [idle])
    assert time.monotonic() - t < 0.5 + 0.5 + 4.0  # interval + grace, with slack for 2 loaded cores
    assert not standby(idle)
    idle.quit()
    check_once(lines(out), 50_000)


@pytest.mark.timeout(120)
def test_a_resume_on_the_standby_once_the_claimer_left_records_the_slots_paused_over(
    store_url, tmp_path, peers
) -> None:
    """The slots a pause leaves behind are recorded by the scheduler that ran
    the task, as it follows the resume. Paused on a scheduler that only stood
    by for it, and resumed there after the one that ran it had shut down,
    nobody recorded them (the resumer left them to the runner): the resumer
    records them when the runner is gone."""
    out = str(tmp_path / "s")
    period = 0.02
    cfg = {"store": store_url, "lease": 1.5, "tasks": [{"kind": "rate", "key": "s", "period": period, "out": out}]}
    a, b = _start(peers, "a", cfg, tmp_path), _start(peers, "b", cfg, tmp_path)

    def standby(p: Peer) -> bool:
        return p.ask("stats")["store"]["standby"] == ["s"]

    idle = wait_for(lambda: next((p for p in (a, b) if standby(p)), None), 20, "a scheduler to stand by", [a, b])
    busy = b if idle is a else a
    n = len(lines(out))
    wait_for(lambda: len(lines(out)) >= n + 3, 20, "s to run")
    assert idle.ask("pause s")  # the user's pause, said on the standby
    wait_for(lambda: busy.ask("stats")["keys"]["s"] == "paused", 10, "the claimer to see s paused", [a, b])
    busy.quit()  # the scheduler that ran s leaves while s is paused (slots pass meanwhile)
    wait_for(lambda: not idle.ask("stats")["store"]["peers"], 20, "the standby to see it gone", [idle])
    assert idle.ask("resume s")
    n = len(lines(out))
    wait_for(lambda: len(lines(out)) >= n + 3, 20, "s to run again", [idle])
    idle.quit()
    rows = open_store(store_url).history("s", 1000, skipped=True)
    ran = [r.scheduled_ns for r in rows if isinstance(r, RunRecord) and r.outcome == "ok" and r.attempt == 1]
    skipped = [r for r in rows if isinstance(r, SkippedSlot) and r.reason == "paused"]
    assert len(skipped) >= 2, rows  # (before: none - nobody recorded them)
    slots = sorted(ran + [r.slot_ns for r in skipped])
    # (each scheduler reads a slot's wall time a few µs apart from the others)
    steps = {round((y - x) / (period * 1e9), 2) for x, y in zip(slots, slots[1:], strict=False)}
    assert steps == {1.0}, sorted(steps)  # one grid, every slot once: a run or a recorded skip
