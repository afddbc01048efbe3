"""Issue 20, 8-bit floats: ``tj.float8_e4m3fn`` and ``tj.float8_e5m2`` (torch's and ml_dtypes' names).

CPU: the dtypes and their runtime names (DLPack codes, aliases, ``DeviceArray.view``), torch's rounding in Python
(every pattern, ties, overflow), located errors for arithmetic and what else 8-bit floats do not take, the CUDA C++
and NVRTC's PTX/CUBIN (m16n8k32 e4m3/e5m2 mma on sm_89 and sm_90a, the FMA loop where K is not a multiple of 32,
the located error for sm_80, casts on every CUDA major), Tile IR text and tileiras for sm_89/sm_90/sm_100 (the
located refusal for sm_80). GPU: casts from float32/float64/float16/int32 bit for bit against torch's rounding (this
file's Python copy of it, and torch's own where torch is importable), every pattern read back as float32, float16
and int32, and the mma of both formats against a float64 product of the same 8-bit inputs, sizes off the tile,
outputs poisoned.
"""



from __future__ import annotations

import itertools
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from source_lines import assert_located

import tilejit as tj
from tilejit.errors import TileCompileError, TileIRUnsupportedError
from tilejit.language.ir.float8 import float8_bits, float8_value, round_float8
from tilejit.language.ir.types import BY_NAME, float8_e4m3fn, float8_e5m2
from tilejit.runtime import dtypes as rt

LINES = Path(__file__).read_text(encoding="utf-8").splitlines()
FP8 = ["float8_e4m3fn", "float8_e5m2"]
PTX_TYPE = {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
#: The largest finite value of each format.
LARGEST = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}


def dt(name: str) -> Any:
    return getattr(tj, name)


def is_nan_bits(bits: np.ndarray, name: str) -> np.ndarray:
    """Which 8-bit patterns are NaN in format ``name`` (the sign and, for e5m2, the payload are free)."""
    mag = bits.astype(np.int64) & 0x7F
    return mag == 0x7F if name == "float8_e4m3fn" else mag > 0x7C


def ref_bits(x: np.ndarray, name: str) -> np.ndarray:
    """torch's float -> float8 bits of each element of ``x`` (through float32, as torch converts)."""
    d = BY_NAME[name]
    return np.array([float8_bits(float(v), d) for v in x.reshape(-1)], np.uint8).reshape(x.shape)


def values_of(bits: np.ndarray, name: str) -> np.ndarray:
    d = BY_NAME[name]
    return np.array([float8_value(int(b), d) for b in bits.reshape(-1)], np.float64).reshape(bits.shape)


def fp8_array(bits: np.ndarray, name: str) -> Any:
    """A device array of 8-bit floats with the patterns ``bits`` (no ml_dtypes needed)."""
    return tj.asarray(np.ascontiguousarray(bits.astype(np.uint8))).view(name)


# ---------------------------------------------------------------------------------------------- kernels


@tj.kernel
def cast_in(x, y, TILE: tj.Constant[int]):
    """y = x as 8-bit floats."""
    i = tj.bid(0)
    tj.store(y, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)).astype(y.dtype))


@tj.kernel
def cast_out(y, out, TILE: tj.Constant[int]):
    """out = 8-bit floats y as out's dtype."""
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.load(y, index=(i,), shape=(TILE,)).astype(out.dtype))


