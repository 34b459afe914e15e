"""Serving the console: uvicorn on a socket bound here.

``Console(source, host=..., port=...)`` binds at once (an ``OSError`` names
a taken port at the call), then serves on a thread of its own
(``start()`` / ``close()``): beside a running program (``run --web``), or
while the main thread waits for Ctrl-C / SIGTERM (``procsched web``).
No access log: the login link's token must not reach a log.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
from typing import Any

from ._model import DEFAULT_HOST, DEFAULT_PORT, TOKEN_ENV, ConsoleSource
from ._security import Access

#: Seconds a stop waits for open streams before closing them.
GRACE = 1


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted sockets inherit it: uvicorn writes a response's head and
        # body apart, and with Nagle on, a kept-alive connection's body waited
        # for the client's delayed ACK (40 ms a request).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.set_inheritable(False)
    except BaseException:
        sock.close()
        raise
    return sock


class Console:
    """The console of ``source``, served on ``host:port``.

    Args:
        token: the access token; default ``PROCSCHED_WEB_TOKEN``, else a new random one.
        read_only: offer and take no actions.

    Raises:
        OSError: the address cannot be bound.
        ImportError: the web extra is not installed.
    """

    def __init__(
        self,
        source: ConsoleSource,
        *,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        token: str | None = None,
        read_only: bool = False,
    ) -> None:
        import uvicorn

        from ._app import make_app

        token = token or os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(32)
        self.source = source
        self.access = Access(token, read_only)
        self.app = make_app(source, self.access)
        self.sock = bind(host, port)
        self.port = self.sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self.port}/"
        # No proxy headers: a client must not choose the address it is throttled by.
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=GRACE,
            ws="none",
            proxy_headers=False,
        )
        self.server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def login_url(self) -> str:
        """The link that logs a browser in (it carries the token)."""
        return f"{self.url}login?token={self.access.token}"

    @property
    def live(self) -> Any:
        """The change-mark reader (``_app.Live``)."""
        return self.app.app.state.live  # type: ignore[attr-defined]

    def start(self, timeout: float = 10.0) -> None:
        """Serve on a thread of its own; return once it serves (its lifespan started)."""
        started: threading.Event = self.app.app.state.started  # type: ignore[attr-defined]

        def run() -> None:
            try:
                self.server.run(sockets=[self.sock])
            finally:
                started.set()  # it stopped: whoever waits for the start wakes up

        self._thread = threading.Thread(target=run, name="procsched-console", daemon=True)
        self._thread.start()
        if not started.wait(timeout):
            raise OSError(f"the console did not start within {timeout:g} s")
        if not self._thread.is_alive():
            raise OSError("the console stopped as it started")

    def close(self) -> None:
        """Stop serving (open event streams end) and release the source."""
        self.live.end_streams()
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(GRACE + 5)
            self._thread = None
        self.sock.close()
        self.source.close()
