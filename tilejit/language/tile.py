"""The tile language: what a ``@tj.kernel`` or ``@tj.function`` body may call.

These functions only *describe* operations: the front end (``tilejit.language.frontend``)
recognizes them by identity and translates each call to tile IR. Called from ordinary Python they
raise ``TileCompileError``, except ``cdiv`` (also works on ints), ``static_range`` (a ``range``) and calls
with a value ``tj.fuse`` traces (its type's ``__tile_function__`` records the call: ``_traceable``).

Semantics follow numpy unless noted:

- Shapes of tiles are compile-time tuples of powers of two; scalars are 0-d tiles.
- Binary operators and the two-argument functions broadcast like numpy and promote dtypes like
  numpy (``tilejit.language.ir.types.promote``). Python ``int``/``float``/``bool`` values (and
  compile-time constants) are *weak*: they take the tile's dtype (NEP 50). Deviations from numpy,
  so that nothing silently becomes float64: an integer or bool tile/scalar with a float one gives
  that float dtype (``float32 + int32 -> float32``, as in torch and Triton); a float number with an
  integer or bool tile gives ``float32``; and ``/`` on integers gives ``float32``.
- Float math (``exp``, ``sqrt``, ``sin``...) on integer or bool tiles computes in ``float32``;
  ``abs``, ``maximum`` and ``minimum`` keep integer dtypes, and ``floor``/``ceil`` of an integer or
  bool tile return it unchanged (numpy 2). ``isnan``/``isinf`` of integers and bools are False and
  ``signbit`` is ``x < 0`` (numpy); ``popc``/``clz`` take 32- and 64-bit integers only.
- Integer ``+ - * ** <<`` and unary ``-`` wrap around as in numpy; integer ``//`` and ``%`` by zero
  give 0 (numpy warns and gives 0); ``bool + bool`` and ``bool * bool`` are logical or/and (bool),
  ``bool - bool`` is an error, and ``//``, ``%``, ``**`` of bools give ``int8``, as in numpy.
- Integer (and bool) tiles to a negative power: a constant exponent (``tj.arange(16) ** -1``) is a
  ``TileCompileError``, as numpy raises. Deviation: an exponent that is a tile (even one made from a
  constant, ``tj.int32(-1)``) is only known at run time, where numpy raises but this gives
  ``1 / x**-y`` truncated toward zero: 1 where ``x == 1``, 1 or -1 where ``x == -1`` (even or odd
  exponent), and 0 everywhere else, ``x == 0`` included.
- ``sum``/``prod``/``cumsum`` of bool or integers narrower than 32 bits return ``int32`` (or
  ``uint32`` for unsigned), and of 32-bit integers stay 32-bit and wrap (numpy: 64-bit); floats keep
  their dtype (16-bit floats accumulate in float32).
- Python's ``abs``, ``min`` and ``max`` work on run-time values (tiles, scalars such as ``tj.bid(0)``,
  ``x.shape[0]`` or scalar parameters): ``abs(x)`` is ``tj.abs(x)``, and ``min(a, b, c)`` is
  ``tj.minimum(tj.minimum(a, b), c)`` (``max``: ``tj.maximum``), with their promotion, broadcasting and NaN
  rule, not Python's order-dependent one (Python's ``min(nan, 1)`` is nan but ``min(1, nan)`` is 1; here a NaN
  in either operand gives NaN). With compile-time arguments only they are Python's. ``min``/``max`` of one
  run-time argument (a tile, an iterable) and their ``key=``/``default=`` are errors: reduce a tile with
  ``tj.min``/``tj.max``.
- Float math is CUDA's math library (``exp``, ``log``, ``sin``... within the CUDA Math API's 1-4 ulp
  bounds for float32, so results can differ from numpy's in the last bits); float32 ``/`` is within
  2 ulp (PTX ``div.full.f32``, GPU compilers' default), float64 ``/`` is exact. Float to integer
  casts of NaN, infinities and out-of-range values are undefined in numpy; here they saturate to the
  32- or 64-bit range (NaN gives 0) and 8- and 16-bit results keep the low bits of that. The sign of
  a zero that ``maximum``/``minimum``/``max``/``min`` pick between ``-0.0`` and ``0.0`` is unspecified.
- Floats are IEEE 754 as in numpy: float ``+``, ``-`` and ``*`` round once each (``x * y + z`` is never fused
  into one multiply-add, so it matches numpy bit for bit; ``fma`` fuses, rounding once), and subnormal numbers are
  kept, never flushed to zero (no ``-ftz``, no fast-math intrinsics unless a call asks with ``rounding_mode=`` or
  ``flush_to_zero=``; math functions keep them within the bounds above). Exceptions:
  float32 ``atomic_add`` flushes subnormal inputs and results to zero (the GPU's float32 atomic add on global
  memory always does; float64, float16 and bfloat16 atomic adds keep them); ``mma`` may fuse multiply-adds
  and sums in its own order (tensor cores), so it can differ from numpy's ``@`` in the last bits.
  ``sigmoid`` is ``1 / (1 + exp(-x))`` for ``x >= 0`` and ``exp(x) / (1 + exp(x))`` below (so it does not
  overflow: float32 results below ``x = -88.7`` are subnormal, not 0), within 6 ulp of the exact value for
  float32 and 4 for float64; comparing its result with a threshold can therefore differ from an exact
  sigmoid where the exact value lies within those few ulp of the threshold. Float to integer casts truncate
  toward zero; unsigned results saturate at the uint32/uint64 range (``-1.5`` to ``uint8`` gives 0).
- ``float8_e4m3fn`` and ``float8_e5m2`` (8-bit floats) are loaded, stored, cast, moved (shapes, gather/scatter)
  and multiplied (``mma``, float32 accumulator); arithmetic, comparisons, ``where`` and reductions on them are a
  ``TileCompileError`` asking for a cast first. Casts to them are torch's: round to nearest-even from float32 (wider
  inputs round to float32 first), past the largest finite value NaN (e4m3fn) or inf (e5m2), never saturating.
- A run-time loop ``for i in range(lo, hi, step)`` counts up: a constant step must be positive (a
  ``TileCompileError`` otherwise), and a run-time step of 0 or below runs no iterations.
- Arithmetic on compile-time values (Python numbers, ``tj.Constant`` parameters, tuples, strings) is
  Python's, exact: ``2 ** -1`` is ``0.5`` and integers do not wrap. It is bounded, with a
  ``TileCompileError`` saying what is too large (``tilejit.language.frontend.limits``): integers of
  at most 4096 bits (``3 ** 10**8`` is refused before it is computed), strings and tuples whose text
  has at most 2**20 characters, compile-time iteration (``tj.static_range``, loops over tuples,
  ``*`` unpacking, ``sum``/``tuple``/``sorted``... of a range) of at most 2**16 items, and at most
  2**19 translation steps per kernel (AST nodes, each unrolled iteration and inlined helper call
  counted again).
- ``rand``, ``randn``, ``randint``, ``randint4x`` and ``philox`` give the bits Triton's ``tl.*`` of the same
  names give for the same seed and offsets (Triton 3: Philox-4x32-10, 64-bit offsets as two counter words; ``philox``
  of 64-bit counters is Philox-4x64-10): a seed is an
  integer scalar (an ``int`` parameter or constant, taken as uint64 as Triton does: a negative int32 seed
  sign-extends), offsets an integer tile or scalar of 32 or 64 bits. ``randn`` is Triton's Box-Muller (its cosine
  branch) with CUDA's ``log``/``sqrt``/``cos``, so it matches a float32 numpy Box-Muller to a few ulp, not bits.
- Memory order: ``atomic_*`` take ``sem`` ("relaxed", "acquire", "release" or "acq_rel"; default "acq_rel", as
  in Triton and cuTile) and ``scope`` ("cta": the block, "gpu": the device, "sys": the device, the host and peer
  GPUs; default "gpu"). They order the memory ops of the whole block, not of one thread: with a release
  ("release", "acq_rel") every memory op of the block before the atomic happens before its updates (so a lock
  released with ``atomic_xchg(lock, 0, 0)`` publishes what the block stored before), with an acquire ("acquire",
  "acq_rel") its updates happen before every later memory op of the block. "relaxed" orders nothing else (the
  fastest: counters, histograms). The elements of one tile atomic are separate updates in no set order.
  ``fence(sem, scope)`` orders the block's memory ops before it before those after it (the CUDA backend only:
  Tile IR has no fence, only ordered atomics); ``barrier()`` makes the block's memory ops before it visible to
  its memory ops after it (the CUDA backend's ``__syncthreads``; Tile IR orders its memory ops with tokens).
- Device print: ``print(...)`` (Python's: ``sep=`` and ``end=`` too) and ``tj.print(prefix, *values)`` print
  from the device when the kernel runs. Compile-time values (strings, numbers, tuples) are written as Python's
  ``str``; run-time values (tiles, scalars, also in tuples and in f-strings without a format spec) by the
  backend: integers in decimal, bools as 1 and 0, floats with ``%.Ng`` and enough digits to read back
  (float32: 9). Tiles are broadcast to one shape. The CUDA backend writes a line per element, by the thread
  holding it: ``pid (x, y, z) tid T idx (i, j) <text>`` (the block, the thread, the element's index), and a
  print of scalars only is one line by thread 0, ``pid (x, y, z) tid 0 <text>``; Tile IR writes one line per
  print, ``pid (x, y, z) <text>``, each tile as a nested list in row order (``[[1, 2], [3, 4]]``). Lines of
  different blocks and threads come in any order. At most 16 run-time values and 4096 elements per print; the
  driver's printf buffer (1 MiB by default) drops lines past it.
"""

