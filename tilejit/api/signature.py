"""How launch arguments become kernel parameter types: the specialization key of a tile kernel.

Arrays specialize on dtype, rank and two layout facts (unit innermost stride, 16-byte alignment)
that let the backend use vector accesses; Python scalars specialize on a dtype (int → int32 unless
it needs 64 bits, float → float32, bool → bool); ``tj.Constant`` values are part of the key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tilejit.errors import LaunchError
from tilejit.language.ir.types import BY_NAME, DType, TileType, float32, int32, int64, scalar
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
