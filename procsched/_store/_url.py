"""A store URL's own options and its secrets: what ``open_store`` and the
stores read from what the user wrote, and how a message shows it.

procsched's options are taken out of the URL's query here, checked (ASCII
digits only: ``keep_runs=²`` is refused by name) and handed to the store's
constructor; a PostgreSQL URL keeps its other parameters, which are
libpq's. The URL a message shows is always ``redact``-ed: a password given
as ``user:pw@`` or as ``?password=`` (or any ``*password=`` parameter)
never appears in an error, a log line or a repr.
"""

from __future__ import annotations

import math
import re
from typing import Any
from urllib.parse import unquote

from .._errors import StoreError

#: The largest ``keep_runs`` (a run count: anything larger keeps all anyway).
MAX_KEEP_RUNS = 1_000_000_000
#: Bounds of the options that are seconds: (least, most). A lease as
#: ``Scheduler(lease=)`` takes it; a day bounds every wait (``inf`` is no
#: wait the dispatcher could ever end).
SECONDS = {"busy_timeout": (0.0, 86_400.0), "lease": (0.1, 86_400.0), "connect_timeout": (0.0, 3_600.0)}
_DIGITS = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")


class StoreURLError(StoreError, ValueError):
    """A store target procsched cannot open as written: an unknown scheme, a
    malformed SQLite URL, an unknown or malformed option. Also a ValueError:
    the argument itself is wrong."""


def url_options(url: str, options: dict[str, Any]) -> str:
    """Take procsched's own options out of a store URL's query into
    ``options`` (checked; a keyword given to ``open_store`` wins); the URL
    without them. A PostgreSQL URL keeps its other parameters (libpq's)."""
    base, _, query = url.partition("?")
    sqlite = base.startswith("sqlite://")
    rest: list[str] = []
    seen: set[str] = set()
    for item in filter(None, query.split("&")):
        name, _, value = item.partition("=")
        if name not in ("keep_runs", "lease") and not (sqlite and name in ("synchronous", "busy_timeout")):
            if sqlite:
                raise StoreURLError(
                    f"a SQLite URL takes the options synchronous=FULL|NORMAL, busy_timeout=SECONDS, "
                    f"keep_runs=N and lease=SECONDS, not {_item(name, value)!r}: {redact(url)}"
                )
            rest.append(item)
            continue
        if name in seen:
            raise StoreURLError(f"{name} is given twice in the store URL {redact(url)}")
        seen.add(name)
        try:
            options.setdefault(name, _option(name, value))
        except ValueError as exc:
            raise StoreURLError(f"{exc}, in the store URL {redact(url)}") from None
    return base + ("?" + "&".join(rest) if rest else "")


def _option(name: str, text: str) -> Any:
    """One option of a store URL, from its text (ValueError naming it)."""
    if name == "synchronous":
        if text.upper() not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be FULL or NORMAL, not {text!r}")
        return text.upper()
    if name == "keep_runs":
        if not _DIGITS.fullmatch(text) or not 1 <= int(text[:12]) <= MAX_KEEP_RUNS:
            raise ValueError(f"keep_runs must be a whole number from 1 to {MAX_KEEP_RUNS} (ASCII digits), not {text!r}")
        return int(text)
    if not _DECIMAL.fullmatch(text):
        low, high = SECONDS[name]
        raise ValueError(f"{name} must be seconds from {low:g} to {high:g} (ASCII digits), not {text!r}")
    return seconds(name, float(text))


def seconds(name: str, value: object) -> float:
    """An option in seconds (``SECONDS[name]`` bounds it), as a float.

    Raises:
        TypeError: not a real number.
        ValueError: NaN, infinite or out of bounds; the message names ``name``.
    """
    low, high = SECONDS[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__} {value!r}")
    if not (math.isfinite(value) and low <= value <= high):
        raise ValueError(f"{name} must be seconds from {low:g} to {high:g}, not {value!r}")
    return float(value)


def lease_ns(lease: object) -> int | None:
    """A store's ``lease=`` (seconds, or None: not given) in ns."""
    return None if lease is None else round(seconds("lease", lease) * 1_000_000_000)


# -- secrets in URLs -------------------------------------------------------------

_PASSWORD_PARAM = re.compile(r"([?&][^=&#]*password=)([^&#]*)", re.IGNORECASE)


def redact(url: str) -> str:
    """``url`` with its passwords replaced by ``***``: the ``user:pw@`` of
    its authority and every ``...password=`` parameter of its query."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    head, at, host = authority.rpartition("@")
    if at and ":" in head:
        authority = f"{head.split(':', 1)[0]}:***@{host}"
    return _PASSWORD_PARAM.sub(r"\1***", f"{scheme}://{authority}{slash}{path}")


def scrub(text: str, url: str) -> str:
    """``text`` (a driver's message about ``url``) with ``url`` redacted
    and each of its passwords replaced by ``***``, however it was quoted."""
    text = text.replace(url, redact(url))
    for secret in _passwords(url):
        for form in {secret, unquote(secret)}:
            if form:
                text = text.replace(form, "***")
    return text


def _passwords(url: str) -> list[str]:
    _, sep, rest = url.partition("://")
    found = [m.group(2) for m in _PASSWORD_PARAM.finditer(url)]
    head, at, _host = rest.partition("/")[0].rpartition("@")
    if sep and at and ":" in head:
        found.append(head.split(":", 1)[1])
    return found


def _item(name: str, value: str) -> str:
    return f"{name}={'***' if 'password' in name.lower() else value}"
