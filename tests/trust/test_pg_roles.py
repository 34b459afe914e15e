"""The README's least-privilege PostgreSQL roles, tested with real roles
(issue 24): the tables are created by their owner, the README's GRANTs are
run as written, and then a scheduler, the console and a reader each do
their whole job with only those grants - and no more (the console cannot
write a definition, the reader cannot write, the scheduler cannot drop)."""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import re
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import procsched
from procsched._cli import main as cli_main
from procsched._errors import StoreError
from procsched._store import TaskDefinition, open_store
from procsched._web._store_source import StoreSource
from tests.trust import tasks
from tests.trust.helpers import ROOT, P, lines, wait_until

ROLES = ("procsched_owner", "procsched_scheduler", "procsched_console", "procsched_reader")
_serial = itertools.count()


def readme_grants() -> str:
    """The SQL block of the README's "Security" section."""
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    section = readme[readme.index("## Security") :]
    section = section[: section.index("\n## ")]
    (sql,) = re.findall(r"```sql\n(.*?)```", section, re.S)
    return sql


@pytest.fixture
def roles(pg_cluster: Any) -> Iterator[dict[str, str]]:
    """Role -> a store URL that logs in as it, on a fresh database its owner owns."""
    suffix = f"{os.getpid()}_{next(_serial)}"
    names = {role: f"{role}_{suffix}" for role in ROLES}
    db = f"roles_{suffix}"
    with psycopg.connect(pg_cluster.url, autocommit=True) as admin:
        for name in names.values():
            admin.execute(f"CREATE ROLE {name} LOGIN")
        admin.execute(f"CREATE DATABASE {db} OWNER {names['procsched_owner']}")
    url = pg_cluster.url_for(db)
    yield {role: url.replace("postgresql://postgres@", f"postgresql://{name}@", 1) for role, name in names.items()}
    with psycopg.connect(pg_cluster.url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {db} WITH (FORCE)")
        for name in names.values():
            admin.execute(f"DROP ROLE {name}")


def test_each_role_does_its_job_with_the_readme_grants_only(roles, tmp_path):
    out = str(tmp_path / "runs")
    # the owner creates the tables, then grants as the README says
    procsched.Scheduler(1, store=roles["procsched_owner"]).shutdown()
    grants = readme_grants()
    for role in ROLES:
        grants = re.sub(rf"\b{role}\b", roles[role].split("//", 1)[1].split("@", 1)[0], grants)
    with psycopg.connect(roles["procsched_owner"], autocommit=True) as c:
        c.execute(grants)

    # -- a scheduler: keyed tasks of every kind, trims, control, a rotation, a restart
    url = roles["procsched_scheduler"] + "&keep_runs=2"
    with procsched.Scheduler(2, store=url, secret="old") as s:
        tick = s.schedule_at_fixed_rate(tasks.tick, 0.02, args=(out, "tick"), key="tick")
        retried = procsched.Retry(attempts=2, delay=0.01)
        s.schedule_at_fixed_rate(tasks.tick, 3600, args=(out, "hourly"), key="hourly", retry=retried)
        s.schedule(tasks.tick, args=(out, "once"), key="once").result(30)
        wait_until(lambda: len([x for x in lines(out) if x.endswith("tick")]) >= 4, 30, "runs of a keyed task")
        assert tick.pause() and tick.resume()
        s.schedule_at_fixed_rate(tasks.tick, 3600, args=(out, "hourly2"), key="hourly", replace_existing=True)
        s.get("hourly").cancel()
        assert len([r for r in s.history("tick") if r.outcome is not None]) <= 2  # trimmed to keep_runs
    with procsched.Scheduler(1, store=url, secret=["new", "old"]) as s:  # signs again with new
        assert [h.key for h in s.jobs()] == ["tick"] and s.stats()["unloadable"] == {}
    with procsched.Scheduler(1, store=url, secret="new") as s:
        assert [h.key for h in s.jobs()] == ["tick"] and s.stats()["unloadable"] == {}
    store = open_store(url)
    a, b = store.register(lease_ns=60 * P), store.register(lease_ns=60 * P)
    now = time.time_ns()
    assert store.claim_run(a, "tick", store.last_run("tick") + 1, 1, now, now)
    assert store.renew_lease(a)
    assert store.take_over(a, b, force=True)  # its run: crashed
    store.set_limits({"db": 2})
    batch = store.batch(b)
    for k in range(3):
        batch.skipped("tick", now + k * P, "overlap")
    assert batch.commit().ok
    rid = store.ask("tick", "run_now")
    assert [r.id for r in store.take_requests(b, ["tick"])] == [rid]
    assert store.answer(b, rid, result={"ok": True})
    assert store.unregister(b)
    store.close()

    # -- the console: every view, every action but writing a definition
    source = StoreSource(open_store(roles["procsched_console"]), roles["procsched_console"])
    try:
        assert [j.key for j in source.jobs()] == ["tick"]
        source.job("tick"), source.instances(), source.change_mark(), source.metrics()
        assert source.pause("tick")
    finally:
        source.close()
    console = open_store(roles["procsched_console"])
    assert console.resume("tick") and console.pause("tick") and console.resume("tick")
    console.jobs_view(), console.job_view("tick"), console.instances(), console.counts(), console.history("tick")
    assert console.request(console.ask("tick", "backfill", start_ns=now, end_ns=now + P, dry_run=True)) is not None
    batch = console.batch()
    batch.upsert(TaskDefinition("planted", "os:system", b"x", {"kind": "once"}))
    with pytest.raises(StoreError, match="permission denied"):
        batch.commit()
    assert console.remove("tick")
    console.close()

    # -- a reader: reads, and nothing else
    reader = open_store(roles["procsched_reader"], read_only=True)
    reader.load(), reader.jobs_view(), reader.instances(), reader.counts(), reader.history("tick")
    reader.close()
    with contextlib.redirect_stdout(io.StringIO()) as listed:
        assert cli_main(["jobs", "--store", roles["procsched_reader"], "--json"]) == 0
        assert cli_main(["history", "tick", "--store", roles["procsched_reader"]]) == 0
    assert "tick" in listed.getvalue()
    writer = open_store(roles["procsched_reader"])
    with pytest.raises(StoreError, match="permission denied"):
        writer.set_limits({"x": 1})
    writer.close()

    # -- and no role but the owner's may change the tables
    for role in ROLES[1:]:
        with psycopg.connect(roles[role]) as c, pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("DROP TABLE procsched_runs")
