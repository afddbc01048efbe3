"""Lowering rules for memory: loads and stores through tensor and partition views (made once per array
and tile shape at the top of the entry), gather/scatter and atomics through tiles of pointers, all
ordered with tokens (see ``Lowerer``: a gather is a load; a scatter or an atomic is a store).

As in the CUDA backend, an element is in range when each index, as an unsigned 64-bit number, is below
its dimension (so negative indices are out of range): out-of-range elements of a load or gather read the
padding, of a store or scatter are not written, and of an atomic are not touched and give 0. Bools are
one byte in memory (``STORED``): read as ``!= 0``, written as 0 or 1.
"""

from __future__ import annotations

import math

from tilejit.backends.tileir.lower.core import I64, STORED, TOKEN, Lowerer, rule, unsupported
from tilejit.backends.tileir.lower.occupancy import NO_TMA_ARCHS, choose_no_tma
from tilejit.backends.tileir.module import (
    PartitionView,
    Ptr,
    Scalar,
    TBlock,
    TensorView,
    Tile,
    TOp,
    TValue,
    constant_bytes,
)
from tilejit.compiler.targets import parse_target
from tilejit.language.ir import ops as O
from tilejit.language.ir.core import Op, Value
from tilejit.language.ir.types import ArrayType, DType, TileType

BOOL = Scalar("i1")
#: Atomic kinds: kind -> Tile IR ``atomic_rmw_tko`` mode for (float, signed int, unsigned int) arrays;
#: ``None``: no mode computes it (float max/min: the CUDA backend's NaN-propagating CAS loop, ``_cas_loop``).
_ATOMIC_MODES: dict[str, tuple[str | None, str, str]] = {
    "add": ("addf", "add", "add"),
    "max": (None, "max", "umax"),
    "min": (None, "min", "umin"),
    "xchg": ("xchg", "xchg", "xchg"),
}


def padding_name(value: object) -> str | None:
    """The partition-view padding that reads ``value``, or ``None`` when Tile IR has none for it."""
    v = float(value)  # type: ignore[arg-type]
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "pos_inf" if v > 0 else "neg_inf"
    if v == 0:
        return "neg_zero" if math.copysign(1.0, v) < 0 else "zero"
    return None


def indices(lo: Lowerer, values: list[Value], op: Op) -> list[TValue]:
    """A load/store's tile indices, all of one integer type (narrower ones sign-extended to the widest)."""
    idx = [lo.value(i) for i in values]
    widest = max((v.type for v in idx), key=lambda t: int(t.elem.name[1:]), default=None)  # type: ignore[union-attr]
    out = []
    for v, src in zip(idx, values):
        if v.type != widest:
            assert widest is not None
            signed = src.type.dtype.is_signed  # type: ignore[attr-defined]
            wide = TValue(widest)
            lo.emit("exti", [wide], [v], op, signedness="signed" if signed else "unsigned")
            v = wide
        out.append(v)
    return out


