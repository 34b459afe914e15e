"""What is particular to runner="ray" (the shared semantics run on it in
test_semantics.py and test_crash_table.py): connecting, ray_options, the
run's children, the user process or the dispatcher thread dying with Ray
runs in flight, Ray missing, and the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta

import psutil
import pytest
import rt_tasks as t
from rt_helpers import Waiter

import procsched

pytestmark = pytest.mark.timeout(120)
ray_cluster = pytest.mark.usefixtures("ray_cluster")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE, os.environ.get("PYTHONPATH", "")]))


def _pids_gone(pids, timeout=30.0):
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    gone, alive = psutil.wait_procs(procs, timeout=timeout)
    return [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def _read_pids(path, waiter):
    text = waiter.until(lambda: os.path.exists(path) and open(path).read().strip() or None)
    return [int(x) for x in text.split()]


def test_without_ray_installed_the_error_names_the_extra():
    program = textwrap.dedent("""
        import sys
        sys.modules["ray"] = None  # import ray fails, as if it were not installed
        import procsched
        try:
            procsched.Scheduler(runner="ray")
        except procsched.SchedulerError as exc:
            print("SchedulerError:", exc)
    """)
    out = subprocess.run([sys.executable, "-c", program], env=_env(), capture_output=True, text=True, timeout=60)
    assert 'SchedulerError: Scheduler(runner="ray") needs Ray: pip install "procsched[ray]"' in out.stdout, out


BAD_OPTIONS = [
    ({"max_retries": 3}, ValueError, "max_retries"),
    ({"retry_exceptions": True}, ValueError, "retry_exceptions"),
    ({"no_such_option": 1}, ValueError, "no_such_option"),
    ({"num_cpus": -1}, ValueError, r"ray_options\['num_cpus'\].*-1"),
    ({"num_gpus": float("nan")}, ValueError, "num_gpus"),
    ({"memory": -(2**20)}, ValueError, "memory"),
    ({"resources": {"GPU_X": -2}}, ValueError, r"ray_options\['resources'\]\['GPU_X'\]"),
    ({"num_cpus": "2"}, TypeError, "num_cpus.*str"),
    ({"num_cpus": True}, TypeError, "num_cpus"),
    ({"resources": [("x", 1)]}, TypeError, "resources"),
    ("num_cpus=2", TypeError, "ray_options must be a mapping"),
    ({"scheduling_strategy": "NOWHERE"}, ValueError, "scheduling_strategy.*NOWHERE"),
    ({"resources": {"CPU": 1}}, ValueError, "rejected by Ray.*num_cpus"),  # Ray's own check
]
METHODS = {
    "schedule": lambda s, **kw: s.schedule(t.square, 0, args=(2,), **kw),
    "schedule_at": lambda s, **kw: s.schedule_at(t.square, datetime.now(UTC) + timedelta(seconds=1), args=(2,), **kw),
    "schedule_at_fixed_rate": lambda s, **kw: s.schedule_at_fixed_rate(t.square, 1, args=(2,), **kw),
    "schedule_with_fixed_delay": lambda s, **kw: s.schedule_with_fixed_delay(t.square, 1, args=(2,), **kw),
}


@ray_cluster
def test_bad_ray_options_are_refused_at_the_call(make_scheduler):
    s = make_scheduler(2, runner="ray")
    for options, error, match in BAD_OPTIONS:
        for method in METHODS.values():
            with pytest.raises(error, match=match):
                method(s, ray_options=options)
    assert s.pending() == 0 and s.stats()["pending"] == 0  # nothing was scheduled


def test_ray_options_on_other_runners_are_an_error(make_scheduler):
    for s in (procsched.InlineScheduler(), make_scheduler(1, runner="threads")):
        for method in METHODS.values():
            with pytest.raises(ValueError, match="runner='ray'"):
                method(s, ray_options={"num_cpus": 1})
        assert s.pending() == 0


@ray_cluster
def test_ray_options_reach_ray(make_scheduler):
    s = make_scheduler(2, runner="ray")
    assert s.schedule(t.assigned_resources, ray_options={"num_cpus": 2}).result(60) == {"CPU": 2.0}
    assert s.submit(t.assigned_resources).result(60) == {"CPU": 1.0}  # Ray's default


@ray_cluster
def test_runner_ray_rejects_process_pool_options():
    for option in ({"max_tasks_per_worker": 3}, {"max_worker_memory": 2**30}):
        with pytest.raises(ValueError, match="runner='ray'"):
            procsched.Scheduler(2, runner="ray", **option)


@ray_cluster
def test_current_run_inside_a_ray_run(make_scheduler):
    s = make_scheduler(2, runner="ray")
    h = s.schedule(t.run_info, 0.05)
    info, pid = h.result(60)
    assert pid != os.getpid() and info.worker == pid  # a Ray worker process
    assert (info.task_id, info.run, info.outcome, info.finished_at) == (h.id, 1, None, None)
    run = h.runs[0]
    assert info.scheduled_for == pytest.approx(run.scheduled_for, abs=1e-6)
    assert run.scheduled_for <= info.started_at <= run.finished_at
    assert info.started_at == pytest.approx(run.started_at, abs=0.05)


@ray_cluster
def test_what_a_run_started_ends_with_the_run(make_scheduler, tmp_path):
    s = make_scheduler(2, runner="ray")
    child, orphan = s.submit(t.start_children, str(tmp_path / "pids")).result(60)
    assert not _pids_gone([child, orphan], timeout=10)
    assert s.submit(t.square, 5).result(60) == 25  # the Ray worker carries on


@ray_cluster
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_dispatcher_thread_death_fails_the_handles_and_stops_the_ray_runs(make_scheduler, tmp_path):
    s = make_scheduler(2, runner="ray")
    waiter = Waiter(s)
    path = str(tmp_path / "pid")
    running = s.submit(t.report_pid_then_hang, path)
    [ray_worker] = _read_pids(path, waiter)
    later = s.schedule(t.square, 3600, args=(1,))
    s._backend.send(("add",))  # a malformed command: the dispatcher thread raises and dies
    for h in (running, later):
        with pytest.raises(procsched.SchedulerError, match="dispatcher thread died"):
            h.result(30)
    assert not _pids_gone([ray_worker])  # its run was cancelled with the thread's death
    with pytest.raises(procsched.SchedulerError):
        s.submit(t.square, 2)
    assert make_scheduler(1, runner="ray").submit(t.square, 5).result(60) == 25  # a new one works


USER_PROGRAM = textwrap.dedent("""
    import sys
    import procsched
    import rt_tasks as t

    if __name__ == "__main__":
        s = procsched.Scheduler(2, runner="ray")
        s.submit(t.report_pid_then_hang, sys.argv[1])
        s.schedule_at_fixed_rate(t.pid, 0.05)
        print(s.submit(t.square, 2).result(60), flush=True)
        sys.stdin.readline()
        if sys.argv[2] == "raise":
            raise RuntimeError("the user program dies with a Ray run in flight, never shut down")
        sys.stdin.read()  # until killed
