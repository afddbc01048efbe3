"""The translator: one handler per Python AST node type, registered with ``@stmt``/``@expr``.

Statements update the scope and append ops; expressions return front-end values (``values.py``).
Compile-time constants are computed in Python as they are met, so ``if`` on constants, loops over
tuples and ``tj.static_range`` unroll, and arithmetic on constants all happen here, within the
bounds of ``limits.py`` (every node translated counts against the kernel's ``Budget``). Run-time
``if``/``for``/``while`` become structured IR ops with explicit carried values.

Every node's translation runs under ``Translator.expr``/``Translator.stmt``: a ``FrontendError``
is located at the innermost node being translated, and any other exception becomes a located
"internal error" (chained), so users never see a traceback into the compiler.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import operator
from collections.abc import Callable
from typing import Any, TypeVar

from tilejit.errors import TileCompileError
from tilejit.language import tile
from tilejit.language.frontend import calls
from tilejit.language.frontend.builder import Builder, common_default, const_value, weak_dtype
from tilejit.language.frontend.limits import Budget, check_format_spec, check_iterable, range_len
from tilejit.language.frontend.params import closure_of
from tilejit.language.frontend.printing import FString, python_print
from tilejit.language.frontend.scope import (
    RECORDING,
    ControlSignal,
    FuncCtx,
    LoopCtx,
    Retype,
    Scope,
    StaticBreak,
    StaticContinue,
    assigned_names,
)
from tilejit.language.frontend.source import FrontendError, get_source
from tilejit.language.frontend.values import (
    Tile,
    Undefined,
    describe,
    is_const,
    is_number,
    shown,
)
from tilejit.language.ir import ops
from tilejit.language.ir.core import Block, Value
from tilejit.language.ir.types import DType, TileType, bool_, normalize_const

N = TypeVar("N", bound=ast.AST)

STMT: dict[type[ast.AST], Callable[[Translator, Any], None]] = {}
EXPR: dict[type[ast.AST], Callable[[Translator, Any], object]] = {}

_MISSING = object()

SYNTAX_NAMES: dict[type[ast.AST], str] = {
    ast.Lambda: "lambda", ast.ListComp: "list comprehension", ast.SetComp: "set comprehension",
    ast.DictComp: "dict comprehension", ast.GeneratorExp: "generator expression", ast.Dict: "dict display",
    ast.Set: "set display", ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield from",
    ast.NamedExpr: "assignment expression (:=)", ast.With: "with statement", ast.AsyncWith: "async with",
    ast.Try: "try statement", ast.Delete: "del statement", ast.Import: "import statement",
    ast.ImportFrom: "import statement", ast.Global: "global statement", ast.Nonlocal: "nonlocal statement",
    ast.FunctionDef: "nested function definition", ast.AsyncFunctionDef: "nested function definition",
    ast.ClassDef: "class definition", ast.AsyncFor: "async for", ast.Match: "match statement",
    ast.Starred: "starred expression",
}
if hasattr(ast, "TryStar"):
    SYNTAX_NAMES[ast.TryStar] = "try statement"


def stmt(*types: type[ast.AST]) -> Callable[[Callable[[Translator, N], None]], Callable[[Translator, N], None]]:
    """Register a statement handler for AST node ``types``."""

    def deco(fn: Callable[[Translator, N], None]) -> Callable[[Translator, N], None]:
        for t in types:
            STMT[t] = fn
        return fn

    return deco


def expr(*types: type[ast.AST]) -> Callable[[Callable[[Translator, N], object]], Callable[[Translator, N], object]]:
    """Register an expression handler for AST node ``types``."""

    def deco(fn: Callable[[Translator, N], object]) -> Callable[[Translator, N], object]:
        for t in types:
            EXPR[t] = fn
        return fn

    return deco


def syntax_name(node: ast.AST) -> str:
    return SYNTAX_NAMES.get(type(node), type(node).__name__)


def _same_const(a: object, b: object) -> bool:
    """``a`` and ``b`` are the same compile-time value (same types, equal; tuples item by item)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple | list):
        assert isinstance(b, tuple | list)
        return len(a) == len(b) and all(_same_const(x, y) for x, y in zip(a, b))
    if isinstance(a, bool | int | float | str | DType):
        return bool(a == b)
    return False


