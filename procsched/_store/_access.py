"""What the store's statement modules use of a store: its dialect and its
transactions. ``SQLStore`` (``_sql.py``) is the one implementation; the
modules that hold its statements (``_writes``, ``_views``, ``_control``,
``_schema``'s ``check_schema``) take it as this protocol, so they import
nothing of ``_sql``, which imports them.

    SQLStore method ──▶ _writes / _views / _control function(store, ...)
                            └─▶ store._tx(...) as cur ──▶ store._x(cur, sql, params)
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ._model import Holder
from ._trust import Keyring

#: PostgreSQL: the transaction-local setting in which ``_now`` and
#: ``_renewed`` keep the store clock they read, for statements sent before
#: their answer (``_writes._pair_sent``).
NOW_SETTING = "procsched.now"


class StoreAccess(Protocol):
    """A store's members its statement modules call (see ``SQLStore``)."""

    #: How messages name the store (its path or redacted URL).
    describe: str
    #: Runs (and skipped slots) kept per task.
    keep_runs: int
    #: The secrets that sign and check definitions.
    _keyring: Keyring
    #: Skipped slots this store object wrote per task since it last trimmed
    #: the task's (``_writes._skip_group``: trimmed every ``keep_runs // 2``).
    _untrimmed: dict[str, int]

    @property
    def _pg(self) -> bool:
        """PostgreSQL (else SQLite)."""
        ...

    @property
    def _for_update(self) -> str:
        """`` FOR UPDATE`` where row locks are taken (PostgreSQL), else empty."""
        ...

    def _tx(self, what: str, write: bool = True, pipelined: bool = False) -> AbstractContextManager[Any]:
        """One transaction (a cursor); any database error -> StoreError.
        ``pipelined``: its statements up to the first ``_now`` or
        ``_renewed`` go with the BEGIN in one round trip (PostgreSQL): they
        must need no result before it."""
        ...

    def _x(self, cur: Any, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> Any:
        """Execute ``sql`` (``?`` placeholders) on ``cur``; the cursor."""
        ...

    def _together(self) -> AbstractContextManager[None]:
        """Statements executed inside go to the server together, their
        results read after it (PostgreSQL's pipeline mode: one round trip;
        an error raises at the end). SQLite: each runs as it comes."""
        ...

    def _q(self, sql: str) -> str:
        """``sql`` in the dialect's placeholders."""
        ...

    def _now(self, cur: Any) -> int:
        """The store clock (UTC ns)."""
        ...

    def _renewed(self, cur: Any, holder: Holder, status: str | None) -> int | None:
        """Renew ``holder``'s lease in this transaction (and publish its
        ``status``, if given); the store clock it was renewed at (UTC ns), or
        None if the holder's token is no longer the store's (fenced out)."""
        ...

    def _renewal_sent(self, cur: Any, holder: Holder, status: str | None) -> Callable[[], int | None]:
        """``_renewed``, its answer read by the callable returned: in a
        pipelined transaction (PostgreSQL) what is sent meanwhile goes in the
        same round trip (reading the clock through ``NOW_SETTING``)."""
        ...

    def _bump(self, cur: Any, holder: Holder | None) -> None:
        """Count one more write for the change mark."""
        ...

    def _has_schema(self, cur: Any) -> bool:
        """Whether procsched's tables exist."""
        ...

    def _errors(self) -> tuple[type[BaseException], ...]:
        """The driver's exception classes."""
        ...

    def _row_fault(self, exc: BaseException) -> bool:
        """Is ``exc`` a refusal of one op's own data, rather than a fault of the store?"""
        ...
