"""Per-kernel performance hints ``num_ctas`` (CTAs per cluster) and ``occupancy`` (CTAs per SM): validation at
``@tj.kernel``, ``tj.compile`` and the CLI, the disk-cache key, the Tile IR entry hints (``num_cta_in_cga`` not on
sm_8x), tileiras's CUBIN cluster (EIATTR_CTA_PER_CLUSTER), ``__launch_bounds__`` on CUDA C++, and the launch's
refusal of a grid that does not hold whole clusters."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import tilejit as tj
from tilejit.backends.base import KernelHints
from tilejit.backends.tileir.lower.occupancy import entry_hints
from tilejit.errors import CUDAError, LaunchError
from tilejit.runtime.launch import Launcher, ParamKind, check_cluster_grid

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
from matmul import matmul  # noqa: E402
from softmax import softmax  # noqa: E402


def _plain(x, y):
    """A kernel body for the decorator checks."""
    tj.store(y, 0, tj.load(x, 0, (16,)))


MATMUL_SIG = (tj.float16[:, ::1], tj.float16[:, ::1], tj.float32[:, ::1])
MATMUL_CONSTS = {"BM": 128, "BN": 128, "BK": 64}
SOFTMAX_SIG = (tj.float32[:, ::1], tj.float32[:, ::1])


def _matmul(target: str, backend: str = "cuda", **hints: Any) -> Any:
    return tj.compile(matmul, MATMUL_SIG, constants=MATMUL_CONSTS, target=target, backend=backend, **hints)


def _hints_printed(text: str) -> list[str]:
    return re.findall(r"optimization_hints=<[^>]*>", text)


# ------------------------------------------------------------------------------------------------ validation


@pytest.mark.parametrize(("kw", "error", "message"), [
    ({"num_ctas": 3}, ValueError, "num_ctas must be a power of two from 1 to 16 (CTAs per cluster), got 3"),
    ({"num_ctas": 32}, ValueError, "num_ctas must be a power of two from 1 to 16 (CTAs per cluster), got 32"),
    ({"num_ctas": 0}, ValueError, "num_ctas must be a power of two from 1 to 16 (CTAs per cluster), got 0"),
    ({"num_ctas": True}, TypeError, "num_ctas must be an int, got True"),
    ({"num_ctas": 2.0}, TypeError, "num_ctas must be an int, got 2.0"),
    ({"occupancy": 0}, ValueError, "occupancy must be an int from 1 to 32 (CTAs per SM), got 0"),
    ({"occupancy": 33}, ValueError, "occupancy must be an int from 1 to 32 (CTAs per SM), got 33"),
    ({"occupancy": False}, TypeError, "occupancy must be an int, got False"),
    ({"occupancy": "2"}, TypeError, "occupancy must be an int, got '2'"),
])
def test_bad_hints_are_refused_naming_where(kw: dict[str, Any], error: type[Exception], message: str) -> None:
    """Each entry point names itself and the hint: the decorator with arguments, the decorator applied, tj.compile."""
    name = next(iter(kw))
    with pytest.raises(error, match="^" + re.escape(f"@tj.kernel({name}=...): {message}") + "$"):
        tj.kernel(**kw)
    with pytest.raises(error, match="^" + re.escape(f"@tj.kernel({name}=...) of _plain: {message}") + "$"):
        tj.kernel(_plain, **kw)
    with pytest.raises(error, match="^" + re.escape(f"tj.compile(_plain): {message}") + "$"):
        tj.compile(_plain, (tj.float32[:], tj.float32[:]), target="sm_90", **kw)


def test_good_hints_are_kept_on_the_kernel_and_artifact() -> None:
    """Valid values (numpy ints too) are kept as ints; tj.compile's own win over the kernel's."""
    k = tj.kernel(num_ctas=np.int64(4), occupancy=2)(_plain)
    assert (k.num_ctas, k.occupancy) == (4, 2) and type(k.num_ctas) is int
    art = tj.compile(k, (tj.float32[:], tj.float32[:]), target="sm_90", backend="cuda")
    assert (art.num_ctas, art.occupancy) == (4, 2)
    assert art.kernel_hints == KernelHints(num_ctas=4, occupancy=2)
    assert "num_ctas=4, occupancy=2" in repr(art)
    art = tj.compile(k, (tj.float32[:], tj.float32[:]), target="sm_90", backend="cuda", occupancy=1)
    assert (art.num_ctas, art.occupancy) == (4, 1)
    plain = tj.compile(_plain, (tj.float32[:], tj.float32[:]), target="sm_90", backend="cuda")
    assert plain.kernel_hints == KernelHints() and "num_ctas=None, occupancy=None" in repr(plain)


# ------------------------------------------------------------------------------------------------ cache key


def test_hints_are_part_of_the_disk_cache_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Specializations differing only in a hint get different keys and different disk-cache entries."""
    from tilejit.api.loader import _entry, _specialization_key

    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TILEJIT_CACHE", "1")

    def art(**kw: Any) -> Any:
        return tj.compile(softmax, SOFTMAX_SIG, constants={"ROWS": 1, "BLOCK": 1024}, target="sm_90", backend="cuda",
                          **kw)

    variants = [art(), art(occupancy=2), art(occupancy=3), art(num_ctas=2), art(num_ctas=2, occupancy=2)]
    keys = [_specialization_key(a, "fingerprint") for a in variants]
    assert len(set(keys)) == len(keys)
    assert _specialization_key(art(occupancy=2), "fingerprint") == keys[1]
    ptx = [_entry(a, "fingerprint", True)["image"] for a in variants[:3]]
    assert b".minnctapersm 2" in ptx[1] and b".minnctapersm 3" in ptx[2] and b".minnctapersm" not in ptx[0]
    from tilejit.compiler.cache import default_cache

    cache = default_cache()
    for key, image in zip(keys[:3], ptx):
        entry = cache.get(key)
        assert entry is not None and entry["image"] == image and entry["cluster"] == 1


