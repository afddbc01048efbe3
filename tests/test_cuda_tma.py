"""TMA loads in the CUDA backend's warp-specialized producer (``TILEJIT_CUDA_TMA``, sm_90a): host-encoded tensor
maps (``runtime.tensormap``, checked against the stand-in driver's ``cuTensorMapEncodeTiled``), the ``tensormap``
parameter kind in the checked and generated launch paths and the disk cache entry, and the generated kernels
(source, PTX, ptxas) with every fallback to the cp.async producer. GPU tests are in test_cuda_warp_specialize.py."""

from __future__ import annotations

import ctypes
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_cuda_mma_pipeline import matmul_batched, matmul_t
from test_cuda_warp_specialize import compile_mm
from test_runtime_launch import FakeDriver, fake_lib, fn, view  # noqa: F401  (fake_lib: a fixture)

import tilejit as tj
from tilejit.bindings.driver import Driver, load_driver
from tilejit.errors import CUDAError
from tilejit.language.ir.types import ArrayHint
from tilejit.runtime import tensormap
from tilejit.runtime.dispatch import CHECKED_LAUNCHES
from tilejit.runtime.launch import Launcher, ParamKind, derived_params
from tilejit.runtime.tensormap import NO_TENSOR_MAP, TensorMapError, encode_tiled, launch_tensor_map, tensor_map

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from matmul import matmul, matmul_grouped

STUB_SOURCE = Path(__file__).parent / "stub_driver" / "stub_cuda.c"


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Driver:
    """The stand-in driver (tests/stub_driver/stub_cuda.c), whose cuTensorMapEncodeTiled writes its arguments into
    the map."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in driver")
    path = tmp_path_factory.mktemp("stub_tma") / "libcuda_stub_tma.so.1"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", str(STUB_SOURCE), "-o", str(path)], check=True, capture_output=True)
    return load_driver(str(path))


@pytest.fixture(autouse=True)
def _fresh_maps(monkeypatch: pytest.MonkeyPatch) -> None:
    """No map remembered from another test; the stand-in's failure switch off."""
    monkeypatch.delenv("STUB_TENSOR_MAP_FAIL", raising=False)
    tensormap.clear_cache()


def words(raw: bytes) -> tuple[int, ...]:
    """A map as the stand-in writes it: 16 little-endian u64 words."""
    return struct.unpack("<16Q", raw)


# --------------------------------------------------------------------------- the encoder


def test_encode_tiled_hands_the_driver_the_arrays_layout(stub: Driver) -> None:
    """Dims and box innermost first, byte strides without the innermost, the dtype's TMA type, the swizzle enum,
    L2 promotion of 128 bytes, zero fill, element strides 1, a 64-byte aligned map."""
    raw = encode_tiled("bfloat16", 0x10000, (1000, 712), (728, 1), (128, 64), 128, stub)
    w = words(raw)
    assert len(raw) == 128 and w[0] == 0x10000
    assert w[1] == 2 | 9 << 8 | 0 << 16 | 3 << 24 | 2 << 32 | 0 << 40
    assert w[2:4] == (712, 1000) and w[7] == 728 * 2 and w[8:11] == (0, 0, 0)
    assert w[11:13] == (64 | 1 << 32, 128 | 1 << 32)
    w3 = words(encode_tiled("float16", 0x20000, (3, 300, 40), (300 * 48, 48, 1), (1, 64, 32), 64, stub))
    assert w3[1] & 0xFF == 3 and (w3[1] >> 8) & 0xFF == 6 and (w3[1] >> 24) & 0xFF == 2
    assert w3[2:5] == (40, 300, 3) and w3[7:9] == (96, 300 * 96) and w3[11:14] == (32 | 1 << 32, 64 | 1 << 32,
                                                                                     1 | 1 << 32)


