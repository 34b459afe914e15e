"""The campaign checker's own rules, on made-up evidence (no instances run)."""

from __future__ import annotations

from types import SimpleNamespace

from tests.campaign.campaign import KeyEvent, Life
from tests.campaign.checker import CONCURRENT_DEPLOYS as CONCURRENT
from tests.campaign.checker import Attempt, _after_events, _overlap, _slots, _stalled, _two_ends
from tests.campaign.storesql import RunRow, TaskRow

LEASE = 1.0


def _case(crash_at: float | None) -> tuple[list, list]:
    """B's run 10 under way (from 100.0) when B is stopped at 100.2 for 0.9 s
    (less than the lease) and killed at 101.1; A runs 11 from 101.0. The store
    recorded run 10 ended at ``crash_at`` (None: still in flight)."""
    b = Life("B", 1, "B.1", started=90.0, ended=101.1, how="kill", stops=[(100.2, 101.1)])
    a = Life("A", 1, "A.1", started=90.0)
    attempts = [
        Attempt("r2", 10, 1, "B.1", 1, None, 111, start=100.0, end=101.1),
        Attempt("r2", 11, 1, "A.1", 1, None, 222, start=101.0, end=101.2, x="ok"),
    ]
    error = None if crash_at is None else "SchedulerDied"
    rows = [
        RunRow("r2", 10, 1, 0, 0, None if crash_at is None else int(crash_at * 1e9), 111, "crashed", error, "B"),
        RunRow("r2", 11, 1, 0, 0, int(101.2e9), 222, "ok", None, "A"),
    ]
    return _overlap(attempts, {"B.1": b, "A.1": a}, LEASE, rows)


def test_a_take_over_while_the_instance_was_stopped_is_the_documented_overlap() -> None:
    found, documented = _case(crash_at=100.95)  # taken over during the stop: the lease ran out then
    assert not found and [v.kind for v in documented] == ["overlap (documented)"]


def test_an_overlap_with_no_take_over_during_a_stop_is_a_violation() -> None:
    found, documented = _case(crash_at=101.15)  # recorded after the kill: not while stopped
    assert [v.kind for v in found] == ["overlap"] and not documented
    found, _ = _case(crash_at=None)
    assert [v.kind for v in found] == ["overlap"]


def _deploys(stored_version: int, written: float, v2_acked: float) -> tuple[list, list]:
    """B deploys c1 v2 (acknowledged at ``v2_acked``), A replaces it with v3
    at 11.8; the store ends with ``stored_version`` written at ``written``;
    C runs v2 from 14.0 (the fault campaign, seed 805: B's commit came 4 ms
    after A's, B having been slowed by a dropped connection)."""
    h = SimpleNamespace(
        end=30.0,
        key_events=[
            KeyEvent("redefine", "c1", v2_acked, "B.2", 2),
            KeyEvent("replace", "c1", 11.8, "A.2", 3),
        ],
    )
    attempts = [Attempt("c1", n, 1, "C.1", 2, None, 333, start=13.0 + n, end=13.1 + n, x="ok") for n in (1, 2, 3)]
    return _after_events(h, attempts, {"c1": (stored_version, written)}, {})


def test_a_concurrent_deploy_stored_last_is_the_task_from_then_on() -> None:
    found, documented = _deploys(stored_version=2, written=11.805, v2_acked=11.5)
    assert not found and [v.kind for v in documented] == ["last deploy wins (documented)"]


def test_an_older_definition_run_after_a_newer_one_is_stored_is_a_violation() -> None:
    found, _ = _deploys(stored_version=3, written=11.801, v2_acked=11.5)  # v3 stored last: v2's runs are stale
    assert [v.kind for v in found] == ["old definition"]
    found, _ = _deploys(stored_version=2, written=11.805, v2_acked=2.0)  # v2 written again long after its deploy
    assert [v.kind for v in found] == ["old definition"]


