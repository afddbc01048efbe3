"""How launch arguments become kernel parameter types: the specialization key of a tile kernel; and
the text form of parameter types (``"float32[:, ::1], int32"``) that ``tj.compile`` and the CLI read.

Arrays specialize on dtype, rank and two layout facts (unit innermost stride, 16-byte alignment)
that let the backend use vector accesses; Python scalars specialize on a dtype (int → int32 unless
it needs 64 bits, float → float32, bool → bool); ``tj.Constant`` values are part of the key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tilejit.errors import LaunchError
from tilejit.language.ir.types import BY_NAME, ArrayType, DType, TileType, float32, int32, int64, scalar
from tilejit.language.ir.types import bool_ as tj_bool

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


def scalar_type_of(name: str, value: Any) -> TileType:
    """The IR type a Python or numpy scalar argument is passed as."""
    if isinstance(value, bool):
        return scalar(tj_bool)
    if isinstance(value, int):
        return scalar(int32 if _INT32_MIN <= value <= _INT32_MAX else int64)
    if isinstance(value, float):
        return scalar(float32)
    dt = getattr(value, "dtype", None)
    if dt is not None and getattr(value, "shape", None) == ():
        tj_dt = BY_NAME.get(str(dt))
        if tj_dt is not None:
            return scalar(tj_dt)
    raise LaunchError(
        f"parameter '{name}': expected an array or a scalar (int, float, bool), got {type(value).__name__}"
    )


def array_key(
    dtype_name: str, shape: Sequence[int], strides: Sequence[int], ptr: int
) -> tuple[DType, int, bool, bool]:
    """(dtype, rank, unit innermost stride, every row 16-byte aligned) of an array view.

    Strides are in elements. These facts change the generated code, so they are part of the key.
    """
    dtype = BY_NAME[dtype_name]
    item = dtype.itemsize
    unit = len(strides) > 0 and strides[-1] == 1  # not shape-based: dispatch keys by strides, not shape
    aligned = ptr % 16 == 0 and all((s * item) % 16 == 0 for s in strides[:-1])
    return dtype, len(shape), unit, aligned


_PY_SCALARS: dict[str, type] = {"int": int, "float": float, "bool": bool}
_SIGNATURE_HELP = "e.g. 'float32[:], f16[:, ::1], int32, float'"


def parse_signature_text(text: str, *, what: str = "signature") -> list[object]:
    """The parameter types in ``text``, a comma-separated list such as ``"float32[:, ::1], f16[:], int32, float"``:
    arrays as ``ArrayType`` (``::1`` last: unit inner stride), dtypes as ``DType``, ``int``/``float``/``bool``
    as those Python types, all as ``tj.compile`` takes them. A mistake raises ``ValueError`` naming the
    0-based column, with the text and a caret under it."""
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str such as {_SIGNATURE_HELP}, got {type(text).__name__}")
    types: list[object] = []
    pos = _skip_space(text, 0)
    if pos == len(text):
        return types
    while True:
        item, pos = _parse_type(text, pos, what)
        types.append(item)
        pos = _skip_space(text, pos)
        if pos == len(text):
            return types
        if text[pos] != ",":
            raise _signature_error(text, pos, what, f"expected ',' between parameter types, found {text[pos]!r}")
        pos = _skip_space(text, pos + 1)
        if pos == len(text):
            raise _signature_error(text, pos, what, "expected a parameter type after ','")


def _parse_type(text: str, pos: int, what: str) -> tuple[object, int]:
    """One parameter type starting at ``pos``: (the type, the position after it)."""
    start = pos
    while pos < len(text) and (text[pos] == "_" or (text[pos].isascii() and text[pos].isalnum())):
        pos += 1
    name = text[start:pos]
    if not name:
        found = f"found {text[pos]!r}" if pos < len(text) else "found the end of the text"
        raise _signature_error(text, start, what, f"expected a parameter type ({_SIGNATURE_HELP}), {found}")
    after = _skip_space(text, pos)
    bracket = after < len(text) and text[after] == "["
    if name in _PY_SCALARS:
        if bracket:
            raise _signature_error(text, after, what, f"{name!r} is a scalar type; arrays take a dtype, e.g. "
                                                      f"{'int32' if name == 'int' else 'float32'}[:]")
        return _PY_SCALARS[name], pos
    dtype = BY_NAME.get(name)
    if dtype is None:
        raise _signature_error(text, start, what, f"unknown type {name!r}; {_SIGNATURE_HELP}")
    if not bracket:
        return dtype, pos
    return _parse_dims(text, after + 1, dtype, what)


def _parse_dims(text: str, pos: int, dtype: DType, what: str) -> tuple[ArrayType, int]:
    """The dimensions of an array type after its ``[`` (``:`` each, ``::1`` allowed last): the type and the
    position after its ``]``."""
    ndim = 0
    while True:
        pos = _skip_space(text, pos)
        if not text.startswith(":", pos):
            found = f"found {text[pos]!r}" if pos < len(text) else "found the end of the text"
            raise _signature_error(text, pos, what, f"expected ':' (each dimension is ':', the last may be '::1'), "
                                                    f"{found}")
        ndim += 1
        contiguous = text.startswith("::", pos)
        if contiguous:
            if not text.startswith("::1", pos):
                raise _signature_error(text, pos + 2, what, "expected '1' after '::' (a unit inner stride is '::1')")
            pos += 3
        else:
            pos += 1
        pos = _skip_space(text, pos)
        if text.startswith("]", pos):
            return ArrayType(dtype, ndim, contiguous), pos + 1
        if contiguous:
            raise _signature_error(text, pos, what, "'::1' must be the last dimension, followed by ']'")
        if not text.startswith(",", pos):
            found = f"found {text[pos]!r}" if pos < len(text) else "found the end of the text"
            raise _signature_error(text, pos, what, f"expected ',' or ']' in the array dimensions, {found}")
        pos += 1


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _signature_error(text: str, col: int, what: str, why: str) -> ValueError:
    """``ValueError`` for a mistake at 0-based column ``col`` of ``text``: the text on one line, a caret under it."""
    shown = "".join(" " if c.isspace() else c for c in text)
    return ValueError(f"{what}, column {col}: {why}\n    {shown}\n    {' ' * col}^")
