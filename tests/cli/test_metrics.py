"""Issue 14.11: ``procsched run --metrics-port`` serves Prometheus metrics,
scraped over HTTP on 127.0.0.1 while the real command runs."""

from __future__ import annotations

import json
import re
import signal
import urllib.request

import pytest
from cli_helpers import cli, read_until, start_cli

pytest.importorskip("prometheus_client")
pytestmark = pytest.mark.timeout(60)

JOBS = """
    import ctypes
    import faulthandler
    import procsched
    from procsched import every

    @every(0.05)
    def tick():
        pass

    @every(0.1)
    def crasher():
        if procsched.current_run().run % 2 == 0:
            faulthandler.disable()
            ctypes.string_at(0)

    @every(0.1, retry=procsched.Retry(attempts=2, delay=0.01))
    def flaky():
        if procsched.current_run().attempt == 1:
            raise ConnectionError("not yet")
"""


def _scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def test_metrics_endpoint(jobs_file) -> None:
    proc = start_cli("run", str(jobs_file(JOBS)), "--json", "--workers", "2", "--metrics-port", "0")
    try:
        started = json.loads(read_until(proc.stdout, "procsched_started")[-1])
        url = started["metrics"]
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/metrics", url), url
        read_until(proc.stdout, '"run_crashed"')
        read_until(proc.stdout, '"run": 5')  # a few more runs, and a stats() refresh or two
        read_until(proc.stdout, '"run": 12')
        samples = _scrape(url)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert samples['procsched_runs_total{job="tick",outcome="ok"}'] >= 5
    assert samples['procsched_runs_total{job="crasher",outcome="crashed"}'] >= 1
    assert samples['procsched_run_duration_seconds_count{job="tick"}'] >= 5
    assert 'procsched_run_lateness_seconds_bucket{job="tick",le="0.1"}' in samples
    assert samples["procsched_workers_alive"] >= 1
    assert samples["procsched_worker_restarts_total"] >= 1
    assert samples["procsched_worker_crashes_total"] >= 1
    assert samples["procsched_pending_tasks"] == 3
    # a run counts once, by its last attempt; the attempt tried again counts as a retry (issue 26 item 9)
    assert samples['procsched_runs_total{job="flaky",outcome="ok"}'] >= 1
    assert samples['procsched_retries_total{job="flaky",outcome="error"}'] >= 1
    assert "procsched_crash_loop_holds" in samples and "procsched_running_runs" in samples


def test_a_port_in_use_is_a_clear_error(jobs_file) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli("run", str(jobs_file(JOBS)), "--duration", "0.5", "--metrics-port", str(port))
    assert done.returncode == 1
    assert f"cannot serve metrics on 127.0.0.1:{port}" in done.stderr