class Translator:
    """Translates one kernel (and the helpers it calls, inlined) into the current IR block."""

    def __init__(self, builder: Builder, func: FuncCtx, scope: Scope) -> None:
        self.b = builder
        self.func = func
        self.scope = scope
        self.loops: list[LoopCtx] = []
        self.dead = False
        self.if_depth = 0
        self.runtime_depth = 0
        self.active: set[object] = set()
        self.budget = Budget()
        self.static_output: list[str] = []  # the lines of tj.static_print, printed once translation ends
        self.reads = RECORDING.get()  # where values read from outside the kernel are recorded (None: nowhere)
        if self.reads is not None:
            self.reads.translated = True

    # ------------------------------------------------------------------ dispatch

    def _located(self, node: ast.AST, exc: BaseException) -> TileCompileError:
        src = self.func.source
        if isinstance(exc, FrontendError):
            return src.error(exc.message, exc.node or node)
        if isinstance(exc, RecursionError):
            return src.error(
                "expression too deeply nested: compiling it exceeded Python's recursion limit (split it into "
                "several statements, or call fewer nested helper functions)", node)
        if isinstance(exc, MemoryError):  # a bound in limits.py missed some way to build a huge value
            return src.error("too large: translating this ran out of memory (a compile-time value too large?)", node)
        return src.error(f"internal error: {type(exc).__name__}: {exc}", node)

    def expr(self, node: ast.expr) -> object:
        """Translate an expression to a front-end value."""
        saved = self.b.loc
        self.b.loc = self.func.source.loc(node)
        try:
            self.budget.step()
            handler = EXPR.get(type(node))
            if handler is None:
                raise FrontendError(f"unsupported syntax: {syntax_name(node)}")
            return handler(self, node)
        except (TileCompileError, ControlSignal):
            raise
        except FrontendError as exc:
            raise self._located(node, exc) from None
        except Exception as exc:
            raise self._located(node, exc) from exc
        finally:
            self.b.loc = saved

    def stmt(self, node: ast.stmt) -> None:
        """Translate one statement."""
        saved = self.b.loc
        self.b.loc = self.func.source.loc(node)
        try:
            self.budget.step()
            handler = STMT.get(type(node))
            if handler is None:
                raise FrontendError(f"unsupported syntax: {syntax_name(node)}")
            handler(self, node)
        except (TileCompileError, ControlSignal):
            raise
        except FrontendError as exc:
            raise self._located(node, exc) from None
        except Exception as exc:
            raise self._located(node, exc) from exc
        finally:
            self.b.loc = saved

    def body(self, stmts: list[ast.stmt]) -> None:
        """Translate statements until the end or until control cannot reach further."""
        for s in stmts:
            if self.dead:
                return
            self.stmt(s)

    # ------------------------------------------------------------------ names

    def lookup(self, name: str) -> object:
        if name in self.scope.values:
            v = self.scope.values[name]
            if isinstance(v, Undefined):
                raise FrontendError(v.reason)
            return v
        if name in self.func.local_names:
            raise FrontendError(
                f"'{name}' is not defined on every path: it is assigned in this function, but not before this use"
            )
        if name in self.func.closure:
            return normalize_const(self.func.closure[name])
        if name in self.func.globals:
            return normalize_const(self.func.globals[name])
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise FrontendError(f"name '{name}' is not defined")

    def assign(self, target: ast.expr, value: object, node: ast.AST) -> None:
        """Bind ``value`` to an assignment target (names and nested tuples of names)."""
        if isinstance(target, ast.Name):
            if isinstance(value, Undefined):
                raise FrontendError(value.reason)
            if isinstance(value, Tile) and not value.value.name:
                value.value.name = target.id
            self.scope.set(target.id, value, node)
        elif isinstance(target, ast.Tuple | ast.List):
            items = self.unpack(value, len(target.elts), target)
            for t, v in zip(target.elts, items):
                self.assign(t, v, node)
        elif isinstance(target, ast.Subscript):
            raise FrontendError(
                "cannot assign to an element: tiles are values (build a new one with tj.where) and arrays "
                "are written with tj.store or tj.scatter", target,
            )
        elif isinstance(target, ast.Attribute):
            raise FrontendError("cannot assign to an attribute in tile code", target)
        else:
            raise FrontendError(f"unsupported syntax: assignment to {syntax_name(target)}", target)

    def unpack(self, value: object, n: int, node: ast.AST) -> list[object]:
        if any(isinstance(e, ast.Starred) for e in getattr(node, "elts", ())):
            raise FrontendError("starred assignment targets are not supported", node)
        seq = calls.as_sequence(self, value)
        if seq is not None:
            items = list(seq)
            if len(items) != n:
                raise FrontendError(f"cannot unpack {len(items)} values into {n} names", node)
            return items
        raise FrontendError(f"cannot unpack {describe(value)} into {n} names", node)

    # ------------------------------------------------------------------ conversions used by handlers

    def scalar_condition(self, v: object, what: str) -> Tile:
        """A run-time bool scalar from a condition value (non-bool scalars compare != 0)."""
        if isinstance(v, Tile):
            if not v.type.is_scalar:
                raise FrontendError(
                    f"{what} must be a scalar, got a tile of shape {v.shape} (use tj.where, tj.max or "
                    "tj.sum to choose or reduce element-wise)"
                )
            return self.b.to_bool(v)
        raise FrontendError(f"{what} must be a bool scalar or a compile-time constant, got {describe(v)}")

    @staticmethod
    def const_truth(v: object) -> bool:
        try:
            return bool(v)
        except Exception as exc:
            raise FrontendError(f"cannot use {describe(v)} as a condition: {exc}") from None

    def mark_dead(self) -> None:
        self.dead = True

    def seal(self, block: Block) -> None:
        """End a block that control cannot reach the end of (both branches of a nested if left)."""
        if block.terminator is None:
            block.append(ops.ReturnOp(loc=self.b.loc))

    # ------------------------------------------------------------------ loops

    def edge_values(self, loop: LoopCtx) -> list[Value]:
        """The carried variables' current values at a loop edge (continue, break, end of body)."""
        vals: list[Value] = []
        for name, t in loop.carried.items():
            vals.append(self._carried_value(loop, name, t))
        for name, before in loop.watched.items():
            self._check_watched(loop, name, before)
        return vals

    def _where(self, name: str, loop: LoopCtx) -> ast.AST:
        return self.scope.where.get(name, loop.node)

    def _carried_value(self, loop: LoopCtx, name: str, t: TileType) -> Value:
        v = self.scope.values.get(name, _MISSING)
        line = self.func.source.position(loop.node)[0]
        if isinstance(v, Tile):
            if v.type == t:
                return v.value
            if name in loop.weak:
                raise Retype(loop, name, v.type)
            raise FrontendError(
                f"'{name}' is carried by the loop at line {line} with type {t}, but is assigned {v.type} here; "
                "a loop-carried variable must keep its type (use .astype(...), or create it before the loop "
                "with the right shape and dtype)",
                self._where(name, loop),
            )
        if is_number(v):
            try:
                return self.b.full(v, t).value
            except FrontendError:
                if name in loop.weak:
                    raise Retype(loop, name, TileType(common_default(v, t.dtype), t.shape)) from None
                raise FrontendError(
                    f"'{name}' is carried by the loop at line {line} with type {t}, but is assigned {describe(v)} here",
                    self._where(name, loop),
                ) from None
        raise FrontendError(
            f"'{name}' is carried by the loop at line {line} as a {t}, but is assigned {describe(v)} here",
            self._where(name, loop),
        )

    def _check_watched(self, loop: LoopCtx, name: str, before: object) -> None:
        v = self.scope.values.get(name, _MISSING)
        if _same_const(v, before):
            return
        line = self.func.source.position(loop.node)[0]
        if is_number(before):
            if isinstance(v, Tile):
                try:
                    if weak_dtype(before, v.dtype) == v.dtype:
                        const_value(before, v.dtype)
                        raise Retype(loop, name, v.type)
                except FrontendError:
                    pass
                raise FrontendError(
                    f"'{name}' is {before!r} before the loop at line {line} but {v.type} here; the two cannot "
                    "share one type (create it before the loop with the right dtype, e.g. tj.full)",
                    self._where(name, loop),
                )
            if is_number(v):
                raise Retype(loop, name, TileType(common_default(before, v)))
        raise FrontendError(
            f"'{name}' is reassigned inside the run-time loop at line {line} to {describe(v)} (it was "
            f"{describe(before)}); only tiles and numbers can change from one iteration to the next",
            self._where(name, loop),
        )

    def runtime_loop(
        self,
        node: ast.For | ast.While,
        kind: str,
        target: str | None,
        iv_type: TileType | None,
        cond: ast.expr | None,
        make_op: Callable[[list[Value], Block, list[Value]], ops.Op],
    ) -> None:
        """Translate a run-time loop, retrying when a variable turns out to be loop-carried (or
        needs a wider type) after the body was seen."""
        pre = self.scope
        assigned = [n for n in assigned_names(node.body) if n != target]
        carried: dict[str, TileType] = {}
        weak: set[str] = set()
        watched: dict[str, object] = {}
        for n in assigned:
            v = pre.values.get(n, _MISSING)
            if v is _MISSING or isinstance(v, Undefined):
                continue
            if isinstance(v, Tile):
                carried[n] = v.type
            else:
                watched[n] = v
        retypes: dict[str, int] = {}
        printed = len(self.static_output)
        while True:
            loop = LoopCtx(kind, self.func, node, dict(carried), set(weak), dict(watched), self.if_depth)
            try:
                self._loop_attempt(loop, pre, node, target, iv_type, cond, make_op, assigned)
                return
            except Retype as r:
                if r.loop is not loop:
                    raise
                del self.static_output[printed:]  # the body is translated again: its static_print lines too
                retypes[r.name] = retypes.get(r.name, 0) + 1
                if retypes[r.name] > 3:
                    raise FrontendError(f"the type of loop variable '{r.name}' does not settle") from None
                carried[r.name] = r.type
                watched.pop(r.name, None)
                weak.add(r.name)

    def _loop_attempt(
        self,
        loop: LoopCtx,
        pre: Scope,
        node: ast.For | ast.While,
        target: str | None,
        iv_type: TileType | None,
        cond: ast.expr | None,
        make_op: Callable[[list[Value], Block, list[Value]], ops.Op],
        assigned: list[str],
    ) -> None:
        init: list[Value] = []
        for n, t in loop.carried.items():
            v = pre.values[n]
            if isinstance(v, Tile) and v.type == t:
                init.append(v.value)
            else:
                try:
                    init.append(self.b.full(v, t).value)
                except FrontendError:
                    raise FrontendError(f"'{n}' is {describe(v)} before this loop but {t} in it") from None
        args = [Value(t, n) for n, t in loop.carried.items()]
        iv = Value(iv_type, target or "") if iv_type is not None else None
        body = Block(args=([iv] if iv is not None else []) + args)
        self.scope = pre.copy()
        for n, a in zip(loop.carried, args):
            self.scope.set(n, Tile(a))
        if target is not None and iv is not None:
            self.scope.set(target, Tile(iv), node)
        saved_dead = self.dead
        self.loops.append(loop)
        self.func.control_depth += 1
        self.runtime_depth += 1
        self.dead = False
        try:
            with self.b.at(body):
                if cond is not None:
                    self._while_condition(loop, cond)
                self.body(node.body)
                if not self.dead:
                    self.b.emit(ops.ContinueOp(values=self.edge_values(loop)))
                else:
                    self.seal(body)
        finally:
            self.scope = pre
            self.loops.pop()
            self.func.control_depth -= 1
            self.runtime_depth -= 1
            self.dead = saved_dead
        results = [Value(t, n) for n, t in loop.carried.items()]
        self.b.emit(make_op(init, body, results))
        after = pre.copy()
        for n, r in zip(loop.carried, results):
            after.set(n, Tile(r), self.scope.where.get(n))
        line = self.func.source.position(node)[0]
        for n in assigned:
            if n not in loop.carried and n not in loop.watched:
                after.set(n, Undefined(
                    f"'{n}' is not defined on every path: it is first assigned inside the run-time loop at line "
                    f"{line}, so it has no value after the loop (assign it before the loop)"
                ))
        if target is not None:
            after.set(target, Undefined(
                f"'{target}' is the variable of the run-time loop at line {line} and is not defined after it"
            ))
        self.scope = after

    def _while_condition(self, loop: LoopCtx, cond_node: ast.expr) -> None:
        c = self.expr(cond_node)
        if isinstance(c, tuple) or is_const(c):
            if not self.const_truth(c):
                self.b.emit(ops.BreakOp(values=self.edge_values(loop)))
                self.dead = True
            return
        c = self.scalar_condition(c, "the condition of a while loop")
        self.b.loc = self.func.source.loc(cond_node)
        stop = self.b.tile(ops.UnaryOp, TileType(bool_), fn="not", x=c.value)
        leave = Block(ops=[ops.BreakOp(values=self.edge_values(loop), loc=self.b.loc)])
        stay = Block(ops=[ops.YieldOp(values=[], loc=self.b.loc)])
        self.b.emit(ops.IfOp(cond=stop.value, then_body=leave, else_body=stay))

    def static_loop(self, node: ast.For, items: list[object]) -> None:
        """Unroll ``for target in items`` at compile time."""
        loop = LoopCtx("static", self.func, node, if_depth=self.if_depth)
        self.loops.append(loop)
        try:
            for item in items:
                self.assign(node.target, item, node)
                try:
                    self.body(node.body)
                except StaticContinue as s:
                    if s.loop is not loop:
                        raise
                except StaticBreak as s:
                    if s.loop is not loop:
                        raise
                    break
                if self.dead:
                    break
        finally:
            self.loops.pop()

    # ------------------------------------------------------------------ if

    def runtime_if(self, node: ast.AST, cond: Tile, then_stmts: list[ast.stmt], else_stmts: list[ast.stmt]) -> None:
        """Translate both branches into an IfOp; variables changed in a branch become its results."""
        pre = self.scope
        saved_dead = self.dead
        branches: list[tuple[Block, Scope, bool]] = []
        for stmts in (then_stmts, else_stmts):
            block = Block()
            self.scope = pre.copy()
            self.dead = False
            self.if_depth += 1
            self.func.control_depth += 1
            self.runtime_depth += 1
            try:
                with self.b.at(block):
                    self.body(stmts)
                    if self.dead:
                        self.seal(block)
                branches.append((block, self.scope, self.dead))
            finally:
                self.if_depth -= 1
                self.func.control_depth -= 1
                self.runtime_depth -= 1
                self.scope = pre
                self.dead = saved_dead
        live = [(blk, sc) for blk, sc, dead in branches if not dead]
        line = self.func.source.position(node)[0]
        after = pre.copy()
        names: list[str] = []
        for _, sc in live:
            for n, v in sc.values.items():
                if pre.values.get(n, _MISSING) is not v and n not in names:
                    names.append(n)
        yields: list[tuple[str, TileType]] = []
        for n in names:
            branch_values = [sc.values.get(n, _MISSING) for _, sc in live]
            where = next((sc.where[n] for _, sc in live if n in sc.where), None)
            merged = self._merge(n, branch_values, line)
            if isinstance(merged, TileType):
                yields.append((n, merged))
            else:
                after.set(n, merged, where)
            if where is not None:
                after.where[n] = where
        for blk, sc in live:
            with self.b.at(blk):
                vals: list[Value] = []
                for n, t in yields:
                    v = sc.values[n]
                    vals.append(v.value if isinstance(v, Tile) else self.b.full(v, t).value)
                self.b.emit(ops.YieldOp(values=vals))
        results = [Value(t, n) for n, t in yields]
        (then_blk, _, _), (else_blk, _, _) = branches
        self.b.emit(ops.IfOp(cond=cond.value, then_body=then_blk, else_body=else_blk, results=results))
        for (n, _), r in zip(yields, results):
            after.values[n] = Tile(r)
        self.scope = after
        if not live:
            self.dead = True

    def _merge(self, name: str, vals: list[object], line: int) -> object:
        """How a variable joins after a run-time if: a constant, a type to yield, or Undefined."""
        if len(vals) == 1:
            v = vals[0]
            return v.type if isinstance(v, Tile) else v
        a, b = vals
        if a is b:
            return a
        if a is _MISSING or b is _MISSING or isinstance(a, Undefined) or isinstance(b, Undefined):
            return Undefined(
                f"'{name}' is not defined on every path: it is assigned in only one branch of the if at line "
                f"{line} (assign it before the if, or in both branches)"
            )
        if isinstance(a, Tile) and isinstance(b, Tile):
            if a.type == b.type:
                return a.type
            return Undefined(
                f"'{name}' is {a.type} in one branch of the if at line {line} and {b.type} in the other; "
                "give it the same type in both branches"
            )
        if isinstance(a, Tile) or isinstance(b, Tile):
            t, c = (a, b) if isinstance(a, Tile) else (b, a)
            assert isinstance(t, Tile)
            if is_number(c):
                try:
                    if weak_dtype(c, t.dtype) == t.dtype:
                        const_value(c, t.dtype)
                        return t.type
                except FrontendError:
                    pass
            return Undefined(
                f"'{name}' is {t.type} in one branch of the if at line {line} and {describe(c)} in the other; "
                "give it the same type in both branches"
            )
        if is_number(a) and is_number(b):
            if type(a) is type(b) and a == b:
                return a
            return TileType(common_default(a, b))
        try:
            same = type(a) is type(b) and bool(a == b)
        except Exception:
            same = False
        if same:
            return a
        return Undefined(
            f"'{name}' has different compile-time values in the two branches of the run-time if at line "
            f"{line} ({describe(a)} and {describe(b)})"
        )

    # ------------------------------------------------------------------ calls

    def call(self, callee: object, args: list[object], kwargs: dict[str, object], node: ast.AST) -> object:
        return calls.call(self, callee, args, kwargs, node)

    def inline(self, func: Callable[..., Any], args: list[object], kwargs: dict[str, object]) -> object:
        """Translate a ``@tj.function`` call in place: a new scope with the arguments bound."""
        name = func.__name__
        code = func.__code__
        if code in self.active:
            raise FrontendError(f"recursive call of @tj.function '{name}' is not supported (calls are inlined)")
        try:
            bound = inspect.signature(func).bind(*args, **kwargs)
        except TypeError as exc:
            raise FrontendError(f"{name}(): {exc}") from None
        bound.apply_defaults()
        src = get_source(func)
        roots = None if self.reads is None else self.reads.roots(func)
        ctx = FuncCtx(name, src, func.__globals__, closure_of(func), is_kernel=False,
                      local_names=frozenset(assigned_names(src.tree.body)), roots=roots)
        if self.reads is not None:
            self.reads.helper(roots, func)
        scope = Scope()
        for k, v in bound.arguments.items():
            scope.set(k, normalize_const(v) if is_const(v) else v, src.tree)
        saved = (self.func, self.scope, self.loops, self.dead)
        self.func, self.scope, self.loops, self.dead = ctx, scope, [], False
        self.active.add(code)
        site = self.b.loc
        try:
            self.body(src.tree.body)
        except TileCompileError as exc:
            if exc.filename is None or "(in @tj.function" in exc.message:
                raise
            note = f" (in @tj.function '{name}' called at {site.filename}:{site.line})"
            raise TileCompileError(exc.message + note, exc.filename, exc.line, exc.col, exc.source_line) from exc
        finally:
            self.func, self.scope, self.loops, self.dead = saved
            self.active.discard(code)
        return ctx.return_value


