"""IR types: element dtypes, tiles of a fixed shape, and arrays whose shape is known only at run time."""

from __future__ import annotations

import numbers
from typing import Any

from tilejit.records import Record

# The types are Records, not dataclasses: defining a kernel imports this module, and ``dataclasses``
# (with ``inspect``, ``ast`` and ``tokenize`` behind it) costs a new process several milliseconds.
# Equality and hashing are written out: the compiler compares types constantly.


class DType(Record):
    """An element type. ``kind`` is 'b' (bool), 'i' (signed), 'u' (unsigned) or 'f' (float). What a backend
    spells it as is the backend's (the CUDA backend's ``tables.C_TYPES``)."""

    _fields = ("name", "kind", "bits", "short")
    __slots__ = _fields
    name: str
    kind: str
    bits: int
    short: str

    def __init__(self, name: str, kind: str, bits: int, short: str) -> None:
        self._init(name, kind, bits, short)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not DType:
            return NotImplemented
        return self is other or (self.name == other.name and self._values() == other._values())  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self.name)

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        """A predefined dtype unpickles as itself (``is tj.float32`` stays true)."""
        if BY_NAME.get(self.name) == self:
            return _predefined, (self.name,)
        return super().__reduce__()

    @property
    def itemsize(self) -> int:
        return max(1, self.bits // 8)

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    @property
    def is_signed(self) -> bool:
        return self.kind in "if"

    @property
    def is_float8(self) -> bool:
        return self.kind == "f" and self.bits == 8

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    def __repr__(self) -> str:
        return f"tj.{self.name}"

    def __str__(self) -> str:
        return self.short

    def __getitem__(self, key: object) -> ArrayType:
        """``tj.float32[:]`` is a rank-1 array type, ``tj.float32[:, :]`` rank 2 (for ``tj.compile``);
        ``tj.float16[:, ::1]`` also promises unit inner stride and 16-byte-aligned rows."""
        dims = key if isinstance(key, tuple) else (key,)
        plain = slice(None)
        contiguous = bool(dims) and dims[-1] == slice(None, None, 1)
        if not dims or any(d != plain for d in (dims[:-1] if contiguous else dims)):
            raise TypeError(
                f"array types are written tj.{self.name}[:] (rank 1), tj.{self.name}[:, :] (rank 2), ... "
                f"with ::1 as the last dimension for unit inner stride; got tj.{self.name}[{key!r}]"
            )
        return ArrayType(self, len(dims), contiguous)


bool_ = DType("bool", "b", 8, "i1")
int8 = DType("int8", "i", 8, "i8")
int16 = DType("int16", "i", 16, "i16")
int32 = DType("int32", "i", 32, "i32")
int64 = DType("int64", "i", 64, "i64")
uint8 = DType("uint8", "u", 8, "u8")
uint16 = DType("uint16", "u", 16, "u16")
uint32 = DType("uint32", "u", 32, "u32")
uint64 = DType("uint64", "u", 64, "u64")
float16 = DType("float16", "f", 16, "f16")
bfloat16 = DType("bfloat16", "f", 16, "bf16")
float32 = DType("float32", "f", 32, "f32")
float64 = DType("float64", "f", 64, "f64")
# 8-bit floats (torch's and ml_dtypes' names): storage, casts and mma only; arithmetic needs a cast first
float8_e4m3fn = DType("float8_e4m3fn", "f", 8, "f8e4m3fn")
float8_e5m2 = DType("float8_e5m2", "f", 8, "f8e5m2")

ALL_DTYPES: tuple[DType, ...] = (
    bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16, float32, float64,
)
#: Not in ALL_DTYPES, the dtypes every operation takes: 8-bit floats are loaded, stored, cast and multiplied (mma).
FLOAT8_DTYPES: tuple[DType, ...] = (float8_e4m3fn, float8_e5m2)
BY_NAME: dict[str, DType] = {d.name: d for d in ALL_DTYPES + FLOAT8_DTYPES} | {
    d.short: d for d in ALL_DTYPES + FLOAT8_DTYPES}


def _predefined(name: str) -> DType:
    return BY_NAME[name]


def promote(a: DType, b: DType) -> DType:
    """numpy's promotion of two array dtypes, with bfloat16 (bf16 with f16 gives f32, as in torch) and the 8-bit
    floats (a wider float wins; e4m3fn with e5m2 gives f16, as in Triton)."""
    if a == b:
        return a
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    if a.is_float and b.is_float:
        if {a, b} == {float16, bfloat16}:
            return float32
        if a.bits == b.bits == 8:
            return float16
        return a if a.bits > b.bits else b
    if a.is_float or b.is_float:
        f, i = (a, b) if a.is_float else (b, a)
        if f.bits > i.bits:
            return f
        return float64 if i.bits >= 32 or f.bits >= 32 else float32
    if a.kind == b.kind:
        return a if a.bits > b.bits else b
    s, u = (a, b) if a.kind == "i" else (b, a)
    if s.bits > u.bits:
        return s
    if u.bits == 64:
        return float64
    return BY_NAME[f"int{u.bits * 2}"]


class TileType(Record):
    """A tile: ``shape`` is compile-time (powers of two); ``()`` is a scalar held uniformly by the block."""

    _fields = ("dtype", "shape")
    __slots__ = _fields
    dtype: DType
    shape: tuple[int, ...]

    def __init__(self, dtype: DType, shape: tuple[int, ...] = ()) -> None:
        # set directly rather than through ``_init``: the compiler makes a TileType for every value
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "shape", shape)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not TileType:
            return NotImplemented
        return self.shape == other.shape and self.dtype == other.dtype  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((self.dtype.name, self.shape))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()

    def with_dtype(self, dtype: DType) -> TileType:
        return TileType(dtype, self.shape)

    def with_shape(self, shape: tuple[int, ...]) -> TileType:
        return TileType(self.dtype, tuple(shape))

    def __str__(self) -> str:
        if not self.shape:
            return str(self.dtype)
        return "tile<" + "x".join(map(str, self.shape)) + f"x{self.dtype}>"


