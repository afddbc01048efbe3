"""examples/attention.py: every kernel compiles for sm_80 and sm_90 (CUDA C++) and through tileiras (Tile IR); its
float64 reference against a direct softmax formula; the kernels' block schedule (stages, loop bounds, masks,
padding) replayed in numpy; on a GPU, forward and backward on both backends against torch's SDPA and autograd."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tilejit as tj

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import attention as A

NAMES = list(A.KERNELS)


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_every_kernel_compiles_with_the_cuda_backend(target: str, dtype: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    sigs = A.signatures(A.DTYPES[dtype])
    for head_dim, causal in ((64, True), (128, False)):
        for name in NAMES:
            art = tj.compile(A.KERNELS[name], sigs[name], constants=A.constants(name, head_dim, causal),
                             target=target, backend="cuda")
            assert art.cubin()[:4] == b"\x7fELF"
            assert (".target " + target) in art.ptx()
            if name != "attn_bwd_preprocess":  # the others multiply tiles on tensor cores
                ptx = art.ptx()
                assert "mma.sync" in ptx or "wgmma" in ptx, f"{name} {target}: no tensor-core instruction"


@pytest.mark.parametrize("causal", [True, False])
def test_every_kernel_compiles_with_the_tileir_backend(causal: bool, tileir_env: Any) -> None:
    sigs = A.signatures(tj.float16)
    for name in NAMES:
        art = tj.compile(A.KERNELS[name], sigs[name], constants=A.constants(name, 64, causal), target="sm_90",
                         backend="tileir")
        assert art.backend == "tileir"
        assert art.cubin()[:4] == b"\x7fELF"
        if name != "attn_bwd_preprocess":
            assert "mma" in art.tileir_text()


def _direct(q: np.ndarray, k: np.ndarray, v: np.ndarray, do: np.ndarray, causal: bool,
            scale: float) -> tuple[np.ndarray, ...]:
    """Attention and its gradients one query row at a time, from the softmax's definition and its Jacobian."""
    bh, n, _ = q.shape
    o, m, dq, dk, dv = (np.zeros_like(q), np.zeros((bh, n)), np.zeros_like(q), np.zeros_like(k), np.zeros_like(v))
    for b in range(bh):
        for i in range(n):
            keys = i + 1 if causal else n
            s = scale * np.array([q[b, i] @ k[b, j] for j in range(keys)])
            p = np.exp(s) / np.exp(s).sum()
            o[b, i] = p @ v[b, :keys]
            m[b, i] = math.log2(np.exp(s).sum())
            dp = v[b, :keys] @ do[b, i]
            ds = (np.diag(p) - np.outer(p, p)) @ dp  # softmax's Jacobian times dL/dp
            dq[b, i] = scale * ds @ k[b, :keys]
            dk[b, :keys] += scale * np.outer(ds, q[b, i])
            dv[b, :keys] += np.outer(p, do[b, i])
    return o, m, dq, dk, dv


