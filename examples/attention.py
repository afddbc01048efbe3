"""Flash attention, forward and backward, in the structure of Triton's fused-attention tutorial (06): online softmax
with exp2 and a running max and sum, causal or not, f16 or bf16 in (--dtype), f32 accumulate on tensor cores.

Arrays are (Z*H, N_CTX, HEAD_DIM) (a (Z, H, N_CTX, HEAD_DIM) tensor viewed as 3-D); N_CTX need not be a multiple of
the blocks: loads past the end read padding and keys past N_CTX are masked with -inf. The forward saves the
logsumexp M (base 2, of the scaled scores) for the backward: a preprocess kernel (delta = rowsum(o * do)), dK/dV per
key block looping over query blocks, dQ per query block looping over key blocks (no atomics: FlashAttention-2's dQ
atomics add float32 partials from every key block, which the dQ kernel's recomputed scores cost less than). Only the
blocks across the causal diagonal (or the sequence's end) are masked.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from _common import check, compile_only, parse_args, should_run

import tilejit as tj

DTYPES = {"float16": tj.float16, "bfloat16": tj.bfloat16}
LOG2E = 1.4426950408889634
#: Forward blocks: BLOCK_M queries per block, BLOCK_N keys per step (the tutorial's 128 x 64 on H100 for D=64).
FWD = {"BLOCK_M": 128, "BLOCK_N": 64}
#: dK/dV: BLOCK_N keys per block, BLOCK_M queries per step; dQ: BLOCK_M queries per block, BLOCK_N keys per step
#: (the tutorial's BLOCK_M1=32, BLOCK_N1=128, BLOCK_M2=128, BLOCK_N2=32).
DKDV = {"BLOCK_M": 32, "BLOCK_N": 128}
#: dK/dV at head dim 128: 16 queries per step. On the CUDA backend dK and dV take 128 registers a thread there; 32
#: queries compile to 254-255 registers, spilling 0-24 B by target and mask; 16 to 239-243 with no spills.
DKDV_D128 = {"BLOCK_M": 16, "BLOCK_N": 128}
DQ = {"BLOCK_M": 128, "BLOCK_N": 32}
PRE = {"BLOCK_M": 128}


@tj.function
def _fwd_inner(acc, l_i, m_i, qt, k, v, bh, lo, hi, offs_m, n_ctx, qk_scale,
               BLOCK_N, HEAD_DIM, MASK_DIAGONAL, MASK_END):
    """Online softmax over key blocks ``lo..hi``: the scores' running max ``m_i`` and sum ``l_i`` (both (BM, 1),
    base 2), the accumulator rescaled before each P @ V. ``MASK_DIAGONAL``: keys after the query masked;
    ``MASK_END``: keys at or past ``n_ctx`` masked."""
    for j in range(lo, hi):
        kt = tj.load(k, index=(bh, j, 0), shape=(1, BLOCK_N, HEAD_DIM)).reshape((BLOCK_N, HEAD_DIM))
        vt = tj.load(v, index=(bh, j, 0), shape=(1, BLOCK_N, HEAD_DIM)).reshape((BLOCK_N, HEAD_DIM))
        qk = tj.mma(qt, kt.T, tj.zeros((qt.shape[0], BLOCK_N), tj.float32)) * qk_scale
        offs_n = tj.expand_dims(j * BLOCK_N + tj.arange(BLOCK_N), 0)
        if MASK_DIAGONAL:
            qk = tj.where(offs_n <= offs_m, qk, float("-inf"))
        if MASK_END:
            qk = tj.where(offs_n < n_ctx, qk, float("-inf"))
        m_ij = tj.maximum(m_i, tj.max(qk, axis=1, keepdims=True))
        p = tj.exp2(qk - m_ij)
        alpha = tj.exp2(m_i - m_ij)
        l_i = l_i * alpha + tj.sum(p, axis=1, keepdims=True)
        acc = acc * alpha
        acc = tj.mma(p.astype(v.dtype), vt, acc)
        m_i = m_ij
    return acc, l_i, m_i


@tj.kernel
def attn_fwd(q, k, v, o, m_out, sm_scale, BLOCK_M: tj.Constant[int], BLOCK_N: tj.Constant[int],
             HEAD_DIM: tj.Constant[int], CAUSAL: tj.Constant[bool]):
    start_m, bh = tj.bid(0), tj.bid(1)
    n_ctx = q.shape[1]
    qk_scale = sm_scale * 1.4426950408889634
    offs_m = tj.expand_dims(start_m * BLOCK_M + tj.arange(BLOCK_M), 1)
    qt = tj.load(q, index=(bh, start_m, 0), shape=(1, BLOCK_M, HEAD_DIM)).reshape((BLOCK_M, HEAD_DIM))
    m_i = tj.full((BLOCK_M, 1), float("-inf"), tj.float32)
    l_i = tj.full((BLOCK_M, 1), 1.0, tj.float32)
    acc = tj.zeros((BLOCK_M, HEAD_DIM), tj.float32)
    if CAUSAL:
        # Blocks wholly below the diagonal need no mask (all their keys < start_m * BLOCK_M < n_ctx); the diagonal
        # blocks are masked; blocks above it are skipped.
        diag = start_m * (BLOCK_M // BLOCK_N)
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, qt, k, v, bh, 0, diag, offs_m, n_ctx, qk_scale,
                                   BLOCK_N, HEAD_DIM, False, False)
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, qt, k, v, bh, diag, diag + BLOCK_M // BLOCK_N, offs_m, n_ctx,
                                   qk_scale, BLOCK_N, HEAD_DIM, True, False)
    else:
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, qt, k, v, bh, 0, tj.cdiv(n_ctx, BLOCK_N), offs_m, n_ctx,
                                   qk_scale, BLOCK_N, HEAD_DIM, False, True)
    m_row = m_i + tj.log2(l_i)
    tj.store(m_out, index=(bh, start_m), tile=m_row.reshape((1, BLOCK_M)))
    out = acc / l_i
    tj.store(o, index=(bh, start_m, 0), tile=out.reshape((1, BLOCK_M, HEAD_DIM)).astype(o.dtype))


@tj.kernel
def attn_bwd_preprocess(o, do, delta, BLOCK_M: tj.Constant[int], HEAD_DIM: tj.Constant[int]):
    start_m, bh = tj.bid(0), tj.bid(1)
    ot = tj.load(o, index=(bh, start_m, 0), shape=(1, BLOCK_M, HEAD_DIM)).reshape((BLOCK_M, HEAD_DIM))
    dot = tj.load(do, index=(bh, start_m, 0), shape=(1, BLOCK_M, HEAD_DIM)).reshape((BLOCK_M, HEAD_DIM))
    d = tj.sum(ot.astype(tj.float32) * dot.astype(tj.float32), axis=1)
    tj.store(delta, index=(bh, start_m), tile=d.reshape((1, BLOCK_M)))


@tj.function
def _dkdv_inner(dk_acc, dv_acc, kt, vt, q, do, m_in, delta, bh, lo, hi, offs_n, qk_scale, BLOCK_M, HEAD_DIM,
                MASK_DIAGONAL):
    """dK and dV of one key block over query blocks ``lo..hi``; ``MASK_DIAGONAL``: queries before the key masked."""
    for i in range(lo, hi):
        qt = tj.load(q, index=(bh, i, 0), shape=(1, BLOCK_M, HEAD_DIM)).reshape((BLOCK_M, HEAD_DIM))
        dot = tj.load(do, index=(bh, i, 0), shape=(1, BLOCK_M, HEAD_DIM)).reshape((BLOCK_M, HEAD_DIM))
        # both score-sized products first, then P^T and dS^T in 16 bits: the f32 scores are dead by the two
        # accumulating mmas, which leaves dK and dV their registers at d128
        qk_t = tj.mma(kt, qt.T, tj.zeros((kt.shape[0], BLOCK_M), tj.float32))
        dp_t = tj.mma(vt, dot.T, tj.zeros((kt.shape[0], BLOCK_M), tj.float32))
        # Queries past n_ctx read M = +inf, so their P^T column is exp2(-inf) = 0.
        m_row = tj.load(m_in, index=(bh, i), shape=(1, BLOCK_M), padding=float("inf"))
        d_row = tj.load(delta, index=(bh, i), shape=(1, BLOCK_M))
        p_t = tj.exp2(qk_t * qk_scale - m_row)
        if MASK_DIAGONAL:  # query i * BLOCK_M + m sees key n when m >= n - i * BLOCK_M (no 64-bit tile)
            p_t = tj.where(tj.expand_dims(tj.arange(BLOCK_M), 0) >= offs_n - i * BLOCK_M, p_t, 0.0)
        ds_t = (p_t * (dp_t - d_row)).astype(q.dtype)
        dv_acc = tj.mma(p_t.astype(do.dtype), dot, dv_acc)
        dk_acc = tj.mma(ds_t, qt, dk_acc)
    return dk_acc, dv_acc


@tj.kernel
def attn_bwd_dkdv(q, k, v, do, m_in, delta, dk, dv, sm_scale, BLOCK_M: tj.Constant[int],
                  BLOCK_N: tj.Constant[int], HEAD_DIM: tj.Constant[int], CAUSAL: tj.Constant[bool]):
    start_n, bh = tj.bid(0), tj.bid(1)
    n_ctx = q.shape[1]
    qk_scale = sm_scale * 1.4426950408889634
    kt = tj.load(k, index=(bh, start_n, 0), shape=(1, BLOCK_N, HEAD_DIM)).reshape((BLOCK_N, HEAD_DIM))
    vt = tj.load(v, index=(bh, start_n, 0), shape=(1, BLOCK_N, HEAD_DIM)).reshape((BLOCK_N, HEAD_DIM))
    offs_n = tj.expand_dims(start_n * BLOCK_N + tj.arange(BLOCK_N), 1)
    dk_acc = tj.zeros((BLOCK_N, HEAD_DIM), tj.float32)
    dv_acc = tj.zeros((BLOCK_N, HEAD_DIM), tj.float32)
    m_blocks = tj.cdiv(n_ctx, BLOCK_M)
    if CAUSAL:
        # query blocks before the key block see none of its keys; those across its diagonal are masked; the
        # rest see all of its keys
        lo = start_n * (BLOCK_N // BLOCK_M)
        mid = tj.minimum(lo + BLOCK_N // BLOCK_M, m_blocks)
        dk_acc, dv_acc = _dkdv_inner(dk_acc, dv_acc, kt, vt, q, do, m_in, delta, bh, lo, mid, offs_n, qk_scale,
                                     BLOCK_M, HEAD_DIM, True)
        dk_acc, dv_acc = _dkdv_inner(dk_acc, dv_acc, kt, vt, q, do, m_in, delta, bh, mid, m_blocks, offs_n,
                                     qk_scale, BLOCK_M, HEAD_DIM, False)
    else:
        dk_acc, dv_acc = _dkdv_inner(dk_acc, dv_acc, kt, vt, q, do, m_in, delta, bh, 0, m_blocks, offs_n, qk_scale,
                                     BLOCK_M, HEAD_DIM, False)
    dk_acc = dk_acc * sm_scale
    tj.store(dk, index=(bh, start_n, 0), tile=dk_acc.reshape((1, BLOCK_N, HEAD_DIM)).astype(dk.dtype))
    tj.store(dv, index=(bh, start_n, 0), tile=dv_acc.reshape((1, BLOCK_N, HEAD_DIM)).astype(dv.dtype))


@tj.function
def _dq_inner(dq_acc, qt, dot, m_col, d_col, k, v, bh, lo, hi, offs_m, n_ctx, qk_scale, BLOCK_N, HEAD_DIM,
              MASK_DIAGONAL, MASK_END):
    """dQ of one query block over key blocks ``lo..hi``; ``MASK_DIAGONAL``: keys after the query masked;
    ``MASK_END``: keys at or past ``n_ctx`` masked (padded keys read 0, whose score is not -inf)."""
    for j in range(lo, hi):
        kt = tj.load(k, index=(bh, j, 0), shape=(1, BLOCK_N, HEAD_DIM)).reshape((BLOCK_N, HEAD_DIM))
        vt = tj.load(v, index=(bh, j, 0), shape=(1, BLOCK_N, HEAD_DIM)).reshape((BLOCK_N, HEAD_DIM))
        qk = tj.mma(qt, kt.T, tj.zeros((qt.shape[0], BLOCK_N), tj.float32))
        dp = tj.mma(dot, vt.T, tj.zeros((qt.shape[0], BLOCK_N), tj.float32))
        p = tj.exp2(qk * qk_scale - m_col)
        offs_n = tj.expand_dims(tj.arange(BLOCK_N), 0)  # key j * BLOCK_N + n, compared as n
        if MASK_DIAGONAL:
            p = tj.where(offs_n <= offs_m - j * BLOCK_N, p, 0.0)
        if MASK_END:
            p = tj.where(offs_n < n_ctx - j * BLOCK_N, p, 0.0)
        ds = (p * (dp - d_col)).astype(k.dtype)
        dq_acc = tj.mma(ds, kt, dq_acc)
    return dq_acc


@tj.kernel
def attn_bwd_dq(q, k, v, do, m_in, delta, dq, sm_scale, BLOCK_M: tj.Constant[int], BLOCK_N: tj.Constant[int],
                HEAD_DIM: tj.Constant[int], CAUSAL: tj.Constant[bool]):
    start_m, bh = tj.bid(0), tj.bid(1)
    n_ctx = q.shape[1]
    qk_scale = sm_scale * 1.4426950408889634
    qt = tj.load(q, index=(bh, start_m, 0), shape=(1, BLOCK_M, HEAD_DIM)).reshape((BLOCK_M, HEAD_DIM))
    dot = tj.load(do, index=(bh, start_m, 0), shape=(1, BLOCK_M, HEAD_DIM)).reshape((BLOCK_M, HEAD_DIM))
    m_col = tj.load(m_in, index=(bh, start_m), shape=(1, BLOCK_M), padding=float("inf")).reshape((BLOCK_M, 1))
    d_col = tj.load(delta, index=(bh, start_m), shape=(1, BLOCK_M)).reshape((BLOCK_M, 1))
    offs_m = tj.expand_dims(start_m * BLOCK_M + tj.arange(BLOCK_M), 1)
    dq_acc = tj.zeros((BLOCK_M, HEAD_DIM), tj.float32)
    if CAUSAL:
        # key blocks wholly before the query block need no mask (their keys are < n_ctx); those across its
        # diagonal are masked; those after it are skipped
        diag = start_m * (BLOCK_M // BLOCK_N)
        end = tj.minimum(diag + BLOCK_M // BLOCK_N, tj.cdiv(n_ctx, BLOCK_N))
        dq_acc = _dq_inner(dq_acc, qt, dot, m_col, d_col, k, v, bh, 0, diag, offs_m, n_ctx, qk_scale, BLOCK_N,
                           HEAD_DIM, False, False)
        dq_acc = _dq_inner(dq_acc, qt, dot, m_col, d_col, k, v, bh, diag, end, offs_m, n_ctx, qk_scale, BLOCK_N,
                           HEAD_DIM, True, False)
    else:
        # whole key blocks, then the last one's keys past n_ctx masked (if n_ctx is not a multiple of BLOCK_N)
        full = n_ctx // BLOCK_N
        dq_acc = _dq_inner(dq_acc, qt, dot, m_col, d_col, k, v, bh, 0, full, offs_m, n_ctx, qk_scale, BLOCK_N,
                           HEAD_DIM, False, False)
        dq_acc = _dq_inner(dq_acc, qt, dot, m_col, d_col, k, v, bh, full, tj.cdiv(n_ctx, BLOCK_N), offs_m, n_ctx,
                           qk_scale, BLOCK_N, HEAD_DIM, False, True)
    dq_acc = dq_acc * sm_scale
    tj.store(dq, index=(bh, start_m, 0), tile=dq_acc.reshape((1, BLOCK_M, HEAD_DIM)).astype(dq.dtype))


KERNELS = {"attn_fwd": attn_fwd, "attn_bwd_preprocess": attn_bwd_preprocess, "attn_bwd_dkdv": attn_bwd_dkdv,
           "attn_bwd_dq": attn_bwd_dq}


def signatures(dtype: Any) -> dict[str, tuple[Any, ...]]:
    """Each kernel's signature for contiguous 3-D (Z*H, N_CTX, HEAD_DIM) arrays of ``dtype`` (as torch gives)."""
    a3, f2 = dtype[:, :, ::1], tj.float32[:, ::1]
    return {
        "attn_fwd": (a3, a3, a3, a3, f2, tj.float32),
        "attn_bwd_preprocess": (a3, a3, f2),
        "attn_bwd_dkdv": (a3, a3, a3, a3, f2, f2, a3, a3, tj.float32),
        "attn_bwd_dq": (a3, a3, a3, a3, f2, f2, a3, tj.float32),
    }


