"""The CUDA backend's warp-specialized wgmma K loop (``TILEJIT_CUDA_WARP_SPECIALIZE=1``, sm_90a): a producer
warpgroup copies stages with cp.async into an mbarrier ring, the consumer warpgroups only issue wgmmas and run
the code after the loop. CPU tests pin the generated structure (source, PTX, ptxas registers and spills) and
every fallback to the plain pipeline; GPU tests check results on ragged shapes with the switch on."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kernels import np_dtype, poison

import tilejit as tj
from tilejit.backends.cuda.plan import WS_PRODUCER_REGISTERS, ws_registers, ws_stages

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from matmul import matmul, matmul_grouped
from test_cuda_mma_pipeline import matmul_batched, matmul_t

DTYPES = {"float16": tj.float16, "bfloat16": tj.bfloat16}
TILES = [(128, 256, 64), (128, 256, 32), (128, 128, 64), (256, 128, 64)]
SIG = {d: (t[:, ::1], t[:, ::1], tj.float32[:, ::1]) for d, t in DTYPES.items()}


@tj.kernel
def matmul_bias_relu(a, b, bias, c, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    """c = relu(a @ b + bias) cast to c's dtype: an epilogue of elementwise ops and a broadcast row."""
    pid_m, pid_n = tj.bid(0), tj.bid(1)
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(tj.cdiv(a.shape[1], BK)):
        acc = tj.mma(tj.load(a, index=(pid_m, k), shape=(BM, BK)), tj.load(b, index=(k, pid_n), shape=(BK, BN)), acc)
    row = tj.load(bias, index=(0, pid_n), shape=(1, BN)).astype(tj.float32)
    tj.store(c, index=(pid_m, pid_n), tile=tj.maximum(acc + row, 0.0).astype(c.dtype))