from __future__ import annotations

import enum
import functools
import types
from collections.abc import Callable, Sequence
from typing import Annotated, Any, NoReturn, TypeVar

from tilejit.errors import TileCompileError
from tilejit.language.ir.types import (
    DType,
    array_list,
    bfloat16,
    bool_,
    float8_e4m3fn,
    float8_e5m2,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)

_T = TypeVar("_T")


class _ConstantMarker:
    """Metadata that marks a parameter annotation as ``tj.Constant[...]``."""

    def __repr__(self) -> str:
        return "tj.Constant"


CONSTANT_MARKER = _ConstantMarker()

#: ``x: tj.Constant[int]`` makes ``x`` a compile-time constant: its value is substituted into the
#: kernel and each distinct value compiles a separate specialization. Static type checkers see ``int``.
Constant = Annotated[_T, CONSTANT_MARKER]

Tile = Any
Array = Any
Shape = Sequence[int]
Index = Sequence[Any]


def _outside(name: str) -> NoReturn:
    raise TileCompileError(
        f"tj.{name}() can only be used inside a @tj.kernel or @tj.function body (it describes tile "
        "code; it does not run in Python)"
    )


class TileFunction:
    """A helper written in the tile language; calls from kernels are inlined at compile time."""

    def __init__(self, func: Callable[..., Any]) -> None:
        if not callable(func) or not hasattr(func, "__code__"):
            raise TypeError(f"@tj.function expects a Python function, got {func!r}")
        self.func = func
        functools.update_wrapper(self, func)

    def __repr__(self) -> str:
        return f"<tilejit.TileFunction {self.func.__module__}.{self.func.__qualname__}>"

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TileCompileError(
            f"{self.func.__name__}() is a @tj.function: it can only be called from a @tj.kernel or "
            "another @tj.function"
        )