def test_a_redefinition_lost_with_its_killed_instance_is_the_documented_limit() -> None:
    """Seed 1803: A.2 acknowledged r1 v2 at 41.523 and was killed at 41.559,
    before its next commit; C ran v1 (the store's) until A.3's deploy of v2
    stored it at 44.818, and v2 from the re-read after."""
    a2 = Life("A", 2, "A.2", started=40.8, ended=41.559, how="kill")
    h = SimpleNamespace(end=60.0, faults=[], key_events=[KeyEvent("redefine", "r1", 41.523, "A.2", 2)])
    v1 = [Attempt("r1", n, 1, "C.4", 1, None, 444, start=42.0 + n / 4, end=42.1 + n / 4, x="ok") for n in range(10)]
    found, documented = _after_events(h, v1, {"r1": (2, 44.818)}, {"A.2": a2})
    assert not found and [v.kind for v in documented] == ["killed before stored (documented)"]
    late = [Attempt("r1", 40, 1, "C.4", 1, None, 444, start=47.0, end=47.1, x="ok")]  # past its store + settle
    found, _ = _after_events(h, v1 + late, {"r1": (2, 44.818)}, {"A.2": a2})
    assert [v.kind for v in found] == ["old definition"]


def _one_shot_ran_twice(
    key: str, first: Attempt, second: Attempt, crashed_at: float, lives: dict, faults: list
) -> tuple[list, list]:
    """A one-shot ``key``'s attempt 1 (``first``) ended ok in its log but
    the store recorded it crashed (``SchedulerDied``) at ``crashed_at``; its
    Retry covers crashed, so ``second`` (attempt 2) ran too: the checker's
    one-shot rules over that evidence."""
    h = SimpleNamespace(
        calm_start=55.0,
        calm_end=60.0,
        lease=LEASE,
        live_at_end=set(),
        oneshots={key: first.start - 0.3},
        key_events=[],
        faults=faults,
    )
    rows = [
        RunRow(key, 1, 1, 0, 0, int(crashed_at * 1e9), first.pid, "crashed", "SchedulerDied", second.inst[0]),
        RunRow(key, 1, 2, 0, 0, int((second.end or 0) * 1e9), second.pid, "ok", None, second.inst[0]),
    ]
    return _stalled(h, [first, second], {}, lives, rows)


def _oneshot_twice(killed: float, faults: list) -> tuple[list, list]:
    """Seed 2224: o6's attempt 1 ran on C.4 until 29.645, the store locked
    by another process (a commit waited); C.4 was killed at ``killed``; its
    row says crashed, and C.5 ran attempt 2 (o6's Retry covers crashed)."""
    c4 = Life("C", 4, "C.4", started=20.0, ended=killed, how="kill")
    c5 = Life("C", 5, "C.5", started=killed + 0.65)
    return _one_shot_ran_twice(
        "o6",
        Attempt("o6", 1, 1, "C.4", 1, None, 555, start=29.64, end=29.645, x="ok"),
        Attempt("o6", 1, 2, "C.5", 1, None, 666, start=31.0, end=31.03, x="ok"),
        30.6,
        {"C.4": c4, "C.5": c5},
        faults,
    )


def test_a_one_shot_run_again_after_its_end_was_lost_with_a_kill_is_the_documented_limit() -> None:
    lock = SimpleNamespace(kind="sqlite_lock", at=29.634)
    found, documented = _oneshot_twice(killed=29.923, faults=[lock])  # the end's commit waited for the lock
    assert not found and [v.kind for v in documented] == ["twice (documented)"]
    found, documented = _oneshot_twice(killed=29.9, faults=[])  # killed 0.26 s after the end: not committed yet
    assert not found and documented


def test_a_one_shot_run_again_long_after_its_end_is_a_violation() -> None:
    found, documented = _oneshot_twice(killed=35.0, faults=[])  # its end had seconds to be stored
    assert [v.kind for v in found] == ["twice"] and not documented


