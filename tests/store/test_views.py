"""The read model (issue 23) and the change mark, on SQLite and PostgreSQL."""

from __future__ import annotations

from procsched._store import InstanceStatus, TaskDefinition, TaskState, WorkerStatus, open_store

P = 1_000_000_000
T0 = 1_700_000_000 * P


class Clock:
    """A settable store clock (UTC ns)."""

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def add(store, key="k", due=T0, schedule=None, **kw):
    b = store.batch()
    b.upsert(
        TaskDefinition(
            key,
            "store_funcs:plain",
            b"secret-args",
            schedule or {"kind": "fixed_rate", "period_ns": P},
            {"name": f"the {key}"},
            **kw,
        ),
        TaskState(next_due_ns=due),
    )
    assert b.commit().ok


def test_jobs_view_says_who_holds_each_job_and_whether_it_is_alive(store_url):
    clock = Clock(T0)
    store = open_store(store_url, clock=clock)
    add(store, "a")
    add(store, "b", schedule={"kind": "cron", "expr": "0 3 * * *", "tz": "Europe/Berlin"}, max_concurrent=2, group="db")
    add(store, "c")
    live, gone = store.register(lease_ns=10 * P, pid=11), store.register(lease_ns=P, pid=22)
    assert store.claim_run(live, "a", 1, 1, T0)
    assert store.claim_run(gone, "b", 1, 1, T0)
    assert store.finish_run(live, "a", 1, 1, "error", T0 + 1, T0 + P)
    assert store.claim_run(gone, "a", 2, 1, T0 + P)
    clock.now += 2 * P  # gone's lease expired (nobody took it over yet)
    assert store.pause("c")
    jobs = {j.key: j for j in store.jobs_view()}
    assert list(jobs) == ["a", "b", "c"]
    a, b, c = jobs["a"], jobs["b"], jobs["c"]
    assert (a.name, a.fn_ref, a.schedule["kind"], a.last_outcome, a.in_flight) == (
        "the a",
        "store_funcs:plain",
        "fixed_rate",
        "error",
        1,
    )
    assert (a.held_by.id, a.held_by.pid, a.held_by.alive, a.held_by.registered) == (gone.id, 22, False, True)
    assert (a.claimed_by.id, a.claimed_by.alive) == (gone.id, False)
    assert a.state.run_count == 2 and store.job_view("a").runs_total["error"] == 1
    assert (b.schedule["tz"], b.max_concurrent, b.group, b.held_by.alive) == ("Europe/Berlin", 2, "db", False)
    assert (c.paused, c.held_by, c.claimed_by, c.next_due_ns) == (True, None, None, T0)
    assert not hasattr(a, "args") and "secret-args" not in repr(a)  # plain data: never the arguments
    # taken over: the holder's registration is gone; the job says who claimed it last, not alive
    store.take_over(gone, live)
    a = {j.key: j for j in store.jobs_view()}["a"]
    assert a.held_by is None and a.in_flight == 0
    assert (a.claimed_by.id, a.claimed_by.host, a.claimed_by.pid, a.claimed_by.registered) == (
        gone.id,
        gone.host,
        22,
        False,
    )
    store.close()


def test_a_listing_read_again_with_what_was_known_equals_a_fresh_one(store_url):
    """``jobs_view(known)`` reads again only the rows written since the known
    listing (their write stamps differ) and lists the rest as known, with who
    holds and keeps them as the registrations say now: after writes, a lease
    running out, a take-over, a removal and a new key it equals a fresh
    listing, and a row not written since is the known view itself."""
    clock = Clock(T0)
    store = open_store(store_url, clock=clock)
    for i in range(12):
        add(store, f"k{i:02}")
    live, gone = store.register(lease_ns=10 * P, pid=11), store.register(lease_ns=P, pid=22)
    assert store.claim_run(gone, "k00", 1, 1, T0)
    assert store.claim_run(live, "k01", 1, 1, T0)
    known = {v.key: v for v in store.jobs_view()}
    assert known["k00"].held_by.alive and known["k00"].held_by.pid == 22
    clock.now += 2 * P  # gone's lease runs out: k00 is not written, its holder is no longer alive
    assert store.pause("k02")
    assert store.finish_run(live, "k01", 1, 1, "error", T0 + 1, clock.now)
    assert store.remove("k03")
    add(store, "k99", due=T0 + 5 * P)
    again = store.jobs_view(known)
    assert again == store.jobs_view()
    views = {v.key: v for v in again}
    assert "k03" not in views and views["k99"].next_due_ns == T0 + 5 * P
    assert views["k02"].paused and views["k01"].last_outcome == "error" and views["k01"].held_by is None
    assert views["k00"].held_by.pid == 22 and not views["k00"].held_by.alive
    assert all(views[k] is known[k] for k in ("k04", "k05", "k11"))  # not read again
    clock.now += P
    store.take_over(gone, live)  # k00's run crashed: its row is written
    known = views
    views = {v.key: v for v in store.jobs_view(known)}
    assert list(views.values()) == store.jobs_view()
    assert views["k00"].held_by is None and views["k00"].in_flight == 0 and views["k04"] is known["k04"]
    store.close()


