"""Issue 22 on ``procsched run --web``'s console over a running program:
/metrics counts skipped slots (``procsched_skipped_slots_total{job,reason}``)
and the job's API lists them among its slots."""

from __future__ import annotations

import re
import time

from web_helpers import rate, serve, wait_until

from procsched._web._program import ProgramSource

SKIPPED = re.compile(r'^procsched_skipped_slots_total\{job="slow",reason="overlap"\} (\S+)$', re.M)


def test_metrics_and_the_job_api_show_skipped_slots(scheduler) -> None:
    source = ProgramSource(scheduler, "test program")
    handle = scheduler.schedule_at_fixed_rate(time.sleep, 0.05, args=(0.2,), name="slow", overlap="skip")
    source.add(handle, rate(0.05))
    served = serve(source)
    try:
        counted = wait_until(lambda: SKIPPED.search(served.client.get("/metrics").text), what="a skipped slot counted")
        assert float(counted.group(1)) >= 1
        job = served.client.get(f"/api/jobs/~{handle.id}").json()
        skipped = [s for s in job["slots"] if s["outcome"] == "skipped"]
        assert skipped and all(s["reason"] == "overlap" and s["run"] is None for s in skipped)
    finally:
        served.close()
        handle.cancel()