def constants(name: str, head_dim: int, causal: bool) -> dict[str, Any]:
    """Each kernel's compile-time constants for ``head_dim`` and ``causal``."""
    if name == "attn_bwd_preprocess":
        return {**PRE, "HEAD_DIM": head_dim}
    blocks = {"attn_fwd": FWD, "attn_bwd_dkdv": DKDV_D128 if head_dim > 64 else DKDV, "attn_bwd_dq": DQ}[name]
    return {**blocks, "HEAD_DIM": head_dim, "CAUSAL": causal}


# ---------------------------------------------------------------- launches from torch


def _kernel(name: str, backend: str | None) -> Any:
    """The kernel ``name``, as a ``@tj.kernel`` of ``backend`` when one is named (one object per backend, kept)."""
    if backend is None:
        return KERNELS[name]
    key = (name, backend)
    if key not in _BY_BACKEND:
        _BY_BACKEND[key] = tj.kernel(KERNELS[name].func, backend=backend)
    return _BY_BACKEND[key]


_BY_BACKEND: dict[tuple[str, str], Any] = {}


def _as3d(x: Any) -> Any:
    """A contiguous (Z, H, N, D) torch tensor as (Z*H, N, D)."""
    z, h, n, d = x.shape
    return x.contiguous().view(z * h, n, d)


