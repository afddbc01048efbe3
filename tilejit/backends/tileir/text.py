"""Print a ``TModule`` in the ``cuda_tile.module`` text form, in the syntax ``tileirdisasm`` prints.

Deterministic: values are named from the kernel's own names (made unique with ``_N``), others are
numbered in order of definition, and nothing depends on ids or dict order beyond program order.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal

from tilejit.backends.tileir.module import (
    FLOAT8,
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
from tilejit.language.ir.float8 import float8_value


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
    """One element's value as the text form writes it (``2.000000e+00``, ``123456.703``, ``0xFF800000``, ``-3``,
    ``true``): MLIR's float printing, which tileirdisasm uses (6 significant digits when they read back exactly,
    else LLVM APFloat's natural form when it has a decimal point, else the hex bits)."""
    name = elem.name
    if name == "i1":
        return "true" if data[0] & 1 else "false"
    if name.startswith("i"):
        return str(int.from_bytes(data, "little", signed=True))
    bits = int.from_bytes(data, "little")
    if name == "bf16":
        value = struct.unpack("<f", (bits << 16).to_bytes(4, "little"))[0]
    elif name in FLOAT8:
        value = float8_value(bits, FLOAT8[name])
    else:
        value = struct.unpack({"f16": "<e", "f32": "<f", "f64": "<d"}[name], data)[0]
    if math.isfinite(value):
        sign = "-" if math.copysign(1.0, value) < 0 else ""
        digits, exp = _decimal_digits(value, 6)
        mantissa = (digits[0] + "." + digits[1:]).ljust(8, "0")
        text = f"{sign}{mantissa}e{exp + len(digits) - 1:+03d}"
        if constant_bytes(float(text), elem) == data:
            return text
        text = sign + _natural_text(value, _NATURAL_DIGITS[name])
        if "." in text:
            return text
    return f"0x{bits:0{2 * len(data)}X}"


#: LLVM APFloat's natural precision (significant decimal digits) of each float type: 2 + bits * 59 / 196.
_NATURAL_DIGITS: dict[str, int] = {"f16": 5, "bf16": 4, "f32": 9, "f64": 17, "f8E4M3FN": 4, "f8E5M2": 4}


def _decimal_digits(value: float, precision: int) -> tuple[str, int]:
    """APFloat's decimal digits of ``|value|``: the exact expansion rounded (half up) to at most ``precision``
    significant digits, trailing zeros dropped; ``(digits, exp)`` with ``|value| == int(digits) * 10**exp``."""
    if value == 0:
        return "0", 0
    t = Decimal(abs(value)).as_tuple()
    digits, exp = "".join(map(str, t.digits)).lstrip("0"), int(t.exponent)
    if len(digits) > precision:
        up = digits[precision] >= "5"
        exp += len(digits) - precision
        digits = str(int(digits[:precision]) + up)
    stripped = digits.rstrip("0")
    return stripped, exp + len(digits) - len(stripped)


