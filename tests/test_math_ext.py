"""Issue 20, more of the language: the math functions ``tj.asin acos atan atan2 sinh cosh log1p expm1 cbrt erfinv fma
isnan isinf signbit popc clz``, the fast-math options (``rounding_mode=``, ``flush_to_zero=``, ``tj.truediv``),
``tj.mma(..., precision="tf32")`` and ``tj.static_print``/``tj.static_assert``.

CPU: the IR of each, the CUDA C++ and NVRTC's PTX for sm_80 and sm_90 (and every CUDA major for sm_80), the Tile IR
text and tileiras/tileirdisasm for what Tile IR expresses (cbrt and erfinv are its located refusals), folding of
compile-time numbers, located errors. GPU: each function against numpy on fresh inputs (special values mixed in),
sizes off the tile, float16/bfloat16/float32/float64, outputs poisoned, tolerances by dtype; directed roundings bit
for bit; flush to zero seen on subnormals; tf32 mma against an fp32 product of tf32-rounded inputs.
"""

# ruff: noqa: F841  (kernels under test assign values only the front end looks at)

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kernels import np_dtype
from source_lines import assert_located, where_in

import tilejit as tj
from tilejit.errors import TileCompileError, TileIRUnsupportedError
from tilejit.language.frontend.translate import translate
from tilejit.language.ir.types import ArrayType, float16, float32, float64, int32, scalar

LINES = Path(__file__).read_text(encoding="utf-8").splitlines()
FLOATS = ["float16", "bfloat16", "float32", "float64"]
BIT_INTS = ["int32", "int64", "uint32", "uint64"]
#: The float functions Tile IR expresses (ops, or compositions of them) and the two it has none for.
TILEIR_MATH = ["asin", "acos", "atan", "sinh", "cosh", "log1p", "expm1", "atan2", "fma"]
CUDA_ONLY_MATH = ["cbrt", "erfinv"]
PREDICATES = ["isnan", "isinf", "signbit"]
BIT_COUNTS = ["popc", "clz"]
#: The Tile IR ops (rows of its OPS table) these tests put through tileiras and tileirdisasm.
TILEIR_OPS_TESTED_HERE = {"atan2", "sinh", "cosh", "fma"}
#: The fast-math options on float32, as (fn, rounding_mode, flush_to_zero): every one ``ops.FAST_MATH`` allows.
FAST_F32 = [("exp", "approx", False), ("tanh", "approx", False), ("exp2", None, True), ("rsqrt", None, True),
            *((f, r, z) for f in ("sqrt", "truediv") for r in (None, "rn", "rz", "rm", "rp", "approx")
              for z in (False, True) if (r or z) and not (f == "sqrt" and r == "rn"))]
FAST_F64 = [(f, r, False) for f in ("sqrt", "truediv") for r in ("rz", "rm", "rp")]


# ---------------------------------------------------------------------------------------------- kernels


@tj.function
def math_op(FN, a, b, c):
    """``FN`` of tiles (or scalars) ``a``, ``b``, ``c``: one of the new math functions."""
    if FN == "asin":
        r = tj.asin(a)
    elif FN == "acos":
        r = tj.acos(a)
    elif FN == "atan":
        r = tj.atan(a)
    elif FN == "sinh":
        r = tj.sinh(a)
    elif FN == "cosh":
        r = tj.cosh(a)
    elif FN == "log1p":
        r = tj.log1p(a)
    elif FN == "expm1":
        r = tj.expm1(a)
    elif FN == "cbrt":
        r = tj.cbrt(a)
    elif FN == "erfinv":
        r = tj.erfinv(a)
    elif FN == "atan2":
        r = tj.atan2(a, b)
    elif FN == "fma":
        r = tj.fma(a, b, c)
    elif FN == "isnan":
        r = tj.isnan(a)
    elif FN == "isinf":
        r = tj.isinf(a)
    elif FN == "signbit":
        r = tj.signbit(a)
    elif FN == "popc":
        r = tj.popc(a)
    elif FN == "clz":
        r = tj.clz(a)
    return r


@tj.function
def fast_op(FN, MODE, FTZ, a, b):
    """``FN`` with a fast-math option: exp/tanh take ``MODE``, exp2/rsqrt ``FTZ``, sqrt and truediv both."""
    if FN == "exp":
        r = tj.exp(a, rounding_mode=MODE)
    elif FN == "tanh":
        r = tj.tanh(a, rounding_mode=MODE)
    elif FN == "exp2":
        r = tj.exp2(a, flush_to_zero=FTZ)
    elif FN == "rsqrt":
        r = tj.rsqrt(a, flush_to_zero=FTZ)
    elif FN == "sqrt":
        r = tj.sqrt(a, rounding_mode=MODE, flush_to_zero=FTZ)
    else:
        r = tj.truediv(a, b, rounding_mode=MODE, flush_to_zero=FTZ)
    return r


@tj.kernel
def math_k(x, y, z, out, FN: tj.Constant[str], TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(TILE,))
    b = tj.load(y, index=(i,), shape=(TILE,))
    c = tj.load(z, index=(i,), shape=(TILE,))
    tj.store(out, index=(i,), tile=math_op(FN, a, b, c))


@tj.kernel
def fast_k(x, y, out, FN: tj.Constant[str], MODE: tj.Constant[object], FTZ: tj.Constant[bool],
           TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(TILE,), padding=1)
    b = tj.load(y, index=(i,), shape=(TILE,), padding=1)
    tj.store(out, index=(i,), tile=fast_op(FN, MODE, FTZ, a, b))


@tj.kernel
def all_math(x, y, z, out, flags, FNS: tj.Constant[tuple], FAST: tj.Constant[tuple], TILE: tj.Constant[int]):
    """Every function of ``FNS`` and fast-math option of ``FAST`` in one kernel (one module per dtype)."""
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(TILE,))
    b = tj.load(y, index=(i,), shape=(TILE,))
    c = tj.load(z, index=(i,), shape=(TILE,))
    acc = a
    for FN in FNS:
        acc = acc + math_op(FN, a, b, c)
    for FN, MODE, FTZ in FAST:
        acc = acc + fast_op(FN, MODE, FTZ, a, b)
    tj.store(out, index=(i,), tile=acc)
    tj.store(flags, index=(i,), tile=tj.isnan(acc) | tj.isinf(b) | tj.signbit(c))


@tj.kernel
def bits_k(x, out, FN: tj.Constant[str], TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(TILE,))
    tj.store(out, index=(i,), tile=math_op(FN, a, a, a))


@tj.kernel
def scalars_k(s, t, out, flags):
    """The functions of scalar parameters (0-d tiles), one output element each."""
    tj.store(out, index=(0,), tile=tj.asin(s))
    tj.store(out, index=(1,), tile=tj.atan2(s, t))
    tj.store(out, index=(2,), tile=tj.fma(s, t, 0.25))
    tj.store(out, index=(3,), tile=tj.log1p(t))
    tj.store(out, index=(4,), tile=tj.sqrt(t, rounding_mode="rz"))
    tj.store(flags, index=(0,), tile=tj.signbit(s))
    tj.store(flags, index=(1,), tile=tj.isinf(t / 0.0))


def arr(dtype: str) -> Any:
    return getattr(tj, dtype)[:]


def fast_cases(dtype: str) -> list[tuple[str, str | None, bool]]:
    """The fast-math options ``dtype`` takes (float32 all, float64 the directed roundings, 16-bit none)."""
    return FAST_F32 if dtype == "float32" else FAST_F64 if dtype == "float64" else []


