"""Lowering rules for control flow: the end of the kernel."""

from __future__ import annotations

from tilejit.backends.tileir.lower.core import Lowerer, rule
from tilejit.language.ir import ops as O


@rule(O.ReturnOp)
def ret(lo: Lowerer, op: O.ReturnOp) -> None:
    """End of the kernel: ``return``."""
    lo.emit("return", [], [[]], op)
