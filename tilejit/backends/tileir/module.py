"""A small in-memory CUDA Tile IR module: types, SSA values, ops and one table of op encodings.

The lowering builds this module from tilejit's IR; ``bytecode`` encodes it and ``text`` prints it,
both driven by ``OPS`` so that one op is one table row, not a hand-written encoder and printer each.
Facts about the format are in the project notes (TILEIR_FORMAT.md), from NVIDIA's Tile IR
specification and the op registry of the public cuda-tile repository.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Any

from tilejit.language.ir.core import UNKNOWN_LOC, Loc
from tilejit.language.ir.float8 import float8_bits
from tilejit.language.ir.types import DType, float8_e4m3fn, float8_e5m2

#: Bytecode versions this writer can emit, oldest first (the spec's stability chapters 13.1-13.5).
VERSIONS: tuple[tuple[int, int], ...] = ((13, 1), (13, 2), (13, 3), (13, 4), (13, 5))

#: Scalar element types: text name -> bytecode type tag.
SCALARS: dict[str, int] = {
    "i1": 0x00, "i8": 0x01, "i16": 0x02, "i32": 0x03, "i64": 0x04, "f16": 0x05, "bf16": 0x06,
    "f32": 0x07, "tf32": 0x08, "f64": 0x09, "f8E4M3FN": 0x0A, "f8E5M2": 0x0B,
}

#: The 8-bit float element types: text name -> tilejit dtype (constants are its bit patterns).
FLOAT8: dict[str, DType] = {"f8E4M3FN": float8_e4m3fn, "f8E5M2": float8_e5m2}

#: Padding values a partition view may name: text name -> bytecode byte.
PADDINGS: dict[str, int] = {"zero": 0, "neg_zero": 1, "nan": 2, "pos_inf": 3, "neg_inf": 4}


@dataclass(frozen=True)
class Scalar:
    """An element type such as ``f32`` (only ever inside a tile, pointer or view)."""

    name: str


@dataclass(frozen=True)
class Ptr:
    """A global-memory pointer to ``elem``."""

    elem: Scalar


@dataclass(frozen=True)
class Tile:
    """A tile of ``elem`` (a scalar or pointer) with a static shape; ``()`` is a scalar tile."""

    elem: Scalar | Ptr
    shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class TensorView:
    """A strided view of global memory; ``None`` in shape or strides is dynamic (an operand)."""

    elem: Scalar
    shape: tuple[int | None, ...]
    strides: tuple[int | None, ...]


@dataclass(frozen=True)
class PartitionView:
    """A tensor view cut into tiles of ``tile`` (indexed by tile coordinates), padded past the end."""

    tile: tuple[int, ...]
    view: TensorView
    dim_map: tuple[int, ...]
    padding: str | None = None


@dataclass(frozen=True)
class Token:
    """An ordering token of the memory model."""


@dataclass(frozen=True)
class FuncType:
    """A function signature."""

    params: tuple[Type, ...]
    results: tuple[Type, ...] = ()


Type = Scalar | Ptr | Tile | TensorView | PartitionView | Token | FuncType


class TValue:
    """An SSA value of the module; ``name`` is only a hint for the text form."""

    __slots__ = ("name", "type")

    def __init__(self, type: Type, name: str = "") -> None:
        self.type = type
        self.name = name

    def __repr__(self) -> str:
        return f"TValue({self.name or '?'}: {self.type})"


Operand = TValue | list[TValue] | None


@dataclass(eq=False)
class TOp:
    """One Tile IR op: ``operands`` follow the op's layout in ``OPS`` (a value, a list or ``None``);
    ``regions`` hold one block each (the body of a ``reduce``, ...)."""

    name: str
    results: list[TValue]
    operands: list[Operand] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    loc: Loc = UNKNOWN_LOC
    regions: list[TBlock] = field(default_factory=list)


@dataclass(eq=False)
class TBlock:
    """A region's single block: arguments and ops (ending in its terminator, e.g. ``yield``)."""

    args: list[TValue]
    ops: list[TOp]


@dataclass(eq=False)
class TFunction:
    """An entry (kernel) function with its parameters and straight-line body; ``hints`` are its optimization
    hints per architecture (``"sm_90"``, ``"default"``, ...): hint name -> value (see ``ENTRY_HINTS``)."""

    name: str
    params: list[TValue]
    body: list[TOp]
    loc: Loc = UNKNOWN_LOC
    hints: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass(eq=False)
class TModule:
    """A ``cuda_tile.module``: a name and its entries."""

    name: str
    functions: list[TFunction]


