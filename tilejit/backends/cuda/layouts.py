"""Tile layouts (which thread holds which element) and the pass that assigns one to every value.

A layout maps the bits of a tile's row-major flat index to register-index bits and thread-index
bits (tile.cuh explains the scheme and the C++ side). Every N-d tile gets the *blocked* layout of
its shape, except values that flow into or out of a tensor-core ``MmaOp``: those keep the mma
accumulator fragment layout, through loop-carried values, ifs and elementwise ops, so that a K loop
never moves the accumulator between threads. A reduction of such a value along an axis that no warp
splits, and a value broadcast into one, take the fragment layout's *slice* (the axis dropped, its
lanes replicas): an online softmax's row max and sum, and ``qk - m[:, None]``, stay in registers.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilejit.language.ir.core import Block, Value
from tilejit.language.ir.ops import (
    ArangeOp,
    BinaryOp,
    BroadcastOp,
    CastOp,
    CompareOp,
    ConstantOp,
    FmaOp,
    ForOp,
    Function,
    IfOp,
    LoopOp,
    MmaOp,
    ReduceOp,
    ReshapeOp,
    SelectOp,
    UnaryOp,
)
from tilejit.language.ir.types import TileType


def log2(x: int) -> int:
    return x.bit_length() - 1


@dataclass(frozen=True)
class Layout:
    """``ibits[k]``/``tbits[k]``: the flat-index bit that register bit k / thread bit k holds
    (-1: a replica bit). ``vec``: how many consecutive register slots hold consecutive elements
    of one row (the width of one vector access)."""

    kind: str  # "blocked", "mma" or "slice" (an mma layout with an axis dropped)
    nt: int
    ibits: tuple[int, ...]
    tbits: tuple[int, ...]
    vec: int

    @property
    def elems(self) -> int:
        return 1 << len(self.ibits)

    @property
    def size(self) -> int:
        return 1 << (len(self.ibits) + sum(1 for b in self.tbits if b >= 0))

    @property
    def is_single(self) -> bool:
        """One element, held by every thread."""
        return self.size == 1

    def flat(self, thread: int, reg: int) -> int | None:
        """The tile's flat index that register ``reg`` of ``thread`` holds (None: ``thread`` is a replica), as
        ``tj::Layout::flat`` computes it on the device."""
        if any(thread >> k & 1 for k, b in enumerate(self.tbits) if b < 0):
            return None
        f = 0
        for k, b in enumerate(self.ibits):
            f |= (reg >> k & 1) << b
        for k, b in enumerate(self.tbits):
            if b >= 0:
                f |= (thread >> k & 1) << b
        return f

    def cxx(self) -> str:
        ib = ", ".join(map(str, self.ibits))
        tb = ", ".join(map(str, self.tbits))
        return f"tj::Layout<{self.nt}, tj::Bits<{ib}>, tj::Bits<{tb}>>"

    def warp_axis_groups(self, lo: int, hi: int) -> int:
        """How many warp groups hold partials of one output when reducing flat bits [lo, hi)."""
        return 1 << sum(1 for k, b in enumerate(self.tbits) if k >= 5 and lo <= b < hi)


def blocked(shape: tuple[int, ...], nt: int, vec: int) -> Layout:
    """Thread t holds ``vec`` contiguous elements per chunk; chunks are strided by nt*vec."""
    size = 1
    for s in shape:
        size *= s
    ls, lt = log2(size), log2(nt)
    if size < nt:
        return Layout("blocked", nt, (), tuple(range(ls)) + (-1,) * (lt - ls), 1)
    vec = max(1, min(vec, size // nt, shape[-1] if shape else 1))
    lv = log2(vec)
    ibits = tuple(range(lv)) + tuple(range(lv + lt, ls))
    return Layout("blocked", nt, ibits, tuple(range(lv, lv + lt)), vec)


@dataclass(frozen=True)
class WarpGrid:
    """How the warps of a block tile an (M, N) mma accumulator: WM x WN warps."""

    wm: int
    wn: int


def mma_layout(m: int, n: int, nt: int, grid: WarpGrid) -> Layout:
    """The m16n8 C-fragment layout: element i of a thread is (mi * NTL + ni) * 4 + r."""
    wtm, wtn = m // grid.wm, n // grid.wn
    ln = log2(n)

    def row(b: int) -> int:
        return ln + b

    ibits = [0, row(3)]
    ibits += [3 + k for k in range(log2(wtn // 8))]
    ibits += [row(4 + k) for k in range(log2(wtm // 16))]
    tbits = [1, 2, row(0), row(1), row(2)]
    tbits += [row(log2(wtm) + k) for k in range(log2(grid.wm))]
    tbits += [log2(wtn) + k for k in range(log2(grid.wn))]
    assert len(tbits) == log2(nt), (m, n, nt, grid)
    return Layout("mma", nt, tuple(ibits), tuple(tbits), 2)


def slice_layout(layout: Layout, lo: int, hi: int) -> Layout:
    """``layout`` with flat-index bits [lo, hi) (one axis) dropped: the register bits on them go, the thread bits
    on them become replicas, the bits above move down. Each thread of the slice holds the elements whose other
    bits it held (a row reduction's result where the row's lanes combined by shuffles)."""

    def moved(b: int) -> int:
        return b if b < lo else b - (hi - lo)

    ibits = tuple(moved(b) for b in layout.ibits if not lo <= b < hi)
    tbits = tuple(-1 if b < 0 or lo <= b < hi else moved(b) for b in layout.tbits)
    return Layout("slice", layout.nt, ibits, tbits, 1)


def choose_warp_grid(m: int, n: int, nt: int) -> WarpGrid | None:
    """The most square split of the block's warps over (M, N) with m16 x n16 warp tiles, if any."""
    warps = nt // 32
    best: WarpGrid | None = None
    for k in range(log2(warps) + 1):
        wm, wn = 1 << k, warps >> k
        if m % (wm * 16) or n % (wn * 16):
            continue
        cand = WarpGrid(wm, wn)
        if best is None or abs(log2(m // wm) - log2(n // wn)) < abs(log2(m // best.wm) - log2(n // best.wn)):
            best = cand
    return best


def _walk_blocks(block: Block) -> list[Block]:
    out = [block]
    for op in block.ops:
        for r in op.regions():
            out.extend(_walk_blocks(r))
    return out


#: Elementwise ops: a result and its operands of the same shape share a layout.
ELEMENTWISE = (UnaryOp, BinaryOp, FmaOp, CompareOp, SelectOp, CastOp)
#: Ops whose results cost nothing to compute in any layout (no memory, no communication): an elementwise op that
#: feeds an mma-layout value takes that layout from its consumer, down to its broadcasts and aranges.
_LOCAL_PRODUCERS = (*ELEMENTWISE, BroadcastOp, ReshapeOp, ArangeOp, ConstantOp)


def axis_bits(shape: tuple[int, ...], axis: int) -> tuple[int, int]:
    """The flat-index bits [lo, hi) of ``axis`` of a row-major tile of ``shape`` (powers of two)."""
    lo = sum(log2(s) for s in shape[axis + 1:])
    return lo, lo + log2(shape[axis])


def broadcast_slice(layout: Layout, src: tuple[int, ...], dst: tuple[int, ...]) -> Layout:
    """The layout of a tile of shape ``src`` whose broadcast to ``dst`` (in ``layout``) needs no communication."""
    for d in reversed(range(len(dst))):
        if src[d] == 1 and dst[d] != 1:
            layout = slice_layout(layout, *axis_bits(dst, d))
    return layout


def assign_mma_layouts(fn: Function, mma_results: dict[Value, Layout]) -> dict[Value, Layout]:
    """Spread the accumulator layouts of tensor-core MmaOps (and mma operands planned in registers) to every value
    that must share them: the acc operand chain, loop-carried values, if results and elementwise ops, the slices of
    reductions along an axis no warp splits (and their keepdims reshapes), and, back from a consumer, the
    elementwise ops and broadcasts that feed it (fixed point)."""
    lay: dict[Value, Layout] = dict(mma_results)
    ops = list(fn.body.walk())
    defs = {r: op for op in ops for r in op.results}
    changed = True

    def put(v: Value, layout: Layout) -> None:
        nonlocal changed
        if v not in lay and isinstance(v.type, TileType) and v.type.size == layout.size and not v.type.is_scalar:
            lay[v] = layout
            changed = True

    def same_shape(a: Value, b: Value) -> bool:
        return isinstance(a.type, TileType) and isinstance(b.type, TileType) and a.type.shape == b.type.shape

    while changed:
        changed = False
        for op in ops:
            if isinstance(op, MmaOp) and op.result in lay:
                put(op.acc, lay[op.result])
            elif isinstance(op, ELEMENTWISE):
                for v in op.operands():
                    if v in lay and same_shape(v, op.result):
                        put(op.result, lay[v])
                if op.result in lay:  # back to operands computed in registers from nothing but broadcasts
                    for v in op.operands():
                        if same_shape(v, op.result) and isinstance(defs.get(v), _LOCAL_PRODUCERS):
                            put(v, lay[op.result])
            elif isinstance(op, ReduceOp) and op.x in lay and isinstance(op.x.type, TileType):
                lo, hi = axis_bits(op.x.type.shape, op.axis)
                if lay[op.x].kind != "blocked" and lay[op.x].warp_axis_groups(lo, hi) == 1:
                    put(op.result, slice_layout(lay[op.x], lo, hi))
            elif isinstance(op, ReshapeOp):  # same flat order: a slice (keepdims, expand_dims) keeps its layout
                for a, b in ((op.x, op.result), (op.result, op.x)):
                    if a in lay and lay[a].kind == "slice":
                        put(b, lay[a])
                if op.x in lay and lay[op.x].kind == "mma" and unit_dims_only(op.x, op.result):
                    put(op.result, lay[op.x])  # an accumulator stored as (1, M, N): no trip through shared memory
            elif isinstance(op, BroadcastOp) and op.result in lay:
                st, rt = op.x.type, op.result.type
                if isinstance(st, TileType) and isinstance(rt, TileType) and st.ndim == rt.ndim and st.size > 1:
                    put(op.x, broadcast_slice(lay[op.result], st.shape, rt.shape))
            elif isinstance(op, ForOp | LoopOp):
                args = op.body.args[1:] if isinstance(op, ForOp) else op.body.args
                exits = [t for b in _walk_blocks(op.body) for t in b.ops if t.NAME in ("continue", "break")]
                for k, (arg, res) in enumerate(zip(args, op.results)):
                    group = [arg, res, op.init[k]] + [t.operands()[k] for t in exits if _innermost(op, t)]
                    found = next((lay[v] for v in group if v in lay), None)
                    if found is not None:
                        for v in (arg, res):
                            put(v, found)
            elif isinstance(op, IfOp):
                yields = [b.ops[-1] for b in (op.then_body, op.else_body) if b.ops and b.ops[-1].NAME == "yield"]
                for k, res in enumerate(op.results):
                    found = next((lay[y.operands()[k]] for y in yields if y.operands()[k] in lay), None)
                    if found is not None:
                        put(res, found)
    return lay


def unit_dims_only(x: Value, result: Value) -> bool:
    """Whether reshaping ``x`` to ``result`` only adds or drops axes of 1, keeping the innermost: every layout
    (its flat bits and its vector width along a row) holds for both."""
    xt, rt = x.type, result.type
    if not isinstance(xt, TileType) or not isinstance(rt, TileType) or not xt.shape or not rt.shape:
        return False
    return xt.shape[-1] == rt.shape[-1] and [s for s in xt.shape if s != 1] == [s for s in rt.shape if s != 1]


def flows_from(fn: Function, start: Value) -> set[Value]:
    """``start`` and the values computed from it elementwise (same shape), through loop carries and if results:
    those that share its layout when it is an mma's accumulator."""
    ops = list(fn.body.walk())
    seen = {start}
    changed = True
    while changed:
        changed = False
        for op in ops:
            links: list[tuple[Value, Value]] = []
            if isinstance(op, ELEMENTWISE):
                rt = op.result.type
                links = [(v, op.result) for v in op.operands()
                         if isinstance(v.type, TileType) and isinstance(rt, TileType) and v.type.shape == rt.shape]
            elif isinstance(op, MmaOp):
                links = [(op.acc, op.result)]
            elif isinstance(op, ForOp | LoopOp):
                args = op.body.args[1:] if isinstance(op, ForOp) else op.body.args
                exits = [t for b in _walk_blocks(op.body) for t in b.ops if t.NAME in ("continue", "break")]
                for k, (arg, res) in enumerate(zip(args, op.results)):
                    group = [op.init[k]] + [t.operands()[k] for t in exits if _innermost(op, t)]
                    links += [(g, arg) for g in group] + [(g, res) for g in group]
            elif isinstance(op, IfOp):
                for b in (op.then_body, op.else_body):
                    if b.ops and b.ops[-1].NAME == "yield":
                        links += list(zip(b.ops[-1].operands(), op.results))
            for src, dst in links:
                if src in seen and dst not in seen:
                    seen.add(dst)
                    changed = True
    return seen


def _innermost(loop: ForOp | LoopOp, term: object) -> bool:
    """Whether a continue/break belongs to ``loop`` (not to a loop nested inside it)."""
    return _owner_loop(loop.body, term, loop) is loop


def _owner_loop(block: Block, term: object, current: object = None) -> object:
    for op in block.ops:
        if op is term:
            return current
        for r in op.regions():
            found = _owner_loop(r, term, op if isinstance(op, ForOp | LoopOp) else current)
            if found is not None:
                return found
    return None
