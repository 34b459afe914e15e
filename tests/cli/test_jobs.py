"""The ``every`` / ``once`` decorators and loading jobs files (in-process)."""

from __future__ import annotations

import os
import pickle
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import cloudpickle
import pytest

import procsched
from procsched import InlineScheduler, ManualClock, Priority, every, once
from procsched._jobs import JobsFileError, declared_jobs, load_jobs_file


def test_decorators_return_the_function_and_declare_jobs_for_its_module() -> None:
    def f() -> int:
        return 1

    f.__module__ = "declared_here_only"
    assert every(5)(f) is f
    assert once(delay=2, priority=Priority.HIGH)(f) is f
    assert every(timedelta(seconds=3), fixed_delay=True, name="named", timeout=1)(f) is f
    assert f() == 1
    jobs = declared_jobs("declared_here_only")
    assert [(j.kind, j.period, j.name) for j in jobs] == [
        ("rate", 5.0, "f"), ("once", None, "f"), ("delay", 3.0, "named"),
    ]  # fmt: skip
    assert [j.describe() for j in jobs] == ["every 5s", "once in 2s", "every 3s after each run"]
    assert jobs[1].options["priority"] == Priority.HIGH and jobs[2].options["timeout"] == 1


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: every(0), ValueError, "period must be > 0"),
        (lambda: every(-1, fixed_delay=True), ValueError, "delay must be > 0, not -1"),
        (lambda: every(float("nan")), ValueError, "finite"),
        (lambda: every("5"), TypeError, "period must be a number"),
        (lambda: every(1, misfire="later"), ValueError, "misfire must be one of"),
        (lambda: every(1, fixed_delay=True, misfire="skip"), ValueError, "fixed-rate jobs only"),
        (lambda: every(1, priority=1.5), TypeError, "priority must be an int"),
        (lambda: every(1, timeout=0), ValueError, "timeout must be > 0"),
        (lambda: every(1, name=3), TypeError, "name must be a str"),
        (lambda: every(1, initial_delay=-2), ValueError, "initial_delay must be >= 0"),
        (lambda: every(1, stop_on_error="yes"), TypeError, "stop_on_error must be True or False"),
        (lambda: every(1, scheduler=object()), TypeError, "scheduler must be"),
        (lambda: once(-1), ValueError, "delay must be >= 0"),
        (lambda: once(5, at=datetime.now(timezone.utc)), ValueError, "not both"),
        (lambda: once(at=datetime.now()), ValueError, "naive"),
        (lambda: every(1)(42), TypeError, "fn must be callable"),
        (lambda: every(1, args=5)(print), TypeError, "args must be"),
    ],
)
def test_bad_options_fail_at_decoration_time(make, error, match) -> None:
    with pytest.raises(error, match=match):
        make()


def test_forgetting_the_parentheses_is_explained() -> None:
    with pytest.raises(TypeError, match=r"@every\(5\), not @every"):

        @every  # type: ignore[arg-type]
        def f() -> None: ...

    with pytest.raises(TypeError, match=r"@once\(\)"):

        @once  # type: ignore[arg-type]
        def g() -> None: ...


def test_with_a_scheduler_the_job_is_scheduled_at_once() -> None:
    clock = ManualClock()
    sched = InlineScheduler(clock)
    seen: list[tuple[str, float]] = []

    @every(2, initial_delay=1, scheduler=sched)
    @once(delay=0.5, scheduler=sched, name="first")
    def job() -> None:
        seen.append((sched.clock.now(), procsched.current_run().task_id))  # type: ignore[arg-type]

    assert sched.pending() == 2
    sched.run_until(5)
    assert [t for t, _ in seen] == [0.5, 1, 3, 5]
    assert all(j.fn is not job for j in declared_jobs(job.__module__))  # not declared for `procsched run`


def test_once_at_a_datetime() -> None:
    clock = ManualClock()
    sched = InlineScheduler(clock)
    when = datetime.now(timezone.utc) + timedelta(seconds=30)
    handle_names: list[str | None] = []
    once(at=when, scheduler=sched, name="at")(lambda: None)
    sched.add_listener(lambda e: handle_names.append(e["name"]), events="run_finished")
    sched.run_until(29)
    assert handle_names == []
    sched.run_until(31)
    assert handle_names == ["at"]


JOBS = """
from procsched import every, once

def helper():
    return 41

@every(1)
def first():
    return helper() + 1

@once(delay=0.1, name="second")
def second():
    return "two"
"""


