"""The CUDA backend's FlashAttention-2 register chains on mma.sync (sm_80+, also sm_90): a row reduction of an mma
accumulator and its broadcast back stay in the fragment layout (registers and quad shuffles), an mma's A operand made
elementwise from another mma's result (or loaded before the loop) is taken from registers, and a B operand loaded
in the mma's block is copied with cp.async into its own buffer and read as stored with ldmatrix. CPU tests read the
layouts, the generated source, the PTX and ptxas's register report; GPU tests check results on ragged sizes."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kernels import np_dtype, poison

import tilejit as tj
from tilejit.backends.cuda.layouts import WarpGrid, flows_from, mma_layout, slice_layout
from tilejit.backends.cuda.lower import is_local

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import attention as A

DTYPES = {"float16": tj.float16, "bfloat16": tj.bfloat16}


@tj.kernel
def softmax_chain(x, w, y, out, rsum, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int],
                  BD: tj.Constant[int]):
    """out = softmax(x @ w^T) @ y over the N (<= BN) keys of one block; rsum = the row sums of x @ w^T."""
    pid = tj.bid(0)
    n = w.shape[0]
    xt = tj.load(x, index=(pid, 0), shape=(BM, BK))
    s = tj.mma(xt, tj.transpose(tj.load(w, index=(0, 0), shape=(BN, BK))), tj.zeros((BM, BN), tj.float32))
    keep = tj.expand_dims(tj.arange(BN), 0) < n
    tj.store(rsum, index=(pid,), tile=tj.sum(tj.where(keep, s, 0.0), axis=1))
    s = tj.where(keep, s, float("-inf"))
    p = tj.exp(s - tj.max(s, axis=1, keepdims=True))
    o = tj.mma(p.astype(y.dtype), tj.load(y, index=(0, 0), shape=(BN, BD)), tj.zeros((BM, BD), tj.float32))
    tj.store(out, index=(pid, 0), tile=(o / tj.sum(p, axis=1, keepdims=True)).astype(out.dtype))


CHAIN = {"BM": 128, "BN": 64, "BK": 64, "BD": 64}


def chain_signature(dt: Any, contiguous: bool = True) -> tuple[Any, ...]:
    a2 = dt[:, ::1] if contiguous else dt[:, :]
    return (a2, a2, a2, a2, tj.float32[::1])


# --------------------------------------------------------------------------- layouts


def test_a_row_slice_holds_each_row_once_where_its_quad_holds_the_row() -> None:
    """slice_layout of an (M, N) fragment layout along N: every row exactly once among owners, and every lane of a
    row's quad holds that row (its lanes on N are replicas)."""
    full = mma_layout(128, 64, 256, WarpGrid(8, 1))
    row = slice_layout(full, 0, 6)
    assert row.kind == "slice" and row.size == 128 and row.tbits[:2] == (-1, -1)
    owned = sorted(f for t in range(256) for i in range(row.elems) if (f := row.flat(t, i)) is not None)
    assert owned == list(range(128))
    for t in range(256):
        full_rows = {(full.flat(t, i) or 0) >> 6 for i in range(full.elems)}
        row_rows = {row.flat(t & ~3, i) for i in range(row.elems)}  # the quad's owner lane
        assert full_rows == row_rows, t


def test_broadcasts_from_slices_are_local_and_others_are_not() -> None:
    """A row (M, 1) or column (1, N) slice broadcast to the fragment layout needs no communication; a warp grid that
    splits the rows' columns over warps does for the rows' sum (a warp bit on the axis), and so does a
    blocked source."""
    full = mma_layout(128, 64, 256, WarpGrid(8, 1))
    rows = [-1] * 6 + list(range(7))  # (128, 1) -> (128, 64)
    cols = list(range(6)) + [-1] * 7  # (1, 64) -> (128, 64)
    assert is_local(slice_layout(full, 0, 6), full, rows, 0)
    assert is_local(slice_layout(full, 6, 13), full, cols, 0)
    assert not is_local(slice_layout(full, 6, 13), full, rows, 0)
    split = mma_layout(128, 64, 256, WarpGrid(4, 2))
    assert split.warp_axis_groups(0, 6) == 2 and mma_layout(128, 64, 256, WarpGrid(8, 1)).warp_axis_groups(0, 6) == 1
    from tilejit.backends.cuda.layouts import blocked

    assert not is_local(blocked((128, 1), 256, 4), full, rows, 0)