def test_a_pause_written_by_the_procsched_command_is_followed_within_the_re_read_interval() -> None:
    """Seed 2208: ``procsched pause c1 --store`` returned at 44.190; C.1 had
    run 9 of c1 held for its claim (the store locked) and started it at
    44.271, before its next re-read. The command names no instance: every
    one follows within the re-read interval."""
    pause = KeyEvent("pause", "c1", 44.190, "", 1)
    h = SimpleNamespace(end=60.0, faults=[], key_events=[pause])
    ran = [Attempt("c1", 9, 1, "C.1", 1, None, 777, start=44.271, end=44.3, x="ok")]
    found, _ = _after_events(h, ran, {"c1": (1, 30.0)}, {})
    assert not found
    late = [Attempt("c1", 10, 1, "C.1", 1, None, 777, start=46.5, end=46.6, x="ok")]
    found, _ = _after_events(h, late, {"c1": (1, 30.0)}, {})
    assert [v.kind for v in found] == ["paused"]


def _oneshot_stopped(stop: tuple[float, float]) -> tuple[list, list]:
    """Seed 2504: o10's attempt 1 ran on C.7 from 7.33 to 8.93 with C stopped
    over ``stop``; A took C over, recorded the attempt crashed and ran
    attempt 2 at 8.56 (o10's Retry covers crashed)."""
    c7 = Life("C", 7, "C.7", started=0.0, stops=[stop])
    a8 = Life("A", 8, "A.8", started=0.0)
    return _one_shot_ran_twice(
        "o10",
        Attempt("o10", 1, 1, "C.7", 1, None, 555, start=7.33, end=8.93, x="ok"),
        Attempt("o10", 1, 2, "A.8", 1, None, 666, start=8.56, end=8.58, x="ok"),
        8.42,
        {"C.7": c7, "A.8": a8},
        [],
    )


def test_a_one_shot_retried_while_its_instance_was_stopped_past_its_lease_is_the_documented_limit() -> None:
    found, documented = _oneshot_stopped(stop=(7.37, 8.91))  # stopped 1.54 s (the lease: 1 s) during the run
    assert not found and [v.kind for v in documented] == ["twice (documented)"]


def test_a_one_shot_run_twice_with_no_stop_past_its_lease_is_a_violation() -> None:
    found, documented = _oneshot_stopped(stop=(7.37, 7.87))  # a short stop, taken over after it
    assert [v.kind for v in found] == ["twice"] and not documented


def test_a_definition_is_followed_from_when_its_commit_stored_it() -> None:
    """Seed 2503 (replayed): A.7 acknowledged c1 v4 at 43.755; store faults
    (a lost commit answer, another instance stopped holding locks) delayed
    its commit to 47.251; C.7 ran v3 until its re-read after that commit."""
    h = SimpleNamespace(end=60.0, faults=[], key_events=[KeyEvent("redefine", "c1", 43.755, "A.7", 4)])
    v3 = [
        Attempt("c1", n, 1, "C.7", 3, None, 444, start=s, end=s + 0.05, x="ok") for n, s in ((58, 47.366), (59, 47.405))
    ]
    found, _ = _after_events(h, v3, {"c1": (4, 47.676)}, {}, {("c1", 4): [47.251, 47.676]})
    assert not found
    found, _ = _after_events(h, v3, {"c1": (4, 47.676)}, {})  # when it was written unknown: from the answer
    assert [v.kind for v in found] == ["old definition"]
    late = [Attempt("c1", 62, 1, "C.7", 3, None, 444, start=49.5, end=49.55, x="ok")]  # past the commit + settle
    found, _ = _after_events(h, v3 + late, {"c1": (4, 47.676)}, {}, {("c1", 4): [47.251, 47.676]})
    assert [v.kind for v in found] == ["old definition"]


def test_a_cancel_is_followed_from_when_its_row_was_deleted() -> None:
    """A cancel acknowledged at 20.6 whose deletion a store fault delayed to
    23.0: another instance may run the task until its re-read after that."""
    h = SimpleNamespace(end=60.0, faults=[], key_events=[KeyEvent("cancel", "d1", 20.6, "A.8", 5)])
    ran = [Attempt("d1", 105, 1, "C.9", 5, None, 444, start=24.09, end=24.12, x="ok")]
    found, _ = _after_events(h, ran, {}, {}, {}, {"d1": [23.0]})
    assert not found
    found, _ = _after_events(h, ran, {}, {}, {}, {"d1": [21.0]})  # deleted at once: C.9 ran it 3 s after
    assert [v.kind for v in found] == ["cancelled"]


