"""Live updates: one reader of the change mark per console, at most once a
second and only while a page is open, whatever the number of viewers."""

from __future__ import annotations

import collections
import threading
import time

import httpx
import pytest
from web_helpers import TOKEN, serve, store_source, wait_until

import procsched


@pytest.mark.timeout(30)
def test_many_viewers_cost_one_read_a_second(tmp_path):
    import web_jobs

    db = str(tmp_path / "live.db")
    s = procsched.Scheduler(workers=1, store=db)
    s.schedule_at_fixed_rate(web_jobs.tick, 0.1, key="tick")
    served = serve(store_source(db))
    live = served.console.live
    try:
        time.sleep(0.5)  # nobody watches: no read at all
        assert live.reads == 0
        changes: list[int] = []
        lock = threading.Lock()

        def watch() -> None:
            seen = 0
            headers = {"Authorization": f"Bearer {TOKEN}"}
            with httpx.Client(base_url=served.url, headers=headers, timeout=10) as client:
                with client.stream("GET", "/events") as answer:
                    assert answer.headers["content-type"].startswith("text/event-stream")
                    for line in answer.iter_lines():
                        if line == "event: change":
                            seen += 1
                            if seen == 2:
                                break
            with lock:
                changes.append(seen)

        started = time.monotonic()
        viewers = [threading.Thread(target=watch) for _ in range(8)]
        for t in viewers:
            t.start()
        for t in viewers:
            t.join(10)
        elapsed = time.monotonic() - started
        assert changes == [2] * 8  # every viewer saw the store change, twice
        assert live.reads <= elapsed / 1.0 + 1  # one read a second, not one per viewer
        wait_until(lambda: live.watchers == 0, what="the server to see the viewers go")
    finally:
        served.close()
        s.shutdown(wait=True, cancel_futures=True)


@pytest.mark.timeout(30)
def test_viewers_fetching_at_once_share_one_store_read(tmp_path):
    import concurrent.futures
    import functools

    import web_jobs

    db = str(tmp_path / "shared.db")
    with procsched.Scheduler(workers=1, store=db) as s:  # a still store: the generation stays put
        s.schedule_cron(web_jobs.tick, "0 3 * * *", key="tick")
    source = store_source(db)
    reads = []
    jobs = source.jobs

    @functools.wraps(jobs)
    def counted():
        reads.append(1)
        return jobs()

    source.jobs = counted  # type: ignore[method-assign]
    served = serve(source)
    try:
        opened = threading.Event()

        def watch() -> None:  # one open page keeps the live reader going, until the console stops
            headers = {"Authorization": f"Bearer {TOKEN}"}
            try:
                with httpx.Client(base_url=served.url, headers=headers, timeout=10) as c:
                    with c.stream("GET", "/events") as answer:
                        for line in answer.iter_lines():
                            if line == "event: change":
                                opened.set()
            except httpx.HTTPError:
                pass  # the console stopped under it

        viewer = threading.Thread(target=watch, daemon=True)
        viewer.start()
        assert opened.wait(10)
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(lambda _: served.client.get("/fragments/jobs"), range(12)))
        assert all(a.status_code == 200 and "tick" in a.text for a in answers)
        assert len(reads) == 1  # twelve viewers fetching at one change: one store read
        served.client.get("/fragments/jobs")
        assert len(reads) == 1  # nothing changed since: the same answer
    finally:
        served.close()


class CountingStore:
    """A real store whose reads the console makes are counted, by kind."""

    def __init__(self, store) -> None:
        self.store = store
        self.describe = store.describe
        self.reads: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()

    def _count(self, kind: str) -> None:
        with self.lock:
            self.reads[kind] += 1

    def change_mark(self):
        self._count("change_mark")
        return self.store.change_mark()

    def jobs_view(self, known=None):
        self._count("jobs_view")
        return self.store.jobs_view(known)

    def job_view(self, key, limit):
        self._count("job_view")
        return self.store.job_view(key, limit)

    def instances(self):
        self._count("instances")
        return self.store.instances()

    def close(self) -> None:
        self.store.close()


@pytest.mark.timeout(60)
def test_open_job_pages_cost_the_store_one_mark_read_a_second_and_one_read_a_change_whatever_the_viewers(tmp_path):
    """Eight viewers of one job page, each fetching both its live parts on
    every change as htmx does, over a store an instance changes ten times a
    second: the store sees one change-mark read a second and, per change
    seen, one read of the job - not eight."""
    import web_jobs

    from procsched._store import open_store
    from procsched._web._store_source import StoreSource

    db = str(tmp_path / "counted.db")
    s = procsched.Scheduler(workers=1, store=db)
    s.schedule_at_fixed_rate(web_jobs.tick, 0.1, key="tick")
    counted = CountingStore(open_store(db))
    served = serve(StoreSource(counted, db))  # type: ignore[arg-type]
    fetched: list[int] = []
    lock = threading.Lock()
    try:
        wait_until(lambda: served.client.get("/api/jobs/tick").status_code == 200, what="tick in the store")
        counted.reads.clear()

        def view() -> None:
            headers = {"Authorization": f"Bearer {TOKEN}"}
            seen = 0
            with httpx.Client(base_url=served.url, headers=headers, timeout=10) as client:
                with client.stream("GET", "/events") as answer:
                    for line in answer.iter_lines():
                        if line == "event: change":
                            for part in ("/fragments/jobs/tick", "/fragments/runs/tick"):
                                assert client.get(part).status_code == 200
                            seen += 1
                            if seen == 4:
                                break
            with lock:
                fetched.append(seen)

        started = time.monotonic()
        viewers = [threading.Thread(target=view) for _ in range(8)]
        for t in viewers:
            t.start()
        for t in viewers:
            t.join(20)
        elapsed = time.monotonic() - started
        reads = dict(counted.reads)
        assert fetched == [4] * 8  # 8 viewers x 4 changes x 2 live parts: 64 fragment fetches
        assert reads["change_mark"] <= elapsed / 1.0 + 1, (reads, elapsed)  # one a second
        assert reads["job_view"] <= reads["change_mark"] + 1, reads  # one per change, shared by the viewers
        assert set(reads) <= {"change_mark", "job_view"}, reads
    finally:
        served.close()
        s.shutdown(wait=True, cancel_futures=True)
