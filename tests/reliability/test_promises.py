"""Regression tests for issue 15 ("broken promises found by adversarial
testing") and the runtime items of issue 14. Each test failed before its fix.

Real processes throughout; tests synchronise on handles, files and pipes.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import weakref

import hanging_import_task
import promise_tasks as pt
import psutil
import pytest
import rel_tasks
import slow_import_task
from rel_helpers import descendants, dispatcher, read_file, wait_all_gone, wait_for_lines, wait_until

import procsched
from procsched import SchedulerError, TaskState, TaskTimeoutError, WorkerCrashedError
from procsched._errors import SchedulerClosedError

HERE = os.path.dirname(os.path.abspath(__file__))


def _program(tmp_path, body: str, *args: str, **popen: object) -> subprocess.Popen:
    """Start a small user program (``body``) in a subprocess."""
    script = tmp_path / "program.py"
    script.write_text(
        f"import os, sys, time, logging\nsys.path.insert(0, {HERE!r})\nimport procsched, rel_tasks, promise_tasks\n"
        + textwrap.dedent(body)
    )
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


# -- 1. one task cannot break the scheduler --------------------------------------


@pytest.mark.timeout(60)
def test_an_exception_that_unpickles_as_a_str_fails_its_task_alone(new_scheduler):
    s = new_scheduler(2)
    events = []
    s.add_listener(events.append)
    bad = s.submit(pt.raise_rebuilds_as_str)
    with pytest.raises(SchedulerError, match="not an exception"):
        bad.result(timeout=30)
    assert bad.state is TaskState.FAILED
    assert s.submit(rel_tasks.hello, 1).result(timeout=30).startswith("hello 1")
    assert s.stats()["outcomes"]["error"] == 1
    assert any(e["event"] == "run_failed" and e["task_id"] == bad.id for e in events)


@pytest.mark.timeout(60)
def test_an_exception_whose_str_raises_with_a_listener(new_scheduler):
    s = new_scheduler(1)
    events = []
    s.add_listener(events.append)
    bad = s.submit(pt.raise_str_raises)
    with pytest.raises(pt.StrRaises):
        bad.result(timeout=30)
    assert s.submit(rel_tasks.hello, 2).result(timeout=30).startswith("hello 2")
    failed = [e for e in events if e["event"] == "run_failed"]
    assert failed and failed[0]["error"].startswith("StrRaises")


@pytest.mark.timeout(60)
def test_a_listener_raising_systemexit_is_skipped(new_scheduler, caplog):
    s = new_scheduler(1)
    seen = []

    def exits(event):
        raise SystemExit(3)

    s.add_listener(exits)
    s.add_listener(seen.append)
    for i in range(3):
        assert s.submit(rel_tasks.hello, i).result(timeout=30).startswith(f"hello {i}")
    assert s.stats()["pending"] == 0
    assert sum(e["event"] == "run_finished" for e in seen) == 3
    assert "SystemExit" in caplog.text


# -- 2. a result that cannot be unpickled here fails the task ---------------------


@pytest.mark.timeout(60)
def test_a_result_that_cannot_be_unpickled_fails_the_task(new_scheduler):
    s = new_scheduler(1)
    events = []
    ended = threading.Event()

    def listen(event):
        events.append(event)
        if event["event"].startswith("run_") and event["event"] != "run_started":
            ended.set()

    s.add_listener(listen)
    h = s.submit(pt.return_two_args)
    with pytest.raises(SchedulerError, match="could not be unpickled"):
        h.result(timeout=30)
    assert h.state is TaskState.FAILED
    assert h.runs[-1].outcome == "error"
    # the handle resolves before the listeners hear of the run's end: wait for them
    assert ended.wait(30)
    assert [e["event"] for e in events if e["task_id"] == h.id] == ["run_started", "run_failed"]


# -- 3. the dispatcher never blocks on a worker's pipe -----------------------------


@pytest.mark.timeout(90)
def test_a_stopped_worker_does_not_block_the_dispatcher(new_scheduler):
    s = new_scheduler(1)
    s.submit(rel_tasks.hello).result(timeout=30)
    worker = psutil.Process(s.stats()["workers"][0]["pid"])
    worker.suspend()
    try:
        h = s.submit(pt.length, b"x" * (8 << 20))  # far more than a pipe buffer holds
        for _ in range(3):  # the first may be answered before the run is handed out
            t0 = time.monotonic()
            stats = s.stats()
            assert time.monotonic() - t0 < 5, "stats() waited for a stopped worker's pipe"
        assert stats["running"] == 1
    finally:
        worker.resume()
    assert h.result(timeout=30) == 8 << 20


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_worker_that_takes_nothing_from_its_pipe_is_killed(new_scheduler):
    """Decision: a worker that takes nothing from its pipe for 10 s while we
    have something for it is stuck: it is killed (the run is "crashed")."""
    s = new_scheduler(1)
    s.submit(rel_tasks.hello).result(timeout=30)
    worker = psutil.Process(s.stats()["workers"][0]["pid"])
    worker.suspend()
    h = s.submit(pt.length, b"x" * (8 << 20))
    with pytest.raises(WorkerCrashedError):
        h.result(timeout=40)
    assert s.submit(pt.length, b"abc").result(timeout=30) == 3


# -- 4. shutdown(wait=False) then exit: the one-shots still run --------------------


@pytest.mark.timeout(60)
def test_shutdown_without_wait_then_exit_runs_every_one_shot(tmp_path):
    log = str(tmp_path / "runs")
    proc = _program(
        tmp_path,
        f"""
        s = procsched.Scheduler(1)
        for i in range(4):
            s.submit(rel_tasks.touch_and_sleep, {log!r}, 0.1)
        s.shutdown(wait=False)
    """,
    )
    out, err = proc.communicate(timeout=50)
    assert proc.returncode == 0, err
    assert len(read_file(log).splitlines()) == 4
    assert "not shut down" not in err and "ERROR" not in err, err


@pytest.mark.timeout(120)
def test_an_explicitly_shut_down_scheduler_logs_nothing_at_exit(tmp_path):
    """Issue 14.3: shutdown(wait=False, cancel_futures=True), result(), exit."""
    for _ in range(5):
        proc = _program(
            tmp_path,
            """
            logging.basicConfig(level=logging.INFO)
            s = procsched.Scheduler(2)
            h = s.submit(rel_tasks.hello, 1)
            s.shutdown(wait=False, cancel_futures=True)
            try:
                h.result(timeout=30)
            except Exception:
                pass
        """,
        )
        out, err = proc.communicate(timeout=50)
        assert proc.returncode == 0, err
        assert "ERROR" not in err and "WARNING" not in err, err


# -- 5. a timeout counts from the moment the task's code starts -------------------


@pytest.mark.timeout(60)
def test_a_timeout_does_not_count_a_cold_worker_importing_the_task(new_scheduler):
    s = new_scheduler(1, timeout=0.25)
    with pytest.raises(TaskTimeoutError):
        s.submit(pt.hang).result(timeout=30)  # the next worker is cold
    for _ in range(3):  # each run imports a module that takes 0.5 s, in a cold worker
        assert s.submit(slow_import_task.quick).result(timeout=30) == "quick"
        with pytest.raises(TaskTimeoutError):
            s.submit(pt.hang).result(timeout=30)


@pytest.mark.timeout(60)
def test_a_worker_that_never_starts_the_run_is_bounded(new_scheduler, monkeypatch):
    """Decision: before its code starts, a run with a timeout gets a load
    grace (30 s; 1 s here) on top of its timeout; then it is a timeout."""
    monkeypatch.setenv("PROCSCHED_LOAD_GRACE", "1")
    s = new_scheduler(1)
    t0 = time.monotonic()
    with pytest.raises(TaskTimeoutError, match="did not start"):
        s.schedule(hanging_import_task.never, timeout=0.1).result(timeout=30)
    assert time.monotonic() - t0 < 10
    assert s.submit(rel_tasks.hello, 1).result(timeout=30).startswith("hello 1")


@pytest.mark.timeout(60)
def test_no_timeout_no_started_message(new_scheduler):
    """A run without a timeout costs no extra message (the hot path)."""
    s = new_scheduler(1)
    assert [s.submit(rel_tasks.hello, i).result(timeout=30)[:7] for i in range(3)] == ["hello 0", "hello 1", "hello 2"]


# -- 6. a SIGKILLed user process is noticed while a forked child lives ------------


@pytest.mark.timeout(60)
def test_user_sigkill_is_noticed_while_a_forked_child_lives(tmp_path, reaper):
    proc = _program(
        tmp_path,
        """
        s = procsched.Scheduler(1)
        s.schedule_at_fixed_rate(rel_tasks.nothing, 0.05)
        s.submit(rel_tasks.hello).result(timeout=30)
        child = os.fork()
        if child == 0:
            time.sleep(60)
            os._exit(0)
        print(child, flush=True)
        sys.stdin.read()
    """,
    )
    child = psutil.Process(int(proc.stdout.readline()))
    reaper.append(child)
    tree = [p for p in descendants(proc.pid) if p.pid != child.pid]
    assert tree
    proc.kill()
    proc.wait()
    wait_all_gone(tree, 10)
    assert child.is_running()


# -- 7. Scheduler(timeout=) applies to follow-ups ---------------------------------


@pytest.mark.timeout(60)
def test_the_default_timeout_applies_to_follow_ups(new_scheduler):
    s = new_scheduler(2, timeout=0.5)
    follow_up = s.submit(pt.schedule_follow_up_hang).result(timeout=30)
    handle = s.handle(follow_up)
    assert handle is not None
    with pytest.raises(TaskTimeoutError):
        handle.result(timeout=30)


# -- 8. requests after shutdown are answered or refused at once -------------------


@pytest.mark.timeout(60)
def test_stats_and_cancel_after_shutdown_without_wait(new_scheduler):
    s = new_scheduler(1)
    h = s.schedule(rel_tasks.hello, 3600)
    s.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        try:
            s.stats()
        except SchedulerClosedError:
            break
        finally:
            assert time.monotonic() - t0 < 5
    else:
        raise AssertionError("stats() still answered 20 s after shutdown")
    t0 = time.monotonic()
    assert s.cancel(h.id) is False
    assert time.monotonic() - t0 < 5


@pytest.mark.timeout(60)
def test_stats_from_a_thread_during_shutdown(new_scheduler):
    s = new_scheduler(2)
    for i in range(20):
        s.submit(rel_tasks.hello, i)
    outcomes: list[str] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                s.stats()
                outcomes.append("ok")
            except SchedulerClosedError:
                outcomes.append("closed")
                return
            finally:
                if time.monotonic() - t0 > 5:
                    outcomes.append("slow")

    thread = threading.Thread(target=poll)
    thread.start()
    s.shutdown(wait=True)
    thread.join(20)
    stop.set()
    assert not thread.is_alive()
    assert "slow" not in outcomes and outcomes[-1] == "closed"


# -- 9. SIGKILL of the dispatcher takes the tasks' children, every start method ---


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["forkserver", "spawn", "fork"])
def test_dispatcher_sigkill_takes_the_tasks_children(new_scheduler, tmp_path, reaper, method):
    s = new_scheduler(1, mp_context=method)
    pidfile = str(tmp_path / "pids")
    h = s.submit(pt.child_and_hang, pidfile)
    child = psutil.Process(int(wait_for_lines(pidfile, 1)[0]))
    reaper.append(child)
    dispatcher(s).send_signal(signal.SIGKILL)
    with pytest.raises(SchedulerError):
        h.result(timeout=10)
    wait_all_gone([child], 10)


# -- 10. current_scheduler() is thread-safe inside a task --------------------------


@pytest.mark.timeout(90)
def test_current_scheduler_from_many_threads(new_scheduler):
    s = new_scheduler(2)
    ids = s.submit(pt.schedule_from_threads, 4, 50).result(timeout=60)
    assert len(ids) == len(set(ids)) == 200
    assert all(s.handle(i) is not None for i in ids)
    assert s.submit(rel_tasks.hello, 1).result(timeout=30).startswith("hello 1")


@pytest.mark.timeout(60)
def test_current_scheduler_after_its_run_ended(new_scheduler):
    s = new_scheduler(1)
    s.submit(pt.leave_a_thread_behind).result(timeout=30)
    # the same (only) worker: the left-behind thread tries now, between runs
    message = s.submit(pt.release_the_thread).result(timeout=30)
    assert message.startswith("SchedulerError") and "after that run ended" in message
    h = s.submit(rel_tasks.hello, 5)
    assert h.result(timeout=30).startswith("hello 5") and h.runs[-1].outcome == "ok"


# -- 11. a forked child refuses the inherited Scheduler ----------------------------


@pytest.mark.timeout(60)
def test_a_forked_child_cannot_use_the_parents_scheduler(new_scheduler):
    s = new_scheduler(1)
    assert s.submit(rel_tasks.hello, 1).result(timeout=30).startswith("hello 1")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, and leave without running any atexit hook
        try:
            os.close(r)
            try:
                s.submit(rel_tasks.hello, 2)
                answer = "accepted"
            except SchedulerError as exc:
                answer = f"refused: {exc}"
            os.write(w, answer.encode())
        finally:
            os._exit(0)
    os.close(w)
    answer = os.read(r, 1000).decode()
    os.close(r)
    os.waitpid(pid, 0)
    assert answer.startswith("refused: ") and "forked child" in answer
    assert s.submit(rel_tasks.hello, 3).result(timeout=30).startswith("hello 3")


# -- 12. minor: shutdown and session children, dropped schedulers -----------------


@pytest.mark.timeout(60)
def test_shutdown_ends_the_tasks_session_children(tmp_path, reaper):
    pidfile = str(tmp_path / "pids")
    with procsched.Scheduler(1) as s:
        s.submit(pt.start_session_child_and_return, pidfile).result(timeout=30)
        child = psutil.Process(int(wait_for_lines(pidfile, 1)[0]))
        reaper.append(child)
    wait_all_gone([child], 10)


@pytest.mark.timeout(60)
def test_a_dropped_scheduler_is_collected_and_its_processes_exit():
    s = procsched.Scheduler(1)
    assert s.submit(rel_tasks.hello, 1).result(timeout=30).startswith("hello 1")
    proc = dispatcher(s)
    tree = [proc, *descendants(proc.pid)]
    ref = weakref.ref(s)
    del s
    gc.collect()
    assert ref() is None
    wait_all_gone(tree, 10)


@pytest.mark.timeout(60)
def test_a_dropped_scheduler_logs_nothing_at_exit(tmp_path):
    proc = _program(
        tmp_path,
        """
        logging.basicConfig(level=logging.INFO)
        def make():
            s = procsched.Scheduler(1)
            s.submit(rel_tasks.hello, 1).result(timeout=30)
        make()
    """,
    )
    out, err = proc.communicate(timeout=50)
    assert proc.returncode == 0, err
    assert "ERROR" not in err and "WARNING" not in err, err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("runner", ["processes", "threads"])
def test_a_task_that_never_catches_up_does_not_starve_a_one_shot(new_scheduler, runner):
    """Decision: a run made up by catch_up yields once to the next due run of
    another task (at most every other start goes to a task's backlog)."""
    s = new_scheduler(1, runner=runner) if runner == "processes" else procsched.Scheduler(1, runner=runner)
    try:
        greedy = s.schedule_at_fixed_rate(rel_tasks.nothing, 1e-9)
        wait_until(lambda: len(greedy.runs) >= 3, 30, "the fixed-rate task to fall behind")
        assert s.submit(rel_tasks.hello, 1).result(timeout=30).startswith("hello 1")
        greedy.cancel()
    finally:
        s.shutdown(wait=True, cancel_futures=True)


# -- issue 14: logging, temp dirs, Ctrl-C, captured output --------------------------


@pytest.mark.timeout(60)
def test_log_messages_carry_no_prefix_of_their_own(new_scheduler, caplog):
    """Issue 14.4: the logger's name says "procsched"; messages do not."""
    caplog.set_level(logging.INFO, logger="procsched")
    s = new_scheduler(1)
    h = s.submit(pt.hang)
    wait_until(lambda: s.stats()["running"] == 1, 30, "the run to start")
    dispatcher(s).send_signal(signal.SIGKILL)
    with pytest.raises(SchedulerError):
        h.result(timeout=10)
    assert any("dispatcher process" in r.getMessage() for r in caplog.records)
    assert not [r.getMessage() for r in caplog.records if r.getMessage().startswith("procsched:")]


@pytest.mark.timeout(60)
def test_killing_the_dispatcher_leaves_no_temporary_directory(tmp_path, monkeypatch):
    """Issue 14.6: kill -KILL <dispatcher> must not leave a pymp-* directory."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    tempfile.tempdir = None
    try:
        s = procsched.Scheduler(2)
        h = s.submit(pt.hang)
        wait_until(lambda: s.stats()["running"] == 1, 30, "the run to start")
        assert os.listdir(tmp_path)  # the dispatcher's directory (the forkserver's socket)
        dispatcher(s).send_signal(signal.SIGKILL)
        with pytest.raises(SchedulerError):
            h.result(timeout=10)
        s.shutdown()
        wait_until(lambda: os.listdir(tmp_path) == [], 10, "the temporary directory to go")
    finally:
        tempfile.tempdir = None


@pytest.mark.timeout(60)
def test_ctrl_c_in_a_with_block_says_what_exit_waits_for(tmp_path):
    """Issue 14.10: the first Ctrl-C says what exit waits for and that a
    second one kills the runs; the second kills them."""
    proc = _program(
        tmp_path,
        """
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
        import signal, threading
        # As started from a terminal: Python keeps a SIGINT ignored at its start
        # (a suite run as a background job: the test then waited forever).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        started = threading.Event()
        with procsched.Scheduler(1) as s:
            s.add_listener(lambda event: started.set(), events=["run_started"])
            s.submit(promise_tasks.hang)
            started.wait(30)
            print(s.stats()["workers"][0]["pid"], flush=True)
            sys.stdin.read()
    """,
        start_new_session=True,
    )
    worker = psutil.Process(int(proc.stdout.readline()))
    proc.send_signal(signal.SIGINT)
    lines: list[str] = []
    while not any("Ctrl-C again" in line for line in lines):
        line = proc.stderr.readline()
        assert line, "".join(lines)
        lines.append(line)
    assert "1 running task(s)" in lines[-1]
    proc.send_signal(signal.SIGINT)
    # The second Ctrl-C kills at once: well inside the 10 s the user process
    # gives a dispatcher before it SIGKILLs it (on Python 3.11 a Ctrl-C
    # landing in Thread.join() once made the kill a no-op and exit took that).
    _, err = proc.communicate(timeout=8)
    assert proc.returncode != 0
    assert "interrupted again: killing 1 running task(s)" in err, err
    assert "died" not in err, err
    wait_all_gone([worker], 10)


@pytest.mark.timeout(60)
def test_with_block_exit_waiting_for_a_one_shot_says_so(tmp_path):
    proc = _program(
        tmp_path,
        """
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
        with procsched.Scheduler(1) as s:
            s.schedule(rel_tasks.hello, 1.5, name="later")
    """,
    )
    out, err = proc.communicate(timeout=50)
    assert proc.returncode == 0, err
    assert "INFO exiting the Scheduler's with block: waiting for 1 pending task(s) (later, the next due in" in err, err


# -- issue 14.1: captured output ----------------------------------------------------


@pytest.mark.timeout(60)
def test_captured_output_is_attached_to_the_run(new_scheduler, capfd):
    s = new_scheduler(1, capture_output=True)
    events = []
    s.add_listener(events.append)
    h = s.submit(pt.chatty)
    assert h.result(timeout=30) == "ok"
    output = h.runs[-1].output
    assert "from print\n" in output and "to stderr\n" in output and "from fd 1\n" in output
    ends = [e for e in events if e["event"] == "run_finished"]
    assert ends[0]["output"] == output
    h2 = s.submit(rel_tasks.hello, 1)
    h2.result(timeout=30)
    assert h2.runs[-1].output == ""  # each run has its own
    assert "from fd 1" not in capfd.readouterr().out


@pytest.mark.timeout(60)
def test_a_crashed_runs_output_has_its_faulthandler_trace(new_scheduler):
    s = new_scheduler(1, capture_output=True)
    h = s.submit(pt.say_then_segfault)
    with pytest.raises(WorkerCrashedError):
        h.result(timeout=30)
    output = h.runs[-1].output
    assert "about to crash" in output and "Fatal Python error: Segmentation fault" in output


@pytest.mark.timeout(60)
def test_captured_output_keeps_the_last_64_kib(new_scheduler):
    s = new_scheduler(1, capture_output=True)
    h = s.submit(pt.flood, 300_000)
    h.result(timeout=30)
    output = h.runs[-1].output
    assert len(output) == 64 * 1024 and output.endswith("x\nthe end\n")


@pytest.mark.timeout(60)
def test_without_capture_output_is_none(new_scheduler):
    s = new_scheduler(1)
    h = s.submit(rel_tasks.hello, 1)
    h.result(timeout=30)
    assert h.runs[-1].output is None


@pytest.mark.timeout(60)
def test_a_dropped_threads_scheduler_is_collected():
    s = procsched.Scheduler(1, runner="threads")
    assert s.submit(rel_tasks.hello, 1).result(timeout=30).startswith("hello 1")
    thread = s._backend.thread
    ref = weakref.ref(s)
    del s
    gc.collect()
    assert ref() is None
    thread.join(10)
    assert not thread.is_alive()
