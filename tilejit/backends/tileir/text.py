"""Print a ``TModule`` in the ``cuda_tile.module`` text form, in the syntax ``tileirdisasm`` prints.

Deterministic: values are named from the kernel's own names (made unique with ``_N``), others are
numbered in order of definition, and nothing depends on ids or dict order beyond program order.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable

from tilejit.backends.tileir.module import (
    FuncType,
    PartitionView,
    Ptr,
    Scalar,
    TBlock,
    TensorView,
    TFunction,
    Tile,
    TModule,
    Token,
    TOp,
    TValue,
    Type,
    constant_bytes,
)


def type_text(t: Type) -> str:
    """A type as the text form writes it, e.g. ``tile<16x32xf32>``."""
    if isinstance(t, Scalar):
        return t.name
    if isinstance(t, Ptr):
        return f"ptr<{t.elem.name}>"
    if isinstance(t, Tile):
        dims = "".join(f"{d}x" for d in t.shape)
        return f"tile<{dims}{type_text(t.elem)}>"
    if isinstance(t, TensorView):
        dims = "".join(f"{'?' if d is None else d}x" for d in t.shape)
        strides = ",".join("?" if s is None else str(s) for s in t.strides)
        return f"tensor_view<{dims}{t.elem.name}, strides=[{strides}]>"
    if isinstance(t, PartitionView):
        tile = "x".join(str(d) for d in t.tile)
        dim_map = "" if t.dim_map == tuple(range(len(t.tile))) else f", dim_map=[{', '.join(map(str, t.dim_map))}]"
        pad = "" if t.padding is None else f", padding_value = {t.padding}"
        return f"partition_view<tile=({tile}){dim_map}{pad}, {type_text(t.view)}>"
    if isinstance(t, Token):
        return "token"
    if isinstance(t, FuncType):
        return f"({', '.join(map(type_text, t.params))}) -> ({', '.join(map(type_text, t.results))})"
    raise TypeError(f"no text form for {t!r}")  # pragma: no cover - the Type union is closed


def constant_text(data: bytes, elem: Scalar) -> str:
    """``<f32: 2.000000e+00>``: floats in %e form when that reads back exactly, else as hex bits."""
    return f"<{elem.name}: {number_text(data, elem)}>"


def number_text(data: bytes, elem: Scalar) -> str:
    """One element's value as the text form writes it (``2.000000e+00``, ``0xFF800000``, ``-3``)."""
    name = elem.name
    if name.startswith("i"):
        return str(int.from_bytes(data, "little", signed=True))
    bits = int.from_bytes(data, "little")
    if name == "bf16":
        value = struct.unpack("<f", (bits << 16).to_bytes(4, "little"))[0]
    else:
        value = struct.unpack({"f16": "<e", "f32": "<f", "f64": "<d"}[name], data)[0]
    text = f"{value:.6e}"
    if math.isfinite(value) and _float_bits(float(text), name) == bits:
        return text
    return f"0x{bits:0{2 * len(data)}X}"


def _float_bits(value: float, name: str) -> int:
    """The bit pattern of ``value`` in float type ``name`` (-1 when it overflows)."""
    if name == "bf16":
        return int.from_bytes(struct.pack("<f", value)[2:], "little")
    code = {"f16": "<e", "f32": "<f", "f64": "<d"}[name]
    try:
        return int.from_bytes(struct.pack(code, value), "little")
    except OverflowError:
        return -1


