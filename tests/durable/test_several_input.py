"""Bad ``lease=``: a clear ValueError at the call, nothing started."""

from __future__ import annotations

import pytest

import procsched


@pytest.mark.parametrize("lease", [0, -1.0, 0.05, 1e9, float("nan"), True, "30"])
def test_a_bad_lease_is_refused_at_the_call(lease, tmp_path) -> None:
    with pytest.raises(ValueError, match="lease must be seconds"):
        procsched.Scheduler(1, store=str(tmp_path / "s.db"), lease=lease)
    assert not (tmp_path / "s.db").exists()  # nothing opened