def function(func: Callable[..., Any]) -> TileFunction:
    """Mark ``func`` as a tile helper that kernels may call; the call is inlined (no recursion)."""
    return TileFunction(func)


def static_range(*args: int) -> range:
    """``range`` whose loop is unrolled at compile time; bounds must be compile-time ints."""
    return range(*args)


def cdiv(a: Any, b: Any) -> Any:
    """Ceiling division ``(a + b - 1) // b`` for positive ints (also works outside kernels)."""
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    _outside("cdiv")


# ------------------------------------------------------------------------------- block ids


def bid(axis: int) -> Tile:
    """This block's index along grid ``axis`` (0, 1 or 2), an int32 scalar."""
    _outside("bid")


def num_blocks(axis: int) -> Tile:
    """The number of blocks of the grid along ``axis`` (0, 1 or 2), an int32 scalar."""
    _outside("num_blocks")


def num_tiles(array: Array, axis: int, shape: Shape, order: Any = "C") -> Tile:
    """How many tiles of ``shape`` cover ``array`` along ``axis``: ``cdiv(array.shape[axis],
    shape[axis])`` as an int32 scalar; with ``order`` (as ``load``), of the permuted array:
    ``cdiv(array.shape[order[axis]], shape[axis])``."""
    _outside("num_tiles")


# ------------------------------------------------------------------------------- memory


