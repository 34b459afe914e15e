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
    A SQLite URL may end in ``?synchronous=NORMAL``: a commit is not
    fsynced (WAL survives any process crash, SIGKILL included; a power cut
    or an OS crash may lose the last turns) - about twice the runs per
    second of the default ``FULL`` on a small disk.
    ``options`` go to the store's constructor.

    Raises:
        TypeError, ValueError: ``target`` is not a path or a known URL.
        StoreError: the store cannot be opened (see the stores).
    """
    if not isinstance(target, (str, os.PathLike)):
        raise TypeError(f"store must be a path or a URL string, got {type(target).__name__}")
    text = os.fspath(target)
    if not isinstance(text, str) or not text:
        raise ValueError(f"store must be a non-empty path or URL, got {target!r}")
    if text.startswith(("postgresql://", "postgres://")):
        from ._postgres import PostgresStore

        return PostgresStore(text, **options)
    from ._sqlite import SQLiteStore

    if text.startswith("sqlite://") and "?" in text:  # sqlite:///path?synchronous=NORMAL
        text, _, query = text.partition("?")
        for item in filter(None, query.split("&")):
            name, _, value = item.partition("=")
            if name != "synchronous" or value.upper() not in ("FULL", "NORMAL"):
                raise ValueError(f"a SQLite URL takes ?synchronous=FULL|NORMAL only, got {item!r} in {target!r}")
            options.setdefault("synchronous", value.upper())
    if text.startswith("sqlite://"):
        path = text[len("sqlite://"):]
        if not path.startswith("/") or path == "/":
            raise ValueError(f"a SQLite URL is sqlite:///path, got {text!r}")
        return SQLiteStore(path[1:], **options)  # "/rel" -> "rel", "//abs" -> "/abs"
    if "://" in text:
        raise ValueError(f"store URL scheme not supported: {text!r} (use a path, sqlite:///path or postgresql://...)")
    return SQLiteStore(text, **options)