@functools.cache
def all_math_art(dtype: str, fns: tuple[str, ...], target: str = "sm_90") -> Any:
    """``all_math`` on ``dtype`` with ``fns`` and every fast-math option the dtype takes, for ``target``."""
    a = arr(dtype)
    return tj.compile(all_math, (a, a, a, a, tj.bool_[:]), target=target, backend="cuda",
                      constants={"FNS": fns, "FAST": tuple(fast_cases(dtype)), "TILE": 64})


def math_art(fn: str, dtype: str = "float32") -> Any:
    """``math_k`` of one function on ``dtype`` (output: bool for the predicates)."""
    a = arr(dtype)
    return tj.compile(math_k, (a, a, a, tj.bool_[:] if fn in PREDICATES else a), target="sm_90", backend="cuda",
                      constants={"FN": fn, "TILE": 16})


# ---------------------------------------------------------------------------------------------- CPU: IR


@pytest.mark.parametrize("fn", [*TILEIR_MATH, *PREDICATES])
def test_ir_of_each_function(fn: str) -> None:
    text = math_art(fn).ir_text()
    if fn == "atan2":
        assert "= binary %a, %b {fn='atan2'} : tile<16xf32>" in text
    elif fn == "fma":
        assert "= fma %a, %b, %c : tile<16xf32>" in text
    elif fn in PREDICATES:
        assert f"= unary %a {{fn='{fn}'}} : tile<16xi1>" in text  # a bool tile
    else:
        assert f"= unary %a {{fn='{fn}'}} : tile<16xf32>" in text


@pytest.mark.cuda_only
@pytest.mark.parametrize("fn", CUDA_ONLY_MATH)
def test_ir_and_cuda_of_the_cuda_only_functions(fn: str) -> None:
    art = math_art(fn, "float64")
    assert f"= unary %a {{fn='{fn}'}} : tile<16xf64>" in art.ir_text()
    assert f"tj::{fn}(" in art.cuda_source()


def test_ir_of_integers_and_bools() -> None:
    """Bit counts of 32- and 64-bit integers are int32; integers are never NaN or infinite (constants), their
    sign bit is ``x < 0``; float math of an integer computes in float32."""
    for dtype in BIT_INTS:
        for fn in ("popc", "clz"):
            text = tj.compile(bits_k, (arr(dtype), tj.int32[:]), constants={"FN": fn, "TILE": 16},
                              target="sm_90").ir_text()
            short = {"int32": "i32", "int64": "i64", "uint32": "u32", "uint64": "u64"}[dtype]
            assert f"= unary %a {{fn='{fn}'}} : tile<16xi32>" in text and f"tile<16x{short}>" in text
    i32 = tj.int32[:]

    def ir(fn: str, *types: Any) -> str:
        return tj.compile(math_k, types, constants={"FN": fn, "TILE": 16}, target="sm_90").ir_text()

    nan = ir("isnan", i32, i32, i32, tj.bool_[:])
    assert "unary" not in nan and "constant {value=False} : tile<16xi1>" in nan
    assert re.search(r"compare %a, %\w+ \{fn='lt'\} : tile<16xi1>", ir("signbit", i32, i32, i32, tj.bool_[:]))
    assert "constant {value=False} : tile<16xi1>" in ir("signbit", *(tj.uint32[:],) * 3, tj.bool_[:])
    asin = ir("asin", i32, i32, i32, tj.float32[:])
    assert "= cast %a : tile<16xf32>" in asin and "{fn='asin'} : tile<16xf32>" in asin
    mixed = ir("fma", tj.float16[:], i32, tj.float64[:], tj.float64[:])
    assert re.search(r"= fma %\w+, %\w+, %c : tile<16xf64>", mixed)  # promoted as + would: float64


def test_ir_of_the_fast_math_options() -> None:
    """Options show in the IR only when set; an option equal to the op's default is no option."""
    a = tj.float32[:]
    for (fn, mode, ftz), want in [
        (("exp", "approx", False), "{fn='exp', rounding='approx'}"),
        (("exp", "full", False), "{fn='exp'}"),
        (("sqrt", "rn", True), "{fn='sqrt', ftz=True}"),
        (("sqrt", tj.RoundingMode.RM, False), "{fn='sqrt', rounding='rm'}"),
        (("truediv", "full", False), "{fn='truediv'}"),
        (("truediv", "rn", False), "{fn='truediv', rounding='rn'}"),
        (("truediv", tj.RoundingMode.APPROX, True), "{fn='truediv', rounding='approx', ftz=True}"),
        (("exp2", None, True), "{fn='exp2', ftz=True}"),
    ]:
        text = fast_ir(a, fn, mode, ftz)
        assert want in text, (fn, mode, ftz, text)
    assert "{fn='truediv'}" in fast_ir(tj.float64[:], "truediv", "rn", False)  # float64 division is IEEE already
    assert "{fn='sqrt'} : tile<16xf16>" in fast_ir(tj.float16[:], "sqrt", "rn", False)  # rn: sqrt's default


def fast_ir(a: Any, fn: str, mode: object, ftz: bool) -> str:
    """The IR text of ``fast_k`` on arrays ``a``."""
    return tj.compile(fast_k, (a, a, a), constants={"FN": fn, "MODE": mode, "FTZ": ftz, "TILE": 16},
                      target="sm_90").ir_text()


def test_scalars_take_the_functions() -> None:
    text = tj.compile(scalars_k, (tj.float32, tj.float32, tj.float32[:], tj.bool_[:]), target="sm_90").ir_text()
    for line in ("= unary %s {fn='asin'} : f32", "= binary %s, %t {fn='atan2'} : f32",
                 "= unary %t {fn='sqrt', rounding='rz'} : f32", "= unary %s {fn='signbit'} : i1"):
        assert line in text, line
    assert re.search(r"= fma %s, %t, %\w+ : f32", text)


# ---------------------------------------------------------------------------------------------- CPU: folding


@tj.kernel
def folds(out, flags, counts):
    tj.store(out, index=(0,), tile=tj.asin(0.5) + tj.acos(0.5) + tj.atan(1.0) + tj.atan2(1.0, -1.0))
    tj.store(out, index=(1,), tile=tj.sinh(1.0) + tj.cosh(1.0) + tj.log1p(1e-10) + tj.expm1(1e-10))
    tj.store(out, index=(2,), tile=tj.cbrt(-27.0) + tj.erfinv(0.5) + tj.log1p(-1.0))
    tj.store(out, index=(3,), tile=tj.fma(0.1, 10.0, -1.0))
    tj.store(out, index=(4,), tile=tj.truediv(1, 4) + tj.exp(0.0, rounding_mode="approx"))
    tj.store(out, index=(5,), tile=tj.sinh(tj.float32(1.0)))  # a constant tile: folded by the IR passes
    tj.store(out, index=(6,), tile=tj.sqrt(tj.float32(2.0), rounding_mode="rz"))  # left for the GPU
    tj.store(flags, index=(0,), tile=tj.isnan(float("nan")) and not tj.isnan(1.0) and tj.isinf(-float("inf")))
    tj.store(flags, index=(1,), tile=tj.signbit(-0.0) and not tj.signbit(0.0) and tj.signbit(-3))
    tj.store(flags, index=(2,), tile=tj.isnan(tj.float32(float("nan"))))
    tj.store(counts, index=(0,), tile=tj.popc(-1) * 1000 + tj.clz(1))
    tj.store(counts, index=(1,), tile=tj.clz(2**40) * 1000 + tj.popc(2**40 + 7))
    tj.store(counts, index=(2,), tile=tj.popc(tj.int64(-1)) * 1000 + tj.clz(tj.uint32(0)))