# ====================================================================== statements


@stmt(ast.Expr)
def _expr_stmt(tr: Translator, node: ast.Expr) -> None:
    if isinstance(node.value, ast.Constant):
        return  # docstrings and bare constants
    tr.expr(node.value)


@stmt(ast.Pass)
def _pass(tr: Translator, node: ast.Pass) -> None:
    return


@stmt(ast.Assign)
def _assign(tr: Translator, node: ast.Assign) -> None:
    value = tr.expr(node.value)
    for target in node.targets:
        tr.assign(target, value, node)


@stmt(ast.AnnAssign)
def _ann_assign(tr: Translator, node: ast.AnnAssign) -> None:
    if node.value is None:
        return
    tr.assign(node.target, tr.expr(node.value), node)


@stmt(ast.AugAssign)
def _aug_assign(tr: Translator, node: ast.AugAssign) -> None:
    if not isinstance(node.target, ast.Name):
        tr.assign(node.target, None, node)  # raises the right error for subscripts/attributes
        return
    current = tr.lookup(node.target.id)
    value = binop(tr, type(node.op), current, tr.expr(node.value))
    tr.assign(node.target, value, node)


@stmt(ast.If)
def _if(tr: Translator, node: ast.If) -> None:
    test = tr.expr(node.test)
    if isinstance(test, tuple) or is_const(test):
        tr.body(node.body if tr.const_truth(test) else node.orelse)
        return
    cond = tr.scalar_condition(test, "the condition of an if")
    tr.runtime_if(node, cond, node.body, node.orelse)


