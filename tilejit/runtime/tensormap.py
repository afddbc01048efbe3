"""TMA tensor maps (``CUtensorMap``, sm_90+): the 128 opaque bytes that describe a tiled view of an array for
``cp.async.bulk.tensor``, encoded on the host by the driver's ``cuTensorMapEncodeTiled`` (CUDA 12.0+).

:func:`encode_tiled` encodes one map and says exactly which requirement an array breaks; :func:`tensor_map` is
the cached form a launch uses (a warm launch with the same array pays one dict lookup); :func:`launch_tensor_map`
never raises for the array's shape or strides: where no map can describe it (an empty dimension, rows that
overlap, a driver without the entry point) it gives :data:`NO_TENSOR_MAP`, 128 zero bytes, which the CUDA
backend's kernels test for and then copy with cp.async instead (the same results, no TMA).

Shapes, strides (in elements) and box dims are given outermost first, as the array's; the driver takes them
innermost first, and the strides in bytes without the innermost (which must be 1).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

from tilejit.bindings.driver import CU_TENSOR_MAP_DATA_TYPE
from tilejit.errors import TensorMapError
from tilejit.runtime.dtypes import ITEMSIZE

#: Bytes of a ``CUtensorMap``, and the alignment the driver and a ``__grid_constant__`` parameter need.
TENSOR_MAP_BYTES = 128
TENSOR_MAP_ALIGN = 64
#: What a launch passes where no tensor map can describe the array: the kernel sees it and uses cp.async.
NO_TENSOR_MAP = bytes(TENSOR_MAP_BYTES)
#: The largest dimension a map may have: the kernels clamp TMA coordinates to [-256, 2**31 - 257] (int32 with room
#: for a box of 256), which must stay out of range where the true coordinate is (``tj::tma_coord``).
MAX_DIM = 2**31 - 257
#: Encoded maps a process keeps (then the cache starts over: maps are cheap to make again).
CACHE_LIMIT = 4096

_cache: dict[tuple[Any, ...], bytes] = {}


def check_tiled(dtype: str, ptr: int, shape: Sequence[int], strides: Sequence[int], box: Sequence[int],
                swizzle: int) -> None:
    """Raise ``TensorMapError`` naming the first of ``cuTensorMapEncodeTiled``'s requirements (and the kernel's:
    int32 coordinates, rows that do not overlap) that these arguments break."""
    if dtype not in CU_TENSOR_MAP_DATA_TYPE:
        raise TensorMapError(f"tensor map: dtype {dtype} has no TMA data type; supported: "
                             f"{', '.join(CU_TENSOR_MAP_DATA_TYPE)}")
    item = ITEMSIZE[dtype]
    rank = len(shape)
    if not 1 <= rank <= 5 or len(strides) != rank or len(box) != rank:
        raise TensorMapError(f"tensor map: rank {rank} with {len(strides)} strides and {len(box)} box dims; "
                             "a tiled map has rank 1 to 5 and one stride and one box dim per dimension")
    if ptr % 16:
        raise TensorMapError(f"tensor map: the base address {ptr:#x} is not 16-byte aligned")
    if strides[-1] != 1:
        raise TensorMapError(f"tensor map: the innermost stride is {strides[-1]}; TMA needs 1 (contiguous rows)")
    for d, n in enumerate(shape):
        if not 1 <= n <= MAX_DIM:
            raise TensorMapError(f"tensor map: shape[{d}] is {n}; each dimension must be 1 to 2**31 - 257 (the "
                                 "driver takes up to 2**32; the kernel's coordinates are int32, clamped below 2**31 - "
                                 "256 so that a box still fits)")
    for d in range(rank - 1):
        nbytes = strides[d] * item
        if nbytes <= 0 or nbytes % 16 or nbytes >= 1 << 40:
            raise TensorMapError(f"tensor map: strides[{d}] is {strides[d]} elements ({nbytes} bytes); TMA needs a "
                                 "positive multiple of 16 bytes below 2**40")
        if strides[d] < shape[d + 1] * strides[d + 1]:
            raise TensorMapError(f"tensor map: strides[{d}] = {strides[d]} is less than shape[{d + 1}] * "
                                 f"strides[{d + 1}] = {shape[d + 1] * strides[d + 1]}: the rows overlap")
    for d, b in enumerate(box):
        if not 1 <= b <= 256:
            raise TensorMapError(f"tensor map: box dim {d} is {b}; each must be 1 to 256")
    inner = box[-1] * item
    if inner % 16:
        raise TensorMapError(f"tensor map: the box's inner dim is {inner} bytes; TMA needs a multiple of 16")
    if swizzle not in (0, 32, 64, 128):
        raise TensorMapError(f"tensor map: swizzle {swizzle}; must be 0, 32, 64 or 128 (bytes)")
    if swizzle and inner > swizzle:
        raise TensorMapError(f"tensor map: the box's inner dim is {inner} bytes, more than its {swizzle}-byte swizzle")


def encode_tiled(dtype: str, ptr: int, shape: Sequence[int], strides: Sequence[int], box: Sequence[int],
                 swizzle: int, driver: Any = None) -> bytes:
    """The 128 bytes of a tiled tensor map of the array at ``ptr`` (``dtype``, ``shape``, ``strides`` in elements,
    outermost first) read in boxes of ``box`` elements, with a ``swizzle``-byte shared-memory swizzle (0, 32, 64,
    128), zero-filling outside the array and promoting L2 fetches to 128 bytes. ``driver``: the bound driver
    (default: the process's). Raises ``TensorMapError`` for arguments no map can describe, ``CUDAError`` when
    the driver refuses."""
    check_tiled(dtype, ptr, shape, strides, box, swizzle)
    from tilejit.bindings import driver as drv

    d = drv.driver() if driver is None else driver
    encode = getattr(d, "cuTensorMapEncodeTiled", None)
    if encode is None:
        raise TensorMapError(f"tensor map: this CUDA driver ({getattr(d, 'version', '?')}) has no "
                             "cuTensorMapEncodeTiled, which needs a driver for CUDA 12.0 or newer")
    rank, item = len(shape), ITEMSIZE[dtype]
    u64s, u32s = ctypes.c_ulonglong * rank, ctypes.c_uint * rank
    dims = u64s(*reversed(shape))
    byte_strides = (ctypes.c_ulonglong * max(rank - 1, 1))(*(s * item for s in reversed(strides[:-1])))
    boxes = u32s(*reversed(box))
    ones = u32s(*([1] * rank))
    raw = ctypes.create_string_buffer(TENSOR_MAP_BYTES + TENSOR_MAP_ALIGN)
    at = -ctypes.addressof(raw) % TENSOR_MAP_ALIGN + ctypes.addressof(raw)
    status = encode(ctypes.c_void_p(at), drv.CU_TENSOR_MAP_DATA_TYPE[dtype], rank, ctypes.c_void_p(ptr), dims,
                    byte_strides, boxes, ones, drv.CU_TENSOR_MAP_INTERLEAVE_NONE, drv.CU_TENSOR_MAP_SWIZZLE[swizzle],
                    drv.CU_TENSOR_MAP_L2_PROMOTION_L2_128B, drv.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if status:
        detail = (f"dtype {dtype}, address {ptr:#x}, shape {tuple(shape)}, strides {tuple(strides)}, box {tuple(box)}, "
                  f"swizzle {swizzle}")
        d.check(status, "cuTensorMapEncodeTiled", detail)
    return ctypes.string_at(at, TENSOR_MAP_BYTES)


def tensor_map(dtype: str, ptr: int, shape: Sequence[int], strides: Sequence[int], box: Sequence[int],
               swizzle: int, driver: Any = None) -> bytes:
    """``encode_tiled``, remembered by (dtype, ptr, shape, strides, box, swizzle) for the process."""
    return _remembered(dtype, ptr, shape, strides, box, swizzle, driver, fallback=False)


def launch_tensor_map(dtype: str, ptr: int, shape: Sequence[int], strides: Sequence[int], box: Sequence[int],
                      swizzle: int, driver: Any = None) -> bytes:
    """``tensor_map`` for a launch: ``NO_TENSOR_MAP`` (and the kernel copies with cp.async) where none describes the
    array (``TensorMapError``: an empty or huge dimension, overlapping rows, no entry point in the driver), also
    remembered. A driver's refusal of a map that meets every documented rule still raises."""
    return _remembered(dtype, ptr, shape, strides, box, swizzle, driver, fallback=True)


def _remembered(dtype: str, ptr: int, shape: Sequence[int], strides: Sequence[int], box: Sequence[int],
                swizzle: int, driver: Any, *, fallback: bool) -> bytes:
    """The cached map of these arguments, encoded on a miss (``fallback``: ``NO_TENSOR_MAP`` for arguments no map
    describes, remembered too; without it such arguments raise, even when a launch remembered them so)."""
    key = (dtype, ptr, tuple(shape), tuple(strides), tuple(box), swizzle)
    found = _cache.get(key)
    if found is not None and (fallback or found is not NO_TENSOR_MAP):
        return found
    try:
        found = encode_tiled(dtype, ptr, shape, strides, box, swizzle, driver)
    except TensorMapError:
        if not fallback:
            raise
        found = NO_TENSOR_MAP
    if len(_cache) >= CACHE_LIMIT:
        _cache.clear()
    _cache[key] = found
    return found


def clear_cache() -> None:
    """Forget every map encoded so far (tests)."""
    _cache.clear()


__all__ = ["CACHE_LIMIT", "MAX_DIM", "NO_TENSOR_MAP", "TENSOR_MAP_ALIGN", "TENSOR_MAP_BYTES", "TensorMapError",
           "check_tiled", "clear_cache", "encode_tiled", "launch_tensor_map", "tensor_map"]
