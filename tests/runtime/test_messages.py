"""The message records: every one through the real framing, and the check of a worker's reports.

A record's wire form is a plain tuple of its own layout; ``Record.wire``
is the only code that lays one out. These tests hold the encoders to
their records (same fields, same order), send every record through the
pipes' own framing (``send_command`` / ``CommandReader``, ``frame_head`` /
``FrameReader``) and read it back as the record, and walk the untrusted
input check through good and bad reports.
"""

from __future__ import annotations

import inspect
import os
import pickle
import threading
from datetime import UTC
from multiprocessing.connection import Connection
from typing import Any

import pytest

from procsched._core import RetryPolicy, Schedule
from procsched._handle import RunError
from procsched._runtime import _messages as m
from procsched._runtime import _ray_messages as rm
from procsched._runtime._checks import check_report
from procsched._runtime._wire import PROTOCOL, CommandReader, FrameReader, frame_head, send_command

ALL = sorted({*m.COMMANDS, *m.ORDERS, *m.REPORTS, *m.IN_PROCESS, *rm.RAY, *m.EVENTS}, key=lambda r: r.__name__)


def sample(record: type[Any]) -> tuple[Any, ...]:
    """Field values for ``record`` (after its tag), of types a pipe carries."""
    values: list[Any] = []
    for i, name in enumerate(record._fields[1:]):
        if name == "payload":
            values.append((b"fn", b"args"))
        elif name in ("schedule",):
            values.append(Schedule.fixed_rate(10, stop_on_error=True).to_wire())
        elif name == "retry":
            values.append(RetryPolicy(3, 1, 2.0, 9, 0.0, frozenset({"error"})).to_wire())
        elif name in ("shapes", "rows"):
            values.append([("row", i)])
        elif name == "error":
            values.append(ValueError("refused"))
        else:
            values.append(f"{name}-{i}")  # any picklable value will do: the framing does not look
    return tuple(values)


@pytest.mark.parametrize("record", ALL, ids=lambda r: r.__name__)
def test_an_encoder_lays_out_its_records_fields(record: type[Any]) -> None:
    assert record._fields[0] == "tag"
    assert list(inspect.signature(record.wire).parameters) == list(record._fields[1:])
    message = record.wire(*sample(record))
    assert type(message) is tuple and message[0] == m.tag_of(record)  # a plain tuple on the wire
    view = m.view(record, message)
    assert type(view) is record and tuple(view) == message
    for name, value in zip(record._fields[1:], sample(record), strict=True):
        assert getattr(view, name) == value or isinstance(value, Exception)


@pytest.mark.parametrize("channel", [m.COMMANDS, m.ORDERS, m.REPORTS, (*m.IN_PROCESS, *rm.RAY), m.EVENTS])
def test_tags_are_distinct_on_each_channel(channel: tuple[type[Any], ...]) -> None:
    tags = [m.tag_of(record) for record in channel]
    assert len(set(tags)) == len(tags)


def test_every_command_crosses_the_command_pipe() -> None:
    r, w = os.pipe()
    conn = Connection(w, readable=False)
    commands = [record.wire(*sample(record)) for record in m.COMMANDS]
    big = m.Add.wire(1, 0, 0, 0, None, None, 0, None, None, (b"fn", b"x" * (1 << 21)), None, None, None)

    def write() -> None:  # (a pipe holds 64 KiB: the writer needs its reader)
        for message in [*commands, big]:  # (a large blob goes out of band)
            send_command(conn, message)
        conn.close()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        reader, commands_in = FrameReader(r), CommandReader()
        received: list[Any] = []
        while len(received) < len(commands) + 1:
            received += commands_in.messages(reader.read())
    finally:
        writer.join(30)
        os.close(r)
    for sent, got in zip([*commands, big], received, strict=True):
        record = next(rec for rec in m.COMMANDS if m.tag_of(rec) == got[0])
        assert m.view(record, got) == m.view(record, sent)


@pytest.mark.parametrize("channel", [m.ORDERS, m.REPORTS, m.EVENTS])
def test_orders_reports_and_event_batches_cross_a_pipe(channel: tuple[type[Any], ...]) -> None:
    messages = [record.wire(*sample(record)) for record in channel]
    body = pickle.dumps(messages, PROTOCOL)  # (events go as one batch per turn; the rest frame by frame)
    r, w = os.pipe()
    try:
        os.write(w, frame_head(len(body)) + body)
        (frame,) = FrameReader(r).read()
    finally:
        os.close(r)
        os.close(w)
    got = pickle.loads(frame)
    assert [type(x) for x in got] == [tuple] * len(messages)
    for record, sent, back in zip(channel, messages, got, strict=True):
        assert str(m.view(record, back)) == str(m.view(record, sent))


# -- the check of a worker's reports -------------------------------------------------------


