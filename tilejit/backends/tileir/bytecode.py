"""Encode a ``TModule`` as CUDA Tile IR bytecode (the format ``tileiras`` and ``tileirdisasm`` read).

Layout: the magic ``\\x7fTileIR\\x00``, version bytes (major, minor, a 16-bit tag), then sections
(functions, constants, debug info, types, strings) and an end byte. Integers are LEB128 varints;
tables are a count, fixed-width offsets and the concatenated entries. Details: TILEIR_FORMAT.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from tilejit.backends.tileir.lower.core import refusal
from tilejit.backends.tileir.module import (
    ENUMS,
    OPS,
    PADDINGS,
    SCALARS,
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
    check_entry_hints,
    constant_bytes,
)
from tilejit.language.ir.core import Loc

MAGIC = b"\x7fTileIR\x00"
#: A dynamic extent in a tensor view's shape or strides (INT64_MIN).
DYNAMIC = -(1 << 63)

# Section ids; the 0x80 bit on the id says an alignment varint follows the length.
SEC_END, SEC_STRING, SEC_FUNC, SEC_DEBUG, SEC_CONSTANT, SEC_TYPE = 0x00, 0x01, 0x02, 0x03, 0x04, 0x05
PAD_BYTE = b"\xcb"
TAG_INTEGER, TAG_FLOAT, TAG_BOOL, TAG_ARRAY, TAG_DICT, TAG_HINTS = 0x01, 0x02, 0x03, 0x06, 0x0A, 0x0B
TAG_DIV_BY, TAG_BOUNDED = 0x08, 0x0C  # assume predicates
DI_COMPILE_UNIT, DI_FILE, DI_LOC, DI_SUBPROGRAM = 0x01, 0x02, 0x04, 0x05
FLAG_ENTRY = 0x02
FLAG_HINTS = 0x04  # before 13.5: optimization hints follow (from 13.5 an entry always has them)


def varint(x: int, buf: bytearray) -> None:
    """Append ``x`` (>= 0) as an unsigned LEB128 varint."""
    if x < 0:
        raise ValueError(f"varint of a negative number: {x}")
    while x >= 0x80:
        buf.append((x & 0x7F) | 0x80)
        x >>= 7
    buf.append(x)


def int_list(values: Sequence[int], width: int, buf: bytearray) -> None:
    """Append a count varint, then each value as ``width`` little-endian signed bytes."""
    varint(len(values), buf)
    for v in values:
        buf += v.to_bytes(width, "little", signed=True)


def pad_to(alignment: int, buf: bytearray) -> None:
    """Pad ``buf`` with 0xcb bytes to a multiple of ``alignment``."""
    buf += PAD_BYTE * (-len(buf) % alignment)


class Table:
    """An interning table of encoded entries; an entry's id is its insertion index (+ ``start``)."""

    def __init__(self, start: int = 0) -> None:
        self.start = start
        self.ids: dict[bytes, int] = {}

    def __getitem__(self, entry: bytes) -> int:
        """The id of ``entry``, added at the end when new."""
        if entry not in self.ids:
            self.ids[entry] = len(self.ids) + self.start
        return self.ids[entry]

    def write(self, index_width: int, buf: bytearray) -> None:
        """Count, padding to ``index_width``, one offset per entry, then the entries."""
        varint(len(self.ids), buf)
        pad_to(index_width, buf)
        offset = 0
        for entry in self.ids:
            buf += offset.to_bytes(index_width, "little")
            offset += len(entry)
        for entry in self.ids:
            buf += entry


