"""Issue 26 item 3 in the console: a failed run's error and traceback reach
the job page and the API, over a running program (runs its handle had before
the console listened included) and over a store a real program wrote."""

from __future__ import annotations

from web_helpers import rate, serve, store_source, wait_until

import procsched
from procsched._web._program import ProgramSource


def test_program_console_shows_the_traceback_of_a_run_it_did_not_see(scheduler):
    import web_jobs

    handle = scheduler.schedule_at_fixed_rate(web_jobs.fails, 3600, name="fails")
    wait_until(lambda: handle.runs, timeout=30, what="the first run")
    source = ProgramSource(scheduler, "test program")  # listening only now: run 1 comes from the handle
    source.add(handle, rate(3600))
    served = serve(source)
    try:
        run = served.client.get(f"/api/jobs/~{handle.id}").json()["runs"][-1]
        assert run["error"] == "ValueError: bad luck" and "in fails" in run["traceback"]
        page = served.client.get(f"/jobs/~{handle.id}").text
        assert "<summary>traceback</summary>" in page and ", in fails" in page
    finally:
        served.close()


def test_store_console_shows_the_traceback_a_program_stored(tmp_path):
    import web_jobs

    db = str(tmp_path / "jobs.db")
    with procsched.Scheduler(1, store=db) as s:
        handle = s.schedule_at_fixed_rate(web_jobs.fails, 3600, key="fails")
        wait_until(lambda: handle.runs, timeout=30, what="the first run")
    served = serve(store_source(db))
    try:
        run = served.client.get("/api/jobs/fails").json()["runs"][-1]
        assert run["error"] == "ValueError: bad luck" and "in fails" in run["traceback"]
        page = served.client.get("/jobs/fails").text
        assert "<summary>traceback</summary>" in page and ", in fails" in page
    finally:
        served.close()
