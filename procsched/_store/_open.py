"""``open_store``: a store from what the user wrote after ``store=``.

    target ──▶ a path, sqlite:///path[?options]      ──▶ SQLiteStore(path, **options)
               postgresql://...[?options&libpq's]    ──▶ PostgresStore(url without ours, **options)
               anything else, a malformed option     ──▶ StoreURLError (one line, the URL redacted)

The URL's own options and its redaction: ``_url.py``.
"""

from __future__ import annotations

import os
from typing import Any

from ._sql import SQLStore
from ._url import StoreURLError, redact, url_options


def open_store(
    target: str | os.PathLike[str], *, read_only: bool = False, secret: Any = None, **options: Any
) -> SQLStore:
    """Open the store ``target`` names (creating it if needed, unless ``read_only``).

    ``target``: a file path or ``"sqlite:///path"`` (``sqlite:////abs/path``
    for an absolute one, as SQLAlchemy writes it; ``sqlite:///rel`` is
    relative to the current directory) -> SQLiteStore;
    ``"postgresql://..."`` or ``"postgres://..."`` -> PostgresStore.
    Options in the URL's query (``?a=1&b=2``), for any store:
    ``keep_runs=N`` (the history kept per task: the last N runs, default
    100) and ``lease=SECONDS`` (how long this scheduler's claims outlive
    it: the store's ``lease_ns``; ``Scheduler(lease=)`` wins over it). For
    SQLite also ``synchronous=FULL`` (each commit is fsynced, so a power
    cut or an OS crash loses nothing either; the default, ``NORMAL``,
    survives any process crash, SIGKILL included; see ``_sqlite``) and
    ``busy_timeout=SECONDS`` (how long a write waits for another writer's
    lock, default 10). Numbers are ASCII digits.

    ``read_only``: open an existing store for reading and never create or
    change anything: a missing SQLite file is a StoreError, and a store
    on a read-only file system (a backup snapshot) can be read.
    ``secret``: the key(s) that sign stored payloads (issue 24), given to
    the store's constructor as ``secret=``: None, bytes, str, or a list of
    those (sign with the first, accept any). ``options`` go to the store's
    constructor as well (a URL's options do not override them).

    Raises:
        TypeError: ``target`` is not a path or a string.
        StoreURLError: (a StoreError and a ValueError) ``target`` is not a
            store procsched can open: an unknown scheme, a bad option.
        StoreError: the store cannot be opened (see the stores).
    """
    if not isinstance(target, (str, os.PathLike)):
        raise TypeError(f"store must be a path or a URL string, got {type(target).__name__}")
    text = os.fspath(target)
    if not isinstance(text, str) or not text:
        raise StoreURLError(f"store must be a non-empty path or URL, got {target!r}")
    if "://" in text:
        text = url_options(text, options)
    if text.startswith(("postgresql://", "postgres://")):
        from ._postgres import PostgresStore

        return PostgresStore(text, read_only=read_only, secret=secret, **options)
    from ._sqlite import SQLiteStore

    if text.startswith("sqlite://"):
        path = text[len("sqlite://") :]
        if not path.startswith("/") or path == "/":
            raise StoreURLError(f"a SQLite URL is sqlite:///path, got {redact(text)!r}")
        text = path[1:]  # "/rel" -> "rel", "//abs" -> "/abs"
    elif "://" in text:
        raise StoreURLError(
            f"store URL scheme not supported: {redact(text)!r} (use a path, sqlite:///path or postgresql://...)"
        )
    return SQLiteStore(text, read_only=read_only, secret=secret, **options)