# ------------------------------------------------------------------------------------------------ Tile IR


def test_entry_hints_rule() -> None:
    """The user's occupancy wins over the rule (mma kernels included); num_ctas > 1 becomes num_cta_in_cga except
    on sm_8x and with no target, where it is dropped with a debug log line."""
    fn = tj.compile(softmax, SOFTMAX_SIG, constants={"ROWS": 1, "BLOCK": 4096}, target="sm_90").ir()
    assert entry_hints(fn, "sm_90") == {"sm_90": {"occupancy": 4}}  # the rule's own choice
    assert entry_hints(fn, "sm_90", KernelHints(occupancy=1)) == {"sm_90": {"occupancy": 1}}
    assert entry_hints(fn, "sm_100", KernelHints(occupancy=2)) == {"sm_100": {"occupancy": 2}}
    assert entry_hints(fn, "sm_90", KernelHints(num_ctas=1)) == {"sm_90": {"occupancy": 4}}
    assert entry_hints(fn, "sm_100", KernelHints(num_ctas=4)) == {"sm_100": {"num_cta_in_cga": 4}}
    assert entry_hints(fn, "sm_80", KernelHints(num_ctas=2)) == {"sm_80": {"occupancy": 4}}
    assert entry_hints(fn, "", KernelHints(num_ctas=2, occupancy=3)) == {"default": {"occupancy": 3}}
    mm = _matmul("sm_90").ir()
    assert entry_hints(mm, "sm_90") == {}
    assert entry_hints(mm, "sm_90", KernelHints(num_ctas=2, occupancy=1)) == {
        "sm_90": {"num_cta_in_cga": 2, "occupancy": 1}}