class Printer:
    """Names values and prints ops, one line each."""

    def __init__(self) -> None:
        self.names: dict[TValue, str] = {}
        self.taken: set[str] = set()
        self.count = 0
        self.lines: list[str] = []

    def name(self, v: TValue) -> str:
        """The value's ``%name`` (assigned at its definition)."""
        if v not in self.names:
            hint = re.sub(r"[^A-Za-z0-9_]", "_", v.name)
            if not hint or hint[0].isdigit():
                hint = str(self.count)
                self.count += 1
            base, n = hint, 0
            while hint in self.taken:
                hint = f"{base}_{n}"
                n += 1
            self.taken.add(hint)
            self.names[v] = hint
        return "%" + self.names[v]

    def names_of(self, values: list[TValue]) -> str:
        """Comma-separated names of ``values``."""
        return ", ".join(self.name(v) for v in values)

    def function(self, fn: TFunction) -> None:
        """One ``entry`` with its parameters and body."""
        params = ", ".join(f"{self.name(p)}: {type_text(p.type)}" for p in fn.params)
        hints = ", ".join(  # keys sorted, as MLIR dictionaries are
            f"{arch} = {{{', '.join(f'{k} = {v}' for k, v in sorted(items.items()))}}}"
            for arch, items in sorted(fn.hints.items())
        )
        hints = f" optimization_hints=<{hints}>" if fn.hints else ""
        self.lines.append(f"  entry @{fn.name}({params}){hints} {{")
        self.ops(fn.body, "    ")
        self.lines.append("  }")

    def ops(self, ops: list[TOp], indent: str) -> None:
        """One line per op (and its regions below it) at ``indent``."""
        for op in ops:
            results = f"{self.names_of(op.results)} = " if op.results else ""
            self.lines.append(f"{indent}{results}{OP_TEXT[op.name](self, op)}")
            for block in op.regions:
                self.region(block, indent)

    def region(self, block: TBlock, indent: str) -> None:
        """``(%a: type, ...) {`` ops ``}``; names made inside are free again after it (as in MLIR)."""
        saved_taken, saved_count, saved_names = set(self.taken), self.count, dict(self.names)
        args = ", ".join(f"{self.name(a)}: {type_text(a.type)}" for a in block.args)
        self.lines.append(f"{indent}({args}) {{")
        self.ops(block.ops, indent + "  ")
        self.lines.append(f"{indent}}}")
        self.taken, self.count, self.names = saved_taken, saved_count, saved_names


def _v(p: Printer, op: TOp, i: int) -> str:
    """The name of single operand ``i``."""
    value = op.operands[i]
    assert isinstance(value, TValue)
    return p.name(value)


def _vs(p: Printer, op: TOp, i: int) -> list[TValue]:
    """Operand group ``i`` (a list of values)."""
    values = op.operands[i]
    assert isinstance(values, list)
    return values


def _t(op: TOp, i: int = 0) -> str:
    """The type text of result ``i``."""
    return type_text(op.results[i].type)


def _ot(op: TOp, i: int) -> str:
    """The type text of single operand ``i``."""
    value = op.operands[i]
    assert isinstance(value, TValue)
    return type_text(value.type)


def _rounding(op: TOp) -> str:
    """`` rounding<mode>`` unless it is the default (nearest_even)."""
    mode = op.attrs.get("rounding", "nearest_even")
    return "" if mode == "nearest_even" else f" rounding<{mode}>"


def _overflow(op: TOp) -> str:
    """`` overflow<mode>`` unless it is the default (none)."""
    mode = op.attrs.get("overflow", "none")
    return "" if mode == "none" else f" overflow<{mode}>"


def _float_binary(p: Printer, op: TOp) -> str:
    """``addf %a, %b : type`` and the other float arithmetic ops."""
    ftz = " flush_to_zero" if op.attrs.get("ftz") else ""
    return f"{op.name} {_v(p, op, 0)}, {_v(p, op, 1)}{_rounding(op)}{ftz} : {_t(op)}"


def _unary(p: Printer, op: TOp) -> str:
    """``negf %x : type`` and the other one-operand ops."""
    extra = _rounding(op) if op.name == "sqrt" else _overflow(op) if op.name == "negi" else ""
    return f"{op.name} {_v(p, op, 0)}{extra} : {_t(op)}"


def _plain_binary(p: Printer, op: TOp) -> str:
    """``andi %a, %b : type`` (ops with no attributes)."""
    return f"{op.name} {_v(p, op, 0)}, {_v(p, op, 1)} : {_t(op)}"


