"""Device printing: ``print(...)`` and ``tj.print(prefix, *values)`` in tile code become one ``PrintOp``.

The line is the items' text joined by ``sep`` and ended by ``end``, as Python's ``print`` writes it: compile-time
values (strings, numbers, tuples of them) as Python's ``str``, run-time values (tiles and scalars, also inside
tuples, ``array.shape`` and f-strings) as the backend formats them. Tiles are broadcast to one shape by numpy's
rules; what the backends print around the text (block, thread, element index) is in ``tile.py``'s module doc.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tilejit.language.frontend.builder import broadcast_shapes
from tilejit.language.frontend.source import FrontendError
from tilejit.language.frontend.values import Array, ArrayDims, Tile, describe, is_const, shown
from tilejit.language.ir import ops
from tilejit.language.ir.types import float32

if TYPE_CHECKING:
    from tilejit.language.frontend.handlers import Translator

#: Run-time values one print may take: a CUDA printf takes 32 arguments, of which the block, thread and element
#: index take up to 8.
MAX_VALUES = 16
#: Elements a printed tile may have (a line each on the CUDA backend).
MAX_ELEMENTS = 4096


@dataclass(frozen=True)
class FString:
    """An f-string argument of a print with run-time fields: its parts in order, text (``str``) or ``Tile``."""

    parts: tuple[str | Tile, ...]


class _Line:
    """The line being built: ``texts`` around ``values`` (one more text than values)."""

    def __init__(self) -> None:
        self.texts = [""]
        self.values: list[Tile] = []

    def text(self, s: str) -> None:
        self.texts[-1] += s

    def value(self, t: Tile) -> None:
        self.values.append(t)
        self.texts.append("")


def _str(v: object) -> str:
    """Python's ``str(v)`` of a compile-time value (``shown``'s short form for what Python refuses to write)."""
    try:
        return str(v)
    except (ValueError, RecursionError):  # an integer of more than 4300 digits, or nested too deep
        return shown(v)


def _printable(tr: Translator, t: Tile) -> Tile:
    """``t``, with 8-bit floats as the float32 values they hold (printf has no 8-bit float)."""
    return tr.b.cast(t, float32) if t.dtype.is_float8 else t


def _item(tr: Translator, line: _Line, v: object) -> None:
    """Append one printed item to ``line``."""
    if isinstance(v, Tile):
        line.value(_printable(tr, v))
    elif isinstance(v, FString):
        for part in v.parts:
            if isinstance(part, Tile):
                line.value(_printable(tr, part))
            else:
                line.text(part)
    elif isinstance(v, ArrayDims):
        _item(tr, line, tuple(tr.b.array_dim(v.array.value, d, v.which) for d in range(v.array.ndim)))
    elif isinstance(v, tuple | list) and not is_const(v):
        line.text("(" if isinstance(v, tuple) else "[")
        for k, x in enumerate(v):
            line.text(", " if k else "")
            _item(tr, line, repr(x) if isinstance(x, str) else x)
        line.text(("," if len(v) == 1 and isinstance(v, tuple) else "") + (")" if isinstance(v, tuple) else "]"))
    elif is_const(v):
        line.text(_str(v))
    else:
        hint = f" (print its elements: tj.load from '{v.name}')" if isinstance(v, Array) else ""
        raise FrontendError(f"print() cannot print {describe(v)}{hint}")


def device_print(tr: Translator, items: list[object], sep: object, end: object) -> None:
    """Emit the ``PrintOp`` of ``print(*items, sep=sep, end=end)`` (``None``: Python's default)."""
    sep = " " if sep is None else sep
    end = "\n" if end is None else end
    for what, v in (("sep", sep), ("end", end)):
        if not isinstance(v, str):
            raise FrontendError(f"print(): {what} must be a compile-time string, got {describe(v)}")
    assert isinstance(sep, str) and isinstance(end, str)
    line = _Line()
    for k, v in enumerate(items):
        line.text(sep if k else "")
        _item(tr, line, v)
    line.text(end)
    tr.budget.check("".join(line.texts), "the printed text")
    if len(line.values) > MAX_VALUES:
        raise FrontendError(f"print() of {len(line.values)} run-time values: at most {MAX_VALUES} per print "
                            "(split it into several prints)")
    tiles = [v for v in line.values if not v.type.is_scalar]
    try:
        shape = broadcast_shapes(*(t.shape for t in tiles))
    except FrontendError as exc:
        raise FrontendError(f"print(): the tiles printed together must broadcast to one shape: {exc.message}") from None
    size = 1
    for d in shape:
        size *= d
    if size > MAX_ELEMENTS:
        raise FrontendError(f"print() of a tile of shape {shape} ({size} elements): at most {MAX_ELEMENTS} elements "
                            "per print (print a smaller tile, e.g. a reduction or a tile of fewer rows)")
    values = [v if v.type.is_scalar else tr.b.broadcast(v, shape) for v in line.values]
    tr.b.make(ops.PrintOp, None, values=[v.value for v in values], texts=tuple(line.texts))


def python_print(tr: Translator, args: list[object], kwargs: dict[str, object]) -> None:
    """Python's ``print(*args, sep=..., end=...)`` in tile code."""
    extra = sorted(set(kwargs) - {"sep", "end"})
    if extra:
        raise FrontendError(f"print() in tile code takes sep= and end= only, not {', '.join(extra)}= (it writes to "
                            "the process's standard output through the driver)")
    device_print(tr, args, kwargs.get("sep"), kwargs.get("end"))


__all__ = ["MAX_ELEMENTS", "MAX_VALUES", "FString", "device_print", "python_print"]
