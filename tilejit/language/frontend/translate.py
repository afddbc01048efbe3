"""Entry points used by the api layer: a kernel's parameters, and its translation to tile IR.

``translate(func, arg_types, constants)`` specializes a Python kernel: array and scalar
parameters become the IR function's arguments, ``tj.Constant`` parameters are substituted as
Python values, and the body is translated (helpers inlined) into one ``Function``.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Mapping
from typing import Annotated, Any, get_origin

from tilejit.errors import TileCompileError
from tilejit.language.frontend.builder import Builder
from tilejit.language.frontend.handlers import Translator, closure_of
from tilejit.language.frontend.scope import ControlSignal, FuncCtx, Scope, assigned_names
from tilejit.language.frontend.source import get_source
from tilejit.language.frontend.values import Array, Tile, normalize_const
from tilejit.language.ir import ops
from tilejit.language.ir.core import Block, Value
from tilejit.language.ir.types import ArrayType, TileType


def _unwrap(func: Any) -> Callable[..., Any]:
    """The Python function behind a ``Kernel`` or ``TileFunction`` wrapper."""
    inner = getattr(func, "func", None)
    if inner is not None and hasattr(inner, "__code__"):
        return inner  # type: ignore[no-any-return]
    if not hasattr(func, "__code__"):
        raise TileCompileError(f"{func!r} is not a Python function, so it cannot be compiled as a tile kernel")
    return func  # type: ignore[no-any-return]


def _def_error(func: Callable[..., Any], message: str) -> TileCompileError:
    """An error located at ``func``'s ``def`` line (or unlocated when its source is unavailable)."""
    try:
        src = get_source(func)
    except TileCompileError:
        return TileCompileError(f"{func.__qualname__}: {message}")
    return src.error(message, src.tree)


def signature_params(func: Any) -> list[str]:
    """Every parameter name of a kernel, in order (no ``*args``/``**kwargs``)."""
    func = _unwrap(func)
    params = inspect.signature(func).parameters.values()
    for p in params:
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            star = "*" if p.kind is inspect.Parameter.VAR_POSITIONAL else "**"
            raise _def_error(func, f"kernel parameters cannot be {star}{p.name}; name each parameter")
    return [p.name for p in params]


def _is_constant_annotation(ann: object, func: Callable[..., Any]) -> bool:
    from tilejit.language.tile import CONSTANT_MARKER

    if isinstance(ann, str):
        env = {**func.__globals__, **closure_of(func)}
        try:
            ann = eval(ann, env)
        except Exception:
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


def constant_params(func: Any) -> list[str]:
    """The names of the parameters annotated ``tj.Constant[...]``, in order."""
    func = _unwrap(func)
    anns = getattr(func, "__annotations__", {}) or {}
    return [p for p in signature_params(func) if p in anns and _is_constant_annotation(anns[p], func)]


def translate(
    func: Callable[..., Any],
    arg_types: Mapping[str, ArrayType | TileType],
    constants: Mapping[str, object],
    *,
    name: str | None = None,
) -> ops.Function:
    """Translate kernel ``func`` specialized for ``arg_types`` (every non-constant parameter) and
    ``constants`` (every ``tj.Constant`` parameter) into a tile IR ``Function``."""
    func = _unwrap(func)
    src = get_source(func)
    params = signature_params(func)
    consts = set(constant_params(func))
    problems: list[str] = []
    for p in params:
        if p in consts:
            if p in arg_types:
                problems.append(f"'{p}' is a tj.Constant parameter: give its value in constants, not a type")
            elif p not in constants:
                problems.append(f"missing the value of constant parameter '{p}'")
        else:
            if p in constants:
                problems.append(f"'{p}' is not annotated tj.Constant[...], so it cannot be given a constant value")
            elif p not in arg_types:
                problems.append(f"missing the type of parameter '{p}'")
    extra = [k for k in (*arg_types, *constants) if k not in params]
    if extra:
        problems.append(f"{func.__name__}() has no parameter{'s' if len(extra) > 1 else ''} "
                        + ", ".join(f"'{e}'" for e in extra))
    if problems:
        raise src.error("; ".join(problems), src.tree)

    scope = Scope()
    args: list[Value] = []
    names: list[str] = []
    for p in params:
        if p in consts:
            scope.set(p, normalize_const(constants[p]), src.tree)
            continue
        t = arg_types[p]
        if isinstance(t, ArrayType):
            if not 1 <= t.ndim <= 4:
                raise src.error(f"parameter '{p}': arrays must have 1 to 4 dims, got {t.ndim}", src.tree)
            v = Value(t, p)
            scope.set(p, Array(v, p), src.tree)
        elif isinstance(t, TileType):
            if not t.is_scalar:
                raise src.error(f"parameter '{p}': scalar parameters have shape (), got {t}", src.tree)
            v = Value(t, p)
            scope.set(p, Tile(v), src.tree)
        else:
            raise src.error(f"parameter '{p}': expected an ArrayType or a scalar TileType, got {t!r}", src.tree)
        args.append(v)
        names.append(p)

    body = Block(args=args)
    builder = Builder(body, src.loc(src.tree))
    ctx = FuncCtx(func.__name__, src, func.__globals__, closure_of(func), is_kernel=True,
                  local_names=frozenset(assigned_names(src.tree.body)))
    tr = Translator(builder, ctx, scope)
    try:
        tr.body(src.tree.body)
    except ControlSignal as exc:
        raise src.error(f"internal error: {type(exc).__name__} escaped", src.tree) from exc
    if body.terminator is None:
        body.append(ops.ReturnOp(loc=src.loc(src.tree)))
    return ops.Function(name or func.__name__, names, body, filename=src.filename)


__all__ = ["constant_params", "signature_params", "translate"]
