"""Smoke test for ``python -m benchmarks``: the harness runs end to end and
its output has the promised shape (a markdown table, a JSON file, a plot).
Speed is not asserted: ``--tiny`` shrinks the workload to nothing."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTENDERS = "procsched[processes],procsched[threads],sequential,ProcessPoolExecutor"


def _bench(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.timeout(90)
def test_quick_tiny_throughput_writes_table_and_json(tmp_path):
    plots = importlib.util.find_spec("matplotlib") is not None
    proc = _bench(
        "--quick",
        "--tiny",
        "--only",
        "throughput",
        "--contenders",
        CONTENDERS,
        "--results-dir",
        str(tmp_path),
        *([] if plots else ["--no-plots"]),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "### throughput" in out
    header = next(line for line in out.splitlines() if line.startswith("| contender |"))
    assert "throughput [tasks/s]" in header
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    for name in CONTENDERS.split(","):
        assert any(name in row for row in rows), name
    assert "Targets (procsched[processes]):" in out
    data = json.loads((tmp_path / "latest.json").read_text())
    assert data["mode"] == "tiny" and data["workers"] == 2
    assert data["machine"]["nproc"] >= 1 and data["machine"]["python"]
    scenario = data["scenarios"]["throughput"]
    assert set(scenario["contenders"]) == set(CONTENDERS.split(","))
    for contender in scenario["contenders"].values():
        assert contender["reps"] and contender["summary"]["tasks_per_s"]["median"] > 0
    assert {t["label"] for t in scenario["targets"]} >= {"tiny-task throughput vs ProcessPoolExecutor"}
    if plots:
        assert (tmp_path / "throughput.png").stat().st_size > 0


def test_list_and_bad_names():
    listing = _bench("--list")
    assert listing.returncode == 0
    for name in (
        "cpu_periodic",
        "throughput",
        "timer_accuracy",
        "fixed_rate",
        "scale",
        "crashes",
        "soak",
        "core_scale",
    ):
        assert name in listing.stdout
    bad = _bench("--only", "no_such_scenario")
    assert bad.returncode == 2 and "unknown scenario" in bad.stderr