def load(array: Array, index: Index, shape: Shape, padding: Any = 0, *, order: Any = "C") -> Tile:
    """The tile of ``shape`` at tile-grid ``index`` of ``array`` (one index per array dim): element
    ``j`` along dim ``d`` is ``array[index[d] * shape[d] + j]``. Elements past the end read
    ``padding`` (a compile-time number, e.g. ``float("-inf")``). The tile has the array's dtype.
    ``order`` (keyword-only, as cuTile's): a permutation of the array's dims applied before tiling,
    ``"C"`` (none), ``"F"`` (reversed) or a tuple: the tile of ``numpy.transpose(array, order)``, so
    that tile dim ``d`` (``index[d]``, ``shape[d]``) runs along array dim ``order[d]``;
    ``load(a, (j, i), (tn, tm), order="F")`` of a 2-d ``a`` is ``load(a, (i, j), (tm, tn)).T``."""
    _outside("load")


def store(array: Array, index: Index, tile: Tile, *, order: Any = "C") -> None:
    """Write ``tile`` at tile-grid ``index`` of ``array`` (indexing as ``load``; the tile's rank is
    the array's, or a scalar writes one element). Elements past the end are not written; the tile
    is cast to the array's dtype (like numpy assignment). ``order``: as ``load``'s (tile dim ``d`` runs
    along array dim ``order[d]``)."""
    _outside("store")


def gather(array: Array, indices: Any, padding: Any = 0) -> Tile:
    """``array[indices]`` element-wise: ``indices`` is an integer tile (rank-1 arrays) or a tuple of
    them, one per array dim, broadcast together. Out-of-range elements read ``padding``."""
    _outside("gather")


def scatter(array: Array, indices: Any, tile: Tile) -> None:
    """``array[indices] = tile`` element-wise (indices as ``gather``, broadcast with ``tile``);
    out-of-range elements are skipped."""
    _outside("scatter")


def atomic_add(array: Array, indices: Any, value: Any, sem: str = "acq_rel", scope: str = "gpu") -> Tile:
    """Atomically add ``value`` at ``indices`` (as ``scatter``); returns the old values. ``sem`` and ``scope``: the
    memory order (module doc, "Memory order")."""
    _outside("atomic_add")


def atomic_max(array: Array, indices: Any, value: Any, sem: str = "acq_rel", scope: str = "gpu") -> Tile:
    """Atomically store the maximum of the old value and ``value``; returns the old values."""
    _outside("atomic_max")


def atomic_min(array: Array, indices: Any, value: Any, sem: str = "acq_rel", scope: str = "gpu") -> Tile:
    """Atomically store the minimum of the old value and ``value``; returns the old values."""
    _outside("atomic_min")


def atomic_xchg(array: Array, indices: Any, value: Any, sem: str = "acq_rel", scope: str = "gpu") -> Tile:
    """Atomically replace the values at ``indices`` with ``value``; returns the old values."""
    _outside("atomic_xchg")


def atomic_cas(array: Array, indices: Any, expected: Any, desired: Any, sem: str = "acq_rel",
               scope: str = "gpu") -> Tile:
    """Atomic compare-and-swap: where the old value equals ``expected`` store ``desired``; returns
    the old values."""
    _outside("atomic_cas")


def fence(sem: str = "acq_rel", scope: str = "gpu") -> None:
    """A memory fence for the whole block: its memory ops before the fence happen before those after it, as
    threads of ``scope`` see them (``sem``: "acquire", "release" or "acq_rel"). CUDA backend only."""
    _outside("fence")


def barrier() -> None:
    """Wait for every thread of the block: the block's memory ops before the barrier are visible to its memory
    ops after it (Triton's ``debug_barrier``)."""
    _outside("barrier")


def print(prefix: str, *values: Any, sep: str = " ", end: str = "\n") -> None:
    """Print from the device, as ``print(prefix, *values, sep=sep, end=end)`` (module doc, "Device print");
    ``prefix`` is a compile-time string (Triton's ``device_print``)."""
    _outside("print")


# ------------------------------------------------------------------------------- hints


def multiple_of(x: Any, n: int) -> Tile:
    """``x`` (an integer scalar or tile: an offset, an index) unchanged, with the promise that it is a multiple
    of ``n`` (a compile-time power of two): of a tile, each element, or with ``max_contiguous`` on it (either
    order), the first of each run. Backends may rely on it (the CUDA backend's vector gathers, Tile IR's
    ``assume div_by``); a broken promise is undefined behaviour, as in Triton."""
    _outside("multiple_of")


def max_contiguous(x: Any, n: int) -> Tile:
    """The integer tile ``x`` unchanged, with the promise that along its last axis each aligned group of ``n``
    elements (a compile-time power of two; capped at the axis's length) counts up by one:
    ``tj.max_contiguous(tj.multiple_of(start + tj.arange(128), 16), 128)`` for a ``start`` that is a multiple
    of 16. A broken promise is undefined behaviour."""
    _outside("max_contiguous")


