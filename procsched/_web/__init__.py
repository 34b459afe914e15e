"""The web console: ``procsched web --store S`` and ``procsched run jobs.py --web PORT``.

    browser / curl ──HTTP──▶ uvicorn (one thread, one event loop)
                               └─▶ _security.Guard   token -> session cookie, CSRF, read-only, throttling
                                     └─▶ _app routes   pages (Jinja2), fragments (htmx), /api/, /metrics, /events
                                           └─▶ ConsoleSource (_model)   on a worker thread
                                                 ├─ ProgramSource (_program): the Scheduler in this process
                                                 └─ StoreSource (_store_source): a store, every instance on it

One read model (``_model``: named records), two views of it (HTML pages and
the JSON API), two sources behind one interface. The browser gets HTML or
JSON, never a pickle; nothing read from a store is unpickled. ``_server``
runs it (in the foreground for ``procsched web``, on a thread beside a
running program for ``run --web``). Needs the ``procsched[web]`` extra.
"""

from typing import TYPE_CHECKING, Any

from ._model import ConsoleSource as ConsoleSource

if TYPE_CHECKING:
    from ._security import Access as Access
    from ._server import Console as Console

__all__ = ["Access", "Console", "ConsoleSource"]


def __getattr__(name: str) -> Any:
    # Lazily: the command line reads _model's defaults without importing the web stack.
    if name == "Console":
        from ._server import Console

        return Console
    if name == "Access":
        from ._security import Access

        return Access
    raise AttributeError(name)
