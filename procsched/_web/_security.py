"""Access control: the console's one security layer (an ASGI middleware).

Every request passes here before any route sees it::

    request ─▶ /static/* ......................................... served (no data in it)
            ─▶ credentials: Authorization: Bearer TOKEN, or the session cookie
               (made by /login from the token)
                 none ──▶ 401 (login page / JSON), nothing else
                 wrong ─▶ 401, the same answer, after a delay that doubles per wrong try
                          from that client (an asyncio sleep under a per-client lock:
                          the event loop goes on serving others)
            ─▶ an unsafe method (POST...) with the cookie: same origin (Origin, else
               Referer) AND the session's CSRF token (X-CSRF-Token header), else 403;
               --read-only: 403 for every unsafe method but login/logout
            ─▶ the app, with scope["state"]["session"] (its CSRF token for the pages)

Tokens are compared with ``hmac.compare_digest``. The cookie is HttpOnly,
SameSite=Strict, Path=/, and holds a random session id (never the token);
sessions live in this process only. A request with the bearer token needs
no cookie and no CSRF token (a browser never adds that header on its own).
Answers carry a strict Content-Security-Policy (scripts and styles from
/static only), no-store caching, nosniff, and no referrer to other sites.
"""

from __future__ import annotations

import asyncio
import collections
import hmac
import json
import secrets
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

COOKIE = "procsched_session"
CSRF_HEADER = "x-csrf-token"
#: Paths anyone may fetch: the login page and the static files (no data).
OPEN_PREFIXES = ("/static/",)
LOGIN = "/login"
LOGOUT = "/logout"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Wrong tries from one client: the n-th waits BASE * 2**(n-2) s, at most MAX.
DELAY_BASE = 0.05
DELAY_MAX = 5.0
#: Sessions kept (oldest dropped first) and how long one lasts.
SESSIONS_KEPT = 1000
SESSION_SECONDS = 12 * 3600
HEADERS = [
    (b"content-security-policy", b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
     b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Session:
    """A logged-in browser: its id (the cookie) and its CSRF token."""

    id: str
    csrf: str
    expires: float


@dataclass(frozen=True, slots=True)
class Access:
    """The console's access rules, as the command line set them."""

    token: str
    read_only: bool = False


class Sessions:
    """The sessions of this console process (the event loop's thread only)."""

    def __init__(self) -> None:
        self._by_id: collections.OrderedDict[str, Session] = collections.OrderedDict()

    def new(self) -> Session:
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), time.monotonic() + SESSION_SECONDS)
        self._by_id[session.id] = session
        while len(self._by_id) > SESSIONS_KEPT:
            self._by_id.popitem(last=False)
        return session

    def get(self, ident: str) -> Session | None:
        # Constant time over the ids we hold would cost a scan; a dict lookup
        # leaks nothing useful: the ids are 256 random bits.
        session = self._by_id.get(ident)
        if session is None or session.expires < time.monotonic():
            self._by_id.pop(ident, None)
            return None
        return session

    def drop(self, ident: str) -> None:
        self._by_id.pop(ident, None)


class Throttle:
    """Slows down repeated wrong tokens, per client address."""

    def __init__(self) -> None:
        self.failures: dict[str, int] = {}
        self.locks: dict[str, asyncio.Lock] = {}

    def delay(self, client: str) -> float:
        n = self.failures.get(client, 0)
        return 0.0 if n < 1 else min(DELAY_MAX, DELAY_BASE * 2 ** (n - 1))

    async def failed(self, client: str) -> None:
        """Count a wrong try and wait its delay; tries from one client wait in turn."""
        lock = self.locks.setdefault(client, asyncio.Lock())
        async with lock:
            wait = self.delay(client)
            self.failures[client] = self.failures.get(client, 0) + 1
            if len(self.failures) > 10_000:  # many clients: forget the oldest
                oldest = next(iter(self.failures))
                del self.failures[oldest]
                self.locks.pop(oldest, None)
            if wait:
                await asyncio.sleep(wait)

    def succeeded(self, client: str) -> None:
        self.failures.pop(client, None)


