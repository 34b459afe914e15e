"""``open_store``: a store from what the user wrote after ``store=``."""

from __future__ import annotations

import os
from typing import Any

from ._sql import SQLStore


def open_store(target: str | os.PathLike[str], **options: Any) -> SQLStore:
    """Open (creating if needed) the store ``target`` names.

    ``target``: a file path or ``"sqlite:///path"`` (``sqlite:////abs/path``
    for an absolute one, as SQLAlchemy writes it; ``sqlite:///rel`` is
    relative to the current directory) -> SQLiteStore;
    ``"postgresql://..."`` or ``"postgres://..."`` -> PostgresStore.
    A SQLite URL may end in ``?synchronous=FULL``: each commit is fsynced,
    so a power cut or an OS crash loses nothing either (the default,
    ``NORMAL``, survives any process crash, SIGKILL included; see
    ``_sqlite``) and carry ``busy_timeout=SECONDS`` (how long a write waits
    for another writer's lock, default 10). Any store URL may carry ``keep_runs=N`` (``?keep_runs=500``,
    ``&`` between options): the history kept per task (the last N runs,
    default 100). ``options`` go to the store's constructor.

    Raises:
        TypeError, ValueError: ``target`` is not a path or a known URL.
        StoreError: the store cannot be opened (see the stores).
    """
    if not isinstance(target, (str, os.PathLike)):
        raise TypeError(f"store must be a path or a URL string, got {type(target).__name__}")
    text = os.fspath(target)
    if not isinstance(text, str) or not text:
        raise ValueError(f"store must be a non-empty path or URL, got {target!r}")
    if "://" in text and "?" in text:
        text = _url_options(text, options)
    if text.startswith(("postgresql://", "postgres://")):
        from ._postgres import PostgresStore

        return PostgresStore(text, **options)
    from ._sqlite import SQLiteStore

    if text.startswith("sqlite://"):
        path = text[len("sqlite://"):]
        if not path.startswith("/") or path == "/":
            raise ValueError(f"a SQLite URL is sqlite:///path, got {text!r}")
        return SQLiteStore(path[1:], **options)  # "/rel" -> "rel", "//abs" -> "/abs"
    if "://" in text:
        raise ValueError(f"store URL scheme not supported: {text!r} (use a path, sqlite:///path or postgresql://...)")
    return SQLiteStore(text, **options)


def _url_options(url: str, options: dict[str, Any]) -> str:
    """Take procsched's own options out of a store URL's query (``keep_runs``;
    for SQLite also ``synchronous``) into ``options``; the URL without them.
    A PostgreSQL URL keeps its other parameters (they are libpq's)."""
    base, _, query = url.partition("?")
    sqlite = base.startswith("sqlite://")
    rest = []
    for item in filter(None, query.split("&")):
        name, _, value = item.partition("=")
        if name == "keep_runs":
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"keep_runs must be an int >= 1, got {value!r} in {url!r}")
            options.setdefault("keep_runs", int(value))
        elif sqlite and name == "synchronous" and value.upper() in ("FULL", "NORMAL"):
            options.setdefault("synchronous", value.upper())
        elif sqlite and name == "busy_timeout" and _seconds(value) is not None:
            options.setdefault("busy_timeout", _seconds(value))
        elif sqlite:
            raise ValueError(f"a SQLite URL takes ?synchronous=FULL|NORMAL, busy_timeout=SECONDS and keep_runs=N "
                             f"only, got {item!r} in {url!r}")  # fmt: skip
        else:
            rest.append(item)
    return base + ("?" + "&".join(rest) if rest else "")


def _seconds(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value >= 0 else None
