"""Issue 20, the Ray runner (items 13-14): a real local Ray cluster, started
by procsched in a user program of its own (a subprocess, so that Ray's
processes are that program's descendants and end with it).

Slow by nature (a Ray start is seconds on two cores): marked ``slow``.
"""

from __future__ import annotations

import pytest

from tests.promises.helpers import starts, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_a_local_ray_cluster_runs_what_the_processes_runner_runs(programs, tmp_path) -> None:
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "only_here.py").write_text("def triple(x):\n    return 3 * x\n")
    prog = programs(f"""
        sys.path.insert(0, {str(mods)!r})  # importable by the driver only, as a test module is
        os.chdir({str(tmp_path)!r})
        os.environ.pop("RAY_ADDRESS", None)
        import procsched, only_here
        with procsched.Scheduler(2) as s:
            print("processes", s.submit(only_here.triple, 2).result(timeout=60), flush=True)
        with procsched.Scheduler(1, runner="ray") as s:
            try:
                print("ray", s.submit(only_here.triple, 2).result(timeout=120), flush=True)
            except Exception as exc:
                print("ray", type(exc).__name__, str(exc)[:200], flush=True)
    """)
    assert prog.expect("processes", timeout=60) == "processes 6"
    assert prog.expect("ray", timeout=180) == "ray 6"
    assert prog.wait(60) == 0


def test_the_death_of_the_ray_cluster_is_reported_within_seconds(programs, tmp_path) -> None:
    out = str(tmp_path / "runs.log")
    prog = programs(f"""
        os.environ.pop("RAY_ADDRESS", None)
        import threading, procsched
        from tests.promises import tasks
        s = procsched.Scheduler(2, runner="ray")
        h = s.schedule_at_fixed_rate(tasks.mark, 0.2, args=({out!r}, "r"))
        print("ready", flush=True)
        sys.stdin.readline()  # the test killed Ray's gcs_server and raylet
        killed, deadline = time.monotonic(), time.monotonic() + 10
        while time.monotonic() < deadline and not h.done() and not any(
                r.outcome == "crashed" and r.finished_at is not None for r in h.runs[-3:]):
            time.sleep(0.1)
        reported = h.done() or any(r.outcome == "crashed" for r in h.runs[-3:])
        print("reported", reported, round(time.monotonic() - killed, 1), h.state.value, flush=True)
        if reported:  # (else the test fails already: no need to wait for a shutdown that hangs)
            t = threading.Thread(target=s.shutdown, kwargs={{"wait": True}}, daemon=True)
            t.start()
            t.join(10)
            print("shutdown", "returned" if not t.is_alive() else "hangs", flush=True)
        os._exit(0)
    """)
    assert prog.expect("ready", timeout=180) == "ready"
    wait_until(lambda: len(starts(out)) >= 3, 120, "runs on Ray")
    import psutil

    ray = [p for p in psutil.Process(prog.proc.pid).children(recursive=True) if p.name() in ("gcs_server", "raylet")]
    assert {p.name() for p in ray} == {"gcs_server", "raylet"}, [p.name() for p in ray]
    for p in ray:
        p.kill()
    prog.send("killed")
    got = prog.expect("reported", timeout=60)
    assert got.split()[1] == "True", f"not reported within 10 s: {got}"
    assert prog.expect("shutdown", timeout=60) == "shutdown returned"
    err = prog.stderr()
    assert "Ray's cluster is gone (Ray's " in err, err[-3000:]  # the reason, logged with the handles failed
    assert "dispatcher thread failed" not in err, err[-3000:]