def _natural_text(value: float, precision: int) -> str:
    """``APFloat::toString`` of ``|value|`` with its defaults (natural precision, padding up to 3 zeros):
    ``123456.703``, ``4.29496704E+9``, ``0.00125``, ``1234567`` (no point)."""
    digits, exp = _decimal_digits(value, precision)
    n = len(digits)
    scientific = (exp > 3 or n + exp > precision) if exp >= 0 else (exp + n - 1 < 0 and -(exp + n - 1) > 3)
    if scientific:
        e = exp + n - 1
        return f"{digits[0]}.{digits[1:] or '0'}E{'+' if e >= 0 else '-'}{abs(e)}"
    if exp >= 0:
        return digits + "0" * exp
    whole = exp + n
    return f"{digits[:whole]}.{digits[whole:]}" if whole > 0 else "0." + "0" * -whole + digits


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
        hints = f" optimization_hints=<{hints_text(fn.hints)}>" if fn.hints else ""
        self.lines.append(f"  entry @{fn.name}({params}){hints} {{")
        self.ops(fn.body, "    ")
        self.lines.append("  }")

    def define(self, ops: list[TOp]) -> None:
        """Name the results of ``ops`` (one block's level) before any region inside them, as MLIR does: a
        region's names follow all of its parent block's. A control-flow op's results are one ``%name:N``."""
        for op in ops:
            if op.name in GROUPED and len(op.results) > 1:
                pack = self.name(TValue(op.results[0].type, op.results[0].name))[1:]
                for i, r in enumerate(op.results):
                    self.names[r] = f"{pack}#{i}"
            else:
                for r in op.results:
                    self.name(r)

    def results(self, op: TOp) -> str:
        """``%a, %b = `` (``%a:2 = `` for a control-flow op), or nothing when ``op`` has no results."""
        if not op.results:
            return ""
        if op.name in GROUPED and len(op.results) > 1:
            return f"%{self.names[op.results[0]].partition('#')[0]}:{len(op.results)} = "
        return f"{self.names_of(op.results)} = "

    def ops(self, ops: list[TOp], indent: str) -> None:
        """One line per op (and its regions below it) at ``indent``."""
        self.define(ops)
        for op in ops:
            self.lines.append(f"{indent}{self.results(op)}{OP_TEXT[op.name](self, op)}")
            if op.name in CONTROL:
                for i, block in enumerate(op.regions):
                    if i:
                        self.lines.append(f"{indent}}} else {{")
                    self.body(block, indent, CONTROL[op.name])
                self.lines.append(f"{indent}}}")
                continue
            for block in op.regions:
                self.region(block, indent)

    def region(self, block: TBlock, indent: str) -> None:
        """``(%a: type, ...) {`` ops ``}``."""
        with self.scope():
            args = ", ".join(f"{self.name(a)}: {type_text(a.type)}" for a in block.args)
            self.lines.append(f"{indent}({args}) {{")
            self.ops(block.ops, indent + "  ")
            self.lines.append(f"{indent}}}")

    @contextmanager
    def scope(self) -> Iterator[None]:
        """Names made inside the ``with`` (a region's) are free again after it, as in MLIR."""
        saved_taken, saved_count, saved_names = set(self.taken), self.count, dict(self.names)
        try:
            yield
        finally:
            self.taken, self.count, self.names = saved_taken, saved_count, saved_names

    def body(self, block: TBlock, indent: str, implicit: str) -> None:
        """A control-flow region's ops (its arguments are on the op's line); a terminator ``implicit`` with
        no operands is left out, as tileirdisasm does."""
        with self.scope():
            for a in block.args:
                self.name(a)
            ops = block.ops
            if ops and ops[-1].name == implicit and not ops[-1].operands[0]:
                ops = ops[:-1]
            self.ops(ops, indent + "  ")


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
    """``negf %x : type`` and the other one-operand ops (``exp``/``tanh`` show a rounding other than full)."""
    if op.name in ("exp", "tanh"):
        mode = op.attrs.get("rounding", "full")
        extra = "" if mode == "full" else f" rounding<{mode}>"
    else:
        extra = _rounding(op) if op.name == "sqrt" else _overflow(op) if op.name == "negi" else ""
    ftz = " flush_to_zero" if op.attrs.get("ftz") else ""
    return f"{op.name} {_v(p, op, 0)}{extra}{ftz} : {_t(op)}"


def _int_division(p: Printer, op: TOp) -> str:
    """``divi %a, %b signed : type`` (a rounding other than zero shown), ``remi``, ``shri`` and ``shli``."""
    extra = f" {op.attrs['signedness']}" if "signedness" in op.attrs else _overflow(op)
    mode = op.attrs.get("rounding", "zero")
    if op.name == "divi" and mode != "zero":
        extra += f" rounding<{mode}>"
    return f"{op.name} {_v(p, op, 0)}, {_v(p, op, 1)}{extra} : {_t(op)}"


def _scan(p: Printer, op: TOp) -> str:
    """The ``scan`` line (its region follows on the next lines)."""
    operands = _vs(p, op, 0)
    idents = _identities(op)
    types = f"{', '.join(type_text(v.type) for v in operands)} -> {', '.join(type_text(r.type) for r in op.results)}"
    reverse = "true" if op.attrs.get("reverse") else "false"
    return f"scan {p.names_of(operands)} dim={op.attrs['dim']} reverse={reverse} identities=[{idents}] : {types}"


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


def _identities(op: TOp) -> str:
    """A reduce's or scan's identities: ``0.000000e+00 : f32, 2147483647 : i32`` (as MLIR prints attributes: no
    type for f64 and i64, its default types, unless in hex, and i1 as ``true``/``false``)."""
    out = []
    for value, elem in op.attrs["identities"]:
        text = number_text(constant_bytes(value, elem), elem)
        default = elem.name == "i1" or (elem.name in ("i64", "f64") and not text.startswith("0x"))
        out.append(text if default else f"{text} : {elem.name}")
    return ", ".join(out)


