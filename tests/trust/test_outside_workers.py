"""Only plain data is read from a store outside a worker (issue 24): a
payload that runs code when unpickled (``helpers.Planted``: it writes the
pid and name of the process that unpickles it) goes through the dispatcher,
the console and every store command of the CLI, and only a worker ever
unpickles it - or nobody, when a secret is set and the row is not signed
with it. On SQLite and PostgreSQL; with no secret, and with a secret that
signed the planted row (a stolen secret: then it is code, and still only a
worker runs it).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from typing import Any

import httpx
import pytest
from starlette.routing import Mount, Route

from procsched._cli import main as cli_main
from procsched._cli._main import parser as cli_parser
from procsched._store import open_store
from procsched._web import Console
from procsched._web._store_source import StoreSource
from tests.trust import tasks
from tests.trust.helpers import Planted, lines, plant, unpickled_by, wait_until

SECRET = b"s3cret: 32 random bytes in real life"
TOKEN = "trust-test-token-0123456789"


@pytest.fixture(params=[None, SECRET], ids=["no-secret", "signed-row"])
def secret(request: pytest.FixtureRequest) -> bytes | None:
    return request.param


# -- the dispatcher -----------------------------------------------------------------


def test_the_dispatcher_never_unpickles_a_payload(store_url, schedulers, secret, tmp_path):
    """A keyed task's arguments cross the dispatcher and its store writer as
    bytes: only the worker that runs it unpickles them."""
    out, marker = str(tmp_path / "runs"), str(tmp_path / "unpickled")
    s = schedulers(1, store=store_url, secret=secret)
    h = s.schedule_at_fixed_rate(tasks.tick, 0.05, args=(out, Planted(marker, "live")), key="live")
    s.schedule(tasks.tick, args=(out, Planted(marker, "once")), key="once").result(30)
    wait_until(lambda: len(lines(out)) >= 3, 30, "runs of the keyed tasks")
    h.cancel()
    s.shutdown()
    by = unpickled_by(marker)
    assert by and {name for _, name in by} == {"psc-worker"}, by
    assert os.getpid() not in {pid for pid, _ in by}


def test_a_stored_payload_is_unpickled_only_in_a_worker(store_url, schedulers, secret, tmp_path):
    """A restart adopts stored tasks: their arguments stay bytes until a worker."""
    out, marker = str(tmp_path / "runs"), str(tmp_path / "unpickled")
    plant(store_url, secret, marker, out)
    s = schedulers(1, store=store_url, secret=secret)
    assert [h.key for h in s.jobs()] == ["planted"]
    wait_until(lambda: lines(out), 30, "the planted task's run")
    s.shutdown()
    by = unpickled_by(marker)
    assert by and {name for _, name in by} == {"psc-worker"}, by


def test_with_a_secret_a_row_not_signed_with_it_is_unpickled_nowhere(store_url, schedulers, tmp_path):
    out, marker = str(tmp_path / "runs"), str(tmp_path / "unpickled")
    plant(store_url, None, marker, out, keys=("unsigned",))
    plant(store_url, b"another secret", marker, out, keys=("other",))
    s = schedulers(1, store=store_url, secret=SECRET)
    s.schedule(tasks.tick, args=(out, "mine"), key="mine").result(30)  # the pool works, and has run what was due
    assert set(s.stats()["unloadable"]) == {"unsigned", "other"}
    s.shutdown()
    assert unpickled_by(marker) == [] and [x.split()[1] for x in lines(out)] == ["mine"]


# -- the console -----------------------------------------------------------------------


def requests(app: Any, key: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    """Every route of the console (method, path, JSON body), on the job ``key``:
    the reads first, then the actions (the API's cancel last)."""
    reads, actions = [], []
    for route in app.routes:
        if isinstance(route, Mount):
            continue
        assert isinstance(route, Route)
        for method in sorted(route.methods or {"GET"}):
            if method == "HEAD":
                continue
            if "{action}" in route.path:
                api = route.path.startswith("/api/")
                for action in ("pause", "resume", "run-now", "backfill", *(("cancel",) if api else ())):
                    body = {"start": "2024-01-01T00:00:00+00:00", "end": "2024-01-02T00:00:00+00:00", "dry_run": True}
                    path = route.path.replace("{ref:path}", key).replace("{action}", action)
                    actions.append((method, path, body if action == "backfill" else None))
            else:
                reads.append((method, route.path.replace("{ref:path}", key), None))
    return reads + sorted(actions, key=lambda a: a[1].endswith("/cancel"))


def test_the_console_never_unpickles_a_stored_payload(store_url, secret, tmp_path):
    out, marker = str(tmp_path / "runs"), str(tmp_path / "unpickled")
    plant(store_url, secret, marker, out, keys=("planted", "other"))
    source = StoreSource(open_store(store_url, secret=secret), store_url)
    console = Console(source, host="127.0.0.1", port=0, token=TOKEN)
    console.start()
    try:
        client = httpx.Client(
            base_url=console.url.rstrip("/"), headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
        )
        asked = []
        for method, path, body in requests(console.app.app, "planted"):
            if path == "/events":
                continue  # a stream that does not end: read below
            answer = client.request(method, path, json=body)
            asked.append((method, path, answer.status_code))
            assert answer.status_code < 500, (method, path, answer.status_code, answer.text[:300])
        with client.stream("GET", "/events") as stream:
            assert stream.status_code == 200
        assert ("GET", "/api/jobs/planted", 200) in asked and ("GET", "/metrics", 200) in asked
        assert ("POST", "/api/jobs/planted/cancel", 200) in asked
    finally:
        console.close()
    assert unpickled_by(marker) == []


# -- the command line -----------------------------------------------------------------


#: The store commands, their arguments on the job "planted" (run and web: the
#: other tests). A new command that takes --store must be added here.
CLI_COMMANDS: dict[str, list[list[str]]] = {
    "jobs": [[], ["--json"]],
    "history": [[], ["planted"], ["planted", "--json"]],
    "why": [["planted"]],
    "pause": [["planted"]],
    "resume": [["planted"]],
    "run-now": [["planted"]],
    "remove": [["planted"]],
    "cancel": [["other"]],
}


def store_commands() -> list[str]:
    """Every subcommand of ``procsched`` that takes ``--store``."""
    (subparsers,) = [a for a in cli_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(
        name
        for name, sub in subparsers.choices.items()
        if any("--store" in a.option_strings for a in sub._actions) and name not in ("run", "web")
    )


def test_no_store_command_unpickles_a_stored_payload(store_url, secret, tmp_path, monkeypatch):
    out, marker = str(tmp_path / "runs"), str(tmp_path / "unpickled")
    plant(store_url, secret, marker, out, keys=("planted", "other"))
    if secret is not None:
        monkeypatch.setenv("PROCSCHED_SECRET", secret.decode())
    commands = store_commands()
    assert set(commands) <= set(CLI_COMMANDS), (
        f"store commands this test does not run: {set(commands) - set(CLI_COMMANDS)}"
    )
    ran = []
    for name in sorted(commands, key=lambda n: n in ("remove", "cancel")):
        for extra in CLI_COMMANDS[name]:
            argv = [name, *extra, "--store", store_url]
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
                try:
                    code = cli_main(argv)
                except SystemExit as exc:
                    code = int(exc.code or 0)
            ran.append((argv[0], code, err.getvalue()[:200]))
    assert {"jobs", "history", "why", "remove"} <= {name for name, _, _ in ran}, ran
    assert all(code == 0 for name, code, _ in ran if name in ("jobs", "history", "why", "remove")), ran
    assert unpickled_by(marker) == []
