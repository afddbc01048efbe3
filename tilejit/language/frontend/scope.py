"""Variables and the translation contexts around them: functions being inlined and loops.

A ``Scope`` maps names to front-end values (see ``values.py``) and remembers where each was last
assigned, so type errors about loop-carried or merged variables can point at the assignment.
``Reads`` records every value a translation reads from outside the kernel, for the disk cache.
"""

from __future__ import annotations

import ast
import builtins
import enum
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from tilejit.language.frontend.source import Source
from tilejit.language.frontend.values import RUNTIME_TYPES
from tilejit.language.ir.types import DType, TileType
from tilejit.language.tile import TileFunction

#: One step from a value to another: ``("env", name)`` a name the function at hand reads (its closure, then
#: its globals, then builtins), ``("attr", name)``, ``("item", key)`` (a key spec: ``("v", literal)``,
#: ``("dtype", name)``, ``("tuple", specs)``, ``("slice", start, stop, step)`` or ``("path", path)``),
#: ``("defaults",)`` / ``("kwdefaults",)`` a function's default values.
Step = tuple[Any, ...]
#: The steps from the kernel's Python function to a value (``tilejit.api.kernel._follow`` takes them again).
Path = tuple[Step, ...]


class Scope:
    """Local variables of the function being translated, at one point of its control flow."""

    def __init__(self, values: dict[str, object] | None = None, where: dict[str, ast.AST] | None = None) -> None:
        self.values: dict[str, object] = dict(values or {})
        self.where: dict[str, ast.AST] = dict(where or {})

    def copy(self) -> Scope:
        return Scope(self.values, self.where)

    def get(self, name: str, default: object = None) -> object:
        return self.values.get(name, default)

    def __contains__(self, name: str) -> bool:
        return name in self.values

    def set(self, name: str, value: object, node: ast.AST | None = None) -> None:
        self.values[name] = value
        if node is not None:
            self.where[name] = node


@dataclass
class FuncCtx:
    """One Python function being translated: the kernel itself or an inlined ``@tj.function``."""

    name: str
    source: Source
    globals: dict[str, Any]
    closure: dict[str, Any]
    is_kernel: bool
    #: names assigned anywhere in the body (Python's locals): never looked up in globals
    local_names: frozenset[str] = frozenset()
    #: the paths that reach this function from the kernel's (``((),)`` for the kernel; None: not known)
    roots: tuple[Path, ...] | None = ((),)
    #: run-time ifs/loops opened inside this function (a helper may only return outside them)
    control_depth: int = 0
    returned: bool = False
    return_value: object = None


@dataclass
class LoopCtx:
    """A loop being translated. Run-time loops (``for``/``while``) carry variables through the
    IR; static loops (``tj.static_range``, tuples) are unrolled and only track break/continue."""

    kind: str  # 'for', 'while' or 'static'
    func: FuncCtx
    node: ast.AST
    #: carried variable -> its type (block argument and result of the loop op)
    carried: dict[str, TileType] = field(default_factory=dict)
    #: carried variables whose value before the loop was a Python number (retyped on demand)
    weak: set[str] = field(default_factory=set)
    #: names assigned in the loop that held constants (or arrays) before it: must stay unchanged
    watched: dict[str, object] = field(default_factory=dict)
    #: run-time ifs open when the loop began (static break/continue must not be under a new one)
    if_depth: int = 0


class ControlSignal(Exception):
    """Internal non-error unwinding (never shown to users; never wrapped as an internal error)."""


class Retype(ControlSignal):
    """A loop must be translated again: ``name`` has to be carried with type ``type``."""

    def __init__(self, loop: LoopCtx, name: str, type: TileType) -> None:
        super().__init__(name)
        self.loop = loop
        self.name = name
        self.type = type


class StaticBreak(ControlSignal):
    """``break`` in an unrolled loop, on a compile-time path."""

    def __init__(self, loop: LoopCtx) -> None:
        super().__init__()
        self.loop = loop


class StaticContinue(ControlSignal):
    """``continue`` in an unrolled loop, on a compile-time path."""

    def __init__(self, loop: LoopCtx) -> None:
        super().__init__()
        self.loop = loop


