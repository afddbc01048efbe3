"""The CUDA backend's emission order (backends/cuda/schedule.py): a block's tile loads are issued before the
arithmetic on the first one, unless something before them writes memory. CPU tests read the generated source;
the GPU test checks results where a load moves."""

from __future__ import annotations

import re

import numpy as np
import pytest
from _kernels import poison

import tilejit as tj


@tj.kernel
def two_loads(x, y, out, BLOCK: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(BLOCK,)).astype(tj.float32) * 2.0
    b = tj.load(y, index=(i,), shape=(BLOCK,)).astype(tj.float32)
    tj.store(out, index=(i,), tile=(a + b).astype(out.dtype))


@tj.kernel
def store_then_load(x, out, BLOCK: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(BLOCK,)).astype(tj.float32) * 2.0
    tj.store(out, index=(i,), tile=a.astype(out.dtype))
    b = tj.load(out, index=(i,), shape=(BLOCK,)).astype(tj.float32) + 1.0
    tj.store(x, index=(i,), tile=b.astype(x.dtype))


@tj.kernel
def loop_with_store(x, out, BLOCK: tj.Constant[int]):
    i = tj.bid(0)
    for c in range(tj.num_tiles(x, 0, (BLOCK,))):
        a = tj.load(x, index=(c,), shape=(BLOCK,)).astype(tj.float32) * 2.0
        b = tj.load(out, index=(c,), shape=(BLOCK,)).astype(tj.float32)
        tj.store(out, index=(c,), tile=(a + b + i).astype(out.dtype))


def body(kernel: object, n: int = 3) -> list[str]:
    """The kernel body's loads (``load x``), stores and runs of element-wise statements (``math``), in emitted
    order."""
    src = tj.compile(kernel, ("float16[::1]",) * n, constants={"BLOCK": 1024}, target="sm_90",
                     backend="cuda").cuda_source()
    out: list[str] = []
    for line in src.splitlines():
        if m := re.search(r"tj::load<.*?\(\w+, u_(\w+),", line):
            out.append(f"load {m.group(1)}")
        elif "tj::store<" in line:
            out.append("store")
        elif ("TJ_EACH" in line or "TJ_PAIRS" in line) and out[-1:] != ["math"]:
            out.append("math")
    return out


def test_loads_are_issued_before_the_arithmetic_on_the_first() -> None:
    assert body(two_loads) == ["load x", "load y", "math", "store"]


def test_a_load_after_a_store_stays_after_the_arithmetic_before_it() -> None:
    assert body(store_then_load, 2) == ["load x", "math", "store", "load out", "math", "store"]


def test_loads_in_a_loop_that_stores_keep_their_order() -> None:
    assert body(loop_with_store, 2) == ["load x", "math", "load out", "math", "store"]


@pytest.mark.gpu
@pytest.mark.cuda_only
def test_moved_loads_compute_what_the_ir_says() -> None:
    rng = np.random.default_rng()
    n = 3000  # not a multiple of the tile: the last block's loads take the masked path
    x, y = (rng.standard_normal(n).astype(np.float16) for _ in range(2))
    out = tj.asarray(poison((n,), "float16"))
    two_loads[tj.cdiv(n, 1024)](tj.asarray(x), tj.asarray(y), out, BLOCK=1024)
    want = (x.astype(np.float32) * 2 + y.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(out.numpy(), want)
