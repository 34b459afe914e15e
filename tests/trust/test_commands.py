"""``--secret-file`` and ``PROCSCHED_SECRET`` for ``procsched run`` and
``procsched web`` (issue 24): the jobs ``run`` stores are signed with the
first secret of the file (or of the variable); a secret file others can
read is warned about; a secret that cannot be read, an empty one, or a
secret file without a store is an error at start, never "no secret"."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import textwrap

import httpx

from procsched._cli import main as cli_main
from procsched._store import open_store
from procsched._store._model import BAD_SIGNATURE, UNSIGNED
from tests.trust.helpers import ROOT, cli_env, plant, procsched_cli, unpickled_by

JOBS = """
    from procsched import every

    @every(0.05)
    def tick():
        return 1
"""
TOKEN = "trust-web-token-0123456789"


def jobs_file(tmp_path) -> str:
    path = tmp_path / "jobs.py"
    path.write_text(textwrap.dedent(JOBS))
    return str(path)


def secret_file(tmp_path, text: str, mode: int = 0o600) -> str:
    path = tmp_path / "secret"
    path.write_text(text)
    os.chmod(path, mode)
    return str(path)


def untrusted(db: str, secret: str) -> dict[str, str | None]:
    with open_store(db, secret=secret) as store:
        return {t.key: t.untrusted for t in store.load().tasks}


def here(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """``procsched ARGV`` in this process: (exit status, stderr)."""
    old = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            try:
                code = cli_main(list(argv))
            except SystemExit as exc:
                code = int(exc.code or 0)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return code, err.getvalue()


def test_run_signs_the_stored_jobs_with_the_first_secret_of_the_file(tmp_path):
    db, marker = str(tmp_path / "jobs.db"), str(tmp_path / "unpickled")
    plant(db, None, marker, str(tmp_path / "runs"))  # a row not signed with the secret, due now
    done = procsched_cli(
        "run", jobs_file(tmp_path), "--store", db, "--secret-file", secret_file(tmp_path, "new\n\nold\n", 0o644),
        "--keep-others", "--duration", "1", "--plain",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "can be read by others than its owner (mode 0644): chmod 600 it" in done.stderr
    assert untrusted(db, "new") == {"tick": None, "planted": UNSIGNED}
    assert untrusted(db, "old") == {"tick": BAD_SIGNATURE, "planted": UNSIGNED}  # the first line signs
    assert unpickled_by(marker) == [], "the command, its scheduler or a worker unpickled a row not signed right"


def test_run_takes_the_secret_from_the_variable(tmp_path):
    db = str(tmp_path / "jobs.db")
    done = procsched_cli(
        "run", jobs_file(tmp_path), "--store", db, "--duration", "1", "--plain", env={"PROCSCHED_SECRET": "from env"}
    )
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr
    assert untrusted(db, "from env") == {"tick": None}
    assert untrusted(db, "other") == {"tick": BAD_SIGNATURE}


def test_a_secret_that_cannot_be_read_stops_run_and_web_at_start(tmp_path):
    jobs, db = jobs_file(tmp_path), str(tmp_path / "jobs.db")
    missing = str(tmp_path / "missing")
    code, err = here("run", jobs, "--store", db, "--secret-file", missing)
    assert code == 1 and "cannot read the store's secret" in err and "missing" in err, err
    code, err = here("run", jobs, "--store", db, "--secret-file", secret_file(tmp_path, "\n \n"))
    assert code == 1 and "holds no secret" in err, err
    code, err = here("run", jobs, "--store", db, env={"PROCSCHED_SECRET": ""})
    assert code == 1 and "PROCSCHED_SECRET is set but empty" in err, err
    code, err = here("run", jobs, "--secret-file", secret_file(tmp_path, "x"))
    assert code == 2 and "--secret-file signs a store's jobs: it needs --store" in err, err
    code, err = here("web", "--store", db, "--secret-file", missing, "--port", "0")
    assert code == 1 and "cannot read the store's secret" in err, err
    code, err = here("web", "--store", db, "--port", "0", env={"PROCSCHED_SECRET": "a,,b"})
    assert code == 1 and "PROCSCHED_SECRET is set but has an empty item" in err, err
    assert not os.path.exists(db), "nothing was started"


def test_web_serves_a_store_with_its_secret_file(tmp_path):
    """The console checks each row with the secret it is given."""
    db = str(tmp_path / "jobs.db")
    assert procsched_cli("run", jobs_file(tmp_path), "--store", db, "--duration", "0.5", "--plain").returncode == 0
    web = subprocess.Popen(
        [sys.executable, "-m", "procsched", "web", "--store", db, "--port", "0",
         "--secret-file", secret_file(tmp_path, "s", 0o640)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env=cli_env({"PROCSCHED_WEB_TOKEN": TOKEN}),
    )  # fmt: skip
    try:
        assert web.stderr is not None
        said = []
        for line in web.stderr:  # (its first lines; a deadlock guard: the timeout of the test)
            said.append(line)
            if line.startswith("procsched console at "):
                break
        assert any("mode 0640" in line for line in said), said
        url = said[-1].split(" at ", 1)[1].strip().rstrip("/")
        jobs = httpx.get(f"{url}/api/jobs", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).json()
        # run wrote it without a secret, and no instance with this one has refused it yet: the console checks
        assert [(j["key"], j["state"], j["unloadable"]) for j in jobs] == [("tick", "unloadable", UNSIGNED)]
    finally:
        web.send_signal(signal.SIGTERM)
        assert web.wait(30) == 0
