"""A TCP proxy in front of the throwaway PostgreSQL server, for dropped connections.

    client (psycopg) ──TCP 127.0.0.1:port──▶ Proxy ──Unix socket──▶ postgres (ThrowawayCluster)

The cluster listens on a Unix socket only (no TCP port to collide on);
the proxy gives the tests a TCP address whose connections they can cut:

- ``lose_next_commit(after=b"...")``: the next ``COMMIT`` a client sends
  on a connection whose transaction sent ``after`` (e.g. a claim's
  ``INSERT INTO procsched_runs``) is forwarded, and the server's answer to
  it is swallowed and both sides closed: the transaction committed, its
  client never hears so (issue 20 item 5). ``cut`` is set then.
- ``cut_all()``: drop every connection now (a network blip); with
  ``refuse(True)`` new ones are closed at once (an outage) until
  ``refuse(False)``.

One thread per direction of each connection (a test tool: a few
connections at a time); ``close()`` ends them all.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
from typing import Self


class Proxy:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.cut = threading.Event()  # set when lose_next_commit has cut a connection
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._armed: bytes | None = None
        self._refusing = False
        self._closed = False
        self._threads = [threading.Thread(target=self._accept, name="pgproxy-accept", daemon=True)]
        self._threads[0].start()

    def url_for(self, dbname: str, query: str = "") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}" + (f"?{query}" if query else "")

    def lose_next_commit(self, after: bytes) -> None:
        self.cut.clear()
        with self._lock:
            self._armed = after

    def refuse(self, on: bool) -> None:
        with self._lock:
            self._refusing = on

    def cut_all(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            _close(*pair)

    def close(self) -> None:
        self._closed = True
        _close(self.listener)  # (shutdown wakes the thread blocked in accept)
        self.cut_all()
        for t in self._threads:
            t.join(10)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                refusing = self._refusing
            if refusing:
                client.close()
                continue
            server = socket.socket(socket.AF_UNIX)
            try:
                server.connect(self.socket_path)
            except OSError:
                client.close()
                server.close()
                continue
            state = {"seen": False, "doomed": False}
            with self._lock:
                self._pairs.append((client, server))
            for target, args in (
                (self._upstream, (client, server, state)),
                (self._downstream, (server, client, state)),
            ):
                t = threading.Thread(target=target, args=args, daemon=True)
                t.start()
                self._threads.append(t)

    def _upstream(self, client: socket.socket, server: socket.socket, state: dict[str, bool]) -> None:
        """Client to server; dooms this connection at a COMMIT after the armed pattern."""
        reader = _Frontend()
        while True:
            data = _recv(client)
            if not data:
                break
            for sql in reader.feed(data):
                with self._lock:
                    armed = self._armed
                    if armed is not None and armed in sql:
                        state["seen"] = True
                    elif armed is not None and state["seen"] and sql.strip().upper() == b"COMMIT":
                        self._armed = None
                        state["doomed"] = True  # the next answer from the server is this COMMIT's
            try:
                server.sendall(data)
            except OSError:
                break
        _close(client, server)

    def _downstream(self, server: socket.socket, client: socket.socket, state: dict[str, bool]) -> None:
        while True:
            data = _recv(server)
            if not data:
                break
            if state["doomed"]:  # the COMMIT's answer: swallowed, the connection cut
                self.cut.set()  # (first: the client wakes when its side closes)
                _close(client, server)
                return
            try:
                client.sendall(data)
            except OSError:
                break
        _close(client, server)


class _Frontend:
    """Reads the client's side of the PostgreSQL protocol: the SQL each
    message runs (a simple query, or the statement a Bind executes - psycopg
    prepares a statement it runs often, and then sends only its name)."""

    def __init__(self) -> None:
        self.buf = b""
        self.started = False
        self.statements: dict[bytes, bytes] = {}

    def feed(self, data: bytes) -> list[bytes]:
        self.buf += data
        run: list[bytes] = []
        while True:
            if not self.started:  # untyped: SSLRequest, GSSENCRequest, then the StartupMessage
                if len(self.buf) < 8:
                    return run
                size, code = struct.unpack("!ii", self.buf[:8])
                if len(self.buf) < size:
                    return run
                self.buf = self.buf[size:]
                self.started = code not in (80877103, 80877104)
                continue
            if len(self.buf) < 5:
                return run
            kind, size = self.buf[:1], struct.unpack("!i", self.buf[1:5])[0]
            if len(self.buf) < 1 + size:
                return run
            body, self.buf = self.buf[5 : 1 + size], self.buf[1 + size :]
            if kind == b"Q":
                run.append(body.split(b"\0", 1)[0])
            elif kind == b"P":
                name, query = body.split(b"\0", 2)[:2]
                self.statements[name] = query
            elif kind == b"B":
                statement = body.split(b"\0", 2)[1]
                run.append(self.statements.get(statement, b""))


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _close(*socks: socket.socket) -> None:
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


def socket_path(cluster_dir: str, port: int) -> str:
    return os.path.join(cluster_dir, f".s.PGSQL.{port}")