def done(**change: Any) -> tuple[Any, ...]:
    fields = dict(
        zip(m.Done._fields[1:], (7, 1, "ok", 10, 20, m.BLOB_VALUE, b"x", False, None, None, None), strict=True)
    )
    fields.update(change)
    return m.Done.wire(**fields)


def add(**change: Any) -> tuple[Any, ...]:
    wire = m.Add.wire(None, 5, 5, 0, None, None, 0, None, "n", (b"fn", b"args"), None, None, None)
    return tuple(change.get(name, value) for name, value in zip(m.Add._fields, wire, strict=True))


GOOD = [
    done(),
    done(outcome="error", blob_kind=m.BLOB_ERROR, matched=True, unfit="replaced after a MemoryError"),
    done(outcome="error", blob_kind=m.BLOB_ERROR, error=RunError("ValueError", "no data", "Traceback ...")),
    done(output="captured\n"),
    m.Started.wire(7, 1, 12),
    m.Skipped.wire(),
    m.Cancel.wire(0, 3, True),
    add(),
    add(schedule=Schedule.fixed_rate(10).to_wire(), key="k", retry_on=b"classes"),
    add(schedule=("calendar", 0, "coalesce", False, "0 3 * * *", UTC, None, 2, 1, "wait", None, 0, None), due_ns=None),
    add(schedule=("fixed_rate", 5, "skip", False, None, None, None, None, 3, "replace", 10, 0, "db")),
    add(retry=RetryPolicy(3, 1, 2.0, 9, 0.5, frozenset({"crashed"})).to_wire()),
]
BAD = [
    ("a list", [m.DONE, 1]),
    ("no tag", ()),
    ("an unknown tag", ("shutdown", True)),
    ("a short done", done()[:-1]),
    ("a bool for an int", done(task_id=True)),
    ("an outcome a worker cannot report", done(outcome="crashed")),
    ("a blob kind the engine makes", done(blob_kind=m.BLOB_EXC)),
    ("a str blob", done(blob="x")),
    ("a str unfit", done(unfit=3)),
    ("an error as a str", done(error="ValueError: no data")),
    ("an error of another class", done(error=ValueError("no data"))),
    ("an error with a non-str message", done(error=RunError("ValueError", b"no data"))),  # type: ignore[arg-type]
    ("output as bytes", done(output=b"captured")),
    ("a float in started", m.Started.wire(7, 1, 1.5)),
    ("a cancel without interrupt", m.Cancel.wire(0, 3, 1)),
    ("an add with a task id", add(task_id=9)),
    ("an add with a str payload", add(payload=("fn", "args"))),
    ("an add with a 3-blob payload", add(payload=(b"a", b"b", b"c"))),
    (
        "an add with an unknown kind",
        add(schedule=("hourly", 1, "skip", False, None, None, None, None, 1, "wait", None, 0, None)),
    ),
    (
        "an add with an unknown overlap",
        add(schedule=("fixed_rate", 1, "skip", False, None, None, None, None, 1, "x", None, 0, None)),
    ),
    ("an add with an old schedule", add(schedule=("fixed_rate", 1, "skip", False, None, None, None, None))),
    (
        "an add with a float jitter",
        add(schedule=("fixed_rate", 1, "skip", False, None, None, None, None, 1, "wait", None, 0.5, None)),
    ),
    (
        "an add with a zone object",
        add(schedule=("calendar", 0, "skip", False, "* * * * *", object(), None, None, 1, "wait", None, 0, None)),
    ),
    (
        "an add with a float jitter",
        add(schedule=("fixed_rate", 1, "skip", False, None, None, None, None, 1, "wait", None, 0.5, None)),
    ),
    (
        "an add with an int group",
        add(schedule=("fixed_rate", 1, "skip", False, None, None, None, None, 1, "wait", None, 0, 7)),
    ),
    ("an add with a short retry", add(retry=(3, 1, 2.0))),
    ("an add with a str key", add(key=5)),
]


@pytest.mark.parametrize("message", GOOD, ids=lambda msg: str(msg[0]))
def test_well_formed_reports_pass(message: tuple[Any, ...]) -> None:
    assert check_report(message) == message[0]


@pytest.mark.parametrize(("what", "message"), BAD, ids=[what for what, _ in BAD])
def test_malformed_reports_are_refused_before_the_engine_sees_them(what: str, message: Any) -> None:
    with pytest.raises(TypeError):
        check_report(message)


@pytest.mark.timeout(10)
def test_a_corrupt_frame_header_is_refused_not_read_forever() -> None:
    """A header with a negative size other than -1 (two writers' bytes
    interleaved: the fault campaign's adoption path) sent the reader
    backwards in its buffer, forever: the dispatcher spun at 100 % CPU and
    outlived its user process. It is refused (the channel is corrupt)."""
    r, w = os.pipe()
    try:
        os.write(w, (-5).to_bytes(4, "big", signed=True) + b"0123456789")
        with pytest.raises(ValueError, match="corrupt frame header"):
            FrameReader(r).read()
    finally:
        os.close(r)
        os.close(w)
