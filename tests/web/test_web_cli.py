"""The commands: ``procsched web --store S`` and ``procsched run FILE --web PORT``."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
TOKEN = "cli-token-0123456789"


def start(*args: str, cwd: Path | None = None) -> subprocess.Popen[str]:
    env = dict(os.environ, PROCSCHED_WEB_TOKEN=TOKEN)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), str(Path(__file__).parent), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-m", "procsched", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    )


def console_url(proc: subprocess.Popen[str]) -> str:
    """The URL from the first lines on stderr (the login link's line comes next)."""
    assert proc.stderr is not None
    for _ in range(20):
        line = proc.stderr.readline()
        match = re.search(r"console at (http://\S+)/", line)
        if match:
            login = proc.stderr.readline()
            assert f"login?token={TOKEN}" in login
            return match.group(1)
    raise AssertionError("no console URL printed")


@pytest.mark.timeout(60)
def test_web_over_a_store(tmp_path):
    import procsched

    db = str(tmp_path / "s.db")
    import web_jobs

    with procsched.Scheduler(workers=1, store=db) as s:
        s.schedule_cron(web_jobs.tick, "0 3 * * *", tz="Europe/Berlin", key="nightly")
    proc = start("web", "--store", db, "--port", "0")
    try:
        url = console_url(proc)
        assert url.startswith("http://127.0.0.1:")
        client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        [job] = client.get("/api/jobs").json()
        assert job["key"] == "nightly" and job["state"] == "pending"
        assert httpx.get(url + "/api/jobs").status_code == 401
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        proc.kill()
        proc.wait()


def test_web_refuses_a_bad_store_and_a_taken_port(tmp_path):
    for missing in (tmp_path / "no" / "such" / "dir" / "x.db", tmp_path / "typo.db"):
        bad = start("web", "--store", str(missing), "--port", "0")
        assert bad.wait(30) == 1
        assert bad.communicate()[1].startswith(f"procsched: cannot open the store: no store at {missing}")
    assert not (tmp_path / "typo.db").exists()  # the console never creates a store
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        from procsched._store import open_store

        open_store(tmp_path / "ok.db").close()
        busy = start("web", "--store", str(tmp_path / "ok.db"), "--port", str(port))
        assert busy.wait(30) == 1
        assert "cannot serve the console" in busy.communicate()[1]


@pytest.mark.timeout(60)
def test_run_with_web(tmp_path):
    jobs = tmp_path / "jobs_web_cli.py"
    jobs.write_text("from procsched import every\n\n@every(0.2)\ndef tick():\n    pass\n")
    proc = start("run", str(jobs), "--plain", "--workers", "1", "--duration", "30", "--web", "0", cwd=tmp_path)
    try:
        url = console_url(proc)
        client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        [job] = client.get("/api/jobs").json()
        assert job["name"] == "tick" and job["schedule"] == "every 200 ms"
        assert client.post(f"/api/jobs/{job['ref']}/pause").json()["ok"] is True
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.timeout(60)
def test_console_benchmark_runs():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.console",
            "--jobs",
            "50",
            "--runs",
            "5",
            "--repeat",
            "1",
            "--cli-jobs",
            "30",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| GET /api/jobs (50 jobs, after a change) |" in proc.stdout and "| procsched jobs (30 jobs" in proc.stdout
