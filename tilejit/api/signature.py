"""How launch arguments become kernel parameter types: the specialization key of a tile kernel.

Arrays specialize on dtype, rank and two layout facts (unit innermost stride, 16-byte alignment)
that let the backend use vector accesses; Python scalars specialize on a dtype (int → int32 unless
it needs 64 bits, float → float32, bool → bool); ``tj.Constant`` values are part of the key.
``parse_signature`` reads the same types from text (``"float32[:,::1], f16[:], int32"``), strictly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tilejit.errors import LaunchError
from tilejit.language.ir.types import BY_NAME, ArrayType, DType, TileType, float32, int32, scalar
from tilejit.language.ir.types import bool_ as tj_bool
from tilejit.runtime.array_table import ArrayTable
from tilejit.runtime.interop import ArrayView

_INT32_MAX = (1 << 31) - 1  # strides below this are index32


def scalar_type_of(name: str, value: Any) -> TileType:
    """The IR type a Python or numpy scalar argument is passed as."""
    if isinstance(value, bool):
        return scalar(tj_bool)
    if isinstance(value, int):
        from tilejit.runtime.dispatch import int_dtype  # the one int rule, which the launch keys follow too

        return scalar(BY_NAME[int_dtype(value)])
    if isinstance(value, float):
        return scalar(float32)
    dt = getattr(value, "dtype", None)
    if dt is not None and getattr(value, "shape", None) == ():
        tj_dt = BY_NAME.get(str(dt))
        if tj_dt is not None and tj_dt.is_float8:
            raise LaunchError(f"parameter '{name}': 8-bit float scalars are not kernel parameters (arrays of them "
                              "are); pass a float and convert it in the kernel with .astype")
        if tj_dt is not None:
            return scalar(tj_dt)
    raise LaunchError(
        f"parameter '{name}': expected an array or a scalar (int, float, bool), got {type(value).__name__}"
    )


def array_key(
    dtype_name: str, shape: Sequence[int], strides: Sequence[int], ptr: int
) -> tuple[DType, int, bool, bool, bool]:
    """(dtype, rank, unit innermost stride, every row 16-byte aligned, every stride in [0, 2**31)) of an
    array view.

    Strides are in elements. These facts change the generated code, so they are part of the key; each is
    computed from the dtype, strides and ``ptr % 16`` only, which is what a launch's fast key holds.
    """
    dtype = BY_NAME[dtype_name]
    item = dtype.itemsize
    unit = len(strides) > 0 and strides[-1] == 1  # not shape-based: dispatch keys by strides, not shape
    aligned = ptr % 16 == 0 and all((s * item) % 16 == 0 for s in strides[:-1])
    index32 = all(0 <= s <= _INT32_MAX for s in strides)
    return dtype, len(shape), unit, aligned, index32


_ITEMSIZE = {name: dt.itemsize for name, dt in BY_NAME.items()}


#: Bits of ``launch_facts``: the array shares no byte with another array argument; its innermost extent is a
#: multiple of 16 bytes.
ALONE, EXTENT16 = 1, 2


def launch_facts(views: Sequence[Any]) -> tuple[int | None, ...]:
    """For each argument, the ``ALONE | EXTENT16`` bits of an array (from pointer, shape, strides in elements and
    itemsize), ``None`` for a scalar (no ``ALONE`` at all when an array list is among them): the
    ``ArrayHint.disjoint``/``extent16`` facts of one launch, in its fast key when the backend uses them, so written
    for speed (one pass, no helper calls)."""
    spans: list[tuple[int, int] | None] = []
    facts: list[int | None] = []
    lists = False  # an array list's arrays may overlap any argument: then no array is known alone
    for v in views:
        if v.__class__ is not ArrayView:
            spans.append(None)
            facts.append(None)
            continue
        if v[4].__class__ is ArrayTable:
            lists = True
        low = high = 0
        shape = v[1]
        for n, s in zip(shape, v[2]):
            if n == 0:  # no element: an empty span at its base
                low, high = 0, -1
                break
            if s < 0:
                low += (n - 1) * s
            else:
                high += (n - 1) * s
        item = _ITEMSIZE[v[3]]
        spans.append((v[0] + low * item, v[0] + (high + 1) * item))
        facts.append(EXTENT16 if shape and shape[-1] * item % 16 == 0 else 0)
    for i, a in enumerate(spans):
        if a is None or lists:
            continue
        start, end = a
        for j, b in enumerate(spans):
            if j != i and b is not None and start < b[1] and b[0] < end:
                break
        else:
            facts[i] |= ALONE  # type: ignore[operator]
    return tuple(facts)


_PYTHON_SCALARS: dict[str, DType] = {"int": int32, "float": float32}  # "bool" is a dtype name too
_TYPE_HELP = "a dtype such as float32, f16, int32 (arrays: float32[:], f16[:,::1]) or int, float, bool"
_ARRAY_HELP = (
    "write arrays as dtype[:] (rank 1) or dtype[:,:] (rank 2), with ::1 last for unit inner stride "
    "and 16-byte-aligned rows (e.g. f16[:,::1])"
)


def _signature_error(text: str, column: int, message: str) -> ValueError:
    """A ValueError naming ``column`` (0-based) of ``text`` and showing it with a caret under it."""
    shown = "".join(" " if c.isspace() else c for c in text)  # a tab or newline would misplace the caret
    return ValueError(f"column {column}: {message}\n  {shown}\n  {' ' * column}^")


def _skip_spaces(text: str, i: int) -> int:
    """The index of the first non-space character of ``text`` at or after ``i`` (``len(text)`` if none)."""
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def parse_signature(text: str, *, what: str = "") -> tuple[ArrayType | TileType, ...]:
    """Parameter types from text such as ``"float32[:,::1], f16[:], int32, float"``, one per comma: the one
    parser of signature text, for ``tj.compile`` and the command line.

    Each entry is a dtype name (a scalar), a dtype with dimensions (``:`` each, ``::1`` allowed last: an
    array), or ``int``/``float``/``bool``. Anything else raises ValueError with the 0-based column and a
    caret line (after ``what``, e.g. "signature, ", when given): a typo must not silently change a
    parameter's type. An empty text is no parameters."""
    if not isinstance(text, str):
        raise TypeError(f"{what or 'signature text'} must be str, got {type(text).__name__}")
    try:
        return _parse_signature(text)
    except ValueError as exc:
        if not what:
            raise
        raise ValueError(f"{what}, {exc}") from None