@dataclass(frozen=True)
class OpSpec:
    """How one op is encoded: its opcode and its fields in order.

    Layout items: ``res`` one result type; ``res*`` the counted list of result types; ``res3``
    three result types; ``ftz`` the flush-to-zero flag; ``tko`` the load/store flag bits (bit 2:
    a token operand follows); ``enum:<attr>`` one byte; ``const`` a constant-table index of
    ``attrs['data']``; ``inbounds`` the per-dimension in-bounds flags (13.4+ only); ``nan_ftz``
    the maxf/minf flag bits (bit 0 propagate NaN); ``int:<attr>`` a varint; ``flag:<attr>`` a
    boolean attribute as one varint (0 when absent); ``i32s:<attr>`` a counted array of 32-bit
    integers; ``str:<attr>`` a string-table index; ``identities`` the reduce/scan identities (a tagged
    array); ``o`` an operand; ``o*`` a counted operand list; ``o?`` an optional operand (``o?:<name>``
    names it for ``flags``); ``flags:<a>,<b>,...`` a varint of presence bits, bit i for name i (an attribute
    or a named optional operand); ``enum?:<attr>`` one byte when the attribute is given; ``regions`` the op's
    regions;
    ``pred`` an ``assume`` predicate (``attrs['predicate']``: ``("div_by", n)``, ``("div_by", n, every, along)``
    or ``("bounded", lo, hi)``, ``None`` for an open end).
    ``@13.2`` after an item: only from that version on (an attribute the registry added later; older
    versions imply its default). ``since``: the first bytecode version that has the op at all. ``res*:13.2``: the
    counted result types, none before that version (the writer then defines the op's results with ``make_token``
    ops after it: ``print_tko``'s token).
    """

    opcode: int
    layout: tuple[str, ...]
    since: tuple[int, int] = (13, 1)