@tj.kernel
def mm(a, b, c, K, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    i, j = tj.bid(0), tj.bid(1)
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(tj.cdiv(K, BK)):
        ta = tj.load(a, index=(i, k), shape=(BM, BK))
        tb = tj.load(b, index=(k, j), shape=(BK, BN))
        acc = tj.mma(ta, tb, acc)
    tj.store(c, index=(i, j), tile=acc)


@tj.kernel
def everything(x, g, idx, out, o8, TILE: tj.Constant[int]):
    """What 8-bit floats take besides casts and mma: padding, constants, shapes, gather/scatter, print, ``@``."""
    i = tj.bid(0)
    t = tj.load(x, index=(i, 0), shape=(TILE, TILE), padding=1.5)
    t = tj.transpose(t).reshape((TILE * TILE,)).reshape((TILE, TILE))
    top = tj.extract(t, (0, 0), (TILE // 2, TILE))
    both = tj.cat((top, tj.full((TILE // 2, TILE), 300.0, t.dtype)), axis=0)
    ix = tj.load(idx, index=(0,), shape=(TILE,))
    tj.scatter(g, ix, tj.gather(g, ix))
    print("t", t)
    tj.store(o8, index=(i, 0), tile=both @ t)
    tj.store(out, index=(i, 0), tile=tj.mma(both, t, 0.0) + tj.zeros((TILE, TILE), t.dtype).astype(tj.float32))


def art(kernel: Any, sig: tuple[Any, ...], target: str, backend: str = "cuda", **constants: Any) -> Any:
    return tj.compile(kernel, sig, constants=constants, target=target, backend=backend)


def mm_art(name: str, target: str, bk: int = 32, rows: bool = False, backend: str = "cuda") -> Any:
    t = dt(name)[:, ::1] if rows else dt(name)[:, :]
    return art(mm, (t, t, tj.float32[:, :], tj.int32), target, backend, BM=64, BN=64, BK=bk)


def everything_art(name: str, target: str, backend: str = "cuda") -> Any:
    d = dt(name)
    return art(everything, (d[:, :], d[:], tj.int32[:], tj.float32[:, :], d[:, :]), target, backend, TILE=32)


# ---------------------------------------------------------------------------------------------- CPU: names


def test_the_dtypes_are_language_names_with_runtime_spellings() -> None:
    for name, short, code in (("float8_e4m3fn", "f8e4m3fn", 10), ("float8_e5m2", "f8e5m2", 12)):
        d = dt(name)
        assert d is BY_NAME[name] is BY_NAME[short] and repr(d) == f"tj.{name}" and d.itemsize == 1
        assert d.is_float and d.is_float8 and not tj.float16.is_float8
        assert name in tj.language.tile.__all__
        assert rt.dtype_name(name) == rt.dtype_name(short) == rt.dtype_name(d) == name
        assert rt.ITEMSIZE[name] == 1 and rt.NAME_TO_DLPACK[name] == (code, 8) and rt.DLPACK_TO_NAME[(code, 8)] == name
        assert name not in rt.NAME_TO_TYPESTR  # no __cuda_array_interface__ typestr, as bfloat16
        sig = (tj.float32[:], f"{short}[:]")
        assert tj.compile(cast_in, sig, constants={"TILE": 32}, target="sm_90").ir().params[1].type == d[:]


def test_promotion_of_8_bit_floats() -> None:
    from tilejit.language.ir.types import promote

    assert promote(float8_e4m3fn, float8_e5m2) is tj.float16  # as Triton
    assert promote(float8_e4m3fn, tj.bfloat16) is tj.bfloat16 and promote(float8_e5m2, tj.float32) is tj.float32
    assert promote(float8_e4m3fn, tj.int8) is tj.float32


def test_numpy_needs_ml_dtypes_and_bits_travel_as_uint8() -> None:
    try:
        import ml_dtypes
    except ImportError:
        with pytest.raises(TypeError, match=r"float8_e4m3fn data has no numpy dtype without the ml_dtypes package.*"
                                            r"uint8"):
            rt.numpy_dtype("float8_e4m3fn")
    else:
        assert rt.numpy_dtype("float8_e5m2") == np.dtype(ml_dtypes.float8_e5m2)


# ---------------------------------------------------------------------------------------------- CPU: rounding


@pytest.mark.parametrize("name", FP8)
def test_every_pattern_reads_back_to_itself(name: str) -> None:
    d = BY_NAME[name]
    bits = np.arange(256)
    nan = is_nan_bits(bits, name)
    for b in bits[~nan]:
        assert float8_bits(float8_value(int(b), d), d) == b
    assert all(math.isnan(float8_value(int(b), d)) for b in bits[nan])
    assert int(nan.sum()) == (2 if name == "float8_e4m3fn" else 6)
    assert float8_value(0x7E if name == "float8_e4m3fn" else 0x7B, d) == LARGEST[name]
    assert float8_value(1, d) == 2.0 ** (-9 if name == "float8_e4m3fn" else -16)


@pytest.mark.parametrize("name", FP8)
def test_ties_go_to_even_and_overflow_is_nan_or_inf_not_saturated(name: str) -> None:
    d = BY_NAME[name]
    finite = sorted({v for v in (float8_value(b, d) for b in range(256)) if math.isfinite(v)})
    for lo, hi in itertools.pairwise(finite):
        mid = (lo + hi) / 2
        even = lo if float8_bits(lo, d) % 2 == 0 else hi
        assert round_float8(mid, d) == even, (lo, hi)
        up, down = (float(np.nextafter(np.float32(mid), np.float32(t))) for t in (hi, lo))  # off the tie in float32
        assert round_float8(up, d) == hi and round_float8(down, d) == lo
    top = LARGEST[name]
    step = top - finite[-2]
    over = math.nan if name == "float8_e4m3fn" else math.inf
    above = float(np.nextafter(np.float32(top + step / 2), np.float32(np.inf)))
    tie = top if float8_bits(top, d) % 2 == 0 else over  # 448 is even (e4m3fn), 57344 odd: its tie is inf
    for v, want in ((top + step / 2, tie), (above, over), (1e30, over), (math.inf, over)):
        got = round_float8(v, d)
        assert got == want or (math.isnan(got) and math.isnan(want)), (v, got)
        neg = round_float8(-v, d)
        assert neg == -want or (math.isnan(neg) and math.isnan(want))
    assert float8_bits(math.nan, d) & 0x7F == 0x7F and float8_bits(-0.0, d) == 0x80
    assert round_float8(1e-30, d) == 0.0


def test_python_rounding_matches_ml_dtypes() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.concatenate([np.random.default_rng().standard_normal(4000) * s for s in (1e-4, 1.0, 100.0, 1e4)])
    for name in FP8:
        want = x.astype(np.float32).astype(getattr(ml_dtypes, name)).view(np.uint8)
        got = ref_bits(x, name)
        ok = (got == want) | (is_nan_bits(got, name) & is_nan_bits(want, name))
        assert ok.all(), x[~ok][:5]


# ---------------------------------------------------------------------------------------------- CPU: front end


@tj.kernel
def arith(x, out, WHAT: tj.Constant[str]):
    t = tj.load(x, index=(0,), shape=(16,))
    if WHAT == "add":
        r = t + t
    elif WHAT == "exp":
        r = tj.exp(t)
    elif WHAT == "sum":
        r = tj.sum(t)
    elif WHAT == "compare":
        r = t > 0
    elif WHAT == "where":
        r = tj.where(t.astype(tj.float32) > 0, t, t)
    elif WHAT == "neg":
        negated = t
        r = -negated
    tj.store(out, index=(0,), tile=r)


@pytest.mark.parametrize(("what", "at", "message"), [
    ("add", "t + t", "operator + on float8_e4m3fn tiles is not supported"),
    ("exp", "tj.exp(t)", "tj.exp() on float8_e4m3fn tiles is not supported"),
    ("sum", "tj.sum(t)", "tj.sum() on float8_e4m3fn tiles is not supported"),
    ("compare", "t > 0", "a comparison on float8_e4m3fn tiles is not supported"),
    ("where", "tj.where(t.astype", "tj.where() on float8_e4m3fn tiles is not supported"),
    ("neg", "-negated", "unary - on float8_e4m3fn tiles is not supported"),
])
def test_arithmetic_on_8_bit_floats_is_a_located_error(what: str, at: str, message: str) -> None:
    with pytest.raises(TileCompileError) as e:
        art(arith, (tj.float8_e4m3fn[:], tj.float32[:]), "sm_90", WHAT=what).ir()
    assert_located(e.value, __file__, LINES, at, message)
    assert "convert first, e.g. x.astype(tj.float32)" in e.value.message


@tj.kernel
def mixed_mma(a, b, c):
    acc = tj.mma(tj.load(a, index=(0, 0), shape=(16, 32)), tj.load(b, index=(0, 0), shape=(32, 16)), 0.0)
    tj.store(c, index=(0, 0), tile=acc)


def test_mixed_8_bit_mma_is_a_located_error_and_scalars_are_no_parameters() -> None:
    with pytest.raises(TileCompileError) as e:
        art(mixed_mma, (tj.float8_e4m3fn[:, :], tj.float8_e5m2[:, :], tj.float32[:, :]), "sm_90").ir()
    assert_located(e.value, __file__, LINES, "tj.mma(tj.load(a", "a and b must have the same dtype, got "
                   "float8_e4m3fn and float8_e5m2 (convert both to tj.float16, which holds either exactly)")
    with pytest.raises(TypeError, match="8-bit float scalars are not kernel parameters"):
        art(cast_in, (tj.float8_e5m2, tj.float8_e5m2[:]), "sm_90", TILE=32)
    from tilejit.api.signature import scalar_type_of

    class Fp8Scalar:  # an ml_dtypes float8 numpy scalar, as launch code sees it
        dtype, shape = "float8_e4m3fn", ()

    with pytest.raises(tj.LaunchError, match="parameter 'x': 8-bit float scalars are not kernel parameters"):
        scalar_type_of("x", Fp8Scalar())


def test_constants_round_as_torch_and_print_shows_float32() -> None:
    text = everything_art("float8_e4m3fn", "sm_90").ir_text()
    assert "{padding=1.5} : tile<32x32xf8e4m3fn>" in text
    assert "constant {value=288.0} : tile<16x32xf8e4m3fn>" in text  # 300 rounded to the nearest e4m3fn value
    assert re.search(r"cast %\w+ : tile<32x32xf32>\n\s*print \[", text), text


@tj.kernel
def folded(out):
    tj.store(out, index=(0,), tile=tj.full((16,), 500.0, tj.float8_e4m3fn).astype(tj.float32))
    tj.store(out, index=(1,), tile=tj.full((16,), 460.0, tj.float8_e4m3fn).astype(tj.int32).astype(tj.float32))
    tj.store(out, index=(2,), tile=tj.full((16,), tj.float8_e5m2(1e6).astype(tj.float32), tj.float32))


def test_casts_of_constants_fold_as_torch_rounds() -> None:
    """500 is past e4m3fn's largest value once rounded (NaN), 460 rounds to 448, 1e6 overflows e5m2 (inf)."""
    text = art(folded, (tj.float32[:],), "sm_90").ir_text()
    values = re.findall(r"constant \{value=([^}]+)\} : tile<16xf32>", text)
    assert values == ["nan", "448.0", "inf"], text


# ---------------------------------------------------------------------------------------------- CPU: CUDA C++


@pytest.mark.parametrize("name", FP8)
@pytest.mark.parametrize("target", ["sm_89", "sm_90a"])
def test_mma_is_m16n8k32_tensor_cores_from_sm_89(name: str, target: str, nvrtc_here: Path) -> None:
    instr = f"mma.sync.aligned.m16n8k32.row.col.f32.{PTX_TYPE[name]}.{PTX_TYPE[name]}.f32"
    for rows in (False, True):  # rows: 16-byte rows, a cp.async pipeline
        a = mm_art(name, target, rows=rows)
        assert f"tj::TensorCoreFP8<{'tj::e4m3' if name == 'float8_e4m3fn' else 'tj::e5m2'}, 64, 64, 32" in \
            a.cuda_source()
        ptx = a.ptx()
        assert instr in ptx and ("cp.async" in ptx) == rows and "wgmma" not in ptx
        assert a.cubin()[:4] == b"\x7fELF"
    fallback = mm_art(name, target, bk=16).ptx()  # K = 16: no m16n8k32 tiling, the FMA loop
    assert "m16n8k32" not in fallback and "mma.sync" not in fallback


def test_mma_before_sm_89_is_a_located_error() -> None:
    with pytest.raises(TileCompileError) as e:
        mm_art("float8_e5m2", "sm_80").cuda_source()
    assert_located(e.value, __file__, LINES, "tj.mma(ta, tb, acc)", "fp8 mma needs sm_89 or newer (the target is "
                                                                     "sm_80)")


@pytest.mark.parametrize("name", FP8)
def test_casts_compile_on_every_cuda_major(name: str, toolkit: Any) -> None:
    """Casts both ways (integer ops, no 8-bit float instruction: every target converts alike) by the NVRTC of each
    CUDA major, for sm_70 where it still compiles for it and sm_80."""
    from tilejit.bindings.nvrtc import load_nvrtc
    from tilejit.compiler.nvrtc import compile_cuda

    lib = load_nvrtc(str(toolkit.nvrtc))
    for target in ["sm_70", "sm_80"] if toolkit.major < 13 else ["sm_80"]:
        for kernel, sig in ((cast_in, (tj.float64[:], dt(name)[:])), (cast_out, (dt(name)[:], tj.int8[:])),
                            (cast_out, (dt(name)[:], tj.bfloat16[:]))):
            ck = art(kernel, sig, target, TILE=256).cuda_kernel()
            prog = compile_cuda(ck.source, name=f"{ck.name}.cu", headers=ck.headers, target=target, output="cubin",
                                nvrtc=lib, cache=False)
            assert prog.code[:4] == b"\x7fELF"


def test_mma_needs_nvrtc_12_4(toolkit: Any) -> None:
    """PTX has the 8-bit float mma.sync from ISA 8.4 (CUDA 12.4): an older NVRTC says so, not ptxas's 'Unknown
    modifier'."""
    from tilejit.bindings.nvrtc import load_nvrtc
    from tilejit.compiler.nvrtc import compile_cuda
    from tilejit.errors import CompileError

    lib = load_nvrtc(str(toolkit.nvrtc))
    ck = mm_art("float8_e5m2", "sm_89").cuda_kernel()

    def ptx() -> bytes:
        prog = compile_cuda(ck.source, name=f"{ck.name}.cu", headers=ck.headers, target="sm_89", output="ptx",
                            nvrtc=lib, cache=False)
        return bytes(prog.code)

    if tuple(lib.version) < (12, 4):
        with pytest.raises(CompileError, match=r"8-bit float mma.sync needs NVRTC 12.4 or newer"):
            ptx()
    else:
        assert b"mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32" in ptx()


def test_casts_are_in_integer_ops_not_satfinite(nvrtc_here: Path) -> None:
    for name in FP8:
        a = art(cast_in, (tj.float32[:], dt(name)[:]), "sm_90", TILE=256)
        assert f"tj::cast<tj::{PTX_TYPE[name]}>(" in a.cuda_source()
        assert "satfinite" not in a.ptx() and "cvt.rn.satfinite" not in a.ptx()


@pytest.mark.parametrize("name", FP8)
def test_everything_else_compiles_with_nvrtc(name: str, nvrtc_here: Path) -> None:
    a = everything_art(name, "sm_90a")
    bits = float8_bits(300.0, BY_NAME[name])
    assert f"tj::{PTX_TYPE[name]}::from_bits({bits:#04x})" in a.cuda_source()
    assert a.cubin()[:4] == b"\x7fELF"


# ---------------------------------------------------------------------------------------------- CPU: Tile IR


@pytest.mark.parametrize("name", FP8)
def test_tile_ir_casts_and_mma_compile_with_tileiras_from_sm_89(name: str, tileir_env: Any) -> None:
    elem = {"float8_e4m3fn": "f8E4M3FN", "float8_e5m2": "f8E5M2"}[name]
    for target in ("sm_89", "sm_90", "sm_100"):
        for bk in (16, 64):  # the GPU tests' other K tiles
            assert mm_art(name, target, bk=bk, backend="tileir").image().image[:4] == b"\x7fELF"
        a = mm_art(name, target, backend="tileir")
        text = a.tileir_text()
        assert re.search(rf"mmaf %\w+, %\w+, %\w+ : tile<64x32x{elem}>, tile<32x64x{elem}>, tile<64x64xf32>", text)
        assert a.image().image[:4] == b"\x7fELF"
        c = art(cast_in, (tj.float32[:], dt(name)[:]), target, "tileir", TILE=256)
        text = c.tileir_text()
        assert re.search(rf"bitcast %\w+ : tile<256xi8> -> tile<256x{elem}>", text) and "addf" in text
        assert "ftof" not in text  # made in integer ops, as the CUDA backend rounds
        assert c.image().image[:4] == b"\x7fELF"
        assert art(cast_out, (dt(name)[:], tj.int32[:]), target, "tileir", TILE=256).image().image[:4] == b"\x7fELF"
    assert everything_art(name, "sm_90", "tileir").image().image[:4] == b"\x7fELF"


def test_tile_ir_before_sm_89_is_a_located_refusal(tileir_env: Any) -> None:
    with pytest.raises(TileIRUnsupportedError) as e:
        art(cast_in, (tj.float32[:], tj.float8_e4m3fn[:]), "sm_80", "tileir", TILE=256).image()
    assert 'Tile IR has float8_e4m3fn from sm_89 on, not for sm_80; compile this kernel with backend="cuda"' in str(
        e.value)
    assert e.value.filename == __file__


# ---------------------------------------------------------------------------------------------- GPU


def special_inputs(name: str, rng: np.random.Generator) -> np.ndarray:
    """float64 values that probe the conversion: every finite value, the midpoints between neighbours (ties) and
    just off them, overflow around the largest value, NaN, infinities, signed zeros, tiny values, random ones."""
    d = BY_NAME[name]
    finite = np.array(sorted(v for v in (float8_value(b, d) for b in range(256)) if math.isfinite(v)))
    mids = ((finite[:-1] + finite[1:]) / 2).astype(np.float32)  # exact in float32
    top = LARGEST[name]
    return np.concatenate([
        finite, mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf)),
        [top * 1.03, top * 1.04, top * 1.1, top * 4, -top * 1.1, 1e30, -1e30, np.inf, -np.inf, np.nan, -np.nan, 0.0,
         -0.0, 1e-30, -1e-30, 1e-5, 2.0 ** -17],
        rng.standard_normal(1500) * rng.choice([1e-3, 1.0, 30.0, 300.0], 1500),
    ])


def assert_bits(got: np.ndarray, want: np.ndarray, name: str, x: np.ndarray) -> None:
    """Equal patterns, except that where ``want`` is NaN any NaN will do."""
    ok = (got == want) | (is_nan_bits(got, name) & is_nan_bits(want, name))
    assert ok.all(), f"{int((~ok).sum())} differ, e.g. x={x[~ok][:4]} got={got[~ok][:4]} want={want[~ok][:4]}"


@pytest.mark.gpu
@pytest.mark.parametrize("src", ["float32", "float64", "float16", "int32"])
@pytest.mark.parametrize("name", FP8)
def test_gpu_cast_to_8_bit_floats_rounds_as_torch(name: str, src: str, rng: np.random.Generator) -> None:
    x = special_inputs(name, rng)
    if src == "int32":
        x = np.concatenate([rng.integers(-70000, 70000, 2000), np.arange(-600, 600)]).astype(np.int32)
    elif src == "float16":
        x = x[(np.abs(x) < 6e4) | ~np.isfinite(x)]  # what float16 holds (inf and NaN stay)
    x = x.astype(src)
    n, tile = len(x), 256  # n is not a multiple of the tile
    runs = []
    for poison in (0x5A, 0xA5):  # two poisons: an element left unwritten differs between the runs
        y = fp8_array(np.full(n, poison, np.uint8), name)
        cast_in[tj.cdiv(n, tile)](tj.asarray(x), y, TILE=tile)
        runs.append(y.view("uint8").numpy())
    np.testing.assert_array_equal(runs[0], runs[1], err_msg="elements left unwritten")
    got = runs[0]
    want = ref_bits(x.astype(np.float64), name)  # float16 and int32 are exact in float64; float64 rounds via float32
    assert_bits(got, want, name, x)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and src != "int32":  # torch's own rounding, where torch is there
        t = torch.from_numpy(x.astype(np.float32)).to(getattr(torch, name)).view(torch.uint8).numpy()
        assert_bits(got, t, name, x)


@pytest.mark.gpu
@pytest.mark.parametrize("dst", ["float32", "float16", "bfloat16", "int32"])
@pytest.mark.parametrize("name", FP8)
def test_gpu_every_pattern_reads_back(name: str, dst: str) -> None:
    bits = np.tile(np.arange(256, dtype=np.uint8), 3)[:700]  # 700: not a multiple of the tile
    n, tile = len(bits), 128
    host_dst = {"bfloat16": "uint16"}.get(dst, dst)
    out = tj.asarray(np.full(n, 0x7E7E if dst == "bfloat16" else 77, host_dst)).view(dst)
    cast_out[tj.cdiv(n, tile)](fp8_array(bits, name), out, TILE=tile)
    raw = out.view(host_dst).numpy()
    got = (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64) if dst == "bfloat16" else \
        raw.astype(np.float64)
    want = values_of(bits, name)
    if dst == "int32":  # truncation toward zero; NaN gives 0, infinities saturate
        nan = np.isnan(want)
        want = np.where(nan, 0.0, np.clip(np.trunc(np.nan_to_num(want, posinf=2.0**31 - 1, neginf=-(2.0**31))),
                                          -(2.0**31), 2.0**31 - 1))
    np.testing.assert_array_equal(got, want)  # exact: every 8-bit float is a float16, bfloat16 and float32
    if dst != "int32":  # -0.0 stays -0.0 (a NaN's sign is free)
        keep = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got[keep]), np.signbit(want[keep]))


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k", "bk"), [(200, 136, 264, 32), (130, 144, 272, 64), (70, 80, 40, 16)])
@pytest.mark.parametrize("name", FP8)
def test_gpu_mma_against_a_float64_product_of_the_same_inputs(name: str, m: int, n: int, k: int, bk: int,
                                                              rng: np.random.Generator) -> None:
    """Products of 8-bit floats are exact in float32; only the sums round. k=272: 16-byte rows (a cp.async
    pipeline on the CUDA backend); bk=16: the FMA loop."""
    scale = 4.0 if name == "float8_e4m3fn" else 64.0
    a_bits = ref_bits(rng.standard_normal((m, k)) * scale, name)
    b_bits = ref_bits(rng.standard_normal((k, n)) * scale, name)
    a, b = values_of(a_bits, name), values_of(b_bits, name)
    c = tj.asarray(np.full((m, n), np.nan, np.float32))
    mm[(tj.cdiv(m, 64), tj.cdiv(n, 64))](fp8_array(a_bits, name), fp8_array(b_bits, name), c, k, BM=64, BN=64, BK=bk)
    got = c.numpy().astype(np.float64)
    want = a @ b
    # float32 sums, though Hopper's 8-bit tensor cores keep fewer bits inside one instruction (about 14, as reported
    # for H800): 2**-10 of the sum of magnitudes still catches any fragment or layout mistake
    bound = 2.0**-10 * (np.abs(a) @ np.abs(b)) + 1e-6
    assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) / bound))


@pytest.mark.gpu
@pytest.mark.own_backend("torch float8 tensors through the torch accessor path; runs with the environment's backend")
@pytest.mark.parametrize("name", FP8)
def test_gpu_torch_float8_tensors(name: str, rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(special_inputs(name, rng).astype(np.float32)).cuda()
    y = torch.full((x.numel(),), 0x5A, dtype=torch.uint8, device="cuda").view(getattr(torch, name))  # poisoned
    cast_in[tj.cdiv(x.numel(), 256)](x, y, TILE=256)
    torch.cuda.synchronize()
    assert_bits(y.view(torch.uint8).cpu().numpy(), x.to(getattr(torch, name)).view(torch.uint8).cpu().numpy(), name,
                x.cpu().numpy())