def _parse_signature(text: str) -> tuple[ArrayType | TileType, ...]:
    n = len(text)
    pos = _skip_spaces(text, 0)
    if pos == n:
        return ()
    types: list[ArrayType | TileType] = []
    while True:
        start = pos
        end = pos
        while end < n and (text[end].isalnum() or text[end] == "_"):
            end += 1
        name = text[start:end]
        if not name:
            found = f"{text[start]!r}" if start < n else "the end"
            raise _signature_error(text, start, f"expected a parameter type, found {found}; use {_TYPE_HELP}")
        pos = _skip_spaces(text, end)
        has_dims = pos < n and text[pos] == "["
        dtype = BY_NAME.get(name)
        if dtype is None and name in _PYTHON_SCALARS:
            if has_dims:
                raise _signature_error(
                    text, pos, f"{name!r} is a Python scalar type and takes no dimensions; "
                    f"an array needs a dtype, e.g. {_PYTHON_SCALARS[name].name}[:]"
                )
            dtype = _PYTHON_SCALARS[name]
        if dtype is None:
            close = text.find("]", pos) if has_dims else -1
            entry = text[start : close + 1] if close >= 0 else name
            raise _signature_error(text, start, f"unknown type {entry!r}; use {_TYPE_HELP}")
        if has_dims:
            pos, param = _parse_dims(text, pos, dtype)
            types.append(param)
        else:
            types.append(scalar(dtype))
        pos = _skip_spaces(text, pos)
        if pos == n:
            return tuple(types)
        if text[pos] != ",":
            after = f"'{text[start:pos].rstrip()}'"
            raise _signature_error(text, pos, f"expected ',' or the end after {after}, found {text[pos]!r}")
        pos = _skip_spaces(text, pos + 1)
        if pos == n:
            raise _signature_error(text, pos, f"expected a parameter type after ',', found the end; use {_TYPE_HELP}")


def _parse_dims(text: str, open_at: int, dtype: DType) -> tuple[int, ArrayType]:
    """The ``[:, ::1]`` of an array type starting at ``open_at`` (its ``[``): (index past ``]``, the type)."""
    n = len(text)
    pos = open_at + 1
    dims: list[tuple[int, bool]] = []  # (column, is ::1)
    while True:
        pos = _skip_spaces(text, pos)
        if text.startswith("::1", pos):
            dims.append((pos, True))
            pos += 3
        elif text.startswith("::", pos):
            raise _signature_error(text, pos + 2, f"only ::1 (unit inner stride) may follow '::'; {_ARRAY_HELP}")
        elif text.startswith(":", pos):
            dims.append((pos, False))
            pos += 1
        else:
            found = f"{text[pos]!r}" if pos < n else "the end"
            raise _signature_error(text, pos, f"expected ':' or '::1' for a dimension, found {found}; {_ARRAY_HELP}")
        pos = _skip_spaces(text, pos)
        if pos < n and text[pos] == ",":
            pos += 1
            continue
        if pos < n and text[pos] == "]":
            break
        found = f"{text[pos]!r}" if pos < n else "the end"
        raise _signature_error(
            text, pos, f"expected ',' or ']' to close the '[' at column {open_at}, found {found}; {_ARRAY_HELP}"
        )
    for column, unit in dims[:-1]:
        if unit:
            raise _signature_error(text, column, f"::1 is allowed only as the last dimension; {_ARRAY_HELP}")
    return pos + 1, ArrayType(dtype, len(dims), dims[-1][1])