class Writer:
    """Holds the string, type and constant tables while the functions are encoded."""

    def __init__(self, version: tuple[int, int]) -> None:
        self.version = version
        self.strings = Table()
        self.types = Table()
        self.constants = Table()
        self.debug = Table(start=1)
        self.debug_ids: list[list[int]] = []
        self.op_locs: list[int] = []
        self.subprogram: int | None = None
        # The reference writers give i1 and i32 the first two type ids.
        self.type_id(Scalar("i1"))
        self.type_id(Scalar("i32"))

    def string_id(self, s: str) -> int:
        """The string-table id of ``s``."""
        return self.strings[s.encode()]

    def type_id(self, t: Type) -> int:
        """The type-table id of ``t`` (its parts are interned first)."""
        v = self.version
        buf = bytearray()
        if isinstance(t, Scalar):
            varint(SCALARS[t.name], buf)
        elif isinstance(t, Ptr):
            buf.append(0x0C)
            elem = self.type_id(t.elem)
            if v >= (13, 4):
                varint(0, buf)  # optional-field bits: no pointer attribute
            varint(elem, buf)
        elif isinstance(t, Tile):
            buf.append(0x0D)
            varint(self.type_id(t.elem), buf)
            int_list(t.shape, 8, buf)
        elif isinstance(t, TensorView):
            buf.append(0x0E)
            elem = self.type_id(t.elem)
            if v >= (13, 4):
                varint(0, buf)
            varint(elem, buf)
            int_list([DYNAMIC if s is None else s for s in t.shape], 8, buf)
            int_list([DYNAMIC if s is None else s for s in t.strides], 8, buf)
        elif isinstance(t, PartitionView):
            buf.append(0x0F)
            view = self.type_id(t.view)
            has_pad = t.padding is not None
            if v >= (13, 3):
                varint(int(has_pad), buf)
            int_list(t.tile, 4, buf)
            varint(view, buf)
            int_list(t.dim_map, 4, buf)
            if v < (13, 3):
                varint(int(has_pad), buf)
            if t.padding is not None:
                buf.append(PADDINGS[t.padding])
        elif isinstance(t, Token):
            buf.append(0x11)
        elif isinstance(t, FuncType):
            buf.append(0x10)
            for group in (t.params, t.results):
                ids = [self.type_id(x) for x in group]
                varint(len(ids), buf)
                for i in ids:
                    varint(i, buf)
        else:  # pragma: no cover - the Type union is closed
            raise TypeError(f"no bytecode encoding for {t!r}")
        return self.types[bytes(buf)]

    def constant_id(self, data: bytes) -> int:
        """The constant-table id of ``data`` (stored with its byte length in front)."""
        buf = bytearray()
        varint(len(data), buf)
        return self.constants[bytes(buf + data)]

    def location(self, loc: Loc) -> int:
        """The debug-attribute id of ``loc`` in the current function (0: unknown), made on first use."""
        if not loc.line or loc.filename.startswith("<") or self.subprogram is None:
            return 0
        entry = bytearray((DI_LOC,))
        for v in (self.subprogram, self.string_id(loc.filename), loc.line, loc.col + 1):
            varint(v, entry)
        return self.debug[bytes(entry)]

    def start_debug(self, fn: TFunction) -> None:
        """The file, compile unit and subprogram of ``fn`` (none when its source location is unknown)."""
        self.subprogram = None
        loc = fn.loc
        if not loc.line or loc.filename.startswith("<"):
            return
        directory, base = os.path.split(loc.filename)
        file = bytearray((DI_FILE,))
        varint(self.string_id(base), file)
        varint(self.string_id(directory), file)
        file_id = self.debug[bytes(file)]
        unit = bytearray((DI_COMPILE_UNIT,))
        varint(file_id, unit)
        sub = bytearray((DI_SUBPROGRAM,))
        for v in (file_id, loc.line, self.string_id(fn.name), self.string_id(fn.name), self.debug[bytes(unit)]):
            varint(v, sub)
        varint(loc.line, sub)  # scope line
        if self.version >= (13, 5):
            varint(0, sub)  # subprogram flags
        self.subprogram = self.debug[bytes(sub)]

    def function(self, fn: TFunction, index: int, buf: bytearray) -> None:
        """Append one entry function; its debug entries (its own, then one per op) go to ``debug_ids``."""
        self.start_debug(fn)
        self.op_locs = [self.location(fn.loc)]
        self.debug_ids.append(self.op_locs)
        varint(self.string_id(fn.name), buf)
        varint(self.type_id(FuncType(tuple(p.type for p in fn.params))), buf)
        check_entry_hints(fn.hints, self.version)
        buf.append(FLAG_ENTRY | (FLAG_HINTS if fn.hints and self.version < (13, 5) else 0))
        varint(index + 1, buf)  # 1-based index of this function's debug-info entries
        if fn.hints or self.version >= (13, 5):
            self.hints(fn.hints, buf)
        if self.version >= (13, 5):
            buf += bytes((TAG_ARRAY, 0))  # argument attributes: an empty array
        self.ids: dict[TValue, int] = {p: i for i, p in enumerate(fn.params)}
        self.next_id = len(fn.params)
        body = bytearray()
        self.ops(fn.body, body)
        varint(len(body), buf)
        buf += body

    def hints(self, hints: dict[str, dict[str, int]], buf: bytearray) -> None:
        """An entry's optimization hints: tagged, then the per-architecture dictionary of ``access_hints``."""
        buf.append(TAG_HINTS)
        self.access_hints(hints, buf)

    def access_hints(self, hints: Mapping[str, Mapping[str, bool | int]], buf: bytearray) -> None:
        """Optimization hints as a view load or store carries them (untagged): per architecture, a dictionary
        (keys sorted, as in MLIR) of bools (``allow_tma``) and i32 values (``latency``, an entry's ``occupancy``)."""
        varint(len(hints), buf)
        for arch, items in sorted(hints.items()):
            varint(self.string_id(arch), buf)
            buf.append(TAG_DICT)
            varint(len(items), buf)
            for key, value in sorted(items.items()):
                varint(self.string_id(key), buf)
                if isinstance(value, bool):
                    buf += bytes((TAG_BOOL, int(value)))
                else:
                    self.attribute(value, Scalar("i32"), buf)

    def define(self, values: list[TValue]) -> None:
        """Give ``values`` the next value ids, in order."""
        for v in values:
            self.ids[v] = self.next_id
            self.next_id += 1

    def ops(self, ops: list[TOp], buf: bytearray) -> None:
        """Append ``ops``, each with its debug entry and then its result ids."""
        for op in ops:
            self.op_locs.append(self.location(op.loc))  # before the ops of its regions
            self.op(op, buf)
            for r in op.results[len(op.results) - self.made_after(op):]:  # results this version's op lacks
                self.op_locs.append(self.location(op.loc))
                self.op(TOp("make_token", [r], [], {}, op.loc), buf)
            self.define(op.results)

    def made_after(self, op: TOp) -> int:
        """How many of ``op``'s results (tokens) this version's op has not, which ``make_token`` ops after it
        define: all of them when its layout's ``res*:<version>`` is newer than this version."""
        for item in OPS[op.name].layout:
            if item.startswith("res*:") and self.version < _version(item[5:]):
                return len(op.results)
        return 0

    def region(self, block: TBlock, buf: bytearray) -> None:
        """One block: its argument types, op count and ops; its values' ids end with it."""
        buf.append(1)  # blocks in the region
        varint(len(block.args), buf)
        for a in block.args:
            varint(self.type_id(a.type), buf)
        varint(sum(1 + self.made_after(op) for op in block.ops), buf)
        saved = self.next_id
        self.define(block.args)
        self.ops(block.ops, buf)
        self.next_id = saved

    def attribute(self, value: object, elem: Scalar, buf: bytearray) -> None:
        """A tagged integer or float attribute of element type ``elem``."""
        bits = int.from_bytes(constant_bytes(value, elem), "little")
        if elem.name.startswith("i"):
            buf.append(TAG_INTEGER)
            varint(self.type_id(elem), buf)
            varint(bits & ((1 << int(elem.name[1:])) - 1), buf)  # masked to its width (an i1 constant is 0xFF)
        else:
            buf.append(TAG_FLOAT)
            varint(self.type_id(elem), buf)
            # a zigzag varint of the bit pattern read as a signed 64-bit integer (so an f64 with its sign bit
            # set, such as -inf, survives the reader's 64 bits)
            signed = bits - (1 << 64) if bits >> 63 else bits
            varint(signed << 1 if signed >= 0 else ~(signed << 1), buf)

    def op(self, op: TOp, buf: bytearray) -> None:
        """Append ``op`` following its layout in ``OPS``."""
        ids = self.ids
        spec = OPS[op.name]
        if self.version < spec.since:
            raise refusal(op.loc, f"the Tile IR op '{op.name}' needs bytecode version {spec.since[0]}.{spec.since[1]} "
                                  f"or newer, not {self.version[0]}.{self.version[1]} (an older tileiras)")
        varint(spec.opcode, buf)
        operands = iter(op.operands)
        named = _named_operands(spec.layout, op)
        for item in spec.layout:
            item, _, since = item.partition("@")
            if since and self.version < _version(since):
                if item.startswith("o"):
                    next(operands)  # an operand this version has not: passed over
                continue
            if item.startswith("res*:"):  # results only from a version on: before it, a count of 0
                item = "res*" if self.version >= _version(item[5:]) else "res0"
            if item == "res0":
                varint(0, buf)
            elif item == "res":
                varint(self.type_id(op.results[0].type), buf)
            elif item == "res*":
                varint(len(op.results), buf)
                for r in op.results:
                    varint(self.type_id(r.type), buf)
            elif item in ("res2", "res3"):
                for r in op.results:
                    varint(self.type_id(r.type), buf)
            elif item == "ftz":
                varint(int(bool(op.attrs.get("ftz", False))), buf)
            elif item == "nan_ftz":
                varint(int(bool(op.attrs.get("propagate_nan"))) | int(bool(op.attrs.get("ftz"))) << 1, buf)
            elif item.startswith("int:"):
                varint(op.attrs[item[4:]], buf)
            elif item.startswith("flag:"):
                varint(int(bool(op.attrs.get(item[5:], False))), buf)
            elif item.startswith("i32s:"):
                int_list(op.attrs[item[5:]], 4, buf)
            elif item.startswith("str:"):
                varint(self.string_id(op.attrs[item[4:]]), buf)
            elif item == "identities":
                varint(len(op.attrs["identities"]), buf)
                for value, elem in op.attrs["identities"]:
                    self.attribute(value, elem, buf)
            elif item == "regions":
                varint(len(op.regions), buf)
                for block in op.regions:
                    self.region(block, buf)
            elif item == "tko":  # flags: bit 1 access hints, bit 2 a token operand
                varint((4 if op.operands[-1] is not None else 0) | (2 if op.attrs.get("hints") else 0), buf)
            elif item == "access_hints":
                if op.attrs.get("hints"):
                    self.access_hints(op.attrs["hints"], buf)
            elif item.startswith("enum:"):
                key = item[5:]
                buf.append(ENUMS[key][op.attrs[key]])
            elif item.startswith("enum?:"):
                key = item[6:]
                if op.attrs.get(key) is not None:
                    buf.append(ENUMS[key][op.attrs[key]])
            elif item.startswith("flags:"):
                bits = 0
                for i, name in enumerate(item[6:].split(",")):
                    present = named[name] if name in named else op.attrs.get(name)
                    bits |= int(present is not None) << i
                varint(bits, buf)
            elif item == "pred":
                predicate(op.attrs["predicate"], buf)
            elif item == "const":
                varint(self.constant_id(op.attrs["data"]), buf)
            elif item == "inbounds":
                if self.version >= (13, 4):
                    int_list([int(b) for b in op.attrs["inbounds"]], 1, buf)
            elif item == "o":
                varint(_id(ids, next(operands)), buf)
            elif item == "o*":
                group = next(operands)
                assert isinstance(group, list)
                varint(len(group), buf)
                for v in group:
                    varint(ids[v], buf)
            elif item.startswith("o?"):
                value = next(operands)
                if value is not None:
                    varint(_id(ids, value), buf)
            else:  # pragma: no cover - a typo in OPS
                raise AssertionError(f"unknown layout item {item!r} of {op.name}")


