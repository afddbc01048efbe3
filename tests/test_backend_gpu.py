"""Generated kernels run on the GPU against numpy: hand-built IR → CUDA C++ → NVRTC → raw driver calls.

Needs only a CUDA driver, an NVRTC and numpy (ml_dtypes for bfloat16 host arrays). Outputs are
poisoned before each launch; sizes are not multiples of the tiles so every bounds check runs.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from test_backend_irbuild import IRBuilder, arr, cdiv, layer_norm, matmul, row_sum, softmax, vector_add

from tilejit.backends.cuda.codegen import ArrayHint, CudaKernel, generate
from tilejit.language.ir import ops as O
from tilejit.language.ir.types import (
    BY_NAME,
    DType,
    TileType,
    bfloat16,
    bool_,
    float16,
    float32,
    float64,
    int8,
    int32,
    int64,
    scalar,
    uint8,
    uint32,
    uint64,
)

pytestmark = pytest.mark.gpu


# ----------------------------------------------------------------------------- a minimal driver harness


class Driver:
    """Just enough of the CUDA driver API to load a CUBIN, move numpy arrays and launch."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.check(self.lib.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self.check(self.lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        self.ctx = ctypes.c_void_p()
        self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev), "cuDevicePrimaryCtxRetain")
        self.check(self.lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.check(self.lib.cuDeviceGetAttribute(ctypes.byref(major), 75, dev), "attr")
        self.check(self.lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev), "attr")
        self.arch = major.value * 10 + minor.value

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(name))
            raise RuntimeError(f"{what} failed: {name.value!r} ({rc})")

    def alloc(self, host: np.ndarray) -> int:
        ptr = ctypes.c_uint64()
        self.check(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(max(host.nbytes, 16))), "cuMemAlloc")
        if host.nbytes:
            self.check(self.lib.cuMemcpyHtoD_v2(ptr, host.ctypes.data_as(ctypes.c_void_p),
                                                ctypes.c_size_t(host.nbytes)), "cuMemcpyHtoD")
        return ptr.value

    def fetch(self, ptr: int, like: np.ndarray) -> np.ndarray:
        out = np.empty_like(like)
        self.check(self.lib.cuMemcpyDtoH_v2(out.ctypes.data_as(ctypes.c_void_p), ctypes.c_uint64(ptr),
                                            ctypes.c_size_t(out.nbytes)), "cuMemcpyDtoH")
        return out

    def free(self, ptr: int) -> None:
        self.lib.cuMemFree_v2(ctypes.c_uint64(ptr))

    def load(self, cubin: bytes, name: str) -> tuple[ctypes.c_void_p, ctypes.c_void_p]:
        mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(self.lib.cuModuleLoadData(ctypes.byref(mod), cubin), "cuModuleLoadData")
        self.check(self.lib.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()), "cuModuleGetFunction")
        return mod, fn

    def launch(self, fn: ctypes.c_void_p, grid: tuple[int, int, int], ck: CudaKernel, params: list[Any]) -> None:
        if ck.shared_bytes > 48 * 1024:
            self.check(self.lib.cuFuncSetAttribute(fn, 8, ck.shared_bytes), "cuFuncSetAttribute")
        ptrs = (ctypes.c_void_p * len(params))(*[ctypes.cast(ctypes.pointer(p), ctypes.c_void_p) for p in params])
        self.check(self.lib.cuLaunchKernel(fn, *grid, ck.num_threads, 1, 1, ck.shared_bytes, None, ptrs, None),
                   "cuLaunchKernel")
        self.check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")


@functools.cache
def driver() -> Driver:
    return Driver()


_SCALAR_CTYPES: dict[str, Any] = {
    "bool": ctypes.c_bool, "int8": ctypes.c_int8, "int16": ctypes.c_int16, "int32": ctypes.c_int32,
    "int64": ctypes.c_int64, "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16, "uint32": ctypes.c_uint32,
    "uint64": ctypes.c_uint64, "float32": ctypes.c_float, "float64": ctypes.c_double,
}


def np_dtype(dt: DType) -> Any:
    if dt == bfloat16:
        ml = pytest.importorskip("ml_dtypes")
        return ml.bfloat16
    return np.dtype(dt.name)


