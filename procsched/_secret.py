"""Where a store's secret comes from (issue 24): ``Scheduler(secret=...)``,
the ``PROCSCHED_SECRET`` variable, or a file (``--secret-file``).

    Scheduler(secret=...)      bytes | str | [new, old, ...]      explicit: wins
    PROCSCHED_SECRET=new,old   comma-separated, first signs        when secret= is not given
    --secret-file PATH         one secret a line, first signs     procsched run / procsched web

Whatever the source, the result is ``keys``: a list of bytes, the first
signing, every one accepted (``_store._trust.Keyring`` signs and checks with
them), or None for no secret. A source that is there but says nothing (an
empty variable, an empty file, an empty item) is an error, never "no
secret": a store without a secret trusts every row as code, so a secret
that went missing on the way must not silently turn checking off.

The secret reaches the dispatcher in its configuration frame (the command
pipe), never on a command line; the variable is taken out of the
dispatcher's environment, so workers do not inherit it (see README, "Security").
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence

#: The environment variable that gives a secret when ``secret=`` is not given.
ENV = "PROCSCHED_SECRET"

Secret = bytes | str | Sequence[bytes | str] | None


def keys(secret: Secret, what: str = "secret") -> list[bytes] | None:
    """``secret`` as a list of bytes (first signs), None for None.

    Raises:
        TypeError: not bytes, str, or a list or tuple of those.
        ValueError: an empty secret, or an empty list.
    """
    if secret is None:
        return None
    items = [secret] if isinstance(secret, (bytes, str)) else secret
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"{what} must be bytes, str, or a list of those (the first signs), not {type(secret).__name__}")
    if not items:
        raise ValueError(f"{what} must name at least one secret, got an empty {type(secret).__name__}")
    out = []
    for item in items:
        if isinstance(item, str):
            item = item.encode()
        if not isinstance(item, bytes):
            raise TypeError(f"{what}: each secret must be bytes or str, not {type(item).__name__}")
        if not item:
            raise ValueError(f"{what}: a secret must not be empty")
        out.append(item)
    return out


def from_env(environ: Mapping[str, str] = os.environ) -> list[bytes] | None:
    """The secrets ``PROCSCHED_SECRET`` gives (comma-separated; surrounding
    spaces ignored), or None if it is not set.

    Raises:
        ValueError: it is set but empty, or one of its items is.
    """
    text = environ.get(ENV)
    if text is None:
        return None
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise ValueError(
            f"{ENV} is set but {'empty' if not text.strip() else 'has an empty item'}: give one secret, or several "
            "separated by commas (the first signs); unset it to run without a secret"
        )
    return keys(items, ENV)


def resolve(secret: Secret) -> list[bytes] | None:
    """``secret`` if given, else ``PROCSCHED_SECRET`` (None: neither)."""
    return keys(secret) if secret is not None else from_env()


def read_file(path: str) -> tuple[list[bytes], str | None]:
    """The secrets in the file ``path``: one a line (the first signs; blank
    lines and surrounding spaces ignored), and a warning if the file can be
    read by others than its owner (None if not).

    Raises:
        OSError: it cannot be read.
        ValueError: it holds no secret.
    """
    with open(path, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        lines = [line.strip() for line in f.read().splitlines()]
    found = [line for line in lines if line]
    if not found:
        raise ValueError(f"{path} holds no secret (one a line; the first signs)")
    warning = None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        warning = f"{path} can be read by others than its owner (mode {stat.S_IMODE(mode):04o}): chmod 600 it"
    return found, warning


def of_command(path: str | None) -> tuple[list[bytes] | None, str | None]:
    """A command's secret (``procsched run`` / ``web``): the file ``path``
    (``--secret-file``) if given, else ``PROCSCHED_SECRET``; with the
    file's warning, if any.

    Raises:
        OSError: the file cannot be read.
        ValueError: the file or the variable gives no secret.
    """
    if path is None:
        return from_env(), None
    return read_file(path)