def _reduce(p: Printer, op: TOp) -> str:
    """The ``reduce`` line (its region follows on the next lines)."""
    operands = _vs(p, op, 0)
    idents = _identities(op)
    types = f"{', '.join(type_text(v.type) for v in operands)} -> {', '.join(type_text(r.type) for r in op.results)}"
    return f"reduce {p.names_of(operands)} dim={op.attrs['dim']} identities=[{idents}] : {types}"


def _mma(p: Printer, op: TOp) -> str:
    """``mmaf %a, %b, %acc : a, b, acc`` or ``mmai %a, %b, %acc signed signed : a, b, acc``."""
    sign = f" {op.attrs['signedness']} {op.attrs['signedness']}" if op.name == "mmai" else ""
    fast = " fast_acc" if op.attrs.get("fast_acc") else ""
    types = ", ".join(_ot(op, i) for i in range(3))
    return f"{op.name} {_v(p, op, 0)}, {_v(p, op, 1)}, {_v(p, op, 2)}{sign}{fast} : {types}"


def _assume(p: Printer, op: TOp) -> str:
    """``assume div_by<16>, %x : type``, ``assume div_by<16, every 64 along 1>, %x : type`` or
    ``assume bounded<0, ?>, %x : type``."""
    kind, *args = op.attrs["predicate"]
    if kind == "div_by" and len(args) == 3:
        shown = f"{args[0]}, every {args[1]} along {args[2]}"
    else:
        shown = ", ".join("?" if a is None else str(a) for a in args)
    return f"assume {kind}<{shown}>, {_v(p, op, 0)} : {_t(op)}"


def _int_binary(p: Printer, op: TOp) -> str:
    """``addi %a, %b : type`` and the other integer arithmetic ops."""
    return f"{op.name} {_v(p, op, 0)}, {_v(p, op, 1)}{_overflow(op)} : {_t(op)}"


def _convert(p: Printer, op: TOp) -> str:
    """Conversions and shape changes: ``ftof %x : src -> dst`` and the like."""
    sign = f" {op.attrs['signedness']}" if "signedness" in op.attrs else ""
    extra = _rounding(op) if op.name in ("ftof", "itof") else _overflow(op) if op.name == "trunci" else ""
    if op.name == "ftoi":
        extra = " saturating" if op.attrs.get("saturating") else ""
    if op.name == "permute":
        extra = f" [{', '.join(map(str, op.attrs['permutation']))}]"
    return f"{op.name} {_v(p, op, 0)}{sign}{extra} : {_ot(op, 0)} -> {_t(op)}"


def _extract(p: Printer, op: TOp) -> str:
    """``extract %x[%i, %j] : tile<...> -> tile<...>`` (the one operand group: the tile, then its block indices)."""
    x, *index = _vs(p, op, 0)
    return f"extract {p.name(x)}[{p.names_of(index)}] : {type_text(x.type)} -> {_t(op)}"


def _cat(p: Printer, op: TOp) -> str:
    """``cat %a, %b dim = 1 : tile<...>, tile<...> -> tile<...>``."""
    return f"cat {_v(p, op, 0)}, {_v(p, op, 1)} dim = {op.attrs['dim']} : {_ot(op, 0)}, {_ot(op, 1)} -> {_t(op)}"


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


def hints_text(hints: dict[str, dict[str, bool | int]]) -> str:
    """``sm_90 = {allow_tma = false, latency = 3}``: per architecture, keys sorted as MLIR dictionaries are."""
    def value(v: bool | int) -> str:
        return ("true" if v else "false") if isinstance(v, bool) else str(v)

    return ", ".join(f"{arch} = {{{', '.join(f'{k} = {value(v)}' for k, v in sorted(items.items()))}}}"
                     for arch, items in sorted(hints.items()))


def _access_hints(op: TOp) -> str:
    """`` optimization_hints = <...>`` of a view load or store that has hints, else nothing."""
    hints = op.attrs.get("hints")
    return f" optimization_hints = <{hints_text(hints)}>" if hints else ""


def _load(p: Printer, op: TOp) -> str:
    """``load_view_tko weak %view[%i] token = %t : view, index -> tile, token``."""
    access = _view_access(p, op, 0)
    return (f"load_view_tko {op.attrs['ordering']} {access}{_access_hints(op)} : {_ot(op, 0)}{_index_type(p, op, 0)} "
            f"-> {_t(op)}, token")