def same_token(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


class Guard:
    """The middleware (see the module docstring)."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access
        self.sessions = Sessions()
        self.throttle = Throttle()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":  # the console has none
            await send({"type": "websocket.close", "code": 1008})
            return
        send = _with_headers(send)
        path: str = scope["path"]
        method: str = scope["method"]
        if path.startswith(OPEN_PREFIXES) and method in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        client = (scope.get("client") or ("?", 0))[0]
        if path == LOGIN:
            await self._login(scope, receive, send, headers, client)
            return
        bearer = _bearer(headers)
        session = None
        if bearer is not None:
            if not same_token(bearer, self.access.token):
                await self.throttle.failed(client)
                await _unauthorized(scope, send)
                return
            self.throttle.succeeded(client)
        else:
            cookie = _cookies(headers).get(COOKIE)
            session = None if cookie is None else self.sessions.get(cookie)
            if session is None:
                if cookie is not None:  # a forged or stale session id counts as a wrong try
                    await self.throttle.failed(client)
                await _unauthorized(scope, send)
                return
            if method not in SAFE_METHODS:
                why = _cross_site(headers, scope, session)
                if why:
                    await _json(send, 403, {"error": why})
                    return
        if path == LOGOUT and method == "POST":
            if session is not None:
                self.sessions.drop(session.id)
            await send({"type": "http.response.start", "status": 303, "headers": [
                (b"location", b"/login"), (b"set-cookie", _cookie("", 0))]})  # fmt: skip
            await send({"type": "http.response.body", "body": b""})
            return
        if self.access.read_only and method not in SAFE_METHODS:
            await _json(send, 403, {"error": "this console is read-only (--read-only): it takes no actions"})
            return
        scope.setdefault("state", {})["session"] = session
        await self.app(scope, receive, send)

    async def _login(self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str], client: str) -> None:
        """GET /login?token=T (the printed link) or POST /login (the form's
        token field): a valid token makes a session and goes to the jobs."""
        method = scope["method"]
        if method == "POST":
            if _origin_of(headers) not in (None, _own_origin(scope, headers)):
                await _json(send, 403, {"error": "cross-site login refused"})
                return
            body = await _body(receive)
            given = urllib.parse.parse_qs(body.decode("latin-1")).get("token", [""])[0]
        elif method in SAFE_METHODS:
            given = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])[0]
            if not given:
                await _login_page(send, 200)
                return
        else:
            await _json(send, 405, {"error": "method not allowed"})
            return
        if not same_token(given, self.access.token):
            await self.throttle.failed(client)
            await _login_page(send, 401)
            return
        self.throttle.succeeded(client)
        session = self.sessions.new()
        await send({"type": "http.response.start", "status": 303, "headers": [
            (b"location", b"/"), (b"set-cookie", _cookie(session.id, SESSION_SECONDS))]})  # fmt: skip
        await send({"type": "http.response.body", "body": b""})


def _cross_site(headers: dict[str, str], scope: Scope, session: Session) -> str:
    """Why an unsafe request with the session cookie is refused ('' if it is not)."""
    origin = _origin_of(headers)
    if origin is None:
        return "cross-site check: the request has neither Origin nor Referer"
    if origin != _own_origin(scope, headers):
        return "cross-site request refused"
    given = headers.get(CSRF_HEADER, "")
    if not given or not same_token(given, session.csrf):
        return "missing or wrong CSRF token"
    return ""


def _origin_of(headers: dict[str, str]) -> str | None:
    """The request's origin: its Origin header, else its Referer's origin."""
    origin = headers.get("origin")
    if origin:
        return origin
    referer = headers.get("referer")
    if referer:
        parts = urllib.parse.urlsplit(referer)
        return f"{parts.scheme}://{parts.netloc}"
    return None


def _own_origin(scope: Scope, headers: dict[str, str]) -> str:
    return f"{scope.get('scheme', 'http')}://{headers.get('host', '')}"


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _bearer(headers: dict[str, str]) -> str | None:
    value = headers.get("authorization")
    if value is None:
        return None
    scheme, _, credentials = value.partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else ""


def _cookies(headers: dict[str, str]) -> dict[str, str]:
    from http.cookies import SimpleCookie

    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(headers.get("cookie", ""))
    except Exception:  # noqa: BLE001 - a malformed cookie header: no cookies
        return {}
    return {k: m.value for k, m in jar.items()}


def _cookie(value: str, max_age: int) -> bytes:
    return f"{COOKIE}={value}; Max-Age={max_age}; Path=/; HttpOnly; SameSite=Strict".encode()


async def _body(receive: Receive, limit: int = 4096) -> bytes:
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            break
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def _with_headers(send: Send) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            have = {k.lower() for k, _ in message.get("headers", [])}
            message = {**message, "headers": [*message.get("headers", []),
                                              *(h for h in HEADERS if h[0] not in have)]}  # fmt: skip
        await send(message)

    return wrapped


async def _json(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})  # fmt: skip
    await send({"type": "http.response.body", "body": data})


async def _unauthorized(scope: Scope, send: Send) -> None:
    """401, the same for a missing and a wrong credential: JSON for the API
    and the metrics, the login form for pages."""
    path: str = scope["path"]
    if path.startswith(("/api/", "/metrics", "/events", "/fragments/")) or scope["method"] not in SAFE_METHODS:
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"application/json"), (b"www-authenticate", b'Bearer realm="procsched"')]})  # fmt: skip
        await send({"type": "http.response.body", "body": b'{"error": "unauthorized"}'})
        return
    await _login_page(send, 401)


LOGIN_PAGE = b"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>procsched console - log in</title><link rel="stylesheet" href="/static/console.css"></head>
<body class="login"><main><h1>procsched console</h1>
<p>Open the login link that <code>procsched</code> printed when it started, or paste its token.</p>
<form method="post" action="/login"><label>token <input type="password" name="token" autocomplete="off" autofocus
required></label> <button type="submit">log in</button></form></main></body></html>
"""


async def _login_page(send: Send, status: int) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(LOGIN_PAGE)).encode())]})  # fmt: skip
    await send({"type": "http.response.body", "body": LOGIN_PAGE})
