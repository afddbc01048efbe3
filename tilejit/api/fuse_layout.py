"""Where a fused kernel's arrays are, as the kernel sees them: numpy broadcasting of the arguments, the iteration
space with its size-1 axes dropped and its axes merged wherever every array allows (so that most calls become 1-D),
and for each array whether it is read and written *flat* (its elements in the iteration's C order: a 1-D view, tile
loads and stores) or through element offsets (``sum(index[d] * stride[d])`` from run-time sizes and strides:
broadcast, strided, reversed and overlapping views, any rank).

Nothing here depends on sizes beyond what the kernel's key holds: which arrays are flat, which merged axes each
gathered array varies along, whether one has a negative stride, and whether indices need 64 bits. Sizes and strides
are the kernel's run-time scalars.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

_INT32_MAX = (1 << 31) - 1


def broadcast_shapes(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...] | None:
    """numpy's broadcast of ``shapes`` (right-aligned; size 1 stretches), or None when they do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for k, n in enumerate(s):
            d = rank - len(s) + k
            if n == 1:
                continue
            if out[d] == 1:
                out[d] = n
            elif out[d] != n:
                return None
    return tuple(out)


def aligned_strides(shape: tuple[int, ...], strides: tuple[int, ...], full: tuple[int, ...]) -> tuple[int, ...]:
    """An array's element strides over the iteration space ``full`` it broadcasts to (right-aligned): 0 along an
    axis it lacks or has size 1 on."""
    pad = len(full) - len(shape)
    return (0,) * pad + tuple(0 if n == 1 else st for n, st in zip(shape, strides))


class Space(NamedTuple):
    """An iteration space after dropping size-1 axes and merging axes: its ``shape`` and each array's strides."""

    shape: tuple[int, ...]
    strides: tuple[tuple[int, ...], ...]


def coalesce(shape: tuple[int, ...], strides: Sequence[tuple[int, ...]]) -> Space:
    """Drop the axes of size 1, then merge each axis into the next inner one where every array steps over both as
    one (``stride[outer] == stride[inner] * size[inner]``, broadcast axes included: 0 == 0)."""
    keep = [d for d, n in enumerate(shape) if n != 1]
    dims = [shape[d] for d in keep]
    sts = [[st[d] for d in keep] for st in strides]
    d = len(dims) - 1
    while d > 0:
        if all(s[d - 1] == s[d] * dims[d] for s in sts):
            dims[d] *= dims[d - 1]
            del dims[d - 1]
            for s in sts:
                del s[d - 1]
        d -= 1
    return Space(tuple(dims), tuple(tuple(s) for s in sts))


def c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a C-contiguous array of ``shape``."""
    out = [0] * len(shape)
    step = 1
    for d in range(len(shape) - 1, -1, -1):
        out[d] = step
        step *= shape[d]
    return tuple(out)


class Access(NamedTuple):
    """How a kernel reaches one array: ``flat`` (every element, in the iteration's C order) or through offsets
    along ``axes`` (the merged axes it varies along), from its lowest address when ``negative`` (some stride < 0);
    ``runs``: the offsets of each aligned group of that many consecutive elements count up by one from a multiple
    of it (so a gather may read the group as one 16-byte vector), 0 when not. Part of the kernel's key."""

    flat: bool
    axes: tuple[int, ...] = ()
    negative: bool = False
    runs: int = 0


def access(space_shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int = 0) -> Access:
    """How a kernel iterating ``space_shape`` in C order reaches an array with these strides over it (of elements
    of ``itemsize`` bytes: 0 to never promise runs)."""
    if space_shape and strides == c_strides(space_shape):
        return Access(True)
    negative = any(s < 0 for s in strides)
    return Access(False, tuple(d for d, s in enumerate(strides) if s != 0), negative,
                  0 if negative else _runs(space_shape, strides, itemsize))


def _runs(space_shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> int:
    """The elements of a 16-byte vector when the offsets of an array come in runs of them: unit stride along the
    innermost axis, whose extent and the array's other strides are multiples of the vector (a broadcast row)."""
    vec = 16 // itemsize if 0 < itemsize <= 8 else 0
    if vec < 2 or not strides or strides[-1] != 1 or space_shape[-1] % vec:
        return 0
    return vec if all(s % vec == 0 for s in strides[:-1]) else 0


def magic(d: int) -> tuple[int, int]:
    """(multiplier, shift) that divide by ``d`` (2 <= d < 2**31) with a multiply: ``n // d == umulhi(n, m) >> s``
    for every 0 <= n < 2**31 (``m = ceil(2**p / d)``, ``p = 31 + ceil(log2 d)``: ``n * (m * d - 2**p) < 2**p``
    keeps the error below ``1/d``)."""
    assert 2 <= d < 1 << 31, d
    log = (d - 1).bit_length()
    return -(-(1 << (31 + log)) // d), log - 1


def span(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, int]:
    """(lowest, highest + 1) element offsets from element 0 that an array's elements touch (0, 0 when empty)."""
    if 0 in shape:
        return 0, 0
    lo = sum(s * (n - 1) for s, n in zip(strides, shape) if s < 0)
    hi = sum(s * (n - 1) for s, n in zip(strides, shape) if s > 0)
    return lo, hi + 1


def needs_int64(count: int, tile: int, spans: Sequence[int]) -> bool:
    """Whether a kernel's indices need 64 bits: ``count`` elements in tiles of ``tile``, or an array whose offsets
    reach past 2**31 - 1 (``spans``: each gathered array's extent in elements)."""
    return count + tile > _INT32_MAX or any(s > _INT32_MAX for s in spans)


def reduction_order(rank: int, axes: tuple[int, ...] | None) -> tuple[list[int], list[int]]:
    """(kept axes, reduced axes) of a reduction over ``axes`` (None: all) of a value of ``rank``, each in order."""
    red = list(range(rank)) if axes is None else list(axes)
    return [d for d in range(rank) if d not in red], red


__all__ = ["Access", "Space", "access", "aligned_strides", "broadcast_shapes", "c_strides", "coalesce", "magic",
           "needs_int64", "reduction_order", "span"]
