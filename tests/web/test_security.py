"""The console's access rules, tested as an attacker would: every route
without a token, with a wrong one, with a session cookie sent cross-site, a
POST without the CSRF token, --read-only, the default bind address, and
wrong tokens slowed down without stopping the server."""

from __future__ import annotations

import concurrent.futures
import re
import time
from typing import Any

import httpx
import pytest
from starlette.routing import Mount, Route
from web_helpers import TOKEN, serve

from procsched._web._security import COOKIE, DELAY_BASE

SECRET_WORDS = ("tick", "chatty", "fails", "bad luck", "hello from chatty", "test program")


def routes(console: Any) -> list[tuple[str, str]]:
    """(method, path) of every route the app has, parameters filled in."""
    found = []
    for route in console.app.app.routes:
        if isinstance(route, Mount):
            found.append(("GET", "/static/console.css"))
            continue
        assert isinstance(route, Route)
        path = route.path.replace("{ref:path}", "~1").replace("{action}", "pause").replace("{ident:int}", "1")
        for method in sorted(route.methods or {"GET"}):
            if method != "HEAD":
                found.append((method, path))
    return found


def login(served: Any) -> httpx.Client:
    """A browser-like client logged in through the login link."""
    client = httpx.Client(base_url=served.url, timeout=10)
    answer = client.get(f"/login?token={TOKEN}")
    assert answer.status_code == 303 and answer.headers["location"] == "/"
    return client


def csrf_of(client: httpx.Client) -> str:
    html = client.get("/").text
    match = re.search(r'"X-CSRF-Token": "([^"]+)"', html)
    assert match, html[:500]
    return match.group(1)


def test_every_route_needs_the_token_and_reveals_nothing(program):
    checked = 0
    wrong = httpx.Client(base_url=program.url, headers={"Authorization": "Bearer wrong"}, timeout=10)
    forged = httpx.Client(base_url=program.url, cookies={COOKIE: "forged-session-id"}, timeout=10)
    for method, path in routes(program.console):
        if path.startswith("/static/"):
            assert program.anonymous.request(method, path).status_code == 200  # no data: served to anyone
            continue
        if path in ("/login",):
            continue  # the login page itself (tested below)
        answers = []
        for client in (program.anonymous, wrong, forged):
            answers.append(client.request(method, path))
            program.console.app.throttle.failures.clear()  # slowing down is tested on its own below
        for answer in answers:
            assert answer.status_code == 401, (method, path, answer.status_code)
            assert not any(word in answer.text for word in SECRET_WORDS), (method, path, answer.text[:300])
            assert "set-cookie" not in answer.headers
        assert answers[0].text == answers[1].text, "a wrong token must look like no token"
        checked += 1
    assert checked >= 15  # every page, fragment, API route, /events and /metrics


def test_login_link_makes_a_strict_httponly_session(program):
    client = httpx.Client(base_url=program.url, timeout=10)
    answer = client.get(f"/login?token={TOKEN}")
    cookie = answer.headers["set-cookie"]
    assert answer.status_code == 303
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert TOKEN not in cookie  # the cookie holds a session id, never the token
    page = client.get("/")
    assert page.status_code == 200 and "tick" in page.text
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["cache-control"] == "no-store"
    assert client.get("/login?token=wrong").status_code == 401
    assert client.post("/login", data={"token": "wrong"}).status_code == 401


def test_login_form_with_the_token(program):
    client = httpx.Client(base_url=program.url, timeout=10)
    assert client.get("/login").status_code == 200
    answer = client.post("/login", data={"token": TOKEN}, headers={"Origin": program.url})
    assert answer.status_code == 303 and COOKIE in answer.headers["set-cookie"]
    refused = httpx.Client(base_url=program.url, timeout=10).post(
        "/login", data={"token": TOKEN}, headers={"Origin": "http://evil.example"}
    )
    assert refused.status_code == 403 and "set-cookie" not in refused.headers