class ArrayType(Record):
    """A kernel array parameter: dtype and rank at compile time; pointer, shape and strides at run time."""

    _fields = ("dtype", "ndim", "contiguous")
    __slots__ = _fields
    dtype: DType
    ndim: int
    # a promise for ahead-of-time compiles (not part of the type's identity): unit inner stride,
    # 16-byte-aligned base and outer strides, so the backend may use vector and cp.async copies
    contiguous: bool

    def __init__(self, dtype: DType, ndim: int, contiguous: bool = False) -> None:
        self._init(dtype, ndim, contiguous)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not ArrayType:
            return NotImplemented
        return self.ndim == other.ndim and self.dtype == other.dtype  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((self.dtype.name, self.ndim))

    def __str__(self) -> str:
        return f"array<{self.dtype}, {self.ndim}>"


class ArrayHint(Record):
    """Layout facts of an array argument seen at launch that allow vector accesses: ``unit_stride``
    (innermost stride == 1), ``aligned16`` (base pointer % 16 == 0 and every row starts 16-byte aligned),
    ``index32`` (every stride in [0, 2**31): with a launch-time check that every shape is too, the Tile IR
    backend may assume both, as TMA needs), ``disjoint`` (shares no byte with any other array argument of the
    launch: the Tile IR backend's read-only loops then need no memory token), ``extent16`` (the innermost
    extent is a multiple of 16 bytes: tileiras may then store with TMA). Part of a specialization's key, not of
    its ``ArrayType``."""

    _fields = ("unit_stride", "aligned16", "index32", "disjoint", "extent16")
    __slots__ = _fields
    unit_stride: bool
    aligned16: bool
    index32: bool
    disjoint: bool
    extent16: bool

    def __init__(self, unit_stride: bool = False, aligned16: bool = False, index32: bool = False,
                 disjoint: bool = False, extent16: bool = False) -> None:
        self._init(unit_stride, aligned16, index32, disjoint, extent16)


class ArrayListType(Record):
    """A kernel parameter holding a run-time number of arrays of one dtype and rank (issue 20): each element has its
    own pointer, shape and strides, all at run time; indexing it (``ArrayItemOp``) with a run-time integer gives an
    ``ArrayType`` value. A launch passes it as a table with one row of ``1 + 2 * ndim`` int64 (pointer, shape,
    strides) per array, plus an all-zero row (an empty array) that an index out of range reads."""

    _fields = ("dtype", "ndim")
    __slots__ = _fields
    dtype: DType
    ndim: int

    def __init__(self, dtype: DType, ndim: int) -> None:
        self._init(dtype, ndim)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not ArrayListType:
            return NotImplemented
        return self.ndim == other.ndim and self.dtype == other.dtype  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(("list", self.dtype.name, self.ndim))

    @property
    def element(self) -> ArrayType:
        """The type of one of its arrays."""
        return ArrayType(self.dtype, self.ndim)

    @property
    def record(self) -> int:
        """int64 words per array in the launch's table: pointer, shape, strides."""
        return 1 + 2 * self.ndim

    def __str__(self) -> str:
        return f"array_list<{self.dtype}, {self.ndim}>"


def array_list(element: ArrayType) -> ArrayListType:
    """``tj.array_list(tj.float16[:, :])``: the type of a parameter that takes a tuple or list of such arrays
    (for ``tj.compile``; a launch infers it from the arrays given)."""
    if not isinstance(element, ArrayType):
        raise TypeError(f"tj.array_list takes an array type such as tj.float32[:, :], got {element!r}")
    return ArrayListType(element.dtype, element.ndim)


Type = TileType | ArrayType | ArrayListType


def scalar(dtype: DType) -> TileType:
    """The 0-d tile type of ``dtype``."""
    return TileType(dtype, ())


def normalize_const(v: Any) -> Any:
    """numpy scalars become Python scalars; tuples and lists are normalized item by item (constants a
    kernel reads; here, not in the front end, so a warm launch can fingerprint them without loading it)."""
    if isinstance(v, bool | int | float | str | DType) or v is None:
        return v
    if isinstance(v, tuple):
        return tuple(normalize_const(x) for x in v)
    if isinstance(v, list):
        return [normalize_const(x) for x in v]
    if type(v).__module__ == "numpy" and getattr(v, "shape", None) == () and hasattr(v, "item"):
        item = v.item()
        if isinstance(item, bool | int | float):
            return item
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return int(v)
    if isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral):
        return float(v)
    return v
