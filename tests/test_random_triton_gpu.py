"""``tj.randint`` / ``tj.rand`` / ``tj.randn`` against Triton's ``tl.randint`` / ``tl.rand`` / ``tl.randn`` on the same
GPU, for the same seeds and offsets (32- and 64-bit offsets, small and 64-bit seeds): the README promises the same
bits, so that a Triton kernel's tests port unchanged. Skips where torch or Triton is missing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _kernels import poison

import tilejit as tj

pytestmark = [pytest.mark.gpu, pytest.mark.cuda_only]  # Triton's side; tilejit's backends: test_random's GPU tests


@tj.kernel
def tj_random(offs, bits, u, g, seed, TILE: tj.Constant[int]):
    i = tj.bid(0)
    off = tj.load(offs, index=(i,), shape=(TILE,))
    tj.store(bits, index=(i,), tile=tj.randint(seed, off))
    tj.store(u, index=(i,), tile=tj.rand(seed, off))
    tj.store(g, index=(i,), tile=tj.randn(seed, off))


def triton_random() -> Any:
    """Triton's kernel writing ``tl.randint``, ``tl.rand`` and ``tl.randn`` of each offset."""
    triton = pytest.importorskip("triton")
    tl = pytest.importorskip("triton.language")

    @triton.jit
    def tri_random(offs_ptr, bits_ptr, u_ptr, g_ptr, seed, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        off = tl.load(offs_ptr + i, mask=m, other=0)
        tl.store(bits_ptr + i, tl.randint(seed, off), mask=m)
        tl.store(u_ptr + i, tl.rand(seed, off), mask=m)
        tl.store(g_ptr + i, tl.randn(seed, off), mask=m)

    return tri_random


@pytest.mark.parametrize("seed", [0, 1234, 2**40 + 7])
@pytest.mark.parametrize("width", [32, 64])
def test_the_same_bits_as_triton(seed: int, width: int) -> None:
    torch = pytest.importorskip("torch")
    tri_random = triton_random()
    n = 5000  # not a multiple of the tile
    rng = np.random.default_rng()
    itype = np.int32 if width == 32 else np.int64
    offs = rng.integers(0, np.iinfo(itype).max, n, dtype=itype)
    offs[:3] = (0, 1, np.iinfo(itype).max)
    bits_t = torch.zeros(n, dtype=torch.int32 if width == 32 else torch.int64, device="cuda")
    u_t, g_t = torch.zeros(n, device="cuda"), torch.zeros(n, device="cuda")
    tri_random[(-(-n // 1024),)](torch.from_numpy(offs).cuda(), bits_t, u_t, g_t, seed, n, BLOCK=1024)
    utype = np.uint32 if width == 32 else np.uint64
    bits = tj.asarray(poison((n,), f"uint{width}"))
    u, g = tj.asarray(poison((n,), "float32")), tj.asarray(poison((n,), "float32"))
    tj_random[tj.cdiv(n, 1024)](tj.asarray(offs), bits, u, g, seed, TILE=1024)
    np.testing.assert_array_equal(bits.numpy(), bits_t.cpu().numpy().view(utype), err_msg="randint")
    np.testing.assert_array_equal(u.numpy(), u_t.cpu().numpy(), err_msg="rand")
    np.testing.assert_allclose(g.numpy(), g_t.cpu().numpy(), rtol=2e-6, atol=2e-6, err_msg="randn")
