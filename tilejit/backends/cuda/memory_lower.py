"""Tile loads and stores, gather/scatter and atomics → C++ (methods of ``Lowering``, bound in lower.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilejit.backends.cuda import tables
from tilejit.backends.cuda.layouts import Layout
from tilejit.backends.cuda.plan import located
from tilejit.errors import CompileError
from tilejit.language.ir import ops as O
from tilejit.language.ir.core import Value
from tilejit.language.ir.types import ArrayType, DType, TileType

if TYPE_CHECKING:
    from tilejit.backends.cuda.lower import Lowering


def _array(lw: Lowering, v: Value) -> tuple[str, ArrayType]:
    t = v.type
    if not isinstance(t, ArrayType):
        raise CompileError(f"expected an array operand, got {t}")
    if t.ndim == 0:
        raise CompileError("0-d arrays cannot be indexed by tile loads/stores")
    return lw.vals[v].text, t


def _vec(lw: Lowering, array: Value, layout: Layout) -> int:
    """0: strided element accesses; 1: unit stride; >1: vectors of that many elements."""
    hint = lw.hints.get(lw.plan.array_names.get(array, ""))
    if hint is None or not getattr(hint, "unit_stride", False):
        return 0
    if not getattr(hint, "aligned16", False):
        return 1
    return layout.vec


def _origins(lw: Lowering, index: list[Value], shape: tuple[int, ...]) -> str:
    return ", ".join(f"(tj::i64){lw.scalar(ix)} * {s}" for ix, s in zip(index, shape))


def _shape_t(shape: tuple[int, ...]) -> str:
    return f"tj::Shape<{', '.join(map(str, shape))}>"


def op_LoadOp(lw: Lowering, op: O.LoadOp) -> None:
    if id(op) in lw.plan.deferred:  # streamed into shared memory by a cp.async pipeline
        return
    staged = lw.plan.staged_loads.get(id(op))
    if staged is not None:  # copied into an mma's B buffer with cp.async
        from tilejit.backends.cuda.mma_lower import issue_staged

        issue_staged(lw, staged)
        return
    name, at = lw._array(op.array)
    t = op.result.type
    assert isinstance(t, TileType)
    if len(op.index) != at.ndim or t.ndim != at.ndim:
        raise CompileError(f"load from a {at.ndim}-d array needs {at.ndim} indices and a {at.ndim}-d tile")
    layout = lw.plan.layout_of(op.result)
    tname = lw.define_tile(op.result, layout)
    # ld.global.nc measured slower than plain loads for a layer norm on H100 (same speed elsewhere),
    # so read-only arrays use the coherent path too; tj::load keeps the switch for other targets.
    nc = "false"
    pad = tables.literal(op.padding, at.dtype)
    lw.line(
        f"tj::load<{lw._vec(op.array, layout)}, {nc}, {_shape_t(t.shape)}>"
        f"({tname}, {name}, {{{lw._origins(op.index, t.shape)}}}, {pad});"
    )


def op_StoreOp(lw: Lowering, op: O.StoreOp) -> None:
    name, at = lw._array(op.array)
    t = op.tile.type
    assert isinstance(t, TileType)
    if t.is_scalar or len(op.index) != at.ndim or t.ndim != at.ndim:
        raise CompileError(f"store to a {at.ndim}-d array needs {at.ndim} indices and a {at.ndim}-d tile")
    tile = lw._as_array_dtype(op.tile, at.dtype)
    layout = lw.vals[tile].layout if lw.vals[tile].kind == "tile" else lw.plan.layout_of(tile)
    assert layout is not None
    src = lw.tile(tile, layout)
    lw.line(
        f"tj::store<{lw._vec(op.array, layout)}, {_shape_t(t.shape)}>"
        f"({name}, {{{lw._origins(op.index, t.shape)}}}, {src});"
    )


def _as_array_dtype(lw: Lowering, v: Value, dt: DType) -> Value:
    if lw._dtype(v) != dt:
        raise CompileError(f"storing a {lw._dtype(v).name} tile into a {dt.name} array (cast it first)")
    return v


def _element_indices(lw: Lowering, array: Value, indices: list[Value], layout: Layout) -> tuple[str, str]:
    """Statements computing ``tj_off``/``tj_ok`` for element i, and the array name."""
    name, at = lw._array(array)
    if len(indices) != at.ndim:
        raise CompileError(f"a {at.ndim}-d array needs {at.ndim} index tiles, got {len(indices)}")
    for ix in indices:
        if not lw._dtype(ix).is_int:
            raise CompileError(f"index tiles must be integers, got {lw._dtype(ix).name}")
    ixs = ", ".join(f"(tj::i64){lw.elem(ix, layout)}" for ix in indices)
    setup = (f"bool tj_ok; const tj::i64 tj_ix[] = {{{ixs}}}; "
             f"const tj::i64 tj_off = tj::index_offset({name}, tj_ix, tj_ok);")
    return setup, name


def _runs(lw: Lowering, array: Value, indices: list[Value], layout: Layout) -> int:
    """The vector width of a gather or scatter whose index tile's runs (``AssumeOp`` facts: runs of ``contiguous``
    consecutive values from multiples of ``div_by``) allow vector accesses, else 0: a rank-1 array with unit
    stride and 16-byte alignment, in a blocked layout whose register slots hold consecutive elements."""
    _, at = lw._array(array)
    facts = lw.facts.get(indices[0])
    if facts is None or at.ndim != 1 or layout.kind != "blocked" or lw._vec(array, layout) < 2:
        return 0
    vec = min(layout.vec, *facts)
    return vec if vec >= 2 else 0


def op_GatherOp(lw: Lowering, op: O.GatherOp) -> None:
    layout = lw.plan.layout_of(op.result)
    _, at = lw._array(op.array)
    pad = tables.literal(op.padding, at.dtype)
    vec = _runs(lw, op.array, op.indices, layout)
    if vec:
        ix = lw.tile(op.indices[0], layout)
        tname = lw.define_tile(op.result, layout)
        lw.line(f"tj::gather_runs<{vec}>({tname}, {lw.vals[op.array].text}, {ix}, {pad});")
        return
    setup, name = lw._element_indices(op.array, op.indices, layout)
    tname = lw.define_tile(op.result, layout)
    lw.line(f"TJ_EACH(i, {lw.lname(layout)}) {{ {setup} {tname}.v[i] = tj_ok ? {name}.ptr[tj_off] : {pad}; }}")


def op_ScatterOp(lw: Lowering, op: O.ScatterOp) -> None:
    _, at = lw._array(op.array)
    lw._as_array_dtype(op.tile, at.dtype)
    layout = lw.plan.layout_of(op.tile)
    vec = _runs(lw, op.array, op.indices, layout)
    if vec:
        ix, src = lw.tile(op.indices[0], layout), lw.tile(op.tile, layout)
        lw.line(f"tj::scatter_runs<{vec}>({lw.vals[op.array].text}, {ix}, {src});")
        return
    setup, name = lw._element_indices(op.array, op.indices, layout)
    val = lw.elem(op.tile, layout)
    lname = lw.lname(layout)
    lw.line(f"if ({lname}::owner(tj_tid)) TJ_EACH(i, {lname}) {{")
    lw.line(f"  {setup} if (tj_ok) {name}.ptr[tj_off] = {val};")
    lw.line("}")


_ATOMIC_OK = {
    "add": ("int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64", "int16", "uint16"),
    "max": ("int16", "int32", "int64", "uint16", "uint32", "uint64", "float16", "bfloat16", "float32", "float64"),
    "xchg": ("int16", "int32", "int64", "uint16", "uint32", "uint64", "float16", "bfloat16", "float32", "float64"),
}


#: The header's template arguments for a memory order and scope (memory.cuh, "atomics").
_SEMS = {"relaxed": "tj::RELAXED", "acquire": "tj::ACQUIRE", "release": "tj::RELEASE", "acq_rel": "tj::ACQ_REL"}
_SCOPES = {"cta": "tj::CTA", "gpu": "tj::GPU", "sys": "tj::SYS"}


def _order(lw: Lowering, op: O.AtomicOp | O.FenceOp) -> tuple[str, str]:
    """``("tj::ACQ_REL", "tj::GPU")``: the header's arguments for ``op``'s order; sys scope needs sm_70's ``.sys``."""
    if op.sem not in _SEMS or op.scope not in _SCOPES:
        raise CompileError(f"unknown memory order {op.sem!r} or scope {op.scope!r}")
    if op.scope == "sys" and lw.plan.arch < 70:
        raise located(op.loc, f'scope="sys" needs sm_70 or newer (PTX atom and fence take .sys from sm_70 on); '
                              f'this kernel is compiled for sm_{lw.plan.arch}')
    return _SEMS[op.sem], _SCOPES[op.scope]