# ------------------------------------------------------------------------------- creation


def full(shape: Shape, value: Any, dtype: DType | None = None) -> Tile:
    """A tile of ``shape`` filled with ``value``; ``dtype`` defaults to int32/float32/bool by the
    value's Python type (or the value's dtype for a scalar)."""
    _outside("full")


def zeros(shape: Shape, dtype: DType = float32) -> Tile:
    """A tile of ``shape`` filled with 0."""
    _outside("zeros")


def ones(shape: Shape, dtype: DType = float32) -> Tile:
    """A tile of ``shape`` filled with 1."""
    _outside("ones")


def arange(n: int, dtype: DType = int32) -> Tile:
    """The 1-d tile ``[0, 1, ..., n-1]``; ``n`` is a compile-time power of two."""
    _outside("arange")


# ------------------------------------------------------------------------------- elementwise and shape


def where(cond: Any, x: Any, y: Any) -> Tile:
    """Element-wise ``x if cond else y`` with broadcasting and promotion of ``x`` and ``y``."""
    _outside("where")


def astype(x: Any, dtype: DType) -> Tile:
    """``x`` converted to ``dtype`` (C++ cast semantics: float to int truncates)."""
    _outside("astype")


def reshape(x: Any, shape: Shape) -> Tile:
    """Same elements in row-major order with a new ``shape`` (one entry may be -1)."""
    _outside("reshape")


def transpose(x: Any, axes: Sequence[int] | None = None) -> Tile:
    """``numpy.transpose``: permute the dimensions (reverse them by default)."""
    _outside("transpose")


def expand_dims(x: Any, axis: int) -> Tile:
    """Insert a dimension of size 1 at ``axis``."""
    _outside("expand_dims")


def broadcast_to(x: Any, shape: Shape) -> Tile:
    """``x`` broadcast to ``shape`` by numpy rules."""
    _outside("broadcast_to")


class RoundingMode(str, enum.Enum):
    """How a float op rounds (cuTile's ``ct.RoundingMode``), for ``rounding_mode=`` of ``exp``, ``tanh``,
    ``sqrt`` and ``truediv``; the plain strings (``"approx"``) work too. ``RN``/``RZ``/``RM``/``RP``: IEEE, to nearest
    even, toward zero, -inf, +inf; ``FULL``: the CUDA Math API's full-range function; ``APPROX``: the GPU's fast
    approximation (float32 only: ``__expf``, ``tanh.approx``, ``sqrt.approx``, ``__fdividef``)."""

    RN = "rn"
    RZ = "rz"
    RM = "rm"
    RP = "rp"
    FULL = "full"
    APPROX = "approx"


def extract(x: Any, index: Any, shape: Any) -> Tile:
    """One block of tile ``x`` (cuTile's ``ct.extract``): ``x`` split into blocks of ``shape`` (each dim a power of
    two dividing ``x``'s), the one at block index ``index``: element ``j`` along dim ``d`` is ``x``'s
    ``index[d] * shape[d] + j``. ``index`` and ``shape`` are compile-time (an int each for a 1-d tile);
    ``shape=()`` gives the element at ``index`` as a scalar."""
    _outside("extract")


def cat(tiles: Any, axis: int = 0) -> Tile:
    """The pair of tiles ``tiles = (a, b)`` concatenated along ``axis`` (cuTile's ``ct.cat``,
    ``numpy.concatenate``): ``a`` and ``b`` have one shape (so the result's stays a power of two); their
    dtypes promote as in arithmetic."""
    _outside("cat")


def split(x: Any) -> tuple[Tile, Tile]:
    """The two halves ``(x[..., 0], x[..., 1])`` of tile ``x`` along its last dim, which has size 2 and is
    dropped (Triton's ``tl.split``)."""
    _outside("split")


def join(a: Any, b: Any) -> Tile:
    """``a`` and ``b`` side by side along a new last dim of size 2 (Triton's ``tl.join``,
    ``numpy.stack((a, b), axis=-1)``; ``split``'s inverse), broadcast together and promoted as in arithmetic."""
    _outside("join")


def exp(x: Any, *, rounding_mode: RoundingMode | str | None = None) -> Tile:
    """Element-wise e**x; ``rounding_mode="approx"`` (float32): the fast ``__expf``, which flushes subnormals."""
    _outside("exp")