def test_a_version_whose_first_run_is_a_retry_keeps_the_grid_of_its_first_attempts() -> None:
    """r1 (every 0.25 s, catch_up) is redefined between two attempts of run
    19 (slot 104.75): its attempt 2, at its retry time (104.85), is the new
    version's first run; the version's slots are those of its first attempts
    (the fault campaign, seed 2807, replayed: a grid from the retry's time
    "lost" 8 slots that were never on the task's grid)."""
    spec = {"kind": "rate", "period": 0.25, "misfire": "catch_up"}
    h = SimpleNamespace(specs={"r1": spec}, key_events=[], lives=[], faults=[], end=200.0, lease=LEASE)

    def first(n: int, version: int) -> Attempt:
        return Attempt("r1", n, 1, "A.1", version, round((100.0 + 0.25 * n) * 1e6), 111, 100.0 + 0.25 * n)

    attempts = [first(n, 1) for n in range(20)]
    attempts.append(Attempt("r1", 19, 2, "A.1", 2, round(104.85 * 1e6), 111, 104.86, 104.87, "ok"))
    attempts += [first(n, 2) for n in range(20, 40)]
    assert _slots(h, attempts, [], {}) == []
    del attempts[30]  # a slot of the grid that never ran: lost
    assert [v.kind for v in _slots(h, attempts, [], {})] == ["slot lost"]


def test_a_re_added_task_may_run_once_its_add_is_asked() -> None:
    """Cancelled at 24.652, re-added through A (asked at 28.55, answered at
    28.64): the new task's first run may start before the answer (the fault
    campaign, seed 2902, replayed: A stored the definition at 28.601 and ran
    it at 28.602, before its answer reached the campaign)."""
    h = SimpleNamespace(
        end=60.0,
        faults=[],
        key_events=[KeyEvent("cancel", "r2", 24.652, "B.3", 1), KeyEvent("readd", "r2", 28.64, "A.4", 2, 28.55)],
    )
    ran = [Attempt("r2", 64, 1, "A.4", 2, None, 555, start=28.602, end=28.795, x="fail")]
    found, _ = _after_events(h, ran, {}, {}, {}, {"r2": [24.652]})
    assert not found
    h.key_events[1] = KeyEvent("readd", "r2", 28.64, "A.4", 2, 28.61)  # asked after it ran: ran while cancelled
    found, _ = _after_events(h, ran, {}, {}, {}, {"r2": [24.652]})
    assert [v.kind for v in found] == ["cancelled"]


def test_a_concurrent_deploy_stored_last_is_the_task_until_a_later_one() -> None:
    """C.6 starts with c1 v3 (acknowledged at 24.10) as B.3 replaces c1 with
    v4 (24.187); the store wrote v4 at 24.193, then C.6's v3 at 24.198, and
    a v5 ten seconds later: v3 is the task from 24.198 (the fault campaign,
    seed 3025, replayed: the checker judged by the definition stored at the
    end, v5, and reported v3's runs)."""
    h = SimpleNamespace(
        end=60.0,
        key_events=[
            KeyEvent("redefine", "c1", 24.10, "C.6", 3),
            KeyEvent("replace", "c1", 24.187, "B.3", 4),
            KeyEvent("redefine", "c1", 34.80, "A.6", 5),
        ],
    )
    written = {("c1", 4): [24.193], ("c1", 3): [24.198], ("c1", 5): [34.846]}
    v3 = [
        Attempt("c1", 49, 1, "B.3", 3, None, 333, start=29.005, end=29.102, x="ok"),
        Attempt("c1", 50, 1, "A.6", 3, None, 444, start=33.856, end=33.918, x="ok"),
    ]
    found, documented = _after_events(h, v3, {"c1": (5, 34.846)}, {}, written)
    assert not found and [v.kind for v in documented] == ["last deploy wins (documented)"]
    written[("c1", 3)] = [24.198 + CONCURRENT + 1]  # v3 stored only at 30.2: B.3 ran it while v4 was the store's
    found, _ = _after_events(h, v3, {"c1": (5, 34.846)}, {}, written)
    assert [v.kind for v in found] == ["old definition"]