def test_compile_time_numbers_fold() -> None:
    fn = tj.compile(folds, (tj.float64[:], tj.bool_[:], tj.int64[:]), target="sm_90").ir()
    consts = [op.value for op in fn.body.ops if op.NAME == "constant"]
    expected = [
        math.asin(0.5) + math.acos(0.5) + math.atan(1.0) + math.atan2(1.0, -1.0),
        math.sinh(1.0) + math.cosh(1.0) + 2e-10,
        -3.0 + 0.4769362762044699 - math.inf,  # log1p(-1) is -inf, not NaN
        5.551115123125783e-17,  # 0.1 * 10 - 1 rounded once; twice it is 0
        0.25 + 1.0,
        float(np.sinh(np.float32(1.0))),
    ]
    for want in expected:
        assert any(isinstance(v, float) and (v == want or abs(v - want) <= 1e-15 * abs(want)) for v in consts), want
    unary = [op for op in fn.body.ops if op.NAME == "unary"]
    assert [(op.fn, op.rounding) for op in unary] == [("sqrt", "rz")]  # a directed rounding is not folded
    value = {op.result: op.value for op in fn.body.ops if op.NAME == "constant"}
    stored = {}
    for op in fn.body.ops:
        if op.NAME == "store":
            stored.setdefault(op.array.name, []).append(value.get(op.tile))
    assert stored["flags"] == [True, True, True]
    assert stored["counts"] == [32 * 1000 + 31, 23 * 1000 + 4, 64 * 1000 + 32]


def test_erfinv_reference_is_the_inverse_of_erf() -> None:
    from tilejit.language.ir.passes import erfinv

    for y in (-0.999999, -0.9, -0.3, 1e-300, 0.2, 0.5, 0.75, 0.99, 0.9999999999):
        x = erfinv(y)
        assert math.erf(x) == pytest.approx(y, rel=4e-16, abs=1e-300)
        if y > 0.5:
            assert math.erfc(x) == pytest.approx(1 - y, rel=1e-13)
    assert erfinv(1.0) == math.inf and erfinv(-1.0) == -math.inf and math.isnan(erfinv(1.5))
    assert math.copysign(1, erfinv(-0.0)) < 0


# ---------------------------------------------------------------------------------------------- CPU: CUDA C++


@pytest.mark.parametrize("dtype", FLOATS)
def test_cuda_source_names_each_function(dtype: str) -> None:
    source = all_math_art(dtype, tuple(TILEIR_MATH + PREDICATES)).cuda_source()
    for fn in ("asin", "acos", "atan", "sinh", "cosh", "log1p", "expm1", "atan2", "fma", "isnan", "isinf",
               "signbit"):
        assert f"tj::{fn}(" in source, fn
    for fn, mode, ftz in fast_cases(dtype):  # math.cuh's tj::<fn>_<rounding>[_ftz]
        name = "_".join(p for p in (fn, mode or "", "ftz" if ftz else "") if p)
        assert f"tj::{name}(" in source, name
    if dtype in ("float16", "bfloat16"):
        assert "tj::asin(static_cast<float>(" in source  # 16-bit floats compute in float32
        assert "tj::signbit(t" in source and "tj::signbit(static_cast" not in source  # but are classified as they are


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_nvrtc_compiles_every_function_to_ptx(dtype: str, arch: str, nvrtc_here: Path) -> None:
    ptx = all_math_art(dtype, tuple(TILEIR_MATH + PREDICATES), arch).ptx()
    assert f".target {arch}" in ptx
    if dtype == "float32":
        for ins in ("sqrt.rz.ftz.f32", "sqrt.approx.f32", "sqrt.rn.ftz.f32", "div.approx.ftz.f32", "div.rn.f32",
                    "div.rp.ftz.f32", "div.full.ftz.f32", "ex2.approx.ftz.f32", "rsqrt.approx.ftz.f32",
                    "tanh.approx.f32", "fma.rn.f32"):
            assert ins in ptx, ins
    if dtype == "float64":
        for ins in ("sqrt.rz.f64", "sqrt.rm.f64", "div.rp.f64", "fma.rn.f64"):
            assert ins in ptx, ins


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", BIT_INTS)
def test_nvrtc_compiles_the_bit_counts(dtype: str, arch: str, nvrtc_here: Path) -> None:
    width = 64 if "64" in dtype else 32
    for fn, ins in (("popc", f"popc.b{width}"), ("clz", f"clz.b{width}")):
        art = tj.compile(bits_k, (arr(dtype), tj.int32[:]), constants={"FN": fn, "TILE": 128}, target=arch)
        assert ins in art.ptx()


@pytest.mark.cuda_only
@pytest.mark.parametrize("dtype", FLOATS)
def test_every_cuda_major_compiles_every_function(dtype: str, toolkit: Any) -> None:
    """cbrt and erfinv (CUDA C++ only) with all the others, by the NVRTC of each CUDA major, for sm_80."""
    from tilejit.bindings.nvrtc import load_nvrtc
    from tilejit.compiler.nvrtc import compile_cuda

    ck = all_math_art(dtype, tuple(TILEIR_MATH + CUDA_ONLY_MATH + PREDICATES), "sm_80").cuda_kernel()
    assert "tj::cbrt(" in ck.source and "tj::erfinv(" in ck.source
    prog = compile_cuda(ck.source, name=f"{ck.name}.cu", headers=ck.headers, target="sm_80", output="ptx",
                        nvrtc=load_nvrtc(str(toolkit.nvrtc)), cache=False)
    assert b".target sm_80" in prog.code


# ---------------------------------------------------------------------------------------------- CPU: Tile IR


@pytest.mark.parametrize("dtype", FLOATS)
def test_tileir_text_of_each_function(dtype: str) -> None:
    from tilejit.backends.tileir import module_text

    text = module_text(all_math_art(dtype, tuple(TILEIR_MATH + PREDICATES)).ir(), "sm_90")
    compute = "f64" if dtype == "float64" else "f32"
    for op in ("atan2", "sinh", "cosh"):
        assert re.search(rf"= {op} %\w+(, %\w+)? : tile<64x{compute}>", text), op
    assert re.search(rf"= fma %\w+, %\w+, %\w+ : tile<64x{compute}>", text)
    assert re.search(rf"= exp %\w+ : tile<64x{compute}>", text) and "cmpf not_equal unordered" in text
    if dtype == "float32":
        for attrs in ("exp %a rounding<approx>", "tanh %a rounding<approx>", "exp2 %a flush_to_zero",
                      "rsqrt %a flush_to_zero", "sqrt %a rounding<zero> flush_to_zero", "sqrt %a rounding<approx>",
                      "divf %a, %b rounding<positive_inf> flush_to_zero", "divf %a, %b rounding<full> flush_to_zero",
                      "divf %a, %b rounding<approx>", "divf %a, %b flush_to_zero"):
            assert f"= {attrs} : tile<64xf32>" in text, attrs
    if dtype == "float64":
        assert "= sqrt %a rounding<negative_inf> : tile<64xf64>" in text
        assert "= divf %a, %b rounding<zero> : tile<64xf64>" in text