@stmt(ast.For)
def _for(tr: Translator, node: ast.For) -> None:
    if node.orelse:
        raise FrontendError("for ... else is not supported in tile code")
    it = node.iter
    if isinstance(it, ast.Call) and not it.keywords:
        callee = tr.expr(it.func)
        if callee is builtins.range:
            _range_loop(tr, node, it)
            return
        items = tr.expr(it)
    else:
        items = tr.expr(it)
    seq = calls.as_sequence(tr, items)
    if seq is not None:
        tr.static_loop(node, list(seq))
        return
    raise FrontendError(
        f"a kernel loop iterates over range(...), tj.static_range(...) or a tuple; got {describe(items)}", it
    )


def _range_loop(tr: Translator, node: ast.For, call: ast.Call) -> None:
    if not isinstance(node.target, ast.Name):
        raise FrontendError("the variable of a run-time for loop must be a single name", node.target)
    args = [tr.expr(a) for a in call.args]
    if not 1 <= len(args) <= 3:
        raise FrontendError(f"range expected 1 to 3 arguments, got {len(args)}", call)
    if len(args) == 1:
        args = [0, args[0], 1]
    elif len(args) == 2:
        args = [args[0], args[1], 1]
    names = ("start", "stop", "step")
    bounds = [tr.b.index_scalar(a, f"range() {w}") if isinstance(a, Tile) else a for a, w in zip(args, names)]
    for a, w in zip(bounds, names):
        if not isinstance(a, Tile) and not (isinstance(a, int) and not isinstance(a, bool)):
            raise FrontendError(f"range() {w} must be an integer, got {describe(a)}", call)
    step = bounds[2]
    if isinstance(step, int) and step <= 0:
        raise FrontendError(
            f"range() step must be positive in a run-time loop, got {step} (count up and compute the index)", call
        )
    wide = any(isinstance(a, Tile) and a.dtype.bits == 64 for a in bounds) or any(
        isinstance(a, int) and not -(1 << 31) <= a < (1 << 31) for a in bounds
    )
    from tilejit.language.ir.types import int32, int64

    iv_dtype = int64 if wide else int32
    unroll = 1
    if all(isinstance(a, int) for a in bounds):
        lo, hi, st = bounds
        assert isinstance(lo, int) and isinstance(hi, int) and isinstance(st, int)
        trips = range_len(range(lo, hi, st))
        if 0 < trips <= 8:
            unroll = trips
    lower, upper, stepv = (tr.b.full(a, TileType(iv_dtype)) for a in bounds)

    def make(init: list[Value], body: Block, results: list[Value]) -> ops.Op:
        return ops.ForOp(
            lower=lower.value, upper=upper.value, step=stepv.value, init=init, body=body, unroll=unroll,
            results=results,
        )

    tr.runtime_loop(node, "for", node.target.id, TileType(iv_dtype), None, make)


