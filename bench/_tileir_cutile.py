"""cuTile Python (``cuda.tile``) equivalents of tilejit's examples, for ``bench_tileir.py``; importing this module
imports ``cuda.tile`` (the caller reports a failure as "n/a").

No ``from __future__ import annotations`` here: cuTile reads the kernels' annotations (``ct.Constant[int]``) with
``typing.get_type_hints``, which needs them as objects.
"""

import io
from types import SimpleNamespace
from typing import Any

import cuda.tile as ct
from cuda.tile import compilation as cc


@ct.kernel
def vector_add(x, y, out, TILE: ct.Constant[int]):  # type: ignore[no-untyped-def]
    i = ct.bid(0)
    a = ct.load(x, index=(i,), shape=(TILE,))
    b = ct.load(y, index=(i,), shape=(TILE,))
    ct.store(out, index=(i,), tile=a + b)


@ct.kernel
def softmax(x, out, BLOCK: ct.Constant[int]):  # type: ignore[no-untyped-def]
    row = ct.bid(0)
    t = ct.load(x, index=(row, 0), shape=(1, BLOCK), padding_mode=ct.PaddingMode.NEG_INF).astype(ct.float32)
    e = ct.exp(t - ct.max(t, axis=1, keepdims=True))
    ct.store(out, index=(row, 0), tile=(e / ct.sum(e, axis=1, keepdims=True)).astype(out.dtype))


@ct.kernel
def layer_norm(x, weight, bias, out, eps: float, BLOCK: ct.Constant[int]):  # type: ignore[no-untyped-def]
    row = ct.bid(0)
    n = x.shape[1]
    t = ct.load(x, index=(row, 0), shape=(1, BLOCK), padding_mode=ct.PaddingMode.ZERO).astype(ct.float32)
    mean = ct.sum(t, axis=1, keepdims=True) / n
    inside = ct.arange(BLOCK, dtype=ct.int32) < n
    d = ct.where(inside, t - mean, 0.0)
    # a Python float argument may arrive as float64: keep the statistics in float32 as the other kernels do
    rstd = ct.rsqrt(ct.sum(d * d, axis=1, keepdims=True) / n + ct.astype(eps, ct.float32))
    w = ct.load(weight, index=(0,), shape=(BLOCK,), padding_mode=ct.PaddingMode.ZERO).astype(ct.float32)
    b = ct.load(bias, index=(0,), shape=(BLOCK,), padding_mode=ct.PaddingMode.ZERO).astype(ct.float32)
    ct.store(out, index=(row, 0), tile=(d * rstd * w + b).astype(out.dtype))


@ct.kernel
def matmul(a, b, c, BM: ct.Constant[int], BN: ct.Constant[int], BK: ct.Constant[int]):  # type: ignore[no-untyped-def]
    pid_m, pid_n = ct.bid(0), ct.bid(1)
    acc = ct.full((BM, BN), 0, dtype=ct.float32)
    for k in range(ct.num_tiles(a, axis=1, shape=(BM, BK))):
        ta = ct.load(a, index=(pid_m, k), shape=(BM, BK), padding_mode=ct.PaddingMode.ZERO)
        tb = ct.load(b, index=(k, pid_n), shape=(BK, BN), padding_mode=ct.PaddingMode.ZERO)
        acc = ct.mma(ta, tb, acc)
    ct.store(c, index=(pid_m, pid_n), tile=acc.astype(c.dtype))


@ct.kernel
def matmul_grouped(a, b, c, BM: ct.Constant[int], BN: ct.Constant[int], BK: ct.Constant[int],  # type: ignore[no-untyped-def]
                   GROUP: ct.Constant[int]):
    pid = ct.bid(0)
    tiles_m, tiles_n = ct.cdiv(a.shape[0], BM), ct.cdiv(b.shape[1], BN)
    in_group = GROUP * tiles_n
    first_m = (pid // in_group) * GROUP
    group_m = min(tiles_m - first_m, GROUP)
    pid_m = first_m + (pid % in_group) % group_m
    pid_n = (pid % in_group) // group_m
    acc = ct.full((BM, BN), 0, dtype=ct.float32)
    for k in range(ct.num_tiles(a, axis=1, shape=(BM, BK))):
        ta = ct.load(a, index=(pid_m, k), shape=(BM, BK), padding_mode=ct.PaddingMode.ZERO)
        tb = ct.load(b, index=(k, pid_n), shape=(BK, BN), padding_mode=ct.PaddingMode.ZERO)
        acc = ct.mma(ta, tb, acc)
    ct.store(c, index=(pid_m, pid_n), tile=acc.astype(c.dtype))


KERNELS = SimpleNamespace(vector_add=vector_add, softmax=softmax, layer_norm=layer_norm, matmul=matmul,
                          matmul_grouped=matmul_grouped)


def _array(dtype: Any, ndim: int) -> Any:
    """A contiguous array parameter of rank ``ndim`` (unit last stride, 16-byte aligned base), as torch gives."""
    return cc.ArrayConstraint(dtype, ndim, index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=(),
                              may_alias_internally=False, stride_constant=(None,) * (ndim - 1) + (1,),
                              base_addr_divisible_by=16)


def export(which: str, dtype: str, consts: tuple[int, ...], gpu: str | None,
           output_format: str = "tileir_bytecode") -> bytes:
    """Compile the kernel ``which`` with no GPU (``cuda.tile.compilation.export_kernel``) for arrays of ``dtype``
    ("float32", "bfloat16") and the constants ``consts``: Tile IR bytecode, or a CUBIN for ``gpu`` (tileiras)."""
    dt = getattr(ct, dtype)
    params: dict[str, tuple[Any, ...]] = {
        "vector_add": (_array(dt, 1), _array(dt, 1), _array(dt, 1)),
        "softmax": (_array(dt, 2), _array(dt, 2)),
        "layer_norm": (_array(dt, 2), _array(dt, 1), _array(dt, 1), _array(dt, 2), cc.ScalarConstraint(ct.float32)),
        "matmul": (_array(dt, 2), _array(dt, 2), _array(dt, 2)),
        "matmul_grouped": (_array(dt, 2), _array(dt, 2), _array(dt, 2)),
    }
    sig = cc.KernelSignature([*params[which], *consts], cc.CallingConvention.cutile_python_v1())
    buf = io.BytesIO()
    cc.export_kernel(getattr(KERNELS, which), [sig.with_mangled_symbol(which)], buf, gpu_code=gpu,
                     output_format=output_format)  # type: ignore[arg-type]
    return buf.getvalue()
