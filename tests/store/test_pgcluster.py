"""The throwaway PostgreSQL cluster dies with the process that started it,
even by SIGKILL (a test run killed by a timeout must not leave servers)."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from procsched._store._pgcluster import find_binaries

CHILD = """
import os, sys
from procsched._store._pgcluster import ThrowawayCluster
c = ThrowawayCluster(fsync=False).start()
print(c.dir, flush=True)
os.kill(os.getpid(), 9)
"""


@pytest.mark.timeout(120)
def test_a_cluster_whose_owner_is_sigkilled_is_stopped_and_removed() -> None:
    if find_binaries() is None and not os.environ.get("CI"):
        pytest.skip("PostgreSQL server binaries not installed")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child = subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "PYTHONPATH": root},
    )
    assert child.returncode == -9, child.stderr
    d = child.stdout.strip()
    watchers = [
        p for p in psutil.process_iter(["cmdline"]) if d in (p.info["cmdline"] or []) and "-c" in p.info["cmdline"]
    ]
    gone, alive = psutil.wait_procs(watchers, timeout=60)  # the watcher ends once the server is stopped
    assert not alive
    assert not os.path.exists(d)
    assert not [p for p in psutil.process_iter(["cmdline"]) if any(d in a for a in p.info["cmdline"] or [])]
