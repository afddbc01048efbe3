"""``tilejit.language.tile.__all__`` is the one list of the tile language's names: each is ``tj.<name>`` and
each is implemented by the front end (or deliberately host-only); ``tilejit`` lists only the other names."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import tilejit as tj
from tilejit.language import tile
from tilejit.language.frontend import calls
from tilejit.language.ir.types import DType


def test_every_tile_name_is_a_tj_name() -> None:
    for name in tile.__all__:
        assert getattr(tj, name) is getattr(tile, name), name
        assert name in tj.__all__ and name in dir(tj), name


def test_every_tile_name_is_accepted_by_the_front_end_or_host_only() -> None:
    assert set(tile.__all__) >= calls.HOST_ONLY, "HOST_ONLY names a name the language does not have"
    for name in tile.__all__:
        value = getattr(tile, name)
        entry = calls.BUILTINS.get(id(value))
        if name in calls.HOST_ONLY:
            assert entry is None, f"tj.{name} is host-only and yet has a front-end implementation"
        elif isinstance(value, DType):
            assert entry is None  # a dtype called in tile code converts (calls.call)
        else:
            assert inspect.isfunction(value), f"tj.{name}: neither a function, a dtype nor host-only"
            assert entry is not None and entry[0] is value, f"tj.{name} has no front-end implementation"


def test_tile_py_defines_nothing_public_outside_its_all() -> None:
    """A function or class added to tile.py without its ``__all__`` would be neither ``tj.*`` nor checked above."""
    missing = [name for name, value in vars(tile).items()
               if not name.startswith("_") and (inspect.isfunction(value) or inspect.isclass(value))
               and value.__module__ == tile.__name__ and name not in tile.__all__]
    assert missing == []


def test_the_package_lists_each_other_name_once() -> None:
    """``tj.__all__`` is derived: the non-language names (``tilejit._LAZY``) and ``tile.__all__``, no overlap."""
    assert not set(tj._LAZY) & set(tile.__all__)
    assert tj.__all__ == sorted({*tj._LAZY, *tile.__all__}) + ["__version__"]
    for name in tj._LAZY:
        assert getattr(tj, name) is not None


def test_a_name_added_to_tile_all_is_a_tj_name(monkeypatch: pytest.MonkeyPatch) -> None:
    def frob(x: object) -> object:
        """A stand-in for a new language function."""
        raise AssertionError("not called")

    monkeypatch.setattr(tile, "frob", frob, raising=False)
    monkeypatch.setattr(tile, "__all__", [*tile.__all__, "frob"])
    monkeypatch.delitem(vars(tj), "__all__", raising=False)
    monkeypatch.delitem(vars(tj), "frob", raising=False)
    try:
        assert tj.frob is frob and "frob" in tj.__all__ and "frob" in dir(tj)
    finally:
        vars(tj).pop("frob", None)
        vars(tj).pop("__all__", None)


def test_unknown_and_dunder_names_are_attribute_errors() -> None:
    with pytest.raises(AttributeError, match="module 'tilejit' has no attribute 'no_such_name'"):
        tj.no_such_name  # noqa: B018
    assert not hasattr(tj, "__no_such_dunder__")


def test_importing_tilejit_imports_no_language_module() -> None:
    code = (
        "import sys, tilejit\n"
        "print(sorted(m for m in sys.modules if m.startswith('tilejit.')))\n"
        "tilejit.load\n"
        "print('tilejit.language.tile' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.split("\n")[:2] == ["[]", "True"], out.stdout
