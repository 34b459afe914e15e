"""procsched._core is sans-IO: no threads, processes, OS, signals, clocks or pickling.

Two checks: every module the core imports, read statically (AST), including
the modules outside _core that it pulls in; and a fresh interpreter that
imports the core on its own (without procsched/__init__, whose runtime
modules may use threads) and loads none of the forbidden modules.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import procsched

FORBIDDEN = {
    "threading",
    "_thread",
    "multiprocessing",
    "concurrent",
    "os",
    "signal",
    "time",
    "pickle",
    "_pickle",
    "cloudpickle",
    "subprocess",
    "socket",
    "selectors",
    "asyncio",
}

PACKAGE = Path(procsched.__file__).parent
CORE = PACKAGE / "_core"


def imports_of(path: Path) -> tuple[set[str], set[Path]]:
    """Absolute top-level modules imported by ``path``, and the procsched files
    reached through relative imports."""
    absolute: set[str] = set()
    local: set[Path] = set()
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            absolute.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                assert node.module is not None
                absolute.add(node.module.split(".")[0])
                continue
            base = path.parent
            for _ in range(node.level - 1):
                base = base.parent
            if node.module:  # from ..x.y import name
                targets = [base.joinpath(*node.module.split("."))]
            else:  # from .. import x
                targets = [base / alias.name for alias in node.names]
            for target in targets:
                for candidate in (target.with_suffix(".py"), target / "__init__.py"):
                    if candidate.exists():
                        local.add(candidate)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            absolute.add("__import__")  # a dynamic import: not allowed either
    return absolute, local


def test_core_files_import_nothing_forbidden() -> None:
    todo = sorted(CORE.glob("*.py"))
    assert {p.name for p in todo} >= {"__init__.py", "_scheduler.py", "_state.py"}
    seen: set[Path] = set()
    offenders: dict[str, set[str]] = {}
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        absolute, local = imports_of(path)
        bad = absolute & (FORBIDDEN | {"__import__"})
        if bad:
            offenders[str(path.relative_to(PACKAGE))] = bad
        todo.extend(local - seen)
    assert not offenders
    # The only module outside _core that the core may use is the error tree.
    assert {p.relative_to(PACKAGE).as_posix() for p in seen if p.parent != CORE} <= {"_errors.py", "__init__.py"}
    assert PACKAGE / "__init__.py" not in seen


CHILD = """
import json, sys, types
before = set(sys.modules)
pkg = types.ModuleType("procsched")
pkg.__path__ = [sys.argv[1]]
sys.modules["procsched"] = pkg
import procsched._core as core
core.SchedulerCore().add(0)
print(json.dumps({"files": [m.__file__ for m in list(sys.modules.values()) if m.__name__.startswith("procsched._")],
                  "loaded": sorted(set(sys.modules) - before)}))
"""


def test_core_imports_alone_in_a_fresh_interpreter() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(PACKAGE)], capture_output=True, text=True, check=True, timeout=60
    )
    report = json.loads(out.stdout)
    loaded = {name.split(".")[0] for name in report["loaded"]}
    assert not loaded & FORBIDDEN, loaded & FORBIDDEN
    assert {Path(f).name for f in report["files"]} >= {"_scheduler.py", "_state.py", "_errors.py"}