def test_tileir_text_of_the_compositions_golden() -> None:
    """asin is ``atan2(x, sqrt((1 - x)(1 + x)))``; log1p is ``log(u) * (x / (u - 1))`` with ``u = 1 + x``, x where
    ``u - 1`` is 0 and +inf at +inf; isinf is ``|x| == inf``, signbit the encoding below 0."""
    from tilejit.backends.tileir import module_text

    def body(fn: str) -> list[str]:
        lines = [ln.strip() for ln in module_text(math_art(fn).ir(), "sm_90").splitlines()]
        first = max(i for i, ln in enumerate(lines) if "load_view_tko" in ln) + 1
        return lines[first:next(i for i, ln in enumerate(lines) if "store_view_tko" in ln)]

    assert body("asin") == [
        "%1 = constant <f32: 1.000000e+00> : tile<16xf32>",
        "%2 = subf %1, %a : tile<16xf32>",
        "%3 = addf %1, %a : tile<16xf32>",
        "%4 = mulf %2, %3 : tile<16xf32>",
        "%5 = sqrt %4 : tile<16xf32>",
        "%r = atan2 %a, %5 : tile<16xf32>",
    ]
    assert body("log1p") == [
        "%1 = constant <f32: 1.000000e+00> : tile<16xf32>",
        "%2 = constant <f32: 0x7F800000> : tile<16xf32>",
        "%3 = addf %1, %a : tile<16xf32>",
        "%4 = subf %3, %1 : tile<16xf32>",
        "%5 = log %3 : tile<16xf32>",
        "%6 = divf %a, %4 : tile<16xf32>",
        "%7 = mulf %5, %6 : tile<16xf32>",
        "%8 = constant <f32: 0.000000e+00> : tile<16xf32>",
        "%9 = cmpf equal ordered %4, %8 : tile<16xf32> -> tile<16xi1>",
        "%10 = select %9, %a, %7 : tile<16xi1>, tile<16xf32>",
        "%11 = cmpf equal ordered %a, %2 : tile<16xf32> -> tile<16xi1>",
        "%r = select %11, %a, %10 : tile<16xi1>, tile<16xf32>",
    ]
    assert body("isinf") == [
        "%1 = absf %a : tile<16xf32>",
        "%2 = constant <f32: 0x7F800000> : tile<16xf32>",
        "%r = cmpf equal ordered %1, %2 : tile<16xf32> -> tile<16xi1>",
        "%3 = exti %r unsigned : tile<16xi1> -> tile<16xi8>",  # a bool is a byte in memory
    ]
    assert body("signbit") == [
        "%1 = bitcast %a : tile<16xf32> -> tile<16xi32>",
        "%2 = constant <i32: 0> : tile<16xi32>",
        "%r = cmpi less_than %1, %2, signed : tile<16xi32> -> tile<16xi1>",
        "%3 = exti %r unsigned : tile<16xi1> -> tile<16xi8>",
    ]


@pytest.mark.parametrize("dtype", FLOATS)
def test_tileiras_compiles_every_function_tile_ir_has(dtype: str, tileir_toolchain: Any) -> None:
    """tileiras compiles the module for sm_80 and sm_90 and tileirdisasm prints it as our text form does."""
    from test_tileir_coverage import same_module_text

    from tilejit.backends.tileir import generate_bytecode, module_text
    from tilejit.compiler.tileiras import disassemble, run_tileiras

    fn = all_math_art(dtype, tuple(TILEIR_MATH + PREDICATES)).ir()
    bytecode = generate_bytecode(fn, "sm_90")
    for target in ("sm_80", "sm_90"):
        assert run_tileiras(generate_bytecode(fn, target), target, toolchain=tileir_toolchain)[:4] == b"\x7fELF"
    assert same_module_text(disassemble(bytecode, toolchain=tileir_toolchain), module_text(fn, "sm_90"))


@pytest.mark.parametrize("dtype", BIT_INTS)
def test_tileiras_compiles_the_bit_counts(dtype: str, tileir_toolchain: Any) -> None:
    """popc and clz are integer ops in Tile IR (no op of its own): an unsigned SWAR sum, a binary search."""
    from tilejit.backends.tileir import generate_bytecode, module_text
    from tilejit.compiler.tileiras import run_tileiras

    for fn in ("popc", "clz"):
        ir = tj.compile(bits_k, (arr(dtype), tj.int32[:]), constants={"FN": fn, "TILE": 64}, target="sm_90").ir()
        text = module_text(ir, "sm_90")
        assert "unsigned" in text and ("trunci" in text) == ("64" in dtype)
        assert run_tileiras(generate_bytecode(ir, "sm_90"), "sm_90", toolchain=tileir_toolchain)[:4] == b"\x7fELF"


def test_the_tested_tile_ir_ops_are_made_here() -> None:
    """Every op of ``TILEIR_OPS_TESTED_HERE`` (test_tileir_writer's inventory counts on this file for them) is
    in the modules the tests above put through tileiras and tileirdisasm."""
    from tilejit.backends.tileir.lower import lower_function

    made = {op.name for d in FLOATS
            for op in lower_function(all_math_art(d, tuple(TILEIR_MATH + PREDICATES)).ir()).functions[0].body}
    assert made >= TILEIR_OPS_TESTED_HERE


def test_atan2_needs_bytecode_13_2_and_the_rest_reads_at_13_1(tileir_toolchain: Any) -> None:
    from tilejit.backends.tileir import generate_bytecode
    from tilejit.compiler.tileiras import run_tileiras

    with pytest.raises(TileIRUnsupportedError) as info:
        generate_bytecode(math_art("atan2").ir(), "sm_100", "13.1")
    line, col = where_in(LINES, "tj.atan2(a, b)")
    assert (info.value.line, info.value.col) == (line, col)
    assert "the Tile IR op 'atan2' needs bytecode version 13.2 or newer, not 13.1" in info.value.message
    assert 'backend="cuda"' in info.value.message
    assert run_tileiras(generate_bytecode(math_art("atan2").ir(), "sm_80", "13.2"), "sm_80",
                        toolchain=tileir_toolchain)[:4] == b"\x7fELF"
    for fn in ("sinh", "cosh", "fma", "log1p"):
        assert run_tileiras(generate_bytecode(math_art(fn).ir(), "sm_100", "13.1"), "sm_100",
                            toolchain=tileir_toolchain)[:4] == b"\x7fELF"


@pytest.mark.parametrize("fn", CUDA_ONLY_MATH)
def test_tile_ir_refuses_cbrt_and_erfinv_naming_the_cuda_backend(fn: str) -> None:
    from tilejit.backends.tileir import module_text

    a = ArrayType(float32, 1)
    ir = translate(math_k, {"x": a, "y": a, "z": a, "out": a}, {"FN": fn, "TILE": 16})  # unoptimized: not recorded
    with pytest.raises(TileIRUnsupportedError) as info:
        module_text(ir, "sm_90")
    line, col = where_in(LINES, f"tj.{fn}(a)")
    assert (info.value.filename, info.value.line, info.value.col) == (__file__, line, col)
    assert f"cannot express 'unary' (fn='{fn}' on float32)" in info.value.message
    assert 'compile this kernel with backend="cuda"' in info.value.message


# ---------------------------------------------------------------------------------------------- CPU: tf32


@tj.kernel
def mm_k(a, b, c, K: tj.Constant[int], PRECISION: tj.Constant[str], BM: tj.Constant[int], BN: tj.Constant[int],
         BK: tj.Constant[int]):
    i, j = tj.bid(0), tj.bid(1)
    acc = tj.zeros((BM, BN), tj.float32)
    for k in tj.static_range(tj.cdiv(K, BK)):
        ta = tj.load(a, index=(i, k), shape=(BM, BK))
        tb = tj.load(b, index=(k, j), shape=(BK, BN))
        acc = tj.mma(ta, tb, acc, precision=PRECISION)
    tj.store(c, index=(i, j), tile=acc)