def test_job_view_with_its_last_runs_and_skipped_slots(store):
    add(store)
    h = store.register()
    for run in range(1, 6):
        b = store.batch(h)
        b.started("k", run, 1, T0 + (run - 1) * 2 * P)
        b.skipped("k", T0 + ((run - 1) * 2 + 1) * P, "overlap")
        assert b.commit().ok
        assert store.finish_run(h, "k", run, 1, "ok", T0 + (run - 1) * 2 * P + 1, T0 + run * 2 * P)
    detail = store.job_view("k", 4)
    assert detail.job.key == "k" and detail.skipped_total["overlap"] == 5 and detail.runs_total["ok"] == 5
    assert [r.run for r in detail.runs] == [2, 3, 4, 5]
    assert [s.slot_ns for s in detail.skipped] == [T0 + (2 * i + 1) * P for i in range(1, 5)]
    assert [(x.outcome, x.slot_ns - T0) for x in detail.slots] == [
        ("ok", 6 * P),
        ("skipped", 7 * P),
        ("ok", 8 * P),
        ("skipped", 9 * P),
    ]
    assert store.job_view("nope") is None


def test_instances_publish_their_workers_and_standby_with_the_lease(store_url):
    clock = Clock(T0)
    store = open_store(store_url, clock=clock)
    add(store, "a")
    add(store, "b")
    one, two = store.register(lease_ns=5 * P, pid=1), store.register(lease_ns=5 * P, pid=2)
    status = InstanceStatus(
        (WorkerStatus(101, 50_000_000, 12, 1), WorkerStatus(102, None, 3, 0)), ("b",), 1, "processes"
    )
    assert store.renew_lease(one, status=status)
    assert store.claim_run(one, "a", 1, 1, T0)
    assert store.claim_run(two, "b", 1, 1, T0)
    assert store.finish_run(two, "b", 1, 1, "ok", T0 + 1, T0 + P)
    views = {v.pid: v for v in store.instances()}
    assert views[1].status == status and views[1].holding == ["a"] and views[1].keeping == 1
    assert views[2].status == InstanceStatus() and views[2].holding == [] and views[2].keeping == 1
    assert views[1].alive and views[2].alive
    clock.now += 6 * P
    assert not any(v.alive for v in store.instances())
    assert InstanceStatus.from_json("not json") == InstanceStatus()  # a status is information, never a failure
    assert (
        InstanceStatus.from_json(InstanceStatus(standby=tuple(f"k{i}" for i in range(5000))).to_json()).standby_count
        == 5000
    )
    store.close()


def test_counts_for_metrics(store):
    add(store, "a")
    add(store, "b")
    h = store.register()
    store.register()
    assert store.claim_run(h, "a", 1, 1, T0)
    assert store.finish_run(h, "a", 1, 1, "timeout", T0 + 1, T0 + P)
    b = store.batch(h)
    b.skipped("b", T0, "late")
    b.skipped("b", T0 + P, "late")
    b.commit()
    counts = store.counts()
    assert (counts.jobs, counts.instances, counts.alive) == (2, 2, 2)
    assert counts.runs == {"ok": 0, "error": 0, "crashed": 0, "timeout": 1, "cancelled": 0}
    assert counts.skipped["late"] == 2 and counts.by_job["b"][1]["late"] == 2 and counts.by_job["a"][0]["timeout"] == 1


def test_the_change_mark_changes_with_every_write_and_only_then(store_url):
    clock = Clock(T0)
    store = open_store(store_url, clock=clock)
    outside = open_store(store_url, clock=clock)
    marks = [outside.change_mark()]

    def changed() -> bool:
        marks.append(outside.change_mark())
        return marks[-1] != marks[-2]

    add(store, "k")
    assert changed()
    store.jobs_view(), store.load(), store.history("k"), store.instances()  # reads change nothing
    assert not changed()
    h = store.register(lease_ns=10 * P)
    assert changed()
    for write in (
        lambda: store.claim_run(h, "k", 1, 1, T0),
        lambda: store.finish_run(h, "k", 1, 1, "ok", T0 + 1, T0 + P),
        lambda: _skip(store, h),
        lambda: store.pause("k"),
        lambda: store.ask("k", "run_now"),
        lambda: store.take_requests(h, {"k"}),
        lambda: _delete(store, h),
    ):
        clock.now += 1
        write()
        assert changed(), write
    # an instance's published status and its lease's expiry change the instances' part only
    assert store.renew_lease(h, status=InstanceStatus(standby=("x",)))
    assert changed() and marks[-1].jobs == marks[-2].jobs
    assert store.renew_lease(h) and not changed()  # a plain renewal is no change to show
    clock.now += 11 * P
    assert changed() and marks[-1].jobs == marks[-2].jobs and marks[-1].instances != marks[-2].instances
    store.close()
    outside.close()


def _skip(store, h):
    b = store.batch(h)
    b.skipped("k", T0 + 9 * P, "paused")
    assert b.commit().ok


def _delete(store, h):
    b = store.batch(h)
    b.delete("k")
    assert b.commit().ok