def test_an_mma_result_is_an_a_fragment_in_registers() -> None:
    """mma.sync m16n8k16's A fragment (PTX ISA: a0..a7 at rows g, g + 8 and columns 2t, 2t + 1, then 8 on) is, for
    k-step kk of row block mi, registers (mi * K/8 + 2kk) * 4 + 0..7 of the (M, K) C-fragment layout
    (TensorCoreRA packs them in that order)."""
    m, k, nt, wm = 128, 64, 256, 8
    lay = mma_layout(m, k, nt, WarpGrid(wm, 1))
    mt, kt = m // wm // 16, k // 8
    for warp in range(nt // 32):
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            for mi in range(mt):
                for kk in range(k // 16):
                    base = (mi * kt + 2 * kk) * 4
                    for j in range(8):
                        r, c = divmod(lay.flat(warp * 32 + lane, base + j) or 0, k)
                        want_r = warp * (m // wm) + mi * 16 + g + 8 * (j // 2 % 2)
                        want_c = kk * 16 + 2 * t + j % 2 + 8 * (j // 4)
                        assert (r, c) == (want_r, want_c), (warp, lane, mi, kk, j)


def test_flows_from_follows_elementwise_ops_and_loop_carries() -> None:
    """An mma's result flows through casts, selects and the loop carry; a reduction's result does not."""
    fn = tj.compile(A.KERNELS["attn_fwd"], A.signatures(tj.float16)["attn_fwd"],
                    constants=A.constants("attn_fwd", 64, False), target="sm_80", backend="cuda").ir()
    ops = list(fn.body.walk())
    mmas = [op for op in ops if op.NAME == "mma"]
    assert len(mmas) == 2
    flow = flows_from(fn, mmas[0].result)
    assert mmas[1].a in flow  # p.astype(f16) is made from qk
    reduces = [op for op in ops if op.NAME == "reduce"]
    assert all(r.x in flow for r in reduces) and not any(r.result in flow for r in reduces)
    assert mmas[1].result in flows_from(fn, mmas[1].acc)


# --------------------------------------------------------------------------- generated code


def _loop_body(src: str) -> str:
    """The text of the kernel's first key loop."""
    start = src.index("#pragma unroll 1")
    return src[start:src.index("continue;", start)]


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_forward_keeps_p_and_the_softmax_in_registers(target: str, dtype: str, head_dim: int,
                                                                 causal: bool) -> None:
    """examples/attention.py's forward: per key block, K and V go global -> shared memory once (cp.async, read by
    ldmatrix as stored), Q and P are A fragments in registers, the row max/sum are quad shuffles, and nothing else
    touches shared memory; warps own whole rows."""
    src = tj.compile(A.KERNELS["attn_fwd"], A.signatures(DTYPES[dtype])["attn_fwd"],
                     constants=A.constants("attn_fwd", head_dim, causal), target=target,
                     backend="cuda").cuda_source()
    ctype = "tj::half" if dtype == "float16" else "tj::bf16"
    body = _loop_body(src)
    for bad in ("tj::remap<", "tj::reduce<", "to_smem", "tj_As"):
        assert bad not in body, bad
    assert body.count("tj::reduce_local<tj::MaxOp, 0, 6,") == 1 and body.count("tj::reduce_local<tj::SumOp, 0, 6,") == 1
    assert f"tj::TensorCoreRA<{ctype}, 128, 64, {head_dim}, 8, {head_dim + 8}, true>::run(" in body  # Q @ K^T
    assert f"tj::TensorCoreRA<{ctype}, 128, {head_dim}, 64, 8, {head_dim + 8}, false>::run(" in body  # P @ V
    # the next key block's K and V are copied while this one is used (two buffers each): Q @ K^T waits for this
    # block's K and V, syncs, then starts the next block's copies (every warp is done with those buffers); P @ V
    # neither waits nor syncs
    assert body.count("tj::cp_async_tile<64, " + str(head_dim)) == 2 and body.count("if (w") == 2
    assert body.count("tj::cp_async_wait<") == 1 and "tj::cp_async_wait<0>();" in body
    assert body.count("__syncthreads();") == 1
    assert body.index("__syncthreads();") < body.index("tj::cp_async_tile<") < body.index("tj::TensorCoreRA<")
    loops = src.count("#pragma unroll 1")
    assert loops == (2 if causal else 1) and src.count(" ^= 1) {") == loops
    assert src.count("tj::TensorCoreRA<") == 2 * loops and "tj::TensorCore<" not in src


@tj.kernel
def key_loop(q, k, out, n_blocks, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int],
             STOP_EARLY: tj.Constant[bool]):
    """out = the row sums of q @ k[2j+1 block]^T over j < n_blocks (odd key blocks: an index computed in the body);
    STOP_EARLY: a break in the loop."""
    pid = tj.bid(0)
    qt = tj.load(q, index=(pid, 0), shape=(BM, BK))
    acc = tj.zeros((BM, 1), tj.float32)
    for j in range(n_blocks):
        kt = tj.load(k, index=(2 * j + 1, 0), shape=(BN, BK))
        s = tj.mma(qt, tj.transpose(kt), tj.zeros((BM, BN), tj.float32))
        acc = acc + tj.sum(s, axis=1, keepdims=True)
        if STOP_EARLY and j == 3:
            break
    tj.store(out, index=(pid, 0), tile=acc)


KEY_LOOP = {"BM": 128, "BN": 64, "BK": 64}


def _key_loop(target: str, stop_early: bool) -> str:
    sig = (tj.float16[:, ::1], tj.float16[:, ::1], tj.float32[:, ::1], tj.int32)
    return tj.compile(key_loop, sig, constants={**KEY_LOOP, "STOP_EARLY": stop_early}, target=target,
                      backend="cuda").cuda_source()


def test_prefetched_copies_recompute_the_next_iterations_index() -> None:
    """The copy issued for iteration j + 1 evaluates 2 * (j + 1) + 1, not this iteration's 2 * j + 1; a loop with a
    break stages its operand without prefetching (an iteration that exits early would leave a copy behind)."""
    src = _key_loop("sm_80", False)
    copies = [line for line in src.splitlines() if "tj::cp_async_tile<" in line]
    assert len(copies) == 2 and "tj::wmul<tj::i32>((2), ((tj::i32)(0)))" in copies[0]  # the first, before the loop
    assert re.search(r"\^ 1\) \* 9216\).*tj::wmul<tj::i32>\(\(2\), \(\(tj::i32\)\(w\d+ \+ 1\)\)\)", copies[1]), copies
    assert "^= 1) {" in src and "tj::cp_async_wait<0>();" in src
    stop = _key_loop("sm_80", True)
    assert "^= 1" not in stop and "tj::cp_async_wait<0>();" in stop and "tj::cp_async_tile<64, 64, 72" in stop


def test_staged_buffers_shrink_to_fit_the_targets_shared_memory() -> None:
    """d128 attention on sm_86 (99 KiB a block): the 64 KiB epilogue scratch and four prefetched buffers do not fit,
    so K and V get one buffer each; on sm_80 (163 KiB) they are prefetched."""
    sig, consts = A.signatures(tj.float16)["attn_fwd"], A.constants("attn_fwd", 128, False)
    for target, prefetched in (("sm_86", False), ("sm_80", True)):
        ck = tj.compile(A.KERNELS["attn_fwd"], sig, constants=consts, target=target, backend="cuda").cuda_kernel()
        assert ("^= 1" in ck.source) == prefetched and "tj::TensorCoreRA<" in ck.source
        assert ck.source.count("tj::cp_async_tile<64, 128, 136") == (4 if prefetched else 2)  # K and V
        assert ck.shared_bytes <= (99 if target == "sm_86" else 163) * 1024


def _ptxas(kernel: Any, signature: tuple[Any, ...], constants: dict[str, Any], target: str) -> tuple[str, str]:
    """The CUDA source and NVRTC's ``-Xptxas -v`` log of ``kernel`` compiled to a cubin for ``target``."""
    from tilejit.compiler.nvrtc import compile_cuda
    from tilejit.compiler.targets import parse_target

    tgt = parse_target(target)
    ck = tj.compile(kernel, signature, constants=constants, target=tgt, backend="cuda").cuda_kernel()
    log = compile_cuda(ck.source, name=f"{ck.name}.cu", headers=ck.headers, target=tgt, output="cubin",
                       options=("-Xptxas=-v",)).log
    return ck.source, log


@pytest.mark.parametrize(("target", "dtype", "head_dim", "causal"), [
    ("sm_80", "float16", 64, True), ("sm_80", "bfloat16", 128, True), ("sm_90a", "float16", 128, False),
    ("sm_90a", "bfloat16", 64, False)])
def test_attention_forward_compiles_without_spills(target: str, dtype: str, head_dim: int, causal: bool) -> None:
    """ptxas -v (NVRTC's log): the forward uses mma.sync and ldmatrix and spills nothing (it spilled 904 B at d128
    causal when every mma staged both operands through shared memory)."""
    src, log = _ptxas(A.KERNELS["attn_fwd"], A.signatures(DTYPES[dtype])["attn_fwd"],
                      A.constants("attn_fwd", head_dim, causal), target)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    regs = re.search(r"Used (\d+) registers", log)
    assert spill is not None and regs is not None, log
    assert spill.groups() == ("0", "0"), log
    assert int(regs.group(1)) <= 255 and "__launch_bounds__(256)" in src


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_a_softmax_between_two_mmas_stays_in_registers(target: str) -> None:
    """The chain outside a loop: the first mma's A goes through shared memory (loaded in the same block: no gain in
    registers) and its transposed B is staged as stored; the row reductions are local; P is the second mma's A in
    registers; the PTX has mma.sync, ldmatrix and cp.async."""
    art = tj.compile(softmax_chain, chain_signature(tj.float16), constants=CHAIN, target=target)
    src, ptx = art.cuda_source(), art.ptx()
    assert "tj::TensorCore<tj::half, 128, 64, 64, 8, 1, 72, 72, false, true>::run(" in src
    assert "tj::TensorCoreRA<tj::half, 128, 64, 64, 8, 72, false>::run(" in src
    assert src.count("tj::reduce_local<") == 3 and "tj::reduce<" not in src
    assert src.count("tj::cp_async_tile<64, 64, 72, 256, 0>") == 2 and "tj::cp_async_wait<" in src
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx and "cp.async" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx and "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx


def test_strided_b_operands_are_not_staged_and_old_targets_keep_the_scratch_path() -> None:
    """No unit-stride rows promised: B goes registers -> shared memory (to_smem); sm_75 has no cp.async or
    register chains: both mmas stage their operands, and the reductions combine warps through shared memory."""
    strided = tj.compile(softmax_chain, chain_signature(tj.float16, contiguous=False), constants=CHAIN,
                         target="sm_80").cuda_source()
    assert "cp_async" not in strided and strided.count("tj::to_smem<") == 3  # A, B^T, V
    assert "tj::TensorCoreRA<" in strided  # P still comes from registers
    old = tj.compile(softmax_chain, chain_signature(tj.float16), constants=CHAIN, target="sm_75").cuda_source()
    assert "TensorCoreRA" not in old and "cp_async" not in old and "reduce_local" not in old


@tj.kernel
def shared_b(x, w, out, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    """out = (x @ w^T, rounded to w's dtype) @ w by w's row blocks: each is B of two mmas (one transposed)."""
    pid = tj.bid(0)
    xt = tj.load(x, index=(pid, 0), shape=(BM, BK))
    acc = tj.zeros((BM, BK), tj.float32)
    for j in range(tj.cdiv(w.shape[0], BN)):
        wt = tj.load(w, index=(j, 0), shape=(BN, BK))
        s = tj.mma(xt, wt.T, tj.zeros((BM, BN), tj.float32))
        acc = tj.mma(s.astype(w.dtype), wt, acc)
    tj.store(out, index=(pid, 0), tile=acc.astype(out.dtype))


@tj.kernel
def crowded(a, x, out1, out2, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    """out1 = sum_j (a @ x_j^T) @ x_j and out2 = the same of relu(a @ x_j^T), the products rounded to x's dtype:
    two (BM, BK) float32 accumulators and a loop-invariant (BM, BK) A operand (dK/dV's pattern at d128)."""
    pid = tj.bid(0)
    at = tj.load(a, index=(pid, 0), shape=(BM, BK))
    acc1 = tj.zeros((BM, BK), tj.float32)
    acc2 = tj.zeros((BM, BK), tj.float32)
    for j in range(tj.cdiv(x.shape[0], BN)):
        xt = tj.load(x, index=(j, 0), shape=(BN, BK))
        s = tj.mma(at, xt.T, tj.zeros((BM, BN), tj.float32))
        acc1 = tj.mma(s.astype(x.dtype), xt, acc1)
        acc2 = tj.mma(tj.maximum(s, 0.0).astype(x.dtype), xt, acc2)
    tj.store(out1, index=(pid, 0), tile=acc1.astype(out1.dtype))
    tj.store(out2, index=(pid, 0), tile=acc2.astype(out2.dtype))


SHARED = {"BM": 128, "BN": 64, "BK": 64}
CROWDED = {"BM": 128, "BN": 32, "BK": 128}


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_a_tile_two_mmas_read_as_b_is_staged_once(target: str) -> None:
    """A load read by two mmas as B (one through a transpose) gets one cp.async buffer per iteration (prefetched),
    read by ldmatrix.trans and ldmatrix as stored; the first mma waits, syncs and starts the next copy, the second
    neither (it used to go registers -> shared memory twice per iteration, with two barriers each)."""
    src = tj.compile(shared_b, (tj.float16[:, ::1], tj.float16[:, ::1], tj.float32[:, ::1]), constants=SHARED,
                     target=target, backend="cuda").cuda_source()
    body = _loop_body(src)
    for bad in ("to_smem", "tj::remap<", "tj::load<", "tj_As"):
        assert bad not in body, bad
    assert body.count("tj::cp_async_tile<64, 64, 72, 256, 0>(") == 1 and src.count("tj::cp_async_tile<") == 2
    first = "tj::TensorCoreRA<tj::half, 128, 64, 64, 8, 72, true>::run("
    second = "tj::TensorCoreRA<tj::half, 128, 64, 64, 8, 72, false>::run("
    assert first in body and second in body and body.index(first) < body.index(second)
    buffers = set(re.findall(r"tj_Bs = (reinterpret_cast<tj::half\*>\(tj_smem \+ tj_stage \+ [^;]*);", body))
    assert len(buffers) == 1, buffers  # both mmas read the same buffer
    assert body.count("tj::cp_async_wait<") == 1 and body.count("__syncthreads();") == 1


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_a_loop_invariant_a_that_crowds_the_registers_is_staged(target: str) -> None:
    """Two (128, 128) float32 accumulators (128 words a thread) beside a loop-invariant (128, 128) A: the A is
    copied once into shared memory before the loop (cp.async) and read there with ldmatrix; B streams as before;
    the chained mmas take their A from registers with B's fragments read as used (STREAM); no spills. With one
    accumulator the A stays in registers."""
    sig = (tj.float16[:, ::1], tj.float16[:, ::1], tj.float32[:, ::1], tj.float32[:, ::1])
    src, log = _ptxas(crowded, sig, CROWDED, target)
    head, body = src[:src.index("#pragma unroll 1")], _loop_body(src)
    assert head.count("tj::cp_async_tile<128, 128, 136, 256, 0>(") == 1 and "tj::load<" not in head
    assert "tj::TensorCore<tj::half, 128, 32, 128, 8, 1, 136, 136, false, true>::run(" in body
    assert "tj_As = reinterpret_cast<tj::half*>(tj_smem + tj_stage + 0);" in body
    assert body.count("tj::TensorCoreRA<tj::half, 128, 128, 32, 8, 136, false, true>::run(") == 2
    assert "to_smem" not in body and "tj::remap<" not in body
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert spill is not None and spill.groups() == ("0", "0"), log
    one = tj.compile(shared_b, (tj.float16[:, ::1],) * 2 + (tj.float32[:, ::1],), constants={**SHARED, "BK": 128},
                     target=target, backend="cuda").cuda_source()
    assert "tj::TensorCore<" not in one and "tj::TensorCoreRA<tj::half, 128, 64, 128, 8, 136, true>::run(" in one


BWD = ("attn_bwd_dkdv", "attn_bwd_dq")


@pytest.mark.parametrize(("target", "dtype"), [("sm_80", "float16"), ("sm_90a", "bfloat16")])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_backward_loops_stream_every_tile_once(target: str, dtype: str, head_dim: int,
                                                        causal: bool) -> None:
    """examples/attention.py's backward: in every loop each streamed tile (dK/dV: Q and dO; dQ: K and V), though
    read by two mmas, is one cp.async copy into a prefetched buffer (one wait and one barrier per iteration); no
    tile goes through registers to shared memory. dK/dV at d128 keeps K
    and V in shared memory (copied once before its loops), at d64 in registers; dQ keeps Q and dO in registers."""
    ctype = "tj::half" if dtype == "float16" else "tj::bf16"
    for name in BWD:
        src = tj.compile(A.KERNELS[name], A.signatures(DTYPES[dtype])[name],
                         constants=A.constants(name, head_dim, causal), target=target, backend="cuda").cuda_source()
        c = A.constants(name, head_dim, causal)
        rows = c["BLOCK_M"] if name == "attn_bwd_dkdv" else c["BLOCK_N"]
        bodies = re.split(r"#pragma unroll 1\n", src)[1:]
        # the masked and the unmasked blocks (non-causal dK/dV masks none: padded queries read M = +inf)
        assert len(bodies) == (1 if name == "attn_bwd_dkdv" and not causal else 2), name
        for part in bodies:
            body = part[:part.index("continue;")]
            for bad in ("to_smem", "tj::remap<", "tj::load<8"):
                assert bad not in body, (name, bad)
            assert body.count(f"tj::cp_async_tile<{rows}, {head_dim}, {head_dim + 8}, 256, 0>(") == 2, name
            assert body.count("tj::cp_async_wait<") == 1 and body.count("__syncthreads();") == 1, name
            assert body.count("::run(") == (4 if name == "attn_bwd_dkdv" else 3), name
        head = src[:src.index("#pragma unroll 1")]
        staged_kv = name == "attn_bwd_dkdv" and head_dim == 128
        assert head.count(f"tj::cp_async_tile<128, {head_dim}, {head_dim + 8}, 256, 0>(") == (2 if staged_kv else 0)
        assert (f"tj::TensorCore<{ctype}, 128, " in src) == staged_kv, name


@pytest.mark.parametrize(("target", "dtype", "head_dim", "causal"), [
    ("sm_90a", "bfloat16", 128, False), ("sm_90a", "bfloat16", 128, True), ("sm_90a", "float16", 64, False),
    ("sm_90a", "float16", 64, True), ("sm_80", "float16", 64, True), ("sm_80", "bfloat16", 128, True),
    ("sm_80", "float16", 128, False)])
def test_attention_backward_compiles_without_spills(target: str, dtype: str, head_dim: int, causal: bool) -> None:
    """ptxas -v (NVRTC's log): neither backward kernel spills (dK/dV at d128 spilled 260-268 B with K and V in
    registers and Q, dO through registers -> shared memory; 0-24 B with 32-query steps)."""
    for name in BWD:
        _, log = _ptxas(A.KERNELS[name], A.signatures(DTYPES[dtype])[name],
                        A.constants(name, head_dim, causal), target)
        spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
        assert spill is not None and spill.groups() == ("0", "0"), (name, log)


# --------------------------------------------------------------------------- on a GPU


@pytest.mark.gpu
@pytest.mark.parametrize("contiguous", [True, False])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_softmax_chain_gpu(dtype: str, contiguous: bool, rng: np.random.Generator) -> None:
    """Ragged sizes (M = 300 rows over 3 blocks, N = 50 keys of 64, K = 40 and D = 48 of 64) against float64:
    the register chain with staged (contiguous) or register-staged (strided views) B operands."""
    m, n, k, d = 300, 50, 40, 48
    npdt = np_dtype(dtype)
    x, w, y = (rng.standard_normal(s).astype(npdt) for s in ((m, k), (n, k), (n, d)))
    out = tj.asarray(poison((m, d), dtype))
    rsum = tj.asarray(poison((m,), "float32"))
    args = [tj.asarray(a) for a in (x, w, y)]
    if not contiguous:  # every other column of a twice-as-wide array: strided rows
        wide = [np.repeat(a, 2, axis=1) for a in (x, w, y)]
        args = [tj.asarray(a)[:, ::2] for a in wide]
    softmax_chain[(tj.cdiv(m, 128),)](*args, out, rsum, **CHAIN)
    s = x.astype(np.float64) @ w.astype(np.float64).T
    e = np.exp(s - s.max(axis=1, keepdims=True))
    want = (e / e.sum(axis=1, keepdims=True)) @ y.astype(np.float64)
    got, sums = out.numpy().astype(np.float64), rsum.numpy().astype(np.float64)
    assert not np.isnan(got).any() and not np.isnan(sums).any(), "unwritten (NaN-poisoned) elements"
    tol = 1e-2 if dtype == "float16" else 3e-2
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol)
    np.testing.assert_allclose(sums, s.sum(axis=1), atol=0.05, rtol=1e-3)


def _rounded(x: np.ndarray, npdt: Any) -> np.ndarray:
    """``x`` rounded to ``npdt`` (as a kernel's cast to 16 bits does) and back to float64."""
    return x.astype(npdt).astype(np.float64)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_shared_b_gpu(dtype: str, rng: np.random.Generator) -> None:
    """A B tile staged once for two mmas, on ragged sizes (300 rows over 3 blocks, 150 rows of w over 3 blocks of
    64, the last partly past the end: zero-filled) against float64."""
    m, n, k = 300, 150, 64
    npdt = np_dtype(dtype)
    x, w = (rng.standard_normal(s).astype(npdt) for s in ((m, k), (n, k)))
    out = tj.asarray(poison((m, k), "float32"))
    shared_b[(tj.cdiv(m, SHARED["BM"]),)](tj.asarray(x), tj.asarray(w), out, **SHARED)
    xf, wf = x.astype(np.float64), w.astype(np.float64)
    want = sum(_rounded(xf @ wf[j:j + 64].T, npdt) @ wf[j:j + 64] for j in range(0, n, 64))
    got = out.numpy().astype(np.float64)
    assert not np.isnan(got).any(), "unwritten (NaN-poisoned) elements"
    np.testing.assert_allclose(got, want, atol=0.02 * np.abs(want).max(), rtol=0.02)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_crowded_gpu(dtype: str, rng: np.random.Generator) -> None:
    """A loop-invariant A staged in shared memory beside two accumulators, on ragged sizes (200 rows of a over two
    blocks, 100 rows of x over four blocks of 32) against float64."""
    m, n, k = 200, 100, 128
    npdt = np_dtype(dtype)
    a, x = (rng.standard_normal(s).astype(npdt) for s in ((m, k), (n, k)))
    out1, out2 = (tj.asarray(poison((m, k), "float32")) for _ in range(2))
    crowded[(tj.cdiv(m, CROWDED["BM"]),)](tj.asarray(a), tj.asarray(x), out1, out2, **CROWDED)
    af, xf = a.astype(np.float64), x.astype(np.float64)
    want1 = want2 = np.zeros((m, k))
    for j in range(0, n, 32):
        s = af @ xf[j:j + 32].T
        want1 = want1 + _rounded(s, npdt) @ xf[j:j + 32]
        want2 = want2 + _rounded(np.maximum(s, 0.0), npdt) @ xf[j:j + 32]
    for got_arr, want in ((out1, want1), (out2, want2)):
        got = got_arr.numpy().astype(np.float64)
        assert not np.isnan(got).any(), "unwritten (NaN-poisoned) elements"
        np.testing.assert_allclose(got, want, atol=0.02 * np.abs(want).max(), rtol=0.02)
