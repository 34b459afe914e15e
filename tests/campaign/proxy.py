"""A TCP proxy in front of a PostgreSQL server, to break connections on purpose.

    client (a scheduler) ──TCP──▶ Proxy (threads in this process) ──▶ server (Unix socket or TCP)

Faults it injects, at any instant, for every connection through it:

- ``drop()``: reset every open connection (both sides): a network blip, a
  server restart, a failover;
- ``stall(True)`` ... ``stall(False)``: forward nothing and accept nothing
  (a partition); bytes wait in the sockets and flow again afterwards;
- ``refuse(True)``: new connections are closed at once (the server is down);
- ``shut_out(pid)``: as ``drop`` and ``refuse``, for one client process only
  (``shut_out(None)`` lets it in again);
- ``latency``: seconds added before each message goes up (a slow link);
- ``lose_commit_answers(n)``: the next ``n`` ``COMMIT`` statements reach the
  server and are carried out, but their connection is reset before the
  server's answer reaches the client (the client cannot know it committed).

It reads PostgreSQL's wire protocol just enough to find message boundaries
(an untyped start-up packet, then a type byte and a length per message), so
a commit's answer is cut exactly; connect with ``sslmode=disable``.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass, field

import psutil


@dataclass
class _Conn:
    client: socket.socket
    server: socket.socket
    cut_after_commit: bool = False  # a COMMIT went up: reset before its answer comes down
    commit_statements: set[bytes] = field(default_factory=set)  # prepared statements that are COMMIT
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


def _reset(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, not FIN
        sock.shutdown(socket.SHUT_RD)  # wakes a thread blocked reading it, so the close below is the last
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class Proxy:
    """Listens on 127.0.0.1 (``port``), forwards to ``target`` (a Unix socket path or (host, port))."""

    def __init__(self, target: str | tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self._conns: list[_Conn] = []
        self._lock = threading.Lock()
        self._flowing = threading.Event()
        self._flowing.set()
        self._refusing = False
        self._shut_out: int | None = None
        self._cut_commits = 0
        self.latency = 0.0  # seconds added before each message goes up (a slow network)
        self.commits_cut = 0
        self.drops = 0
        self._closing = False
        self._thread = threading.Thread(target=self._accept, name="campaign-proxy", daemon=True)
        self._thread.start()

    # -- faults --------------------------------------------------------------

    def drop(self) -> int:
        """Reset every open connection; returns how many."""
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            self._close(c)
        self.drops += len(conns)
        return len(conns)

    def stall(self, on: bool) -> None:
        if on:
            self._flowing.clear()
        else:
            self._flowing.set()

    def refuse(self, on: bool) -> None:
        self._refusing = on

    def shut_out(self, pid: int | None) -> int:
        """Reset the open connections of process ``pid`` and refuse its new
        ones (None: let it in again); returns how many were reset."""
        self._shut_out = pid
        if pid is None:
            return 0
        with self._lock:
            conns = [c for c in self._conns if self._pid_of(c.client) == pid]
        for c in conns:
            self._close(c)
        return len(conns)

    def lose_commit_answers(self, n: int = 1) -> None:
        with self._lock:
            self._cut_commits += n

    # -- plumbing ------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self._flowing.wait()
            if (
                self._refusing
                or self._closing
                or (self._shut_out is not None and self._pid_of(client) == self._shut_out)
            ):
                _reset(client)
                continue
            try:
                if isinstance(self.target, str):
                    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                else:
                    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                server.connect(self.target)
            except OSError:
                _reset(client)
                continue
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(client, server)
            with self._lock:
                self._conns.append(conn)
            threading.Thread(target=self._up, args=(conn,), daemon=True).start()
            threading.Thread(target=self._down, args=(conn,), daemon=True).start()

    def _close(self, conn: _Conn) -> None:
        with conn.lock:
            if conn.closed:
                return
            conn.closed = True
        _reset(conn.client)
        _reset(conn.server)
        with self._lock:
            if conn in self._conns:
                self._conns.remove(conn)

    def _pid_of(self, client: socket.socket) -> int | None:
        """The process at the other end of an accepted connection (psutil: this host's sockets)."""
        try:
            port = client.getpeername()[1]
        except OSError:
            return None
        for c in psutil.net_connections(kind="tcp"):
            if c.laddr and c.laddr.port == port and c.raddr and c.raddr.port == self.port:
                return c.pid
        return None

    @staticmethod
    def _recv_exact(sock: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def _up(self, conn: _Conn) -> None:
        """Client -> server, a message at a time."""
        try:
            while True:  # untyped start-up packets (SSL/GSS requests first, if any)
                head = self._recv_exact(conn.client, 8)
                length, code = struct.unpack("!ii", head)
                body = self._recv_exact(conn.client, length - 8)
                self._flowing.wait()
                conn.server.sendall(head + body)
                if code not in (80877103, 80877104):  # not an SSL or GSSENC request: the start-up message
                    break
            while True:
                head = self._recv_exact(conn.client, 5)
                length = struct.unpack("!i", head[1:])[0]
                body = self._recv_exact(conn.client, length - 4)
                self._flowing.wait()
                if self.latency:
                    time.sleep(self.latency)
                if self._is_commit(conn, head[:1], body):
                    with self._lock:
                        if self._cut_commits > 0:
                            self._cut_commits -= 1
                            conn.cut_after_commit = True
                conn.server.sendall(head + body)
        except (OSError, EOFError, struct.error):
            pass
        self._close(conn)

    @staticmethod
    def _is_commit(conn: _Conn, kind: bytes, body: bytes) -> bool:
        """A COMMIT goes up: a simple query, or the Bind of a statement
        parsed as COMMIT (psycopg prepares a statement it runs often)."""
        if kind == b"Q":
            return body.lstrip().upper().startswith(b"COMMIT")
        if kind == b"P":  # Parse: name \0 query \0 ...
            name, query = body.split(b"\0", 2)[:2]
            if query.lstrip().upper().startswith(b"COMMIT"):
                conn.commit_statements.add(name)
            else:
                conn.commit_statements.discard(name)
            return False
        if kind == b"B":  # Bind: portal \0 statement \0 ...
            return body.split(b"\0", 2)[1] in conn.commit_statements
        return False

    def _down(self, conn: _Conn) -> None:
        """Server -> client, a message at a time (typed, with sslmode=disable)."""
        try:
            while True:
                head = self._recv_exact(conn.server, 5)
                length = struct.unpack("!i", head[1:])[0]
                body = self._recv_exact(conn.server, length - 4)
                self._flowing.wait()
                if conn.cut_after_commit:
                    if head[:1] == b"Z":  # the commit's answer is complete (and done on the server): cut
                        self.commits_cut += 1
                        break
                    continue  # its CommandComplete: withheld
                conn.client.sendall(head + body)
        except (OSError, EOFError, struct.error):
            pass
        self._close(conn)

    def close(self) -> None:
        self._closing = True
        self._flowing.set()
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept()
        except OSError:
            pass
        try:
            self.listener.close()
        except OSError:
            pass
        self.drop()