@tj.kernel
def matmul_rowsum(a, b, c, s, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    """c = a @ b and s = its row sums: a reduction after the loop needs the whole block (plain pipeline)."""
    pid_m, pid_n = tj.bid(0), tj.bid(1)
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(tj.cdiv(a.shape[1], BK)):
        acc = tj.mma(tj.load(a, index=(pid_m, k), shape=(BM, BK)), tj.load(b, index=(k, pid_n), shape=(BK, BN)), acc)
    tj.store(c, index=(pid_m, pid_n), tile=acc)
    tj.store(s, index=(pid_m, pid_n), tile=tj.sum(acc, axis=1, keepdims=True))


@tj.kernel
def matmul_transposed_out(a, b, c, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    """c = (a @ b)^T: the transpose after the loop goes through shared memory with barriers (plain pipeline)."""
    pid_m, pid_n = tj.bid(0), tj.bid(1)
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(tj.cdiv(a.shape[1], BK)):
        acc = tj.mma(tj.load(a, index=(pid_m, k), shape=(BM, BK)), tj.load(b, index=(k, pid_n), shape=(BK, BN)), acc)
    tj.store(c, index=(pid_n, pid_m), tile=tj.transpose(acc))


@tj.kernel
def matmul_scaled(a, b, c, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    """The loop also rescales the accumulator: it reads it between wgmmas (plain pipeline)."""
    pid_m, pid_n = tj.bid(0), tj.bid(1)
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(tj.cdiv(a.shape[1], BK)):
        acc = tj.mma(tj.load(a, index=(pid_m, k), shape=(BM, BK)), tj.load(b, index=(k, pid_n), shape=(BK, BN)), acc)
        acc = acc * 1.0
    tj.store(c, index=(pid_m, pid_n), tile=acc)


@pytest.fixture
def ws_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The switch on, with a fresh disk cache (tests write only in temp folders)."""
    monkeypatch.setenv("TILEJIT_CUDA_WARP_SPECIALIZE", "1")
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))


def compile_mm(kernel: Any, dtype: str, tiles: tuple[int, int, int], target: str = "sm_90a", **kw: Any) -> Any:
    bm, bn, bk = tiles
    consts = {"BM": bm, "BN": bn, "BK": bk, **({"GROUP": 8} if kernel is matmul_grouped else {})}
    return tj.compile(kernel, SIG[dtype], constants=consts, target=target, backend="cuda", **kw)


def is_ws(src: str) -> bool:
    return "tj::regs_dec<" in src and "tj::cp_async_mbar_arrive(" in src


# --------------------------------------------------------------------------- the plan's numbers


def test_register_split_and_stages() -> None:
    """384 threads launch with 168 registers; the producer keeps 40 and the two consumer warpgroups take the
    rest (232); 640 threads: 96 -> 104; a lone consumer warpgroup gains nothing (no specialization)."""
    assert ws_registers(256) == (168, WS_PRODUCER_REGISTERS, 232)
    assert ws_registers(512) == (96, WS_PRODUCER_REGISTERS, 104)
    assert ws_registers(128) is None
    entry, prod, cons = ws_registers(256) or (0, 0, 0)
    assert (entry - prod) * 128 >= (cons - entry) * 256  # the consumers never ask the pool for more than it has
    assert ws_stages(48 * 1024) == 4 and ws_stages(24 * 1024) == 8 and ws_stages(32 * 1024) == 6
    assert ws_stages(200 * 1024) == 0


# --------------------------------------------------------------------------- structure


@pytest.mark.usefixtures("ws_on")
@pytest.mark.parametrize("tiles", TILES)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("kernel", [matmul, matmul_grouped], ids=["matmul", "matmul_grouped"])
def test_example_matmul_is_warp_specialized(kernel: Any, dtype: str, tiles: tuple[int, int, int]) -> None:
    """The example matmuls: 128 more threads, one block per SM, the producer/consumer split in the source and
    in the PTX: setmaxnreg both ways, mbarrier waits and arrivals, cp.async arrivals, wgmma with one batch in
    flight, and exactly one block barrier (after the mbarriers' initialization), none in the K loop."""
    art = compile_mm(kernel, dtype, tiles)
    ck, ptx = art.cuda_kernel(), art.ptx()
    consumers = 2 * tiles[0]
    _, prod, cons = ws_registers(consumers) or (0, 0, 0)
    assert ck.num_threads == consumers + 128
    assert f"__launch_bounds__({consumers + 128}, 1)" in ck.source
    src = ck.source
    assert is_ws(src) and f"if (tj_tid >= {consumers}) {{" in src
    assert f"tj::regs_dec<{prod}>();" in src and f"tj::regs_inc<{cons}>();" in src
    assert f"tj::cp_async_tile_by<{tiles[0]}, {tiles[2]}, " in src and "tj::cp_async_tile<" not in src
    loop = src[src.index("regs_inc"):]
    assert "__syncthreads" not in loop and "tj_smem" not in loop  # the consumers never sync the block
    assert src.count("__syncthreads") == 1
    assert ptx.count(f"setmaxnreg.dec.sync.aligned.u32 {prod};") == 1
    assert ptx.count(f"setmaxnreg.inc.sync.aligned.u32 {cons};") == 1
    assert "mbarrier.try_wait.parity.shared::cta.b64" in ptx and "mbarrier.arrive.shared.b64" in ptx
    assert "cp.async.mbarrier.arrive.noinc.shared.b64" in ptx and "cp.async.cg.shared.global" in ptx
    assert "wgmma.wait_group.sync.aligned 1;" in ptx and "fence.proxy.async.shared::cta;" in ptx
    assert len(re.findall(r"\bbar(?:rier)?\.sync\b", ptx)) == 1
    stages = ws_stages((tiles[0] * tiles[2] + tiles[2] * tiles[1]) * 2)
    assert f"for (int s = 0; s < {stages}; ++s) {{" in src


@pytest.mark.usefixtures("ws_on")
@pytest.mark.parametrize("tiles", TILES)
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_ptxas_registers_and_no_spills(dtype: str, tiles: tuple[int, int, int]) -> None:
    """ptxas gives the kernel the launch bound's registers (what setmaxnreg's arithmetic assumes: the pool is
    exactly what the producer gives back) and spills nothing, producer (40 registers) and consumers alike."""
    from tilejit.compiler.nvrtc import compile_cuda
    from tilejit.compiler.targets import parse_target

    ck = compile_mm(matmul, dtype, tiles).cuda_kernel()
    log = compile_cuda(ck.source, name=f"{ck.name}.cu", headers=ck.headers, target=parse_target("sm_90a"),
                       output="cubin", options=("-Xptxas=-v",)).log
    regs = re.search(r"Used (\d+) registers", log)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert regs is not None and spill is not None, log
    assert int(regs.group(1)) == (ws_registers(2 * tiles[0]) or (0,))[0]
    assert spill.groups() == ("0", "0"), log
    assert "C7515" not in log  # no wgmma serialization


@pytest.mark.usefixtures("ws_on")
def test_num_stages() -> None:
    """A user's num_stages sizes the ring (its mbarriers are static shared memory, apart from the scratch area)."""
    src = compile_mm(matmul, "bfloat16", (128, 128, 64), num_stages=3).cuda_source()
    assert is_ws(src) and "for (int s = 0; s < 3; ++s) {" in src
    assert len(re.findall(r"__shared__ tj::u64 k\d+_(?:full|empty)\[3\];", src)) == 2


@pytest.mark.usefixtures("ws_on")
@pytest.mark.parametrize("kernel", [matmul_bias_relu, matmul_transposed_out], ids=["bias-relu", "transposed-store"])
def test_epilogues_through_shared_memory_sync_the_consumers_only(kernel: Any) -> None:
    """Epilogues whose tiles change layout through the scratch area (a bias row, a transposed accumulator) stay
    warp-specialized: the headers' block barriers become named barrier 1 of the consumer threads
    (TJ_SYNC_THREADS), and the PTX has no other block barrier than the one before the split."""
    sig: tuple[Any, ...]
    if kernel is matmul_bias_relu:
        sig = (tj.float16[:, ::1],) * 4
    else:
        sig = (tj.bfloat16[:, ::1], tj.bfloat16[:, ::1], tj.float32[:, ::1])
    art = tj.compile(kernel, sig, constants={"BM": 128, "BN": 256, "BK": 64}, target="sm_90a", backend="cuda")
    src, ptx = art.cuda_source(), art.ptx()
    assert is_ws(src) and "#define TJ_SYNC_THREADS 256 " in src and "tj::remap<" in src
    assert "__syncthreads" not in src[src.index("regs_inc"):]
    assert "bar.sync 1, 256;" in ptx and len(re.findall(r"\bbar(?:rier)?\.sync\s+0;", ptx)) == 1
    assert art.cubin()


def test_whole_block_code_is_recognized() -> None:
    """generate()'s last check: a block barrier left in the consumers' code sends the kernel back to the plain
    pipeline; the headers' tj::block_sync does not."""
    from tilejit.backends.cuda.codegen import _needs_whole_block

    assert _needs_whole_block(["  __syncthreads();"]) and _needs_whole_block(['asm("bar.sync 0;");'])
    assert not _needs_whole_block(["  tj::remap<tj::IdentityMap>(t1, t0, tj_smem);", "  tj::store<2>(u_c, {}, t1);"])


@pytest.mark.usefixtures("ws_on")
@pytest.mark.parametrize(("ta", "tb"), [(True, False), (False, True), (True, True)])
def test_transposed_operands_are_warp_specialized(ta: bool, tb: bool) -> None:
    """A^T / B^T stages (as stored; wgmma's imm-trans reads them) go through the producer as well."""
    art = tj.compile(matmul_t, (tj.bfloat16[:, ::1], tj.bfloat16[:, ::1], tj.float32[:, ::1]),
                     constants={"BM": 128, "BN": 256, "BK": 64, "TRANS_A": ta, "TRANS_B": tb}, target="sm_90a",
                     backend="cuda")
    src = art.cuda_source()
    trans = f"{str(ta).lower()}, {str(tb).lower()}"
    assert is_ws(src) and f"tj::Wgmma<tj::bf16, 128, 256, 64, 8, 1, 128, 128, {trans}>" in src
    a_tile, b_tile = ("64, 128" if ta else "128, 64"), ("256, 64" if tb else "64, 256")
    assert f"tj::cp_async_tile_by<{a_tile}, " in src and f"tj::cp_async_tile_by<{b_tile}, " in src
    assert art.cubin()


# --------------------------------------------------------------------------- fallbacks


def test_on_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset, the warp-specialized loop is generated (384 threads: a producer warpgroup beside two consumer
    warpgroups); set to 0, the plain cp.async + barrier pipeline (256 threads)."""
    monkeypatch.delenv("TILEJIT_CUDA_WARP_SPECIALIZE", raising=False)
    ck = compile_mm(matmul, "bfloat16", (128, 256, 64)).cuda_kernel()
    assert is_ws(ck.source) and ck.num_threads == 384
    monkeypatch.setenv("TILEJIT_CUDA_WARP_SPECIALIZE", "0")
    ck = compile_mm(matmul, "bfloat16", (128, 256, 64)).cuda_kernel()
    assert not is_ws(ck.source) and ck.num_threads == 256 and "tj::Wgmma<" in ck.source


@pytest.mark.usefixtures("ws_on")
@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_no_wgmma_target_keeps_its_path(target: str) -> None:
    """sm_80 and plain sm_90 (no wgmma, no setmaxnreg): mma.sync as before."""
    art = compile_mm(matmul, "float16", (128, 128, 64), target=target)
    assert not is_ws(art.cuda_source()) and "mma.sync.aligned" in art.ptx()


@pytest.mark.usefixtures("ws_on")
def test_occupancy_above_one_keeps_the_plain_pipeline() -> None:
    """setmaxnreg shares one block's registers: a requested occupancy of 2 keeps the plain pipeline."""
    art = compile_mm(matmul, "bfloat16", (128, 128, 64), occupancy=2)
    assert not is_ws(art.cuda_source()) and "__launch_bounds__(256, 2)" in art.cuda_source()


@pytest.mark.usefixtures("ws_on")
@pytest.mark.parametrize("kernel", [matmul_rowsum, matmul_scaled], ids=["reduction-after", "acc-read-in-loop"])
def test_unsupported_kernels_fall_back(kernel: Any) -> None:
    """A reduction after the loop and an accumulator read inside the loop keep the plain wgmma pipeline (which
    compiles)."""
    n = 4 if kernel is matmul_rowsum else 3
    sig = (tj.bfloat16[:, ::1], tj.bfloat16[:, ::1]) + (tj.float32[:, ::1],) * (n - 2)
    art = tj.compile(kernel, sig, constants={"BM": 128, "BN": 128, "BK": 64}, target="sm_90a", backend="cuda")
    ck = art.cuda_kernel()
    assert not is_ws(ck.source) and ck.num_threads == 256 and "tj::Wgmma<" in ck.source
    assert art.cubin()


def test_cache_identity_tells_the_switch_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk cache keys of kernels built with and without the switch differ (the generated code does)."""
    from tilejit.backends.cuda_backend import CudaBackend

    monkeypatch.setenv("TILEJIT_CUDA_WARP_SPECIALIZE", "0")
    off = CudaBackend().cache_identity()
    monkeypatch.setenv("TILEJIT_CUDA_WARP_SPECIALIZE", "1")
    assert CudaBackend().cache_identity() != off


# --------------------------------------------------------------------------- on a GPU

SHAPES = [(1000, 1096, 712), (300, 520, 40), (513, 260, 1000), (128, 256, 64)]


def rand16(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Standard normal values rounded to ``dtype`` (exact in the float64 reference)."""
    return rng.standard_normal(shape).astype(np_dtype(dtype))


def rel2(got: np.ndarray, want: np.ndarray) -> float:
    """Relative 2-norm error, after checking that every element was written (outputs start as NaN)."""
    g = got.astype(np.float64)
    assert not np.isnan(g).any(), "unwritten (NaN-poisoned) elements in the output"
    return float(np.linalg.norm(g - want) / max(np.linalg.norm(want), 1e-30))


@pytest.mark.gpu
@pytest.mark.cuda_only(reason="the CUDA backend's warp-specialized wgmma loop (sm_90a)")
@pytest.mark.usefixtures("ws_on")
@pytest.mark.parametrize("grouped", [False, True], ids=["matmul", "matmul_grouped"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("tiles", TILES)
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_warp_specialized_matmul_gpu(dtype: str, tiles: tuple[int, int, int], shape: tuple[int, int, int],
                                     grouped: bool) -> None:
    """M, N and K off the tile grid (K = 712: neither a multiple of 64 nor of 32; K = 40 < BK: one ragged
    stage), against float64; inputs are exact in float64, so the only error is float32 accumulation."""
    m, n, k = shape
    bm, bn, bk = tiles
    a, b = matmul_args(np.random.default_rng(), m, n, k, dtype)
    check_mm(grouped, (tj.cdiv(m, bm), tj.cdiv(n, bn)), a, b, {"BM": bm, "BN": bn, "BK": bk})


def matmul_args(rng: np.random.Generator, m: int, n: int, k: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    return rand16(rng, (m, k), dtype), rand16(rng, (k, n), dtype)


def check_mm(grouped: bool, grid: tuple[int, int], a: np.ndarray, b: np.ndarray, consts: dict[str, int]) -> None:
    """A fresh examples/matmul.py ``matmul`` (``matmul_grouped``: the grid's blocks in one dim, GROUP=8) of ``a``
    and ``b`` into a NaN-poisoned float32 output, against float64 (inputs exact there: only float32 accumulation
    errs). Fresh: a kernel reads the switches when it builds a specialization."""
    c = tj.asarray(poison((a.shape[0], b.shape[1]), "float32"))
    kernel = tj.kernel((matmul_grouped if grouped else matmul).func)
    if grouped:
        kernel[grid[0] * grid[1]](tj.asarray(a), tj.asarray(b), c, GROUP=8, **consts)
    else:
        kernel[grid](tj.asarray(a), tj.asarray(b), c, **consts)
    err = rel2(c.numpy(), a.astype(np.float64) @ b.astype(np.float64))
    assert err <= 1e-5, f"relative error {err:.2e}"


@pytest.mark.gpu
@pytest.mark.cuda_only(reason="the CUDA backend's warp-specialized wgmma loop (sm_90a)")
@pytest.mark.usefixtures("ws_on")
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_warp_specialized_bias_relu_gpu(dtype: str) -> None:
    """The consumers' epilogue: a bias row (remapped through shared memory between the consumers' named
    barriers), ReLU, a cast to the 16-bit output; ragged M, N, K."""
    m, n, k = 1000, 1096, 712
    rng = np.random.default_rng()
    a = rand16(rng, (m, k), dtype)
    b = rand16(rng, (k, n), dtype)
    bias = rand16(rng, (1, n), dtype)
    c = tj.asarray(poison((m, n), dtype))
    kernel = tj.kernel(matmul_bias_relu.func)
    kernel[(tj.cdiv(m, 128), tj.cdiv(n, 256))](tj.asarray(a), tj.asarray(b), tj.asarray(bias), c,
                                              BM=128, BN=256, BK=64)
    want = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias.astype(np.float64), 0.0)
    err = rel2(c.numpy(), want)
    assert err <= (4e-3 if dtype == "bfloat16" else 5e-4), f"relative error {err:.2e}"  # the output's rounding


@pytest.mark.gpu
@pytest.mark.cuda_only(reason="the CUDA backend's warp-specialized wgmma loop (sm_90a)")
@pytest.mark.usefixtures("ws_on")
@pytest.mark.parametrize("tiles", [(128, 256, 64), (128, 128, 64), (256, 128, 64)])
@pytest.mark.parametrize(("ta", "tb"), [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_warp_specialized_transposed_gpu(dtype: str, ta: bool, tb: bool, tiles: tuple[int, int, int]) -> None:
    """A stored (K, M) and/or B stored (N, K), M, N and K off the tile grid."""
    m, n, k = 1000, 1096, 712
    bm, bn, bk = tiles
    rng = np.random.default_rng()
    a = rand16(rng, (k, m) if ta else (m, k), dtype)
    b = rand16(rng, (n, k) if tb else (k, n), dtype)
    c = tj.asarray(poison((m, n), "float32"))
    kernel = tj.kernel(matmul_t.func)
    kernel[(tj.cdiv(m, bm), tj.cdiv(n, bn))](tj.asarray(a), tj.asarray(b), c, BM=bm, BN=bn, BK=bk,
                                             TRANS_A=ta, TRANS_B=tb)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    err = rel2(c.numpy(), (a64.T if ta else a64) @ (b64.T if tb else b64))
    assert err <= 1e-5, f"relative error {err:.2e}"


@pytest.mark.gpu
@pytest.mark.cuda_only(reason="the CUDA backend's warp-specialized wgmma loop (sm_90a)")
@pytest.mark.usefixtures("ws_on")
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_warp_specialized_transposed_store_and_batched_gpu(dtype: str) -> None:
    """Epilogues through the scratch area with the consumers' named barriers: (a @ b)^T stored, and a batch of
    3 matrices (3-D arrays, reshaped store); ragged M, N, K."""
    m, n, k = 1000, 1096, 712
    rng = np.random.default_rng()
    a = rand16(rng, (m, k), dtype)
    b = rand16(rng, (k, n), dtype)
    c = tj.asarray(poison((n, m), "float32"))
    tj.kernel(matmul_transposed_out.func)[(tj.cdiv(m, 128), tj.cdiv(n, 128))](
        tj.asarray(a), tj.asarray(b), c, BM=128, BN=128, BK=64)
    err = rel2(c.numpy(), (a.astype(np.float64) @ b.astype(np.float64)).T)
    assert err <= 1e-5, f"transposed store: relative error {err:.2e}"
    a3 = rand16(rng, (3, m, k), dtype)
    b3 = rand16(rng, (3, k, n), dtype)
    c3 = tj.asarray(poison((3, m, n), "float32"))
    tj.kernel(matmul_batched.func)[(tj.cdiv(m, 128), tj.cdiv(n, 256), 3)](
        tj.asarray(a3), tj.asarray(b3), c3, BM=128, BN=256, BK=64)
    err = rel2(c3.numpy(), np.matmul(a3.astype(np.float64), b3.astype(np.float64)))
    assert err <= 1e-5, f"batched: relative error {err:.2e}"


# --------------------------------------------------------------------------- TMA producer on a GPU (TILEJIT_CUDA_TMA)


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One disk cache for this module's TMA GPU tests: the shapes of a test share its images (the switches are in
    the key), so each (kernel, tiles, dtype, producer) compiles once."""
    return tmp_path_factory.mktemp("ws_tma_cache")


@pytest.mark.gpu
@pytest.mark.cuda_only(reason="the CUDA backend's warp-specialized wgmma loop (sm_90a)")
@pytest.mark.usefixtures("ws_on")
@pytest.mark.parametrize("tma", ["1", "0"], ids=["tma", "cp.async"])
@pytest.mark.parametrize("grouped", [False, True], ids=["matmul", "matmul_grouped"])
@pytest.mark.parametrize("shape", [(1000, 1096, 712), (300, 520, 40), (64, 72, 8)])
@pytest.mark.parametrize("tiles", [(128, 256, 64), (256, 128, 64)])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_tma_producer_gpu(monkeypatch: pytest.MonkeyPatch, shared_cache: Path, dtype: str,
                          tiles: tuple[int, int, int], shape: tuple[int, int, int], grouped: bool, tma: str) -> None:
    """Both producers on ragged M, N, K (K = 8 < BK: one box mostly out of bounds), with one more row and column
    of blocks than the output needs: their boxes lie wholly outside the arrays (zero-filled, the bytes still
    counted), their stores nowhere. The image has its two tensor maps exactly when TMA is on."""
    monkeypatch.setenv("TILEJIT_CUDA_TMA", tma)
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(shared_cache))
    m, n, k = shape
    bm, bn, bk = tiles
    consts = {"BM": bm, "BN": bn, "BK": bk, **({"GROUP": 8} if grouped else {})}
    art = tj.compile(matmul_grouped if grouped else matmul, SIG[dtype], constants=consts, target="sm_90a",
                     backend="cuda")  # what the launch builds: its two maps exactly when TMA is on
    assert sum(spec[0] == "tensormap" for _, spec in art.cuda_kernel().params) == (2 if tma == "1" else 0)
    a, b = matmul_args(np.random.default_rng(), m, n, k, dtype)
    check_mm(grouped, (tj.cdiv(m, bm) + 1, tj.cdiv(n, bn) + 1), a, b, {"BM": bm, "BN": bn, "BK": bk})


@pytest.mark.gpu
@pytest.mark.cuda_only(reason="the CUDA backend's warp-specialized wgmma loop (sm_90a)")
@pytest.mark.usefixtures("ws_on")
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_tma_views_and_fallbacks_gpu(dtype: str) -> None:
    """Views a launch meets: rows padded apart (a map with a row stride of its own), rows that overlap (no map
    describes them: the launch passes zeros and the kernel copies with cp.async), a view 2 bytes off alignment
    (another specialization: the plain path), K = 0 (empty operands: no map, no iteration, c = 0), and a batch
    with one grid layer more than matrices (3-D boxes past the last matrix)."""
    m, n, k = 1000, 1096, 712
    rng = np.random.default_rng()
    kern = tj.kernel(matmul.func)
    grid = (tj.cdiv(m, 128), tj.cdiv(n, 256))
    consts = {"BM": 128, "BN": 256, "BK": 64}
    a, b = matmul_args(rng, m, n, k, dtype)
    want = a.astype(np.float64) @ b.astype(np.float64)
    # padded rows: (m, k) and (k, n) windows of wider arrays
    a_big = np.zeros((m, k + 24), a.dtype)
    a_big[:, :k] = a
    b_big = np.zeros((k, n + 40), b.dtype)
    b_big[:, 3 * 8:3 * 8 + n] = b
    da, db = tj.asarray(a_big), tj.asarray(b_big)
    c = tj.asarray(poison((m, n), "float32"))
    kern[grid](da[:, :k], db[:, 24:24 + n], c, **consts)
    assert rel2(c.numpy(), want) <= 1e-5, "padded rows"
    # misaligned by one element: unit stride but not 16-byte aligned
    a_off = np.zeros((m, k + 8), a.dtype)
    a_off[:, 1:k + 1] = a
    c = tj.asarray(poison((m, n), "float32"))
    kern[grid](tj.asarray(a_off)[:, 1:k + 1], tj.asarray(b), c, **consts)
    assert rel2(c.numpy(), want) <= 1e-5, "misaligned view"
    # overlapping rows: row i of a is flat[8 * i : 8 * i + k] (16-byte rows, unit stride, aligned)
    flat = rand16(rng, (8 * (m - 1) + k,), dtype)
    dflat = tj.asarray(flat)
    overlap = tj.DeviceArray((m, k), dtype, device=dflat.device, strides=(16, 2), ptr=dflat.ptr, base=dflat)
    a_ov = np.lib.stride_tricks.as_strided(flat, (m, k), (16, 2))
    c = tj.asarray(poison((m, n), "float32"))
    kern[grid](overlap, tj.asarray(b), c, **consts)
    assert rel2(c.numpy(), a_ov.astype(np.float64) @ b.astype(np.float64)) <= 1e-5, "overlapping rows"
    # K = 0
    c = tj.asarray(poison((m, n), "float32"))
    kern[grid](tj.asarray(np.zeros((m, 0), a.dtype)), tj.asarray(np.zeros((0, n), b.dtype)), c, **consts)
    assert not np.isnan(c.numpy()).any() and not c.numpy().any(), "K = 0"
    # a batch of 3 with a 4th grid layer
    a3 = rand16(rng, (3, m, k), dtype)
    b3 = rand16(rng, (3, k, n), dtype)
    c3 = tj.asarray(poison((3, m, n), "float32"))
    tj.kernel(matmul_batched.func)[(tj.cdiv(m, 128), tj.cdiv(n, 256), 4)](
        tj.asarray(a3), tj.asarray(b3), c3, **consts)
    assert rel2(c3.numpy(), np.matmul(a3.astype(np.float64), b3.astype(np.float64))) <= 1e-5, "batched"


@pytest.mark.gpu
@pytest.mark.cuda_only(reason="the CUDA backend's warp-specialized wgmma loop (sm_90a)")
@pytest.mark.usefixtures("ws_on")
@pytest.mark.parametrize("tma", ["1", "0"], ids=["tma", "cp.async"])
@pytest.mark.parametrize("shape", [(5, 300, 520, 712), (3, 1000, 1096, 40), (2, 64, 72, 8)])
@pytest.mark.parametrize("tiles", [(128, 256, 64), (128, 256, 32), (256, 128, 64)])
@pytest.mark.parametrize(("dtype", "out"), [("bfloat16", "bfloat16"), ("float16", "float16"), ("bfloat16", "float32")])
def test_warp_specialized_batched_gpu(monkeypatch: pytest.MonkeyPatch, shared_cache: Path, dtype: str, out: str,
                                      tiles: tuple[int, int, int], shape: tuple[int, int, int, int], tma: str) -> None:
    """Batched (3-D) matmul, the accumulator stored from registers as (1, BM, BN) (no shared-memory epilogue):
    ragged M, N, K (K = 8 < BK), one grid layer and one block row/column more than needed (3-D boxes past the
    last matrix and the edges: zero-filled, their stores nowhere), 16-bit and float32 outputs."""
    monkeypatch.setenv("TILEJIT_CUDA_TMA", tma)
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(shared_cache))
    z, m, n, k = shape
    bm, bn, bk = tiles
    rng = np.random.default_rng()
    a, b = rand16(rng, (z, m, k), dtype), rand16(rng, (z, k, n), dtype)
    c = tj.asarray(poison((z, m, n), out))
    tj.kernel(matmul_batched.func)[(tj.cdiv(m, bm) + 1, tj.cdiv(n, bn) + 1, z + 1)](
        tj.asarray(a), tj.asarray(b), c, BM=bm, BN=bn, BK=bk)
    err = rel2(c.numpy(), np.matmul(a.astype(np.float64), b.astype(np.float64)))
    tol = {"float32": 1e-5, "bfloat16": 4e-3, "float16": 5e-4}[out]  # 16-bit outputs: their rounding
    assert err <= tol, f"relative error {err:.2e}"