def exp2(x: Any, *, flush_to_zero: bool = False) -> Tile:
    """Element-wise 2**x; ``flush_to_zero=True`` (float32) flushes subnormal inputs and results to zero."""
    _outside("exp2")


def log(x: Any) -> Tile:
    """Element-wise natural logarithm."""
    _outside("log")


def log2(x: Any) -> Tile:
    """Element-wise base-2 logarithm."""
    _outside("log2")


def sqrt(x: Any, *, rounding_mode: RoundingMode | str | None = None, flush_to_zero: bool = False) -> Tile:
    """Element-wise square root, IEEE (rounded to nearest); ``rounding_mode`` ``"rz"``, ``"rm"``, ``"rp"``
    (float32, float64) or ``"approx"`` (float32), ``flush_to_zero`` (float32)."""
    _outside("sqrt")


def rsqrt(x: Any, *, flush_to_zero: bool = False) -> Tile:
    """Element-wise 1 / sqrt(x); ``flush_to_zero=True`` (float32) flushes subnormal inputs and results to zero."""
    _outside("rsqrt")


def sin(x: Any) -> Tile:
    """Element-wise sine."""
    _outside("sin")


def cos(x: Any) -> Tile:
    """Element-wise cosine."""
    _outside("cos")


def tanh(x: Any, *, rounding_mode: RoundingMode | str | None = None) -> Tile:
    """Element-wise hyperbolic tangent; ``rounding_mode="approx"`` (float32): the GPU's ``tanh.approx.f32``
    (sm_75 and newer; about 2**-11 relative error)."""
    _outside("tanh")


def asin(x: Any) -> Tile:
    """Element-wise arc sine (NaN outside [-1, 1])."""
    _outside("asin")


def acos(x: Any) -> Tile:
    """Element-wise arc cosine (NaN outside [-1, 1])."""
    _outside("acos")


def atan(x: Any) -> Tile:
    """Element-wise arc tangent."""
    _outside("atan")


def sinh(x: Any) -> Tile:
    """Element-wise hyperbolic sine."""
    _outside("sinh")


def cosh(x: Any) -> Tile:
    """Element-wise hyperbolic cosine."""
    _outside("cosh")


def log1p(x: Any) -> Tile:
    """Element-wise log(1 + x), accurate for small ``x``."""
    _outside("log1p")


def expm1(x: Any) -> Tile:
    """Element-wise e**x - 1, accurate for small ``x``."""
    _outside("expm1")


def cbrt(x: Any) -> Tile:
    """Element-wise cube root (negative for negative ``x``)."""
    _outside("cbrt")


def erfinv(x: Any) -> Tile:
    """Element-wise inverse error function: ``erf(erfinv(x)) == x`` on [-1, 1] (+-inf at +-1, NaN outside)."""
    _outside("erfinv")


def isnan(x: Any) -> Tile:
    """Element-wise ``x != x`` as a bool tile (False for integers and bools)."""
    _outside("isnan")


def isinf(x: Any) -> Tile:
    """Element-wise ``x`` is +inf or -inf, as a bool tile (False for integers and bools)."""
    _outside("isinf")


def signbit(x: Any) -> Tile:
    """Element-wise sign bit as a bool tile: True for negative numbers, ``-0.0``, NaNs with the sign bit set."""
    _outside("signbit")


def popc(x: Any) -> Tile:
    """Element-wise number of set bits of a 32- or 64-bit integer tile, as int32 (CUDA's ``__popc``)."""
    _outside("popc")


def clz(x: Any) -> Tile:
    """Element-wise number of leading zero bits of a 32- or 64-bit integer tile (32 or 64 for 0), as int32
    (CUDA's ``__clz``)."""
    _outside("clz")


def abs(x: Any) -> Tile:
    """Element-wise absolute value (keeps integer dtypes); Python's ``abs(x)`` of a run-time value is this."""
    _outside("abs")


def floor(x: Any) -> Tile:
    """Element-wise floor."""
    _outside("floor")


def ceil(x: Any) -> Tile:
    """Element-wise ceiling."""
    _outside("ceil")


def erf(x: Any) -> Tile:
    """Element-wise error function."""
    _outside("erf")


def sigmoid(x: Any) -> Tile:
    """Element-wise 1 / (1 + exp(-x))."""
    _outside("sigmoid")