@functools.cache
def mm_art(precision: str, target: str = "sm_90") -> Any:
    f = tj.float32[:, :]
    return tj.compile(mm_k, (f, f, f), constants={"K": 64, "PRECISION": precision, "BM": 64, "BN": 64, "BK": 32},
                      target=target, backend="cuda")


def test_tf32_is_asked_for_and_the_default_is_full_float32() -> None:
    assert "{tf32=True}" in mm_art("tf32").ir_text()
    assert "{tf32=False}" in mm_art("ieee").ir_text()
    assert "tj::TensorCoreTF32<" in mm_art("tf32").cuda_source()
    assert "TF32" not in mm_art("ieee").cuda_source()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_tf32_ptx_uses_tf32_tensor_cores(arch: str, nvrtc_here: Path) -> None:
    ptx = mm_art("tf32", arch).ptx()
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx and "cvt.rna.tf32.f32" in ptx
    assert "tf32" not in mm_art("ieee", arch).ptx()


def test_tf32_in_tile_ir_rounds_the_operands_to_tf32(tileir_toolchain: Any) -> None:
    from tilejit.backends.tileir import generate_bytecode, module_text
    from tilejit.compiler.tileiras import run_tileiras

    text = module_text(mm_art("tf32").ir(), "sm_90")
    assert "-> tile<64x32xtf32>" in text and "mmaf" in text
    assert "tf32" not in module_text(mm_art("ieee").ir(), "sm_90")
    assert run_tileiras(generate_bytecode(mm_art("tf32").ir(), "sm_90"), "sm_90",
                        toolchain=tileir_toolchain)[:4] == b"\x7fELF"


@tj.kernel
def matmul_k(a, b, c, PRECISION: tj.Constant[str]):
    ta = tj.load(a, index=(0, 0), shape=(16, 16))
    tb = tj.load(b, index=(0, 0), shape=(16, 16))
    tj.store(c, index=(0, 0), tile=tj.matmul(ta, tb, precision=PRECISION))


def test_matmul_takes_the_precision_too() -> None:
    f = tj.float32[:, :]
    assert "{tf32=True}" in tj.compile(matmul_k, (f, f, f), constants={"PRECISION": "tf32"}, target="sm_90").ir_text()


# ---------------------------------------------------------------------------------------------- CPU: static


@tj.function
def describe_twice(t):
    tj.static_print("helper sees", t, t.shape[0] * 2)


@tj.kernel
def printing(x, out, n, TILE: tj.Constant[int], NAME: tj.Constant[str]):
    t = tj.load(x, index=(0,), shape=(TILE,))
    tj.static_print("kernel", NAME, "TILE =", TILE, t, x, n, t.dtype, (t, 3))
    tj.static_assert(TILE % 16 == 0, "TILE must be a multiple of 16")
    describe_twice(t.astype(tj.float16))
    acc = 0
    for _k in range(n):  # acc becomes a float tile in the loop: the body is translated twice
        tj.static_print("in the loop")
        acc = acc + t
    tj.store(out, index=(0,), tile=acc)


def test_static_print_prints_once_per_compile(capsys: pytest.CaptureFixture[str]) -> None:
    art = tj.compile(printing, (tj.float32[:], tj.float32[:], tj.int32), constants={"TILE": 32, "NAME": "demo"},
                     target="sm_90")
    assert capsys.readouterr().out == ""  # nothing until the kernel is translated
    art.ir()
    art.ir_text()
    assert capsys.readouterr().out.splitlines() == [
        "kernel demo TILE = 32 tile[float32, (32,)] array[float32, 1-d] tile[int32, ()] float32 "
        "(tile[float32, (32,)], 3)",
        "helper sees tile[float16, (32,)] 64",
        "in the loop",
    ]


def test_static_print_output_comes_before_a_later_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(TileCompileError, match="TILE must be a multiple of 16"):
        tj.compile(printing, (tj.float32[:], tj.float32[:], tj.int32), constants={"TILE": 8, "NAME": "bad"},
                   target="sm_90").ir()
    assert capsys.readouterr().out.startswith("kernel bad TILE = 8 ")


def check(kernel: Callable[..., Any], at: str, message: str, consts: dict[str, Any] | None = None,
          dtype: Any = float32) -> None:
    """Translating ``kernel`` raises the located error ``message`` at the first character of ``at``."""
    with pytest.raises(TileCompileError) as info:
        translate(kernel, {"x": ArrayType(dtype, 1), "out": ArrayType(dtype, 1), "n": scalar(int32)}, consts or {})
    assert_located(info.value, __file__, LINES, at, message)


def k_assert_false(x, out, n, TILE: tj.Constant[int]):
    tj.static_assert(TILE > 64, ("TILE is", TILE))


def k_assert_no_message(x, out, n):
    tj.static_assert(x.ndim == 2)


def k_assert_run_time(x, out, n):
    tj.static_assert(n > 0, "n must be positive")


def k_assert_tile(x, out, n):
    t = tj.load(x, index=(0,), shape=(16,))
    tj.static_assert(t.shape == (16,) and t.dtype == tj.float32, "a float32 row")
    tj.static_assert(t, "a tile is no condition")


def test_static_assert_errors_are_located() -> None:
    check(k_assert_false, "tj.static_assert(TILE > 64", "static assertion failed: ('TILE is', 16)", {"TILE": 16})
    check(k_assert_no_message, "tj.static_assert(x.ndim == 2)", "static assertion failed")
    check(k_assert_run_time, "tj.static_assert(n > 0", "tj.static_assert(): the condition must be known at compile "
          "time, got a scalar of type i1")
    check(k_assert_tile, 'tj.static_assert(t, "a tile', "the condition must be known at compile time, got a tile")


# ---------------------------------------------------------------------------------------------- CPU: errors


def k_bad_mode(x, out, n):
    t = tj.load(x, index=(0,), shape=(16,))
    r = tj.exp(t, rounding_mode="fast")


def k_mode_not_taken(x, out, n):
    t = tj.load(x, index=(0,), shape=(16,))
    r = tj.exp(t, rounding_mode="rz")


def k_approx_f64(x, out, n):
    t = tj.load(x, index=(0,), shape=(16,))
    r = tj.truediv(t, 3.0, rounding_mode=tj.RoundingMode.APPROX)


def k_full_f64(x, out, n):
    t = tj.load(x, index=(0,), shape=(16,))
    r = tj.truediv(t, 3.0, rounding_mode="full")


def k_rm_f16(x, out, n):
    t = tj.load(x, index=(0,), shape=(16,))
    r = tj.sqrt(t, rounding_mode="rm")


def k_ftz_not_bool(x, out, n):
    t = tj.load(x, index=(0,), shape=(16,))
    r = tj.exp2(t, flush_to_zero=n > 0)


def k_unknown_option(x, out, n):
    t = tj.load(x, index=(0,), shape=(16,))
    r = tj.sin(t, approx=True)


def k_popc_float(x, out, n):
    t = tj.load(x, index=(0,), shape=(16,))
    r = tj.popc(t)


def k_clz_int8(x, out, n):
    t = tj.load(x, index=(0,), shape=(16,))
    r = tj.clz(t.astype(tj.int8))


def k_popc_constant_float(x, out, n):
    r = tj.popc(2.5)


def k_fma_array(x, out, n):
    r = tj.fma(x, 1.0, 2.0)


