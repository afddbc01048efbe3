"""The order the CUDA backend emits a block's ops in: each tile load moves up past the element-wise ops just before
it that it does not depend on, so a block issues its loads before the arithmetic on the first one.

Why: a ``tj::load`` branches between a whole-tile vector path and a masked one, and ptxas does not move a later
load above that branch. Where a value is converted right after its load (float16 → float32 is an instruction of
its own, a ``HADD2.F32`` per element), the warp then waits for the first load to arrive before it issues the
second: an H200 ran the softmax backward of float16 rows of 16384 elements at 2950 GB/s against 3634 for bfloat16,
whose conversion (a shift) ptxas moved past the branch.

A load moves only where nothing before it in the kernel, in program order or in an earlier iteration of a loop
around it, writes memory or waits at a barrier: it then reads what it would have read in its place. Kernels with
an ``mma`` keep their order (their loads feed planned pipelines).
"""

from __future__ import annotations

from tilejit.language.ir import ops as O
from tilejit.language.ir.core import Block, Op

#: The ops a load may move above: element-wise arithmetic on registers, no memory, no barrier of their own.
ELEMENTWISE = (O.UnaryOp, O.BinaryOp, O.FmaOp, O.CompareOp, O.SelectOp, O.CastOp, O.ConstantOp)


def _writes(op: Op) -> bool:
    """Whether ``op``, or an op nested in it, writes memory or waits (stores, atomics, fences, barriers, prints)."""
    return op.has_side_effects or any(_writes(inner) for region in op.regions() for inner in region.ops)


def _reordered(ops: list[Op]) -> list[Op]:
    """``ops`` with each load moved up past the element-wise ops before it that define none of its operands."""
    out: list[Op] = []
    for op in ops:
        at = len(out)
        if isinstance(op, O.LoadOp):
            needs = set(op.operands())
            while at > 0 and isinstance(out[at - 1], ELEMENTWISE) and not needs & set(out[at - 1].results):
                at -= 1
        out.insert(at, op)
    return out


def emission_orders(fn: O.Function) -> dict[int, list[Op]]:
    """The blocks of ``fn`` whose ops the CUDA backend emits in another order than the IR's: id(block) → its ops
    in emission order."""
    if any(isinstance(op, O.MmaOp) for op in fn.body.walk()):
        return {}
    orders: dict[int, list[Op]] = {}

    def visit(block: Block, written: bool) -> None:
        """Reorder ``block`` up to its first op that may write (``written``: something before it may have)."""
        start = 0
        while start < len(block.ops) and not written:
            op = block.ops[start]
            for region in op.regions():  # a loop's body follows its own writes from the second iteration on
                visit(region, isinstance(op, O.ForOp | O.LoopOp) and _writes(op))
            written = _writes(op)
            start += 1
        prefix = _reordered(block.ops[:start])
        if prefix != block.ops[:start]:
            orders[id(block)] = prefix + block.ops[start:]

    visit(fn.body, False)
    return orders