def _store(p: Printer, op: TOp) -> str:
    """``store_view_tko weak %tile, %view[%i] token = %t : tile, view, index -> token``."""
    access = _view_access(p, op, 1)
    types = f"{_ot(op, 0)}, {_ot(op, 1)}{_index_type(p, op, 1)}"
    return f"store_view_tko {op.attrs['ordering']} {_v(p, op, 0)}, {access}{_access_hints(op)} : {types} -> token"


def _optional(p: Printer, op: TOp, first: int) -> tuple[str, str]:
    """The optional operands from ``first`` on (mask, padding, ..., then the token): their text after the
    required operands (``, %mask, %pad token=%t``) and their types' text (``, tile<8xi1>, ...``)."""
    *extra, token = op.operands[first:]
    given = [v for v in extra if isinstance(v, TValue)]
    text = "".join(f", {p.name(v)}" for v in given)
    if isinstance(token, TValue):
        text += f" token={p.name(token)}"
    return text, "".join(f", {type_text(v.type)}" for v in given)


def _scope(op: TOp) -> str:
    """`` <scope>`` when the op names a memory scope."""
    return f" {op.attrs['scope']}" if op.attrs.get("scope") is not None else ""


def _load_ptr(p: Printer, op: TOp) -> str:
    """``load_ptr_tko weak %ptrs, %mask, %pad token=%t : ptrs, mask, pad -> tile, token``."""
    extra, types = _optional(p, op, 1)
    head = f"load_ptr_tko {op.attrs['ordering']}{_scope(op)} {_v(p, op, 0)}"
    return f"{head}{extra} : {_ot(op, 0)}{types} -> {_t(op)}, token"


def _store_ptr(p: Printer, op: TOp) -> str:
    """``store_ptr_tko weak %ptrs, %tile, %mask token=%t : ptrs, tile, mask -> token``."""
    extra, types = _optional(p, op, 2)
    head = f"store_ptr_tko {op.attrs['ordering']}{_scope(op)} {_v(p, op, 0)}, {_v(p, op, 1)}"
    return f"{head}{extra} : {_ot(op, 0)}, {_ot(op, 1)}{types} -> token"


def _atomic(p: Printer, op: TOp) -> str:
    """``atomic_rmw_tko relaxed device %ptrs, addf, %v, %mask token=%t : ptrs, v, mask -> tile, token`` and
    ``atomic_cas_tko relaxed device %ptrs, %cmp, %v, ...``."""
    head = f"{op.name} {op.attrs['ordering']}{_scope(op)} {_v(p, op, 0)}, "
    if op.name == "atomic_cas_tko":
        head += f"{_v(p, op, 1)}, {_v(p, op, 2)}"
        extra, types = _optional(p, op, 3)
    else:
        head += f"{op.attrs['mode']}, {_v(p, op, 1)}"
        extra, types = _optional(p, op, 2)
    return f"{head}{extra} : {_ot(op, 0)}, {_t(op)}{types} -> {_t(op)}, token"


def string_text(s: str) -> str:
    """``s`` quoted as MLIR prints a string attribute: printable ASCII as is, ``\\`` doubled, ``"`` and every
    other byte (of its UTF-8) as ``\\XX`` in upper-case hex."""
    out = []
    for b in s.encode():
        c = chr(b)
        out.append("\\\\" if c == "\\" else c if 0x20 <= b < 0x7F and c != '"' else f"\\{b:02X}")
    return '"' + "".join(out) + '"'


