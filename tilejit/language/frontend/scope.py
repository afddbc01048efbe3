"""Variables and the translation contexts around them: functions being inlined and loops.

A ``Scope`` maps names to front-end values (see ``values.py``) and remembers where each was last
assigned, so type errors about loop-carried or merged variables can point at the assignment.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from tilejit.language.frontend.source import Source
from tilejit.language.ir.types import TileType


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
