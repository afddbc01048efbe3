"""What a name or an expression stands for while a kernel is translated.

Run-time values wrap an IR ``Value``: ``Tile`` (a tile or 0-d scalar), ``Array`` (a kernel
array parameter, or one array of an array list) and ``ArrayList`` (a parameter holding a run-time number of
arrays). Everything else is a compile-time constant and is kept as the plain Python
object (ints, floats, bools, strings, dtypes, tuples, functions, modules...). A Python tuple may
mix both; it is constant only when all its items are.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilejit.language.ir.core import Value
from tilejit.language.ir.types import ArrayListType, ArrayType, DType, TileType


class Tile:
    """A run-time tile (or 0-d scalar) value."""

    __slots__ = ("value",)

    def __init__(self, value: Value) -> None:
        assert isinstance(value.type, TileType)
        self.value = value

    @property
    def type(self) -> TileType:
        t = self.value.type
        assert isinstance(t, TileType)
        return t

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def ndim(self) -> int:
        return len(self.type.shape)

    def __repr__(self) -> str:
        return f"Tile({self.type})"


class Array:
    """A kernel array parameter (pointer, shape and strides at run time)."""

    __slots__ = ("name", "value")

    def __init__(self, value: Value, name: str) -> None:
        assert isinstance(value.type, ArrayType)
        self.value = value
        self.name = name

    @property
    def type(self) -> ArrayType:
        t = self.value.type
        assert isinstance(t, ArrayType)
        return t

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def ndim(self) -> int:
        return self.type.ndim

    def __repr__(self) -> str:
        return f"Array({self.name}: {self.type})"


class ArrayList:
    """A kernel parameter holding a run-time number of arrays of one dtype and rank; ``lst[i]`` is one of them."""

    __slots__ = ("name", "value")

    def __init__(self, value: Value, name: str) -> None:
        assert isinstance(value.type, ArrayListType)
        self.value = value
        self.name = name

    @property
    def type(self) -> ArrayListType:
        t = self.value.type
        assert isinstance(t, ArrayListType)
        return t

    def __repr__(self) -> str:
        return f"ArrayList({self.name}: {self.type})"


@dataclass(frozen=True)
class ArrayDims:
    """``array.shape`` or ``array.strides``: indexing it reads one run-time dimension."""

    array: Array
    which: str  # 'shape' or 'stride'


@dataclass(frozen=True)
class BoundMethod:
    """A tile method such as ``t.astype``, waiting to be called."""

    obj: Tile
    name: str


@dataclass(frozen=True)
class Undefined:
    """A name that is not defined on every path reaching this point; using it is an error."""

    reason: str


RUNTIME_TYPES = (Tile, Array, ArrayList, ArrayDims, BoundMethod, Undefined)


def is_const(v: object) -> bool:
    """True for compile-time constants (tuples and lists only when every item is one)."""
    if isinstance(v, RUNTIME_TYPES):
        return False
    if isinstance(v, tuple | list):
        return all(is_const(x) for x in v)
    return True


def is_number(v: object) -> bool:
    """A Python bool, int or float constant (a *weak* scalar in promotion)."""
    return isinstance(v, bool | int | float)


def shown(v: object) -> str:
    """``repr(v)`` for an error message, shortened: a long integer by its first and last digits (and by
    its size past 4300 digits, which Python refuses to print), a long string or sequence cut."""
    if isinstance(v, int) and not isinstance(v, bool):
        try:
            text = str(v) if v.bit_length() <= 14000 else ""
        except ValueError:  # past sys.get_int_max_str_digits() digits
            text = ""
        if not text:
            return f"<an integer of {v.bit_length()} bits>"
        return text if len(text) <= 24 else f"{text[:6]}...{text[-3:]} ({len(text.lstrip('-'))} digits)"
    if isinstance(v, str) and len(v) > 60:
        return repr(v[:40])[:-1] + f"...' ({len(v)} characters)"
    if isinstance(v, tuple | list):
        if len(v) > 16:
            return f"<a {type(v).__name__} of {len(v)} items>"
        items = ", ".join(shown(x) for x in v) + ("," if len(v) == 1 and isinstance(v, tuple) else "")
        return f"({items})" if isinstance(v, tuple) else f"[{items}]"
    try:
        text = repr(v)
    except (ValueError, RecursionError):  # an item Python refuses to print (a huge integer), or nested too deep
        return f"<a {type(v).__name__}>"
    return text if len(text) <= 200 else text[:150] + " ... " + text[-20:]


def describe(v: object) -> str:
    """A short phrase naming a value, for error messages."""
    if isinstance(v, Tile):
        return f"a {'scalar' if v.type.is_scalar else 'tile'} of type {v.type}"
    if isinstance(v, Array):
        return f"the array '{v.name}' ({v.type})"
    if isinstance(v, ArrayList):
        return f"the array list '{v.name}' ({v.type})"
    if isinstance(v, ArrayDims):
        return f"{v.array.name}.{'shape' if v.which == 'shape' else 'strides'}"
    if isinstance(v, BoundMethod):
        return f"the method .{v.name}"
    if isinstance(v, Undefined):
        return "an undefined name"
    if isinstance(v, DType):
        return f"the dtype {v!r}"
    if isinstance(v, tuple):
        return f"a tuple of {len(v)} items"
    if isinstance(v, range):
        return f"range({shown(v.start)}, {shown(v.stop)}, {shown(v.step)})"
    if isinstance(v, bool | int | float | str):
        return f"the constant {shown(v)}"
    if v is None:
        return "None"
    name = getattr(v, "__qualname__", None) or getattr(v, "__name__", None)
    kind = type(v).__name__
    return f"the Python {kind} {name}" if name else f"a Python {kind}"