def test_num_ctas_dropped_on_sm80_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    """sm_8x runs one CTA per cluster: the hint is dropped, and a debug line under ``tilejit`` says so."""
    fn = _matmul("sm_80").ir()
    with caplog.at_level(logging.DEBUG, logger="tilejit"):
        assert entry_hints(fn, "sm_80", KernelHints(num_ctas=2)) == {}
    assert any(r.name.startswith("tilejit.") and r.levelno == logging.DEBUG
               and "num_ctas=2 dropped for sm_80" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(("target", "printed"), [
    ("sm_90", "optimization_hints=<sm_90 = {num_cta_in_cga = 2, occupancy = 1}>"),
    ("sm_100", "optimization_hints=<sm_100 = {num_cta_in_cga = 2, occupancy = 1}>"),
    ("sm_80", "optimization_hints=<sm_80 = {occupancy = 1}>"),
])
def test_tileir_text_carries_the_hints(target: str, printed: str) -> None:
    """The text form prints the entry's hints: cluster and occupancy on sm_90/sm_100, occupancy alone on sm_80."""
    art = _matmul(target, num_ctas=2, occupancy=1)
    assert _hints_printed(art.tileir_text()) == [printed]
    assert _hints_printed(_matmul(target).tileir_text()) == []  # mma kernel, no user hints: none


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_100"])
def test_tileiras_accepts_the_hinted_modules(target: str, tileir_env: Any, tmp_path: Path) -> None:
    """tileiras compiles each hinted module; its CUBIN states the cluster (EIATTR_CTA_PER_CLUSTER = (2, 1, 1))
    where the hint was written, none on sm_80; tileirdisasm reads the bytecode back with the same hints."""
    from tilejit.backends.tileir_backend import cluster_shape

    art = _matmul(target, "tileir", num_ctas=2, occupancy=1)
    image = art.image()
    assert image.image[:4] == b"\x7fELF"
    expected = 1 if target == "sm_80" else 2
    assert cluster_shape(image.image, image.symbol) == (expected, 1, 1)
    assert image.cluster == expected and image.entry()["cluster"] == expected
    plain = _matmul(target, "tileir").image()
    assert cluster_shape(plain.image, plain.symbol) == (1, 1, 1) and plain.cluster == 1
    disasm = Path(tileir_env.tileiras).with_name("tileirdisasm")
    if not disasm.exists():
        pytest.skip(f"no tileirdisasm beside {tileir_env.tileiras}")
    path = tmp_path / "k.tileirbc"
    path.write_bytes(art.tileir_bytecode())
    proc = subprocess.run([str(disasm), str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert _hints_printed(proc.stdout) == _hints_printed(art.tileir_text())


# ------------------------------------------------------------------------------------------------ CUDA C++


def test_cuda_launch_bounds_take_the_users_occupancy(caplog: pytest.LogCaptureFixture) -> None:
    """``occupancy`` becomes ``__launch_bounds__``'s second argument (over the plan's own choice); ``num_ctas``
    changes nothing in CUDA C++ (its kernels use no clusters) and is logged at debug level."""
    def source(**kw: Any) -> str:
        art = tj.compile(softmax, SOFTMAX_SIG, constants={"ROWS": 1, "BLOCK": 4096}, target="sm_90", backend="cuda",
                         **kw)
        return art.cuda_source()

    plain = source()
    threads = re.search(r"__launch_bounds__\((\d+)", plain)
    assert threads is not None
    nt = threads.group(1)
    assert f"__launch_bounds__({nt}, 3)" in source(occupancy=3)
    assert f"__launch_bounds__({nt}, 1)" in source(occupancy=1)
    with caplog.at_level(logging.DEBUG, logger="tilejit"):
        assert source(num_ctas=2) == plain
    assert any("num_ctas=2 ignored" in r.getMessage() for r in caplog.records)
    mm = tj.compile(matmul, MATMUL_SIG, constants=MATMUL_CONSTS, target="sm_80", backend="cuda", occupancy=1)
    assert re.search(r"__launch_bounds__\(\d+, 1\) matmul\(", mm.cuda_source())


# ------------------------------------------------------------------------------------------------ CLI


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tilejit", *args], capture_output=True, text=True,
                          encoding="utf-8", timeout=300)


def test_cli_flags_reach_the_artifact(tmp_path: Path) -> None:
    """``--num-ctas``/``--occupancy`` reach the compile: in the Tile IR text and in the CUDA C++; bad values and
    CUDA C++ inputs are usage errors."""
    base = ["compile", str(EXAMPLES / "matmul.py"), "--kernel", "matmul", "--signature",
            "f16[:,::1], f16[:,::1], f32[:,::1]", "-C", "BM=128", "-C", "BN=128", "-C", "BK=64", "-o", str(tmp_path)]
    proc = _cli(*base, "--arch", "sm_90,sm_80", "--emit", "tileir", "--num-ctas", "2", "--occupancy", "1")
    assert proc.returncode == 0, proc.stderr
    assert _hints_printed((tmp_path / "matmul.matmul.sm_90.tileir").read_text()) == [
        "optimization_hints=<sm_90 = {num_cta_in_cga = 2, occupancy = 1}>"]
    assert _hints_printed((tmp_path / "matmul.matmul.sm_80.tileir").read_text()) == [
        "optimization_hints=<sm_80 = {occupancy = 1}>"]
    proc = _cli(*base, "--arch", "sm_80", "--emit", "cuda", "--backend", "cuda", "--occupancy", "1")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"__launch_bounds__\(\d+, 1\) matmul\(", (tmp_path / "matmul.matmul.sm_80.cu").read_text())
    proc = _cli(*base, "--arch", "sm_90", "--emit", "tileir", "--num-ctas", "3")
    assert proc.returncode == 2
    assert "--num-ctas: num_ctas must be a power of two from 1 to 16 (CTAs per cluster), got 3" in proc.stderr
    proc = _cli(*base, "--arch", "sm_90", "--emit", "tileir", "--occupancy", "40")
    assert proc.returncode == 2 and "--occupancy: occupancy must be an int from 1 to 32 (CTAs per SM), got 40" in \
        proc.stderr
    cu = tmp_path / "k.cu"
    cu.write_text('extern "C" __global__ void k() {}\n')
    proc = _cli("compile", str(cu), "--arch", "sm_90", "--occupancy", "2", "-o", str(tmp_path))
    assert proc.returncode == 2 and "--occupancy applies to Python files only" in proc.stderr


# ------------------------------------------------------------------------------------------------ launch


def test_check_cluster_grid_message() -> None:
    """A grid whose x extent is not a multiple of the cluster is refused naming the kernel, grid and num_ctas."""
    check_cluster_grid("matmul", (4, 5, 1), 2)
    check_cluster_grid("matmul", (3, 5, 1), 1)
    check_cluster_grid("matmul", (16, 1, 1), 8)
    with pytest.raises(LaunchError, match="^" + re.escape(
            "kernel matmul: grid (3, 5, 1) is not a multiple of the cluster of num_ctas=2 CTAs along x; launch a "
            "grid whose x extent is a multiple of 2 or drop num_ctas") + "$"):
        check_cluster_grid("matmul", (3, 5, 1), 2)
    with pytest.raises(LaunchError, match=re.escape("grid (12, 1, 1) is not a multiple of the cluster of num_ctas=8")):
        check_cluster_grid("k", (12, 1, 1), 8)


class _RefusingDriver:
    """A driver whose launches fail with CUDA_ERROR_INVALID_CLUSTER_SIZE (912) when the grid's x extent is not a
    multiple of 2, as the real one does for a kernel with a required cluster of 2; counts launches."""

    def __init__(self, with_ex: bool = True) -> None:
        import ctypes

        self.launches = 0

        @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
        def launch_ex(config: int, f: int, params: int, extra: int) -> int:
            return self._launch(ctypes.c_uint.from_address(config).value)

        @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *(ctypes.c_uint,) * 7, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.c_void_p)
        def launch(f: int, gx: int, *rest: Any) -> int:
            return self._launch(gx)

        self.cuLaunchKernelEx = launch_ex if with_ex else None
        self.cuLaunchKernel = launch

    def _launch(self, gx: int) -> int:
        self.launches += 1
        return 912 if gx % 2 else 0

    def check(self, status: int, function: str, detail: str = "") -> None:
        if status:
            raise CUDAError(function, status, "CUDA_ERROR_INVALID_CLUSTER_SIZE", "invalid cluster size", detail)


