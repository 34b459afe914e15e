"""The Store and StoreBatch protocols list what the stores are (issue 21 item 3):
every member, with the implementation's very parameters."""

from __future__ import annotations

import inspect

from procsched._store import Batch, Store, StoreBatch


def members(protocol: type) -> dict[str, object]:
    own = {}
    for klass in protocol.__mro__:
        if klass in (object,) or klass.__name__ in ("Protocol", "Generic"):
            continue
        for name, value in vars(klass).items():
            if name in (
                "__init__",
                "__module__",
                "__doc__",
                "__dict__",
                "__weakref__",
                "__annotations__",
                "__parameters__",
                "__protocol_attrs__",
                "__non_callable_proto_members__",
                "__subclasshook__",
                "__abstractmethods__",
                "__orig_bases__",
                "__qualname__",
                "_is_protocol",
                "_is_runtime_protocol",
                "__slots__",
            ) or name.startswith("_abc"):
                continue
            own.setdefault(name, value)
        for name in getattr(klass, "__annotations__", {}):
            own.setdefault(name, None)
    return own


def check(protocol: type, thing: object) -> None:
    for name, declared in members(protocol).items():
        assert hasattr(thing, name), f"{type(thing).__name__} has no {name}"
        if inspect.isfunction(declared):
            mine = inspect.signature(getattr(type(thing), name))
            theirs = inspect.signature(declared)
            assert [(p.name, p.kind) for p in mine.parameters.values()] == [
                (p.name, p.kind) for p in theirs.parameters.values()
            ], name
        elif isinstance(declared, property):
            assert not callable(getattr(thing, name)), name


def test_both_stores_are_stores_and_their_batches_batches(store):
    check(Store, store)
    batch = store.batch(store.register())
    assert isinstance(batch, Batch)
    check(StoreBatch, batch)
    store.bound_idle_transactions(1000)  # an ability of one store is a no-op on the other: no probe needed
    store.gate_writes()
    assert store.manual_checkpoints() is None or callable(store.manual_checkpoints())


def test_carry_and_drop_claim(store):
    """What the journal does to batches, without touching their ops."""
    from procsched._store import TaskDefinition, TaskState

    h = store.register()
    failed = store.batch(h)
    failed.upsert(TaskDefinition("k", "store_funcs:plain", b"", {"kind": "once"}), TaskState(next_due_ns=1))
    failed.started("k", 1, 1, 1)
    later = store.batch(h)
    later.started("other", 1, 1, 1)
    assert later.drop_claim("other", 1, 1) and not later.drop_claim("other", 1, 1)
    assert not later.fenced or later.ops == []
    later.carry(failed, runs=False)  # a fenced-out commit's: what the user asked, not the runs
    assert [op[0] for op in later.ops] == ["upsert"]
    again = store.batch(h)
    again.carry(failed)
    assert [op[0] for op in again.ops] == ["upsert", "started"] and again.fenced
    assert again.commit().ok and store.get("k").in_flight == 1