OPS: dict[str, OpSpec] = {
    "absf": OpSpec(0, ("res", "o")),
    "absi": OpSpec(1, ("res", "o")),
    "addf": OpSpec(2, ("res", "ftz", "enum:rounding", "o", "o")),
    "addi": OpSpec(3, ("res", "enum:overflow", "o", "o")),
    "andi": OpSpec(4, ("res", "o", "o")),
    "assume": OpSpec(6, ("res", "pred", "o")),
    "atan2": OpSpec(110, ("res", "o", "o"), since=(13, 2)),
    "atomic_cas_tko": OpSpec(
        7, ("res2", "flags:mask,token", "enum:ordering", "enum:scope", "o", "o", "o", "o?:mask", "o?:token")
    ),
    "atomic_rmw_tko": OpSpec(
        8, ("res2", "flags:mask,token", "enum:ordering", "enum:scope", "enum:mode", "o", "o", "o?:mask", "o?:token")
    ),
    "bitcast": OpSpec(9, ("res", "o")),
    "break": OpSpec(10, ("res*", "o*")),
    "broadcast": OpSpec(11, ("res", "o")),
    "cat": OpSpec(12, ("res", "int:dim", "o", "o")),
    "ceil": OpSpec(13, ("res", "o")),
    "cmpf": OpSpec(14, ("res", "enum:predicate", "enum:comparison", "o", "o")),
    "cmpi": OpSpec(15, ("res", "enum:predicate", "enum:signedness", "o", "o")),
    "constant": OpSpec(16, ("res", "const")),
    "continue": OpSpec(17, ("res*", "o*")),
    "cos": OpSpec(18, ("res", "o")),
    "cosh": OpSpec(19, ("res", "o")),
    "divf": OpSpec(20, ("res", "ftz", "enum:rounding", "o", "o")),
    "divi": OpSpec(21, ("res", "enum:signedness", "enum:rounding", "o", "o")),
    "exp": OpSpec(23, ("res", "enum:rounding@13.3", "o")),
    "exp2": OpSpec(24, ("res", "ftz", "o")),
    "exti": OpSpec(37, ("res", "enum:signedness", "o")),
    "extract": OpSpec(38, ("res*", "o*")),
    "floor": OpSpec(39, ("res", "o")),
    "fma": OpSpec(40, ("res", "ftz", "enum:rounding", "o", "o", "o")),
    "for": OpSpec(41, ("res*", "int:unsigned_cmp@13.2", "o*", "regions")),
    "fpowf": OpSpec(84, ("res", "o", "o")),
    "ftof": OpSpec(42, ("res", "enum:rounding", "o")),
    "ftoi": OpSpec(43, ("res", "flag:saturating@13.4", "enum:signedness", "enum:rounding", "o")),
    "get_num_tile_blocks": OpSpec(46, ("res3",)),
    "get_tile_block_id": OpSpec(48, ("res3",)),
    "if": OpSpec(50, ("res*", "o", "regions")),
    "int_to_ptr": OpSpec(51, ("res", "o")),
    "iota": OpSpec(58, ("res",)),
    "itof": OpSpec(59, ("res", "enum:signedness", "enum:rounding", "o")),
    "join_tokens": OpSpec(60, ("res*", "o*")),
    "load_ptr_tko": OpSpec(
        61, ("res2", "flags:scope,hints,mask,padding,token", "enum:ordering", "enum?:scope", "o", "o?:mask",
             "o?:padding", "o?:token")
    ),
    "load_view_tko": OpSpec(62, ("res*", "tko", "enum:ordering", "access_hints", "inbounds", "o", "o*", "o?")),
    "log": OpSpec(63, ("res", "o")),
    "log2": OpSpec(64, ("res", "o")),
    "loop": OpSpec(65, ("res*", "o*", "regions")),
    "make_partition_view": OpSpec(66, ("res", "o")),
    "make_tensor_view": OpSpec(67, ("res*", "o", "o*", "o*")),
    "make_token": OpSpec(68, ("res",)),
    "maxf": OpSpec(69, ("res", "nan_ftz", "o", "o")),
    "maxi": OpSpec(70, ("res", "enum:signedness", "o", "o")),
    "minf": OpSpec(71, ("res", "nan_ftz", "o", "o")),
    "mini": OpSpec(72, ("res", "enum:signedness", "o", "o")),
    "mmaf": OpSpec(73, ("res", "int:fast_acc@13.3", "o", "o", "o")),
    "mmai": OpSpec(74, ("res", "enum:signedness", "enum:signedness", "o", "o", "o")),
    "mulf": OpSpec(76, ("res", "ftz", "enum:rounding", "o", "o")),
    "mulhii": OpSpec(77, ("res", "o", "o")),
    "muli": OpSpec(78, ("res", "enum:overflow", "o", "o")),
    "negf": OpSpec(79, ("res", "o")),
    "negi": OpSpec(80, ("res", "enum:overflow@13.2", "o")),
    "offset": OpSpec(81, ("res", "o", "o")),
    "ori": OpSpec(82, ("res", "o", "o")),
    "permute": OpSpec(83, ("res", "i32s:permutation", "o")),
    "print_tko": OpSpec(85, ("res*:13.2", "flags:token@13.2", "str:format", "o*", "o?:token@13.2")),
    "ptr_to_int": OpSpec(86, ("res", "o")),
    "ptr_to_ptr": OpSpec(87, ("res", "o")),
    "reduce": OpSpec(88, ("res*", "int:dim", "identities", "o*", "regions")),
    "remf": OpSpec(89, ("res", "o", "o")),
    "remi": OpSpec(90, ("res", "enum:signedness", "o", "o")),
    "reshape": OpSpec(91, ("res", "o")),
    "return": OpSpec(92, ("res*", "o*")),
    "rsqrt": OpSpec(93, ("res", "ftz", "o")),
    "scan": OpSpec(94, ("res*", "int:dim", "flag:reverse", "identities", "o*", "regions")),
    "select": OpSpec(95, ("res", "o", "o", "o")),
    "shli": OpSpec(96, ("res", "enum:overflow", "o", "o")),
    "shri": OpSpec(97, ("res", "enum:signedness", "o", "o")),
    "sin": OpSpec(98, ("res", "o")),
    "sinh": OpSpec(99, ("res", "o")),
    "sqrt": OpSpec(100, ("res", "ftz", "enum:rounding", "o")),
    "store_ptr_tko": OpSpec(
        101, ("res", "flags:scope,hints,mask,token", "enum:ordering", "enum?:scope", "o", "o", "o?:mask", "o?:token")
    ),
    "store_view_tko": OpSpec(102, ("res*", "tko", "enum:ordering", "access_hints", "inbounds", "o", "o", "o*", "o?")),
    "subf": OpSpec(103, ("res", "ftz", "enum:rounding", "o", "o")),
    "subi": OpSpec(104, ("res", "enum:overflow", "o", "o")),
    "tanh": OpSpec(106, ("res", "enum:rounding@13.2", "o")),
    "trunci": OpSpec(107, ("res", "enum:overflow", "o")),
    "xori": OpSpec(108, ("res", "o", "o")),
    "yield": OpSpec(109, ("res*", "o*")),
}

