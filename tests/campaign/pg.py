"""A throwaway PostgreSQL server for the promise tests and the fault campaign.

    Cluster().start() -> initdb in a temp dir -> postgres on a Unix socket in
    that dir -> url_for(db) / create_db(db) ... stop() -> gone
                      └─ a watcher process: if the starter dies first (SIGKILL,
                         a test timeout), it stops the server and removes the dir

Our own copy (the campaign tests only what is public): the server binaries
are looked up in /usr/lib/postgresql/*/bin (newest first), then on PATH; as
root everything runs as the ``postgres`` user (initdb refuses root).
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import subprocess
import sys
import tempfile

PORT = 5432  # names the socket file only (the socket lives in our own dir)

_WATCH = """
import os, shutil, subprocess, sys
fd, pg_ctl, d = int(sys.argv[1]), sys.argv[2], sys.argv[3]
if not os.read(fd, 1) and os.path.isdir(d):
    subprocess.run(sys.argv[4:] + [pg_ctl, "-D", os.path.join(d, "data"), "-m", "immediate", "-w", "stop"],
                   capture_output=True, timeout=120)
    shutil.rmtree(d, ignore_errors=True)
"""


def binaries() -> str | None:
    """The directory holding initdb, pg_ctl and postgres, or None."""
    def version(d: str) -> tuple[int, ...]:
        return tuple(int(p) for p in os.path.basename(os.path.dirname(d)).split(".") if p.isdigit())

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        found.append(os.path.dirname(os.path.realpath(on_path)))
    for d in found:
        if all(os.access(os.path.join(d, b), os.X_OK) for b in ("initdb", "pg_ctl", "postgres")):
            return d
    return None


class Cluster:
    """One PostgreSQL server in a temp dir, on a Unix socket; ``stop()`` removes it."""

    def __init__(self) -> None:
        bindir = binaries()
        if bindir is None:
            raise FileNotFoundError("PostgreSQL server binaries (initdb, pg_ctl, postgres) not found")
        self.bindir = bindir
        self.dir = ""
        self._watch_w = -1
        self._names = itertools.count()

    @property
    def socket(self) -> str:
        """The server's Unix socket (what a TCP proxy forwards to)."""
        return os.path.join(self.dir, f".s.PGSQL.{PORT}")

    def _run(self, *argv: str) -> None:
        extra: dict[str, object] = {}
        if os.geteuid() == 0:
            extra = {"user": "postgres", "group": "postgres", "extra_groups": [], "cwd": self.dir}
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, **extra)  # type: ignore[call-overload]
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:2])} failed ({done.returncode}): {done.stdout}{done.stderr}")

    def start(self) -> Cluster:
        self.dir = tempfile.mkdtemp(prefix="campaign-pg-")
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        data = os.path.join(self.dir, "data")
        try:
            self._run(os.path.join(self.bindir, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
                      "-E", "UTF8", "--locale=C", "--no-sync")  # fmt: skip
            opts = (f"-c listen_addresses='' -k {self.dir} -p {PORT} -c fsync=off -c synchronous_commit=off "
                    "-c full_page_writes=off -c max_connections=200")  # fmt: skip
            self._run(os.path.join(self.bindir, "pg_ctl"), "-D", data, "-l", os.path.join(self.dir, "log"),
                      "-w", "-t", "60", "-o", opts, "start")  # fmt: skip
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = ""
            raise
        r, self._watch_w = os.pipe()
        runuser = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.Popen([sys.executable, "-c", _WATCH, str(r), os.path.join(self.bindir, "pg_ctl"), self.dir,
                          *runuser], pass_fds=(r,), start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        os.close(r)
        return self

    def url_for(self, db: str, host: str | None = None, port: int | None = None) -> str:
        """The URL of database ``db``: on the Unix socket, or at ``host:port`` (a proxy)."""
        if host is None:
            return f"postgresql://postgres@/{db}?host={self.dir}&port={PORT}"
        return f"postgresql://postgres@{host}:{port}/{db}?sslmode=disable&gssencmode=disable"

    def create_db(self, prefix: str = "c") -> str:
        """A fresh database; returns its name."""
        import psycopg

        name = f"{prefix}{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url_for("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return name

    def drop_db(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.url_for("postgres"), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        if not self.dir:
            return
        try:
            self._run(os.path.join(self.bindir, "pg_ctl"), "-D", os.path.join(self.dir, "data"),
                      "-m", "immediate", "-w", "stop")  # fmt: skip
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = ""
            if self._watch_w >= 0:
                os.write(self._watch_w, b"s")
                os.close(self._watch_w)
                self._watch_w = -1

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