@pytest.mark.parametrize("causal", [True, False])
def test_float64_reference_matches_the_direct_formula(causal: bool) -> None:
    rng = np.random.default_rng(7)
    q, k, v, do = (rng.standard_normal((2, 9, 4)) for _ in range(4))
    for got, want in zip(A.reference(q, k, v, do, causal, 0.4), _direct(q, k, v, do, causal, 0.4), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    o = A.reference(q, k, v, do, causal, 0.4)[0]
    assert not np.allclose(o, A.reference(q, k, v, do, not causal, 0.4)[0])  # the mask changes the result


def _blocks(x: np.ndarray, i: int, size: int, pad: float = 0.0) -> np.ndarray:
    """Rows ``i*size .. (i+1)*size`` of ``x`` (first axis) with rows past the end read as ``pad``, as tj.load."""
    out = np.full((size, *x.shape[1:]), pad)
    part = x[i * size:(i + 1) * size]
    out[:len(part)] = part
    return out


def _schedule(q: np.ndarray, k: np.ndarray, v: np.ndarray, do: np.ndarray, causal: bool,
              scale: float) -> tuple[np.ndarray, ...]:
    """The kernels' loops, bounds, masks and padding replayed in float64 for one head: (o, M, dq, dk, dv)."""
    n, d = q.shape
    qs = scale * A.LOG2E
    bm, bn = A.FWD["BLOCK_M"], A.FWD["BLOCK_N"]
    o, m = np.zeros((n, d)), np.zeros(n)
    for sm in range(-(-n // bm)):
        qt, offs_m = _blocks(q, sm, bm), (sm * bm + np.arange(bm))[:, None]
        m_i, l_i, acc = np.full((bm, 1), -np.inf), np.ones((bm, 1)), np.zeros((bm, d))
        if causal:
            diag = sm * (bm // bn)
            stages = [(0, diag, False, False), (diag, diag + bm // bn, True, False)]
        else:
            stages = [(0, -(-n // bn), False, True)]
        for lo, hi, mask_diag, mask_end in stages:
            for j in range(lo, hi):
                kt, vt = _blocks(k, j, bn), _blocks(v, j, bn)
                s = qt @ kt.T * qs
                offs_n = (j * bn + np.arange(bn))[None, :]
                if mask_diag:
                    s = np.where(offs_n <= offs_m, s, -np.inf)
                if mask_end:
                    s = np.where(offs_n < n, s, -np.inf)
                m_ij = np.maximum(m_i, s.max(axis=1, keepdims=True))
                p, alpha = np.exp2(s - m_ij), np.exp2(m_i - m_ij)
                l_i = l_i * alpha + p.sum(axis=1, keepdims=True)
                acc = acc * alpha + p @ vt
                m_i = m_ij
        rows = slice(sm * bm, min(n, (sm + 1) * bm))
        count = rows.stop - rows.start
        o[rows], m[rows] = (acc / l_i)[:count], (m_i + np.log2(l_i))[:count, 0]
    delta = (o * do).sum(axis=1)
    dk, dv = np.zeros((n, d)), np.zeros((n, d))
    bm, bn = (A.DKDV_D128 if d > 64 else A.DKDV)["BLOCK_M"], A.DKDV["BLOCK_N"]
    m_blocks = -(-n // bm)
    for sn in range(-(-n // bn)):
        kt, vt, offs_n = _blocks(k, sn, bn), _blocks(v, sn, bn), (sn * bn + np.arange(bn))[:, None]
        dk_acc, dv_acc = np.zeros((bn, d)), np.zeros((bn, d))
        first = sn * (bn // bm)
        mid = min(first + bn // bm, m_blocks)
        for lo, hi, mask in ((first, mid, True), (mid, m_blocks, False)) if causal else ((0, m_blocks, False),):
            for i in range(lo, hi):
                qt, dot = _blocks(q, i, bm), _blocks(do, i, bm)
                m_row, d_row = _blocks(m, i, bm, np.inf)[None, :], _blocks(delta, i, bm)[None, :]
                p_t = np.exp2(kt @ qt.T * qs - m_row)  # padded queries: M = inf, so 0
                if mask:
                    p_t = np.where((i * bm + np.arange(bm))[None, :] >= offs_n, p_t, 0.0)
                dv_acc += p_t @ dot
                dk_acc += (p_t * (vt @ dot.T - d_row)) @ qt
        rows = slice(sn * bn, min(n, (sn + 1) * bn))
        dk[rows], dv[rows] = (dk_acc * scale)[:rows.stop - rows.start], dv_acc[:rows.stop - rows.start]
    dq = np.zeros((n, d))
    bm, bn = A.DQ["BLOCK_M"], A.DQ["BLOCK_N"]
    for sm in range(-(-n // bm)):
        qt, dot = _blocks(q, sm, bm), _blocks(do, sm, bm)
        m_col, d_col = _blocks(m, sm, bm, np.inf)[:, None], _blocks(delta, sm, bm)[:, None]
        offs_m = (sm * bm + np.arange(bm))[:, None]
        if causal:  # (lo, hi, mask the diagonal, mask the end)
            diag = sm * (bm // bn)
            stages = [(0, diag, False, False), (diag, min(diag + bm // bn, -(-n // bn)), True, False)]
        else:
            stages = [(0, n // bn, False, False), (n // bn, -(-n // bn), False, True)]
        dq_acc = np.zeros((bm, d))
        for lo, hi, mask_diag, mask_end in stages:
            for j in range(lo, hi):
                kt, vt = _blocks(k, j, bn), _blocks(v, j, bn)
                p = np.exp2(qt @ kt.T * qs - m_col)
                offs_n = (j * bn + np.arange(bn))[None, :]
                if mask_diag:
                    p = np.where(offs_n <= offs_m, p, 0.0)
                if mask_end:
                    p = np.where(offs_n < n, p, 0.0)
                dq_acc += (p * (dot @ vt.T - d_col)) @ kt
        rows = slice(sm * bm, min(n, (sm + 1) * bm))
        dq[rows] = (dq_acc * scale)[:rows.stop - rows.start]
    return o, m, dq, dk, dv


@pytest.mark.parametrize("n", [100, 256, 257])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("head_dim", [16, 128])
def test_the_kernels_block_schedule_computes_attention(n: int, causal: bool, head_dim: int) -> None:
    """The kernels' stages, run-time loop bounds, masks and padding (replayed in float64) give the reference, at
    lengths that are no multiple of any block (and one that is), with the blocks of each head dim: a wrong bound or
    mask shows here without a GPU."""
    rng = np.random.default_rng(3)
    q, k, v, do = (rng.standard_normal((n, head_dim)) for _ in range(4))
    got = _schedule(q, k, v, do, causal, 0.3)
    want = A.reference(q, k, v, do, causal, 0.3)
    for name, g, w in zip(("o", "M", "dq", "dk", "dv"), got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9, err_msg=name)


# ---------------------------------------------------------------- GPU: both backends (conftest's tj_backend)

TOLERANCE = {"float16": 1e-2, "bfloat16": 2.5e-2}  # relative 2-norm error against float32 SDPA


@pytest.mark.gpu
@pytest.mark.parametrize("n", [100, 257])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_attention_forward_and_backward_match_torch(dtype: str, head_dim: int, causal: bool, n: int) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    dt = getattr(torch, dtype)
    z, h = 2, 3
    q, k, v, do = (torch.randn(z, h, n, head_dim, device="cuda", dtype=dt) for _ in range(4))
    scale = 1.0 / math.sqrt(head_dim)
    real_empty_like, real_empty = torch.empty_like, torch.empty

    def poisoned_like(x: Any, **kw: Any) -> Any:
        """torch.empty_like filled with NaN: an element the kernels do not write shows."""
        return real_empty_like(x, **kw).fill_(float("nan"))

    def poisoned(*shape: Any, **kw: Any) -> Any:
        """torch.empty filled with NaN."""
        return real_empty(*shape, **kw).fill_(float("nan"))

    with pytest.MonkeyPatch.context() as poison:  # its own: undoing the test's would undo TILEJIT_BACKEND too
        poison.setattr(torch, "empty_like", poisoned_like)
        poison.setattr(torch, "empty", poisoned)
        o, m = A.attention_forward(q, k, v, causal, scale)
        dq, dk, dv = A.attention_backward(q, k, v, o, do, m, causal, scale)
        torch.cuda.synchronize()
    qf, kf, vf = (x.float().requires_grad_() for x in (q, k, v))
    want = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, scale=scale)
    want.backward(do.float())
    s = (qf @ kf.transpose(-1, -2)).detach() * scale
    if causal:
        s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool, device="cuda").tril(), float("-inf"))
    want_m = torch.logsumexp(s, dim=-1) / math.log(2)
    for name, got, ref in (("o", o, want.detach()), ("M", m, want_m), ("dq", dq, qf.grad), ("dk", dk, kf.grad),
                           ("dv", dv, vf.grad)):
        assert ref is not None
        got32 = got.float()
        assert bool(torch.isfinite(got32).all()), f"{name}: NaN or inf (an element not written?)"
        err = ((got32 - ref).norm() / ref.norm()).item()
        assert err <= TOLERANCE[dtype], f"{name}: relative error {err:.2e} > {TOLERANCE[dtype]}"
