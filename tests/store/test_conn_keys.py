"""Keys both stores can hold, checked at the call (issue 20 items 6 and 7).

Before: ``"k\\ud800"`` was accepted and killed the dispatcher (SQLite: every
task failed); a NUL or a 10,000-character key was accepted and made every
later PostgreSQL commit fail (all keyed tasks stopped).
"""

from __future__ import annotations

import pytest

import procsched
from procsched._store import TaskDefinition, TaskState, open_store
from procsched._store._keys import MAX_KEY_CHARS, check_key
from tests.durable import jobs_mod

T0 = 1_700_000_000 * 10**9
P = 10**9
BAD = [
    "k\ud800",
    "\udc80",
    "k\x00",
    "x" * 10_000,
    "x" * (MAX_KEY_CHARS + 1),
    "a\x1b[31m",
    "a\x7f",
    "a\x85",
    "line\u2028break",
    "a\tb",
    "a\nb",
    "",
]
GOOD = [
    "k",
    "a b",
    "job:42/daily",
    "é",
    "名前",
    "\U0001f600" * MAX_KEY_CHARS,
    "x" * MAX_KEY_CHARS,
    "a\u00a0b",
    "e\u0301",
    "\u200dzwj",
]


@pytest.mark.parametrize("key", GOOD, ids=range(len(GOOD)))
def test_keys_both_stores_can_hold_are_accepted(key):
    assert check_key(key) is key


@pytest.mark.parametrize("key", BAD, ids=range(len(BAD)))
def test_other_keys_are_refused_naming_the_argument_and_the_value(key):
    with pytest.raises(ValueError) as info:
        check_key(key, "key")
    message = str(info.value)
    assert message.startswith("key must")
    assert len(message) < 250, message  # the value shortened
    if key:
        assert repr(key)[:20] in message


def test_a_key_that_is_not_a_str_is_a_type_error():
    for value in (3, b"k", None, ["k"]):
        with pytest.raises(TypeError, match="key must be a non-empty str"):
            check_key(value)


def test_the_longest_key_is_stored_claimed_and_read_back(store):
    """200 four-byte characters (800 bytes of UTF-8) in both primary keys:
    the limit fits PostgreSQL's btree entry (2,704 bytes) with room."""
    key = "\U0001f600" * MAX_KEY_CHARS
    b = store.batch()
    b.upsert(TaskDefinition(key, "m:f", b"", {"kind": "fixed_rate", "period_ns": P}), TaskState(next_due_ns=T0))
    b.commit()
    me = store.register()
    assert store.claim_run(me, key, 1, 1, T0)
    assert store.finish_run(me, key, 1, 1, "ok", T0 + 1, T0 + P)
    assert [t.key for t in store.jobs()] == [key]
    assert [(r.key, r.run, r.outcome) for r in store.history(key)] == [(key, 1, "ok")]


@pytest.mark.timeout(60)
def test_a_bad_key_is_refused_at_the_call_and_nothing_stops(store_url):
    """Through the real Scheduler on a real store: each bad key is a
    ValueError at the call, nothing is scheduled or stored, and keyed and
    unkeyed tasks go on."""
    with procsched.Scheduler(2, store=store_url) as s:
        for key in ("k\ud800", "k\x00", "x" * 10_000):
            for method, when in ((s.schedule, 0), (s.schedule_at_fixed_rate, 0.01), (s.schedule_cron, "* * * * *")):
                with pytest.raises(ValueError, match="^key must") as info:
                    method(jobs_mod.add, when, args=(1, 2), key=key)
                assert repr(key)[:20] in str(info.value)
        assert s.jobs() == []
        tick = s.schedule_at_fixed_rate(jobs_mod.add, 0.02, args=(1, 1), key="tick", max_runs=5)
        assert s.schedule(jobs_mod.add, 0, args=(2, 3), key="once").result(30) == 5
        assert s.submit(jobs_mod.add, 3, 4).result(30) == 7
        tick.result(30)
        assert [r.outcome for r in s.history("tick")] == ["ok"] * 5
        with pytest.raises(ValueError, match="^key must"):
            s.history("k\x00")
    with open_store(store_url) as store:
        assert store.jobs() == []  # the one-shot and the limited task ended; nothing bad was stored
        assert {r.key for r in store.history(None, 100)} == {"tick", "once"}
