"""Packed 16-bit float arithmetic (CUDA backend): float16/bfloat16 ``+ - * maximum minimum`` computed on element
pairs by one ``f16x2``/``bf16x2`` instruction each (math.cuh ``tj::add2`` ...), bit for bit what computing in
float32 and rounding once to 16 bits gives.

CPU: the generated text and PTX per dtype and target (sm_90 add/sub/mul.rn.bf16x2, sm_80 fma.rn.bf16x2, float
before sm_80), nothing packed for float32 or mixed dtypes, CUBINs for sm_80 and sm_90. GPU: millions of random
16-bit pairs plus every pair of special values against numpy, and every one of the 2^32 pairs of bit patterns
through the packed helpers against the float path (both the sm_90 code and the sm_80 code, JIT-compiled)."""

from __future__ import annotations

import functools
import itertools
from typing import Any

import numpy as np
import pytest
from gpu_arrays import dev

import tilejit as tj
from tilejit.backends.cuda.abi import device_headers
from tilejit.compiler.nvrtc import compile_cuda

HALVES = ["float16", "bfloat16"]
OPS = {"add": "x + y", "sub": "x - y", "mul": "x * y", "maximum": "tj.maximum(x, y)", "minimum": "tj.minimum(x, y)"}
HELPER = {"add": "add2", "sub": "sub2", "mul": "mul2", "maximum": "max2", "minimum": "min2"}
#: a pattern no operation here produces (a NaN with an odd payload), to see unwritten outputs
POISON = {"float16": 0x7D5A, "bfloat16": 0x7FA5}


@tj.kernel
def pair_ops(a, b, o_add, o_sub, o_mul, o_max, o_min, T: tj.Constant[int]):
    i = tj.bid(0)
    x = tj.load(a, index=(i,), shape=(T,))
    y = tj.load(b, index=(i,), shape=(T,))
    tj.store(o_add, index=(i,), tile=x + y)
    tj.store(o_sub, index=(i,), tile=x - y)
    tj.store(o_mul, index=(i,), tile=x * y)
    tj.store(o_max, index=(i,), tile=tj.maximum(x, y))
    tj.store(o_min, index=(i,), tile=tj.minimum(x, y))


@tj.kernel
def scalar_ops(a, o_mul, o_add, S: tj.Constant[float], T: tj.Constant[int]):
    """A Python number (weak: the tile's dtype) as the second operand."""
    i = tj.bid(0)
    x = tj.load(a, index=(i,), shape=(T,))
    tj.store(o_mul, index=(i,), tile=x * S)
    tj.store(o_add, index=(i,), tile=x + S)


@tj.kernel
def chain(a, b, out, T: tj.Constant[int]):
    i = tj.bid(0)
    x = tj.load(a, index=(i,), shape=(T,))
    y = tj.load(b, index=(i,), shape=(T,))
    tj.store(out, index=(i,), tile=tj.maximum((x * y + 0.5) - y, 0.0) * 0.75)


@tj.kernel
def mixed(a, b, out, T: tj.Constant[int]):
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.load(a, index=(i,), shape=(T,)) * tj.load(b, index=(i,), shape=(T,)))


def _compiled(k: Any, types: tuple[Any, ...], target: str, **constants: Any) -> Any:
    return tj.compile(k, types, constants={"T": 256, **constants}, target=target, backend="cuda")


# ----------------------------------------------------------------------------- CPU: text, PTX, CUBIN


@pytest.mark.parametrize("dtype", HALVES)
def test_16bit_binary_ops_render_one_pair_helper_each(dtype: str) -> None:
    dt = getattr(tj, dtype)
    src = _compiled(pair_ops, (dt[:],) * 7, "sm_90").cuda_source()
    for helper in HELPER.values():
        assert src.count(f"tj::{helper}(tj::pack2(") == 1, helper
    assert "cvt_pair" not in src and "tj::fadd" not in src and "static_cast<float>" not in src
    scalar = _compiled(scalar_ops, (dt[:],) * 3, "sm_90", S=0.75).cuda_source()
    assert scalar.count("tj::splat2(") == 2 and "tj::mul2(" in scalar and "tj::add2(" in scalar


def test_float32_and_mixed_dtypes_stay_on_the_float_path() -> None:
    src = _compiled(pair_ops, (tj.float32[:],) * 7, "sm_90").cuda_source()
    assert "pack2" not in src and "tj::fadd(" in src
    for types in [(tj.bfloat16[:], tj.float16[:], tj.float32[:]), (tj.bfloat16[:], tj.float32[:], tj.bfloat16[:])]:
        src = _compiled(mixed, types, "sm_90").cuda_source()
        assert "pack2" not in src and "tj::fmul(" in src, types


