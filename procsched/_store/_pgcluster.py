"""A throwaway PostgreSQL cluster, for the store's tests and benchmarks.

    ThrowawayCluster().start() -> initdb in a temp dir -> postgres on a Unix
    socket in that dir (no TCP port to collide on) -> url ... stop() -> gone
                       └─ a watcher process: if this process dies first
                          (SIGKILL, a test timeout), it stops the server

The server binaries (``initdb``, ``pg_ctl``, ``postgres``) are looked up in
``/usr/lib/postgresql/*/bin`` (newest first), then on ``PATH``. ``initdb``
refuses to run as root, so as root everything runs as the ``postgres``
system user (``subprocess``'s ``user=``), in a temp dir that user owns.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import sys
import tempfile

PORT = 5432  # names the socket file only: the socket lives in our own dir

# The watcher: blocks reading a pipe whose only writer is the process that
# started the cluster. A byte means stop() ran; EOF without one means that
# process died: stop the server and remove its dir.
_WATCH = """
import os, shutil, subprocess, sys
fd, pg_ctl, d = int(sys.argv[1]), sys.argv[2], sys.argv[3]
if not os.read(fd, 1) and os.path.isdir(d):
    subprocess.run(sys.argv[4:] + [pg_ctl, "-D", os.path.join(d, "data"), "-m", "immediate", "-w", "stop"],
                   capture_output=True, timeout=120)
    shutil.rmtree(d, ignore_errors=True)
"""


def find_binaries(pattern: str = "/usr/lib/postgresql/*/bin") -> str | None:
    """The directory holding initdb, pg_ctl and postgres, or None: the
    newest of ``pattern``, else where ``initdb`` on PATH really lives."""

    def version(d: str) -> tuple[int, ...]:
        name = os.path.basename(os.path.dirname(d))
        return tuple(int(p) for p in name.split(".") if p.isdigit())

    candidates = sorted(glob.glob(pattern), key=version, reverse=True)
    found = shutil.which("initdb")
    if found:
        candidates.append(os.path.dirname(os.path.realpath(found)))
    for d in candidates:
        if all(os.access(os.path.join(d, b), os.X_OK) for b in ("initdb", "pg_ctl", "postgres")):
            return d
    return None


class ThrowawayCluster:
    """One PostgreSQL server in a temp dir; ``stop()`` removes every trace."""

    def __init__(self, *, fsync: bool = True, bindir: str | None = None) -> None:
        found = bindir or find_binaries()
        if found is None:
            raise FileNotFoundError(
                "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found in "
                "/usr/lib/postgresql/*/bin or on PATH"
            )
        self.bindir: str = found
        self.fsync = fsync
        self.dir: str | None = None
        self.url = ""
        self._watch_w = -1  # our end of the watcher's pipe

    def _run(self, *argv: str) -> None:
        as_postgres: dict[str, object] = {}
        if os.geteuid() == 0:  # initdb refuses root: drop to the postgres user for the exec
            as_postgres = {"user": "postgres", "group": "postgres", "extra_groups": [], "cwd": self.dir}
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, **as_postgres)  # type: ignore[call-overload]
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:2])} failed ({done.returncode}): {done.stdout}{done.stderr}")

    def start(self) -> ThrowawayCluster:
        self.dir = tempfile.mkdtemp(prefix="procsched-pg-")
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        data = os.path.join(self.dir, "data")
        try:
            self._run(
                os.path.join(self.bindir, "initdb"),
                "-D",
                data,
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            )
            opts = f"-c listen_addresses='' -k {self.dir} -p {PORT} -c fsync={'on' if self.fsync else 'off'}"
            if not self.fsync:
                opts += " -c synchronous_commit=off -c full_page_writes=off"
            self._run(
                os.path.join(self.bindir, "pg_ctl"),
                "-D",
                data,
                "-l",
                os.path.join(self.dir, "log"),
                "-w",
                "-t",
                "60",
                "-o",
                opts,
                "start",
            )
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
            raise
        self.url = self.url_for("postgres")
        self._watch()
        return self

    def _watch(self) -> None:
        """Start the watcher (see _WATCH), in a session of its own so that a
        signal to our process group does not take it along."""
        r, self._watch_w = os.pipe()
        as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WATCH,
                str(r),
                os.path.join(self.bindir, "pg_ctl"),
                self.dir,  # type: ignore[list-item]
                *as_postgres,
            ],
            pass_fds=(r,),
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(r)

    def url_for(self, dbname: str) -> str:
        return f"postgresql://postgres@/{dbname}?host={self.dir}&port={PORT}"

    def stop(self) -> None:
        if self.dir is None:
            return
        try:
            self._run(
                os.path.join(self.bindir, "pg_ctl"),
                "-D",
                os.path.join(self.dir, "data"),
                "-m",
                "immediate",
                "-w",
                "stop",
            )
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
            if self._watch_w >= 0:  # the watcher's byte: stopped, nothing for it to do
                os.write(self._watch_w, b"s")
                os.close(self._watch_w)
                self._watch_w = -1

    def __enter__(self) -> ThrowawayCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