@stmt(ast.While)
def _while(tr: Translator, node: ast.While) -> None:
    if node.orelse:
        raise FrontendError("while ... else is not supported in tile code")
    scratch = Block()
    saved_scope = tr.scope
    tr.scope = saved_scope.copy()
    try:
        with tr.b.at(scratch):
            first = tr.expr(node.test)
    finally:
        tr.scope = saved_scope
    if (isinstance(first, tuple) or is_const(first)) and not tr.const_truth(first):
        return

    def make(init: list[Value], body: Block, results: list[Value]) -> ops.Op:
        return ops.LoopOp(init=init, body=body, results=results)

    tr.runtime_loop(node, "while", None, None, node.test, make)


@stmt(ast.Break, ast.Continue)
def _break_continue(tr: Translator, node: ast.Break | ast.Continue) -> None:
    word = "break" if isinstance(node, ast.Break) else "continue"
    if not tr.loops:
        raise FrontendError(f"'{word}' outside a loop")
    loop = tr.loops[-1]
    if loop.kind == "static":
        if tr.if_depth != loop.if_depth:
            raise FrontendError(
                f"'{word}' in an unrolled loop (tj.static_range or a tuple) cannot depend on a run-time "
                "condition; use a run-time range() loop"
            )
        raise StaticBreak(loop) if word == "break" else StaticContinue(loop)
    values = tr.edge_values(loop)
    tr.b.emit(ops.BreakOp(values=values) if word == "break" else ops.ContinueOp(values=values))
    tr.mark_dead()