def k_bad_precision(x, out, n):
    t = tj.load(x, index=(0, 0), shape=(16, 16))
    r = tj.mma(t, t, tj.zeros((16, 16), tj.float32), precision="fp32")


def k_tf32_f16(x, out, n):
    t = tj.load(x, index=(0, 0), shape=(16, 16))
    r = tj.mma(t, t, tj.zeros((16, 16), tj.float32), precision="tf32")


def k_truediv_zero(x, out, n):
    r = tj.truediv(1.0, 0)


def test_fast_math_errors_are_located() -> None:
    check(k_bad_mode, 'tj.exp(t, rounding_mode="fast")', "tj.exp(): rounding_mode must be None, a tj.RoundingMode or "
          "one of 'rn', 'rz', 'rm', 'rp', 'full', 'approx'; got the constant 'fast'")
    check(k_mode_not_taken, 'tj.exp(t, rounding_mode="rz")', "tj.exp() takes rounding_mode None, 'full', 'approx'; "
          "got 'rz'")
    check(k_approx_f64, "tj.truediv(t, 3.0, rounding_mode=tj.", "tj.truediv(): rounding_mode='approx' is for float32 "
          "only, not float64", dtype=float64)
    check(k_full_f64, 'tj.truediv(t, 3.0, rounding_mode="full")', "rounding_mode='full' is for float32 only, not "
          "float64", dtype=float64)
    check(k_rm_f16, 'tj.sqrt(t, rounding_mode="rm")', "tj.sqrt(): rounding_mode='rm' is for float32 and float64 "
          "only, not float16 (16-bit floats compute in float32 and round again)", dtype=float16)
    check(k_ftz_not_bool, "tj.exp2(t, flush_to_zero=n > 0)", "tj.exp2(): flush_to_zero must be a compile-time True "
          "or False, got a scalar of type i1")
    check(k_unknown_option, "tj.sin(t, approx=True)", "tj.sin(): got an unexpected keyword argument 'approx'")


def test_math_errors_are_located() -> None:
    check(k_popc_float, "tj.popc(t)", "tj.popc() counts the bits of int32, int64, uint32 or uint64 tiles, got "
          "float32")
    check(k_clz_int8, "tj.clz(t.astype(tj.int8))", "got int8 (convert it with .astype)")
    check(k_popc_constant_float, "tj.popc(2.5)", "tj.popc() counts the bits of integers, got the constant 2.5")
    check(k_fma_array, "tj.fma(x, 1.0, 2.0)", "tj.fma() expects tiles or numbers, got the array 'x'")
    check(k_truediv_zero, "tj.truediv(1.0, 0)", "tj.truediv() of compile-time values failed: division by zero")


def test_precision_errors_are_located() -> None:
    t2 = {"x": ArrayType(float32, 2), "out": ArrayType(float32, 1), "n": scalar(int32)}
    with pytest.raises(TileCompileError) as info:
        translate(k_bad_precision, t2, {})
    assert (info.value.line, info.value.col) == where_in(LINES, "tj.mma(t, t, tj.zeros((16, 16), tj.float32), "
                                                                "precision=\"fp32\")")
    assert "tj.mma(): precision must be 'ieee' (full float32 products) or 'tf32', got the constant 'fp32'" \
        in info.value.message
    with pytest.raises(TileCompileError) as info:
        translate(k_tf32_f16, {**t2, "x": ArrayType(float16, 2)}, {})
    assert "tj.mma(): precision='tf32' is for float32 inputs, got float16" in info.value.message
    assert info.value.line == where_in(LINES, "def k_tf32_f16(")[0] + 2


def test_the_verifier_refuses_options_an_op_does_not_take() -> None:
    from tilejit.errors import IRVerificationError
    from tilejit.language.ir import ops
    from tilejit.language.ir.verifier import verify

    ir = translate(fast_k, {"x": ArrayType(float32, 1), "y": ArrayType(float32, 1), "out": ArrayType(float32, 1)},
                   {"FN": "exp", "MODE": "approx", "FTZ": False, "TILE": 16})
    (op,) = [o for o in ir.body.ops if isinstance(o, ops.UnaryOp)]
    verify(ir)
    op.rounding = "rz"
    with pytest.raises(IRVerificationError, match="'exp' with rounding='rz', ftz=False on tile<16xf32>"):
        verify(ir)


# ---------------------------------------------------------------------------------------------- GPU

#: Relative tolerance per element (and absolute, near 0) of the math functions: the CUDA Math API's few ulp for
#: float32/float64 (Tile IR's compositions within a few more), the 16-bit floats' half ulp of one rounding.
RTOL = {"float16": 1.5e-3, "bfloat16": 8e-3, "float32": 4e-6, "float64": 1e-14}
ATOL = {"float16": 1e-7, "bfloat16": 1e-30, "float32": 1e-37, "float64": 1e-300}
#: What no result of these tests is: the poison of outputs (NaN is a result of several).
POISON = -12288.0


def erfinv_ref(y: float) -> float:
    """The inverse error function by bisection (on erfc near 1), independent of the package's own."""
    if math.isnan(y) or abs(y) > 1:
        return math.nan
    if abs(y) == 1:
        return math.copysign(math.inf, y)
    a = abs(y)
    lo, hi = 0.0, 6.0
    for _ in range(200):
        mid = (lo + hi) / 2
        below = math.erf(mid) < a if a <= 0.5 else math.erfc(mid) > 1 - a
        lo, hi = (mid, hi) if below else (lo, mid)
    return math.copysign(lo, y)


def fma_ref(a: float, b: float, c: float) -> float:
    """``a * b + c`` rounded once to float64 (exact through fractions when finite)."""
    if not all(map(math.isfinite, (a, b, c))):
        return a * b + c
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    return float(exact) if exact else a * b + c


REFERENCE: dict[str, Callable[..., Any]] = {
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "log1p": np.log1p,
    "expm1": np.expm1, "cbrt": np.cbrt, "erfinv": np.vectorize(erfinv_ref, otypes=[np.float64]),
    "atan2": np.arctan2, "fma": np.vectorize(fma_ref, otypes=[np.float64]),
}
#: Values each function meets besides random ones: domain ends, infinities, NaN, signed zeros, tiny and huge.
SPECIALS: dict[str, list[float]] = {
    "asin": [1, -1, 2, -2, math.inf, math.nan, -0.0, 1e-30], "acos": [1, -1, 1.5, -math.inf, math.nan, 0.0],
    "atan": [math.inf, -math.inf, math.nan, -0.0, 1e30], "sinh": [math.inf, -math.inf, math.nan, -0.0, 100, -100],
    "cosh": [math.inf, -math.inf, math.nan, 0.0, 100], "log1p": [-1, -2, math.inf, -math.inf, math.nan, -0.0, 1e-30,
                                                                 -1e-30, 1e30],
    "expm1": [math.inf, -math.inf, math.nan, -0.0, 1e-30, -1e-30, 100, -100],
    "cbrt": [math.inf, -math.inf, math.nan, -0.0, -8, 27, 1e-30], "erfinv": [1, -1, 2, math.nan, -0.0, 1e-30],
    "atan2": [math.inf, -math.inf, math.nan, 0.0, -0.0], "fma": [math.inf, -math.inf, math.nan, 0.0],
}