def _compare(p: Printer, op: TOp) -> str:
    """``cmpf <predicate> <ordering> %a, %b`` or ``cmpi <predicate> %a, %b, <signedness>``."""
    types = f"{_ot(op, 0)} -> {_t(op)}"
    if op.name == "cmpf":
        return f"cmpf {op.attrs['predicate']} {op.attrs['comparison']} {_v(p, op, 0)}, {_v(p, op, 1)} : {types}"
    return f"cmpi {op.attrs['predicate']} {_v(p, op, 0)}, {_v(p, op, 1)}, {op.attrs['signedness']} : {types}"


def _max_min(p: Printer, op: TOp) -> str:
    """``maxf %a, %b propagate_nan`` / ``maxi %a, %b signed`` and the min forms."""
    if op.name in ("maxi", "mini"):
        flags = f" {op.attrs['signedness']}"
    else:
        flags = (" propagate_nan" if op.attrs.get("propagate_nan") else "") + (
            " flush_to_zero" if op.attrs.get("ftz") else ""
        )
    return f"{op.name} {_v(p, op, 0)}, {_v(p, op, 1)}{flags} : {_t(op)}"


def _reduce(p: Printer, op: TOp) -> str:
    """The ``reduce`` line (its region follows on the next lines)."""
    operands = _vs(p, op, 0)
    idents = ", ".join(
        f"{number_text(constant_bytes(value, elem), elem)} : {elem.name}" for value, elem in op.attrs["identities"]
    )
    types = f"{', '.join(type_text(v.type) for v in operands)} -> {', '.join(type_text(r.type) for r in op.results)}"
    return f"reduce {p.names_of(operands)} dim={op.attrs['dim']} identities=[{idents}] : {types}"


def _mma(p: Printer, op: TOp) -> str:
    """``mmaf %a, %b, %acc : a, b, acc`` or ``mmai %a, %b, %acc signed signed : a, b, acc``."""
    sign = f" {op.attrs['signedness']} {op.attrs['signedness']}" if op.name == "mmai" else ""
    fast = " fast_acc" if op.attrs.get("fast_acc") else ""
    types = ", ".join(_ot(op, i) for i in range(3))
    return f"{op.name} {_v(p, op, 0)}, {_v(p, op, 1)}, {_v(p, op, 2)}{sign}{fast} : {types}"


def _assume(p: Printer, op: TOp) -> str:
    """``assume div_by<16>, %x : type`` or ``assume bounded<0, ?>, %x : type``."""
    kind, *args = op.attrs["predicate"]
    shown = ", ".join("?" if a is None else str(a) for a in args)
    return f"assume {kind}<{shown}>, {_v(p, op, 0)} : {_t(op)}"


def _int_binary(p: Printer, op: TOp) -> str:
    """``addi %a, %b : type`` and the other integer arithmetic ops."""
    return f"{op.name} {_v(p, op, 0)}, {_v(p, op, 1)}{_overflow(op)} : {_t(op)}"


def _convert(p: Printer, op: TOp) -> str:
    """Conversions and shape changes: ``ftof %x : src -> dst`` and the like."""
    sign = f" {op.attrs['signedness']}" if "signedness" in op.attrs else ""
    extra = _rounding(op) if op.name in ("ftof", "itof") else _overflow(op) if op.name == "trunci" else ""
    return f"{op.name} {_v(p, op, 0)}{sign}{extra} : {_ot(op, 0)} -> {_t(op)}"


def _constant(p: Printer, op: TOp) -> str:
    """``constant <f32: 1.000000e+00> : tile<...>``."""
    t = op.results[0].type
    assert isinstance(t, Tile) and isinstance(t.elem, Scalar)
    return f"constant {constant_text(op.attrs['data'], t.elem)} : {_t(op)}"


def _tensor_view(p: Printer, op: TOp) -> str:
    """``make_tensor_view %base, shape = [...], strides = [...] : index type -> view type``."""
    t = op.results[0].type
    assert isinstance(t, TensorView)
    shape, strides = iter(_vs(p, op, 1)), iter(_vs(p, op, 2))
    sh = ", ".join(p.name(next(shape)) if d is None else str(d) for d in t.shape)
    st = ", ".join(p.name(next(strides)) if s is None else str(s) for s in t.strides)
    dyn = _vs(p, op, 1) + _vs(p, op, 2)
    index_type = f"{type_text(dyn[0].type)} -> " if dyn else ""
    return f"make_tensor_view {_v(p, op, 0)}, shape = [{sh}], strides = [{st}] : {index_type}{_t(op)}"