def test_a_cancel_ends_where_a_concurrent_deploy_stored_after_it_makes_the_key_live_again() -> None:
    """C.7 starts with r1 v4 (acknowledged at 19.469) as A.6 cancels r1
    (19.688); the store deleted r1 at 19.687 and wrote C.7's v4 at 19.691:
    r1 lives again, and C.7's runs of it from then on are the stored task's
    (the fault campaign, seed 3424, replayed: reported "cancelled")."""
    h = SimpleNamespace(
        end=60.0,
        key_events=[KeyEvent("redefine", "r1", 19.469, "C.7", 4), KeyEvent("cancel", "r1", 19.688, "A.6", 3)],
    )
    runs = [Attempt("r1", 178, 1, "C.7", 4, None, 555, start=21.934, end=21.937, x="ok")]
    written, deleted = {("r1", 4): [19.691]}, {"r1": [19.687]}
    found, documented = _after_events(h, runs, {"r1": (4, 19.691)}, {}, written, deleted)
    assert not found and [v.kind for v in documented] == ["last deploy wins (documented)"]
    written = {("r1", 4): [19.681]}  # stored before the delete: the cancel stands
    found, _ = _after_events(h, runs, {}, {}, written, deleted)
    assert [v.kind for v in found] == ["cancelled"]


def test_a_slot_that_ran_and_is_recorded_skipped_has_two_ends() -> None:
    h = SimpleNamespace(specs={"r1": {"kind": "rate", "period": 0.25, "misfire": "catch_up"}})
    ran = [Attempt("r1", n, 1, "A.1", 1, 100_000_000 + n * 250_000 + 7, 111, start=100.0 + n / 4) for n in range(4)]
    retry = Attempt("r1", 3, 2, "A.1", 1, 100_000_000 + 3 * 250_000 + 7, 111, start=101.0)  # (its slot: its own time)
    assert _two_ends(h, [*ran, retry], {"r1": {100_000_000 + 4 * 250_000}}) == []
    found = _two_ends(h, [*ran, retry], {"r1": {100_000_000 + 250_000, 100_000_000 + 500_000}})
    assert [(v.kind, v.what) for v in found] == [("two ends", "2 slot(s) ran and are recorded skipped too")]


def _paused_at_the_end(killed: float, faults: list) -> tuple[list, list]:
    """Seed 4820 (SQLite): r2 paused through A at 51.3, resumed through C.5
    (acknowledged at 53.5), C.5 killed at ``killed``; the store still has r2
    paused at the end, and r2 ran nothing in the calm phase."""
    c5 = Life("C", 5, "C.5", started=51.8, ended=killed, how="kill")
    events = [KeyEvent("pause", "r2", 51.3, "A.3", 1), KeyEvent("resume", "r2", 53.5, "C.5", 1)]
    h = SimpleNamespace(
        calm_start=60.0, calm_end=65.0, lease=LEASE, live_at_end={"r2"}, oneshots={}, key_events=events, faults=faults
    )
    row = TaskRow("r2", "tests.campaign.work:work", 65, None, True, None, None)
    ran = [Attempt("r2", 65, 1, "A.3", 1, None, 111, start=51.0, end=51.5, x="ok")]
    return _stalled(h, ran, {"r2": row}, {"C.5": c5}, [])


def test_a_resume_lost_with_its_killed_instance_is_the_documented_limit() -> None:
    lock = SimpleNamespace(kind="sqlite_lock", at=53.77)
    found, documented = _paused_at_the_end(killed=54.9, faults=[lock])  # its commit waited for the lock
    assert not found and [v.kind for v in documented] == ["stalled (documented)"]
    found, documented = _paused_at_the_end(killed=58.0, faults=[])  # it had seconds to store the resume
    assert [v.kind for v in found] == ["stalled"] and not documented