def _version(text: str) -> tuple[int, ...]:
    """``"13.2"`` -> ``(13, 2)``."""
    return tuple(int(x) for x in text.split("."))


def _named_operands(layout: tuple[str, ...], op: TOp) -> dict[str, object]:
    """The optional operands a layout names (``o?:<name>``) by name, for its ``flags`` item."""
    named: dict[str, object] = {}
    consumers = [item.partition("@")[0] for item in layout
                 if item.partition("@")[0] in ("o", "o*") or item.startswith("o?")]
    for item, value in zip(consumers, op.operands):
        if item.startswith("o?:"):
            named[item[3:]] = value
    return named
def predicate(pred: tuple[object, ...], buf: bytearray) -> None:
    """An ``assume`` predicate: ``div_by`` (divisor, then flags for ``every`` and ``along`` present, each a
    zigzag varint) or ``bounded`` (flags for the ends present, each end a zigzag varint)."""
    kind, *args = pred
    if kind == "div_by":
        divisor, *pattern = args  # () or (every, along)
        buf.append(TAG_DIV_BY)
        varint(int(divisor), buf)  # type: ignore[call-overload]
        buf.append(3 if pattern else 0)
        for v in pattern:
            _zigzag(int(v), buf)  # type: ignore[call-overload]
    elif kind == "bounded":
        ends = [a for a in args if a is not None]
        buf.append(TAG_BOUNDED)
        buf.append(int(args[0] is not None) | int(args[1] is not None) << 1)
        for end in ends:
            _zigzag(int(end), buf)  # type: ignore[call-overload]
    else:
        raise ValueError(f"unknown assume predicate {pred!r}")