def maximum(x: Any, y: Any) -> Tile:
    """Element-wise maximum with broadcasting and promotion (keeps integer dtypes), as ``numpy.maximum``: NaN
    if either operand is NaN; for bools, ``x or y``. Python's ``max(x, y, ...)`` of run-time values is this,
    nested from the left. Of two compile-time numbers: Python's ``max``."""
    _outside("maximum")


def minimum(x: Any, y: Any) -> Tile:
    """Element-wise minimum with broadcasting and promotion (keeps integer dtypes), as ``numpy.minimum``: NaN
    if either operand is NaN; for bools, ``x and y``. Python's ``min(x, y, ...)`` of run-time values is this,
    nested from the left. Of two compile-time numbers: Python's ``min``."""
    _outside("minimum")


def pow(x: Any, y: Any) -> Tile:
    """Element-wise ``x ** y``."""
    _outside("pow")


def atan2(y: Any, x: Any) -> Tile:
    """Element-wise arc tangent of ``y / x`` in the quadrant of the point ``(x, y)`` (``numpy.arctan2``), with
    broadcasting and promotion."""
    _outside("atan2")


def fma(x: Any, y: Any, z: Any) -> Tile:
    """Element-wise ``x * y + z`` rounded once (a fused multiply-add), with broadcasting and promotion (integers
    and bools compute in float32)."""
    _outside("fma")


def truediv(x: Any, y: Any, *, rounding_mode: RoundingMode | str | None = None,
            flush_to_zero: bool = False) -> Tile:
    """``x / y`` with a chosen rounding (cuTile's ``ct.truediv``): by default as ``/`` (float32 within 2 ulp,
    ``div.full.f32``; float64 IEEE); ``rounding_mode`` ``"rn"``, ``"rz"``, ``"rm"``, ``"rp"`` (IEEE, float32 and
    float64) or ``"approx"`` (float32, ``__fdividef``); ``flush_to_zero`` (float32)."""
    _outside("truediv")


# ------------------------------------------------------------------------------- reductions, scans, mma


