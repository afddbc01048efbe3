"""Every exception and warning tilejit raises on purpose lives in ``tilejit/errors.py`` and is a name of ``tilejit``.

The README promises both: users catch ``tj.TargetError`` and friends by type, and look in one file for them.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import tilejit
import tilejit.errors

PACKAGE = Path(tilejit.__file__).resolve().parent

#: Exceptions that never reach users: the front end's internal unwinding (turned into a located
#: ``TileCompileError`` or consumed by the loop that raised it). Private ``_Names`` are internal too.
INTERNAL = {
    "tilejit.language.frontend.source.FrontendError",
    "tilejit.language.frontend.scope.ControlSignal",
    "tilejit.language.frontend.scope.Retype",
    "tilejit.language.frontend.scope.StaticBreak",
    "tilejit.language.frontend.scope.StaticContinue",
}


def _error_classes() -> list[type[BaseException]]:
    return [
        cls for _, cls in inspect.getmembers(tilejit.errors, inspect.isclass)
        if issubclass(cls, BaseException) and cls.__module__ == "tilejit.errors"
    ]


def test_errors_module_has_the_documented_classes() -> None:
    names = {cls.__name__ for cls in _error_classes()}
    assert {"TargetError", "ConfigError", "CUDAError", "DriverVersionError", "IRVerificationError",
            "NotDeviceArrayError", "CacheWarning", "TileCompileError", "LaunchError"} <= names


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda c: c.__name__)
def test_every_error_class_is_exported(cls: type[BaseException]) -> None:
    assert cls.__name__ in tilejit.__all__
    assert cls.__name__ in dir(tilejit)
    assert getattr(tilejit, cls.__name__) is cls


def test_every_error_class_is_in_the_type_checking_imports() -> None:
    """``tj.TargetError`` must type-check too: the ``TYPE_CHECKING`` block imports each lazy name."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    imported = {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == "tilejit.errors"
        for alias in node.names
    }
    assert {cls.__name__ for cls in _error_classes()} <= imported


def test_old_import_locations_still_work() -> None:
    from tilejit.compiler.cache import CacheWarning
    from tilejit.language.ir.verifier import IRVerificationError
    from tilejit.runtime.interop import NotDeviceArrayError

    assert CacheWarning is tilejit.errors.CacheWarning
    assert IRVerificationError is tilejit.errors.IRVerificationError
    assert NotDeviceArrayError is tilejit.errors.NotDeviceArrayError
    assert issubclass(NotDeviceArrayError, tilejit.errors.TilejitError) and issubclass(NotDeviceArrayError, TypeError)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exception_classes_outside_errors() -> list[str]:
    """Qualified names of the exception and warning classes defined by any module but ``tilejit.errors``
    (found in each module's AST; a module-level class is checked on the imported module, a nested one by
    the names of its bases)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module_name = _module_name(path)
        if module_name in ("tilejit.errors", "tilejit.__main__"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top_level = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
        module = importlib.import_module(module_name) if top_level else None
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            if node.name in top_level:
                cls = getattr(module, node.name)
                is_error = isinstance(cls, type) and issubclass(cls, BaseException) and cls.__module__ == module_name
            else:
                bases = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]
                is_error = any(b.endswith(("Error", "Exception", "Warning")) for b in bases)
            if is_error:
                found.append(f"{module_name}.{node.name}")
    return found


def test_no_other_module_defines_a_public_exception() -> None:
    classes = _exception_classes_outside_errors()
    assert "tilejit.runtime.fastlaunch._Mismatch" in classes  # the scan sees private ones too
    public = [c for c in classes if not c.rsplit(".", 1)[-1].startswith("_") and c not in INTERNAL]
    assert public == [], f"define these in tilejit/errors.py (and export them from tilejit): {public}"
