"""The Triton peers of ``bench_mma.py``: tutorial 03's grouped-order matmul (``_tileir_peers``'s kernel, which takes
strides, so transposed views work too) with a few fixed H100 configs, and tutorial 06's fused-attention forward.

Everything imports Triton when called, so this module imports nothing heavy and a missing Triton is the caller's
"n/a (why)".
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

#: Matmul configs tried per shape (the best one is reported): (BLOCK_M, N, K, GROUP_SIZE_M, stages, warps).
MATMUL_CONFIGS = ((128, 256, 64, 8, 3, 8), (128, 128, 64, 8, 4, 4))
#: Attention forward configs tried per shape: (BLOCK_M, BLOCK_N, stages, warps), from tutorial 06's H100 list.
ATTENTION_CONFIGS = ((128, 64, 3, 4), (128, 128, 3, 8))


def matmul_config_label(cfg: tuple[int, ...]) -> str:
    """``128x256x64 w8 s3`` for a matmul config."""
    bm, bn, bk, _, s, w = cfg
    return f"{bm}x{bn}x{bk} w{w} s{s}"


def triton_matmul(a: Any, b: Any, c: Any, cfg: tuple[int, ...]) -> Callable[[], Any]:
    """A no-argument function running tutorial 03's kernel ``c = a @ b`` (2-D torch tensors, any strides) at ``cfg``."""
    from _tileir_peers import triton_kernels

    k = _kernels(triton_kernels)
    m, kk = a.shape
    n = b.shape[1]
    strides = (a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    bm, bn, bk, g, s, w = cfg
    grid = (k.triton.cdiv(m, bm) * k.triton.cdiv(n, bn),)
    return lambda: k.matmul[grid](a, b, c, m, n, kk, *strides, BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk,
                                  GROUP_SIZE_M=g, num_stages=s, num_warps=w)


_CACHE: dict[str, SimpleNamespace] = {}


def _kernels(build: Callable[[], SimpleNamespace]) -> SimpleNamespace:
    """``build()`` once per process (Triton's JIT keeps compiled kernels on the function objects)."""
    key = build.__name__
    if key not in _CACHE:
        _CACHE[key] = build()
    return _CACHE[key]


def attention_kernels() -> SimpleNamespace:
    """Tutorial 06's forward (``attn_fwd``): one program per (query block, batch*head), online softmax with exp2;
    causal in two stages (blocks below the diagonal unmasked, the diagonal masked, above skipped). As the tutorial,
    N_CTX must be a multiple of the blocks (the launcher checks)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _inner(acc, l_i, m_i, q, k_base, v_base, start_m, qk_scale, N_CTX,  # type: ignore[no-untyped-def]
               BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, STAGE: tl.constexpr,
               offs_m, offs_n):
        if STAGE == 1:
            lo, hi = 0, start_m * BLOCK_M
        elif STAGE == 2:
            lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
            lo = tl.multiple_of(lo, BLOCK_M)
        else:
            lo, hi = 0, N_CTX
        offs_d = tl.arange(0, HEAD_DIM)
        for start_n in range(lo, hi, BLOCK_N):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            rows = (start_n + offs_n)[:, None] * HEAD_DIM + offs_d[None, :]
            k = tl.load(k_base + rows)
            qk = tl.dot(q, tl.trans(k))
            if STAGE == 2:
                mask = offs_m[:, None] >= (start_n + offs_n[None, :])
                qk = qk * qk_scale + tl.where(mask, 0, -1.0e6)
                m_ij = tl.maximum(m_i, tl.max(qk, 1))
                qk -= m_ij[:, None]
            else:
                m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
                qk = qk * qk_scale - m_ij[:, None]
            p = tl.math.exp2(qk)
            l_ij = tl.sum(p, 1)
            alpha = tl.math.exp2(m_i - m_ij)
            l_i = l_i * alpha + l_ij
            acc = acc * alpha[:, None]
            v = tl.load(v_base + rows)
            acc = tl.dot(p.to(v.dtype), v, acc)
            m_i = m_ij
        return acc, l_i, m_i

    @triton.jit
    def attn_fwd(Q, K, V, sm_scale, M, Out, N_CTX, HEAD_DIM: tl.constexpr,  # type: ignore[no-untyped-def]
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGE: tl.constexpr):
        start_m = tl.program_id(0)
        off_hz = tl.program_id(1)
        base = off_hz.to(tl.int64) * N_CTX * HEAD_DIM
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :])
        m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
        acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
        qk_scale = sm_scale * 1.44269504
        if STAGE & 1:
            acc, l_i, m_i = _inner(acc, l_i, m_i, q, K + base, V + base, start_m, qk_scale, N_CTX,
                                   BLOCK_M, HEAD_DIM, BLOCK_N, 4 - STAGE, offs_m, offs_n)
        if STAGE & 2:
            acc, l_i, m_i = _inner(acc, l_i, m_i, q, K + base, V + base, start_m, qk_scale, N_CTX,
                                   BLOCK_M, HEAD_DIM, BLOCK_N, 2, offs_m, offs_n)
        m_i += tl.math.log2(l_i)
        acc = acc / l_i[:, None]
        tl.store(M + off_hz * N_CTX + offs_m, m_i)
        tl.store(Out + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc.to(Out.type.element_ty))

    return SimpleNamespace(triton=triton, attn_fwd=attn_fwd)


def triton_attention_forward(q: Any, k: Any, v: Any, o: Any, m: Any, causal: bool, sm_scale: float,
                             cfg: tuple[int, int, int, int]) -> Callable[[], Any]:
    """A no-argument function running tutorial 06's forward on contiguous (Z, H, N_CTX, D) tensors into ``o`` and
    ``m`` (Z, H, N_CTX) float32; raises ValueError where N_CTX is not a multiple of the config's blocks."""
    kern = _kernels(attention_kernels)
    z, h, n, d = q.shape
    bm, bn, s, w = cfg
    if n % bm or n % bn:
        raise ValueError(f"N_CTX {n} is not a multiple of {bm} and {bn} (tutorial 06 does not mask)")
    grid = (n // bm, z * h)
    stage = 3 if causal else 1
    return lambda: kern.attn_fwd[grid](q, k, v, sm_scale, m, o, n, HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, STAGE=stage,
                                       num_stages=s, num_warps=w)
