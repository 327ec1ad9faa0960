"""The compiled request path's manifest: a build is used only while every compiled module's
source is as it was at the build, all of it or none, and not with `RAFTKA_COMPILED=0`.
(The brokers the compat suite starts run the real build: tests/compat/test_compiled_brokers.py.)"""

from __future__ import annotations

import ast
import importlib.machinery
import sys
from pathlib import Path

import pytest

from raftka.broker import compiled


def fake_build(tmp_path: Path, hashes: dict[str, str]) -> Path:
    """A build folder as `compiled.adopt` leaves it, from empty stand-ins for mypyc's files."""
    lib = tmp_path / "lib"
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for name in [*hashes, compiled.GROUP_MODULE]:
        file = lib / (name.replace(".", "/") + suffix)
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(b"")
    build = tmp_path / "build"
    compiled.adopt(lib, hashes, build)
    return build


def test_every_compiled_module_is_a_source_of_the_package() -> None:
    for path in compiled.MODULES:
        assert (compiled.ROOT / path).is_file(), path
    assert compiled.module_name("consensus/core.py") == "raftka.consensus.core"
    assert set(compiled.source_hashes()) == {compiled.module_name(p) for p in compiled.MODULES}


def test_a_build_is_used_only_while_every_source_is_as_built(tmp_path: Path) -> None:
    assert compiled.compiled_extensions(tmp_path / "none") == (
        None,
        "not built (scripts/compile-hot builds them)",
    )
    hashes = compiled.source_hashes()
    build = fake_build(tmp_path, hashes)
    extensions, reason = compiled.compiled_extensions(build)
    assert reason == f"compiled with mypyc ({len(compiled.MODULES)} modules of the request path)"
    assert extensions is not None
    assert set(extensions) == {*hashes, compiled.GROUP_MODULE}
    assert all(Path(file).is_relative_to(build) for file in extensions.values())

    edited = dict(hashes, **{"raftka.consensus.core": "0" * 64})
    assert compiled.compiled_extensions(fake_build(tmp_path, edited)) == (
        None,
        "raftka.consensus.core changed since the build (run scripts/setup)",
    )
    fewer = dict(hashes)
    del fewer["raftka.consensus.core"]
    assert compiled.compiled_extensions(fake_build(tmp_path, fewer))[1] == (
        "built from another list of modules (run scripts/setup)"
    )
    build = fake_build(tmp_path, hashes)
    (build / "consensus" / ("core" + importlib.machinery.EXTENSION_SUFFIXES[0])).unlink()
    assert compiled.compiled_extensions(build)[1].endswith("is missing (run scripts/setup)")


def test_install_keeps_the_pure_python_modules_when_it_must(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = fake_build(tmp_path, compiled.source_hashes())
    finders = list(sys.meta_path)
    monkeypatch.setattr(compiled, "status", compiled.status)

    # Turned off.
    monkeypatch.setenv(compiled.SWITCH, "0")
    compiled.install(build)
    assert compiled.status == "pure Python (RAFTKA_COMPILED=0)"
    monkeypatch.delenv(compiled.SWITCH)

    # This process imported the sources already: a build loaded beside them would be a
    # second copy of each module.
    import raftka.consensus.core  # noqa: F401

    compiled.install(build)
    assert compiled.status.startswith("pure Python (raftka.")
    assert compiled.status.endswith("was imported before the compiled modules)")

    compiled.install(tmp_path / "none")
    assert compiled.status == (
        "pure Python (compiled modules not built (scripts/compile-hot builds them))"
    )
    assert sys.meta_path == finders


def test_no_compiled_function_reuses_an_exception_name_for_another_type() -> None:
    """mypyc gives a name bound by `except A as name` the type of the function's first such
    clause, so a later `except B as name` raises TypeError where Python would bind a B (a
    ProducerStateError answering a Produce became a TypeError that way)."""
    reused = []
    for path in compiled.MODULES:
        tree = ast.parse((compiled.ROOT / path).read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            caught: dict[str, set[str]] = {}
            for node in ast.walk(function):
                if isinstance(node, ast.ExceptHandler) and node.name:
                    kind = ast.unparse(node.type) if node.type else "BaseException"
                    caught.setdefault(node.name, set()).add(kind)
            reused += [
                f"{path}:{function.lineno} {function.name}: {name} for {sorted(kinds)}"
                for name, kinds in caught.items()
                if len(kinds) > 1
            ]
    assert not reused


#: Calls a slice bound may make in a compiled module: none with an effect.
_PURE_IN_SLICES = {"len"}


def test_no_compiled_slice_bound_has_an_effect() -> None:
    """mypyc (2.4.1) evaluates a slice's bounds, then, for a sequence other than a list,
    tuple, str or bytes (a memoryview, a bytearray), evaluates the whole subscript again:
    `unsent[os.write(fd, unsent):]` wrote every piece of a large response twice, and a
    consumer read the copy as the next frame ("Invalid response size")."""
    effects = []
    for path in compiled.MODULES:
        tree = ast.parse((compiled.ROOT / path).read_text())
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice)):
                continue
            bounds = [node.slice.lower, node.slice.upper, node.slice.step]
            for part in (n for bound in bounds if bound is not None for n in ast.walk(bound)):
                pure = (
                    isinstance(part, ast.Call)
                    and isinstance(part.func, ast.Name)
                    and part.func.id in _PURE_IN_SLICES
                )
                if isinstance(part, ast.Call | ast.Await | ast.NamedExpr) and not pure:
                    effects.append(f"{path}:{node.lineno} {ast.unparse(node)}")
                    break
    assert not effects


#: Decorators mypyc keeps a native class under (any other makes the class a Python class).
_NATIVE_CLASS_DECORATORS = {"dataclass", "final", "trait", "mypyc_attr"}


def test_every_class_of_a_compiled_module_can_be_native() -> None:
    """mypyc compiles a class with any other decorator, or with more than one base, as a
    Python class: its methods are compiled, but compiled code then reads and writes its
    every attribute by name and makes it through Python. The Raft values (under a decorator
    that rewrote their constructors) and the partition log (a diamond of mixins) were such
    classes until 2026-12-01."""
    python_classes = []
    for path in compiled.MODULES:
        tree = ast.parse((compiled.ROOT / path).read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            names = []
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                names.append(
                    target.attr if isinstance(target, ast.Attribute) else ast.unparse(target)
                )
            refused = [name for name in names if name not in _NATIVE_CLASS_DECORATORS]
            # A protocol is a type only (never made), whatever its bases.
            protocol = any(ast.unparse(b).startswith("Protocol") for b in node.bases)
            if refused or (len(node.bases) > 1 and not protocol):
                python_classes.append(
                    f"{path}:{node.lineno} {node.name}: bases "
                    f"{[ast.unparse(b) for b in node.bases]}, decorators {names}"
                )
    assert not python_classes
