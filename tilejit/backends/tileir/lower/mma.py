"""Lowering rules for matrix multiply-accumulate (``mma``, ``@``): ``mmaf`` for float inputs (f16, bf16, f32,
f64; f32 inputs with ``tf32`` allowed are rounded to tf32 first, as the CUDA backend's tensor-core path does),
``mmai`` for 8-bit integer inputs with an i32 accumulator (the signedness of the inputs on the op)."""

from __future__ import annotations

from tilejit.backends.tileir.lower.core import Lowerer, rule, unsupported
from tilejit.backends.tileir.lower.reduce import fold
from tilejit.backends.tileir.module import Scalar, Tile, TValue, constant_bytes
from tilejit.language.ir import ops as O
from tilejit.language.ir.types import TileType

#: Input dtype -> the accumulator dtype Tile IR's mmaf/mmai takes with it (the front end's and the CUDA
#: backend's pairs; mmaf also has f16 and f8 accumulators, which tilejit does not use).
ACCUMULATORS: dict[str, str] = {
    "float16": "float32", "bfloat16": "float32", "float32": "float32", "float64": "float64",
    "int8": "int32", "uint8": "int32", "float8_e4m3fn": "float32", "float8_e5m2": "float32",
}

#: The largest K for which a sum of K products of 8-bit inputs fits int32 (|int8 products| <= 2**14,
#: uint8 products <= 255**2), so the saturating mmai computes it exactly.
MAX_INT_K: dict[str, int] = {"int8": (2**31 - 1) // 2**14, "uint8": (2**31 - 1) // 255**2}


@rule(O.MmaOp)
def mma(lo: Lowerer, op: O.MmaOp) -> None:
    """``a @ b + acc``: ``mmaf`` (tf32: operands rounded with ``ftof`` first) or ``mmai`` (signed or not)."""
    at, ct = op.a.type, op.acc.type
    assert isinstance(at, TileType) and isinstance(ct, TileType)
    a, b, acc = lo.value(op.a), lo.value(op.b), lo.value(op.acc)
    if at.ndim == 2 and at.dtype.is_int and ct.dtype.is_int and ACCUMULATORS.get(at.dtype.name) != ct.dtype.name:
        products_mma(lo, op, a, b, acc)
        return
    if at.ndim != 2 or ACCUMULATORS.get(at.dtype.name) != ct.dtype.name:
        raise unsupported(op, f"{at.dtype.name} inputs with a {ct.dtype.name} accumulator")
    if at.dtype.is_int:
        int_mma(lo, op, a, b, acc)
        return
    if op.tf32 and at.dtype.name == "float32":
        a, b = (to_tf32(lo, x, op) for x in (a, b))
    lo.emit("mmaf", [lo.result(op)], [a, b, acc], op, fast_acc=0)


#: The largest M*K*N of an integer mma Tile IR's mmai cannot take (built from a tile of every product).
MAX_PRODUCTS = 2**16


def products_mma(lo: Lowerer, op: O.MmaOp, a: TValue, b: TValue, acc: TValue) -> None:
    """Integer ``a @ b + acc`` with inputs or accumulator mmai does not take (int16 @ int16 + int64 ...): every
    product ``a[m, k] * b[k, n]`` in the accumulator's type, summed over k, all wrapping, so exactly what the
    CUDA backend computes in any order. It holds M*K*N elements, so only small tiles (``MAX_PRODUCTS``)."""
    at, ct = op.a.type, op.acc.type
    assert isinstance(at, TileType) and isinstance(ct, TileType)
    (m, k), n = at.shape, ct.shape[1]
    if m * k * n > MAX_PRODUCTS:
        raise unsupported(op, f"{at.dtype.name} inputs with a {ct.dtype.name} accumulator on a {m}x{k}x{n} tile; "
                              f"Tile IR's mmai takes 8-bit inputs into int32, other integer products need "
                              f"M*K*N <= {MAX_PRODUCTS}")
    assert isinstance(acc.type, Tile) and isinstance(acc.type.elem, Scalar)
    elem = acc.type.elem
    sign = "signed" if at.dtype.is_signed else "unsigned"

    def spread(x: TValue, as_3d: tuple[int, int, int]) -> TValue:
        """``x`` in the accumulator's type, reshaped to ``as_3d`` and broadcast to (M, K, N)."""
        assert isinstance(x.type, Tile) and isinstance(x.type.elem, Scalar)
        if x.type.elem != elem:
            wide = TValue(Tile(elem, x.type.shape))
            if at.dtype.bits < ct.dtype.bits:
                lo.emit("exti", [wide], [x], op, signedness=sign)
            else:
                lo.emit("trunci", [wide], [x], op, overflow="none")
            x = wide
        shaped, full = TValue(Tile(elem, as_3d)), TValue(Tile(elem, (m, k, n)))
        lo.emit("reshape", [shaped], [x], op)
        lo.emit("broadcast", [full], [shaped], op)
        return full

    products = TValue(Tile(elem, (m, k, n)))
    lo.emit("muli", [products], [spread(a, (m, k, 1)), spread(b, (1, k, n))], op, overflow="none")
    summed = TValue(acc.type)
    fold(lo, op, "reduce", products, summed, dim=1, combine="addi", identity=0, dtype=ct.dtype)
    lo.emit("addi", [lo.result(op)], [summed, acc], op, overflow="none")


def int_mma(lo: Lowerer, op: O.MmaOp, a: TValue, b: TValue, acc: TValue) -> None:
    """8-bit ``a @ b + acc`` wrapping in int32 like the CUDA backend. tileiras's ``mmai`` saturates (PTX
    ``.satfinite``), so the products are summed from zero (exact for K <= MAX_INT_K) and added to ``acc``
    as ``(acc ^ p) + 2 * (acc & p)``: a plain ``addi`` is folded back into the saturating mma by tileiras."""
    at = op.a.type
    assert isinstance(at, TileType)
    k, limit = at.shape[1], MAX_INT_K[at.dtype.name]
    if k > limit:
        raise unsupported(op, f"{at.dtype.name} inputs with K = {k}: Tile IR's mmai saturates where tilejit wraps, "
                              f"exact only for K <= {limit}")
    sign = "signed" if at.dtype.is_signed else "unsigned"
    zero, p, x, n, twice = (TValue(acc.type) for _ in range(5))
    lo.emit("constant", [zero], [], op, data=constant_bytes(0, Scalar("i32")), value=0)
    lo.emit("mmai", [p], [a, b, zero], op, signedness=sign)
    lo.emit("xori", [x], [acc, p], op)
    lo.emit("andi", [n], [acc, p], op)
    lo.emit("addi", [twice], [n, n], op, overflow="none")
    lo.emit("addi", [lo.result(op)], [x, twice], op, overflow="none")


def to_tf32(lo: Lowerer, x: TValue, op: O.MmaOp) -> TValue:
    """``x`` (an f32 tile) rounded to tf32 (to nearest, ties to even) for a tensor-core ``mmaf``."""
    assert isinstance(x.type, Tile)
    r = TValue(Tile(Scalar("tf32"), x.type.shape))
    lo.emit("ftof", [r], [x], op, rounding="nearest_even")
    return r
