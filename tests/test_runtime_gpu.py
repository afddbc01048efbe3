"""The runtime on a real GPU: devices, arrays, streams, events, module loading (CUBIN and PTX),
launches of raw CUDA C++ kernels with tilejit arrays, torch tensors and CuPy arrays."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import tilejit as tj
from tilejit.api.raw import RawKernel
from tilejit.errors import LaunchError
from tilejit.runtime.array import DeviceArray, asarray, empty, zeros
from tilejit.runtime.device import Device, device_count, get_device
from tilejit.runtime.event import Event
from tilejit.runtime.interop import as_view
from tilejit.runtime.launch import CHECKED_LAUNCHES, Launcher, ParamKind
from tilejit.runtime.module import Module
from tilejit.runtime.stream import Stream, current_stream, set_current_stream

pytestmark = pytest.mark.gpu

VADD = r"""
extern "C" __global__ void vadd(const float* __restrict__ x, const float* __restrict__ y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + y[i];
}
"""

SPIN = r"""
extern "C" __global__ void spin(float* x, int n, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    for (int k = 0; k < iters; ++k) v = v * 0.999f + 1.0f;
    x[i] = v;
}
"""

# The tile backend's array ABI: struct {T* ptr; int64_t shape[N]; int64_t stride[N];}, strides in elements.
SCALE_2D = r"""
struct A2 { float* ptr; long long shape[2]; long long stride[2]; };
extern "C" __global__ void scale2d(A2 x, A2 out, float a) {
    long long r = blockIdx.x, c = threadIdx.x;
    if (r < x.shape[0] && c < x.shape[1])
        out.ptr[r * out.stride[0] + c * out.stride[1]] = a * x.ptr[r * x.stride[0] + c * x.stride[1]];
}
"""

# __half / __nv_bfloat16 parameters are 2-byte, 2-aligned values; stand-ins of that layout keep the test
# free of cuda_fp16.h (not every NVRTC has it built in) and let the kernel return the raw bits.
SCALARS = r"""
struct __align__(2) half_bits { unsigned short x; };
struct __align__(2) bf16_bits { unsigned short x; };
extern "C" __global__ void scalars(bool b, signed char i8, double d, half_bits h, float f, long long i64,
                                   unsigned char u8, bf16_bits bf, int i32, unsigned long long u64, double* out) {
    out[0] = b; out[1] = i8; out[2] = d; out[3] = h.x; out[4] = f; out[5] = (double)i64;
    out[6] = u8; out[7] = bf.x; out[8] = i32; out[9] = (double)u64;
}
"""

BIG_SHARED = r"""
extern "C" __global__ void reverse(const float* x, float* out, int n) {
    extern __shared__ float s[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = x[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = s[n - 1 - i];
}
"""


def bf16() -> Any:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    return ml_dtypes.bfloat16


@pytest.fixture(scope="module")
def vadd() -> RawKernel:
    return RawKernel(VADD, "vadd")


def rng() -> np.random.Generator:
    return np.random.default_rng()


# --------------------------------------------------------------------------- devices


@pytest.mark.own_backend(reason="compiles no tile kernel: the backend plays no part")
def test_device_properties() -> None:
    assert device_count() >= 1
    dev = Device(0)
    assert Device(0) is dev and get_device(0) is dev
    assert dev.name and isinstance(dev.name, str)
    major, minor = dev.compute_capability
    assert major >= 7
    assert dev.arch == f"sm_{major}{minor}"
    assert dev.multiprocessor_count > 0
    assert dev.total_memory > 1 << 30
    assert dev.max_shared_memory_per_block_optin >= 48 * 1024
    assert dev.max_threads_per_block == 1024
    assert dev.warp_size == 32
    with pytest.raises(ValueError, match=r"CUDA device \d+ does not exist"):
        Device(device_count())
    assert get_device() in [Device(i) for i in range(device_count())]
    assert "sm_" in repr(dev)


# --------------------------------------------------------------------------- arrays


ALL_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "float16", "bfloat16", "float32", "float64"]


def host_data(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    r = rng()
    if dtype == "bool":
        return r.integers(0, 2, shape).astype(bool)
    if dtype == "bfloat16":
        return r.standard_normal(shape).astype(bf16())
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        return r.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    return r.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(0,), (1,), (1000003,), (3, 5, 7)])
@pytest.mark.own_backend(reason="compiles no tile kernel: the backend plays no part")
def test_device_array_round_trip(dtype: str, shape: tuple[int, ...]) -> None:
    a = host_data(dtype, shape)
    d = asarray(a)
    assert d.shape == shape and d.dtype_name == dtype and d.ndim == len(shape)
    assert d.nbytes == a.nbytes and d.size == a.size
    if a.size:
        assert d.strides == a.strides
    back = d.numpy()
    assert back.dtype == a.dtype
    np.testing.assert_array_equal(back.view(np.uint8), a.view(np.uint8))


@pytest.mark.own_backend(reason="compiles no tile kernel: the backend plays no part")
def test_views_fill_zeros_and_copy_from_host() -> None:
    a = np.arange(60, dtype=np.float32).reshape(6, 10)
    d = asarray(a)
    for key in [(slice(1, 5), slice(None, None, 3)), (slice(None, None, -1),), (2,), (slice(None), 7),
                (slice(4, 1, -2), slice(9, None, -4))]:
        np.testing.assert_array_equal(d[key].numpy(), a[key])
    v = d[1:3]
    assert v.ptr == d.ptr + 10 * 4 and v.is_c_contiguous
    np.testing.assert_array_equal(zeros((3, 4), "int16").numpy(), np.zeros((3, 4), np.int16))
    np.testing.assert_array_equal(empty(5, "float64").fill(2.5).numpy(), np.full(5, 2.5))
    np.testing.assert_array_equal(empty(5, "int32").fill(7).numpy(), np.full(5, 7, np.int32))
    assert np.isnan(empty(4, "float32").poison().numpy()).all()
    d.copy_from_host(np.ones((6, 10), np.float32))
    np.testing.assert_array_equal(d.numpy(), np.ones((6, 10), np.float32))
    with pytest.raises(IndexError):
        d[6]


@pytest.mark.own_backend(reason="compiles no tile kernel: the backend plays no part")
def test_dlpack_and_cai_export_to_torch_and_cupy() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    d = asarray(a)
    torch = pytest.importorskip("torch")
    t = torch.from_dlpack(d)
    assert t.device.type == "cuda" and tuple(t.shape) == (3, 4) and t.data_ptr() == d.ptr
    t.mul_(2)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(d.numpy(), a * 2)
    ts = torch.from_dlpack(d[:, 1::2])
    assert ts.stride() == (4, 2)
    np.testing.assert_array_equal(ts.cpu().numpy(), (a * 2)[:, 1::2])
    del t, ts
    try:
        import cupy
    except ImportError:
        return
    c = cupy.asarray(d)
    assert c.data.ptr == d.ptr
    np.testing.assert_array_equal(cupy.asnumpy(c), a * 2)


@pytest.mark.own_backend(reason="compiles no tile kernel: the backend plays no part")
def test_views_of_torch_cupy_and_host_arrays() -> None:
    torch = pytest.importorskip("torch")
    t = torch.arange(20, device="cuda", dtype=torch.float16).reshape(4, 5)[:, 1:]
    v = as_view(t)
    assert (v.ptr, tuple(v.shape), tuple(v.strides), v.dtype) == (t.data_ptr(), (4, 4), (5, 1), "float16")
    assert as_view(torch.zeros(3, device="cuda", dtype=torch.bfloat16)).dtype == "bfloat16"
    assert as_view(torch.zeros(3, device="cuda", dtype=torch.bool)).dtype == "bool"
    with pytest.raises(TypeError, match="host"):
        as_view(torch.zeros(3))
    with pytest.raises(TypeError, match="host"):
        as_view(np.zeros(3))
    wrapped = asarray(t)
    assert wrapped.ptr == t.data_ptr() and wrapped.strides == (10, 2)
    np.testing.assert_array_equal(wrapped.numpy(), t.cpu().numpy())
    try:
        import cupy
    except ImportError:
        return
    c = cupy.arange(12, dtype=cupy.int64).reshape(3, 4)[:, ::2]
    v = as_view(c)
    assert (v.ptr, tuple(v.shape), v.strides, v.dtype) == (c.data.ptr, (3, 2), (4, 2), "int64")

    class CAIOnly:
        def __init__(self, a: Any) -> None:
            self.__cuda_array_interface__ = a.__cuda_array_interface__

    v2 = as_view(CAIOnly(c))
    assert (v2.ptr, v2.shape, v2.strides, v2.dtype) == (c.data.ptr, (3, 2), (4, 2), "int64")


# --------------------------------------------------------------------------- launches


@pytest.mark.cuda_only(reason="RawKernel: CUDA C++ source compiled by NVRTC")
def test_raw_vector_add_with_device_arrays(vadd: RawKernel) -> None:
    n = 1_000_003
    x, y = rng().standard_normal(n, dtype=np.float32), rng().standard_normal(n, dtype=np.float32)
    out = empty(n, "float32").poison()
    vadd((n + 255) // 256, 256, (asarray(x), asarray(y), out, n))
    np.testing.assert_array_equal(out.numpy(), x + y)
    assert vadd.function().num_regs > 0
    assert vadd.function().max_threads >= 256
    from tilejit.compiler.cache import cached_compile

    assert vadd.launcher(256).compile_code is cached_compile  # generated launch code goes to the disk cache


@pytest.mark.parametrize(("ctype", "dtype"), [("float", "float32"), ("double", "float64"), ("int", "int32")])
@pytest.mark.cuda_only(reason="RawKernel: CUDA C++ source compiled by NVRTC")
def test_template_kernel_takes_its_parameter_types_from_the_name(ctype: str, dtype: str) -> None:
    """``scale<float>``: ``T a`` is passed as a float, ``scale<double>`` as a double (a Python float either way)."""
    k = RawKernel(
        "template <typename T> __global__ void scale(T* x, T a, int n) {"
        " int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = x[i] * a; }",
        f"scale<{ctype}>",
    )
    assert [str(kind) for _, kind in k.params] == [f"{dtype}*", dtype, "int32"]
    n = 1000
    host = rng().integers(-50, 50, n).astype(dtype)
    x = asarray(host)
    factor = 3 if dtype == "int32" else 0.1
    k(tj.cdiv(n, 128), 128, (x, factor, n))
    expected = host * np.array(factor, dtype)
    if dtype == "int32":
        np.testing.assert_array_equal(x.numpy(), expected)
    else:
        np.testing.assert_allclose(x.numpy(), expected, rtol=1e-6 if dtype == "float32" else 1e-15)


@pytest.mark.cuda_only(reason="RawKernel: CUDA C++ source compiled by NVRTC")
def test_readme_raw_kernel_example_runs() -> None:
    """The README's hand-written CUDA C++ example, as written."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    found = re.search(r"## Hand-written CUDA C\+\+\n\n```python\n(.*?)```", readme, re.DOTALL)
    assert found is not None
    n = 100_003
    hx, hy = rng().standard_normal(n, dtype=np.float32), rng().standard_normal(n, dtype=np.float32)
    out = empty(n, "float32").poison()
    namespace = {"tj": tj, "n": n, "x": asarray(hx), "y": asarray(hy), "out": out}
    exec(found.group(1), namespace)
    np.testing.assert_array_equal(out.numpy(), hx + hy)
    assert namespace["add"].compile("sm_80").code[:4] == b"\x7fELF"


@pytest.mark.cuda_only(reason="RawKernel: CUDA C++ source compiled by NVRTC")
def test_raw_vector_add_with_torch_tensors_and_streams(vadd: RawKernel) -> None:
    torch = pytest.importorskip("torch")
    n = 100_001
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.full_like(x, float("nan"))
    vadd((n + 127) // 128, (128, 1, 1), (x, y, out, n))
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)

    s = torch.cuda.Stream()
    out.fill_(float("nan"))
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        vadd((n + 127) // 128, 128, (x, y, out, n), stream=s)
    s.synchronize()
    assert torch.equal(out, x + y)

    out.fill_(float("nan"))
    torch.cuda.synchronize()
    with Stream() as ours:
        vadd((n + 127) // 128, 128, (x, y, out, n), stream=ours)
        ours.synchronize()
        assert ours.query()
    assert torch.equal(out, x + y)


@pytest.mark.cuda_only(reason="RawKernel: CUDA C++ source compiled by NVRTC")
def test_current_stream_and_events() -> None:
    n = 1 << 20
    spin = RawKernel(SPIN, "spin")
    x = zeros(n, "float32")
    with Stream() as s:
        previous = set_current_stream(s)
        try:
            assert current_stream() is s
            start, end = Event(), Event()
            start.record()
            spin(n // 256, 256, (x, n, 2000))
            end.record()
            end.synchronize()
            assert end.query()
            ms = Event.elapsed_ms(start, end)
            assert ms > 0
            got = x.numpy()  # copies on the current stream: ordered after the kernel
        finally:
            set_current_stream(previous)
    want = np.float32(0)
    for _ in range(2000):
        want = want * np.float32(0.999) + np.float32(1.0)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    with pytest.raises(ValueError, match="never recorded"):
        Event.elapsed_ms(Event(), Event())


@pytest.mark.cuda_only(reason="RawKernel: CUDA C++ source compiled by NVRTC")
def test_checked_then_generated_launches() -> None:
    """The first CHECKED_LAUNCHES launches per (device, block, shared) take the checked path, later ones a
    generated function; alternating block shapes reuse their generated functions. Every launch is right."""
    vadd = RawKernel(VADD, "vadd")
    n = 40_009
    x, y = asarray(rng().standard_normal(n, dtype=np.float32)), asarray(rng().standard_normal(n, dtype=np.float32))
    out = empty(n, "float32")
    for i in range(2 * CHECKED_LAUNCHES + 2):
        # launches 1..CHECKED_LAUNCHES take the checked path; the next one generates the fast function
        assert (vadd._entry_in_use() is None) == (i <= CHECKED_LAUNCHES)
        block = 128 if i < 2 * CHECKED_LAUNCHES else 256 + 128 * (i % 2)
        out.poison()
        scale = float(i + 1)
        xs = asarray(x.numpy() * np.float32(scale))
        vadd((n + block - 1) // block, block, (xs, y, out, n))
        np.testing.assert_array_equal(out.numpy(), xs.numpy() + y.numpy())
    generated = {key for key, policy in vadd._policies.items() if policy.threads()}
    assert generated == {(get_device().ordinal, 128, 0)}  # 256/384 still on the checked path
    for i in range(2 * CHECKED_LAUNCHES):
        block = 256 + 128 * (i % 2)
        out.poison()
        vadd((n + block - 1) // block, block, (x, y, out, n))
        np.testing.assert_array_equal(out.numpy(), x.numpy() + y.numpy())
    assert sum(1 for policy in vadd._policies.values() if policy.threads()) == 3


@pytest.mark.parametrize("generated", [False, True], ids=["checked", "generated"])
@pytest.mark.cuda_only(reason="RawKernel: CUDA C++ source compiled by NVRTC")
def test_wrong_arguments_raise_launch_error(generated: bool) -> None:
    vadd = RawKernel(VADD, "vadd")
    n = 10
    d = zeros(n, "float32")
    for _ in range(CHECKED_LAUNCHES + 1 if generated else 0):
        vadd(1, 32, (d, d, d, n))
    assert (vadd._entry_in_use() is not None) == generated
    with pytest.raises(LaunchError, match=r"parameter 'x'.*host \(CPU\) array"):
        vadd(1, 32, (np.zeros(n, np.float32), d, d, n))
    with pytest.raises(LaunchError, match=r"parameter 'out'.*expected float32 data, got an array of int32"):
        vadd(1, 32, (d, d, zeros(n, "int32"), n))
    with pytest.raises(LaunchError, match=r"parameter 'n'.*expected an int"):
        vadd(1, 32, (d, d, d, 10.0))
    with pytest.raises(LaunchError, match=r"takes 4 argument"):
        vadd(1, 32, (d, d, d))
    with pytest.raises(LaunchError):
        vadd(0, 32, (d, d, d, n))
    with pytest.raises(ValueError, match="block"):
        vadd(1, 2048, (d, d, d, n))


@pytest.mark.parametrize("generated", [False, True], ids=["checked", "generated"])
@pytest.mark.cuda_only(reason="RawKernel: CUDA C++ source compiled by NVRTC")
def test_pointer_parameters_refuse_strided_views(generated: bool) -> None:
    """A ``float*`` gets only the first element's address, so a strided view would be read as if it were
    packed: refused on both paths (own arrays and torch), while its address as an int is taken as asked."""
    vadd = RawKernel(VADD, "vadd")
    n = 64
    a = rng().standard_normal(2 * n).astype(np.float32)
    x, y, out = asarray(a), zeros(n, "float32"), empty(n, "float32")
    for _ in range(CHECKED_LAUNCHES + 1 if generated else 0):
        vadd(1, n, (x[:n], y, out, n))
    assert (vadd._entry_in_use() is not None) == generated
    for strided in (x[::2], x[::-1][:n]):
        with pytest.raises(LaunchError, match=r"parameter 'x' \(float32\*\).*not contiguous"):
            vadd(1, n, (strided, y, out, n))
    out.poison()
    vadd(1, n, (x[::2].ptr, y, out, n))  # the caller indexes the view: here, reads x[0:n] as packed
    np.testing.assert_array_equal(out.numpy(), a[:n])
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(a).cuda()
    with pytest.raises(LaunchError, match=r"parameter 'x'.*not contiguous .*strides \(2,\)"):
        vadd(1, n, (t[::2], y, out, n))
    out.poison()
    vadd(1, n, (t[::2].contiguous(), y, out, n))
    np.testing.assert_array_equal(out.numpy(), a[::2])


@pytest.mark.cuda_only(reason="RawKernel: CUDA C++ source compiled by NVRTC")
def test_array_struct_parameters_with_strided_views() -> None:
    prog = RawKernel(SCALE_2D, "scale2d", param_types=["float*"] * 2 + ["float"]).compile()
    fn = Module.load(prog.code).get_function("scale2d")
    launcher = Launcher(fn, [("x", ParamKind.array("float32", 2)), ("out", ParamKind.array("float32", 2)),
                             ("a", ParamKind.scalar("float32"))], block=(64, 1, 1))
    a = rng().standard_normal((8, 12)).astype(np.float32)
    x = asarray(a)[1:7, ::3]  # a strided view
    out = empty((6, 4), "float32").poison()
    launcher(6, (x, out, 0.5))
    np.testing.assert_array_equal(out.numpy(), a[1:7, ::3] * np.float32(0.5))
    torch = pytest.importorskip("torch")
    tx = torch.from_numpy(a).cuda().t()  # transposed: non-contiguous
    tout = torch.full((12, 8), float("nan"), device="cuda")
    launcher(12, (tx, tout, 2.0))
    torch.cuda.synchronize()
    assert torch.equal(tout, tx * 2)


@pytest.mark.cuda_only(reason="RawKernel: CUDA C++ source compiled by NVRTC")
def test_every_scalar_type_reaches_the_kernel() -> None:
    types = ["bool", "signed char", "double", "__half", "float", "long long", "unsigned char", "__nv_bfloat16",
             "int", "unsigned long long", "double*"]
    k = RawKernel(SCALARS, "scalars", param_types=types)
    out = empty(10, "float64").poison()
    k(1, 1, (True, -5, 2.5, 1.5, 0.25, -(1 << 40), 200, -3.0, 123456, (1 << 63) + 2048, out))
    np.testing.assert_array_equal(
        out.numpy(), [1, -5, 2.5, 0x3E00, 0.25, -(1 << 40), 200, 0xC040, 123456, float((1 << 63) + 2048)]
    )


@pytest.mark.cuda_only(reason="PTX from NVRTC, loaded through the driver's JIT")
def test_ptx_path_loads_too() -> None:
    from tilejit.compiler.nvrtc import compile_cuda

    dev = get_device()
    prog = compile_cuda(VADD, name="vadd.cu", target=dev.arch, output="ptx")
    assert b".version" in prog.code
    module = Module.load(prog.code.decode(), "ptx")
    fn = module.get_function("vadd")
    launcher = Launcher(fn, [("x", ParamKind.pointer("float32")), ("y", ParamKind.pointer("float32")),
                             ("out", ParamKind.pointer("float32")), ("n", ParamKind.scalar("int32"))], block=128)
    n = 1000
    x = rng().standard_normal(n, dtype=np.float32)
    out = empty(n, "float32").poison()
    dx = asarray(x)
    launcher((n + 127) // 128, (dx, dx.ptr, out, n))
    np.testing.assert_array_equal(out.numpy(), x + x)


@pytest.mark.cuda_only(reason="RawKernel: CUDA C++ source compiled by NVRTC")
def test_big_dynamic_shared_memory() -> None:
    dev = get_device()
    n = min(dev.max_shared_memory_per_block_optin, 96 * 1024) // 4
    if n * 4 <= 48 * 1024:
        pytest.skip("the device has no more than 48 KiB of shared memory per block")
    k = RawKernel(BIG_SHARED, "reverse")
    x = rng().standard_normal(n, dtype=np.float32)
    out = empty(n, "float32").poison()
    k(1, 256, (asarray(x), out, n), shared_mem=n * 4)
    np.testing.assert_array_equal(out.numpy(), x[::-1])


@pytest.mark.cuda_only(reason="RawKernel: CUDA C++ source compiled by NVRTC")
def test_launch_from_another_thread(vadd: RawKernel) -> None:
    n = 5000
    x = rng().standard_normal(n, dtype=np.float32)
    dx, out = asarray(x), empty(n, "float32").poison()
    vadd((n + 255) // 256, 256, (dx, dx, out, n))
    out.poison()
    errors: list[BaseException] = []

    def run() -> None:
        try:  # a fresh thread has no current context: the launch makes it current and retries
            vadd((n + 255) // 256, 256, (dx, dx, out, n))
            get_device().synchronize()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert not errors, errors
    np.testing.assert_array_equal(out.numpy(), x + x)


@pytest.mark.cuda_only(reason="RawKernel: CUDA C++ source compiled by NVRTC")
def test_jax_arrays_through_dlpack() -> None:
    """A JAX array (no torch-style attributes) is read zero-copy through DLPack; run in a subprocess
    so JAX's GPU memory preallocation cannot disturb the other tests."""
    import importlib.util
    import os
    import subprocess
    import sys
    import textwrap

    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed")
    code = textwrap.dedent(
        f"""
        import jax, jax.numpy as jnp, numpy as np
        from tilejit.api.raw import RawKernel
        from tilejit.runtime.array import empty
        from tilejit.runtime.interop import as_view
        if jax.default_backend() != "gpu":
            print("skip: jax has no GPU backend"); raise SystemExit(0)
        x = jnp.arange(1000, dtype=jnp.float32) * 0.5
        v = as_view(x)
        assert v.dtype == "float32" and tuple(v.shape) == (1000,) and tuple(v.strides) == (1,), v
        out = empty(1000, "float32").poison()
        RawKernel({VADD!r}, "vadd")(4, 256, (x, x, out, 1000))
        np.testing.assert_array_equal(out.numpy(), np.asarray(x) * 2)
        print("ok")
        """
    )
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    if done.stdout.strip().startswith("skip"):
        pytest.skip(done.stdout.strip())
    assert done.stdout.strip().endswith("ok")


@pytest.mark.own_backend(reason="compiles no tile kernel: the backend plays no part")
def test_public_names() -> None:
    assert tj.device_count() == device_count()
    assert tj.DeviceArray is DeviceArray and tj.RawKernel is RawKernel
    assert isinstance(tj.asarray(np.ones(3)), DeviceArray)
    assert isinstance(tj.empty(3), DeviceArray)


def _scaled_copy(scale: float) -> Any:
    @tj.kernel
    def scaled(x, out, TILE: tj.Constant[int]):
        i = tj.bid(0)
        tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)) * scale)

    return scaled


def test_kernels_from_one_factory_keep_their_captured_values() -> None:
    """Two kernels with one source but different closure values must not share a cached CUBIN."""
    rng = np.random.default_rng()
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    dx = asarray(x)
    for scale in (rng.uniform(1.5, 2.0), rng.uniform(3.0, 4.0)):
        out = empty(n, "float32").poison()
        _scaled_copy(float(scale))[tj.cdiv(n, 256)](dx, out, TILE=256)
        np.testing.assert_allclose(out.numpy(), x * np.float32(scale), rtol=1e-6)


@tj.kernel
def threads_acc(x, out, a, TILE: tj.Constant[int]):
    i = tj.bid(0)
    t = tj.load(out, index=(i,), shape=(TILE,)) + tj.load(x, index=(i,), shape=(TILE,)) * a
    tj.store(out, index=(i,), tile=t)


THREADS_ACC_SRC = r"""
extern "C" __global__ void threads_acc_raw(const float* x, float* out, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += x[i] * a;
}
"""


def test_threads_launch_one_tile_kernel_and_one_raw_kernel_with_their_own_arguments() -> None:
    """Six threads share a tile kernel and a RawKernel, each with its own arrays, scalars, grid and stream,
    past the checked launches into their own generated launchers; every accumulated output is exact."""
    raw = RawKernel(THREADS_ACC_SRC, "threads_acc_raw")
    iters, tile = 3 * CHECKED_LAUNCHES + 10, 128
    rng = np.random.default_rng()
    barrier = threading.Barrier(6)
    results: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, float]] = {}
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            n = (k + 1) * tile - k  # a partial last tile
            x = rng.integers(-4, 5, n).astype(np.float32)
            dx, out_tile, out_raw = asarray(x), zeros(n, "float32"), zeros(n, "float32")
            a = float(k + 1)
            stream = Stream()  # non-blocking: not ordered after the copies above, so wait for them
            get_device().synchronize()
            launch = threads_acc[tj.cdiv(n, tile), stream]
            barrier.wait(30)
            for _ in range(iters):
                launch(dx, out_tile, a, TILE=tile)
                raw(tj.cdiv(n, 64), 64, (dx, out_raw, a, n), stream=stream)
            stream.synchronize()
            results[k] = (x, out_tile.numpy(), out_raw.numpy(), a)
            stream.close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    for k, (x, got_tile, got_raw, a) in results.items():
        want = x * np.float32(a * iters)  # small integers: exact in float32
        np.testing.assert_array_equal(got_tile, want, err_msg=f"tile kernel, thread {k}")
        np.testing.assert_array_equal(got_raw, want, err_msg=f"RawKernel, thread {k}")
    assert len(results) == 6
