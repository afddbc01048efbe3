"""Element dtypes as the runtime sees them: one name per dtype, and how each is spelled by numpy,
``struct``, ``__cuda_array_interface__`` and DLPack.

The runtime sits below the language layer, so it keeps this small table of its own; the names
match ``tilejit.language.ir.types`` (``"bool"``, ``"int8"`` ... ``"bfloat16"``, ``"float64"``).
numpy is imported only by :func:`numpy_dtype`.
"""

from __future__ import annotations

import sys
from typing import Any

NAMES: tuple[str, ...] = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2",
)

ITEMSIZE: dict[str, int] = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2,
    "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8,
    "float8_e4m3fn": 1, "float8_e5m2": 1,
}

#: ``struct`` format character of one scalar; bfloat16 travels as its 16 raw bits (the 8-bit floats are never
#: scalar parameters).
STRUCT_CHAR: dict[str, str] = {
    "bool": "?", "int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
    "int64": "q", "uint64": "Q", "float16": "e", "bfloat16": "H", "float32": "f", "float64": "d",
}

#: ``__cuda_array_interface__`` typestr (kind + itemsize) → name; bfloat16 and the 8-bit floats have none.
TYPESTR_TO_NAME: dict[str, str] = {
    "b1": "bool", "i1": "int8", "i2": "int16", "i4": "int32", "i8": "int64",
    "u1": "uint8", "u2": "uint16", "u4": "uint32", "u8": "uint64",
    "f2": "float16", "f4": "float32", "f8": "float64",
}
NAME_TO_TYPESTR: dict[str, str] = {
    name: ("|" if ITEMSIZE[name] == 1 else "<") + ts for ts, name in TYPESTR_TO_NAME.items()
}

#: DLPack (type code, bits) → name. Codes: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool, 10 float8_e4m3fn,
#: 12 float8_e5m2 (DLPack 1.1).
DLPACK_TO_NAME: dict[tuple[int, int], str] = {
    (0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64",
    (1, 8): "uint8", (1, 16): "uint16", (1, 32): "uint32", (1, 64): "uint64",
    (2, 16): "float16", (2, 32): "float32", (2, 64): "float64", (4, 16): "bfloat16", (6, 8): "bool",
    (10, 8): "float8_e4m3fn", (12, 8): "float8_e5m2",
}
NAME_TO_DLPACK: dict[str, tuple[int, int]] = {name: code for code, name in DLPACK_TO_NAME.items()}

_ALIASES: dict[str, str] = {
    "bool_": "bool", "b1": "bool", "?": "bool", "i1": "int8", "i2": "int16", "i4": "int32", "i8": "int64",
    "u1": "uint8", "u2": "uint16", "u4": "uint32", "u8": "uint64", "f2": "float16", "f4": "float32",
    "f8": "float64", "half": "float16", "float": "float32", "double": "float64", "bf16": "bfloat16",
    "f16": "float16", "f32": "float32", "f64": "float64", "i16": "int16", "i32": "int32", "i64": "int64",
    "u16": "uint16", "u32": "uint32", "u64": "uint64", "f8e4m3fn": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
}


def dtype_name(dtype: Any) -> str:
    """The runtime name of ``dtype``: a name or alias, a numpy dtype or scalar type, ``tj.float32``,
    ``ml_dtypes.bfloat16`` or a torch dtype. Raises ``TypeError`` naming what is supported otherwise."""
    if isinstance(dtype, str):
        name = _ALIASES.get(dtype, dtype)
        if name in ITEMSIZE:
            return name
    else:
        # numpy dtypes, numpy scalar types (via their dtype), tilejit DType and torch.dtype all
        # carry a name; `bool` and Python's float/int builtins are mapped like numpy does.
        if dtype is bool:
            return "bool"
        if dtype is float:
            return "float64"
        if dtype is int:
            return "int64"
        np = sys.modules.get("numpy")
        if np is not None and isinstance(dtype, type) and issubclass(dtype, np.generic):
            dtype = np.dtype(dtype)
        found: Any = getattr(dtype, "name", None)
        if found is None and isinstance(dtype, type):
            found = dtype.__name__
        if found is None:
            found = str(dtype).removeprefix("torch.")
        if isinstance(found, str):
            found = _ALIASES.get(found, found)
            if found in ITEMSIZE:
                return str(found)
    raise TypeError(f"unsupported dtype {dtype!r}; supported: {', '.join(NAMES)}")


def numpy_dtype(name: str) -> Any:
    """The numpy dtype of a runtime dtype name; bfloat16 and the 8-bit floats need the ``ml_dtypes`` package."""
    import numpy as np

    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        try:
            import ml_dtypes
        except ImportError:
            raise TypeError(
                f"{name} data has no numpy dtype without the ml_dtypes package: pip install ml_dtypes"
                + (" (or move its bits as uint8: a.view(np.uint8), tj array.view)" if name != "bfloat16" else "")
            ) from None
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def float_to_bfloat16_bits(value: float) -> int:
    """The 16 bits of ``value`` rounded to bfloat16 (round to nearest even; NaN stays NaN). A finite
    value beyond bfloat16's range raises ``OverflowError``, as packing a float16 does."""
    import struct

    bits: int = struct.unpack("<I", struct.pack("<f", value))[0]
    if (bits & 0x7F800000) == 0x7F800000:
        return (bits >> 16) | 0x40 if bits & 0x007FFFFF else bits >> 16
    out = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    if (out & 0x7FFF) == 0x7F80:
        raise OverflowError(f"{value!r} is out of range for bfloat16")
    return out
