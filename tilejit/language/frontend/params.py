"""A kernel's parameters: their names and which are ``tj.Constant``, read without the translator.

Defining a kernel (``@tj.kernel``) and a launch that hits the disk cache need only this, so it
imports neither the rest of the front end nor ``inspect``: names come from the code object.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, get_origin

from tilejit.errors import TileCompileError

_CO_VARARGS, _CO_VARKEYWORDS = 0x04, 0x08


def unwrap(func: Any) -> Callable[..., Any]:
    """The Python function behind a ``Kernel`` or ``TileFunction`` wrapper."""
    inner = getattr(func, "func", None)
    if inner is not None and hasattr(inner, "__code__"):
        return inner  # type: ignore[no-any-return]
    if not hasattr(func, "__code__"):
        raise TileCompileError(f"{func!r} is not a Python function, so it cannot be compiled as a tile kernel")
    return func  # type: ignore[no-any-return]


def def_error(func: Callable[..., Any], message: str) -> TileCompileError:
    """An error located at ``func``'s ``def`` line (or unlocated when its source is unavailable)."""
    from tilejit.language.frontend.source import get_source

    try:
        src = get_source(func)
    except TileCompileError:
        return TileCompileError(f"{func.__qualname__}: {message}")
    return src.error(message, src.tree)


def closure_of(func: Callable[..., Any]) -> dict[str, Any]:
    """The values of ``func``'s free variables (cells not yet filled are left out)."""
    out: dict[str, Any] = {}
    code = getattr(func, "__code__", None)
    cells = getattr(func, "__closure__", None) or ()
    if code is None:
        return out
    for name, cell in zip(code.co_freevars, cells):
        try:
            out[name] = cell.cell_contents
        except ValueError:
            continue
    return out


def signature_params(func: Any) -> list[str]:
    """Every parameter name of a kernel, in order (no ``*args``/``**kwargs``)."""
    func = unwrap(func)
    sig_func = func
    while hasattr(sig_func, "__wrapped__") and hasattr(sig_func.__wrapped__, "__code__"):
        sig_func = sig_func.__wrapped__  # as inspect.signature follows functools.wraps
    code = sig_func.__code__
    n = code.co_argcount + code.co_kwonlyargcount
    if code.co_flags & _CO_VARARGS:
        raise def_error(func, f"kernel parameters cannot be *{code.co_varnames[n]}; name each parameter")
    if code.co_flags & _CO_VARKEYWORDS:
        raise def_error(func, f"kernel parameters cannot be **{code.co_varnames[n]}; name each parameter")
    return list(code.co_varnames[:n])


def _is_constant_annotation(ann: object, func: Callable[..., Any]) -> bool:
    from tilejit.language.tile import CONSTANT_MARKER

    if isinstance(ann, str):
        env = {**func.__globals__, **closure_of(func)}
        try:
            ann = eval(ann, env)
        except Exception:
            import ast

            try:
                tree = ast.parse(str(ann), mode="eval").body
            except SyntaxError:
                return False
            if isinstance(tree, ast.Subscript):
                tree = tree.value
            return (isinstance(tree, ast.Name) and tree.id == "Constant") or (
                isinstance(tree, ast.Attribute) and tree.attr == "Constant"
            )
    return get_origin(ann) is Annotated and any(m is CONSTANT_MARKER for m in getattr(ann, "__metadata__", ()))


def constant_type(func: Any, name: str) -> object:
    """The type inside parameter ``name``'s ``tj.Constant[T]`` annotation (None when unknown)."""
    func = unwrap(func)
    ann = (getattr(func, "__annotations__", {}) or {}).get(name)
    if isinstance(ann, str):
        try:
            ann = eval(ann, {**func.__globals__, **closure_of(func)})
        except Exception:
            return None
    if get_origin(ann) is not Annotated:
        return None
    return getattr(ann, "__origin__", None)


def constant_params(func: Any) -> list[str]:
    """The names of the parameters annotated ``tj.Constant[...]``, in order."""
    func = unwrap(func)
    anns = getattr(func, "__annotations__", {}) or {}
    return [p for p in signature_params(func) if p in anns and _is_constant_annotation(anns[p], func)]


__all__ = ["closure_of", "constant_params", "constant_type", "def_error", "signature_params", "unwrap"]
