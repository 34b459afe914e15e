"""KIND_OF and MISFIRE_OF: the members by value, for runners that get them as strings."""

from __future__ import annotations

from procsched._core import KIND_OF, MISFIRE_OF, Kind, Misfire


def test_every_member_by_its_value() -> None:
    assert KIND_OF == {kind.value: kind for kind in Kind} and len(KIND_OF) == len(Kind)
    assert MISFIRE_OF == {m.value: m for m in Misfire} and len(MISFIRE_OF) == len(Misfire)
    for value, kind in KIND_OF.items():
        assert Kind(value) is kind
    for value, misfire in MISFIRE_OF.items():
        assert Misfire(value) is misfire
