"""Signed definitions: a store whose rows cannot run someone else's code (issue 24).

A keyed task's definition holds what a worker will import and unpickle: the
function reference and the pickled arguments (and, in its options, the
exception classes a retry names). Whoever can write one row of the store
can therefore make every worker of every instance run code. With a secret,
the store signs each definition when it writes it (``Batch.upsert``: never
on the hot path - runs do not touch definitions) and checks the signature
each time it reads one:

    signature = HMAC-SHA256(secret, "procsched-definition-v1" | key | fn_ref | args | schedule | options)

each part length-prefixed, ``schedule`` and ``options`` as the JSON text
stored. The key is inside, so a valid payload cannot be moved to another
key either. A row that fails (no signature, or one that no secret accepts)
is returned as *untrusted*: its arguments are withheld (empty), its
``untrusted`` and ``unloadable`` say why (``"signature does not match"``),
and the runtime must not load it. Rotation: a list of secrets, signing
with the first and accepting any (``secret=[new, old]``).

Without a secret the store works as before, and says once per process, at
the first open, that its rows are trusted as code.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Sequence

from ._model import BAD_SIGNATURE, UNSIGNED

logger = logging.getLogger("procsched")

#: What ``secret=`` accepts: one secret, or several (sign with the first, accept any).
Secret = bytes | str | Sequence[bytes | str] | None

_DOMAIN = b"procsched-definition-v1"
_told = False


def _as_bytes(value: bytes | str) -> bytes:
    if isinstance(value, str):
        value = value.encode()
    if not isinstance(value, bytes) or not value:
        raise ValueError(f"a store secret must be non-empty bytes or str, got {value!r:.40}")
    return value


class Keyring:
    """The secrets of one store object (``secret=``)."""

    __slots__ = ("_keys",)

    def __init__(self, secret: Secret) -> None:
        if isinstance(secret, (bytes, str)):
            keys = [_as_bytes(secret)]
        elif secret is None:
            keys = []
        elif isinstance(secret, (list, tuple)) and secret:
            keys = [_as_bytes(s) for s in secret]
        else:
            raise TypeError(f"secret must be bytes, str, a non-empty list of those, or None; got {secret!r:.40}")
        self._keys: list[bytes] = keys

    def __bool__(self) -> bool:
        return bool(self._keys)

    @property
    def rotating(self) -> bool:
        """Several secrets: rows signed with a later one are signed again (``SQLStore.resign``)."""
        return len(self._keys) > 1

    def __repr__(self) -> str:
        return f"<Keyring of {len(self._keys)} secret(s)>"  # never the secrets

    @staticmethod
    def _message(key: str, fn_ref: str, args: bytes, schedule: str, options: str) -> bytes:
        parts = [_DOMAIN, key.encode(), fn_ref.encode(), bytes(args), schedule.encode(), options.encode()]
        return b"".join(len(p).to_bytes(8, "big") + p for p in parts)

    def sign(self, key: str, fn_ref: str, args: bytes, schedule: str, options: str) -> bytes | None:
        """The signature to store with a definition (None without a secret)."""
        if not self._keys:
            return None
        return hmac.digest(self._keys[0], self._message(key, fn_ref, args, schedule, options), hashlib.sha256)

    def check(
        self, signature: bytes | None, key: str, fn_ref: str, args: bytes, schedule: str, options: str
    ) -> str | None:
        """None if the row may be loaded, else why not. Without a secret every row may."""
        if not self._keys:
            return None
        if signature is None:
            return UNSIGNED
        message = self._message(key, fn_ref, args, schedule, options)
        signature = bytes(signature)
        for k in self._keys:
            if hmac.compare_digest(hmac.digest(k, message, hashlib.sha256), signature):
                return None
        return BAD_SIGNATURE

    def stale(
        self, signature: bytes | None, key: str, fn_ref: str, args: bytes, schedule: str, options: str
    ) -> bytes | None:
        """Rotation: the first secret's signature for a row that only a later
        secret verifies (sign it again with this); None for any other row
        (signed with the first already, or untrusted: left as it is)."""
        if len(self._keys) < 2 or signature is None:
            return None
        message = self._message(key, fn_ref, args, schedule, options)
        signature = bytes(signature)
        ours = [hmac.digest(k, message, hashlib.sha256) for k in self._keys]
        if hmac.compare_digest(ours[0], signature) or not any(hmac.compare_digest(s, signature) for s in ours[1:]):
            return None
        return ours[0]

    def told(self, describe: str) -> None:
        """At an open: without a secret, say once per process that rows are trusted as code."""
        global _told
        if self._keys or _told:
            return
        _told = True
        logger.info(
            "%s has no secret: its rows are trusted as code (whoever can write the store can make its "
            "workers run code; Scheduler(secret=...) signs them)",
            describe,
        )