def run(fn: O.Function, grid: tuple[int, ...], args: dict[str, Any], *, hints: bool = True,
        num_threads: int | None = None, arch: int | None = None) -> dict[str, np.ndarray]:
    """Compile ``fn`` for this GPU, launch it on ``args`` (numpy arrays or scalars) and return the arrays."""
    from tilejit.compiler.nvrtc import compile_cuda
    from tilejit.compiler.targets import parse_target

    drv = driver()
    target = parse_target(arch or drv.arch)
    host = {k: np.ascontiguousarray(v) for k, v in args.items() if isinstance(v, np.ndarray)}
    hint_map = {k: hint_for(a) for k, a in host.items()} if hints else {}
    ck = generate(fn, target=target, num_threads=num_threads, hints=hint_map)
    output = "cubin" if target.number == drv.arch else "ptx"  # other archs: PTX that the driver JIT-compiles
    prog = compile_cuda(ck.source, name=f"{ck.name}.cu", headers=ck.headers, target=target, output=output,
                        cache=False)
    mod, kfn = drv.load(prog.code + (b"\0" if output == "ptx" else b""), ck.name)
    ptrs: dict[str, int] = {}
    params: list[Any] = []
    try:
        for pname, spec in ck.params:
            if spec[0] == "array":
                a = host[pname]
                ptrs[pname] = drv.alloc(a)
                nd = a.ndim

                class Arr(ctypes.Structure):
                    _fields_ = [("ptr", ctypes.c_uint64), ("shape", ctypes.c_int64 * nd),
                                ("stride", ctypes.c_int64 * nd)]

                params.append(Arr(ptrs[pname], (ctypes.c_int64 * nd)(*a.shape),
                                  (ctypes.c_int64 * nd)(*[s // a.itemsize for s in a.strides])))
            else:
                params.append(_SCALAR_CTYPES[spec[1]](args[pname]))
        g = tuple(grid) + (1,) * (3 - len(grid))
        drv.launch(kfn, g, ck, params)  # type: ignore[arg-type]
        return {k: drv.fetch(p, host[k]) for k, p in ptrs.items()}
    finally:
        for p in ptrs.values():
            drv.free(p)
        drv.lib.cuModuleUnload(mod)


def hint_for(a: np.ndarray) -> ArrayHint:
    """What the launcher would report: unit innermost stride, 16-byte aligned rows (device pointers
    from cuMemAlloc are 256-byte aligned)."""
    unit = a.ndim > 0 and (a.strides[-1] == a.itemsize or a.shape[-1] <= 1)
    return ArrayHint(unit_stride=unit, aligned16=all(s % 16 == 0 for s in a.strides[:-1]))


def poison(shape: tuple[int, ...], dt: DType) -> np.ndarray:
    if dt.is_float:
        return np.full(shape, np.nan, dtype=np.float32).astype(np_dtype(dt))
    return np.full(shape, 0x5A if dt.bits >= 8 else 1, dtype=np_dtype(dt))


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert not np.isnan(g).any(), "NaN (unwritten or wrong) elements in the output"
    return float(np.linalg.norm(g - w) / max(np.linalg.norm(w), 1e-30))


@pytest.fixture
def rng() -> Iterator[np.random.Generator]:
    yield np.random.default_rng(1234)


# ----------------------------------------------------------------------------- the example kernels


@pytest.mark.parametrize("hints", [True, False])
@pytest.mark.parametrize("dt", [float32, float16, int64])
def test_vector_add(dt: DType, hints: bool, rng: np.random.Generator) -> None:
    n, tile = 100_003, 1024
    x = (rng.standard_normal(n) * 100).astype(np_dtype(dt))
    y = (rng.standard_normal(n) * 100).astype(np_dtype(dt))
    out = run(vector_add(dt, tile), (cdiv_int(n, tile),), {"x": x, "y": y, "out": poison((n,), dt)}, hints=hints)
    np.testing.assert_array_equal(out["out"], (x + y).astype(np_dtype(dt)))


def cdiv_int(a: int, b: int) -> int:
    return -(-a // b)


@pytest.mark.parametrize(("dt", "tol"), [(float32, 1e-6), (bfloat16, 1e-2)])
def test_softmax(dt: DType, tol: float, rng: np.random.Generator) -> None:
    m, n, block = 67, 3000, 4096
    x = rng.standard_normal((m, n)).astype(np_dtype(dt))
    out = run(softmax(dt, block), (m,), {"x": x, "out": poison((m, n), dt)})["out"]
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    assert rel_err(out, e / e.sum(axis=1, keepdims=True)) < tol


@pytest.mark.parametrize(("dt", "tol"), [(float32, 1e-5), (bfloat16, 1e-2)])
def test_layer_norm(dt: DType, tol: float, rng: np.random.Generator) -> None:
    m, n, block, eps = 33, 1000, 1024, 1e-5
    x = rng.standard_normal((m, n)).astype(np_dtype(dt))
    w, b = rng.standard_normal(n).astype(np_dtype(dt)), rng.standard_normal(n).astype(np_dtype(dt))
    out = run(layer_norm(dt, block), (m,), {"x": x, "w": w, "b": b, "out": poison((m, n), dt), "eps": eps})["out"]
    x64 = x.astype(np.float64)
    mu, var = x64.mean(axis=1, keepdims=True), x64.var(axis=1, keepdims=True)
    want = (x64 - mu) / np.sqrt(var + eps) * w.astype(np.float64) + b.astype(np.float64)
    assert rel_err(out, want) < tol


MATMUL_CASES = [
    # in dtype, acc dtype, tf32, tolerance, tile (bm, bn, bk)
    (float16, float32, False, 1e-3, (128, 128, 32)),
    (bfloat16, float32, False, 1e-2, (128, 128, 32)),
    (float16, float32, False, 1e-3, (64, 64, 32)),
    (bfloat16, float32, False, 1e-2, (128, 64, 64)),
    (float32, float32, True, 5e-3, (64, 64, 32)),
    (float32, float32, False, 1e-5, (64, 64, 16)),
    (float64, float64, False, 1e-12, (32, 32, 16)),
    (int8, int32, False, 0.0, (32, 32, 32)),
]


@pytest.mark.parametrize(("dt", "acc", "tf32", "tol", "tile"), MATMUL_CASES)
def test_matmul(dt: DType, acc: DType, tf32: bool, tol: float, tile: tuple[int, int, int],
                rng: np.random.Generator) -> None:
    m, n, k = 200, 190, 150
    if dt.is_int:
        a, b = rng.integers(-5, 5, (m, k)).astype(np_dtype(dt)), rng.integers(-5, 5, (k, n)).astype(np_dtype(dt))
    else:
        a, b = rng.standard_normal((m, k)).astype(np_dtype(dt)), rng.standard_normal((k, n)).astype(np_dtype(dt))
    bm, bn, bk = tile
    fn = matmul(dt, acc, bm=bm, bn=bn, bk=bk, tf32=tf32)
    out = run(fn, (cdiv_int(m, bm), cdiv_int(n, bn)), {"a": a, "b": b, "c": poison((m, n), acc)})["c"]
    want = a.astype(np.float64) @ b.astype(np.float64)
    if dt.is_int:
        np.testing.assert_array_equal(out, want.astype(np_dtype(acc)))
    else:
        assert rel_err(out, want) <= tol


def test_matmul_bf16_out_sm80_path(rng: np.random.Generator) -> None:
    """The tensor-core kernel compiled for sm_80 (mma.sync, no Hopper features) with a bf16 output."""
    m, n, k = 256, 256, 256
    a, b = rng.standard_normal((m, k)).astype(np_dtype(bfloat16)), rng.standard_normal((k, n)).astype(np_dtype(bfloat16))
    fn = matmul(bfloat16, float32, out_dtype=bfloat16, bm=128, bn=128, bk=32)
    out = run(fn, (2, 2), {"a": a, "b": b, "c": poison((m, n), bfloat16)}, arch=80)["c"]
    assert rel_err(out, a.astype(np.float64) @ b.astype(np.float64)) < 1e-2


@pytest.mark.parametrize("bm", [4, 1])
def test_row_sum(bm: int, rng: np.random.Generator) -> None:
    m, n = 37, 5000
    x = rng.standard_normal((m, n)).astype(np.float32)
    out = run(row_sum(float32, bm, 256), (cdiv_int(m, bm),), {"x": x, "out": poison((m,), float32)})["out"]
    assert rel_err(out, x.astype(np.float64).sum(axis=1)) < 1e-5