def attention_forward(q: Any, k: Any, v: Any, causal: bool, sm_scale: float,
                      backend: str | None = None) -> tuple[Any, Any]:
    """softmax(q k^T * sm_scale) v of (Z, H, N_CTX, HEAD_DIM) torch tensors: (o, M), M the (Z, H, N_CTX) float32
    logsumexp (base 2) the backward needs."""
    import torch

    z, h, n, d = q.shape
    o = torch.empty_like(q)
    m = torch.empty((z, h, n), device=q.device, dtype=torch.float32)
    grid = (tj.cdiv(n, FWD["BLOCK_M"]), z * h)
    _kernel("attn_fwd", backend)[grid](_as3d(q), _as3d(k), _as3d(v), o.view(z * h, n, d), m.view(z * h, n),
                                       float(sm_scale), **constants("attn_fwd", d, causal))
    return o, m


def attention_backward(q: Any, k: Any, v: Any, o: Any, do: Any, m: Any, causal: bool, sm_scale: float,
                       backend: str | None = None) -> tuple[Any, Any, Any]:
    """(dq, dk, dv) of ``attention_forward`` given the output's gradient ``do`` and the forward's ``M``."""
    import torch

    z, h, n, d = q.shape
    q3, k3, v3, o3, do3 = (_as3d(x) for x in (q, k, v, o, do))
    m2 = m.contiguous().view(z * h, n)
    delta = torch.empty((z * h, n), device=q.device, dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    _kernel("attn_bwd_preprocess", backend)[(tj.cdiv(n, PRE["BLOCK_M"]), z * h)](
        o3, do3, delta, **constants("attn_bwd_preprocess", d, causal))
    dkdv = constants("attn_bwd_dkdv", d, causal)
    _kernel("attn_bwd_dkdv", backend)[(tj.cdiv(n, dkdv["BLOCK_N"]), z * h)](
        q3, k3, v3, do3, m2, delta, dk.view(z * h, n, d), dv.view(z * h, n, d), float(sm_scale), **dkdv)
    _kernel("attn_bwd_dq", backend)[(tj.cdiv(n, DQ["BLOCK_M"]), z * h)](
        q3, k3, v3, do3, m2, delta, dq.view(z * h, n, d), float(sm_scale), **constants("attn_bwd_dq", d, causal))
    return dq, dk, dv


# ---------------------------------------------------------------- float64 reference


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, do: np.ndarray, causal: bool,
              sm_scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(o, M, dq, dk, dv) in float64 of (..., N, D) arrays, M the base-2 logsumexp of the scaled scores."""
    q, k, v, do = (np.asarray(x, np.float64) for x in (q, k, v, do))
    s = np.einsum("...md,...nd->...mn", q, k) * sm_scale
    if causal:
        n = s.shape[-1]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    top = s.max(axis=-1, keepdims=True)
    e = np.exp(s - top)
    total = e.sum(axis=-1, keepdims=True)
    p = e / total
    o = p @ v
    m = (top[..., 0] + np.log(total[..., 0])) * LOG2E
    dp = do @ np.swapaxes(v, -1, -2)
    dv = np.swapaxes(p, -1, -2) @ do
    ds = p * (dp - (o * do).sum(axis=-1, keepdims=True))
    dq = ds @ k * sm_scale
    dk = np.swapaxes(ds, -1, -2) @ q * sm_scale
    return o, m, dq, dk, dv


# ---------------------------------------------------------------- main


def run_torch(dtype_name: str, head_dim: int, causal: bool) -> None:
    """Forward and backward on a small problem, checked against torch's SDPA and autograd in float32."""
    import torch

    z, h, n = 2, 3, 300
    dt = getattr(torch, dtype_name)
    q, k, v, do = (torch.randn(z, h, n, head_dim, device="cuda", dtype=dt) for _ in range(4))
    sm_scale = 1.0 / math.sqrt(head_dim)
    o, m = attention_forward(q, k, v, causal, sm_scale)
    dq, dk, dv = attention_backward(q, k, v, o, do, m, causal, sm_scale)
    qf, kf, vf = (x.float().requires_grad_() for x in (q, k, v))
    want = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, scale=sm_scale)
    want.backward(do.float())
    tol = 1e-2 if dtype_name == "float16" else 2e-2
    check(f"attention forward {dtype_name}", o.float().cpu().numpy(), want.detach().cpu().numpy(), tol)
    for name, got, grad in (("dq", dq, qf.grad), ("dk", dk, kf.grad), ("dv", dv, vf.grad)):
        assert grad is not None
        check(f"attention backward {name} {dtype_name}", got.float().cpu().numpy(), grad.cpu().numpy(), tol)