#: Enum attributes: attribute name -> (text value -> byte).
ENUMS: dict[str, dict[str, int]] = {
    "rounding": {
        "nearest_even": 0, "zero": 1, "negative_inf": 2, "positive_inf": 3, "approx": 4, "full": 5,
        "nearest_int_to_zero": 6, "nearest_away": 7,
    },
    "overflow": {"none": 0, "nsw": 1, "nuw": 2, "nw": 3},
    "signedness": {"unsigned": 0, "signed": 1},
    "ordering": {"weak": 0, "relaxed": 1, "acquire": 2, "release": 3, "acq_rel": 4},
    "predicate": {
        "equal": 0, "not_equal": 1, "less_than": 2, "less_than_or_equal": 3, "greater_than": 4,
        "greater_than_or_equal": 5,
    },
    "comparison": {"unordered": 0, "ordered": 1},
    "scope": {"tl_blk": 0, "device": 1, "sys": 2},
    "mode": {
        "and": 0, "or": 1, "xor": 2, "add": 3, "addf": 4, "max": 5, "min": 6, "umax": 7, "umin": 8, "xchg": 9,
    },
}


#: Entry optimization hints: name -> (first bytecode version that has it, the values tileiras accepts).
ENTRY_HINTS: dict[str, tuple[tuple[int, int], tuple[int, ...]]] = {
    "num_cta_in_cga": ((13, 1), (1, 2, 4, 8, 16)),
    "occupancy": ((13, 1), tuple(range(1, 33))),
    "num_worker_warps_per_cta": ((13, 3), (4, 8)),
}
#: Architectures (and ``default``) an optimization-hints dictionary may name; sm_8x runs one CTA per CGA.
HINT_ARCHS = ("default", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_100", "sm_103", "sm_110",
              "sm_120", "sm_121")


def check_entry_hints(hints: dict[str, dict[str, int]], version: tuple[int, int]) -> None:
    """Refuse entry hints that tileiras would reject (or that ``version`` cannot carry), naming the hint."""
    for arch, items in hints.items():
        if arch not in HINT_ARCHS:
            raise ValueError(f"optimization hints: unknown architecture {arch!r} (one of {', '.join(HINT_ARCHS)})")
        for key, value in items.items():
            if key not in ENTRY_HINTS:
                raise ValueError(f"optimization hints: {arch}.{key} is not an entry hint "
                                 f"(one of {', '.join(ENTRY_HINTS)})")
            since, allowed = ENTRY_HINTS[key]
            if arch.startswith("sm_8") and key == "num_cta_in_cga":
                allowed = (1,)
            if type(value) is not int or value not in allowed:
                raise ValueError(f"optimization hints: {arch}.{key} = {value!r}; expected one of "
                                 f"{', '.join(map(str, allowed))}")
            if version < since:
                raise ValueError(f"optimization hints: {arch}.{key} needs bytecode version "
                                 f"{since[0]}.{since[1]} or newer, not {version[0]}.{version[1]}")


_PACK: dict[str, str] = {"f16": "<e", "f32": "<f", "f64": "<d", "i8": "<b", "i16": "<h", "i32": "<i", "i64": "<q"}


def constant_bytes(value: object, elem: Scalar) -> bytes:
    """One element's little-endian bytes, rounded to nearest even; floats too large for ``elem`` are inf."""
    if elem.name == "i1":  # MLIR's dense i1 splat: 0xFF is true (0x01 reads as a packed array: only element 0)
        return b"\xff" if value else b"\x00"
    if elem.name.startswith("i"):
        bits = int(elem.name[1:])
        v = int(value) & ((1 << bits) - 1)  # type: ignore[call-overload]
        return v.to_bytes(max(1, bits // 8), "little")
    f = float(value)  # type: ignore[arg-type]
    if elem.name in FLOAT8:
        return bytes([float8_bits(f, FLOAT8[elem.name])])
    if elem.name == "bf16":
        b32 = int.from_bytes(struct.pack("<f", _to_f32(f)), "little")
        if math.isnan(f):
            return (0x7FC0 | (b32 >> 16) & 0x8000).to_bytes(2, "little")
        return ((b32 + 0x7FFF + ((b32 >> 16) & 1)) >> 16).to_bytes(2, "little")
    try:
        return struct.pack(_PACK[elem.name], f)
    except OverflowError:  # past the largest finite value of a narrower float
        return struct.pack(_PACK[elem.name], math.copysign(math.inf, f))


def _to_f32(f: float) -> float:
    """``f`` as the nearest float32 (inf past its range)."""
    try:
        return float(struct.unpack("<f", struct.pack("<f", f))[0])
    except OverflowError:
        return math.copysign(math.inf, f)
