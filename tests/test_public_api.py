"""The public surface: ``procsched.__all__`` is sorted, complete and honest
(after httpx's tests/test_exported_members.py), and covers the DESIGN.md contract."""

from __future__ import annotations

import ast
import enum
import types
from pathlib import Path

import procsched

#: Every name DESIGN.md's "Public contract" imports from procsched.
CONTRACT = (
    "InlineScheduler",
    "ManualClock",
    "Priority",
    "Retry",
    "RunInfo",
    "Scheduler",
    "SchedulerError",
    "StoreError",
    "TaskHandle",
    "TaskState",
    "TaskTimeoutError",
    "WorkerCrashedError",
    "current_run",
    "current_scheduler",
)
#: Contract names that land in a later step: checked as soon as they exist.
NOT_YET_REQUIRED: frozenset[str] = frozenset()

INIT = Path(procsched.__file__)


def _init_body() -> list[ast.stmt]:
    """The top level of procsched/__init__.py, with its ``if TYPE_CHECKING:``
    block (the re-exports, which load lazily at run time) unrolled."""
    body: list[ast.stmt] = []
    for node in ast.parse(INIT.read_text()).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            assert not node.orelse
            body.extend(node.body)
        else:
            body.append(node)
    return body


def names_defined_in_init() -> set[str]:
    """Public names bound at the top level of procsched/__init__.py."""
    names: set[str] = set()
    for node in _init_body():
        if isinstance(node, ast.ImportFrom) and node.module == "typing":
            continue  # TYPE_CHECKING, deleted after use
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
    return {n for n in names if not n.startswith("_")}


def test_all_is_sorted_and_unique() -> None:
    assert list(procsched.__all__) == sorted(procsched.__all__)
    assert len(set(procsched.__all__)) == len(procsched.__all__)


def test_all_is_complete() -> None:
    assert names_defined_in_init() <= set(procsched.__all__)
    runtime_public = {
        name
        for name, value in vars(procsched).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert runtime_public <= set(procsched.__all__)


def test_everything_in_all_exists_and_is_public() -> None:
    for name in procsched.__all__:
        assert not name.startswith("_")
        assert hasattr(procsched, name), name


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from procsched import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(procsched.__all__)


def test_contract_names_are_exported() -> None:
    for name in CONTRACT:
        if name in NOT_YET_REQUIRED and not hasattr(procsched, name):
            continue
        assert hasattr(procsched, name), name
        assert name in procsched.__all__, name


def test_init_only_reexports() -> None:
    """__init__.py holds only imports, __all__, metadata and the lazy loader
    (PEP 562 ``__getattr__`` and ``__dir__``): no logic to hide."""
    for node in _init_body():
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if ast.unparse(node) in ("from typing import TYPE_CHECKING", "del TYPE_CHECKING"):
            continue
        if isinstance(node, ast.ImportFrom):
            assert node.level == 1, ast.unparse(node)  # from ._x import ...
            assert all(a.asname in (None, a.name) for a in node.names), ast.unparse(node)
            continue
        if isinstance(node, ast.FunctionDef):
            assert node.name in ("__getattr__", "__dir__"), node.name
            continue
        assert isinstance(node, (ast.Assign, ast.AnnAssign)), ast.unparse(node)


def test_lazy_names_match_the_type_checking_imports() -> None:
    """Each public name loads from the module its TYPE_CHECKING import names."""
    imported = {}
    for node in _init_body():
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            imported.update({a.asname or a.name: "." + (node.module or "") for a in node.names})
    assert imported == procsched._HOMES
    assert set(procsched._HOMES) == set(procsched.__all__)
    assert set(procsched.__all__) <= set(dir(procsched))


def test_import_procsched_imports_nothing_else() -> None:
    """``import procsched`` alone loads no private module (they load on first use)."""
    import subprocess
    import sys

    code = "import sys, procsched; print(sorted(m for m in sys.modules if m.startswith('procsched')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['procsched']"


def test_exported_objects_come_from_private_modules() -> None:
    for name in procsched.__all__:
        module = getattr(getattr(procsched, name), "__module__", "procsched._")
        assert module.startswith("procsched._"), (name, module)


def test_error_tree() -> None:
    assert issubclass(procsched.WorkerCrashedError, procsched.SchedulerError)
    assert issubclass(procsched.TaskTimeoutError, procsched.SchedulerError)
    assert issubclass(procsched.SchedulerError, Exception)
    if hasattr(procsched, "SchedulerClosedError"):
        assert issubclass(procsched.SchedulerClosedError, procsched.SchedulerError)
        assert issubclass(procsched.SchedulerClosedError, RuntimeError)
    assert issubclass(procsched.StoreError, procsched.SchedulerError)


def test_priority_and_state_enums() -> None:
    assert issubclass(procsched.Priority, enum.IntEnum)
    assert procsched.Priority.LOW < procsched.Priority.NORMAL < procsched.Priority.HIGH
    assert {s.name for s in procsched.TaskState} == {"PENDING", "RUNNING", "DONE", "FAILED", "CANCELLED", "PAUSED"}


def test_package_is_typed() -> None:
    assert (INIT.parent / "py.typed").exists()


def test_part_two_names() -> None:
    """DESIGN.md "Public contract, part two": calendars, retries, limits, keys, pause, wall clock."""
    import dataclasses
    import inspect

    retry = inspect.signature(procsched.Retry)
    assert [(p.name, p.default) for p in retry.parameters.values()] == [
        ("attempts", 3),
        ("delay", 1.0),
        ("backoff", 2.0),
        ("max_delay", 60.0),
        ("jitter", 0.0),
        ("on", ("error", "crashed", "timeout")),
    ]
    for cls in (procsched.Scheduler, procsched.InlineScheduler):
        cron = inspect.signature(cls.schedule_cron).parameters
        assert list(cron)[:3] == ["self", "fn", "expr"]
        assert {"tz", "misfire", "stop_on_error", "retry", "until", "max_runs", "key", "replace_existing"} <= set(cron)
        assert cron["misfire"].default == "coalesce" and cron["tz"].default is None
        for method in ("schedule", "schedule_at", "schedule_at_fixed_rate", "schedule_with_fixed_delay"):
            params = inspect.signature(getattr(cls, method)).parameters
            assert {"retry", "key", "replace_existing"} <= set(params), method
        for method in ("schedule_at_fixed_rate", "schedule_with_fixed_delay"):
            assert {"until", "max_runs"} <= set(inspect.signature(getattr(cls, method)).parameters)
        assert callable(cls.get) and callable(cls.jobs)
    for attr in ("pause", "resume", "next_run_at", "key"):
        assert hasattr(procsched.TaskHandle, attr) or attr == "key", attr
    fields = [f.name for f in dataclasses.fields(procsched.RunInfo)]
    assert {"attempt", "scheduled_at"} <= set(fields)
    clock = procsched.ManualClock(0.0, wall=None)
    assert callable(clock.wall_now) and callable(clock.set_wall)