def test_load_by_reference(tmp_path: Path) -> None:
    path = tmp_path / "ref_jobs_module.py"
    path.write_text(JOBS)
    module, jobs = load_jobs_file(path)
    assert module.__name__ == "ref_jobs_module" and sys.modules["ref_jobs_module"] is module
    assert [j.name for j in jobs] == ["first", "second"]
    assert b"ref_jobs_module" in cloudpickle.dumps(jobs[0].fn) and b"helper" not in cloudpickle.dumps(jobs[0].fn)
    assert str(tmp_path) in sys.path
    # loading it again gives the same jobs (the module is not imported twice)
    assert load_jobs_file(path)[1] == jobs


@pytest.mark.parametrize("filename", ["json.py", "my-jobs.py", "class.py"])
def test_names_that_cannot_be_imported_load_by_value(tmp_path: Path, filename: str) -> None:
    path = tmp_path / filename
    path.write_text(JOBS)
    module, jobs = load_jobs_file(path)
    assert module.__name__.startswith("procsched_jobs_")
    assert sys.modules["json"].__file__ != str(path)
    fn = pickle.loads(cloudpickle.dumps(jobs[0].fn))  # by value: no import needed
    assert fn() == 42


@pytest.mark.timeout(60)
@pytest.mark.parametrize("filename", ["procs_jobs_ref.py", "procs-jobs-value.py"])
def test_loaded_jobs_run_in_worker_processes(tmp_path: Path, filename: str) -> None:
    path = tmp_path / filename
    path.write_text(JOBS + "\nimport os\n@every(1)\ndef where():\n    return os.getpid()\n")
    _, jobs = load_jobs_file(path)
    by_name = {j.name: j for j in jobs}
    with procsched.Scheduler(1) as scheduler:
        assert scheduler.submit(by_name["first"].fn).result(30) == 42
        assert scheduler.submit(by_name["where"].fn).result(30) != os.getpid()
        handle = by_name["second"].start(scheduler)
        assert handle.name == "second" and handle.result(30) == "two"


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(JobsFileError, match="no such file"):
        load_jobs_file(tmp_path / "missing.py")
    empty = tmp_path / "empty_jobs_file.py"
    empty.write_text("x = 1\n")
    with pytest.raises(JobsFileError, match="declares no jobs"):
        load_jobs_file(empty)
    broken = tmp_path / "broken_jobs_file.py"
    broken.write_text("raise KeyError('inside the file')\n")
    with pytest.raises(KeyError, match="inside the file"):
        load_jobs_file(broken)


def test_cron_decorator_and_part_two_options() -> None:
    from procsched import Retry, cron

    def g() -> int:
        return 2

    g.__module__ = "declared_cron_here"
    retry = Retry(attempts=3, delay=0.5)
    assert cron("0 3 * * *", tz="Europe/Berlin", retry=retry, max_runs=10)(g) is g
    assert every(60, retry=retry, until=3600)(g) is g
    assert once(delay=1, retry=Retry(attempts=2))(g) is g
    jobs = declared_jobs("declared_cron_here")
    assert [j.kind for j in jobs] == ["cron", "rate", "once"]
    assert [j.describe() for j in jobs] == [
        "cron 0 3 * * * Europe/Berlin, retry 3x, max 10 runs", "every 1min, retry 3x, for 1h", "once in 1s, retry 2x",
    ]
    assert 0 < jobs[0].initial_delay <= 86400
    clock = ManualClock(wall=datetime(2026, 3, 28, 12, tzinfo=timezone.utc))
    sched = InlineScheduler(clock)
    handle = jobs[0].start(sched)
    assert handle.name == "g" and handle.next_run_at == datetime(2026, 3, 29, 1, tzinfo=timezone.utc)  # 03:00 CEST
    assert jobs[1].start(sched).next_run == 0.0


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: procsched.cron("61 * * * *"), ValueError, "61"),
        (lambda: procsched.cron("0 3 * * *", tz="Moon/Base"), ValueError, "Moon/Base"),
        (lambda: procsched.cron(print), TypeError, "expression"),
        (lambda: procsched.cron("@daily", misfire="later"), ValueError, "misfire"),
        (lambda: every(1, max_runs=0), ValueError, "max_runs"),
        (lambda: every(1, until=datetime(2030, 1, 1)), ValueError, "until"),
        (lambda: once(retry="twice"), TypeError, "retry"),
    ],
)
def test_bad_part_two_options_fail_at_decoration_time(make, error, match) -> None:
    with pytest.raises(error, match=match):
        make()
