"""The entry point used by the api layer: a kernel's translation to tile IR (its parameters: ``params``).

``translate(func, arg_types, constants)`` specializes a Python kernel: array and scalar
parameters become the IR function's arguments, ``tj.Constant`` parameters are substituted as
Python values, and the body is translated (helpers inlined) into one ``Function``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from tilejit.language.frontend.builder import Builder
from tilejit.language.frontend.handlers import Translator
from tilejit.language.frontend.params import closure_of, constant_params, constant_type, signature_params, unwrap
from tilejit.language.frontend.scope import ControlSignal, FuncCtx, Scope, assigned_names
from tilejit.language.frontend.source import get_source
from tilejit.language.frontend.values import Array, ArrayList, Tile
from tilejit.language.ir import ops
from tilejit.language.ir.core import Block, Value
from tilejit.language.ir.types import ArrayListType, ArrayType, TileType, normalize_const

#: the recursion limit while a kernel is translated (nested expressions and helper calls recurse)
_RECURSION_LIMIT = 6000


def _check_constant(func: Callable[..., Any], src: Any, name: str, value: object) -> None:
    """A located error when constant ``name``'s value does not match its ``tj.Constant[T]``."""
    want = constant_type(func, name)
    if not isinstance(want, type) or want is object:
        return
    if want is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif want is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, want)
    if not ok:
        raise src.error(
            f"constant parameter '{name}' is annotated tj.Constant[{want.__name__}] but was given "
            f"{value!r} ({type(value).__name__})",
            src.tree,
        )


def translate(
    func: Callable[..., Any],
    arg_types: Mapping[str, ArrayType | ArrayListType | TileType],
    constants: Mapping[str, object],
    *,
    name: str | None = None,
) -> ops.Function:
    """Translate kernel ``func`` specialized for ``arg_types`` (every non-constant parameter) and
    ``constants`` (every ``tj.Constant`` parameter) into a tile IR ``Function``."""
    func = unwrap(func)
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
            value = normalize_const(constants[p])
            _check_constant(func, src, p, value)
            scope.set(p, value, src.tree)
            continue
        t = arg_types[p]
        if isinstance(t, ArrayType):
            if not 1 <= t.ndim <= 4:
                raise src.error(f"parameter '{p}': arrays must have 1 to 4 dims, got {t.ndim}", src.tree)
            v = Value(t, p)
            scope.set(p, Array(v, p), src.tree)
        elif isinstance(t, ArrayListType):
            if not 1 <= t.ndim <= 4:
                raise src.error(f"parameter '{p}': the arrays of an array list must have 1 to 4 dims, got {t.ndim}",
                                src.tree)
            v = Value(t, p)
            scope.set(p, ArrayList(v, p), src.tree)
        elif isinstance(t, TileType):
            if not t.is_scalar:
                raise src.error(f"parameter '{p}': scalar parameters have shape (), got {t}", src.tree)
            v = Value(t, p)
            scope.set(p, Tile(v), src.tree)
        else:
            raise src.error(f"parameter '{p}': expected an ArrayType, an ArrayListType or a scalar TileType, got "
                            f"{t!r}", src.tree)
        args.append(v)
        names.append(p)

    body = Block(args=args)
    builder = Builder(body, src.loc(src.tree))
    ctx = FuncCtx(func.__name__, src, func.__globals__, closure_of(func), is_kernel=True,
                  local_names=frozenset(assigned_names(src.tree.body)))
    tr = Translator(builder, ctx, scope)
    limit = sys.getrecursionlimit()
    if limit < _RECURSION_LIMIT:
        sys.setrecursionlimit(_RECURSION_LIMIT)  # long expressions (a + b + ...) nest deeply
    try:
        tr.body(src.tree.body)
    except ControlSignal as exc:
        raise src.error(f"internal error: {type(exc).__name__} escaped", src.tree) from exc
    except RecursionError:
        raise src.error("kernel too deeply nested: compiling it exceeded Python's recursion limit", src.tree) from None
    finally:
        if limit < _RECURSION_LIMIT:
            sys.setrecursionlimit(limit)
        for line in tr.static_output:  # tj.static_print: once per translation, before any error it ends with
            print(line, flush=True)
    if body.terminator is None:
        body.append(ops.ReturnOp(loc=src.loc(src.tree)))
    # options['loc']: the def line, where the back end locates errors about the kernel's signature
    return ops.Function(name or func.__name__, names, body, filename=src.filename, options={"loc": src.loc(src.tree)})


__all__ = ["constant_params", "signature_params", "translate"]