def _zigzag(v: int, buf: bytearray) -> None:
    """A signed integer as a zigzag varint (0, -1, 1, -2... as 0, 1, 2, 3...)."""
    varint(v << 1 if v >= 0 else ~(v << 1), buf)


def _id(ids: dict[TValue, int], value: object) -> int:
    """The id of an operand that must be a single value."""
    assert isinstance(value, TValue), value
    return ids[value]


def _section(section: int, alignment: int, content: bytes, buf: bytearray) -> None:
    """Append a section: id (0x80 when aligned), length, alignment and padding, content."""
    buf.append(section | (0x80 if alignment > 1 else 0))
    varint(len(content), buf)
    if alignment > 1:
        varint(alignment, buf)
        pad_to(alignment, buf)
    buf += content


def _debug_section(debug_ids: list[list[int]], attrs: Table) -> bytes:
    """Per function, the debug-attribute id of the function and of each op (0: none), then the attributes.

    The readers reject an empty attribute table, so without locations it holds one placeholder entry."""
    buf = bytearray()
    varint(len(debug_ids), buf)
    pad_to(4, buf)
    offset = 0
    for ids in debug_ids:
        buf += offset.to_bytes(4, "little")
        offset += len(ids)
    varint(offset, buf)
    pad_to(8, buf)
    for ids in debug_ids:
        for i in ids:
            buf += i.to_bytes(8, "little")
    if not attrs.ids:
        attrs = Table(start=1)
        attrs[b"\x00"]
    attrs.write(4, buf)
    return bytes(buf)


def encode_module(module: TModule, version: tuple[int, int]) -> bytes:
    """The bytecode of ``module`` at bytecode ``version`` (one of ``VERSIONS``)."""
    w = Writer(version)
    funcs = bytearray()
    varint(len(module.functions), funcs)
    for i, fn in enumerate(module.functions):
        w.function(fn, i, funcs)
    out = bytearray(MAGIC)
    out += bytes(version)
    out += (0).to_bytes(2, "little")
    _section(SEC_FUNC, 8, bytes(funcs), out)
    consts = bytearray()
    w.constants.write(8, consts)
    _section(SEC_CONSTANT, 8, bytes(consts), out)
    _section(SEC_DEBUG, 8, _debug_section(w.debug_ids, w.debug), out)
    types = bytearray()
    w.types.write(4, types)
    _section(SEC_TYPE, 4, bytes(types), out)
    strings = bytearray()
    w.strings.write(4, strings)
    _section(SEC_STRING, 4, bytes(strings), out)
    out.append(SEC_END)
    return bytes(out)
