"""A signed store end to end (issue 24): ``Scheduler(secret=...)`` /
``PROCSCHED_SECRET`` sign every stored definition; a row whose signature does
not verify - a tampered payload, a payload copied from another key, a row
written with another secret, an unsigned one - is never imported nor
unpickled: listed unloadable with the reason (``stats()["unloadable"]``,
``procsched jobs``), nothing of it runs. Rotation. On SQLite and PostgreSQL.

Rows are tampered with plain SQL, as whoever can write the store would.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

import psutil
import pytest

import procsched
from procsched._cli import main as cli
from procsched._store import TaskDefinition, TaskState, _trust, open_store
from procsched._store._model import BAD_SIGNATURE, UNSIGNED
from tests.trust import tasks
from tests.trust.helpers import P, lines, planted, sql, unpickled_by, wait_until

SECRET = b"s3cret: 32 random bytes in real life"
HOUR = 3600


def declare(make, url: str, secret, keyed: dict[str, tuple]) -> None:
    """A program that schedules ``keyed`` (key -> args of tasks.tick), due
    in an hour, and stops: the tasks stay stored."""
    s = make(1, store=url, secret=secret)
    for key, args in keyed.items():
        s.schedule_at_fixed_rate(tasks.tick, HOUR, initial_delay=HOUR, args=args, key=key)
    s.shutdown()


def due_now(url: str) -> None:
    """Every stored task due now (the state rows are not signed: whoever can
    write the store can do this too), so a task that loads runs at once."""
    sql(url, "UPDATE procsched_tasks SET next_due_ns = ?", (time.time_ns() - P,))


def listed(url: str, capsys) -> dict[str, dict]:
    """``procsched jobs --store URL --json``, by key."""
    capsys.readouterr()
    assert cli(["jobs", "--store", url, "--json"]) == 0
    return {row["key"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}


def test_rows_not_signed_right_never_load_and_are_listed_with_the_reason(store_url, schedulers, tmp_path, capsys):
    out, marker = str(tmp_path / "runs"), str(tmp_path / "unpickled")
    declare(schedulers, store_url, SECRET, {k: (out, k) for k in ("good", "tampered", "copied")})
    assert all(sig is not None for (sig,) in sql(store_url, "SELECT signature FROM procsched_definitions"))
    declare(schedulers, store_url, b"another secret", {"other": (out, "other")})
    declare(schedulers, store_url, None, {"unsigned": (out, "unsigned")})
    # whoever can write the store: a payload of their own, a valid payload moved to another key
    sql(store_url, "UPDATE procsched_definitions SET args = ? WHERE key = 'tampered'", (planted(marker, out),))
    sql(
        store_url,
        "UPDATE procsched_definitions SET args = (SELECT d.args FROM procsched_definitions d WHERE d.key = 'good'), "
        "signature = (SELECT d.signature FROM procsched_definitions d WHERE d.key = 'good') WHERE key = 'copied'",
    )
    due_now(store_url)

    s = schedulers(1, store=store_url, secret=SECRET)
    assert s.stats()["unloadable"] == {
        "tampered": BAD_SIGNATURE,
        "copied": BAD_SIGNATURE,
        "other": BAD_SIGNATURE,
        "unsigned": UNSIGNED,
    }
    assert [h.key for h in s.jobs()] == ["good"]
    wait_until(lambda: lines(out), 30, "the good task's run")
    s.shutdown()
    assert lines(out) == [f"{lines(out)[0].split()[0]} good"], "only the task signed right ran"
    assert unpickled_by(marker) == [], "a payload that failed its check was unpickled"
    # the store says so to anyone who lists it
    rows = listed(store_url, capsys)
    assert {k: rows[k]["unloadable"] for k in rows} == {
        "good": None,
        "tampered": BAD_SIGNATURE,
        "copied": BAD_SIGNATURE,
        "other": BAD_SIGNATURE,
        "unsigned": UNSIGNED,
    }
    # the program declares a task again: signed again, it loads again
    declare(schedulers, store_url, SECRET, {"tampered": (out, "tampered")})
    s = schedulers(1, store=store_url, secret=SECRET)
    assert sorted(h.key for h in s.jobs()) == ["good", "tampered"]
    assert "tampered" not in s.stats()["unloadable"]
    s.shutdown()
    assert unpickled_by(marker) == []


def test_a_row_planted_while_instances_run_is_listed_not_run(store_url, schedulers, tmp_path):
    out, marker = str(tmp_path / "runs"), str(tmp_path / "unpickled")
    s = schedulers(1, store=store_url, secret=SECRET)
    s.schedule_at_fixed_rate(tasks.tick, HOUR, initial_delay=HOUR, args=(out, "mine"), key="mine")
    # another program, without the secret, adds a task (signed with nothing) due now
    writer = open_store(store_url)
    b = writer.batch()
    every_second = {"kind": "fixed_rate", "period_ns": P}
    b.upsert(
        TaskDefinition("planted", "tests.trust.tasks:tick", planted(marker, out), every_second),
        TaskState(next_due_ns=time.time_ns()),
    )
    assert b.commit().ok
    writer.close()
    wait_until(lambda: "planted" in s.stats()["unloadable"], 30, "the planted task listed unloadable")
    assert s.stats()["unloadable"]["planted"] == UNSIGNED
    assert [h.key for h in s.jobs()] == ["mine"]
    wait_until(
        lambda: sql(store_url, "SELECT unloadable FROM procsched_tasks WHERE key = 'planted'") == [(UNSIGNED,)],
        30,
        "the store marking it unloadable",
    )
    s.shutdown()
    assert unpickled_by(marker) == [] and lines(out) == []


def test_rotation_signs_with_the_first_secret_and_accepts_the_others(store_url, schedulers, tmp_path):
    out = str(tmp_path / "runs")
    declare(schedulers, store_url, "old", {"a": (out, "a")})
    declare(schedulers, store_url, "stranger", {"z": (out, "z")})
    # rotation under way: sign with new, accept old; what old signed is signed again with new
    s = schedulers(1, store=store_url, secret=["new", "old"])
    assert sorted(h.key for h in s.jobs()) == ["a"]
    assert s.stats()["unloadable"] == {"z": BAD_SIGNATURE}
    s.schedule_at_fixed_rate(tasks.tick, HOUR, initial_delay=HOUR, args=(out, "b"), key="b")
    s.shutdown()
    # the old secret dropped: everything this program stored or loaded still loads
    s = schedulers(1, store=store_url, secret="new")
    assert sorted(h.key for h in s.jobs()) == ["a", "b"]
    assert s.stats()["unloadable"] == {"z": BAD_SIGNATURE}
    s.shutdown()
    # and the old secret alone no longer verifies them
    s = schedulers(1, store=store_url, secret="old")
    assert s.jobs() == [] and set(s.stats()["unloadable"]) == {"a", "b", "z"}
    s.shutdown()


def test_the_secret_from_the_environment(store_url, schedulers, tmp_path, monkeypatch):
    out = str(tmp_path / "runs")
    monkeypatch.setenv("PROCSCHED_SECRET", "new , old")  # comma-separated, the first signs
    declare(schedulers, store_url, None, {"a": (out, "a")})
    assert [h.key for h in schedulers(1, store=store_url, secret="new").jobs()] == ["a"]
    assert [h.key for h in schedulers(1, store=store_url, secret=b"old").jobs()] == []  # signed with the first
    monkeypatch.setenv("PROCSCHED_SECRET", "old")
    assert [h.key for h in schedulers(1, store=store_url).jobs()] == []
    # secret= wins over the variable
    assert [h.key for h in schedulers(1, store=store_url, secret=["x", "new"]).jobs()] == ["a"]


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("", "PROCSCHED_SECRET is set but empty"),
        ("  ", "PROCSCHED_SECRET is set but empty"),
        ("a,,b", "PROCSCHED_SECRET is set but has an empty item"),
        ("a,", "PROCSCHED_SECRET is set but has an empty item"),
    ],
)
def test_an_empty_variable_is_an_error_not_no_secret(tmp_path, monkeypatch, value, error):
    monkeypatch.setenv("PROCSCHED_SECRET", value)
    with pytest.raises(ValueError, match=error):
        procsched.Scheduler(1, store=str(tmp_path / "s.db"))
    assert not os.path.exists(tmp_path / "s.db"), "nothing is made when the call fails"


@pytest.mark.parametrize(
    ("secret", "exc", "words"),
    [
        (b"", ValueError, "must not be empty"),
        ("", ValueError, "must not be empty"),
        ([], ValueError, "at least one secret"),
        (["a", ""], ValueError, "must not be empty"),
        (42, TypeError, "secret must be bytes, str, or a list"),
        ([b"a", 1], TypeError, "each secret must be bytes or str, not int"),
        ({"a"}, TypeError, "not set"),
    ],
)
def test_a_bad_secret_is_refused_at_the_call(tmp_path, secret, exc, words):
    with pytest.raises(exc, match=words):
        procsched.Scheduler(1, store=str(tmp_path / "s.db"), secret=secret)
    assert not os.path.exists(tmp_path / "s.db")


def test_a_secret_needs_a_store(monkeypatch):
    with pytest.raises(ValueError, match="secret= signs a store's rows: it needs store="):
        procsched.Scheduler(1, secret=SECRET)
    monkeypatch.setenv("PROCSCHED_SECRET", "any")  # the variable alone: no store, nothing to sign
    with procsched.Scheduler(1) as s:
        assert s.submit(sum, [1, 2]).result(30) == 3


def test_without_a_secret_the_program_says_once_that_rows_are_trusted_as_code(
    tmp_path, schedulers, caplog, monkeypatch
):
    monkeypatch.setattr(_trust, "_told", False)
    monkeypatch.delenv("PROCSCHED_SECRET", raising=False)
    with caplog.at_level(logging.INFO, logger="procsched"):
        schedulers(1, store=str(tmp_path / "a.db")).shutdown()
        schedulers(1, store=str(tmp_path / "b.db")).shutdown()
    said = [r.getMessage() for r in caplog.records if "trusted as code" in r.getMessage()]
    assert len(said) == 1, said
    monkeypatch.setattr(_trust, "_told", False)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="procsched"):
        schedulers(1, store=str(tmp_path / "c.db"), secret=SECRET).shutdown()
    assert not [r for r in caplog.records if "trusted as code" in r.getMessage()]


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_the_secret_is_on_no_command_line_and_in_no_environment_of_the_processes(
    tmp_path, schedulers, monkeypatch, start_method
):
    monkeypatch.setenv("PROCSCHED_SECRET", "env-secret-5d2c")
    s = schedulers(
        2, store=str(tmp_path / "s.db"), secret=["arg-secret-9e4b", "env-secret-5d2c"], mp_context=start_method
    )
    s.schedule(tasks.tick, args=(str(tmp_path / "runs"), "x"), key="k").result(30)
    pids = {w["pid"] for w in s.stats()["workers"]} - {None}  # (first: a worker still starting is listed below too)
    started = psutil.Process().children(recursive=True)
    assert pids <= {p.pid for p in started}
    for p in started:
        try:
            seen = " ".join(p.cmdline()) + " ".join(f"{k}={v}" for k, v in p.environ().items())
        except psutil.NoSuchProcess:  # ended meanwhile (a helper of the start-up)
            continue
        assert "secret-" not in seen, (p.pid, p.name())
    s.shutdown()


def test_a_reference_changed_in_a_row_is_never_imported(store_url, schedulers, tmp_path, monkeypatch, capsys):
    """A definition names code by reference too: its function, and the
    exception classes its retry policy names (in its options). Changed by
    whoever can write the store, with a secret neither is imported - the
    import of a module runs its code, in the program's own process - nor is
    the row run; without one (the control: the marker works) the program
    imports both. The store commands import neither, trusted or not."""
    out, marker = str(tmp_path / "runs"), str(tmp_path / "imported")
    tag = f"{os.getpid()}_{time.monotonic_ns()}"
    fn_mod, exc_mod = f"planted_fn_{tag}", f"planted_exc_{tag}"
    for name, body in ((fn_mod, "def run(*args):\n    return args\n"), (exc_mod, "class Boom(Exception):\n    pass\n")):
        (tmp_path / f"{name}.py").write_text(
            f"import os\nwith open({marker!r}, 'a') as f:\n    f.write('%d {name}\\n' % os.getpid())\n{body}"
        )
        monkeypatch.delitem(sys.modules, name, raising=False)  # (and gone again at teardown)
    monkeypatch.syspath_prepend(str(tmp_path))
    s = schedulers(1, store=store_url, secret=SECRET)
    for key in ("fn", "exc", "good"):
        retry = procsched.Retry(attempts=2, on=ValueError) if key == "exc" else None
        s.schedule_at_fixed_rate(tasks.tick, HOUR, initial_delay=HOUR, args=(out, key), key=key, retry=retry)
    s.shutdown()
    sql(store_url, "UPDATE procsched_definitions SET fn_ref = ? WHERE key = 'fn'", (f"{fn_mod}:run",))
    sql(
        store_url,
        "UPDATE procsched_definitions SET options = replace(options, 'builtins:ValueError', ?) WHERE key = 'exc'",
        (f"{exc_mod}:Boom",),
    )
    ((options,),) = sql(store_url, "SELECT options FROM procsched_definitions WHERE key = 'exc'")
    assert f"{exc_mod}:Boom" in options and "ValueError" not in options
    due_now(store_url)

    s = schedulers(1, store=store_url, secret=SECRET)
    assert s.stats()["unloadable"] == {"fn": BAD_SIGNATURE, "exc": BAD_SIGNATURE}
    assert [h.key for h in s.jobs()] == ["good"]
    wait_until(lambda: lines(out), 30, "the good task's run")
    s.shutdown()
    assert [x.split()[1] for x in lines(out)] == ["good"]
    assert lines(marker) == [], "a reference from a row that failed its check was imported"
    rows = listed(store_url, capsys)
    assert (rows["fn"]["unloadable"], rows["exc"]["unloadable"]) == (BAD_SIGNATURE, BAD_SIGNATURE)
    for key in ("fn", "exc"):
        assert cli(["why", key, "--store", store_url]) == 0
    assert lines(marker) == [], "a store command imported a stored reference"

    # the control: without a secret the same rows are trusted as code, and imported by the program
    sql(store_url, "UPDATE procsched_tasks SET next_due_ns = ?, unloadable = NULL", (time.time_ns() + HOUR * P,))
    s = schedulers(1, store=store_url)
    assert sorted(h.key for h in s.jobs()) == ["exc", "fn", "good"]
    s.shutdown()
    assert sorted(lines(marker)) == sorted([f"{os.getpid()} {fn_mod}", f"{os.getpid()} {exc_mod}"])


@pytest.mark.timeout(120)
def test_a_row_changed_under_a_running_instance_is_not_taken_up(store_url, schedulers, tmp_path):
    """A keyed task's row changed while an instance runs it (arguments that
    run code when unpickled, and another definition hash: what a changed
    definition looks like): that instance's re-reads see the row - they
    follow its pause and resume - but never take up its payload: it goes on
    with what its program declared. The next instance refuses the row."""
    out, marker = str(tmp_path / "runs"), str(tmp_path / "unpickled")
    url = store_url + ("&" if "?" in store_url else "?") + "lease=1.5"  # a re-read every 0.5 s
    s = schedulers(1, store=url, secret=SECRET)
    h = s.schedule_at_fixed_rate(tasks.tick, 0.05, args=(out, "k"), key="k")
    wait_until(lambda: len(lines(out)) >= 3, 30, "runs of k")
    sql(
        store_url,
        "UPDATE procsched_definitions SET args = ?, def_hash = 'changed' WHERE key = 'k'",
        (planted(marker, out),),
    )
    with open_store(url) as other:  # (written after the change: a re-read that sees the pause read the changed row)
        assert other.pause("k")
        wait_until(lambda: h.state is procsched.TaskState.PAUSED, 30, "the instance to re-read k")
        assert other.resume("k")
    wait_until(lambda: h.state is not procsched.TaskState.PAUSED, 30, "the instance to see k resumed")
    n = len(lines(out))
    wait_until(lambda: len(lines(out)) > n + 3, 30, "k to run again")
    assert s.stats()["unloadable"] == {}
    late = schedulers(1, store=url, secret=SECRET)
    assert late.stats()["unloadable"] == {"k": BAD_SIGNATURE} and late.jobs() == []
    n = len(lines(out))
    wait_until(lambda: len(lines(out)) > n + 3, 30, "k to run on in the first instance")
    late.shutdown()
    s.shutdown()
    assert unpickled_by(marker) == [], "a changed row's payload was unpickled"
    assert {x.split()[1] for x in lines(out)} == {"k"}


def test_a_store_with_the_secret_lists_a_row_that_fails_before_any_instance_refused_it(store_url, tmp_path):
    """The read model (``procsched web --secret-file``, the console) checks
    each row itself: a row changed while no instance runs is listed
    unloadable with the reason at once; the reason an instance recorded
    stays for a row signed right. Without the secret, what the store says."""
    out, marker = str(tmp_path / "runs"), str(tmp_path / "unpickled")
    with open_store(store_url, secret=SECRET) as store:
        b = store.batch()
        for key in ("good", "tampered", "missing"):
            ref = "tests.trust.tasks:tick" if key != "missing" else "tests.trust.no_such_module:tick"
            b.upsert(TaskDefinition(key, ref, planted(marker, out), {"kind": "once"}), TaskState(0, time.time_ns()))
        b.unloadable("missing", "ModuleNotFoundError: No module named 'tests.trust.no_such_module'")
        assert b.commit().ok
    sql(store_url, "UPDATE procsched_definitions SET args = ? WHERE key = 'tampered'", (b"\x80\x05N.",))
    with open_store(store_url, secret=[b"new", SECRET]) as store:
        assert {j.key: j.unloadable for j in store.jobs_view()} == {
            "good": None,
            "tampered": BAD_SIGNATURE,
            "missing": "ModuleNotFoundError: No module named 'tests.trust.no_such_module'",
        }
        detail = store.job_view("tampered")
        assert detail is not None and detail.job.unloadable == BAD_SIGNATURE
    with open_store(store_url) as store:  # no secret: nothing to check with
        assert store.job_view("tampered").job.unloadable is None  # type: ignore[union-attr]
        assert {j.key for j in store.jobs_view() if j.unloadable} == {"missing"}
    with open_store(store_url, secret=b"another secret") as store:
        assert {j.key: j.unloadable for j in store.jobs_view()}["good"] == BAD_SIGNATURE
    assert unpickled_by(marker) == []