def main() -> None:
    def extra(p: Any) -> None:
        """This example's options."""
        p.add_argument("--dtype", choices=sorted(DTYPES), default="float16", help="q, k, v dtype (default float16)")
        p.add_argument("--head-dim", type=int, choices=(64, 128), default=64, help="head dimension (default 64)")
        p.add_argument("--causal", action="store_true", help="causal attention")

    args = parse_args(__doc__, extra)
    if not should_run(args):
        for name, sig in signatures(DTYPES[args.dtype]).items():
            compile_only(args, KERNELS[name], sig, constants(name, args.head_dim, args.causal))
        return
    try:
        import torch

        has_torch = torch.cuda.is_available()
    except ImportError:
        has_torch = False
    if has_torch:
        run_torch(args.dtype, args.head_dim, args.causal)
    else:
        run_numpy(args.dtype, args.head_dim, args.causal)


def run_numpy(dtype_name: str, head_dim: int, causal: bool) -> None:
    """Forward and backward on tilejit device arrays (no torch), checked against the float64 reference."""
    z_h, n = 4, 300
    rng = np.random.default_rng()
    npdt = np.float16
    if dtype_name != "float16":
        print("no torch: running float16 (numpy has no bfloat16)")
    q, k, v, do = (rng.standard_normal((z_h, n, head_dim)).astype(npdt) for _ in range(4))
    sm_scale = 1.0 / math.sqrt(head_dim)
    qd, kd, vd, dod = (tj.asarray(x) for x in (q, k, v, do))
    o = tj.asarray(np.full((z_h, n, head_dim), np.nan, npdt))
    m = tj.asarray(np.full((z_h, n), np.nan, np.float32))
    delta = tj.asarray(np.full((z_h, n), np.nan, np.float32))
    dq, dk, dv = (tj.asarray(np.full((z_h, n, head_dim), np.nan, npdt)) for _ in range(3))
    attn_fwd[(tj.cdiv(n, FWD["BLOCK_M"]), z_h)](qd, kd, vd, o, m, sm_scale,
                                                  **constants("attn_fwd", head_dim, causal))
    attn_bwd_preprocess[(tj.cdiv(n, PRE["BLOCK_M"]), z_h)](o, dod, delta,
                                                            **constants("attn_bwd_preprocess", head_dim, causal))
    dkdv = constants("attn_bwd_dkdv", head_dim, causal)
    attn_bwd_dkdv[(tj.cdiv(n, dkdv["BLOCK_N"]), z_h)](qd, kd, vd, dod, m, delta, dk, dv, sm_scale, **dkdv)
    attn_bwd_dq[(tj.cdiv(n, DQ["BLOCK_M"]), z_h)](qd, kd, vd, dod, m, delta, dq, sm_scale,
                                                   **constants("attn_bwd_dq", head_dim, causal))
    want = reference(q, k, v, do, causal, sm_scale)
    for label, got, ref in zip(("forward o", "forward M", "backward dq", "backward dk", "backward dv"),
                               (o, m, dq, dk, dv), want):
        check(f"attention {label} float16", got.numpy(), ref, 1e-2)


if __name__ == "__main__":
    main()