def assigned_names(stmts: list[ast.stmt]) -> list[str]:
    """Names stored by ``stmts`` (assignments, loop targets...) in first-appearance order.

    An explicit stack, not recursion: a long expression (``a + b + ... ``) nests deeply."""
    seen: dict[str, None] = {}
    stack: list[ast.AST] = list(reversed(stmts))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store):
                seen.setdefault(node.id, None)
            continue
        if isinstance(node, ast.FunctionDef):
            seen.setdefault(node.name, None)
            continue
        if isinstance(node, ast.Lambda):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
    return list(seen)


_LITERALS = (type(None), bool, int, float, str, bytes)
_PURE = frozenset({*_LITERALS, tuple, list, dict, range, slice, DType})
_MAX_PATHS = 8  # paths kept for one object reached several ways; more, and reads from it are not recorded
_ITEMS = 256  # items of a container read whole that are given paths of their own (a helper in a tuple...)
_REGISTER = 4096  # objects one translation gives paths to (reads from others are refused)


class Reads:
    """Every value a translation reads from outside the kernel, by the path that reaches it from the kernel's
    Python function (names, then attributes and constant items), for the kernel-level disk cache.

    A value the code reads only to read an attribute or item of it (``CFG`` in ``CFG["add"]``) is not
    recorded itself: the path to the attribute or item goes through it. Objects read whole keep their paths
    (by identity) so that attributes or items read from them later (a helper's parameter, a loop variable)
    are recorded too, and an inlined helper's names are read relative to the paths that reached it.
    ``opaque`` says why the translation read something that no path reaches: that kernel is not cached.
    """

    def __init__(self) -> None:
        self.values: dict[Path, object] = {}  # path -> the value read there, in reading order
        self.opaque: str | None = None
        self.translated = False
        self._known: dict[int, tuple[object, list[Path] | None]] = {}  # id -> (object, its paths; None: too many)
        self._room = _REGISTER
        self._bases: set[ast.AST] = set()
        self._stash: dict[ast.AST, list[Path]] = {}  # a base node -> the paths of its value

    def refuse(self, why: str) -> None:
        """Keep the kernel out of the disk cache: it read something no path reaches (the first reason is kept)."""
        if self.opaque is None:
            self.opaque = why

    def base(self, node: ast.expr) -> ast.expr:
        """Mark ``node`` as evaluated only to read an attribute or item of its value; returns ``node``."""
        self._bases.add(node)
        self._stash.pop(node, None)
        return node

    def name(self, node: ast.AST, roots: tuple[Path, ...] | None, name: str, value: object) -> None:
        """``name`` was found outside the function at hand (closure, globals or builtins): it is ``value``."""
        self._guarded(self._name, node, roots, name, value)

    def attr(self, node: ast.Attribute, obj: object, value: object) -> None:
        """``node`` read attribute ``node.attr`` of ``obj`` (the value of ``node.value``): it is ``value``."""
        self._guarded(self._derived, node, obj, ("attr", node.attr), value)

    def item(self, node: ast.Subscript, obj: object, index: object, value: object) -> None:
        """``node`` read item ``index`` of ``obj`` (the value of ``node.value``): it is ``value``."""
        self._guarded(self._item, node, obj, index, value)

    def helper(self, roots: tuple[Path, ...] | None, func: Any) -> None:
        """A helper is inlined: it must have been read from outside (its source and names then reach the
        record through its paths ``roots``); its default parameter values were read when it was defined."""
        self._guarded(self._helper, roots, func)

    def roots(self, func: object) -> tuple[Path, ...] | None:
        """The paths that reach the function ``func`` (an inlined helper), or None when none is known."""
        paths = self._paths_of(func)
        return tuple(paths) if paths else None

    # ------------------------------------------------------------------ internals

    def _guarded(self, record: Any, *args: Any) -> None:
        """``record(*args)``; a failure only keeps the kernel out of the cache, never fails its compile."""
        try:
            record(*args)
        except Exception as exc:
            self.refuse(f"recording a read failed: {type(exc).__name__}: {exc}")

    def _name(self, node: ast.AST, roots: tuple[Path, ...] | None, name: str, value: object) -> None:
        if not roots:
            self.refuse(f"the @tj.function that reads '{name}' was reached through a value with no recorded path")
            return
        if value is builtins.hash:
            self.refuse("hash() of a str differs between processes")
        self._reached(node, [(*root, ("env", name)) for root in roots], value)

    def _item(self, node: ast.Subscript, obj: object, index: object, value: object) -> None:
        spec = self._key_spec(index, 0)
        self._derived(node, obj, None if spec is None else ("item", spec), value)

    def _helper(self, roots: tuple[Path, ...] | None, func: Any) -> None:
        if not roots:
            self.refuse(f"the @tj.function '{func.__name__}' was reached through a value with no recorded path "
                        "(a constant parameter?)")
            return
        for attr, step in (("__defaults__", ("defaults",)), ("__kwdefaults__", ("kwdefaults",))):
            value = getattr(func, attr, None)
            if value is not None:
                self._reached(None, [(*root, step) for root in roots], value)

    def _paths_of(self, obj: object) -> list[Path] | None:
        known = self._known.get(id(obj))
        return known[1] if known is not None and known[0] is obj else None

    def _derived(self, node: ast.Attribute | ast.Subscript, obj: object, step: Step | None, value: object) -> None:
        self._bases.discard(node.value)
        paths = self._stash.pop(node.value, None)
        if isinstance(obj, RUNTIME_TYPES):
            return
        if not paths:
            paths = self._paths_of(obj)
        if not paths:
            if type(obj) in _PURE or (isinstance(obj, enum.Enum) and step in (("attr", "name"), ("attr", "value"))):
                return  # built in the kernel, or a constant parameter (its value is in the cache key)
            self.refuse(f"read {_step_text(step)} of a {type(obj).__qualname__} that no recorded path reaches")
            return
        if step is None:
            self.refuse(f"read an item of a {type(obj).__qualname__} with a key that cannot be recorded")
            return
        self._reached(node, [(*path, step) for path in paths], value)

    def _reached(self, node: ast.AST | None, paths: list[Path], value: object) -> None:
        """``value`` is what ``paths`` lead to: passed on to the attribute or item read from it, or recorded."""
        if node is not None and node in self._bases:
            self._bases.discard(node)
            self._stash[node] = paths
            return
        for path in paths:
            self.values.setdefault(path, value)
        self._register(value, paths, 0)

    def _register(self, value: object, paths: list[Path], depth: int) -> None:
        """Remember the paths of an object read whole, and of the helpers and items inside it."""
        if type(value) in _LITERALS or type(value) is DType:
            return
        known = self._known.get(id(value))
        if known is not None and known[0] is value:
            if known[1] is None:
                return
            paths = [p for p in paths if p not in known[1]]
            if not paths:
                return
            merged = known[1] + paths
        else:
            merged = list(paths)
        if len(merged) > _MAX_PATHS or self._room <= 0:
            self._known[id(value)] = (value, None)
            return
        self._room -= 1
        self._known[id(value)] = (value, merged)
        if isinstance(value, TileFunction):
            self._register(value.func, [(*p, ("attr", "func")) for p in paths], depth)
        if depth >= 3:
            return
        if isinstance(value, tuple | list) and type(value) in (tuple, list) and len(value) <= _ITEMS:
            for i, item in enumerate(value):
                self._register(item, [(*p, ("item", ("v", i))) for p in paths], depth + 1)
        elif isinstance(value, dict) and type(value) is dict and len(value) <= _ITEMS:
            for key, item in value.items():
                spec = self._key_spec(key, 0)
                if spec is not None:
                    self._register(item, [(*p, ("item", spec)) for p in paths], depth + 1)

    def _key_spec(self, key: object, depth: int) -> Step | None:
        """How a path names the item key ``key`` (None when it cannot)."""
        if type(key) in _LITERALS:
            return ("v", key)
        if type(key) is DType:
            return ("dtype", key.name)
        if depth < 4 and type(key) is tuple:
            specs = [self._key_spec(k, depth + 1) for k in key]
            return None if None in specs else ("tuple", tuple(specs))
        if depth < 4 and type(key) is slice:
            parts = [self._key_spec(k, depth + 1) for k in (key.start, key.stop, key.step)]
            return None if None in parts else ("slice", *parts)
        paths = self._paths_of(key)
        return ("path", paths[0]) if paths else None


def _step_text(step: Step | None) -> str:
    return f"attribute '{step[1]}'" if step is not None and step[0] == "attr" else "an item"


#: The ``Reads`` of the translation under way in this thread (set by the disk cache's compile; None: none).
RECORDING: ContextVar[Reads | None] = ContextVar("tilejit_reads", default=None)
