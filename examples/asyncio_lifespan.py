"""A scheduler inside an asyncio web app: started and stopped by the app's
lifespan, its runs awaited from request handlers.

Starlette and FastAPI take a *lifespan*, an async context manager that runs
before the first request and after the last one. Open the Scheduler there,
keep it on the app, and await a run with ``asyncio.wrap_future`` (a
TaskHandle is a ``concurrent.futures.Future``): the CPU-heavy work runs in a
worker process while the event loop goes on serving::

    from contextlib import asynccontextmanager
    from fastapi import FastAPI

    @asynccontextmanager
    async def lifespan(app):
        async with scheduler_lifespan() as scheduler:   # below
            app.state.scheduler = scheduler
            yield

    app = FastAPI(lifespan=lifespan)

    @app.get("/square/{n}")
    async def square_route(n: int):
        return {"square": await asyncio.wrap_future(app.state.scheduler.submit(square, n))}

This example needs neither framework (procsched depends on none): it serves
the same routes with asyncio's own streams, plain HTTP/1.0, and plays the
client too. It shows: a run awaited from a handler, in a worker process; the
event loop answering other requests meanwhile; a raising run becoming a 500;
a client that gives up cancelling its run; a periodic job kept by the
lifespan; and a shutdown that does not block the event loop.

    python examples/asyncio_lifespan.py
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from collections.abc import AsyncIterator

import procsched

FAST = bool(os.environ.get("PROCSCHED_EXAMPLE_FAST"))
HEARTBEAT = 0.1 if FAST else 0.5


def square(n: int) -> tuple[int, int]:
    """CPU work (a worker process does it): n squared, the hard way, and its pid."""
    digest = b""
    for _ in range(20_000):
        digest = hashlib.sha256(digest).digest()
    return n * n, os.getpid()


def slow_report(seconds: float) -> str:
    time.sleep(seconds)
    return "report done"


def broken() -> None:
    raise ValueError("the report template is missing")


def heartbeat() -> float:
    return time.time()


@contextlib.asynccontextmanager
async def scheduler_lifespan() -> AsyncIterator[procsched.Scheduler]:
    """The lifespan's part: a Scheduler for the app's whole life. Scheduler()
    returns at once (the pool starts in the background); shutdown(wait=True)
    waits for running runs, so it runs in a thread, not on the event loop."""
    scheduler = procsched.Scheduler(workers=2)
    beat = scheduler.schedule_at_fixed_rate(heartbeat, HEARTBEAT, name="heartbeat")
    print(f"lifespan: scheduler up on 2 worker processes; heartbeat every {HEARTBEAT:g} s")
    try:
        yield scheduler
    finally:
        await asyncio.to_thread(scheduler.shutdown, wait=True, cancel_futures=True)
        print(f"lifespan: shut down; the heartbeat ran {len(beat.runs)} times, {beat.state.name}")


async def handle(scheduler: procsched.Scheduler, path: str) -> tuple[int, str]:
    """The routes: what a Starlette or FastAPI handler would do."""
    if path.startswith("/square/"):
        value, pid = await asyncio.wrap_future(scheduler.submit(square, int(path.rsplit("/", 1)[1])))
        return 200, f"{value} (worker pid {pid}; the event loop's pid is {os.getpid()})"
    if path == "/slow":
        return 200, await asyncio.wrap_future(scheduler.submit(slow_report, 1.0))
    if path == "/boom":
        try:
            await asyncio.wrap_future(scheduler.submit(broken))
        except ValueError as exc:  # the run's own exception type, raised here
            return 500, f"{type(exc).__name__}: {exc}"
    if path == "/ping":
        return 200, "pong"
    return 404, "not found"


async def serve(scheduler: procsched.Scheduler) -> asyncio.Server:
    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = (await reader.readline()).decode()
        while (await reader.readline()).strip():
            pass  # the headers
        status, body = await handle(scheduler, request.split()[1])
        writer.write(f"HTTP/1.0 {status} X\r\nContent-Length: {len(body.encode())}\r\n\r\n{body}".encode())
        await writer.drain()
        writer.close()

    return await asyncio.start_server(on_client, "127.0.0.1", 0)


async def get(port: int, path: str) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.0\r\n\r\n".encode())
    answer = (await reader.read()).decode()
    writer.close()
    head, _, body = answer.partition("\r\n\r\n")
    return f"{head.split()[1]} {body}"


async def main() -> None:
    async with scheduler_lifespan() as scheduler:
        server = await serve(scheduler)
        port = server.sockets[0].getsockname()[1]
        print("GET /square/12 ->", await get(port, "/square/12"))

        slow = asyncio.create_task(get(port, "/slow"))  # a second of work in a worker...
        await asyncio.sleep(0.2)  # (let it get going)
        started = time.perf_counter()
        ping = await get(port, "/ping")  # ...while the event loop keeps answering
        print(f"GET /ping       -> {ping} in {(time.perf_counter() - started) * 1e3:.0f} ms, while /slow runs")
        print("GET /slow       ->", await slow)
        print("GET /boom       ->", await get(port, "/boom"))

        # A caller that gives up: cancelling the awaiting coroutine cancels the run's task.
        handle = scheduler.schedule(slow_report, 5.0, args=(1.0,))
        waiter = asyncio.ensure_future(asyncio.wrap_future(handle))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(waiter), 0.2)
        waiter.cancel()  # -> handle.cancel(): the dispatcher cancels the task and answers
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
        await asyncio.wait([asyncio.wrap_future(handle)], timeout=5)  # until the handle has the answer
        print(f"a waiter gave up: its task is {handle.state.name}")
        server.close()
        await server.wait_closed()


if __name__ == "__main__":
    asyncio.run(main())
