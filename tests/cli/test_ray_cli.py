"""Issue 26 item 10: with ``--runner ray``, the plain and JSON streams carry
nothing but procsched's own lines: Ray's log lines and what its workers
print go to stderr. A real local Ray cluster (started by the command)."""

from __future__ import annotations

import re
import subprocess
import textwrap

import pytest
from cli_helpers import cli

pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

JOBS = """
    from procsched import every

    @every(0.3)
    def hello():
        print("hello from a ray job")
"""

#: What a plain stdout line of procsched looks like.
PLAIN = re.compile(r"^(procsched: .*|\d\d:\d\d:\d\d\.\d{3}  .*|procsched - .*|workers \(last seen\)|  .*|)$")


@pytest.fixture(scope="module")
def ray_plain(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """One run on a local Ray cluster (the command starts it), for both tests: Ray takes seconds to start."""
    path = tmp_path_factory.mktemp("ray") / "ray_jobs.py"
    path.write_text(textwrap.dedent(JOBS))
    with pytest.MonkeyPatch.context() as env:
        env.delenv("RAY_ADDRESS", raising=False)  # its own cluster, even on the xdist worker that runs the shared one
        return cli("run", str(path), "--runner", "ray", "--workers", "1", "--duration", "2", "--plain", timeout=110)


def test_ray_keeps_its_lines_off_the_plain_stream(ray_plain: subprocess.CompletedProcess[str]) -> None:
    done = ray_plain
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "pid=" not in done.stdout
    assert [line for line in done.stdout.splitlines() if not PLAIN.match(line)] == []
    assert re.search(r"hello\s+run 1 +ok", done.stdout)
    assert "hello from a ray job" in done.stderr  # Ray's worker output: on stderr


def test_ray_job_output_is_framed_under_its_run(ray_plain: subprocess.CompletedProcess[str]) -> None:
    assert "    │ hello from a ray job" in ray_plain.stdout
