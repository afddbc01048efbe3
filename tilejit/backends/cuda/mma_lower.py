"""``MmaOp`` → C++: operands through padded shared memory, then tensor cores or an FMA loop."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilejit.backends.cuda import tables
from tilejit.language.ir.ops import MmaOp
from tilejit.language.ir.types import TileType

if TYPE_CHECKING:
    from tilejit.backends.cuda.lower import Lowering


def lower_mma(lw: Lowering, op: MmaOp) -> None:
    """Emit ``result = a @ b + acc`` for the strategy chosen in the plan."""
    p = lw.plan.mma[id(op)]
    out_layout = lw.plan.layout_of(op.result)
    acc = lw.define_tile(op.result, out_layout)
    lw._assign(acc, op.acc, op.result)
    t_in = tables.ctype(p.in_dtype)
    a_layout, b_layout = _operand_layout(lw, op.a), _operand_layout(lw, op.b)
    a_name, b_name = lw.tile(op.a, a_layout), lw.tile(op.b, b_layout)
    lw.need_smem(p.smem_bytes)
    lw.line("{")
    lw.depth += 1
    lw.line(f"{t_in}* tj_As = reinterpret_cast<{t_in}*>(tj_smem);")
    lw.line(f"{t_in}* tj_Bs = tj_As + {p.a_elems};")
    lw.line("__syncthreads();")
    lw.line(f"tj::to_smem<{p.k}, {p.lda}, {a_layout.vec}>(tj_As, {a_name});")
    lw.line(f"tj::to_smem<{p.n}, {p.ldb}, {b_layout.vec}>(tj_Bs, {b_name});")
    lw.line("__syncthreads();")
    if p.path == "tc":
        assert p.grid is not None
        lw.line(
            f"tj::TensorCore<{t_in}, {p.m}, {p.n}, {p.k}, {p.grid.wm}, {p.grid.wn}, {p.lda}, {p.ldb}>"
            f"::run({acc}, tj_As, tj_Bs);"
        )
    elif p.path == "tf32":
        assert p.grid is not None
        lw.line(
            f"tj::TensorCoreTF32<{p.m}, {p.n}, {p.k}, {p.grid.wm}, {p.grid.wn}, {p.lda}, {p.ldb}>"
            f"::run({acc}, tj_As, tj_Bs);"
        )
    else:
        lw.line(f"tj::mma_fma<{p.k}, {p.n}, {p.lda}, {p.ldb}>({acc}, tj_As, tj_Bs);")
    lw.depth -= 1
    lw.line("}")


def _operand_layout(lw: Lowering, v: object) -> object:
    c = lw.vals[v]  # type: ignore[index]
    if c.kind == "tile" and c.layout is not None:
        return c.layout
    t = v.type  # type: ignore[attr-defined]
    assert isinstance(t, TileType)
    return lw.plan.layout_of(v)  # type: ignore[arg-type]
