"""Follow-up work scheduled from inside a running task.

The story: a small crawler. Each ``crawl`` task "fetches" one page of a
fake site, in a worker process, and schedules a follow-up ``crawl`` for
each link it finds, with ``procsched.current_scheduler()`` - the scheduler
that is running it. One page is flaky: when its fetch fails, the task
schedules its own retry with exponential backoff, then re-raises so the
failure stays visible. A periodic ``watchdog`` task cancels itself, from
inside its own run, after a while. The main process only starts the root and follows the
events with a listener until no task is left.

    python examples/follow_up_tasks.py
"""

from __future__ import annotations

import os
import threading
import time

import procsched

FAST = os.environ.get("PROCSCHED_EXAMPLE_FAST") == "1"
BACKOFF = 0.05 if FAST else 0.2

SITE = {
    "/": ["/docs", "/blog"],
    "/docs": ["/docs/install", "/docs/api"],
    "/blog": ["/blog/flaky-post"],
    "/docs/install": [],
    "/docs/api": ["/"],
    "/blog/flaky-post": [],
}
FLAKY = {"/blog/flaky-post": 2}  # fails this many times before it loads


def crawl(url: str, attempt: int = 0) -> list[str]:
    scheduler = procsched.current_scheduler()
    time.sleep(0.02)  # the "fetch"
    if attempt < FLAKY.get(url, 0):
        delay = BACKOFF * 2**attempt
        scheduler.schedule(crawl, delay, args=(url, attempt + 1), name=f"crawl {url} (retry {attempt + 1})")
        raise ConnectionError(f"{url}: connection reset; retry in {delay:g} s")
    links = SITE[url]
    for link in links:
        if link > url or link.startswith(url):  # a crude "not seen yet" rule for this fake site
            scheduler.schedule(crawl, args=(link,), name=f"crawl {link}")
    return links


def watchdog(runs: int) -> None:
    """Periodic; cancels itself, from inside its own run, at run number ``runs``."""
    run = procsched.current_run()
    if run.run >= runs:
        procsched.current_scheduler().cancel(run.task_id)


def main() -> None:
    done = threading.Event()
    with procsched.Scheduler(2) as scheduler:

        def on_event(event: dict) -> None:
            kind = event["event"]
            if kind == "run_finished" and event["name"].startswith("crawl"):
                print(f"  {event['name']:<36} ok      (worker {event['worker']})")
            elif kind == "run_failed":
                print(f"  {event['name']:<36} failed  {event['error']}")
            elif kind == "task_cancelled":
                print(f"  {event['name']:<36} cancelled itself")
            if kind in ("run_finished", "run_failed", "task_cancelled") and scheduler.pending() == 0:
                done.set()  # no task left: follow-ups are added before their parent's run ends

        scheduler.submit(int).result()  # the pool is up
        scheduler.add_listener(on_event)
        scheduler.schedule_at_fixed_rate(watchdog, BACKOFF, args=(5,), name="watchdog")
        scheduler.schedule(crawl, args=("/",), name="crawl /")
        if not done.wait(timeout=60):
            raise SystemExit("the crawl did not finish")
        print(f"\nno task left; the scheduler ran {scheduler.stats()['outcomes']}")


if __name__ == "__main__":
    main()