def _ptx_ops(ptx: str) -> set[str]:
    """The 16-bit-pair and float32 arithmetic opcodes in ``ptx``."""
    ops = set()
    for line in ptx.splitlines():
        words = line.split()
        if words and any(words[0].endswith(s) for s in (".f16x2", ".bf16x2", ".f32")):
            ops.add(words[0])
    return ops


@pytest.mark.parametrize(("dtype", "target", "want"), [
    ("bfloat16", "sm_90", {"add.rn.bf16x2", "sub.rn.bf16x2", "mul.rn.bf16x2", "max.NaN.bf16x2", "min.NaN.bf16x2"}),
    ("bfloat16", "sm_80", {"fma.rn.bf16x2", "max.NaN.bf16x2", "min.NaN.bf16x2"}),
    ("float16", "sm_90", {"add.rn.f16x2", "sub.rn.f16x2", "mul.rn.f16x2", "max.NaN.f16x2", "min.NaN.f16x2"}),
    ("float16", "sm_80", {"add.rn.f16x2", "sub.rn.f16x2", "mul.rn.f16x2", "max.NaN.f16x2", "min.NaN.f16x2"}),
])
def test_ptx_has_the_packed_instructions_and_no_float_round_trip(dtype: str, target: str, want: set[str]) -> None:
    """Each op is one instruction per pair, and a chain of them never goes through float32."""
    dt = getattr(tj, dtype)
    art = _compiled(pair_ops, (dt[:],) * 7, target)
    ops = _ptx_ops(art.ptx())
    assert ops == want, ops
    assert _ptx_ops(_compiled(chain, (dt[:],) * 3, target).ptx()) <= want
    art.cubin()  # NVRTC 13 -> CUBIN for the target


def _nvrtc_of_major(major: int) -> Any:
    from conftest import toolkits

    from tilejit.bindings.nvrtc import load_nvrtc

    tk = next((t for t in toolkits() if t.major == major), None)
    if tk is None:
        pytest.skip(f"NVRTC {major} is not installed (.ci-cache/cu{major} or TILEJIT_TEST_CUDA_ROOTS)")
    return load_nvrtc(str(tk.nvrtc))


@pytest.mark.parametrize("dtype", HALVES)
def test_before_sm80_pairs_compute_in_float(dtype: str) -> None:
    """sm_70 (NVRTC 12): the helpers' float fallback, the float path's instructions."""
    dt = getattr(tj, dtype)
    ck = _compiled(pair_ops, (dt[:],) * 7, "sm_70").cuda_kernel()
    ptx = compile_cuda(ck.source, name="k.cu", headers=ck.headers, target="sm_70", output="ptx",
                       nvrtc=_nvrtc_of_major(12), cache=False).code.decode()
    ops = _ptx_ops(ptx)
    assert not any(op.endswith("x2") for op in ops) and {"add.rn.f32", "sub.rn.f32", "mul.rn.f32"} <= ops, ops


# ----------------------------------------------------------------------------- GPU: against numpy, bit for bit

_EXP_BITS = {"float16": 5, "bfloat16": 8}


def _specials(dtype: str) -> np.ndarray:
    """Bit patterns of every class: zeros, subnormals, the normal boundaries, ones, the largest, inf, NaNs."""
    m = 15 - _EXP_BITS[dtype]  # mantissa bits
    inf, one = ((1 << _EXP_BITS[dtype]) - 1) << m, ((1 << (_EXP_BITS[dtype] - 1)) - 1) << m
    mags = [0, 1, 2, (1 << m) - 1, 1 << m, (1 << m) + 1, one - 1, one, one + 1, inf - 1, inf, inf + 1,
            inf | (1 << (m - 1)), 0x7FFF]
    return np.array([s | v for s in (0, 0x8000) for v in mags], np.uint16)


