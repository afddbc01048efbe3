"""Values that must not depend on which thread holds which element, on a GPU against numpy: a size-1
``arange`` broadcast (it read each lane's index of the broadcast shape: 0, 1, 2, ... instead of 0), chains
of broadcasts, reshapes and expand_dims of it, real aranges along either axis, and loop-carried values
replaced in one step by a broadcast of another carried value. Sizes are not tile multiples and every
output is poisoned before the launch, so unwritten and wrongly written elements both show."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_arrays import dev, poisoned

import tilejit as tj

pytestmark = pytest.mark.gpu


@tj.kernel
def add_arange_one(x, out, N: tj.Constant[int]):
    b = tj.bid(0)
    t = tj.load(x, index=(b,), shape=(N,))
    tj.store(out, index=(b,), tile=t + tj.broadcast_to(tj.arange(1, tj.int32), (N,)))


@pytest.mark.parametrize("n", [13, 29, 64])
def test_a_broadcast_arange_of_one_element_is_zero_in_every_lane(n: int, rng: np.random.Generator) -> None:
    x = rng.integers(-1000, 1000, n).astype(np.int32)
    out = poisoned(n, np.int32)
    add_arange_one[tj.cdiv(n, 16)](dev(x), out, N=16)
    np.testing.assert_array_equal(out.numpy(), x)


@tj.kernel
def add_axis_aranges(x, out, R: tj.Constant[int], C: tj.Constant[int]):
    b = tj.bid(0)
    t = tj.load(x, index=(b, 0), shape=(R, C))
    tj.store(out, index=(b, 0), tile=t + tj.arange(C)[None, :] * 10 + tj.arange(R)[:, None] * 1000)


@pytest.mark.parametrize(("rows", "cols", "tile_c"), [(37, 1, 1), (37, 5, 8), (5, 3, 4), (16, 16, 16)])
def test_aranges_along_either_axis_combined_with_a_2d_tile(rows: int, cols: int, tile_c: int,
                                                           rng: np.random.Generator) -> None:
    """``arange(C)[None, :]`` with C == 1 gave each row of the (R, 1) tile its row number."""
    x = rng.integers(-100, 100, (rows, cols)).astype(np.int32)
    out = poisoned((rows, cols), np.int32)
    tile_r = 16
    add_axis_aranges[tj.cdiv(rows, tile_r)](dev(x), out, R=tile_r, C=tile_c)
    want = x + np.arange(cols)[None, :] * 10 + (np.arange(rows) % tile_r)[:, None] * 1000
    np.testing.assert_array_equal(out.numpy(), want)


@tj.kernel
def arange_one_chains(out_i, out_l, out_f, R: tj.Constant[int], C: tj.Constant[int]):
    a = tj.broadcast_to(tj.broadcast_to(tj.arange(1, tj.int32), (1,)).reshape((1, 1)), (R, C))
    g = tj.broadcast_to(tj.arange(1, tj.int64)[:, None], (R, C))
    f = tj.expand_dims(tj.arange(1, tj.float32), 1) + tj.zeros((R, C), tj.float32)
    full = tj.broadcast_to(tj.full((1, C), 3, tj.int32), (R, C))
    tj.store(out_i, index=(0, 0), tile=a + full * 2 + 7)
    tj.store(out_l, index=(0, 0), tile=g - 5)
    tj.store(out_f, index=(0, 0), tile=f + 0.5)


def test_chains_of_broadcasts_reshapes_and_expand_dims_of_a_one_element_arange() -> None:
    shape = (13, 3)
    outs = [poisoned(shape, np.int32), poisoned(shape, np.int64), poisoned(shape, np.float32)]
    arange_one_chains[1](*outs, R=16, C=4)
    np.testing.assert_array_equal(outs[0].numpy(), np.full(shape, 13, np.int32))
    np.testing.assert_array_equal(outs[1].numpy(), np.full(shape, -5, np.int64))
    np.testing.assert_array_equal(outs[2].numpy(), np.full(shape, 0.5, np.float32))


@tj.kernel
def carried_swap(out_b, out_c, n):
    a = tj.zeros((1,), tj.float32)
    s = 0.0
    b = tj.zeros((16,), tj.float32)
    c = tj.zeros((16,), tj.float32)
    for _ in range(n):
        a, b, s, c = a + 1.0, tj.broadcast_to(a, (16,)), s + 1.0, tj.broadcast_to(s, (16,))
    tj.store(out_b, index=(0,), tile=b)
    tj.store(out_c, index=(0,), tile=c)


@pytest.mark.parametrize("n", [0, 1, 5])
def test_loop_carried_values_replaced_together_read_their_old_values(n: int) -> None:
    """``a, b = a + 1, broadcast(a)``: ``b`` is the ``a`` of the previous iteration, as in Python."""
    out_b, out_c = poisoned(13, np.float32), poisoned(13, np.float32)
    carried_swap[1](out_b, out_c, n)
    want = np.full(13, max(n - 1, 0), np.float32)
    np.testing.assert_array_equal(out_b.numpy(), want)
    np.testing.assert_array_equal(out_c.numpy(), want)