def sum(x: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tile:
    """Sum along ``axis`` (all axes when None)."""
    _outside("sum")


def max(x: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tile:
    """Maximum along ``axis`` (all axes when None)."""
    _outside("max")


def min(x: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tile:
    """Minimum along ``axis`` (all axes when None)."""
    _outside("min")


def prod(x: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tile:
    """Product along ``axis`` (all axes when None)."""
    _outside("prod")


def argmax(x: Any, axis: int | None = None, keepdims: bool = False) -> Tile:
    """int32 index of the first maximum along ``axis`` (of the flattened tile when None)."""
    _outside("argmax")


def argmin(x: Any, axis: int | None = None, keepdims: bool = False) -> Tile:
    """int32 index of the first minimum along ``axis`` (of the flattened tile when None)."""
    _outside("argmin")


def cumsum(x: Any, axis: int = 0) -> Tile:
    """Inclusive prefix sum along ``axis``."""
    _outside("cumsum")


def mma(a: Any, b: Any, acc: Any, *, precision: str = "ieee") -> Tile:
    """``a @ b + acc`` for a: (M, K), b: (K, N), acc: (M, N). ``a`` and ``b`` share a dtype; ``acc``
    is float32 for float16/bfloat16/float32 inputs, float64 for float64, int32 for 8-bit ints.
    Returns the new accumulator (tensor cores where the target has them). ``precision="tf32"`` (float32 inputs)
    lets tensor cores multiply the inputs rounded to tf32 (10-bit mantissa), accumulating in float32; the
    default ``"ieee"`` keeps full float32 products."""
    _outside("mma")


def matmul(a: Any, b: Any, *, precision: str = "ieee") -> Tile:
    """``a @ b`` of 2-d tiles: accumulates like ``mma`` from zeros; float results are cast back to
    the inputs' dtype (as numpy), integer results stay int32. ``precision`` as ``mma``'s."""
    _outside("matmul")


# ------------------------------------------------------------------------------- random numbers


def umulhi(x: Any, y: Any) -> Tile:
    """Element-wise high half of the double-width product of two integer tiles (promoted as for ``*``), as Triton's
    ``tl.umulhi``: signed operands multiply as the unsigned numbers of their bits, and the result has their dtype."""
    _outside("umulhi")


def philox(seed: Any, c0: Any, c1: Any, c2: Any, c3: Any, n_rounds: int = 10) -> tuple[Tile, Tile, Tile, Tile]:
    """Philox-4x32 (32-bit counters) or Philox-4x64 (64-bit) of the counter ``(c0, c1, c2, c3)`` (integer tiles of
    one width, broadcast together) under the key ``seed`` (an integer scalar): four uint32 (uint64) tiles, as
    Triton's ``tl.philox``."""
    _outside("philox")


def randint4x(seed: Any, offsets: Any, n_rounds: int = 10) -> tuple[Tile, Tile, Tile, Tile]:
    """Four tiles of random uint32 bits for ``offsets`` (an integer tile or scalar of 32 or 64 bits) and an integer
    scalar ``seed``: ``philox(seed, lo, hi, 0, 0)`` of the offsets' low and high 32-bit words (hi = 0 for 32-bit
    offsets), as Triton 3's ``tl.randint4x``."""
    _outside("randint4x")


def randint(seed: Any, offsets: Any, n_rounds: int = 10) -> Tile:
    """The first tile of ``randint4x(seed, offsets)``, as Triton's ``tl.randint``."""
    _outside("randint")


def rand(seed: Any, offsets: Any, n_rounds: int = 10) -> Tile:
    """float32 uniform in [0, 1) from ``randint(seed, offsets)``, as Triton's ``tl.rand``: its bits as a signed
    integer ``x``, ``x if x >= 0 else -x - 1`` converted to float32, times a float32 scale just below ``2**-31``."""
    _outside("rand")


def randn(seed: Any, offsets: Any, n_rounds: int = 10) -> Tile:
    """float32 standard normal, as Triton's ``tl.randn``: Box-Muller's cosine branch of the uniforms of the first two
    tiles of ``randint4x``, ``sqrt(-2 * log(max(u1, 1e-7))) * cos(2 * pi * u2)``."""
    _outside("randn")


# ------------------------------------------------------------------------------- compile time


def static_print(*values: Any) -> None:
    """Print ``values`` when the kernel is translated (once per compile; a cached compile prints nothing):
    compile-time values as Python prints them, tiles and arrays as their types and shapes."""
    _outside("static_print")


def static_assert(cond: Any, msg: Any = None) -> None:
    """A ``TileCompileError`` at this line, with ``msg``, when the compile-time condition ``cond`` is false; a
    condition only known at run time (a tile, a scalar) is an error too."""
    _outside("static_assert")


def _traceable(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as Python calls it: an argument whose type has ``__tile_function__`` (the values ``tj.fuse`` traces)
    records the call, as numpy's ``__array_function__`` does; otherwise ``fn`` itself (the error of ``_outside``)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        for a in (*args, *kwargs.values()):
            hook = getattr(type(a), "__tile_function__", None)
            if hook is not None:
                return hook(fn.__name__, args, kwargs)
        return fn(*args, **kwargs)

    return call


_DTYPES = (bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16, float32, float64,
           float8_e4m3fn, float8_e5m2)

#: The tile language's names, listed here only: each is also ``tj.<name>`` (``tilejit.__getattr__`` reads this list),
#: and each function is one the front end implements (``frontend.calls.BUILTINS``) unless ``calls.HOST_ONLY``.
__all__ = [
    "Constant", "TileFunction", "function", "static_range", "cdiv", "bid", "num_blocks", "num_tiles",
    "load", "store", "gather", "scatter", "atomic_add", "atomic_max", "atomic_min", "atomic_xchg", "atomic_cas",
    "fence", "barrier", "print", "multiple_of", "max_contiguous", "array_list",
    "full", "zeros", "ones", "arange", "where", "astype", "reshape", "transpose", "expand_dims", "broadcast_to",
    "extract", "cat", "split", "join",
    "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "abs", "floor", "ceil",
    "maximum", "minimum", "pow", "erf", "sigmoid",
    "asin", "acos", "atan", "atan2", "sinh", "cosh", "log1p", "expm1", "cbrt", "erfinv", "fma",
    "isnan", "isinf", "signbit", "popc", "clz", "truediv", "RoundingMode",
    "sum", "max", "min", "prod", "argmax", "argmin", "cumsum", "mma", "matmul", "static_print", "static_assert",
    "umulhi", "philox", "randint4x", "randint", "rand", "randn",
    "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2",
]

#: Every function of the language that takes tiles may meet a traced value in Python (not ``cdiv``, which computes on
#: ints, nor the helpers for kernels' Python side).
for _name in __all__:
    _value = globals()[_name]
    if isinstance(_value, types.FunctionType) and _name not in ("function", "static_range", "cdiv"):
        globals()[_name] = _traceable(_value)
