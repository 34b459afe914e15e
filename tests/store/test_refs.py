"""Functions of keyed tasks are stored as "module:qualname" references."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest
import store_funcs as f

from procsched._store import TaskDefinition, definition_hash, function_ref, resolve_ref


def test_module_level_function_round_trips():
    ref = function_ref(f.plain)
    assert ref == "store_funcs:plain"
    assert resolve_ref(ref) is f.plain


def test_builtin_class_and_classmethod():
    assert function_ref(os.getpid) == "posix:getpid"
    assert function_ref(f.Klass) == "store_funcs:Klass"
    assert resolve_ref(function_ref(f.Klass.cm))() is f.Klass


@pytest.mark.parametrize(
    ("fn", "why"),
    [
        (lambda: 1, "lambda"),
        (f.make_closure(3), "nested function or closure"),
        (f.Klass().method, "bound to an instance"),
        (functools.partial(f.plain, 1), "partial objects"),
        (f.decorated, "nested function or closure"),  # the wrapper is what the name holds
    ],
)
def test_refused_with_the_reason(fn, why):
    with pytest.raises(TypeError, match="must be importable") as info:
        function_ref(fn)
    assert why in str(info.value)


def test_rebound_name_refused():
    def original():
        pass

    original.__qualname__ = "plain"
    original.__module__ = "store_funcs"
    with pytest.raises(TypeError, match="imports a different object"):
        function_ref(original)


def test_main_script_function_refused(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(
        "from procsched._store import function_ref\n"
        "def job(): pass\n"
        "try:\n    function_ref(job)\nexcept TypeError as e:\n    print('refused:', e)\n"
    )
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    ).stdout
    assert "refused:" in out and "__main__ script" in out and "python -m" in out


def test_main_module_run_with_dash_m_uses_its_name(tmp_path):
    (tmp_path / "progmod.py").write_text(
        "from procsched._store import function_ref\ndef job(): pass\nprint(function_ref(job))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()])}
    out = subprocess.run([sys.executable, "-m", "progmod"], capture_output=True, text=True, timeout=60, env=env)
    assert out.stdout.strip() == "progmod:job", out.stderr


@pytest.mark.parametrize("ref", ["nocolon", ":x", "mod:"])
def test_resolve_bad_ref(ref):
    with pytest.raises(ValueError, match="module:qualname"):
        resolve_ref(ref)


def test_resolve_missing():
    with pytest.raises(ImportError):
        resolve_ref("no_such_module_xyz:f")
    with pytest.raises(AttributeError):
        resolve_ref("store_funcs:nope")


def test_definition_hash_changes_with_every_part():
    base = ("m:f", b"args", {"kind": "fixed_rate", "period_ns": 1}, {"priority": 0})
    h = definition_hash(*base)
    assert h == definition_hash("m:f", b"args", {"period_ns": 1, "kind": "fixed_rate"}, {"priority": 0})
    assert h != definition_hash("m:g", *base[1:])
    assert h != definition_hash("m:f", b"argz", *base[2:])
    assert h != definition_hash("m:f", b"args", {"kind": "fixed_rate", "period_ns": 2}, {"priority": 0})
    assert h != definition_hash(*base[:3], {"priority": 1})
    assert TaskDefinition("k", *base).def_hash == h


@pytest.mark.parametrize(
    ("kw", "err"),
    [
        ({"key": ""}, ValueError),
        ({"key": 3}, ValueError),
        ({"args": "str"}, TypeError),
        ({"schedule": {"kind": "hourly"}}, ValueError),
        ({"options": {"x": object()}}, TypeError),
    ],
)
def test_bad_definitions(kw, err):
    fields = {"key": "k", "fn_ref": "m:f", "args": b"", "schedule": {"kind": "once"}, "options": {}}
    with pytest.raises(err):
        TaskDefinition(**{**fields, **kw})
