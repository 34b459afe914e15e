"""What each process imports at start (issue 13: first result after
``Scheduler()``). The dispatcher and the forkserver are fresh interpreters
that import procsched's modules before the first worker can run: modules
they never use must not load there (asyncio, cron parsing, the user-side
facade, the terminal UI)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Never needed to start a dispatcher or a worker.
HEAVY = ("asyncio", "cronsim", "rich", "procsched._runtime._facade", "procsched._inline", "procsched._jobs")
#: The worker's stack: the dispatcher only names the worker's entry point.
WORKER_ONLY = ("procsched._runtime._worker", "procsched._api", "procsched._validate", "procsched._context")


def loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; import json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


def test_import_procsched_loads_no_submodule() -> None:
    assert {m for m in loaded_after("import procsched") if m.startswith("procsched")} == {"procsched"}


@pytest.mark.parametrize("name", ["procsched._runtime._dispatcher", "procsched._runtime._worker"])
def test_process_entry_modules_stay_light(name: str) -> None:
    loaded = loaded_after(f"import {name}")
    assert name in loaded
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    if name.endswith("_dispatcher"):
        assert not loaded & set(WORKER_ONLY), sorted(loaded & set(WORKER_ONLY))


def test_a_public_name_loads_its_module_on_first_use() -> None:
    loaded = loaded_after("import procsched; procsched.TaskState")
    assert "procsched._core" in loaded and "procsched._runtime._facade" not in loaded
    loaded = loaded_after("from procsched import Scheduler")
    assert "procsched._runtime._facade" in loaded


@pytest.mark.timeout(60)
def test_a_users_module_does_not_shadow_the_dispatchers_imports(tmp_path) -> None:
    """The dispatcher starts the forkserver before its own imports, but takes
    the user's sys.path only after them: a module in the user's directories
    named like one the dispatcher imports (here ``psutil``) stays the user's."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "psutil.py").write_text("raise ImportError('the user module, not psutil')\n")
    program = (
        f"import sys; sys.path.insert(0, {str(shadow)!r})\n"
        "import procsched\n"
        "with procsched.Scheduler(workers=1) as s:\n"
        "    print(s.submit(pow, 2, 5).result(30))\n"
    )
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=50, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "32"