def _print(p: Printer, op: TOp) -> str:
    """``print_tko "format", %a, %b token=%t : tile<4xf32>, tile<i32> -> token``."""
    args = _vs(p, op, 0)
    token = op.operands[1]
    text = f"print_tko {string_text(op.attrs['format'])}" + "".join(f", {p.name(a)}" for a in args)
    if isinstance(token, TValue):
        text += f" token={p.name(token)}"
    return text + (f" : {_types(args)}" if args else "") + " -> token"


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
    "mulhii": _plain_binary,
    "cmpf": _compare,
    "cmpi": _compare,
    "select": lambda p, op: f"select {_v(p, op, 0)}, {_v(p, op, 1)}, {_v(p, op, 2)} : {_ot(op, 0)}, {_t(op)}",
    "maxf": _max_min,
    "minf": _max_min,
    "maxi": _max_min,
    "mini": _max_min,
    "reduce": _reduce,
    "yield": lambda p, op: _exit(p, op),
    "break": lambda p, op: _exit(p, op),
    "continue": lambda p, op: _exit(p, op),
    "make_token": lambda p, op: "make_token : token",
    "for": lambda p, op: _for(p, op),
    "loop": lambda p, op: _loop(p, op),
    "if": lambda p, op: _if(p, op),
    "offset": lambda p, op: f"offset {_v(p, op, 0)}, {_v(p, op, 1)} : {_ot(op, 0)}, {_ot(op, 1)} -> {_t(op)}",
    "load_ptr_tko": _load_ptr,
    "store_ptr_tko": _store_ptr,
    "atomic_rmw_tko": _atomic,
    "atomic_cas_tko": _atomic,
    "scan": _scan,
    "exp": _unary,
    "exp2": _unary,
    "log": _unary,
    "log2": _unary,
    "rsqrt": _unary,
    "sin": _unary,
    "cos": _unary,
    "tanh": _unary,
    "sinh": _unary,
    "cosh": _unary,
    "atan2": _plain_binary,
    "fma": lambda p, op: f"fma {_v(p, op, 0)}, {_v(p, op, 1)}, {_v(p, op, 2)}{_rounding(op)} : {_t(op)}",
    "divi": _int_division,
    "remi": _int_division,
    "shli": _int_division,
    "shri": _int_division,
    "remf": _plain_binary,
    "fpowf": _plain_binary,
    "ftoi": _convert,
    "bitcast": _convert,
    "permute": _convert,
    "extract": _extract,
    "cat": _cat,
    "assume": _assume,
    "mmaf": _mma,
    "mmai": _mma,
    "ptr_to_int": _convert,
    "int_to_ptr": _convert,
    "ptr_to_ptr": _convert,
    "print_tko": _print,
}


def _exit(p: Printer, op: TOp) -> str:
    """``yield``/``break``/``continue`` with its operands and their types (``%a, %b : t1, t2``) if any."""
    values = _vs(p, op, 0)
    if not values:
        return op.name
    return f"{op.name} {p.names_of(values)} : {', '.join(type_text(v.type) for v in values)}"


def _types(values: list[TValue]) -> str:
    """Comma-separated types of ``values``."""
    return ", ".join(type_text(v.type) for v in values)


def _iter_values(p: Printer, args: list[TValue], init: list[TValue]) -> str:
    """`` iter_values(%arg = %init, ...)`` (nothing when there are none)."""
    if not args:
        return ""
    return f" iter_values({', '.join(f'{p.name(a)} = {p.name(v)}' for a, v in zip(args, init))})"


def _for(p: Printer, op: TOp) -> str:
    """``for %iv in (%lb to %ub, step %s) : type iter_values(%a = %init, ...) -> (types) {``."""
    lower, upper, step, *init = _vs(p, op, 0)
    block = op.regions[0]
    with p.scope():
        iv = p.name(block.args[0])
        carried = _iter_values(p, block.args[1:], init)
    results = f" -> ({_types(op.results)})" if op.results else ""
    bounds = f"({p.name(lower)} to {p.name(upper)}, step {p.name(step)})"
    return f"for {iv} in {bounds} : {type_text(lower.type)}{carried}{results} {{"


def _loop(p: Printer, op: TOp) -> str:
    """``loop iter_values(%a = %init, ...) : types -> types {``."""
    block = op.regions[0]
    with p.scope():
        carried = _iter_values(p, block.args, _vs(p, op, 0))
    types = f" : {_types(block.args)}" if block.args else ""
    results = f" -> {_types(op.results)}" if op.results else ""
    return f"loop{carried}{types}{results} {{"


def _if(p: Printer, op: TOp) -> str:
    """``if %c -> (types) {`` (its regions follow, ``} else {`` between them)."""
    results = f" -> ({_types(op.results)})" if op.results else ""
    return f"if {_v(p, op, 0)}{results} {{"


#: Control-flow ops (their regions' arguments print on the op's line, the regions as braces) -> the
#: terminator their regions may leave implicit.
CONTROL: dict[str, str] = {"for": "continue", "loop": "continue", "if": "yield"}
#: Ops whose several results print as one MLIR result group ``%r:2`` (used as ``%r#1``).
GROUPED = {*CONTROL, "reduce", "scan"}


def print_module(module: TModule) -> str:
    """The module as text: ``cuda_tile.module @name { entry @k(...) { ... } }``, newline-terminated."""
    p = Printer()
    p.lines.append(f"cuda_tile.module @{module.name} {{")
    for fn in module.functions:
        p.function(fn)
    p.lines.append("}")
    return "\n".join(p.lines) + "\n"
