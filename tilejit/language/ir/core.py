"""IR building blocks: SSA values, source locations, blocks and the tagged-field ``Op`` base class.

An op is a dataclass whose fields are tagged as *operand* (a ``Value`` or a list of them),
*attribute* (a compile-time Python value) or *region* (a ``Block``). Printing, cloning, operand
walking and verification are written once against those tags instead of once per op.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from tilejit.language.ir.types import Type

_ids = itertools.count()


@dataclass(frozen=True)
class Loc:
    """Where in the user's source an op came from."""

    filename: str
    line: int
    col: int = 0


UNKNOWN_LOC = Loc("<unknown>", 0, 0)


class Value:
    """An SSA value: the result of one op or an argument of a block."""

    __slots__ = ("id", "name", "type")

    def __init__(self, type: Type, name: str = "") -> None:
        self.type = type
        self.name = name
        self.id = next(_ids)

    def __repr__(self) -> str:
        return f"Value(%{self.name or self.id}: {self.type})"


def operand() -> Any:
    """Field tag: an SSA operand (a ``Value``, or a list of ``Value``)."""
    return field(metadata={"kind": "operand"})


def attribute(default: Any = None, quiet: bool = False) -> Any:
    """Field tag: a compile-time attribute (int, float, str, tuple, DType...); a ``quiet`` one is left out of the
    printed IR while it has its default (an option most ops never set)."""
    meta = {"kind": "attribute", "quiet": quiet}
    if default is None:
        return field(metadata=meta)
    return field(default=default, metadata=meta)


def region() -> Any:
    """Field tag: a nested block (structured control flow)."""
    return field(metadata={"kind": "region"})


@dataclass(eq=False)
class Block:
    """A straight-line list of ops with arguments; nested blocks make structured control flow."""

    args: list[Value] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)

    def append(self, op: Op) -> Op:
        self.ops.append(op)
        return op

    @property
    def terminator(self) -> Op | None:
        return self.ops[-1] if self.ops and self.ops[-1].is_terminator else None

    def walk(self) -> Iterator[Op]:
        """Every op in this block and its nested regions, parents before children."""
        for op in self.ops:
            yield op
            for r in op.regions():
                yield from r.walk()


@dataclass(eq=False, kw_only=True)
class Op:
    """Base of every IR op. ``results`` are the values it defines; ``loc`` points at user source."""

    NAME: ClassVar[str] = "op"
    is_terminator: ClassVar[bool] = False
    has_side_effects: ClassVar[bool] = False

    results: list[Value] = field(default_factory=list, metadata={"kind": "results"})
    loc: Loc = field(default=UNKNOWN_LOC, metadata={"kind": "loc"})

    @property
    def result(self) -> Value:
        assert len(self.results) == 1, f"{self.NAME} has {len(self.results)} results"
        return self.results[0]

    @classmethod
    def _fields_of(cls, kind: str) -> list[str]:
        return [f.name for f in fields(cls) if f.metadata.get("kind") == kind]

    def operands(self) -> list[Value]:
        """All operand values, in field order, lists flattened."""
        out: list[Value] = []
        for name in self._fields_of("operand"):
            v = getattr(self, name)
            if isinstance(v, Value):
                out.append(v)
            elif v is not None:
                out.extend(v)
        return out

    def attributes(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._fields_of("attribute")}

    def shown_attributes(self) -> dict[str, Any]:
        """The attributes the printed IR shows: all but the quiet ones that have their default."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.metadata.get("kind") == "attribute"
                and not (f.metadata.get("quiet") and getattr(self, f.name) == f.default)}

    def regions(self) -> list[Block]:
        return [getattr(self, name) for name in self._fields_of("region")]

    def replace_operands(self, mapping: dict[Value, Value]) -> None:
        """Substitute operands in place (used by passes that fold or forward values)."""
        for name in self._fields_of("operand"):
            v = getattr(self, name)
            if isinstance(v, Value):
                setattr(self, name, mapping.get(v, v))
            elif v is not None:
                setattr(self, name, [mapping.get(x, x) for x in v])