def _random_bits(dtype: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of patterns: uniform bits; nearby magnitudes (cancellation, ties); tiny ones (subnormal results)."""
    m = 15 - _EXP_BITS[dtype]
    bias = (1 << (_EXP_BITS[dtype] - 1)) - 1
    k = n // 4
    uniform = rng.integers(0, 1 << 16, (2, n - 3 * k), dtype=np.uint32)

    def near(center: int, spread: int) -> np.ndarray:
        exp = np.clip(center + rng.integers(-spread, spread + 1, (2, k)), 0, 2 * bias)
        return (rng.integers(0, 2, (2, k)) << 15) | (exp << m) | rng.integers(0, 1 << m, (2, k))

    low = near(bias // 2 + 1, bias // 2)  # products of two of these fall below the normal range
    pairs = np.concatenate([uniform, near(bias, 3), near(bias, 12), low], axis=1).astype(np.uint16)
    spec = _specials(dtype)
    cross = np.array(list(itertools.product(spec, spec)), np.uint16).T
    both = np.concatenate([pairs, cross], axis=1)
    return both[0], both[1]


def _to_f32(bits: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "float16":
        return bits.view(np.float16).astype(np.float32)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _from_f32(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded to nearest-even 16-bit patterns (numpy's float16; bfloat16 with integer steps)."""
    if dtype == "float16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).view(np.uint16)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FFF), r)


def _is_nan(bits: np.ndarray, dtype: str) -> np.ndarray:
    return np.isnan(_to_f32(bits, dtype))


def _check_bits(got: np.ndarray, want: np.ndarray, a: np.ndarray, b: np.ndarray, dtype: str, what: str,
                signed_zero: bool = True) -> None:
    """Equal bits; NaN results as both NaN (numpy keeps input payloads, the GPU gives its canonical NaN); where
    ``signed_zero`` is False, a zero as either zero (maximum/minimum: the sign they pick is unspecified)."""
    same = got == want
    same |= _is_nan(got, dtype) & _is_nan(want, dtype)
    if not signed_zero:
        same |= ((got & 0x7FFF) == 0) & ((want & 0x7FFF) == 0)
    if not same.all():
        bad = np.flatnonzero(~same)
        rows = [f"{a[j]:#06x} {b[j]:#06x} -> {got[j]:#06x}, want {want[j]:#06x}" for j in bad[:8]]
        pytest.fail(f"{dtype} {what}: {bad.size} of {got.size} differ:\n" + "\n".join(rows))


def _device_bits(bits: np.ndarray, dtype: str) -> tuple[Any, Any]:
    """(the uint16 device array, the same memory as ``dtype``): bfloat16 data needs no ml_dtypes this way."""
    raw = dev(bits)
    return raw, raw.view(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALVES)
def test_packed_ops_match_float32_rounded_once_bit_for_bit(dtype: str, rng: np.random.Generator) -> None:
    t = 1024
    a, b = _random_bits(dtype, 4_000_000, rng)
    n = a.size  # not a multiple of the tile
    _, da = _device_bits(a, dtype)
    _, db = _device_bits(b, dtype)
    outs = [_device_bits(np.full(n, POISON[dtype], np.uint16), dtype) for _ in OPS]
    pair_ops[tj.cdiv(n, t)](da, db, *(o for _, o in outs), T=t)
    x, y = _to_f32(a, dtype), _to_f32(b, dtype)
    with np.errstate(all="ignore"):
        want = {"add": x + y, "sub": x - y, "mul": x * y, "maximum": np.maximum(x, y), "minimum": np.minimum(x, y)}
    for (raw, _), fn in zip(outs, OPS):
        _check_bits(raw.numpy(), _from_f32(want[fn], dtype), a, b, dtype, OPS[fn], fn in ("add", "sub", "mul"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("s", [0.75, -3.0, 2.0**-12])
def test_packed_ops_with_a_python_number_match_bit_for_bit(dtype: str, s: float, rng: np.random.Generator) -> None:
    t = 512
    a, _ = _random_bits(dtype, 1_000_000, rng)
    n = a.size
    _, da = _device_bits(a, dtype)
    (mul_raw, o_mul), (add_raw, o_add) = (_device_bits(np.full(n, POISON[dtype], np.uint16), dtype) for _ in "ma")
    scalar_ops[tj.cdiv(n, t)](da, o_mul, o_add, S=s, T=t)
    x, b = _to_f32(a, dtype), np.full_like(a, _from_f32(np.float32([s]), dtype)[0])
    with np.errstate(all="ignore"):
        _check_bits(mul_raw.numpy(), _from_f32(x * np.float32(s), dtype), a, b, dtype, f"x * {s}")
        _check_bits(add_raw.numpy(), _from_f32(x + np.float32(s), dtype), a, b, dtype, f"x + {s}")


# ----------------------------------------------------------------------------- GPU: every pair, both code paths

_EVERY_PAIR = """
#include <tilejit/tilejit.cuh>
// Every pair (a, b) of 16-bit patterns: thread t takes a = t >> 15 and b = 2 (t & 0x7fff) + {0, 1}, in both lanes
// of a packed pair, against the float path (widen, compute, round with cvt_pair, as the generated code did).
template <class T, class P, class F>
__device__ void check(unsigned long long* bad, unsigned int* first, P packed, F f) {
  const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
  const T a = T::from_bits((tj::u16)(t >> 15)), b0 = T::from_bits((tj::u16)(2 * (t & 0x7fffu)));
  const T b1 = T::from_bits((tj::u16)(b0.bits + 1));
  T w0, w1, g0, g1, h0, h1;
  tj::cvt_pair(w0, w1, f((float)a, (float)b0), f((float)a, (float)b1));
  tj::unpack2(g0, g1, packed(tj::pack2(a, a), tj::pack2(b0, b1)));
  tj::unpack2(h1, h0, packed(tj::pack2(a, a), tj::pack2(b1, b0)));  // the other lane order
  if (g0.bits != w0.bits || g1.bits != w1.bits || h0.bits != w0.bits || h1.bits != w1.bits) {
    atomicAdd(bad, 1ull);
    atomicCAS(first, 0xffffffffu, t);
  }
}
#define TJ_EVERY(name, T, packed, f)                                                                  \\
  extern "C" __global__ void name(unsigned long long* bad, unsigned int* first) {                   \\
    check<T>(bad, first, [](tj::Pair<T> x, tj::Pair<T> y) { return tj::packed(x, y); },           \\
             [](float x, float y) { return f(x, y); });                                             \\
  }
TJ_EVERY(add_float16, tj::half, add2, tj::fadd)
TJ_EVERY(sub_float16, tj::half, sub2, tj::fsub)
TJ_EVERY(mul_float16, tj::half, mul2, tj::fmul)
TJ_EVERY(maximum_float16, tj::half, max2, tj::maximum)
TJ_EVERY(minimum_float16, tj::half, min2, tj::minimum)
TJ_EVERY(add_bfloat16, tj::bf16, add2, tj::fadd)
TJ_EVERY(sub_bfloat16, tj::bf16, sub2, tj::fsub)
TJ_EVERY(mul_bfloat16, tj::bf16, mul2, tj::fmul)
TJ_EVERY(maximum_bfloat16, tj::bf16, max2, tj::maximum)
TJ_EVERY(minimum_bfloat16, tj::bf16, min2, tj::minimum)
"""


@functools.cache
def _every_pair_module(target: str) -> Any:
    """The checking kernels compiled for ``target`` (PTX, JIT-compiled by the driver for this GPU)."""
    from tilejit.errors import DriverVersionError
    from tilejit.runtime.module import Module

    prog = compile_cuda(_EVERY_PAIR, name="every_pair.cu", headers=device_headers(), target=target,
                        output="ptx", cache=False)
    try:
        return Module.load(prog.code.decode(), "ptx")
    except DriverVersionError as exc:  # PTX of an NVRTC newer than the driver: no JIT (CUBIN would load)
        pytest.skip(f"the driver cannot JIT this NVRTC's PTX: {exc}")


@pytest.mark.gpu
@pytest.mark.cuda_only(reason="the CUDA backend's device helpers, in a hand-written kernel")
@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("fn", list(OPS))
def test_every_pair_of_bit_patterns_matches_the_float_path(fn: str, dtype: str, target: str) -> None:
    """All 2^32 (a, b), NaN payloads and zero signs included: the packed helper's bits are the float path's."""
    from tilejit.runtime.device import get_device
    from tilejit.runtime.launch import Launcher, ParamKind

    if int(get_device().arch.removeprefix("sm_").rstrip("af")) < int(target.removeprefix("sm_")):
        pytest.skip(f"{target} code needs an {target} GPU or newer")
    fn_ = _every_pair_module(target).get_function(f"{fn}_{dtype}")
    launcher = Launcher(fn_, [("bad", ParamKind.pointer("uint64")), ("first", ParamKind.pointer("uint32"))],
                        block=256)
    bad, first = dev(np.zeros(1, np.uint64)), dev(np.full(1, 0xFFFFFFFF, np.uint32))
    launcher((1 << 31) // 256, (bad, first))
    t = int(first.numpy()[0])
    assert int(bad.numpy()[0]) == 0, f"{int(bad.numpy()[0])} threads differ; the first: a={t >> 15:#06x}, " \
                                      f"b={2 * (t & 0x7FFF):#06x} and the next"
