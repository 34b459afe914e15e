"""A COMMIT whose answer is lost (issue 20 item 5).

The connection drops at the instant the server has committed and before
its client hears so: the client sees an error, the store has the batch.
The dispatcher then retries the batch; its claims find the task rows held
by this very scheduler (same holder, same token) and must be taken for
what they are - its own - or the tasks stay held by nobody running them,
every later slot lost, until a restart. A TCP proxy (``pgproxy``) between
the client and the throwaway server swallows that answer and cuts the
connection.
"""

from __future__ import annotations

import pytest

import procsched
from procsched._errors import StoreError
from procsched._store import TaskDefinition, TaskState, open_store
from procsched._store._pgcluster import PORT
from tests.durable import jobs_mod
from tests.runtime.rt_helpers import Waiter
from tests.store.pgproxy import Proxy, socket_path

T0 = 1_700_000_000 * 10**9
P = 10**9
CLAIM = b"INSERT INTO procsched_runs"  # the statement of a claim (one op or several)


@pytest.fixture
def proxy(pg_cluster):
    with Proxy(socket_path(pg_cluster.dir, PORT)) as p:
        yield p


def _dbname(pg_url: str) -> str:
    return pg_url.split("/")[3].split("?")[0]


def _tasks(store, keys):
    b = store.batch()
    for key in keys:
        b.upsert(TaskDefinition(key, "m:f", b"", {"kind": "fixed_rate", "period_ns": P}), TaskState(next_due_ns=T0))
    b.commit()


@pytest.mark.parametrize("keys", [["a"], ["b", "c", "d"]], ids=["one-claim", "a-group-of-claims"])
def test_a_claim_whose_commit_answer_was_lost_is_its_holders_when_retried(proxy, pg_url, keys):
    store = open_store(proxy.url_for(_dbname(pg_url)))
    _tasks(store, keys)
    me = store.register()
    b = store.batch(me)
    for key in keys:
        b.started(key, 1, 1, T0)
    proxy.lose_next_commit(after=CLAIM)
    with pytest.raises(StoreError, match="writing a batch"):
        b.commit()
    assert proxy.cut.is_set()
    assert {t.key: t.holder for t in store.jobs()} == {k: me.id for k in keys}  # committed, unheard of
    retried = store.batch(me)  # what the dispatcher does: the same ops again
    for key in keys:
        retried.started(key, 1, 1, T0)
    result = retried.commit()
    assert result.ok, result
    assert [(r.key, r.run, r.outcome) for r in store.load().in_flight] == [(k, 1, None) for k in keys]
    for key in keys:  # and the run goes on as any run: its end, the next claim
        assert store.finish_run(me, key, 1, 1, "ok", T0 + 1, T0 + P)
        assert store.claim_run(me, key, 2, 1, T0 + P)
    store.close()


def test_a_claim_already_held_is_its_holders_only_for_that_very_run(store):
    """The retry's rule on both stores (SQLite never loses an answer, but the
    claim is the same SQL): the same (run, attempt) by the same holder and
    token is won again; any other claim on a held task stays lost."""
    _tasks(store, ["k"])
    me = store.register()
    other = store.register()
    assert store.claim_run(me, "k", 1, 1, T0)
    assert store.claim_run(me, "k", 1, 1, T0)  # the retried claim
    assert not store.claim_run(other, "k", 1, 1, T0)  # another holder
    assert not store.claim_run(me, "k", 2, 1, T0 + P)  # another run
    assert not store.claim_run(me, "k", 1, 2, T0)  # another attempt
    assert [(r.run, r.attempt, r.holder) for r in store.load().in_flight] == [(1, 1, me.id)]
    assert store.finish_run(me, "k", 1, 1, "ok", T0 + 1, T0 + P)
    assert not store.claim_run(me, "k", 1, 1, T0)  # ended: that run is never claimed again
    assert store.claim_run(other, "k", 2, 1, T0 + P)


@pytest.mark.timeout(90)
def test_a_scheduler_goes_on_after_a_commit_whose_answer_was_lost(proxy, pg_url, caplog):
    """Through the real Scheduler: the batch with a claim commits, the answer
    is lost; the dispatcher retries it, recognises its claims and goes on -
    no run missing, none stuck in flight, every later slot claimed."""
    url = proxy.url_for(_dbname(pg_url))
    with procsched.Scheduler(2, store=url) as s:
        waiter = Waiter(s)
        handles = [s.schedule_at_fixed_rate(jobs_mod.add, 0.05, args=(1, 2), key=k) for k in ("x", "y")]
        waiter.until(lambda: all(len(h.runs) >= 3 for h in handles))
        for _ in range(2):  # twice: a batch of one claim and one of two are both likely among them
            proxy.lose_next_commit(after=CLAIM)
            assert proxy.cut.wait(20), "no claim was committed through the proxy"
            wanted = [(h, len(h.runs) + 10) for h in handles]
            waiter.until(lambda wanted=wanted: all(len(h.runs) >= n for h, n in wanted), timeout=30)
        for h in handles:
            h.cancel()
    assert "could not record a turn" in caplog.text  # the drop was seen, and retried
    with open_store(pg_url) as store:
        assert store.load().in_flight == []
        for key in ("x", "y"):
            runs = store.history(key, 10_000)
            numbers = [r.run for r in runs]
            assert numbers == list(range(1, len(runs) + 1)), numbers  # none lost, none twice
            assert {r.outcome for r in runs[:-1]} == {"ok"}, [(r.run, r.outcome) for r in runs]


def test_a_connection_dropped_while_the_store_opens_is_read_again(proxy, pg_url):
    """A program that starts at the instant its connection drops (the fault
    campaign, seed 917: Scheduler() raised StoreError) opens the store on a
    new connection: the opening read is read again."""
    url = proxy.url_for(_dbname(pg_url))
    open_store(url).close()  # the schema is there: opening is a read
    proxy.lose_next_commit(after=b"SELECT version FROM procsched_version")
    store = open_store(url)
    try:
        assert proxy.cut.is_set()  # the first read's connection was cut
        assert store.schema_version() == procsched._store.SCHEMA_VERSION
    finally:
        store.close()