def test_unsafe_requests_need_same_origin_and_the_csrf_token(program):
    client = login(program)
    csrf = csrf_of(client)
    same = {"Origin": program.url}
    # No CSRF token, even from the same origin: refused.
    assert client.post("/api/jobs/~1/pause", headers=same).status_code == 403
    # A wrong CSRF token: refused.
    assert client.post("/api/jobs/~1/pause", headers={**same, "X-CSRF-Token": "nope"}).status_code == 403
    # The session cookie sent by another site (a cross-site form or fetch), with the right token even: refused.
    for evil in (
        {"Origin": "http://evil.example"},
        {"Referer": "http://evil.example/attack.html"},
        {"Origin": "null"},
        {},
    ):
        answer = client.post("/api/jobs/~1/pause", headers={**evil, "X-CSRF-Token": csrf})
        assert answer.status_code == 403, evil
        assert "error" in answer.json()
    assert program.scheduler.get(1).state.value != "paused"
    # Same origin (Origin, or a same-origin Referer) and the token: done.
    assert client.post("/api/jobs/~1/pause", headers={**same, "X-CSRF-Token": csrf}).json()["ok"] is True
    assert (
        client.post("/api/jobs/~1/resume", headers={"Referer": program.url + "/jobs/~1", "X-CSRF-Token": csrf}).json()[
            "ok"
        ]
        is True
    )
    # The bearer token needs neither (a browser never sends it by itself).
    assert program.client.post("/api/jobs/~1/pause").json()["ok"] is True


def test_logout_ends_the_session(program):
    client = login(program)
    csrf = csrf_of(client)
    assert client.post("/logout", headers={"Origin": program.url, "X-CSRF-Token": csrf}).status_code == 303
    client.cookies.clear()
    assert client.get("/").status_code == 401


def test_read_only_offers_and_takes_no_action(scheduler):
    import web_jobs
    from web_helpers import rate

    from procsched._web._program import ProgramSource

    source = ProgramSource(scheduler)
    handle = scheduler.schedule_at_fixed_rate(web_jobs.tick, 0.5, name="tick")
    source.add(handle, rate(0.5))
    served = serve(source, read_only=True)
    try:
        for action in ("pause", "resume", "cancel", "run-now", "backfill"):
            answer = served.client.post(f"/api/jobs/~{handle.id}/{action}", json={})
            assert answer.status_code == 403 and "read-only" in answer.json()["error"]
        client = login(served)
        page = client.get(f"/jobs/~{handle.id}").text
        assert "tick" in page and "hx-post" not in page.replace('hx-post="/logout"', "")
        assert (
            client.post(
                f"/jobs/~{handle.id}/pause", headers={"Origin": served.url, "X-CSRF-Token": csrf_of(client)}
            ).status_code
            == 403
        )
        assert handle.state.value != "paused"
    finally:
        served.close()


def test_default_bind_address_is_loopback(scheduler):
    from procsched._cli._main import parser
    from procsched._web import Console
    from procsched._web._program import ProgramSource

    args = parser().parse_args(["web", "--store", "x.db"])
    assert args.host == "127.0.0.1"
    assert parser().parse_args(["run", "jobs.py", "--web", "8765"]).web == ("127.0.0.1", 8765)
    assert parser().parse_args(["run", "jobs.py", "--web", "[::1]:0"]).web == ("::1", 0)
    console = Console(ProgramSource(scheduler), port=0)
    try:
        assert console.sock.getsockname()[0] == "127.0.0.1"
        assert len(console.access.token) >= 32  # random per start
    finally:
        console.sock.close()


@pytest.mark.timeout(30)
def test_wrong_tokens_are_slowed_down_without_blocking_the_server(program):
    wrong = httpx.Client(base_url=program.url, headers={"Authorization": "Bearer wrong"}, timeout=30)
    times = []
    for _ in range(4):
        started = time.monotonic()
        assert wrong.get("/api/jobs").status_code == 401
        times.append(time.monotonic() - started)
    assert times[-1] >= DELAY_BASE * 4 * 0.9  # the 4th wrong try waited 0.2 s
    assert times[-1] > times[0] + DELAY_BASE * 3
    # While a wrong try waits (0.4 s), the server answers others at once.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(wrong.get, "/api/jobs")
        time.sleep(0.1)
        started = time.monotonic()
        assert program.client.get("/api/jobs").status_code == 200
        assert time.monotonic() - started < 0.25
        assert not waiting.done()
        assert waiting.result().status_code == 401
    # Parallel wrong tries from one client wait in turn, not side by side.
    throttle = program.console.app.throttle
    throttle.failures["127.0.0.1"] = 3
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        started = time.monotonic()
        assert list(pool.map(lambda _: wrong.get("/api/jobs").status_code, range(2))) == [401, 401]
        assert time.monotonic() - started >= (0.2 + 0.4) * 0.9
    # The right token afterwards: no wait, and the count starts again.
    assert program.client.get("/api/jobs").status_code == 200
    assert throttle.delay("127.0.0.1") == 0