""")


@ray_cluster
@pytest.mark.parametrize("how", ["sigkill", "raise"])
def test_user_process_dying_ends_its_ray_runs(how, tmp_path, fifo):
    # The dispatcher is a thread of the user process: "the dispatcher dies"
    # is the user process dying. Ray ends the tasks of a driver that is gone;
    # at a normal exit (here: an unhandled exception) procsched stops them.
    script = tmp_path / "user.py"
    script.write_text(USER_PROGRAM)
    user = subprocess.Popen(
        [sys.executable, str(script), fifo, how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        text=True,
    )
    try:
        with open(fifo) as reported:  # the run writes its pid here first thing
            ray_worker = int(reported.readline())
        assert user.stdout.readline().strip() == "4"
        assert psutil.pid_exists(ray_worker)
        if how == "sigkill":
            user.send_signal(signal.SIGKILL)
            user.wait(30)
        else:
            _, err = user.communicate("go\n", timeout=60)
            assert "RuntimeError: the user program dies" in err and "was not shut down" in err
        assert not _pids_gone([ray_worker], timeout=60)
    finally:
        if user.poll() is None:
            user.kill()
            user.wait()


CONNECT_PROGRAM = textwrap.dedent("""
    import ray
    import procsched
    import rt_tasks as t

    s = procsched.Scheduler(runner="ray")  # ray.init(): RAY_ADDRESS
    print(s.workers, s.submit(t.square, 4).result(60), ray.is_initialized(), flush=True)
    s.shutdown()
    print(ray.is_initialized(), flush=True)
""")


@ray_cluster
def test_a_scheduler_connects_through_ray_address_and_disconnects_at_shutdown():
    out = subprocess.run(
        [sys.executable, "-c", CONNECT_PROGRAM], env=_env(), capture_output=True, text=True, timeout=90
    )
    assert out.stdout.split() == ["2", "16", "True", "False"], out.stderr[-3000:]


JOBS = textwrap.dedent("""
    import os
    from procsched import every

    @every(0.2)
    def tick():
        return os.getpid()
""")


@ray_cluster
def test_cli_runs_a_jobs_file_on_ray(tmp_path):
    jobs = tmp_path / "jobs_on_ray.py"
    jobs.write_text(JOBS)
    out = subprocess.run(
        [sys.executable, "-m", "procsched", "run", str(jobs), "--runner", "ray", "--duration", "2", "--json"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=90,
        cwd=str(tmp_path / ".."),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert events[0]["event"] == "procsched_started" and events[0]["runner"] == "ray"
    finished = [e for e in events if e["event"] == "run_finished" and e["name"] == "tick"]
    assert len(finished) >= 5