@stmt(ast.Return)
def _return(tr: Translator, node: ast.Return) -> None:
    value = tr.expr(node.value) if node.value is not None else None
    if tr.func.is_kernel:
        if node.value is not None:
            raise FrontendError("a kernel cannot return a value; write results to an array with tj.store")
        if tr.func.control_depth > 0:
            tr.b.emit(ops.ReturnOp())
        tr.mark_dead()
        return
    if tr.func.control_depth > 0:
        raise FrontendError(
            f"@tj.function '{tr.func.name}' can only return outside run-time if/for/while statements "
            "(compute the value in a variable and return it at the end)"
        )
    tr.func.return_value = value
    tr.func.returned = True
    tr.mark_dead()


def _as_text(v: object) -> str:
    """``str(v)`` for a message, cut when long; integers (and exceptions made of them) shortened as
    ``shown`` does, the same on every Python (3.11+ refuse to print an integer past 4300 digits)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return shown(v)
    if isinstance(v, BaseException) and any(isinstance(a, int) and a.bit_length() > 64 for a in v.args):
        return shown(v.args[0] if len(v.args) == 1 else v.args)
    try:
        text = str(v)
    except (ValueError, RecursionError):
        return shown(v)
    return text if len(text) <= 1000 else text[:1000] + f"... ({len(text)} characters)"


@stmt(ast.Assert)
def _assert(tr: Translator, node: ast.Assert) -> None:
    test = tr.expr(node.test)
    if not (isinstance(test, tuple) or is_const(test)):
        raise FrontendError("assert needs a compile-time condition (run-time asserts are not supported)")
    if not tr.const_truth(test):
        msg = tr.expr(node.msg) if node.msg is not None else None
        raise FrontendError("assertion failed" + (f": {_as_text(msg)}" if msg is not None else ""))


@stmt(ast.Raise)
def _raise(tr: Translator, node: ast.Raise) -> None:
    if tr.runtime_depth > 0:
        raise FrontendError("raise is only supported on compile-time paths (not inside a run-time if or loop)")
    if node.exc is None:
        raise FrontendError("a bare 'raise' (re-raise) is not supported in tile code: raise an exception, "
                            "e.g. raise ValueError(\"...\")")
    exc = tr.expr(node.exc)
    if isinstance(exc, type) and issubclass(exc, BaseException):
        raise FrontendError(f"the kernel raised {exc.__name__}")
    if isinstance(exc, BaseException):
        text = _as_text(exc)
        raise FrontendError(f"the kernel raised {type(exc).__name__}: {text}" if text else
                            f"the kernel raised {type(exc).__name__}")
    raise FrontendError(f"raise needs an exception, got {describe(exc)}")


# ====================================================================== expressions


@expr(ast.Constant)
def _constant(tr: Translator, node: ast.Constant) -> object:
    if isinstance(node.value, complex | bytes):
        raise FrontendError(f"{type(node.value).__name__} constants are not supported in tile code")
    return tr.budget.check(node.value, "the constant")


@expr(ast.Name)
def _name(tr: Translator, node: ast.Name) -> object:
    value = tr.lookup(node.id)
    if tr.reads is not None and node.id not in tr.scope.values:
        tr.reads.name(node, tr.func.roots, node.id, value)
    return value


def _expand(tr: Translator, nodes: list[ast.expr], printing: bool = False) -> list[object]:
    """Translate a list of expressions, unpacking ``*starred`` sequences in place; ``printing``: the arguments of
    a print, whose f-strings may hold run-time values."""
    out: list[object] = []
    for e in nodes:
        if isinstance(e, ast.Starred):
            v = tr.expr(e.value)
            seq = calls.as_sequence(tr, v)
            if seq is None:
                raise FrontendError(f"cannot unpack {describe(v)} with *", e)
            out.extend(seq)
        elif printing and isinstance(e, ast.JoinedStr):
            out.append(_print_fstring(tr, e))
        else:
            out.append(tr.expr(e))
    return out


@expr(ast.Tuple, ast.List)
def _tuple(tr: Translator, node: ast.Tuple | ast.List) -> object:
    return tr.budget.check(tuple(_expand(tr, node.elts)), "the tuple")


@expr(ast.JoinedStr)
def _fstring(tr: Translator, node: ast.JoinedStr) -> object:
    parts = _fstring_parts(tr, node, printing=False)
    return tr.budget.check("".join(p for p in parts if isinstance(p, str)), "the f-string")


def _print_fstring(tr: Translator, node: ast.JoinedStr) -> object:
    """An f-string argument of ``print()``: a string, or its parts when it has run-time values (``FString``)."""
    parts = _fstring_parts(tr, node, printing=True)
    if all(isinstance(p, str) for p in parts):
        return tr.budget.check("".join(p for p in parts if isinstance(p, str)), "the f-string")
    return FString(tuple(parts))


def _fstring_parts(tr: Translator, node: ast.JoinedStr, printing: bool) -> list[str | Tile]:
    """An f-string's parts in order: its text, and each field formatted as Python does when it is a compile-time
    value; a run-time value (tiles and scalars, in a print's argument only: ``printing``) is kept as it is, for
    the device to write."""
    parts: list[str | Tile] = []
    for v in node.values:
        if isinstance(v, ast.Constant):
            parts.append(str(v.value))
            continue
        assert isinstance(v, ast.FormattedValue)
        val = tr.expr(v.value)
        if is_const(val):
            parts.append(_format_field(tr, v, val))
        elif not printing:
            raise FrontendError("f-strings can only format compile-time values (print() also takes run-time ones, "
                                "as f'x = {x}')", v)
        elif not isinstance(val, Tile):
            raise FrontendError(f"print() cannot print {describe(val)}", v.value)
        elif v.format_spec is not None or v.conversion != -1:
            raise FrontendError(
                "print() writes a run-time value of an f-string in its one device format: write f'{x}' (not "
                "f'{x:.3f}' or f'{x!r}'); format specs and conversions work on compile-time values", v.value)
        else:
            parts.append(val)
    return parts


def _format_field(tr: Translator, v: ast.FormattedValue, val: object) -> str:
    """One field of an f-string, a compile-time value, formatted as Python does (conversion, then spec)."""
    tr.budget.check(val, "the value formatted by the f-string")
    spec = str(tr.expr(v.format_spec)) if v.format_spec is not None else ""
    check_format_spec(spec)
    convs: dict[int, Callable[[object], str]] = {115: str, 114: repr, 97: ascii}
    conv = convs.get(v.conversion)
    try:
        text = format(conv(val) if conv else val, spec)
    except (ValueError, TypeError) as exc:
        raise FrontendError(f"cannot format {describe(val)}" + (f" with {spec!r}" if spec else "")
                            + f": {exc}", v) from None
    tr.budget.check(text, "the f-string")
    return text


@expr(ast.Attribute)
def _attribute(tr: Translator, node: ast.Attribute) -> object:
    reads = tr.reads
    obj = tr.expr(node.value if reads is None else reads.base(node.value))
    value = calls.get_attribute(tr, obj, node.attr)
    if reads is not None:
        reads.attr(node, obj, value)
    return value


@expr(ast.Subscript)
def _subscript(tr: Translator, node: ast.Subscript) -> object:
    reads = tr.reads
    obj = tr.expr(node.value if reads is None else reads.base(node.value))
    index = tr.expr(node.slice)
    value = calls.subscript(tr, obj, index)
    if reads is not None:
        reads.item(node, obj, index, value)
    return value


@expr(ast.Slice)
def _slice(tr: Translator, node: ast.Slice) -> object:
    parts = [tr.expr(p) if p is not None else None for p in (node.lower, node.upper, node.step)]
    if not all(is_const(p) for p in parts):
        raise FrontendError("slice bounds must be compile-time constants")
    return slice(*parts)


@expr(ast.Call)
def _call(tr: Translator, node: ast.Call) -> object:
    callee = tr.expr(node.func)
    printing = callee is builtins.print or callee is tile.print
    args = _expand(tr, node.args, printing)
    kwargs: dict[str, object] = {}
    for k in node.keywords:
        if k.arg is None:
            m = tr.expr(k.value)
            if not isinstance(m, dict):
                raise FrontendError(f"cannot unpack {describe(m)} with **", k)
            kwargs.update(m)
        else:
            kwargs[k.arg] = tr.expr(k.value)
    if callee is builtins.print:
        python_print(tr, args, kwargs)
        return None
    return tr.call(callee, args, kwargs, node)


_BINOPS: dict[type[ast.AST], tuple[str, str, Callable[[Any, Any], Any]]] = {
    ast.Add: ("add", "+", operator.add),
    ast.Sub: ("sub", "-", operator.sub),
    ast.Mult: ("mul", "*", operator.mul),
    ast.Div: ("truediv", "/", operator.truediv),
    ast.FloorDiv: ("floordiv", "//", operator.floordiv),
    ast.Mod: ("mod", "%", operator.mod),
    ast.Pow: ("pow", "**", operator.pow),
    ast.BitAnd: ("and", "&", operator.and_),
    ast.BitOr: ("or", "|", operator.or_),
    ast.BitXor: ("xor", "^", operator.xor),
    ast.LShift: ("lshift", "<<", operator.lshift),
    ast.RShift: ("rshift", ">>", operator.rshift),
    ast.MatMult: ("matmul", "@", operator.matmul),
}


def fold(tr: Translator, fn: Callable[..., Any], symbol: str, *args: object) -> object:
    """Apply a Python operator to compile-time constants, with errors as FrontendError; results that
    would be too large (``limits.py``) are refused before Python starts computing them."""
    if len(args) == 2:
        tr.budget.check_binary(symbol, *args)
    try:
        result = normalize_const(fn(*args))
    except ZeroDivisionError:
        raise FrontendError(f"division by zero in the compile-time expression ({symbol})") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise FrontendError(f"{symbol} on compile-time values failed: {exc}") from None
    return tr.budget.check(result, f"the compile-time result of {symbol}")


def binop(tr: Translator, op: type[ast.AST], a: object, b: object) -> object:
    fn, symbol, pyop = _BINOPS[op]
    if is_const(a) and is_const(b):
        return fold(tr, pyop, symbol, a, b)
    if fn == "matmul":
        return calls.matmul_values(tr, a, b)
    for v in (a, b):
        if not isinstance(v, Tile) and not is_number(v):
            raise FrontendError(f"unsupported operand for {symbol}: {describe(v)}")
    return tr.b.binary(fn, a, b, symbol)


@expr(ast.BinOp)
def _binop(tr: Translator, node: ast.BinOp) -> object:
    if type(node.op) not in _BINOPS:
        raise FrontendError(f"unsupported syntax: operator {type(node.op).__name__}")
    return binop(tr, type(node.op), tr.expr(node.left), tr.expr(node.right))


@expr(ast.UnaryOp)
def _unaryop(tr: Translator, node: ast.UnaryOp) -> object:
    v = tr.expr(node.operand)
    if is_const(v) or isinstance(v, tuple):
        pyop: dict[type[ast.AST], Callable[[Any], Any]] = {
            ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_, ast.Invert: operator.invert,
        }
        if isinstance(node.op, ast.Not):
            return not tr.const_truth(v)
        return fold(tr, pyop[type(node.op)], type(node.op).__name__, v)
    if not isinstance(v, Tile):
        raise FrontendError(f"unsupported operand: {describe(v)}")
    if isinstance(node.op, ast.UAdd):
        return v
    if isinstance(node.op, ast.Not):
        c = tr.scalar_condition(v, "the operand of 'not'")
        return tr.b.unary("not", c)
    return tr.b.unary("neg" if isinstance(node.op, ast.USub) else "invert", v)


def _bool_scalar(tr: Translator, v: object, word: str) -> Tile:
    if isinstance(v, Tile) and not v.type.is_scalar:
        raise FrontendError(f"'{word}' needs scalar operands; use & and | for element-wise logic on tiles")
    return tr.scalar_condition(v, f"an operand of '{word}'")


@expr(ast.BoolOp)
def _boolop(tr: Translator, node: ast.BoolOp) -> object:
    is_and = isinstance(node.op, ast.And)
    word = "and" if is_and else "or"
    result = tr.expr(node.values[0])
    for operand_node in node.values[1:]:
        if isinstance(result, tuple) or is_const(result):
            if tr.const_truth(result) != is_and:
                return result  # short-circuit on a constant
            result = tr.expr(operand_node)
            continue
        lhs = _bool_scalar(tr, result, word)
        rhs = tr.expr(operand_node)
        if isinstance(rhs, tuple) or is_const(rhs):
            if tr.const_truth(rhs) == is_and:
                result = lhs  # x and True == x; x or False == x
            else:
                result = not is_and  # x and False == False; x or True == True
            continue
        result = tr.b.binary("and" if is_and else "or", lhs, _bool_scalar(tr, rhs, word))
    return result


_CMPOPS: dict[type[ast.AST], tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Eq: ("eq", operator.eq), ast.NotEq: ("ne", operator.ne), ast.Lt: ("lt", operator.lt),
    ast.LtE: ("le", operator.le), ast.Gt: ("gt", operator.gt), ast.GtE: ("ge", operator.ge),
    ast.Is: ("is", operator.is_), ast.IsNot: ("is not", operator.is_not),
    ast.In: ("in", lambda a, b: a in b), ast.NotIn: ("not in", lambda a, b: a not in b),
}


def _compare_pair(tr: Translator, op: ast.cmpop, a: object, b: object) -> object:
    fn, pyop = _CMPOPS[type(op)]
    if fn in ("is", "is not"):
        if is_const(a) and is_const(b):
            return pyop(a, b)
        if a is None or b is None:
            return fn == "is not"
        raise FrontendError(f"'{fn}' compares compile-time values only (use == for tiles)")
    if fn in ("in", "not in"):
        if is_const(a) and is_const(b):
            if isinstance(b, range) and not isinstance(a, int):
                check_iterable(b, f"'{fn}': ")  # Python compares a non-int with every item of a range
            return fold(tr, pyop, fn, a, b)
        raise FrontendError(f"'{fn}' works on compile-time values only")
    if is_const(a) and is_const(b):
        return fold(tr, pyop, fn, a, b)
    for v in (a, b):
        if not isinstance(v, Tile) and not is_number(v):
            raise FrontendError(f"cannot compare {describe(v)}")
    return tr.b.compare(fn, a, b)


@expr(ast.Compare)
def _compare(tr: Translator, node: ast.Compare) -> object:
    left = tr.expr(node.left)
    result: object = True
    for op, right_node in zip(node.ops, node.comparators):
        right = tr.expr(right_node)
        r = _compare_pair(tr, op, left, right)
        if isinstance(result, bool) and result is True:
            result = r
        elif is_const(r):
            if not tr.const_truth(r):
                return False
        elif is_const(result):
            if not tr.const_truth(result):
                return False
            result = r
        else:
            result = tr.b.binary("and", result, r)
        if is_const(result) and not tr.const_truth(result):
            return result
        left = right
    return result


@expr(ast.IfExp)
def _ifexp(tr: Translator, node: ast.IfExp) -> object:
    test = tr.expr(node.test)
    if isinstance(test, tuple) or is_const(test):
        return tr.expr(node.body if tr.const_truth(test) else node.orelse)
    cond = tr.scalar_condition(test, "the condition of a conditional expression")
    start = len(tr.b.block.ops)
    x = tr.expr(node.body)
    y = tr.expr(node.orelse)
    for op in tr.b.block.ops[start:]:
        if op.has_side_effects or any(o.has_side_effects for r in op.regions() for o in r.walk()):
            raise FrontendError(
                "both sides of a run-time conditional expression are evaluated, so they must not write memory "
                "or use atomics; use an if statement"
            )
    if is_const(x) and is_const(y) and type(x) is type(y) and x == y:
        return x
    for v in (x, y):
        if not isinstance(v, Tile) and not is_number(v):
            raise FrontendError(f"a run-time conditional expression must give tiles or numbers, not {describe(v)}")
    return tr.b.select(cond, x, y)