@pytest.mark.parametrize(("args", "message"), [
    (("complex64", 0, (8, 8), (8, 1), (8, 8), 0), "has no TMA data type"),
    (("float16", 0, (8, 8), (8, 1), (8,), 0), "rank 2 with 2 strides and 1 box dims"),
    (("float16", 8, (8, 8), (8, 1), (8, 8), 0), "base address 0x8 is not 16-byte aligned"),
    (("float16", 0, (8, 8), (1, 8), (8, 8), 0), "innermost stride is 8"),
    (("float16", 0, (0, 8), (8, 1), (8, 8), 0), "shape[0] is 0"),
    (("float16", 0, (2**31, 8), (8, 1), (8, 8), 0), "shape[0] is 2147483648"),
    (("float16", 0, (8, 8), (12, 1), (8, 8), 0), "strides[0] is 12 elements (24 bytes)"),
    (("float16", 0, (8, 16), (8, 1), (8, 8), 0), "strides[0] = 8 is less than shape[1] * strides[1] = 16"),
    (("float16", 0, (8, 8), (8, 1), (8, 300), 0), "box dim 1 is 300"),
    (("float16", 0, (8, 8), (8, 1), (8, 4), 0), "inner dim is 8 bytes"),
    (("float16", 0, (8, 64), (64, 1), (8, 64), 48), "swizzle 48"),
    (("float16", 0, (8, 128), (128, 1), (8, 128), 128), "256 bytes, more than its 128-byte swizzle"),
])
def test_encode_tiled_says_which_rule_an_array_breaks(stub: Driver, args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(TensorMapError, match=re.escape(message)):
        encode_tiled(*args, driver=stub)


def test_maps_are_cached_and_launches_fall_back(stub: Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    """One encode per (dtype, ptr, shape, strides, box, swizzle); where no map describes the array a launch gets
    zeros (the kernel then copies with cp.async), also without the entry point; a driver's refusal still raises."""
    calls: list[int] = []

    class Counting:
        version = 13000

        def cuTensorMapEncodeTiled(self, *args: Any) -> int:
            calls.append(1)
            return int(stub.cuTensorMapEncodeTiled(*args))

        check = stub.check

    counting = Counting()
    first = launch_tensor_map("bfloat16", 0x1000, (64, 64), (64, 1), (64, 64), 128, counting)
    assert launch_tensor_map("bfloat16", 0x1000, (64, 64), (64, 1), (64, 64), 128, counting) is first
    assert len(calls) == 1 and words(first)[0] == 0x1000
    assert launch_tensor_map("bfloat16", 0x1000, (64, 64), (64, 1), (32, 64), 128, counting) != first
    assert len(calls) == 2
    for shape, strides in (((0, 64), (64, 1)), ((64, 64), (32, 1))):  # empty; overlapping rows
        assert launch_tensor_map("bfloat16", 0x1000, shape, strides, (64, 64), 128, counting) == NO_TENSOR_MAP
    assert len(calls) == 2
    with pytest.raises(TensorMapError, match="overlap"):  # remembered as no map by a launch: still an error here
        tensor_map("bfloat16", 0x1000, (64, 64), (32, 1), (64, 64), 128, counting)

    class Old:
        version = 11080
        cuTensorMapEncodeTiled = None

    with pytest.raises(TensorMapError, match=r"no cuTensorMapEncodeTiled, which needs a driver for CUDA 12\.0"):
        encode_tiled("float16", 0x2000, (64, 64), (64, 1), (64, 64), 128, Old())
    assert launch_tensor_map("float16", 0x2000, (64, 64), (64, 1), (64, 64), 128, Old()) == NO_TENSOR_MAP
    monkeypatch.setenv("STUB_TENSOR_MAP_FAIL", "1")
    with pytest.raises(CUDAError, match=r"cuTensorMapEncodeTiled"):
        launch_tensor_map("float16", 0x3000, (64, 64), (64, 1), (64, 64), 128, stub)


# --------------------------------------------------------------------------- the parameter kind and both launch paths

TMAP = ParamKind.tensormap("bfloat16", 2, "a", (128, 64), 128)
SIG = [("a", ParamKind.array("bfloat16", 2)), ("n", ParamKind.scalar("int32")), ("tj_tmap0", TMAP)]


def test_param_kind_round_trips_through_the_disk_cache_entry(tmp_path: Path) -> None:
    """The backend's spec -> the entry's params (marshal, through a DiskCache) -> the same ParamKind."""
    from tilejit.backends.base import KernelImage
    from tilejit.compiler.cache import DiskCache, cache_key

    spec = ("tensormap", "bfloat16", 2, "a", 128, 128, 64)
    image = KernelImage(backend="cuda", image=b"\0", kind="cubin", symbol="k", num_threads=384, shared_bytes=0,
                        params=(("a", ("array", "bfloat16", 2)), ("tj_tmap0", spec)), cache_identity="x")
    cache = DiskCache(tmp_path)
    key = cache_key("tma-test")
    cache.put(key, image.entry())
    entry = cache.get(key)
    assert entry is not None
    kinds = [(p[0], ParamKind.from_spec(p[1:])) for p in entry["params"]]
    assert kinds[1] == ("tj_tmap0", TMAP) and kinds[1][1].box == (128, 64) and kinds[1][1].swizzle == 128
    assert str(TMAP) == "tensormap<bfloat16, 2> of a (box 128x64, swizzle 128)"
    assert (TMAP.size, TMAP.align) == (128, 64)
    with pytest.raises(ValueError, match="spec"):
        ParamKind.from_spec(("tensormap", "bfloat16", 2, "a", 128, 64))  # one box dim short
    with pytest.raises(ValueError, match="box dims of 1 to 256"):
        ParamKind.tensormap("bfloat16", 2, "a", (512, 64), 128)


def test_derived_params_are_checked() -> None:
    assert derived_params(SIG) == (("tj_tmap0", TMAP, 0),)
    with pytest.raises(ValueError, match="tensor maps come last"):
        derived_params([SIG[0], SIG[2], SIG[1]])
    with pytest.raises(ValueError, match="its source 'a' is not a 2-d bfloat16 array parameter"):
        derived_params([("a", ParamKind.array("float16", 2)), SIG[2]])


class MapDriver(FakeDriver):
    """The launch stand-in of test_runtime_launch plus the stand-in driver's encoder."""

    def __init__(self, lib: ctypes.CDLL, encoder: Driver) -> None:
        super().__init__(lib)
        self.cuTensorMapEncodeTiled = encoder.cuTensorMapEncodeTiled


@pytest.mark.parametrize("passing", ["buffer", "pointers"])
def test_launches_pass_the_encoded_map(fake_lib: ctypes.CDLL, stub: Driver, passing: str) -> None:  # noqa: F811
    """A tensor map parameter takes no argument; the checked launches and the generated function alike pack the
    map of the array argument at a 64-byte aligned offset (zeros for an empty array) and hand it over through
    kernelParams, and say what a wrong call lacks by the arguments' names."""
    driver = MapDriver(fake_lib, stub)
    launcher = Launcher(fn(), SIG, block=384, driver=driver, param_passing=passing)
    assert [n for n, _ in launcher.params] == ["a", "n"] and launcher.offsets == (0, 40, 64)
    assert launcher.size == 192
    # either way asked, through kernelParams: ptxas aligns a 64-byte parameter's constant-bank address, whose
    # parameters start 16-byte aligned only, so only the driver knows where the map goes
    assert launcher.param_passing == "pointers"
    fake_lib.fake_expect_params(3, launcher.size)
    a = view(0x40000, (1000, 712), (712, 1), "bfloat16")
    want = encode_tiled("bfloat16", 0x40000, (1000, 712), (712, 1), (128, 64), 128, stub)
    for i in range(CHECKED_LAUNCHES + 2):  # checked, then generated
        launcher.launch_any_thread(1, (a, i))
        got = driver.params()
        assert got[64:192] == want and struct.unpack_from("<Qqqqqi", got) == (0x40000, 1000, 712, 712, 1, i)
    assert launcher.generated and "tensor_map0(a_ptr, (a_shape0, a_shape1), (a_stride0, a_stride1))" in \
        launcher.source
    empty = view(0x40000, (0, 712), (712, 1), "bfloat16")
    launcher.launch_any_thread(1, (empty, 0))
    assert driver.params()[64:192] == NO_TENSOR_MAP
    launcher.launch_checked(1, (a, 1))
    assert driver.params()[64:192] == want
    with pytest.raises(Exception, match=r"takes 2 argument\(s\) \(a, n\), got 3"):
        launcher.launch_checked(1, (a, 1, 2))


# --------------------------------------------------------------------------- generated kernels


@pytest.fixture
def ws_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Warp specialization on, TMA at its default (on), a fresh disk cache."""
    monkeypatch.setenv("TILEJIT_CUDA_WARP_SPECIALIZE", "1")
    monkeypatch.delenv("TILEJIT_CUDA_TMA", raising=False)
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))


def tmaps(ck: Any) -> list[tuple[Any, ...]]:
    """The tensor-map parameter specs of a generated kernel."""
    return [spec for _, spec in ck.params if spec[0] == "tensormap"]


def check_tma_ptx(ptx: str, dims: int = 2) -> None:
    """The PTX of a TMA producer: the copies, the byte-counting arrival, the maps' prefetch, two 64-byte aligned
    128-byte parameters, and the cp.async producer the kernel keeps for launches without maps."""
    assert f"cp.async.bulk.tensor.{dims}d.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx
    assert "mbarrier.arrive.expect_tx.shared::cta.b64" in ptx and ptx.count("prefetch.tensormap") == 2
    assert len(re.findall(r"\.param \.align 64 \.b8 \w+_param_\d+\[128\]", ptx)) == 2
    assert "cp.async.mbarrier.arrive.noinc.shared.b64" in ptx and "cp.async.cg.shared.global" in ptx


@pytest.mark.usefixtures("ws_on")
@pytest.mark.parametrize(("kernel", "dtype", "tiles"), [
    (matmul, "bfloat16", (128, 256, 64)), (matmul, "float16", (128, 256, 32)), (matmul, "bfloat16", (128, 128, 64)),
    (matmul_grouped, "float16", (256, 128, 64)), (matmul_grouped, "bfloat16", (128, 256, 64)),
])
def test_producer_copies_with_tma(kernel: Any, dtype: str, tiles: tuple[int, int, int]) -> None:
    """Two tensor maps after the user's parameters (A's box: BM rows by one swizzle span of K; B's: BK rows by one
    span of N), `const __grid_constant__` in the signature; one elected producer thread arms full[s] with the
    stage's bytes and copies each tile in boxes; the full barriers count 1 arrival with maps, 128 without."""
    bm, bn, bk = tiles
    art = compile_mm(kernel, dtype, tiles)
    ck = art.cuda_kernel()
    sw_a, sw_b = min(128, bk * 2), 128
    assert ck.params[-2:] == (("tj_tmap0", ("tensormap", dtype, 2, "a", sw_a, bm, sw_a // 2)),
                              ("tj_tmap1", ("tensormap", dtype, 2, "b", sw_b, bk, sw_b // 2)))
    src = ck.source
    assert "const __grid_constant__ tj::TensorMap tj_tmap0,\n    const __grid_constant__ tj::TensorMap tj_tmap1)" in src
    assert f"if (tj_tid == {2 * bm}) {{  // one thread issues every copy" in src
    assert "tj::mbar_expect_tx(k" in src and f", {(bm * bk + bk * bn) * 2});" in src
    assert f"tj::tma_tile<{bm}, {bk}, {sw_a}>(" in src and f"tj::tma_tile<{bk}, {bn}, {sw_b}>(" in src
    assert re.search(r"tj::mbar_init\(k\d+_full \+ s, k\d+_tma \? 1 : 128\);", src)
    assert re.search(r"if \(!k\d+_tma\) tj::Wgmma<[^>]*>::fence_smem\(\);", src)  # TMA writes via the async proxy
    check_tma_ptx(art.ptx())


@pytest.mark.usefixtures("ws_on")
@pytest.mark.parametrize("tiles", [(128, 256, 64), (256, 128, 64)])
def test_ptxas_no_spills_with_tma(toolkit: Any, tiles: tuple[int, int, int]) -> None:
    """ptxas -v, with each CUDA 12+ NVRTC: the launch bound's registers (168 at 384 threads, 96 at 640) and no
    spills, TMA and cp.async producers in one kernel; no wgmma serialization."""
    from tilejit.backends.cuda.plan import ws_registers
    from tilejit.bindings.nvrtc import load_nvrtc
    from tilejit.compiler.nvrtc import compile_cuda
    from tilejit.compiler.targets import parse_target

    if toolkit.major < 12:
        pytest.skip("sm_90a needs NVRTC 12.0 or newer")
    ck = compile_mm(matmul, "bfloat16", tiles).cuda_kernel()
    assert len(tmaps(ck)) == 2
    log = compile_cuda(ck.source, name=f"{ck.name}.cu", headers=ck.headers, target=parse_target("sm_90a"),
                       output="cubin", options=("-Xptxas=-v",), nvrtc=load_nvrtc(str(toolkit.nvrtc)),
                       cache=False).log
    regs = re.search(r"Used (\d+) registers", log)
    assert regs is not None and int(regs.group(1)) == (ws_registers(2 * tiles[0]) or (0,))[0], log
    assert "0 bytes spill stores, 0 bytes spill loads" in log and "C7515" not in log, log


@pytest.mark.usefixtures("ws_on")
@pytest.mark.parametrize(("ta", "tb"), [(True, False), (False, True), (True, True)])
def test_transposed_operands_use_tma(ta: bool, tb: bool) -> None:
    """A stored (K, M) is boxed as (BK rows, one span of M); B stored (N, K) as (BN rows, one span of K)."""
    art = tj.compile(matmul_t, (tj.bfloat16[:, ::1], tj.bfloat16[:, ::1], tj.float32[:, ::1]),
                     constants={"BM": 128, "BN": 256, "BK": 64, "TRANS_A": ta, "TRANS_B": tb}, target="sm_90a",
                     backend="cuda")
    ck = art.cuda_kernel()
    box_a = (64, 64) if ta else (128, 64)
    box_b = (256, 64) if tb else (64, 64)
    assert tmaps(ck) == [("tensormap", "bfloat16", 2, "a", 128, *box_a), ("tensormap", "bfloat16", 2, "b", 128, *box_b)]
    check_tma_ptx(art.ptx())
    assert art.cubin()


@pytest.mark.usefixtures("ws_on")
@pytest.mark.parametrize(("dtype", "out", "tiles"), [("bfloat16", "float32", (128, 256, 64)),
                                                     ("bfloat16", "bfloat16", (128, 256, 32)),
                                                     ("float16", "float16", (256, 128, 64))])
def test_batched_operands_use_3d_maps(dtype: str, out: str, tiles: tuple[int, int, int]) -> None:
    """(1, R, C) loads of 3-D arrays: 3-D maps with a box of 1 along the batch (zero-filled past the last matrix),
    the warp-specialized loop of the 2-D kernel, and its epilogue: the (1, BM, BN) reshape of the accumulator keeps
    the wgmma layout, stored from registers (no 8-way bank-conflicted trip through shared memory, no named
    barrier); ptxas: the launch bound's registers, no spills."""
    from tilejit.backends.cuda.plan import ws_registers
    from tilejit.compiler.nvrtc import compile_cuda
    from tilejit.compiler.targets import parse_target

    bm, bn, bk = tiles
    entry, _, consumers = ws_registers(2 * bm) or (0, 0, 0)
    t_in, t_out = getattr(tj, dtype), getattr(tj, out)
    art = tj.compile(matmul_batched, (t_in[:, :, ::1], t_in[:, :, ::1], t_out[:, :, ::1]),
                     constants={"BM": bm, "BN": bn, "BK": bk}, target="sm_90a", backend="cuda")
    ck = art.cuda_kernel()
    sw_a = min(128, bk * 2)
    assert tmaps(ck) == [("tensormap", dtype, 3, "a", sw_a, 1, bm, sw_a // 2),
                         ("tensormap", dtype, 3, "b", 128, 1, bk, 64)]
    src, ptx = ck.source, art.ptx()
    assert ck.num_threads == 2 * bm + 128 and f"tj::regs_inc<{consumers}>();" in src
    assert f"tj::tma_tile<{bm}, {bk}, {sw_a}>(" in src and "tj::remap" not in src
    assert f"tj::store<2, tj::Shape<1, {bm}, {bn}>>(u_c, " in src
    check_tma_ptx(ptx, dims=3)
    assert "bar.sync 1" not in ptx and len(re.findall(r"\bbar(?:rier)?\.sync\b", ptx)) == 1
    log = compile_cuda(ck.source, name=f"{ck.name}.cu", headers=ck.headers, target=parse_target("sm_90a"),
                       output="cubin", options=("-Xptxas=-v",), cache=False).log
    regs = re.search(r"Used (\d+) registers", log)
    assert regs is not None and int(regs.group(1)) == entry, log
    assert "0 bytes spill stores, 0 bytes spill loads" in log and "C7515" not in log, log


def _generate(hints: dict[str, ArrayHint], target: str = "sm_90a", **kw: Any) -> Any:
    """The CUDA C++ of examples/matmul.py's matmul (bf16, 128x256x64) for these launch facts."""
    from tilejit.api.compile import Artifact
    from tilejit.backends.cuda.codegen import generate
    from tilejit.compiler.targets import parse_target

    art = compile_mm(matmul, "bfloat16", (128, 256, 64), target=target)
    assert isinstance(art, Artifact)
    return generate(art.ir(), target=parse_target(target), hints=hints, **kw)


@pytest.mark.usefixtures("ws_on")
def test_arrays_without_the_facts_get_the_cp_async_producer(monkeypatch: pytest.MonkeyPatch) -> None:
    """An operand whose strides are not known to be in [0, 2**31) (no ``index32`` in the specialization's key: a
    huge or negative stride) keeps the cp.async producer and takes no map; so does TILEJIT_CUDA_TMA=0, which
    the disk cache key tells apart."""
    from tilejit.backends.cuda_backend import CudaBackend

    ok = ArrayHint(unit_stride=True, aligned16=True, index32=True)
    wide = ArrayHint(unit_stride=True, aligned16=True, index32=False)
    assert len(tmaps(_generate({"a": ok, "b": ok, "c": ok}))) == 2
    ck = _generate({"a": ok, "b": wide, "c": ok})
    assert not tmaps(ck) and "tj::regs_dec<40>" in ck.source and "tma_tile" not in ck.source
    assert "tj::cp_async_tile_by<" in ck.source
    assert not tmaps(_generate({"a": ok, "b": ok, "c": ok}, tma=False))
    on = CudaBackend().cache_identity()
    monkeypatch.setenv("TILEJIT_CUDA_TMA", "0")
    assert not tmaps(compile_mm(matmul, "bfloat16", (128, 256, 64)).cuda_kernel())
    assert CudaBackend().cache_identity() != on


@pytest.mark.usefixtures("ws_on")
@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_targets_without_wgmma_take_no_maps(target: str) -> None:
    ck = compile_mm(matmul, "float16", (128, 128, 64), target=target).cuda_kernel()
    assert not tmaps(ck) and "TensorMap tj_tmap" not in ck.source


@pytest.mark.usefixtures("ws_on")
@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_cuda11_nvrtc_is_unaffected(target: str) -> None:
    """NVRTC 11 cannot target sm_90a (a launch on an H100 then builds for sm_90): the kernels it compiles have no
    TMA, and the headers' TMA helpers compile away."""
    from conftest import toolkits

    from tilejit.bindings.nvrtc import load_nvrtc
    from tilejit.compiler.nvrtc import compile_cuda

    found = [tk for tk in toolkits() if tk.major == 11]
    if not found:
        pytest.skip("no CUDA 11 toolkit in TILEJIT_TEST_CUDA_ROOTS or .ci-cache/")
    art = compile_mm(matmul, "bfloat16", (128, 128, 64), target=target)
    ck = art.cuda_kernel()
    assert not tmaps(ck)
    prog = compile_cuda(ck.source, name=f"{ck.name}.cu", headers=ck.headers, target=art.target, output="ptx",
                        nvrtc=load_nvrtc(str(found[0].nvrtc)), cache=False)
    ptx = prog.code.decode() if isinstance(prog.code, bytes) else prog.code
    assert "mma.sync.aligned" in ptx and "cp.async.bulk.tensor" not in ptx