def _view_access(p: Printer, op: TOp, view: int) -> str:
    """``%view[%i, %j] token = %t`` (the token part only when there is one)."""
    index = _vs(p, op, view + 1)
    token = op.operands[view + 2]
    tok = f" token = {p.name(token)}" if isinstance(token, TValue) else ""
    return f"{_v(p, op, view)}[{p.names_of(index)}]{tok}"


def _index_type(p: Printer, op: TOp, view: int) -> str:
    """``, <index type>`` of a view access (one type for all indices)."""
    index = _vs(p, op, view + 1)
    return f", {type_text(index[0].type)}" if index else ""


def _load(p: Printer, op: TOp) -> str:
    """``load_view_tko weak %view[%i] token = %t : view, index -> tile, token``."""
    access = _view_access(p, op, 0)
    return f"load_view_tko {op.attrs['ordering']} {access} : {_ot(op, 0)}{_index_type(p, op, 0)} -> {_t(op)}, token"


def _store(p: Printer, op: TOp) -> str:
    """``store_view_tko weak %tile, %view[%i] token = %t : tile, view, index -> token``."""
    access = _view_access(p, op, 1)
    types = f"{_ot(op, 0)}, {_ot(op, 1)}{_index_type(p, op, 1)}"
    return f"store_view_tko {op.attrs['ordering']} {_v(p, op, 0)}, {access} : {types} -> token"


OP_TEXT: dict[str, Callable[[Printer, TOp], str]] = {
    "addf": _float_binary,
    "subf": _float_binary,
    "mulf": _float_binary,
    "divf": _float_binary,
    "addi": _int_binary,
    "subi": _int_binary,
    "muli": _int_binary,
    "ftof": _convert,
    "itof": _convert,
    "exti": _convert,
    "trunci": _convert,
    "reshape": _convert,
    "broadcast": _convert,
    "constant": _constant,
    "get_tile_block_id": lambda p, op: f"get_tile_block_id : {_t(op)}",
    "make_tensor_view": _tensor_view,
    "make_partition_view": lambda p, op: f"make_partition_view {_v(p, op, 0)} : {_t(op)}",
    "load_view_tko": _load,
    "store_view_tko": _store,
    "join_tokens": lambda p, op: f"join_tokens {p.names_of(_vs(p, op, 0))} : token",
    "return": lambda p, op: "return",
    "get_num_tile_blocks": lambda p, op: f"get_num_tile_blocks : {_t(op)}",
    "iota": lambda p, op: f"iota : {_t(op)}",
    "absf": _unary,
    "absi": _unary,
    "negf": _unary,
    "negi": _unary,
    "floor": _unary,
    "ceil": _unary,
    "sqrt": _unary,
    "andi": _plain_binary,
    "ori": _plain_binary,
    "xori": _plain_binary,
    "cmpf": _compare,
    "cmpi": _compare,
    "select": lambda p, op: f"select {_v(p, op, 0)}, {_v(p, op, 1)}, {_v(p, op, 2)} : {_ot(op, 0)}, {_t(op)}",
    "maxf": _max_min,
    "minf": _max_min,
    "maxi": _max_min,
    "mini": _max_min,
    "reduce": _reduce,
    "assume": _assume,
    "mmaf": _mma,
    "mmai": _mma,
    "yield": lambda p, op: f"yield {p.names_of(_vs(p, op, 0))} : {', '.join(type_text(v.type) for v in _vs(p, op, 0))}",
}


def print_module(module: TModule) -> str:
    """The module as text: ``cuda_tile.module @name { entry @k(...) { ... } }``, newline-terminated."""
    p = Printer()
    p.lines.append(f"cuda_tile.module @{module.name} {{")
    for fn in module.functions:
        p.function(fn)
    p.lines.append("}")
    return "\n".join(p.lines) + "\n"