@pytest.mark.parametrize("with_ex", [True, False])
def test_launcher_refuses_grids_of_partial_clusters(with_ex: bool) -> None:
    """The checked launch and the generated fast path (with cuLaunchKernelEx or cuLaunchKernel) refuse before
    calling the driver; a driver error for such a grid becomes the same message, never a bare CUDA error; a
    launcher without a cluster leaves the driver's error as it is."""
    driver = _RefusingDriver(with_ex)
    params = [("n", ParamKind.scalar("int32"))]
    launcher = Launcher(SimpleNamespace(name="mm_sym", handle=1), params, block=128, driver=driver, cluster=2,
                        kernel_name="matmul")
    launcher.launch_checked((4, 3), [1])
    assert driver.launches == 1
    message = "^" + re.escape("kernel matmul: grid (3, 5, 1) is not a multiple of the cluster of num_ctas=2 CTAs")
    with pytest.raises(LaunchError, match=message):
        launcher.launch_checked((3, 5), [1])
    assert driver.launches == 1  # refused before the driver saw it
    launcher.launch((4, 5, 1), [1])  # the generated fast path
    assert driver.launches == 2
    with pytest.raises(LaunchError, match=message):
        launcher.launch((3, 5, 1), [1])
    with pytest.raises(LaunchError, match=message):
        launcher.launch((3, 5), [1])
    assert driver.launches == 2  # refused before the driver saw it
    launcher.launch((6, 5, 1), [1])
    assert driver.launches == 3
    with pytest.raises(LaunchError, match=message):  # had the driver refused it: the error is still ours
        launcher.failed(912, (3, 5, 1), [1], None)
    plain = Launcher(SimpleNamespace(name="k", handle=1), params, block=128, driver=driver)
    with pytest.raises(CUDAError, match="INVALID_CLUSTER_SIZE"):
        plain.launch_checked((3, 5), [1])
    with pytest.raises(ValueError, match="cluster must be a positive int, got 0"):
        Launcher(SimpleNamespace(name="k", handle=1), params, block=128, driver=driver, cluster=0)