def barrier(lw: Lowering) -> None:
    """``__syncthreads();``, unless the statement just emitted ends with one (the threads have just met)."""
    if not (lw.lines and lw.lines[-1].endswith("__syncthreads();")):
        lw.line("__syncthreads();")


def _releases(sem: str) -> bool:
    return sem in ("release", "acq_rel")


def _acquires(sem: str) -> bool:
    return sem in ("acquire", "acq_rel")


def op_AtomicOp(lw: Lowering, op: O.AtomicOp) -> None:
    """Each owned element's atomic, by the thread owning it, with the op's order; the order is the block's:
    a release waits at a barrier first (every thread's earlier memory ops happen before it), an acquire at a
    barrier after (before every thread's later ones), as PTX orders a release or acquire by one thread only."""
    _, at = lw._array(op.array)
    kind = op.kind
    allowed = _ATOMIC_OK.get({"min": "max", "cas": "xchg"}.get(kind, kind))
    if allowed is None:
        raise CompileError(f"atomic kind '{kind}' is not one of add, max, min, xchg, cas")
    if at.dtype.name not in allowed:
        raise CompileError(f"atomic_{kind} is not supported for dtype {at.dtype.name}")
    lw._as_array_dtype(op.value, at.dtype)
    if kind == "cas" and len(op.compare) != 1:
        raise CompileError("atomic cas needs exactly one tile of expected values")
    order = ", ".join(_order(lw, op))
    res = op.results[0] if op.results and op.results[0] in lw.plan.used else None  # old values no op reads: none
    layout = lw.plan.layout_of(op.results[0] if op.results else op.value)
    setup, name = lw._element_indices(op.array, op.indices, layout)
    args = f"{name}.ptr + tj_off, " + (f"{lw.elem(op.compare[0], layout)}, " if kind == "cas" else "")
    args += lw.elem(op.value, layout)
    call = f"tj::atomic_{kind}<{order}>({args})"
    lname = lw.lname(layout)
    if _releases(op.sem):  # the block's earlier memory ops first
        barrier(lw)
    shared = False
    if res is None:
        lw.line(f"if ({lname}::owner(tj_tid)) TJ_EACH(i, {lname}) {{")
        lw.line(f"  {setup} if (tj_ok) {call};")
        lw.line("}")
    else:
        zero = tables.literal(0, at.dtype)
        tname = lw.define_tile(res, layout)
        lw.line(f"TJ_EACH(i, {lname}) {tname}.v[i] = {zero};")
        lw.line(f"if ({lname}::owner(tj_tid)) TJ_EACH(i, {lname}) {{")
        lw.line(f"  {setup} if (tj_ok) {tname}.v[i] = {call};")
        lw.line("}")
        if any(b < 0 for b in layout.tbits):  # replicas learn the owner's old values (barriers inside)
            shared = True
            copy = lw.define_tile(res, layout)
            lw.need_smem(layout.size * at.dtype.itemsize)
            lw.line(f"tj::remap<tj::IdentityMap>({copy}, {tname}, tj_smem);")
    if _acquires(op.sem) and not shared:  # then the block's later memory ops
        barrier(lw)


def op_FenceOp(lw: Lowering, op: O.FenceOp) -> None:
    """A fence of every thread between two barriers: what any thread of the block did before it happens before
    what any thread does after it, as threads of the scope see them (PTX fence.acq_rel whatever the sem)."""
    _, scope = _order(lw, op)
    barrier(lw)
    lw.line(f"tj::fence<{scope}>(); __syncthreads();")


def op_BarrierOp(lw: Lowering, op: O.BarrierOp) -> None:
    """``__syncthreads()``: Triton's ``debug_barrier``."""
    barrier(lw)
