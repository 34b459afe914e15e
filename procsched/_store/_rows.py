"""Rows of the task tables, by name: the one place that knows the columns of
a task's SELECT and their order.

    SQLStore reads ──▶ TASK_SELECT rows ──▶ TaskRow (named) ──▶ stored_tasks() ──▶ StoredTask
                                                            └─ signature fails ──▶ untrusted (never loadable)

``TASK_COLUMNS`` names each field of :class:`TaskRow` with its column;
``TASK_SELECT`` is built from it, so the SELECT and the record cannot drift.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import fields
from typing import Any, NamedTuple

from ._model import Holder, RunRecord, StoredTask, TaskDefinition, TaskState
from ._trust import Keyring

__all__ = [
    "SHAPE_SELECT",
    "TASK_SELECT",
    "TASK_SELECT_BARE",
    "TASK_SELECT_LIGHT",
    "TaskRow",
    "holder",
    "run",
    "shared_parts",
    "stored_task",
    "stored_tasks",
]


class TaskRow(NamedTuple):
    """One task as ``TASK_SELECT`` reads it: its definition row joined to its state row."""

    key: str
    fn_ref: str
    args: bytes | None  #: None when read without the arguments (TASK_SELECT_LIGHT)
    schedule: str  #: JSON text
    options: str  #: JSON text
    def_hash: str
    run_count: int
    next_due: int | None
    next_attempt: int
    paused: int
    last_outcome: str | None
    unloadable: str | None
    holder: str | None
    token: int | None
    updated: int
    in_flight: int
    max_concurrent: int
    group: str | None
    last_holder: str | None
    last_slot: int | None
    signature: bytes | None


#: Each field of TaskRow and the column it is read from (d: definitions, t: tasks).
TASK_COLUMNS: dict[str, str] = {
    "key": "d.key",
    "fn_ref": "d.fn_ref",
    "args": "d.args",
    "schedule": "d.schedule",
    "options": "d.options",
    "def_hash": "d.def_hash",
    "run_count": "t.run_count",
    "next_due": "t.next_due_ns",
    "next_attempt": "t.next_attempt",
    "paused": "t.paused",
    "last_outcome": "t.last_outcome",
    "unloadable": "t.unloadable",
    "holder": "t.holder",
    "token": "t.token",
    "updated": "t.updated_ns",
    "in_flight": "t.in_flight",
    "max_concurrent": "t.max_concurrent",
    "group": "t.grp",
    "last_holder": "t.last_holder",
    "last_slot": "t.last_slot_ns",
    "signature": "d.signature",
}
assert tuple(TASK_COLUMNS) == TaskRow._fields

_FROM = " FROM procsched_tasks t JOIN procsched_definitions d ON d.key = t.key"
TASK_SELECT = "SELECT " + ", ".join(TASK_COLUMNS.values()) + _FROM
#: The same without the arguments (a peer's re-read: see SQLStore.peers_view).
TASK_SELECT_LIGHT = "SELECT " + ", ".join("NULL" if f == "args" else c for f, c in TASK_COLUMNS.items()) + _FROM

#: What tasks of one definition share, and what it is known by: its digest
#: (``definition_hash`` of exactly these). A read of every task (a restart,
#: ``jobs``) reads each distinct one once (``SHAPE_SELECT``) and the tasks
#: without them (``TASK_SELECT_BARE``), and shares them among its tasks
#: (``shared_parts``; ``stored_tasks(..., shared=)``).
SHARED = ("fn_ref", "args", "schedule", "options")
SHAPE_SELECT = (
    "SELECT DISTINCT d.def_hash, " + ", ".join(TASK_COLUMNS[f] for f in SHARED) + " FROM procsched_definitions d"
)
TASK_SELECT_BARE = "SELECT " + ", ".join("NULL" if f in SHARED else c for f, c in TASK_COLUMNS.items()) + _FROM


def shared_parts(raws: Iterable[Any], parsed: dict[str, Any]) -> dict[str, tuple[Any, ...]] | None:
    """``SHAPE_SELECT``'s rows as def_hash -> (fn_ref, args, schedule dict,
    options dict), the JSON parsed once per text (``parsed``); None if a
    digest stands for two different definitions (a store written by hand:
    then each task is read whole)."""
    out: dict[str, tuple[Any, ...]] = {}
    for def_hash, fn_ref, args, schedule_text, options_text in raws:
        if def_hash in out:
            return None
        schedule, options = _json(schedule_text, parsed), _json(options_text, parsed)
        out[def_hash] = (fn_ref, args, schedule, options)
    return out


def _json(text: str, parsed: dict[str, Any]) -> Any:
    """``text`` decoded, once per distinct text of a read (``parsed``):
    equal texts give one shared value."""
    value = parsed.get(text)
    if value is None:
        value = parsed[text] = json.loads(text)
    return value


def holder(row: Any) -> Holder:
    return Holder(*row)


def run(row: Any) -> RunRecord:
    return RunRecord(*row)


def stored_task(raw: Any, keyring: Keyring, parsed: dict[str, Any] | None = None, check: bool = True) -> StoredTask:
    """A task from its row (TASK_SELECT): see ``stored_tasks``."""
    return stored_tasks((raw,), keyring, parsed, check)[0]


def _untrusted(row: TaskRow, why: str) -> StoredTask:
    """A task whose signature failed: listed, its arguments withheld, never loadable."""
    try:
        d = TaskDefinition(
            row.key,
            row.fn_ref,
            b"",
            json.loads(row.schedule),
            json.loads(row.options),
            row.def_hash,
            row.max_concurrent,
            row.group,
        )
    except (ValueError, TypeError):  # whatever was written there: it is never loaded
        d = TaskDefinition(row.key, row.fn_ref, b"", {"kind": "once"}, {}, row.def_hash)
    return _with_state(row, d, why, untrusted=why)


def _with_state(
    row: TaskRow, definition: TaskDefinition, unloadable: str | None, untrusted: str | None = None
) -> StoredTask:
    return StoredTask(
        definition,
        TaskState(row.run_count, row.next_due, row.next_attempt, row.paused == 1),
        row.last_outcome,
        unloadable,
        row.holder,
        row.token,
        row.updated,
        row.in_flight,
        row.last_holder,
        untrusted,
        row.last_slot,
    )


def _setters(cls: type, names: tuple[str, ...]) -> tuple[Any, ...]:
    """The slot setters of the frozen record ``cls``, in the order of
    ``names`` (its fields, all of them: checked here, so the two cannot drift)."""
    assert tuple(f.name for f in fields(cls)) == names, (cls, names)
    return tuple(getattr(cls, name).__set__ for name in names)


_DEFINITION = _setters(
    TaskDefinition, ("key", "fn_ref", "args", "schedule", "options", "def_hash", "max_concurrent", "group")
)
_STATE = _setters(TaskState, ("run_count", "next_due_ns", "next_attempt", "paused"))
_TASK = _setters(
    StoredTask,
    (
        "definition",
        "state",
        "last_outcome",
        "unloadable",
        "holder",
        "token",
        "updated_ns",
        "in_flight",
        "last_holder",
        "untrusted",
        "last_slot_ns",
    ),
)


def stored_tasks(
    raws: Iterable[Any],
    keyring: Keyring,
    parsed: dict[str, Any] | None = None,
    check: bool = True,
    shared: dict[str, tuple[Any, ...]] | None = None,
) -> list[StoredTask]:
    """Each row's task (TASK_SELECT rows), made in one loop. With a secret
    (and ``check``), the signature is checked here: a row that fails is
    returned untrusted (see ``_trust``). ``parsed`` memoizes JSON texts
    within one read (one for the rows given, if None): a load() of 100,000
    tasks parses each distinct schedule and options text once (JSON
    decoding was 60% of load()), so equal dicts are shared.

    Rows read back were checked when they were written (and, with a secret,
    signed), so they are not checked again: each row is unpacked once into
    named locals (``TaskRow``'s fields, in order) and its three frozen records' slots are
    filled directly rather than through their ``__init__`` (which checks,
    and sets each field with ``object.__setattr__``). A restart over
    100,000 stored tasks makes 100,000 of each: 0.36 s through the
    records' ``__init__``, 0.18 s here (issue 25).

    ``shared`` (``shared_parts``): the rows are ``TASK_SELECT_BARE``'s, and
    each definition's shared parts are taken from it by its digest - not
    with a secret, whose signature is checked over each row's own columns.
    A restart over 100,000 stored tasks of one definition: their read 0.33
    -> 0.26 s (the strings, bytes and JSON texts of 100,000 rows not made)."""
    assert shared is None or not (check and keyring), "a signature is checked over the row's own columns"
    new = object.__new__
    d0, d1, d2, d3, d4, d5, d6, d7 = _DEFINITION
    s0, s1, s2, s3 = _STATE
    t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10 = _TASK
    checking = check and bool(keyring)
    if parsed is None:
        parsed = {}
    out: list[StoredTask] = []
    append = out.append
    for raw in raws:
        (  # TaskRow's fields, in order
            key,
            fn_ref,
            args,
            schedule_text,
            options_text,
            def_hash,
            run_count,
            next_due,
            next_attempt,
            paused,
            last_outcome,
            unloadable,
            holder,
            token,
            updated,
            in_flight,
            max_concurrent,
            group,
            last_holder,
            last_slot,
            signature,
        ) = raw
        if shared is not None:
            fn_ref, args, schedule, options = shared[def_hash]
        else:
            if args is None:
                args = b""
            if checking:
                why = keyring.check(signature, key, fn_ref, args, schedule_text, options_text)
                if why is not None:
                    append(_untrusted(TaskRow._make(raw), why))
                    continue
            schedule, options = _json(schedule_text, parsed), _json(options_text, parsed)
        d = new(TaskDefinition)
        d0(d, key)
        d1(d, fn_ref)
        d2(d, args)
        d3(d, schedule)
        d4(d, options)
        d5(d, def_hash)
        d6(d, max_concurrent)
        d7(d, group)
        st = new(TaskState)
        s0(st, run_count)
        s1(st, next_due)
        s2(st, next_attempt)
        s3(st, paused == 1)
        task = new(StoredTask)
        t0(task, d)
        t1(task, st)
        t2(task, last_outcome)
        t3(task, unloadable)
        t4(task, holder)
        t5(task, token)
        t6(task, updated)
        t7(task, in_flight)
        t8(task, last_holder)
        t9(task, None)
        t10(task, last_slot)
        append(task)
    return out