# ------------------------------------------------------------------------------------------------ GPU


def _bf16(rng: np.random.Generator, shape: tuple[int, int]) -> tuple[np.ndarray, Any]:
    """Random bfloat16 values: (their exact values as float64, a device array of their bits)."""
    x = rng.standard_normal(shape).astype(np.float32)
    bits = x.view(np.uint32)
    upper = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    exact = (upper.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    raw = tj.asarray(upper)
    return exact, tj.DeviceArray(shape, "bfloat16", ptr=raw.ptr, base=raw)


@pytest.mark.gpu
@pytest.mark.own_backend(reason="a Tile IR kernel: clusters are a Tile IR hint")
def test_tile_ir_matmul_with_clusters_on_even_and_odd_grids(tileir_env: Any) -> None:
    """A Tile IR matmul with num_ctas=2 on an sm_90+ GPU: correct against numpy on a grid whose x extent is even;
    refused with the cluster message on an odd one, on the checked path and, after the fast path took over,
    on the fast path too (nothing launched: the output stays poisoned)."""
    from tilejit.runtime.device import get_device
    from tilejit.runtime.launch import CHECKED_LAUNCHES

    if get_device().compute_capability < (9, 0):
        pytest.skip("clusters need sm_90+ (Tile IR drops num_ctas on sm_8x)")
    mm = tj.kernel(num_ctas=2, backend="tileir")(matmul.func)
    bm, bn, bk = 128, 128, 64
    rng = np.random.default_rng()
    m, n, k = 4 * bm - 37, 3 * bn - 5, 3 * bk + 19  # 4 row tiles (even), none a tile multiple
    a, da = _bf16(rng, (m, k))
    b, db = _bf16(rng, (k, n))
    dc = tj.asarray(np.full((m, n), np.nan, np.float32))
    grid = (tj.cdiv(m, bm), tj.cdiv(n, bn))
    assert grid[0] % 2 == 0
    mm[grid](da, db, dc, BM=bm, BN=bn, BK=bk)
    np.testing.assert_allclose(dc.numpy(), a @ b, rtol=2e-3, atol=2e-3)

    m_odd = 3 * bm - 11  # 3 row tiles: not whole clusters of 2
    _, da2 = _bf16(rng, (m_odd, k))
    dc2 = tj.asarray(np.full((m_odd, n), np.nan, np.float32))
    odd = (tj.cdiv(m_odd, bm), tj.cdiv(n, bn))
    message = "^" + re.escape(f"kernel matmul: grid ({odd[0]}, {odd[1]}, 1) is not a multiple of the cluster "
                              "of num_ctas=2 CTAs along x; launch a grid whose x extent is a multiple of 2 or drop "
                              "num_ctas") + "$"
    with pytest.raises(LaunchError, match=message):
        mm[odd](da2, db, dc2, BM=bm, BN=bn, BK=bk)
    for _ in range(CHECKED_LAUNCHES + 2):  # the same specialization goes on to its generated fast path
        mm[grid](da, db, dc, BM=bm, BN=bn, BK=bk)
    with pytest.raises(LaunchError, match=message):
        mm[odd](da2, db, dc2, BM=bm, BN=bn, BK=bk)
    get_device().synchronize()
    assert np.isnan(dc2.numpy()).all()
    np.testing.assert_allclose(dc.numpy(), a @ b, rtol=2e-3, atol=2e-3)