def sample(fn: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` random float64 inputs for ``fn``'s first operand, mostly in its domain."""
    if fn in ("asin", "acos", "erfinv"):
        return rng.uniform(-0.999, 0.999, n)
    if fn == "log1p":
        return np.where(rng.random(n) < 0.2, rng.uniform(-1e-4, 1e-4, n), rng.uniform(-0.99, 6.0, n))
    if fn in ("expm1", "sinh", "cosh"):
        return np.where(rng.random(n) < 0.2, rng.uniform(-1e-4, 1e-4, n), rng.uniform(-5.0, 5.0, n))
    return rng.standard_normal(n) * np.where(rng.random(n) < 0.2, 100.0, 2.0)


def with_specials(a: np.ndarray, values: list[float], rng: np.random.Generator) -> np.ndarray:
    """``a`` with each of ``values`` written at a few random places."""
    a = a.copy()
    for v in values:
        a[rng.integers(0, len(a), 3)] = v
    return a


def assert_math_close(got: np.ndarray, want: np.ndarray, dtype: str, rtol: float | None = None) -> None:
    """Same NaNs and infinities as ``want`` (rounded to ``dtype``), finite values within the tolerance."""
    g, exact = got.astype(np.float64), np.asarray(want, np.float64)
    w = exact.astype(np_dtype(dtype)).astype(np.float64)  # overflow in the dtype is inf, as on the GPU
    assert not (g == POISON).any(), "unwritten elements (still the poison value)"
    assert np.array_equal(np.isnan(g), np.isnan(w)), f"NaNs at {np.flatnonzero(np.isnan(g) != np.isnan(w))[:8]}"
    inf = np.isinf(w)
    assert np.array_equal(g[inf], w[inf]), "infinities differ from numpy's"
    fin = np.isfinite(w)
    tol = (rtol or RTOL[dtype]) * np.abs(exact[fin]) + ATOL[dtype]
    bad = np.abs(g[fin] - exact[fin]) > tol
    assert not bad.any(), f"{bad.sum()} elements off, e.g. got {g[fin][bad][:4]} for {w[fin][bad][:4]}"


def run(kernel: Any, inputs: list[np.ndarray], out_dtype: str, tile: int, **constants: Any) -> np.ndarray:
    """``kernel`` on ``inputs`` into a poisoned output of ``out_dtype``, one block per ``tile`` elements: floats
    poisoned with ``POISON``, integers with -1 (no bit count), bools once with each value (the results must agree)."""
    n = len(inputs[0])
    results = []
    for poison in ([True, False] if out_dtype == "bool" else [POISON if out_dtype in FLOATS else -1]):
        out = tj.asarray(np.full(n, poison).astype(np_dtype(out_dtype)))
        kernel[tj.cdiv(n, tile)](*(tj.asarray(np.ascontiguousarray(a)) for a in inputs), out, TILE=tile, **constants)
        results.append(out.numpy())
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0], err_msg="elements left unwritten")
    return results[0]


def check_function(fn: str, dtype: str, rng: np.random.Generator) -> None:
    n, tile = 1000, 256
    xs = [with_specials(sample(fn, n, rng), SPECIALS[fn], rng).astype(np_dtype(dtype)) for _ in range(3)]
    if fn in ("atan2", "fma"):
        xs[1] = with_specials(rng.standard_normal(n) * 3, SPECIALS[fn], rng).astype(np_dtype(dtype))
    got = run(math_k, xs, dtype, tile, FN=fn)
    args = [x.astype(np.float64) for x in xs[:{"atan2": 2, "fma": 3}.get(fn, 1)]]
    with np.errstate(all="ignore"):
        want = REFERENCE[fn](*args)
    assert_math_close(got, want, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("fn", TILEIR_MATH)
def test_gpu_function_against_numpy(fn: str, dtype: str, rng: np.random.Generator) -> None:
    check_function(fn, dtype, rng)


@pytest.mark.gpu
@pytest.mark.cuda_only
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("fn", CUDA_ONLY_MATH)
def test_gpu_cuda_only_function_against_numpy(fn: str, dtype: str, rng: np.random.Generator) -> None:
    check_function(fn, dtype, rng)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [*FLOATS, "int8", "int32", "uint16", "int64", "uint64", "bool"])
@pytest.mark.parametrize("fn", PREDICATES)
def test_gpu_predicates(fn: str, dtype: str, rng: np.random.Generator) -> None:
    n, tile = 700, 128
    if dtype in FLOATS:
        specials = [math.nan, -math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-40, -1e-40]
        x = with_specials(rng.standard_normal(n), specials, rng)
        x[:2] = [math.copysign(math.nan, -1.0), -0.0]  # a NaN with the sign bit, and -0.0
        x = x.astype(np_dtype(dtype))
    elif dtype == "bool":
        x = rng.integers(0, 2, n).astype(bool)
    else:
        info = np.iinfo(dtype)
        x = rng.integers(max(int(info.min), -100), 100, n).astype(dtype)
    got = run(math_k, [x, x, x], "bool", tile, FN=fn)
    # numpy: 16-bit floats through float64 (ml_dtypes has no signbit), bools as int8 (no isnan/signbit of bool)
    host = x.astype(np.float64) if dtype in ("bfloat16", "float16") else x.astype(np.int8) if dtype == "bool" else x
    want = {"isnan": np.isnan, "isinf": np.isinf, "signbit": np.signbit}[fn](host)
    np.testing.assert_array_equal(got, want)


def bit_count_ref(fn: str, v: int, bits: int) -> int:
    u = v % (1 << bits)
    return bin(u).count("1") if fn == "popc" else bits - u.bit_length()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", BIT_INTS)
@pytest.mark.parametrize("fn", ["popc", "clz"])
def test_gpu_bit_counts(fn: str, dtype: str, rng: np.random.Generator) -> None:
    n, tile = 900, 256
    info = np.iinfo(dtype)
    bits = info.bits
    raw = [int(h) << 32 | int(lo) for h, lo in zip(rng.integers(0, 1 << 32, n), rng.integers(0, 1 << 32, n))]
    shift = rng.integers(0, bits, n)  # values of every length
    vals = [(v % (1 << bits)) >> int(s) for v, s in zip(raw, shift)]
    vals[:4] = [0, (1 << bits) - 1, 1, 1 << (bits - 1)]
    x = np.array([v - (1 << bits) if info.min < 0 and v >> (bits - 1) else v for v in vals], dtype=dtype)
    got = run(bits_k, [x], "int32", tile, FN=fn)
    np.testing.assert_array_equal(got, [bit_count_ref(fn, int(v), bits) for v in x])


def directed(candidate: Any, sign: Callable[[Any], int], mode: str, negative: bool) -> Any:
    """The float of ``candidate``'s type that rounds the true value by ``mode`` (rz, rm, rp), from a candidate
    within an ulp; ``sign(c)`` is the sign of ``c`` minus the true value."""
    t = type(candidate)
    down = mode == "rm" or (mode == "rz" and not negative)
    c = candidate
    if down:
        while sign(c) > 0:
            c = np.nextafter(c, t(-np.inf))
        while sign(np.nextafter(c, t(np.inf))) <= 0:
            c = np.nextafter(c, t(np.inf))
    else:
        while sign(c) < 0:
            c = np.nextafter(c, t(np.inf))
        while sign(np.nextafter(c, t(-np.inf))) >= 0:
            c = np.nextafter(c, t(-np.inf))
    return c


def directed_ref(fn: str, mode: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x / y or sqrt(x) rounded toward zero, -inf or +inf, exactly (fractions)."""
    out = []
    for a, b in zip(x, y):
        fa, fb = Fraction(float(a)), Fraction(float(b))
        if fn == "truediv":
            exact = fa / fb
            out.append(directed(x.dtype.type(float(exact)), lambda c, e=exact: (Fraction(float(c)) > e) -
                                (Fraction(float(c)) < e), mode, exact < 0))
        else:
            def sign(c: Any, v: Fraction = fa) -> int:
                sq = Fraction(float(c)) ** 2 if c >= 0 else Fraction(-1)
                return (sq > v) - (sq < v)

            out.append(directed(x.dtype.type(math.sqrt(float(a))), sign, mode, False))
    return np.array(out, dtype=x.dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fn", ["truediv", "sqrt"])
@pytest.mark.parametrize("mode", ["rz", "rm", "rp"])
def test_gpu_directed_roundings_are_exact(fn: str, mode: str, dtype: str, rng: np.random.Generator) -> None:
    n, tile = 600, 128
    x = (rng.standard_normal(n) * 10).astype(dtype)
    if fn == "sqrt":
        x = np.abs(x)
    y = (rng.standard_normal(n) * 3).astype(dtype)
    y[y == 0] = 1
    got = run(fast_k, [x, y], dtype, tile, FN=fn, MODE=mode, FTZ=False)
    np.testing.assert_array_equal(got, directed_ref(fn, mode, x, y))


@pytest.mark.gpu
def test_gpu_round_to_nearest_division_is_ieee(rng: np.random.Generator) -> None:
    n, tile = 600, 128
    x, y = (rng.standard_normal(n) * 7).astype(np.float32), (rng.standard_normal(n) + 0.01).astype(np.float32)
    for ftz in (False, True):
        got = run(fast_k, [x, y], "float32", tile, FN="truediv", MODE="rn", FTZ=ftz)
        np.testing.assert_array_equal(got, x / y)  # numpy's float32 division is IEEE, as div.rn.f32


#: (fn, rounding_mode, flush_to_zero, low, high, relative tolerance) of the approximations on float32.
APPROX = [("exp", "approx", False, -20.0, 20.0, 2e-5), ("tanh", "approx", False, -6.0, 6.0, 1.5e-3),
          ("exp2", None, True, -30.0, 30.0, 1e-6), ("rsqrt", None, True, 1e-3, 1e3, 1e-6),
          ("sqrt", "approx", False, 1e-3, 1e3, 1e-6), ("sqrt", None, True, 0.0, 1e3, 4e-7),
          ("truediv", "approx", False, -1e3, 1e3, 1e-6), ("truediv", None, True, -1e3, 1e3, 4e-7)]


@pytest.mark.gpu
@pytest.mark.parametrize(("fn", "mode", "ftz", "low", "high", "rtol"), APPROX)
def test_gpu_fast_math_is_close(fn: str, mode: str | None, ftz: bool, low: float, high: float, rtol: float,
                                rng: np.random.Generator) -> None:
    n, tile = 1000, 256
    x = rng.uniform(low, high, n).astype(np.float32)
    y = rng.uniform(0.5, 4.0, n).astype(np.float32) * rng.choice(np.array([-1, 1], np.float32), n)
    got = run(fast_k, [x, y], "float32", tile, FN=fn, MODE=mode, FTZ=ftz)
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    want = {"exp": np.exp, "tanh": np.tanh, "exp2": np.exp2, "rsqrt": lambda v: 1 / np.sqrt(v), "sqrt": np.sqrt,
            "truediv": lambda v: v / yd}[fn](xd)
    assert_math_close(got, want, "float32", rtol)


@pytest.mark.gpu
def test_gpu_flush_to_zero_flushes_subnormals_and_the_default_keeps_them() -> None:
    tiny = np.array([1e-40, -1e-40, 2.0**-140, 1.0], np.float32)  # subnormal float32 inputs, and a normal one
    ones = np.ones(4, np.float32)
    exps = np.array([-140.0, -130.0, 1.0, 0.0], np.float32)  # exp2 of these: subnormal results, then normal ones

    def go(fn: str, x: np.ndarray, ftz: bool) -> np.ndarray:
        return run(fast_k, [x, ones], "float32", 4, FN=fn, MODE=None, FTZ=ftz)

    np.testing.assert_array_equal(go("exp2", exps, True), [0.0, 0.0, 2.0, 1.0])
    kept = go("exp2", exps, False)
    assert (kept[:2] > 0).all()
    np.testing.assert_allclose(kept, np.exp2(exps.astype(np.float64)), rtol=1e-2)  # subnormals: few digits
    np.testing.assert_array_equal(go("sqrt", np.abs(tiny), True)[:3], [0.0, 0.0, 0.0])
    assert (go("sqrt", np.abs(tiny), False)[:3] > 0).all()
    assert np.isinf(go("rsqrt", np.abs(tiny), True)[:3]).all() and np.isfinite(go("rsqrt", np.abs(tiny), False)).all()
    np.testing.assert_array_equal(go("truediv", tiny, True), [0.0, 0.0, 0.0, 1.0])  # zeros' signs aside
    np.testing.assert_array_equal(go("truediv", tiny, False), tiny)


@pytest.mark.gpu
def test_gpu_scalars() -> None:
    s, t = np.float32(-0.25), np.float32(3.5)
    out, flags = tj.asarray(np.full(5, POISON, np.float32)), tj.asarray(np.zeros(2, bool))
    scalars_k[1](float(s), float(t), out, flags)
    want = [math.asin(s), math.atan2(s, t), fma_ref(float(s), float(t), 0.25), math.log1p(t), 1.8708286]
    np.testing.assert_allclose(out.numpy(), np.array(want, np.float32), rtol=4e-6)
    assert out.numpy()[4] <= math.sqrt(3.5)  # rounded toward zero
    np.testing.assert_array_equal(flags.numpy(), [True, True])


def tf32(a: np.ndarray) -> np.ndarray:
    """``a`` (float32) rounded to tf32's 10 mantissa bits, to nearest (ties away from zero, as cvt.rna)."""
    bits = a.view(np.uint32).astype(np.uint64)
    return ((bits + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)


@tj.kernel
def mm_gpu(a, b, c, K, PRECISION: tj.Constant[str], BM: tj.Constant[int], BN: tj.Constant[int],
           BK: tj.Constant[int]):
    i, j = tj.bid(0), tj.bid(1)
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(tj.cdiv(K, BK)):
        ta = tj.load(a, index=(i, k), shape=(BM, BK))
        tb = tj.load(b, index=(k, j), shape=(BK, BN))
        acc = tj.mma(ta, tb, acc, precision=PRECISION)
    tj.store(c, index=(i, j), tile=acc)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["tf32", "ieee"])
def test_gpu_tf32_mma(precision: str, rng: np.random.Generator) -> None:
    """tf32 is the product of tf32-rounded inputs (far from the float32 product: tensor cores were used); the
    default is the float32 product."""
    m, n, k = 200, 136, 264
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    c = tj.asarray(np.full((m, n), POISON, np.float32))
    mm_gpu[(tj.cdiv(m, 64), tj.cdiv(n, 64))](tj.asarray(a), tj.asarray(b), c, k, PRECISION=precision, BM=64, BN=64,
                                              BK=32)
    got = c.numpy().astype(np.float64)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    rounded = tf32(a).astype(np.float64) @ tf32(b).astype(np.float64)

    def err(want: np.ndarray) -> float:
        return float(np.linalg.norm(got - want) / np.linalg.norm(want))

    if precision == "tf32":
        assert err(rounded) < 2e-5, err(rounded)  # float32 sums of tf32 products (ties may round either way)
        assert err(exact) > 5e-5, err(exact)  # inputs rounded to 10 bits: about 3e-4 off the float32 product
    else:
        assert err(exact) < 1e-6, err(exact)
