"""The console's routes: pages, fragments, the JSON API, metrics, live updates.

    GET  /                          the jobs (filter: ?q=TEXT&state=STATE)
    GET  /jobs/{ref}                one job: next slots, last runs and slots, chart, actions
    GET  /instances, /workers       the scheduler instances; their workers
    GET  /fragments/...             the same pages' live parts (htmx swaps them in)
    POST /jobs/{ref}/{action}       an action from the page: pause, resume, cancel answer the job's
                                    fragment; run-now and backfill a request's (it follows itself
                                    until the instance that runs the job answers)
    GET  /events                    server-sent events: "change" when the source's change mark moved
    GET  /api/jobs, /api/jobs/{ref}, /api/instances, /api/workers, /api/requests/{id}
    POST /api/jobs/{ref}/{action}   pause, resume, cancel, run-now, backfill (JSON body)
    GET  /metrics                   Prometheus text
    GET|POST /login, POST /logout   see _security

Live updates: ONE reader per console process (``Live``) reads the source's
change mark at most once a second, and only while a page is open; each
open page's event stream waits on it, and on a change the page fetches its
fragment. The viewers' fetches of one view at one change share one read of
the source (``read``). So a store sees one cheap read a second, and one
read per view that is open when something changed, whatever the number of
viewers; a finished run shows within about a second.

Access control is not here: ``_security.Guard`` wraps this app.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import urllib.parse
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import anyio
import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from . import _chart, _words
from ._model import (
    ACTIONS,
    BadRequest,
    ConsoleError,
    ConsoleSource,
    Job,
    JobDetail,
    NotFound,
)
from ._security import Access, Guard

logger = logging.getLogger("procsched")

#: The longest wait between two reads of the change mark while a page is open.
MARK_INTERVAL = 1.0
#: Rows the jobs page shows at most (the API answers them all).
PAGE_ROWS = 500
STATES = ("pending", "running", "paused", "done", "failed", "cancelled", "unloadable")
OUTCOME_CLASS = {"ok": "ok", "error": "bad", "crashed": "bad", "timeout": "bad", "cancelled": "warn", "skipped": "warn"}


class Live:
    """The one reader of the change mark, and the streams waiting on it."""

    def __init__(self, source: ConsoleSource, interval: float = MARK_INTERVAL) -> None:
        self.source = source
        self.interval = interval
        self.generation = 0
        self.reads = 0  # change-mark reads so far (the tests count them)
        self.watchers = 0
        self._changed = asyncio.Event()
        self._watched = asyncio.Event()
        self.shutdown = anyio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None

    def end_streams(self) -> None:
        """From any thread: end every open event stream (before a stop, so
        that the server need not wait for them)."""
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.shutdown.set)

    def join(self) -> None:
        self.watchers += 1
        self._watched.set()

    def leave(self) -> None:
        self.watchers -= 1
        if self.watchers <= 0:
            self._watched.clear()

    async def next_change(self, seen: int) -> int:
        while self.generation == seen:
            await self._changed.wait()
        return self.generation

    def _bump(self) -> None:
        self.generation += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def run(self) -> None:
        loop = self.loop = asyncio.get_running_loop()
        last: object = None
        failing = False
        while True:
            await self._watched.wait()
            started = loop.time()
            try:
                mark = await run_in_threadpool(self.source.change_mark)
            except Exception as exc:  # noqa: BLE001 - a store fault: say so once, try again in a second
                if not failing:
                    logger.warning(
                        "console: reading the change mark failed (retried every second): %s: %s",
                        type(exc).__name__,
                        exc,
                    )
                failing, mark = True, last
            else:
                if failing:
                    logger.warning("console: the change mark reads again")
                failing = False
            self.reads += 1
            if mark != last:
                last = mark
                self._bump()
            await asyncio.sleep(max(0.0, self.interval - (loop.time() - started)))


def make_app(source: ConsoleSource, access: Access) -> Guard:
    """The console as an ASGI app: the routes behind the security layer."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("procsched._web", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(when=when_text, relative=relative_text, duration=duration, iso=_iso)
    env.globals.update(outcome_class=OUTCOME_CLASS, states=STATES, read_only=access.read_only, title=source.title)
    live = Live(source)

    def page(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        session = request.scope.get("state", {}).get("session")
        html = env.get_template(name).render(
            csrf="" if session is None else session.csrf, path=request.url.path, **context
        )
        return HTMLResponse(html, status)

    async def call(fn: Any, *args: Any) -> Any:
        return await run_in_threadpool(fn, *args)

    # While pages are open, every viewer's read of one view at one change
    # generation shares one source read (its fetches come all at once, on
    # the same event): the store sees one read per view per change, however
    # many watch. With no page open the generation stands still: read afresh.
    shared: dict[tuple[Any, ...], tuple[int, asyncio.Future[Any]]] = {}

    async def read(fn: Any, *args: Any) -> Any:
        if not live.watchers:
            return await call(fn, *args)
        key, generation = (fn.__name__, *args), live.generation
        hit = shared.get(key)
        if hit is None or hit[0] != generation:
            if len(shared) > 1000:
                shared.clear()
            hit = shared[key] = (generation, asyncio.ensure_future(call(fn, *args)))
        return await asyncio.shield(hit[1])

    # -- pages and fragments ----------------------------------------------------------

    async def jobs_context(request: Request) -> dict[str, Any]:
        jobs = await read(source.jobs)
        q = request.query_params.get("q", "").strip()
        state = request.query_params.get("state", "")
        shown = filter_jobs(jobs, q, state)
        query = urllib.parse.urlencode({k: v for k, v in (("q", q), ("state", state)) if v})
        return {
            "jobs": shown[:PAGE_ROWS],
            "matching": len(shown),
            "total": len(jobs),
            "q": q,
            "state": state,
            "query": query,
            "now": datetime.now(UTC),
        }

    async def jobs_page(request: Request) -> Response:
        return page(request, "jobs.html", **await jobs_context(request))

    async def jobs_fragment(request: Request) -> Response:
        return page(request, "_jobs_table.html", **await jobs_context(request))

    async def job_context(ref: str, message: str = "", error: str = "", fresh: bool = False) -> dict[str, Any]:
        detail: JobDetail = await (call(source.job, ref) if fresh else read(source.job, ref))
        return {
            "d": detail,
            "j": detail.job,
            "chart": _chart.chart(detail.runs),
            "message": message,
            "error": error,
            "now": datetime.now(UTC),
            "ref": ref,
        }

    async def job_page(request: Request) -> Response:
        ref = request.path_params["ref"]
        try:
            return page(request, "job.html", **await job_context(ref))
        except NotFound as exc:
            return page(request, "missing.html", 404, message=exc.message)

    async def job_fragment(request: Request) -> Response:
        try:
            return page(request, "_job_body.html", **await job_context(request.path_params["ref"]))
        except NotFound as exc:
            return page(request, "missing.html", 404, message=exc.message)

    async def runs_fragment(request: Request) -> Response:
        # The same read as the job's fragment: fetched on the same change, they share it.
        try:
            return page(request, "_job_runs.html", **await job_context(request.path_params["ref"]))
        except NotFound as exc:
            return page(request, "missing.html", 404, message=exc.message)

    async def request_fragment(request: Request) -> Response:
        try:
            found = await call(source.request, request.path_params["ident"])
        except ConsoleError as exc:  # (a 200: the block that follows it shows why, and stops following)
            return page(request, "_request.html", error=exc.message)
        return page(request, "_request.html", r=found, error="")

    async def instances_page(request: Request) -> Response:
        return page(request, "instances.html", instances=await read(source.instances), now=datetime.now(UTC))

    async def instances_fragment(request: Request) -> Response:
        return page(request, "_instances.html", instances=await read(source.instances), now=datetime.now(UTC))

    async def workers_page(request: Request) -> Response:
        return page(request, "workers.html", instances=await read(source.instances))

    async def workers_fragment(request: Request) -> Response:
        return page(request, "_workers.html", instances=await read(source.instances))

    async def page_action(request: Request) -> Response:
        """An action from the job page. Pause, resume, cancel: the job's
        fragment, with what happened. Run now, backfill: the request's
        fragment (what was asked, then the answer), or why not."""
        ref, action = request.path_params["ref"], request.path_params["action"]
        form = urllib.parse.parse_qs((await request.body()).decode("utf-8", "replace"))
        if action in ("run-now", "backfill"):
            try:
                if action == "run-now":
                    asked = await call(source.run_now, ref)
                else:
                    start, end = _when(form.get("start", [""])[0], "start"), _when(form.get("end", [""])[0], "end")
                    dry_run = form.get("dry_run", ["1"])[0] not in ("0", "false", "")
                    asked = await call(source.backfill, ref, start, end, dry_run)
            except ConsoleError as exc:
                return page(request, "_request.html", error=exc.message)
            return page(request, "_request.html", r=asked, error="")
        message = error = ""
        try:
            await act(ref, action)
            message = {"pause": "paused", "resume": "resumed", "cancel": "cancelled"}[action]
        except NotFound as exc:
            return page(request, "missing.html", 404, message=exc.message)
        except ConsoleError as exc:
            error = exc.message
        context = await job_context(ref, message, error, fresh=True)  # after an action: as it is now
        return page(request, "_job_body.html", **context)

    async def act(ref: str, action: str) -> bool:
        if action == "pause":
            return bool(await call(source.pause, ref))
        if action == "resume":
            return bool(await call(source.resume, ref))
        if action == "cancel":
            return bool(await call(source.cancel, ref))
        raise NotFound(f"no action {action!r}; the actions are: {', '.join(ACTIONS)}")

    # -- live -----------------------------------------------------------------------------

    async def events(request: Request) -> Response:
        from sse_starlette.sse import EventSourceResponse

        async def stream() -> Any:
            live.join()
            try:
                seen = live.generation
                yield {"event": "hello", "data": str(seen)}
                while True:
                    seen = await live.next_change(seen)
                    yield {"event": "change", "data": str(seen)}
            finally:
                live.leave()

        return EventSourceResponse(stream(), ping=15, shutdown_event=live.shutdown)

    # -- the JSON API -------------------------------------------------------------------

    # Each job's JSON, made once while it stays equal (a listing of 10,000 jobs
    # changes a few of them at a time): the answer joins them.
    made_json: dict[Job, str] = {}

    async def api_jobs(request: Request) -> Response:
        jobs = await read(source.jobs)
        q, state = request.query_params.get("q", ""), request.query_params.get("state", "")
        parts = []
        for j in filter_jobs(jobs, q, state):
            text = made_json.get(j)
            if text is None:
                text = made_json[j] = json.dumps(j.api(), ensure_ascii=False)
            parts.append(text)
        if len(made_json) > 2 * len(jobs) + 1000:
            made_json.clear()
        return Response(f"[{','.join(parts)}]", media_type="application/json")

    async def api_job(request: Request) -> Response:
        try:
            limit = int(request.query_params.get("limit", "50"))
            if not 1 <= limit <= 1000:
                raise ValueError
        except ValueError:
            return _json(
                {"error": f"limit must be a whole number from 1 to 1000, not {request.query_params.get('limit')!r}"},
                400,
            )
        try:
            detail = await read(source.job, request.path_params["ref"], limit)
        except ConsoleError as exc:
            return _json({"error": exc.message}, exc.status)
        return _json(detail.api())

    async def api_action(request: Request) -> Response:
        """pause / resume / cancel: ``{"key", "action", "ok"}``. run-now and
        backfill: ``{"key", "action", "ok", "request"}`` (backfill also
        ``"dry_run"``, ``"slots"`` and ``"count"``), 200 when carried out
        at once, 202 when asked of the instance that runs the job (follow
        it at ``/api/requests/{id}``; ``slots`` is null until it answers)."""
        ref, action = request.path_params["ref"], request.path_params["action"]
        try:
            if action == "backfill":
                body = await _json_body(request)
                start, end = _when(body.get("start"), "start"), _when(body.get("end"), "end")
                dry_run = body.get("dry_run", False)
                if not isinstance(dry_run, bool):
                    raise BadRequest(f"dry_run must be true or false, not {dry_run!r}")
                asked = await call(source.backfill, ref, start, end, dry_run)
                shown = asked.api()
                return _json(
                    {
                        "key": ref,
                        "action": action,
                        "ok": True,
                        "dry_run": dry_run,
                        "slots": shown["slots"],
                        "count": shown["count"],
                        "request": shown,
                    },
                    202 if asked.pending else 200,
                )
            if action == "run-now":
                asked = await call(source.run_now, ref)
                return _json(
                    {"key": ref, "action": action, "ok": True, "request": asked.api()}, 202 if asked.pending else 200
                )
            done = await act(ref, action)
        except ConsoleError as exc:
            return _json({"error": exc.message}, exc.status)
        return _json({"key": ref, "action": action, "ok": done})

    async def api_request(request: Request) -> Response:
        try:
            found = await call(source.request, request.path_params["ident"])
        except ConsoleError as exc:
            return _json({"error": exc.message}, exc.status)
        return _json(found.api())

    async def api_instances(request: Request) -> Response:
        return _json([i.api() for i in await read(source.instances)])

    async def api_workers(request: Request) -> Response:
        instances = await read(source.instances)
        return _json([w.api() for i in instances for w in (i.workers or [])])

    async def metrics(request: Request) -> Response:
        body = await call(source.metrics)
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    async def index_redirect(request: Request) -> Response:
        return RedirectResponse("/", 303)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        task = asyncio.get_running_loop().create_task(live.run())
        app.state.started.set()
        try:
            yield
        finally:
            live.shutdown.set()
            task.cancel()

    static = StaticFiles(directory=str(resources.files("procsched._web") / "static"))
    routes = [
        Route("/", jobs_page),
        Route("/jobs", index_redirect),
        Route("/fragments/jobs", jobs_fragment),
        Route("/fragments/instances", instances_fragment),
        Route("/fragments/workers", workers_fragment),
        Route("/fragments/jobs/{ref:path}", job_fragment),
        Route("/fragments/runs/{ref:path}", runs_fragment),
        Route("/fragments/requests/{ident:int}", request_fragment),
        Route("/jobs/{ref:path}/{action}", page_action, methods=["POST"]),
        Route("/jobs/{ref:path}", job_page),
        Route("/instances", instances_page),
        Route("/workers", workers_page),
        Route("/events", events),
        Route("/api/jobs", api_jobs),
        Route("/api/jobs/{ref:path}/{action}", api_action, methods=["POST"]),
        Route("/api/jobs/{ref:path}", api_job),
        Route("/api/instances", api_instances),
        Route("/api/workers", api_workers),
        Route("/api/requests/{ident:int}", api_request),
        Route("/metrics", metrics),
        Mount("/static", static, name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.live = live
    app.state.started = threading.Event()  # set once it serves (Console.start waits on it)
    return Guard(app, access)


def filter_jobs(jobs: list[Job], q: str, state: str) -> list[Job]:
    q = q.strip().lower()
    return [
        j
        for j in jobs
        if (not state or j.state == state)
        and (not q or q in j.name.lower() or q in (j.key or "").lower() or q in j.schedule.lower())
    ]


def _json(value: Any, status: int = 200) -> Response:
    return Response(json.dumps(value, ensure_ascii=False), status, media_type="application/json")


async def _json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        raise BadRequest("the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def _when(value: object, name: str) -> datetime:
    """An ISO 8601 time with its offset (or Z) -> an aware datetime; BadRequest naming ``name``."""
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"{name} must be an ISO 8601 time with a zone, like 2026-03-08T07:00:00Z; got {value!r}")
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise BadRequest(f"{name} is not an ISO 8601 time: {value!r}") from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise BadRequest(f"{name} must carry its zone (Z or +01:00): {value!r} is naive")
    return when


# -- how pages show times ---------------------------------------------------------


def when_text(when: datetime | None) -> str:
    """Local time with its zone: ``2026-12-04 16:03:05 CET`` (``16:03:05.250`` for sub-second slots)."""
    if when is None:
        return "-"
    local = when.astimezone()
    ms = f".{local.microsecond // 1000:03d}" if local.microsecond // 1000 else ""
    return local.strftime("%Y-%m-%d %H:%M:%S") + ms + " " + (local.tzname() or "")


def relative_text(when: datetime | None, now: datetime) -> str:
    """``in 3.2 s``, ``5 min ago``, ``in 10.5 h``."""
    if when is None:
        return ""
    seconds = (when - now).total_seconds()
    left = abs(seconds)
    if left < 60:
        text = _words.duration_text(left) if left >= 0.001 else "0 s"
    elif left < 3600:
        text = f"{left / 60:.0f} min"
    elif left < 86400:
        text = f"{left / 3600:.1f} h"
    else:
        text = f"{left / 86400:.1f} d"
    return f"in {text}" if seconds >= 0 else f"{text} ago"


def duration(seconds: float | None) -> str:
    return (
        "-"
        if seconds is None
        else _words.duration_text(max(0.0, seconds))
        if seconds >= 0
        else "-" + _words.duration_text(-seconds)
    )


def _iso(when: datetime | None) -> str:
    return "" if when is None else when.astimezone(UTC).isoformat(timespec="seconds")