def view_facts(lo: Lowerer, op: Op, base: TValue, shape: list[TValue], strides: list[TValue], itemsize: int, *,
               aligned16: bool, int32_extents: bool,
               extent16: bool = False) -> tuple[TValue, list[TValue], list[TValue]]:
    """An array's ``base``, ``shape`` and ``strides`` (all of them, innermost last) through ``assume`` ops in the
    prologue stating what a launch checked, so that tileiras may load with TMA (docs/tileir.md, "mma and matmul
    speed"): ``aligned16`` (base and every row start 16-byte aligned) -> base ``div_by<16>`` and every stride
    but the innermost ``div_by<16 / itemsize>``; ``int32_extents`` (shapes and strides in [0, 2**31)) ->
    ``bounded<0, 2**31-1>``; shapes are always ``bounded<0, ?>``; ``extent16`` (the innermost extent a multiple
    of 16 bytes) -> that shape ``div_by<16 / itemsize>`` (tileiras then stores with TMA). Pass only facts checked
    at launch: a false assumption is undefined behaviour."""

    def assume(v: TValue, predicate: tuple[object, ...]) -> TValue:
        r = TValue(v.type, v.name)
        lo.prologue.append(TOp("assume", [r], [v], {"predicate": predicate}, op.loc))
        return r

    high = 2**31 - 1 if int32_extents else None
    shape = [assume(v, ("bounded", 0, high)) for v in shape]
    if extent16 and itemsize < 16:
        shape[-1] = assume(shape[-1], ("div_by", 16 // itemsize))
    if int32_extents:
        strides = [assume(v, ("bounded", 0, high)) for v in strides]
    if aligned16:
        if itemsize < 16:
            strides = [assume(v, ("div_by", 16 // itemsize)) for v in strides[:-1]] + strides[-1:]
        base = assume(base, ("div_by", 16))
    return base, shape, strides


def view(lo: Lowerer, op: Op, array: Value, tile: tuple[int, ...], padding: str | None) -> TValue:
    """The partition view of ``array`` in tiles of ``tile`` (made once, at the top of the entry; for an array of an
    array list, which the body defines, where it is used)."""
    key = (array, tile, padding)
    if key in lo.views:
        return lo.views[key]
    param = array in lo.fn.params
    at = array.type
    assert isinstance(at, ArrayType)
    hint = lo.array_hints.get(array)
    if hint is not None and (hint.aligned16 or hint.index32 or hint.extent16) and array not in lo.stated:
        lo.stated.add(array)  # the launch-checked facts as assume ops, once per array (docs/tileir.md, TMA)
        lo.arrays[array] = view_facts(lo, op, *lo.arrays[array], at.dtype.itemsize, aligned16=hint.aligned16,
                                      int32_extents=hint.index32, extent16=hint.extent16)
    base, shape, strides = lo.arrays[array]
    assert isinstance(base.type, Tile) and isinstance(base.type.elem, Ptr)
    n = at.ndim
    unit = at.contiguous or (hint is not None and hint.unit_stride)
    static = tuple(1 if unit and d == n - 1 else None for d in range(n))
    tv_type = TensorView(base.type.elem.elem, (None,) * n, static)
    dyn_strides = [s for s, st in zip(strides, static) if st is None]
    tv = TValue(tv_type, f"{base.name}_view")
    made = TOp("make_tensor_view", [tv], [base, list(shape), dyn_strides], {}, op.loc)
    pv = TValue(PartitionView(tile, tv_type, tuple(range(n)), padding), f"{base.name}_tiles")
    partitioned = TOp("make_partition_view", [pv], [tv], {}, op.loc)
    if not param:
        lo.blocks[-1] += [made, partitioned]
        return pv
    lo.prologue += [made, partitioned]
    lo.views[key] = pv
    return pv


@rule(O.ArrayItemOp)
def array_item(lo: Lowerer, op: O.ArrayItemOp) -> None:
    """One array of an array list: its table's row ``index`` (row ``count``, all zeros, an empty array, when out
    of range), read word by word (pointer, shape, strides: int64) with no token (no kernel writes a table), the
    pointer made by ``int_to_ptr``."""
    at = op.result.type
    assert isinstance(at, ArrayType)
    table, (count, _), (row_stride, _) = lo.arrays[op.arrays]
    i = to_i64(lo, lo.value(op.index), op.index.type.dtype, op)  # type: ignore[attr-defined]
    row = select(lo, below(lo, i, count, op), i, count, op)
    first = binary(lo, "muli", row, row_stride, op, overflow="none")
    words = []
    for k in range(1 + 2 * at.ndim):
        where = binary(lo, "addi", first, constant(lo, k, I64.elem, (), op), op, overflow="none")
        ptr = TValue(table.type)
        lo.emit("offset", [ptr], [table, where], op)
        word, tok = TValue(I64, f"{op.result.name}_{k}" if op.result.name else ""), TValue(TOKEN)
        lo.emit("load_ptr_tko", [word, tok], [ptr, None, None, None], op, ordering="weak")
        words.append(word)
    elem = lo.tile_type(TileType(at.dtype), op).elem
    base = TValue(Tile(Ptr(stored_elem(elem))), op.result.name)
    lo.emit("int_to_ptr", [base], [words[0]], op)
    lo.arrays[op.result] = (base, words[1 : 1 + at.ndim], words[1 + at.ndim :])


@rule(O.ArrayCountOp)
def array_count(lo: Lowerer, op: O.ArrayCountOp) -> None:
    """How many arrays an array list holds: its table's extent (int64), as int32."""
    _, (count, _), _ = lo.arrays[op.arrays]
    lo.emit("trunci", [lo.result(op)], [count], op, overflow="none")


# ------------------------------------------------------------------ small value helpers


def elem_of(v: TValue) -> Scalar:
    """The scalar element type of tile ``v``."""
    assert isinstance(v.type, Tile) and isinstance(v.type.elem, Scalar)
    return v.type.elem


def shape_of(v: TValue) -> tuple[int, ...]:
    """The shape of tile ``v``."""
    assert isinstance(v.type, Tile)
    return v.type.shape


def stored_elem(elem: Scalar | Ptr) -> Scalar:
    """The element type memory holds for ``elem`` (i8 for a bool)."""
    assert isinstance(elem, Scalar)
    return Scalar(STORED.get(elem.name, elem.name))


def constant(lo: Lowerer, value: object, elem: Scalar | Ptr, shape: tuple[int, ...], op: Op) -> TValue:
    """A tile of ``shape`` filled with ``value``."""
    assert isinstance(elem, Scalar)
    r = TValue(Tile(elem, shape))
    lo.emit("constant", [r], [], op, data=constant_bytes(value, elem), value=value)
    return r


def splat(lo: Lowerer, v: TValue, shape: tuple[int, ...], op: Op) -> TValue:
    """Tile ``v`` (a scalar tile, or one with dims of 1 where ``shape`` differs) broadcast to ``shape``."""
    t = v.type
    assert isinstance(t, Tile)
    if t.shape == shape:
        return v
    if len(t.shape) != len(shape):
        ones = TValue(Tile(t.elem, (1,) * len(shape)))
        lo.emit("reshape", [ones], [v], op)
        v = ones
    r = TValue(Tile(t.elem, shape))
    lo.emit("broadcast", [r], [v], op)
    return r


def to_i64(lo: Lowerer, v: TValue, dtype: DType, op: Op) -> TValue:
    """Integer tile ``v`` of ``dtype`` as i64, sign- or zero-extended as C++'s ``(int64_t)`` cast does."""
    if elem_of(v).name == "i64":
        return v
    r = TValue(Tile(I64.elem, shape_of(v)))
    lo.emit("exti", [r], [v], op, signedness="signed" if dtype.is_signed else "unsigned")
    return r


def binary(lo: Lowerer, name: str, x: TValue, y: TValue, op: Op, **attrs: object) -> TValue:
    """``name x, y`` (``muli``, ``addi``, ``andi``) with a result of ``x``'s type."""
    r = TValue(x.type)
    lo.emit(name, [r], [x, y], op, **attrs)
    return r


def below(lo: Lowerer, x: TValue, extent: TValue, op: Op) -> TValue:
    """``(u64)x < (u64)extent`` elementwise: in range along a dimension of ``extent`` (a scalar tile)."""
    r = TValue(Tile(BOOL, shape_of(x)))
    lo.emit("cmpi", [r], [x, splat(lo, extent, shape_of(x), op)], op, predicate="less_than", signedness="unsigned")
    return r


def select(lo: Lowerer, cond: TValue, x: TValue, y: TValue, op: Op, name: str = "") -> TValue:
    """``cond ? x : y`` elementwise."""
    r = TValue(x.type, name)
    lo.emit("select", [r], [cond, x, y], op)
    return r


def waits(lo: Lowerer, op: Op) -> TValue | None:
    """The token a store-like op waits on: the last store and every load since (joined when several)."""
    tokens = ([lo.last_store] if lo.last_store is not None else []) + lo.loads_since
    if len(tokens) <= 1:
        return tokens[0] if tokens else None
    token = TValue(TOKEN)
    lo.emit("join_tokens", [token], [tokens], op)
    return token


def stored_form(lo: Lowerer, v: TValue, op: Op) -> TValue:
    """Tile ``v`` as memory holds it: a bool tile as bytes 0 and 1 (zero-extended), anything else as is."""
    elem = elem_of(v)
    if elem.name not in STORED:
        return v
    r = TValue(Tile(Scalar(STORED[elem.name]), shape_of(v)))
    lo.emit("exti", [r], [v], op, signedness="unsigned")
    return r


def loaded_form(lo: Lowerer, raw: TValue, result: Value, op: Op) -> TValue:
    """A tile read from memory as the IR value ``result`` (bytes of a bool array read ``!= 0``)."""
    t = lo.tile_type(result.type, op)
    if elem_of(raw) == t.elem:
        return raw
    return lo.nonzero(raw, op.loc, lo.blocks[-1])


# ------------------------------------------------------------------ tile loads and stores


def tile_in_range(lo: Lowerer, op: O.LoadOp, shape: tuple[int, ...]) -> TValue:
    """Which elements of the tile ``op`` loads lie inside the array: per dim, ``index * tile + iota``
    below the dim's extent (a 1-d mask, broadcast), all dims and-ed."""
    _, extents, _ = lo.arrays[op.array]
    mask: TValue | None = None
    for d, (ix, n) in enumerate(zip(op.index, shape)):
        i = to_i64(lo, lo.value(ix), ix.type.dtype, op)  # type: ignore[attr-defined]
        origin = binary(lo, "muli", i, constant(lo, n, I64.elem, (), op), op, overflow="none")
        iota = TValue(Tile(I64.elem, (n,)))
        lo.emit("iota", [iota], [], op)
        coords = binary(lo, "addi", iota, splat(lo, origin, (n,), op), op, overflow="none")
        ok = below(lo, coords, extents[d], op)
        if len(shape) > 1:
            line = TValue(Tile(BOOL, tuple(n if k == d else 1 for k in range(len(shape)))))
            lo.emit("reshape", [line], [ok], op)
            ok = splat(lo, line, shape, op)
        mask = ok if mask is None else binary(lo, "andi", mask, ok, op)
    assert mask is not None
    return mask


#: View loads and stores of tiles with fewer elements than this never use TMA. tileiras 13.5.37 built kernels that
#: hang on an H100 when a TMA load and a TMA store of such tiles meet in one kernel (1-D tiles of 8-512 elements,
#: float32 and uint16; 1024 and more ran; docs/tileir.md, "Fuzz program 140"); TMA gains nothing on tiles that small.
TMA_MIN_ELEMENTS = 1024


def _view_tile(op: Op) -> TileType | None:
    """The tile a view load or store moves, or None for any other op."""
    if isinstance(op, O.LoadOp):
        tile = op.result.type
    elif isinstance(op, O.StoreOp):
        tile = op.tile.type
    else:
        return None
    return tile if isinstance(tile, TileType) else None


def loop_mixes_tile_sizes(fn: O.Function) -> bool:
    """Whether a loop of kernel ``fn`` loads or stores, through views, both a tile of fewer than ``TMA_MIN_ELEMENTS``
    elements (never TMA) and a larger one. tileiras 13.5.37 built such kernels that never finished on an H200: the
    layer and RMS norm backward of examples/ (a grid-stride loop over (4, 1024) and (16, 256) bfloat16 tiles of x
    and dy beside the rows' 4 or 16 statistics), at any row count; with no TMA access they ran, as did loops of
    only large tiles (docs/tileir.md, "Session 21: the norm backward hang"). So no view access of such a kernel
    uses TMA."""
    for op in fn.body.walk():
        if isinstance(op, (O.ForOp, O.LoopOp)):
            sizes = {tile.size < TMA_MIN_ELEMENTS for tile in map(_view_tile, op.body.walk()) if tile is not None}
            if len(sizes) == 2:
                return True
    return False


def access_hints(lo: Lowerer, op: O.LoadOp | O.StoreOp) -> dict[str, dict[str, bool | int]] | None:
    """The optimization hints of a view load or store: ``allow_tma = false`` under the target's name for a tile of
    fewer than ``TMA_MIN_ELEMENTS`` elements, in a kernel that ``loop_mixes_tile_sizes``, or where
    ``occupancy.choose_no_tma`` says so, else None (tileiras's own choice)."""
    tile = _view_tile(op)
    if not lo.target:
        return None
    if tile is not None and tile.size < TMA_MIN_ELEMENTS:
        return {lo.target: {"allow_tma": False}}
    if lo.no_tma is None:
        lo.no_tma = loop_mixes_tile_sizes(lo.fn) or (lo.target in NO_TMA_ARCHS and choose_no_tma(lo.fn))
    return {lo.target: {"allow_tma": False}} if lo.no_tma else None


@rule(O.LoadOp)
def load(lo: Lowerer, op: O.LoadOp) -> None:
    """``load``: ``load_view_tko`` through the array's padded partition view, after the last store. A padding
    Tile IR views lack (or a true bool) reads zeros, then ``select``s the padding outside the array."""
    t = lo.tile_type(op.result.type, op)
    if not t.shape:
        raise unsupported(op, "a 0-d array")
    is_bool = t.elem == BOOL
    pad = None if is_bool else padding_name(op.padding)
    # tileiras 13.5 ignores the bounds of a view along a tile dimension of size 1 (measured on an H100: tiles of
    # (1,), (1, 1) and (1, 8) read past the array's end there), so such loads select the padding themselves
    exact = (pad is not None or (is_bool and not op.padding)) and 1 not in t.shape
    pv = view(lo, op, op.array, t.shape, pad or "zero")
    idx = indices(lo, op.index, op)
    tok = TValue(TOKEN)
    raw = lo.result(op) if not is_bool and exact else TValue(Tile(stored_elem(t.elem), t.shape))
    lo.emit("load_view_tko", [raw, tok], [pv, idx, lo.last_store], op, ordering="weak",
            inbounds=(False,) * len(idx), hints=access_hints(lo, op))
    lo.loads_since.append(tok)
    value = loaded_form(lo, raw, op.result, op)
    if not exact:
        padding = constant(lo, op.padding, t.elem, t.shape, op)
        value = select(lo, tile_in_range(lo, op, t.shape), value, padding, op, op.result.name)
    lo.vals[op.result] = value


@rule(O.StoreOp)
def store(lo: Lowerer, op: O.StoreOp) -> None:
    """``store``: ``store_view_tko`` through an unpadded view, after the last store and the loads since."""
    t = lo.tile_type(op.tile.type, op)
    if not t.shape:
        raise unsupported(op, "a 0-d array")
    value = stored_form(lo, lo.value(op.tile), op)
    if all(n == 1 for n in t.shape):
        # tileiras 13.5 writes a one-element tile through a view even outside the array (measured on an H100):
        # its one element is stored through a pointer, masked to the array (the tile index is the element's)
        ptrs, mask = element_pointers(lo, op, op.array, op.index)
        one = TValue(Tile(elem_of(value)))
        lo.emit("reshape", [one], [value], op)
        token, tok = waits(lo, op), TValue(TOKEN)
        lo.emit("store_ptr_tko", [tok], [ptrs, one, mask, token], op, ordering="weak")
    else:
        pv = view(lo, op, op.array, t.shape, None)
        token, tok = waits(lo, op), TValue(TOKEN)
        idx = indices(lo, op.index, op)
        lo.emit("store_view_tko", [tok], [value, pv, idx, token], op, ordering="weak", inbounds=(False,) * len(idx),
                hints=access_hints(lo, op))
    lo.last_store, lo.loads_since = tok, []


# ------------------------------------------------------------------ element accesses


def element_pointers(lo: Lowerer, op: Op, array: Value, index_values: list[Value]) -> tuple[TValue, TValue]:
    """The pointers to ``array[indices...]`` for each element, and which elements are in range.

    The offset is ``sum(index[d] * stride[d])`` in i64 (wrapping, as the CUDA backend's), taken as 0 where
    out of range so no pointer is made past the array."""
    at = array.type
    assert isinstance(at, ArrayType)
    if at.ndim == 0:
        raise unsupported(op, "a 0-d array")
    base, extents, strides = lo.arrays[array]
    shape = shape_of(lo.value(index_values[0]))
    mask: TValue | None = None
    offset: TValue | None = None
    for d, ix in enumerate(index_values):
        i = to_i64(lo, lo.value(ix), ix.type.dtype, op)  # type: ignore[attr-defined]
        ok = below(lo, i, extents[d], op)
        mask = ok if mask is None else binary(lo, "andi", mask, ok, op)
        term = binary(lo, "muli", i, splat(lo, strides[d], shape, op), op, overflow="none")
        offset = term if offset is None else binary(lo, "addi", offset, term, op, overflow="none")
    assert mask is not None and offset is not None
    offset = select(lo, mask, offset, constant(lo, 0, I64.elem, shape, op), op)
    assert isinstance(base.type, Tile)
    ptrs = TValue(Tile(base.type.elem, shape), f"{base.name}_ptrs")
    lo.emit("offset", [ptrs], [splat(lo, base, shape, op), offset], op)
    return ptrs, mask


@rule(O.GatherOp)
def gather(lo: Lowerer, op: O.GatherOp) -> None:
    """``gather``: ``load_ptr_tko`` of the element pointers, masked to those in range (the others read
    ``padding``), after the last store."""
    t = lo.tile_type(op.result.type, op)
    ptrs, mask = element_pointers(lo, op, op.array, op.indices)
    stored = stored_elem(t.elem)
    raw = lo.result(op) if stored == t.elem else TValue(Tile(stored, t.shape))
    padding = constant(lo, op.padding, stored, t.shape, op)
    tok = TValue(TOKEN)
    lo.emit("load_ptr_tko", [raw, tok], [ptrs, mask, padding, lo.last_store], op, ordering="weak")
    lo.loads_since.append(tok)
    lo.vals[op.result] = loaded_form(lo, raw, op.result, op)


@rule(O.ScatterOp)
def scatter(lo: Lowerer, op: O.ScatterOp) -> None:
    """``scatter``: ``store_ptr_tko`` of the element pointers, masked to those in range, after the last
    store and the loads since."""
    value = stored_form(lo, lo.value(op.tile), op)
    ptrs, mask = element_pointers(lo, op, op.array, op.indices)
    token = waits(lo, op)
    tok = TValue(TOKEN)
    lo.emit("store_ptr_tko", [tok], [ptrs, value, mask, token], op, ordering="weak")
    lo.last_store, lo.loads_since = tok, []


def _cas_next(lo: Lowerer, kind: str, cur: TValue, value: TValue, op: Op) -> TValue:
    """What a float max/min CAS writes: ``value`` where it beats ``cur`` (greater for max, less for min, or a NaN
    over a number: NaN wins as in tj::maximum/minimum), else ``cur`` itself. Keeping ``cur`` on ties matters:
    tileiras may give one element to several threads, and a rule that wrote ``value`` on ties (-0.0 vs +0.0)
    let two such copies swap the zeros forever; with this one, a settled element's CAS rewrites its own bits."""
    i1 = Tile(BOOL, shape_of(cur))
    beats, value_nan, cur_num = TValue(i1), TValue(i1), TValue(i1)
    lo.emit("cmpf", [beats], [value, cur], op, predicate="greater_than" if kind == "max" else "less_than",
            comparison="ordered")
    lo.emit("cmpf", [value_nan], [value, value], op, predicate="not_equal", comparison="unordered")
    lo.emit("cmpf", [cur_num], [cur, cur], op, predicate="equal", comparison="ordered")
    wins = binary(lo, "ori", beats, binary(lo, "andi", value_nan, cur_num, op), op)
    return select(lo, wins, value, cur, op)


#: tilejit's memory scopes -> Tile IR's.
SCOPES = {"cta": "tl_blk", "gpu": "device", "sys": "sys"}


def _cas_loop(lo: Lowerer, op: O.AtomicOp, ptrs: TValue, mask: TValue, value: TValue) -> TValue:
    """Float atomic max/min as the CUDA backend's ``atomic_cas_loop``, on the whole tile at once: read each
    element once (relaxed, at the op's scope), then loop { ``next = _cas_next(cur, value)``; CAS (with the op's order)
    the bits of ``cur`` -> ``next`` in the lanes still pending; a lane whose CAS saw bits other than ``cur`` takes
    them as ``cur`` and stays pending } until no lane is. Each lane's result is the ``cur`` its CAS succeeded with
    (the old value), compared and swapped as bits (as cas_word: -0.0 and +0.0, and NaNs, are told apart). The CAS
    chain is a store for ordering."""
    t = value.type
    assert isinstance(t, Tile)
    shape = t.shape
    width = {"f32": 32, "f64": 64}[elem_of(value).name]
    bits = Scalar(f"i{width}")
    bt, i1 = Tile(bits, shape), Tile(BOOL, shape)
    iptrs = TValue(Tile(Ptr(bits), shape))
    lo.emit("ptr_to_ptr", [iptrs], [ptrs], op)
    first, tok0 = TValue(bt), TValue(TOKEN)
    lo.emit("load_ptr_tko", [first, tok0], [iptrs, mask, constant(lo, 0, bits, shape, op), waits(lo, op)], op,
            ordering="relaxed", scope=SCOPES[op.scope])
    cur, pending, tok = TValue(bt, "cur"), TValue(i1, "pending"), TValue(TOKEN, "cas_token")
    with lo.in_block() as body:
        cur_f, nxt = TValue(t), TValue(bt)
        lo.emit("bitcast", [cur_f], [cur], op)
        lo.emit("bitcast", [nxt], [_cas_next(lo, op.kind, cur_f, value, op)], op)
        seen, tok2 = TValue(bt), TValue(TOKEN)
        lo.emit("atomic_cas_tko", [seen, tok2], [iptrs, cur, nxt, pending, tok], op, ordering=op.sem,
                scope=SCOPES[op.scope])
        differs = TValue(i1)
        lo.emit("cmpi", [differs], [seen, cur], op, predicate="not_equal", signedness="unsigned")
        retry = binary(lo, "andi", differs, pending, op)
        cur2 = select(lo, retry, seen, cur, op)
        flat = retry
        if len(shape) != 1:
            flat = TValue(Tile(BOOL, (math.prod(shape),)))
            lo.emit("reshape", [flat], [retry], op)
        elem, accum, either = TValue(Tile(BOOL), "elem"), TValue(Tile(BOOL), "accum"), TValue(Tile(BOOL), "any")
        again = TValue(Tile(BOOL))
        lo.emit("reduce", [again], [[flat]], op, dim=0, identities=[(0, BOOL)]).regions.append(TBlock(
            [elem, accum], [TOp("ori", [either], [elem, accum], {}, op.loc), TOp("yield", [], [[either]], {}, op.loc)]
        ))
        stay = TOp("yield", [], [[]], {}, op.loc)
        leave = TOp("break", [], [[cur2, tok2]], {}, op.loc)
        lo.emit("if", [], [again], op).regions += [TBlock([], [stay]), TBlock([], [leave])]
        lo.emit("continue", [], [[cur2, retry, tok2]], op)
    old_bits, tok_out = TValue(bt), TValue(TOKEN)
    lo.emit("loop", [old_bits, tok_out], [[first, mask, tok0]], op).regions.append(TBlock([cur, pending, tok], body))
    lo.last_store, lo.loads_since = tok_out, []
    old = TValue(t)
    lo.emit("bitcast", [old], [old_bits], op)
    return old


@rule(O.AtomicOp)
def atomic(lo: Lowerer, op: O.AtomicOp) -> None:
    """``atomic_*``: ``atomic_rmw_tko`` / ``atomic_cas_tko`` with the op's memory order and scope (``cta``:
    ``tl_blk``, ``gpu``: ``device``), masked to the elements in range; their results are the old values, 0 where
    out of range. Ordered with tokens as a store: after every earlier memory op of the block, before every later
    one, so a release or acquire orders the whole tile block's accesses (the Tile IR memory model's thread).
    Float max/min (f32/f64, all the front end takes): the CUDA backend's CAS loop (``_cas_loop``), refused where
    the kernel uses the old values it returns (that form hung on an H100, the form without them did not)."""
    dtype = op.array.type.dtype  # type: ignore[attr-defined]
    t = lo.tile_type(op.value.type, op)  # the result's type; an atomic whose old values go unused has no result
    value = lo.value(op.value)
    attrs: dict[str, object] = {"ordering": op.sem, "scope": SCOPES[op.scope]}
    cas_loop = op.kind in ("max", "min") and dtype.is_float
    if cas_loop and op.results and any(op.result in o.operands() for o in lo.fn.body.walk()):
        raise unsupported(op, f"the old values of atomic_{op.kind} on {dtype.name}: the compare-and-swap loop that "
                              "returns them hung on an H100 (tileiras 13.5); without them it is supported")
    if cas_loop and dtype.bits < 32:  # the CAS loop works on the element's bits: Tile IR swaps 32 or 64 of them
        raise unsupported(op, f"atomic_{op.kind} on {dtype.name}; Tile IR compares and swaps 32- and 64-bit words")
    if dtype.bits < 32 and not (op.kind == "add" and dtype.is_float):
        raise unsupported(op, f"atomic_{op.kind} on {dtype.name}; Tile IR's atomics take 32- and 64-bit "
                              "elements (and 16-bit float adds)")
    if op.kind != "cas" and not cas_loop:
        modes = _ATOMIC_MODES.get(op.kind)
        mode = None if modes is None else modes[0 if dtype.is_float else 1 if dtype.is_signed else 2]
        if mode is None:
            raise unsupported(op, f"atomic_{op.kind} on {dtype.name}")
        if mode == "addf" and dtype.name == "bfloat16" and lo.target and parse_target(lo.target).number < 90:
            raise unsupported(op, f"atomic_add on bfloat16 for {lo.target}; Tile IR has it from sm_90 on")
        attrs["mode"] = mode
    ptrs, mask = element_pointers(lo, op, op.array, op.indices)
    if cas_loop:
        old = _cas_loop(lo, op, ptrs, mask, value)
    else:
        token = waits(lo, op)
        old, tok = TValue(t), TValue(TOKEN)
        if op.kind == "cas":
            lo.emit("atomic_cas_tko", [old, tok], [ptrs, lo.value(op.compare[0]), value, mask, token], op, **attrs)
        else:
            lo.emit("atomic_rmw_tko", [old, tok], [ptrs, value, mask, token], op, **attrs)
        lo.last_store, lo.loads_since = tok, []
    if op.results:
        lo.vals[op.result] = select(lo, mask, old, constant(lo, 0, elem_of(old), t.shape, op), op, op.result.name)


@rule(O.FenceOp)
def fence(lo: Lowerer, op: O.FenceOp) -> None:
    """Refused: Tile IR has no memory fence (its atomics carry the order)."""
    raise unsupported(op, "tj.fence(): Tile IR has no memory fence; it orders memory through the sem and scope of "
                          "its atomics, so give the atomic that publishes the data sem=\"release\" and the one that "
                          "reads it sem=\"acquire\"")


@rule(O.BarrierOp)
def barrier(lo: Lowerer, op: O.BarrierOp) -> None:
    """A join of the memory state: every later load and store waits for every earlier memory op of the block
    (Tile IR orders a block's accesses by tokens; there are no threads to wait for)."""
    token = waits(lo, op)
    if token is not None:
        lo.last_store, lo.loads_since = token, []
