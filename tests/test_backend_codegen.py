"""CUDA backend on the CPU: generated text for small IR, clear errors, and every op x dtype compiled
to CUBIN by NVRTC 13 (sm_80, sm_90) and by each installed CUDA major (sm_70 where it exists)."""

from __future__ import annotations

import functools
import keyword
import math
import re
from typing import Any

import pytest
from test_backend_irbuild import EXAMPLES, IRBuilder, arr, cdiv, matmul, row_sum, softmax, vector_add

import tilejit as tj
from tilejit.backends.cuda import tables
from tilejit.backends.cuda.codegen import CudaKernel, device_headers, generate
from tilejit.backends.cuda.layouts import blocked, choose_warp_grid, mma_layout
from tilejit.errors import CompileError
from tilejit.language.ir import ops as O
from tilejit.language.ir.types import (
    ALL_DTYPES,
    BY_NAME,
    ArrayHint,
    DType,
    TileType,
    bfloat16,
    bool_,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    scalar,
    uint8,
    uint64,
)

HINTS = {"x": ArrayHint(True, True), "y": ArrayHint(True, True), "out": ArrayHint(True, True),
         "a": ArrayHint(True, True), "b": ArrayHint(True, True), "c": ArrayHint(True, True)}


def gen(fn: O.Function, arch: int = 90, **kw: Any) -> CudaKernel:
    from tilejit.compiler.targets import parse_target

    return generate(fn, target=parse_target(arch), **kw)


# ----------------------------------------------------------------------------- NVRTC


@functools.cache
def _nvrtc13() -> Any:
    from conftest import toolkits

    from tilejit.bindings.nvrtc import load_nvrtc

    tk = next((t for t in toolkits() if t.major == 13), None)
    if tk is None:
        pytest.skip("NVRTC 13 is not installed (.ci-cache/cu13 or TILEJIT_TEST_CUDA_ROOTS)")
    return load_nvrtc(str(tk.nvrtc))


@functools.cache
def _nvrtc_at(path: str) -> Any:
    from tilejit.bindings.nvrtc import load_nvrtc

    return load_nvrtc(path)


def cubin(ck: CudaKernel, arch: int | str, lib: Any = None) -> bytes:
    from tilejit.compiler.nvrtc import compile_cuda

    prog = compile_cuda(ck.source, name=f"{ck.name}.cu", headers=ck.headers, target=f"sm_{arch}",
                        output="cubin", nvrtc=lib or _nvrtc13(), cache=False)
    assert prog.code[:4] == b"\x7fELF"
    return prog.code


# ----------------------------------------------------------------------------- text of small kernels


def test_vector_add_text_and_abi() -> None:
    ck = gen(vector_add(float32, 1024), hints=HINTS)
    assert ck.name == "vector_add" and ck.num_threads == 256 and ck.shared_bytes == 0
    assert 'extern "C" __global__ void __launch_bounds__(256) vector_add(' in ck.source
    assert "tj::Array<float, 1> u_x,\n    tj::Array<float, 1> u_y,\n    tj::Array<float, 1> u_out)" in ck.source
    assert ck.params == (("x", ("array", "float32", 1)), ("y", ("array", "float32", 1)),
                         ("out", ("array", "float32", 1)))
    # 16-byte vectors with hints
    assert "tj::load<4, false, tj::Shape<1024>>" in ck.source
    assert "tj::store<4, tj::Shape<1024>>(u_out" in ck.source
    plain = gen(vector_add(float32, 1024))
    assert "tj::load<0, false, tj::Shape<1024>>" in plain.source  # no hints: strided element accesses
    assert "#include <tilejit/tilejit.cuh>" in ck.source and set(ck.headers) == set(device_headers())


def test_scalar_params_and_names() -> None:
    b = IRBuilder("scale", [("x", arr(float16, 1)), ("out", arr(float16, 1)), ("a", scalar(float32)),
                            ("n", scalar(int64)), ("flag", scalar(bool_)), ("int", scalar(bfloat16))])
    t = b.load(b.p("x"), [b.bid()], (128,))
    b.store(b.p("out"), [b.bid()], t)
    ck = gen(b.ret())
    assert "float u_a,\n    tj::i64 u_n,\n    bool u_flag,\n    tj::bf16 u_int)" in ck.source
    assert ck.params[2:] == (("a", ("scalar", "float32")), ("n", ("scalar", "int64")),
                             ("flag", ("scalar", "bool")), ("int", ("scalar", "bfloat16")))


def test_softmax_reductions_are_block_reductions() -> None:
    ck = gen(softmax(float32, 4096), hints=HINTS)
    assert "tj::reduce<tj::MaxOp, 0, 12, L1>" in ck.source and "tj::reduce<tj::SumOp, 0, 12, L1>" in ck.source
    assert "remap" not in ck.source  # keepdims + broadcast of a full reduction stay in registers
    assert ck.shared_bytes == 4 * 8  # one float per warp


def test_for_loop_with_carried_accumulator() -> None:
    ck = gen(row_sum(float32, 4, 256), hints=HINTS)
    src = ck.source
    loop = re.search(r"for \(tj::i64 (w\d+) = 0; \1 < v\d+; \1 \+= 1\) \{\n\s+const tj::i32 v\d+ = \(tj::i32\)\1;", src)
    assert loop, src
    carried = re.search(r"tj::Tile<float, L\d> (c\d+);\n\s+TJ_EACH\(i, L\d\) \1\.v\[i\] = 0\.0f;", src)
    assert carried, src
    assert f"  {carried.group(1)} = t" in src  # the continue assigns the next value


def test_if_else_and_while_with_break() -> None:
    b = IRBuilder("ctl", [("x", arr(float32, 1)), ("out", arr(float32, 1)), ("limit", scalar(int32))])
    i = b.bid()
    t = b.load(b.p("x"), [i], (256,))
    with b.loop([b.i32(0), t]) as ((k, acc), lp):
        stop = b.cmp("ge", k, b.p("limit"))
        with b.if_(stop, []) as (_, then_b, else_b):
            with b.into(then_b):
                b.brk([k, acc])
            with b.into(else_b):
                b.yld([])
        b.cont([b.bin("add", k, b.i32(1)), b.bin("add", acc, t)])
    res = lp.results[1]
    odd = b.cmp("eq", b.bin("mod", i, b.i32(2)), b.i32(1))
    with b.if_(odd, [res.type]) as (iff, then_b, else_b):  # type: ignore[list-item]
        with b.into(then_b):
            b.yld([b.un("neg", res)])
        with b.into(else_b):
            b.yld([res])
    b.store(b.p("out"), [i], iff.results[0])
    ck = gen(b.ret())
    assert "while (true) {" in ck.source and "break;" in ck.source and "} else {" in ck.source
    assert "tj::mod(" in ck.source
    cubin(ck, 90)


def test_mma_paths_by_target_and_dtype() -> None:
    tc = gen(matmul(bfloat16, float32, bm=128, bn=128, bk=32), arch=80, hints=HINTS)
    assert "tj::TensorCore<tj::bf16, 128, 128, 32, 2, 4, 40, 136>" in tc.source
    assert "tj::cp_async_tile<128, 32, 40, 256, 0>" in tc.source  # operands stream through a cp.async ring
    assert "__launch_bounds__(256, 2)" in tc.source and tc.shared_bytes == 4 * (128 * 40 + 32 * 136) * 2
    no_hints = gen(matmul(bfloat16, float32, bm=128, bn=128, bk=32), arch=80)
    assert "cp_async" not in no_hints.source and "tj::to_smem<32, 40, 8>" in no_hints.source
    assert "tj::TensorCoreTF32<" in gen(matmul(float32, float32, bm=64, bn=64, bk=32, tf32=True), arch=90).source
    assert "tj::mma_fma<" in gen(matmul(float16, float32, bm=64, bn=64, bk=32), arch=70).source
    assert "tj::mma_fma<" in gen(matmul(float32, float32, bm=64, bn=64, bk=32), arch=90).source  # no tf32
    assert "tj::mma_fma<" in gen(matmul(float64, float64, bm=32, bn=32, bk=16), arch=90).source
    assert "tj::mma_fma<" in gen(matmul(int8, int32, bm=32, bn=32, bk=32), arch=90).source


def test_wgmma_on_sm90a_pipelines(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plain wgmma pipeline (the warp-specialized loop switched off: tests/test_cuda_warp_specialize.py)."""
    from tilejit.compiler.targets import parse_target

    monkeypatch.setenv("TILEJIT_CUDA_WARP_SPECIALIZE", "0")

    def sm90a(bm: int, bn: int, bk: int, dt: DType = bfloat16, tf32: bool = False, **kw: Any) -> CudaKernel:
        return generate(matmul(dt, float32, bm=bm, bn=bn, bk=bk, tf32=tf32), target=parse_target("sm_90a"), **kw)

    wg = sm90a(128, 256, 64, hints=HINTS)
    assert wg.num_threads == 256  # one warp per 16 rows of the accumulator
    assert "tj::Wgmma<tj::bf16, 128, 256, 64, 8, 1, 128, 128>::run<1>(" in wg.source
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" in wg.source
    assert "tj::cp_async_tile<128, 64, 72, 256, 128>" in wg.source and "::fence_smem();" in wg.source
    assert wg.shared_bytes == 4 * (128 * 64 + 64 * 256) * 2 + 1024  # 4 swizzled stages + alignment slack
    assert "::run<1>(" in wg.source and "::wait<0>(" in wg.source  # one batch in flight across iterations
    assert "for sm_90a" in wg.source
    cubin(wg, "90a")
    # narrower tiles: 32/64-byte swizzles, warps split along N, f16
    narrow = sm90a(64, 128, 32, float16, hints=HINTS, num_threads=256)
    assert "tj::Wgmma<tj::half, 64, 128, 32, 4, 2, 64, 128>" in narrow.source
    assert "m64n64k16.f32.f16.f16" in narrow.source
    assert "tj::Wgmma<tj::bf16, 64, 64, 16, 4, 1, 32, 128>" in sm90a(64, 64, 16, hints=HINTS).source
    # without the facts a pipeline needs, or on plain sm_90, mma.sync with the same accumulator layout
    assert "tj::TensorCore<tj::bf16, 128, 256, 64, 8, 1, 72, 264>::run(" in sm90a(128, 256, 64).source
    assert "tj::TensorCore<" in gen(matmul(bfloat16, float32, bm=128, bn=256, bk=64), hints=HINTS).source
    assert "tj::TensorCoreTF32<" in sm90a(64, 64, 32, float32, True, hints=HINTS).source  # no tf32 wgmma


def test_num_threads_override_and_check() -> None:
    assert gen(vector_add(float32, 4096), num_threads=512).num_threads == 512
    assert gen(vector_add(float32, 4096)).num_threads == 256
    assert gen(vector_add(float32, 128)).num_threads == 32
    with pytest.raises(CompileError, match="num_threads must be a power of two"):
        gen(vector_add(float32, 1024), num_threads=100)


# ----------------------------------------------------------------------------- layouts


def test_layouts_cover_every_element_once() -> None:
    cases = [blocked((1, 8192), 256, 8), blocked((4, 256), 256, 4), blocked((16,), 256, 4), blocked((), 128, 4),
             blocked((128, 2), 128, 8)]
    for m, n, nt in ((128, 128, 256), (64, 64, 128), (128, 256, 256), (32, 64, 256)):
        grid = choose_warp_grid(m, n, nt)
        assert grid is not None
        cases.append(mma_layout(m, n, nt, grid))
    for lay in cases:
        seen: dict[int, int] = {}
        for t in range(lay.nt):
            if lay.flat(t, 0) is None:
                continue  # a replica
            for i in range(lay.elems):
                f = lay.flat(t, i)
                assert f is not None
                seen[f] = seen.get(f, 0) + 1
        assert sorted(seen) == list(range(lay.size)) and set(seen.values()) == {1}, lay


def test_mma_layout_matches_fragment_order() -> None:
    lay = mma_layout(128, 128, 256, choose_warp_grid(128, 128, 256))  # type: ignore[arg-type]
    # warp 0, lane 5 (g=1, t=1): c0/c1 at row 1, cols 2/3; c2/c3 at row 9
    def flat(t: int, i: int) -> int:
        f = 0
        for k, b in enumerate(lay.ibits):
            f |= (i >> k & 1) << b
        for k, b in enumerate(lay.tbits):
            f |= (t >> k & 1) << b
        return f
    assert [divmod(flat(5, i), 128) for i in range(4)] == [(1, 2), (1, 3), (9, 2), (9, 3)]
    assert divmod(flat(5, 4), 128) == (1, 10)  # next n8 tile


# ----------------------------------------------------------------------------- errors


def test_unsupported_combinations_raise_located_errors() -> None:
    b = IRBuilder("bad", [("x", arr(float32, 1)), ("out", arr(float32, 1))])
    t = b.load(b.p("x"), [b.bid()], (128,))
    b.store(b.p("out"), [b.bid()], b.bin("xor", t, t))
    msg = r"test_backend\.py:\d+: binary function 'xor' is not supported for dtype float32"
    with pytest.raises(CompileError, match=msg):
        gen(b.ret())
    b = IRBuilder("bad", [("x", arr(int8, 1))])
    t = b.load(b.p("x"), [b.bid()], (128,))
    b.atomic("add", b.p("x"), [b.cast(b.arange(128), int32)], t, result=False)
    with pytest.raises(CompileError, match="atomic_add is not supported for dtype int8"):
        gen(b.ret())
    b = IRBuilder("bad", [("x", arr(float32, 1))])
    t = b.load(b.p("x"), [b.bid()], (128,))
    b.store(b.p("x"), [b.bid()], b.un("exp", b.cast(t, int32)))
    with pytest.raises(CompileError, match="unary function 'exp' is not supported for dtype int32"):
        gen(b.ret())
    b = IRBuilder("bad", [("x", arr(float32, 1))])
    b.store(b.p("x"), [b.bid()], b.cast(b.load(b.p("x"), [b.bid()], (128,)), float16))
    with pytest.raises(CompileError, match="storing a float16 tile into a float32 array"):
        gen(b.ret())


def test_literals() -> None:
    assert tables.literal(-(1 << 63), int64) == "(-9223372036854775807LL - 1)"
    assert tables.literal(-1, uint64) == "18446744073709551615ULL"
    assert tables.literal(300, uint8) == "((tj::u8)44)"
    assert tables.literal(1.0, float16) == "tj::half::from_bits(0x3c00)"
    assert tables.literal(1e10, float16) == "tj::half::from_bits(0x7c00)"
    assert tables.literal(1.0, bfloat16) == "tj::bf16::from_bits(0x3f80)"
    assert tables.literal(float("-inf"), float32) == "(-tj::inf_f())"
    assert tables.literal(0.1, float32) == "0.1f" and tables.literal(0.1, float64) == "0.1"
    assert tables.literal(True, bool_) == "true"


# ----------------------------------------------------------------------------- every op x dtype


def _fmts(table: dict[str, dict[str, str]], dt: DType) -> list[str]:
    return [fn for fn, kinds in table.items() if dt.kind in kinds]


def all_ops(dt: DType, arch: int) -> O.Function:
    """One kernel that applies every op that makes sense for ``dt``."""
    b = IRBuilder(f"all_{dt.name}", [("x", arr(dt, 1)), ("y", arr(dt, 2)), ("out", arr(dt, 1)),
                                     ("mask", arr(bool_, 1)), ("idx", arr(int32, 1)), ("s", scalar(dt))])
    i = b.bid()
    x = b.load(b.p("x"), [i], (256,))
    y2 = b.load(b.p("y"), [i, b.i32(0)], (16, 16), padding=1)
    y = b.reshape(y2, (256,))
    s = b.bcast(b.p("s"), (256,))
    acc = x
    for fn in _fmts(tables.UNARY, dt):
        if fn in ("cbrt", "erfinv"):
            continue  # no Tile IR for these (their kernel would be refused): test_math_ext.py compiles them
        if fn in O.PREDICATE_FNS:
            acc = b.select(b.un(fn, acc, bool_), x, acc)
        elif fn in O.BIT_COUNT_FNS:
            if dt.bits in (32, 64):
                acc = b.bin("add", acc, b.cast(b.un(fn, acc, int32), dt))
        else:
            acc = b.select(b.cmp("lt", acc, x), b.un(fn, acc), acc)
    for fn in _fmts(tables.BINARY, dt):
        acc = b.bin(fn, acc, y if fn not in ("lshift", "rshift") else b.bin("and", y, b.const(3, dt, (256,))))
    for fn in tables.COMPARE:
        acc = b.select(b.cmp(fn, acc, s), acc, x)
    for other in ALL_DTYPES:
        acc = b.bin("maximum", acc, b.cast(b.cast(acc, other), dt))
    b.store(b.p("out"), [i], acc)
    b.store(b.p("mask"), [i], b.cmp("ne", acc, x))
    # shapes
    t = b.permute(y2, (1, 0))
    t = b.bin("add" if not dt.is_bool else "or", t, b.bcast(b.reshape(b.reduce("max", t, 1), (16, 1)), (16, 16)))
    t = b.bin("add" if not dt.is_bool else "or", t, b.bcast(b.reshape(b.reduce("min", t, 0), (1, 16)), (16, 16)))
    b.store(b.p("y"), [i, b.i32(1)], t)
    sum_dt = int64 if dt.is_bool else dt
    red = b.reduce("sum", b.cast(t, sum_dt), 0)
    red = b.bin("add", red, b.reduce("prod", b.cast(t, sum_dt), 1))
    red = b.bin("add", red, b.cast(b.argreduce("argmax", t, 1), sum_dt))
    red = b.bin("add", red, b.cast(b.argreduce("argmin", t, 0), sum_dt))
    red = b.bin("add", red, b.reshape(b.cumsum(b.reshape(red, (2, 8)), 1), (16,)))
    total = b.reduce("sum", red, 0)
    b.store(b.p("out"), [b.i32(1)], b.cast(b.bin("add", red, b.bcast(total, (16,))), dt))
    # gather / scatter / atomics
    ix = b.load(b.p("idx"), [i], (256,), padding=-1)
    g = b.gather(b.p("x"), [ix], padding=0)
    b.scatter(b.p("out"), [ix], g)
    for kind in ("add", "max", "min", "xchg", "cas"):
        key = {"min": "max", "cas": "xchg"}.get(kind, kind)
        if dt.name not in _ATOMIC[key]:
            continue
        if kind in ("max", "min") and dt.is_float:  # old values unused: Tile IR refuses them (its CAS loop hung)
            b.atomic(kind, b.p("out"), [ix], g, result=False)
            continue
        old = b.atomic(kind, b.p("out"), [ix], g, compare=g if kind == "cas" else None)
        b.store(b.p("out"), [b.i32(2)], old)
    # mma
    if not dt.is_bool:
        acc_dt = float32 if dt in (float16, bfloat16, float32) else dt
        m = b.mma(y2, b.permute(y2, (1, 0)), b.const(0, acc_dt, (16, 16)))
        b.store(b.p("y"), [i, b.i32(2)], b.cast(m, dt))
    return b.ret()


_ATOMIC = {
    "add": ("int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64", "int16", "uint16"),
    "max": ("int16", "int32", "int64", "uint16", "uint32", "uint64", "float16", "bfloat16", "float32", "float64"),
    "xchg": ("int16", "int32", "int64", "uint16", "uint32", "uint64", "float16", "bfloat16", "float32", "float64"),
}


@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("dtype", [d.name for d in ALL_DTYPES])
def test_every_op_compiles_nvrtc13(dtype: str, arch: int) -> None:
    dt = BY_NAME[dtype]
    ck = gen(all_ops(dt, arch), arch=arch, hints={"x": ArrayHint(True, True)})
    cubin(ck, arch)


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int64", "float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("arch", [70, 80])
def test_every_op_compiles_each_cuda_major(dtype: str, arch: int, toolkit: Any) -> None:
    if arch == 70 and toolkit.major >= 13:
        pytest.skip("CUDA 13 dropped sm_70 (Volta); NVRTC 11/12 cover it")
    dt = BY_NAME[dtype]
    cubin(gen(all_ops(dt, arch), arch=arch), arch, _nvrtc_at(str(toolkit.nvrtc)))


@pytest.mark.parametrize("arch", [70, 80, 90])
@pytest.mark.parametrize("name", list(EXAMPLES))
def test_examples_compile(name: str, arch: int, toolkit: Any) -> None:
    if arch == 70 and toolkit.major >= 13:
        pytest.skip("CUDA 13 dropped sm_70 (Volta); NVRTC 11/12 cover it")
    fn = EXAMPLES[name]()
    for hints in (HINTS, None):
        cubin(gen(fn, arch=arch, hints=hints), arch, _nvrtc_at(str(toolkit.nvrtc)))


def test_matmul_variants_compile() -> None:
    for dt, acc, tf32 in ((float16, float32, False), (bfloat16, float32, False), (float32, float32, True),
                          (int8, int32, False), (int16, int64, False)):
        for bm, bn, bk in ((128, 128, 32), (64, 64, 32), (128, 64, 64), (16, 16, 16), (256, 128, 32)):
            fn = matmul(dt, acc, bm=bm, bn=bn, bk=bk, tf32=tf32)
            cubin(gen(fn, arch=90, hints=HINTS), 90)


def test_row_sum_with_cdiv_helper() -> None:
    b = IRBuilder("nt", [("x", arr(uint8, 1))])
    n = cdiv(b, b.dim(b.p("x"), 0), 256)
    assert isinstance(n.type, TileType) and n.type.dtype == int32
    ck = gen(b.ret())
    assert "tj::floordiv(" in ck.source


@tj.kernel
def _scaled_rows(x, w, out, BLOCK: tj.Constant[int]):  # type: ignore[no-untyped-def]
    row = tj.bid(0)
    t = tj.load(x, index=(row, 0), shape=(1, BLOCK)).astype(tj.float32)
    inside = tj.arange(BLOCK) < x.shape[1]
    s = tj.load(w, index=(0,), shape=(BLOCK,)).astype(tj.float32)
    tj.store(out, index=(row, 0), tile=tj.where(inside, t * s, 0.0))


@tj.kernel
def _copy_rows(x, out, BLOCK: tj.Constant[int]):  # type: ignore[no-untyped-def]
    row = tj.bid(0)
    tj.store(out, index=(row, 0), tile=tj.load(x, index=(row, 0), shape=(1, BLOCK)).astype(tj.float32) * 2.0)


def test_long_16bit_rows_cap_registers_and_mask_compares_in_32_bits() -> None:
    def source(kernel: Any, dt: Any, n_arrays: int, block: int = 8192) -> str:
        sig = (dt[:, :], *([dt[:]] * (n_arrays - 2)), dt[:, :])
        art = tj.compile(kernel, sig, constants={"BLOCK": block}, target="sm_90")
        art.hints = {n: ArrayHint(True, True) for n in ("x", "w", "out")}
        src = art.cuda_source()
        assert art.cubin()  # the clamp helper and launch bounds compile
        return src

    two_loads = source(_scaled_rows, tj.bfloat16, 3)
    assert "__launch_bounds__(512, 3) _scaled_rows" in two_loads
    assert "< tj::clamp_i32(" in two_loads and "tj::cast<tj::i32>(" in two_loads
    assert "__launch_bounds__(512, 4) _copy_rows" in source(_copy_rows, tj.bfloat16, 2)
    assert "__launch_bounds__(256) _scaled_rows" in source(_scaled_rows, tj.float32, 3)
    assert "__launch_bounds__(256) _copy_rows" in source(_copy_rows, tj.bfloat16, 2, block=1024)


@pytest.mark.parametrize(("block", "kernel", "n_arrays", "bounds"), [
    (4096, "_copy_rows", 2, "(512, 4)"), (8192, "_copy_rows", 2, "(512, 4)"), (16384, "_copy_rows", 2, "(512, 2)"),
    (32768, "_copy_rows", 2, "(512)"), (8192, "_scaled_rows", 3, "(512, 3)"), (16384, "_scaled_rows", 3, "(512)"),
])
def test_long_16bit_rows_cap_registers_only_where_the_row_fits(block: int, kernel: str, n_arrays: int,
                                                                bounds: str) -> None:
    """The resident-block cap of long 16-bit rows falls as rows grow, so that the cap still holds a thread's
    share of the row (a 16384-element bf16 row under 4 blocks' 32 registers spilled 446 B; ptxas -v, sm_90a)."""
    from tilejit.backends.cuda.plan import row_min_blocks

    k = {"_copy_rows": _copy_rows, "_scaled_rows": _scaled_rows}[kernel]
    sig = (tj.bfloat16[:, ::1], *([tj.bfloat16[::1]] * (n_arrays - 2)), tj.bfloat16[:, ::1])
    src = tj.compile(k, sig, constants={"BLOCK": block}, target="sm_90", backend="cuda").cuda_source()
    assert f"__launch_bounds__{bounds} {kernel}" in src
    assert row_min_blocks(block, 512, n_arrays - 1) == (int(bounds[6:-1]) if "," in bounds else None)


@tj.kernel
def _centered_rows(x, w, out, mean, BLOCK: tj.Constant[int]):  # type: ignore[no-untyped-def]
    row = tj.bid(0)
    t = tj.load(x, index=(row, 0), shape=(1, BLOCK)).astype(tj.float32)
    mu = tj.sum(t, axis=1) / x.shape[1].astype(tj.float32)
    tj.store(out, index=(row, 0), tile=(t - mu) * tj.load(w, index=(0,), shape=(BLOCK,)).astype(tj.float32))
    tj.store(mean, index=(row,), tile=mu)


@tj.kernel
def _centered_row_pairs(x, w, out, mean, BLOCK: tj.Constant[int]):  # type: ignore[no-untyped-def]
    for r in range(2):  # two rows a block, one after the other
        row = 2 * tj.bid(0) + r
        t = tj.load(x, index=(row, 0), shape=(1, BLOCK)).astype(tj.float32)
        mu = tj.sum(t, axis=1) / x.shape[1].astype(tj.float32)
        tj.store(out, index=(row, 0), tile=(t - mu) * tj.load(w, index=(0,), shape=(BLOCK,)).astype(tj.float32))
        tj.store(mean, index=(row,), tile=mu)


def _row_example(module: str) -> Any:
    """An example module of row kernels (examples/ on sys.path)."""
    import importlib
    import sys
    from pathlib import Path

    folder = str(Path(__file__).resolve().parent.parent / "examples")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(module)


def test_a_rows_float32_statistics_do_not_change_its_16bit_plan() -> None:
    """Issue 19: the 16-bit-row plans look at the largest tiles' dtype in memory, so a row's float32 mean stored
    beside it leaves a whole 1024-element row 128 threads (16-byte vectors, 8 elements each) and a long tile in a
    loop 512 threads with the resident-block cap of its two loads."""
    def bounds(dt: Any, kernel: Any, block: int) -> str:
        sig = (dt[:, ::1], dt[::1], dt[:, ::1], tj.float32[::1])
        src = tj.compile(kernel, sig, constants={"BLOCK": block}, target="sm_90", backend="cuda").cuda_source()
        return src.split("__launch_bounds__")[1].split(f" {kernel.__name__}(")[0]

    assert bounds(tj.bfloat16, _centered_rows, 1024) == bounds(tj.float16, _centered_rows, 1024) == "(128)"
    assert bounds(tj.float32, _centered_rows, 1024) == "(256)"
    assert bounds(tj.bfloat16, _centered_row_pairs, 8192) == "(512, 3)"
    assert bounds(tj.float32, _centered_row_pairs, 8192) == "(256)"


def test_row_registers_count_loads_and_carried_sums() -> None:
    from tilejit.backends.cuda.plan import row_min_blocks, row_registers

    assert [row_registers(k) for k in (1, 2, 3, 4)] == [1.0, 1.6, 2.0, 2.0]
    assert row_registers(2, 1.0) == pytest.approx(2.6)
    assert row_registers(3, 2.0, accumulates=True) == 6.0  # each load widened, w * dy, two float32 sums
    # layer norm's x, weight and bias at 8192 bf16 elements spilled 12 B under (512, 3)'s 40 registers
    assert row_min_blocks(8192, 512, 3) == 2 and row_min_blocks(4096, 512, 3) == 3
    assert row_min_blocks(8192, 512, 2) == 3 and row_min_blocks(8192, 512, 1) == 4
    assert row_min_blocks(4096, 512, 2, row_registers(2, 1.0, accumulates=True)) == 2
    assert row_min_blocks(8192, 512, 3, row_registers(3, 2.0, accumulates=True)) is None


@pytest.mark.parametrize(("module", "kernel", "dtype", "consts", "bounds"), [
    ("layer_norm", "layer_norm", "bfloat16", {"BLOCK": 8192}, "(256)"),  # whole 16-bit rows: 8 warps from 2048
    ("layer_norm", "layer_norm_fwd", "float16", {"ROWS": 1, "BLOCK": 8192}, "(256)"),
    ("layer_norm", "layer_norm_fwd", "bfloat16", {"ROWS": 1, "BLOCK": 512}, "(64)"),
    ("layer_norm", "layer_norm_fwd", "bfloat16", {"ROWS": 1, "BLOCK": 16384}, "(512)"),  # three 16384-element loads
    ("softmax", "softmax", "float16", {"ROWS": 1, "BLOCK": 1024}, "(128)"),
    ("layer_norm", "layer_norm_bwd", "bfloat16", {"ROWS": 1, "BLOCK": 8192}, "(512)"),
    ("layer_norm", "layer_norm_bwd", "float16", {"ROWS": 4, "BLOCK": 1024}, "(512, 2)"),
    ("rms_norm", "rms_norm_bwd", "bfloat16", {"ROWS": 4, "BLOCK": 1024}, "(512, 2)"),  # (512, 3) spilled 12 B
    ("layer_norm", "layer_norm_bwd", "float32", {"ROWS": 1, "BLOCK": 8192}, "(256)"),
    ("softmax", "softmax", "float32", {"ROWS": 1, "BLOCK": 32768}, "(256)"),  # fits: 254 registers
    ("softmax", "softmax", "float32", {"ROWS": 1, "BLOCK": 65536}, "(1024)"),  # cannot fit: the example chunks them
    ("softmax", "softmax_bwd", "float32", {"ROWS": 1, "BLOCK": 16384}, "(256)"),  # y and dy: 159 registers
    ("softmax", "softmax_bwd", "bfloat16", {"ROWS": 1, "BLOCK": 4096}, "(256)"),  # a whole 16-bit row: 8 warps
    ("softmax", "softmax_bwd", "float32", {"ROWS": 1, "BLOCK": 32768}, "(1024)"),  # spills: the example chunks them
    ("layer_norm", "layer_norm_fwd", "float32", {"ROWS": 1, "BLOCK": 65536}, "(1024)"),  # was refused at 256
])
def test_example_row_kernels_plans(module: str, kernel: str, dtype: str, consts: dict[str, int], bounds: str) -> None:
    """The plans the examples' row kernels get (ptxas -v for sm_90a: no spill where the examples hold rows whole,
    bench/bench_rows.py --ptxas); a row no block can hold in registers gets 1024 threads, the least spill."""
    import inspect

    mod = _row_example(module)
    k = getattr(mod, kernel)
    dt, f32 = getattr(tj, dtype), tj.float32
    x, v, p, st = dt[:, ::1], dt[::1], f32[:, ::1], f32[::1]
    sig = {"layer_norm": (x, v, v, x, f32), "layer_norm_fwd": (x, v, v, x, st, st, f32), "softmax": (x, x),
           "layer_norm_bwd": (x, x, v, st, st, x, p, p), "rms_norm_bwd": (x, x, v, st, x, p),
           "softmax_bwd": (x, x, x)}[kernel]
    assert len(sig) == len(inspect.signature(k.func).parameters) - len(consts)
    src = tj.compile(k, sig, constants=consts, target="sm_90", backend="cuda").cuda_source()
    assert f"__launch_bounds__{bounds} {kernel}(" in src


def test_one_row_growth_leaves_other_kernels_alone() -> None:
    """More threads only for one-row-per-block kernels (a reduction over a single-row tile): a copy of a 65536-element
    float32 tile keeps 256 threads (and MAX_THREAD_WORDS' refusals keep their thread counts)."""
    src = tj.compile(_copy_rows, (tj.float32[:, ::1], tj.float32[:, ::1]), constants={"BLOCK": 65536},
                     target="sm_90", backend="cuda").cuda_source()
    assert "__launch_bounds__(256) _copy_rows(" in src


def test_headers_identity_follows_every_header(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tile-kernel cache key names the device headers by file identity: editing any of them changes it."""
    import shutil

    import tilejit.backends.cuda_backend as backends

    folder = tmp_path / "tilejit"
    shutil.copytree(backends.header_folder(), folder)
    monkeypatch.setattr(backends, "header_folder", lambda: str(folder))
    first = backends.headers_identity()
    assert first == backends.headers_identity()
    for name in backends.HEADER_NAMES:
        path = folder / f"{name}.cuh"
        path.write_text(path.read_text() + "\n// edited\n")
        now = backends.headers_identity()
        assert now != first
        first = now


# ----------------------------------------------------------------------------- user names vs generated names
def _header_identifiers() -> set[str]:
    """Every identifier the device headers spell (macro parameters and bodies included)."""
    return {w for text in device_headers().values() for w in re.findall(r"[A-Za-z_]\w*", text)}


def _from_source(src: str, name: str) -> Any:
    """Function ``name`` of a module made of ``src`` (written to a file, so the front end can read it)."""
    import importlib.util
    import tempfile
    import zlib

    folder = tempfile.mkdtemp(prefix="tj_names_")
    path = f"{folder}/gen_{zlib.crc32(src.encode()):08x}.py"
    with open(path, "w", encoding="utf-8") as f:
        f.write("import tilejit as tj\n\n" + src)
    spec = importlib.util.spec_from_file_location(f"gen_{zlib.crc32(src.encode()):08x}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def _kernel_with_params(names: list[str]) -> Any:
    """A kernel whose scalar float32 parameters ``names`` are all added to a loaded tile."""
    args = ", ".join(names)
    body = " + ".join(names)
    return _from_source(f"def k(x, out, {args}):\n"
                        f"    t = tj.load(x, index=(0,), shape=(16,))\n"
                        f"    tj.store(out, index=(0,), tile=t + ({body}))\n", "k")


def test_user_names_cannot_capture_or_be_captured() -> None:
    from tilejit.backends.cuda.values import USER_PREFIXES, c_ident

    # A scalar parameter `i` is the user's value, not the TJ_EACH element index.
    @tj.kernel
    def add_i(x, out, i):  # type: ignore[no-untyped-def]
        t = tj.load(x, index=(0,), shape=(16,))
        tj.store(out, index=(0,), tile=t + i)

    art = tj.compile(add_i, (tj.float32[:], tj.float32[:], float), target="sm_90")
    src = art.cuda_source()
    assert "float u_i)" in src and re.search(r"TJ_EACH\(i, L\d+\) t\d+\.v\[i\] = .*tj::fadd\(t\d+\.v\[i\], u_i\)", src)
    assert art.cubin()

    # A parameter `s` (cp.async prologue loop variable) and `k7_n` (K-loop temporary) in a tensor-core loop.
    for pname in ("s", "k7_n"):
        mm = tj.kernel(_from_source(
            f"def mm(a, b, c, {pname}, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):\n"
            "    pid_n = tj.bid(1)\n"
            "    acc = tj.zeros((BM, BN), tj.float32)\n"
            "    for k in range(tj.num_tiles(a, 1, (BM, BK))):\n"
            f"        ta = tj.load(a, index=({pname}, k), shape=(BM, BK))\n"
            "        tb = tj.load(b, index=(k, pid_n), shape=(BK, BN))\n"
            "        acc = tj.mma(ta, tb, acc)\n"
            f"    tj.store(c, index=({pname}, pid_n), tile=acc)\n", "mm"))
        art = tj.compile(mm, (tj.float16[:, ::1], tj.float16[:, ::1], tj.float32[:, ::1], int),
                         constants={"BM": 128, "BN": 128, "BK": 32}, target="sm_80")
        src = art.cuda_source()
        assert "for (int s = 0;" in src  # the generated prologue still exists ...
        assert f"(tj::i64)u_{pname} * 128" in src  # ... and the loads use the user's value
        assert re.search(rf"cp_async_tile<[^>]*>\([^;]*\(tj::i64\)u_{pname} \* 128", src)
        assert art.cubin()

    # Locals named like generated names, and parameters named like every identifier of the device headers.
    @tj.kernel
    def locals_(x, out):  # type: ignore[no-untyped-def]
        i = tj.load(x, index=(0,), shape=(16,))
        s = i * 2.0
        k7_n = s + i
        tj_tid = k7_n + 1.0
        tj.store(out, index=(0,), tile=tj_tid)

    assert tj.compile(locals_, (tj.float32[:], tj.float32[:]), target="sm_90").cubin()
    generated = {"i", "j", "s", "k7_n", "k7_smem", "t1", "v1", "c1", "L0", "tj_tid", "tj_smem", "threadIdx"}
    names = sorted(n for n in _header_identifiers() | generated
                   if n.isidentifier() and not keyword.iskeyword(n) and n not in ("x", "out", "tj"))
    for n in names:
        assert not c_ident(n).startswith(tuple(n2 for n2 in ("tj", "TJ")))
        assert c_ident(n).startswith(USER_PREFIXES)
    # Compile them in a few big batches: every one a float parameter added to the tile.
    for chunk in (names[j:j + 150] for j in range(0, len(names), 150)):
        k = tj.kernel(_kernel_with_params(chunk))
        art = tj.compile(k, (tj.float32[:], tj.float32[:], *([float] * len(chunk))), target="sm_90")
        src = art.cuda_source()
        assert all(f"float u_{n}" in src for n in chunk)
        assert art.ptx()


@pytest.mark.parametrize("pname", [
    "xor", "and_eq", "bitand", "bitor", "compl", "not_eq", "or_eq", "xor_eq", "static_assert", "thread_local",
    "wchar_t", "char16_t", "char32_t", "char8_t", "NULL", "nullptr", "threadIdx", "blockIdx", "blockDim", "gridDim",
    "warpSize", "concept", "requires", "co_await", "co_yield", "co_return", "consteval", "constinit", "typeid",
    "reinterpret_cast", "int", "half", "main", "é", "变量", "aé",
])
def test_param_names_that_are_cxx_words_or_non_ascii_compile(pname: str) -> None:
    k = tj.kernel(_kernel_with_params([pname]))
    art = tj.compile(k, (tj.float32[:], tj.float32[:], float), target="sm_90")
    src = art.cuda_source()
    assert src.isascii()
    assert art.ptx()


def test_mangled_names_stay_distinct() -> None:
    from tilejit.backends.cuda.values import c_ident, kernel_symbol

    names = ["int", "int_", "u_int", "_int", "é", "x_9ca", "u0_9ca", "0_9ca", "9ca", "aé", "a_bga", "a_é", "a__é"]
    assert len({c_ident(n) for n in names}) == len(names)
    assert all(c_ident(n).isascii() and c_ident(n).isidentifier() for n in names)

    @tj.kernel
    def collide(int, int_, out):  # type: ignore[no-untyped-def]
        tj.store(out, index=(0,), tile=tj.load(int, index=(0,), shape=(16,)) + tj.load(int_, index=(0,), shape=(16,)))

    assert tj.compile(collide, (tj.float32[:],) * 3, target="sm_90").ptx()
    # Kernel symbols: plain names stay, unsafe ones are mangled into their own (tjk_) space.
    assert kernel_symbol("vadd") == "vadd" and kernel_symbol("_copy_rows") == "_copy_rows"
    for bad in ("xor", "threadIdx", "L0", "tj", "main", "é", "__x", "_X"):
        assert kernel_symbol(bad).startswith("tjk_") and kernel_symbol(bad).isascii()


def _names_in_headers(include_dirs: list[Any]) -> list[str]:
    """Every identifier a CUDA header calls or defines as a macro (``name(`` or ``#define name``)."""
    names: set[str] = set()
    for inc in include_dirs:
        for path in inc.rglob("*"):
            if path.suffix in (".h", ".hpp") and path.is_file():
                text = path.read_text(errors="replace")
                names.update(re.findall(r"\b([A-Za-z_]\w*)\s*\(", text))
                names.update(re.findall(r"#\s*define\s+([A-Za-z_]\w*)", text))
    return sorted(n for n in names if n.isascii())


def test_kernel_symbols_avoid_every_name_the_cuda_headers_declare(toolkit: Any) -> None:
    """A tile kernel may be named ``norm``, ``max`` or ``printf``: its extern "C" symbol must not clash with
    anything NVRTC's built-in CUDA headers declare. One program declares a kernel under ``kernel_symbol`` of
    every identifier in this CUDA major's runtime headers, after tilejit's own headers; each failing line
    names a clash to add to values._CUDA_DECLARED."""
    from tilejit.backends.cuda.values import kernel_symbol
    from tilejit.compiler.nvrtc import compile_cuda

    names = _names_in_headers(sorted(toolkit.root.glob("nvidia/*/include")))
    assert len(names) > 3000 and "cudaMalloc" in names
    # The runtime wheels lack the math headers (crt/): names Python users reach for stand in for them.
    import builtins
    import math

    names += [n for n in (*dir(math), *dir(builtins)) if n.isidentifier() and not n.startswith("_")]
    symbols = sorted({kernel_symbol(n) for n in names})
    decls = "".join(f'extern "C" __global__ void {s}(float* x) {{}}\n' for s in symbols)
    src = "#include <tilejit/tilejit.cuh>\n" + decls
    try:
        compile_cuda(src, name="names.cu", headers=device_headers(), target="sm_80", output="ptx", cache=False,
                     nvrtc=_nvrtc_at(str(toolkit.nvrtc)))
    except CompileError as exc:
        lines = sorted({int(m.group(1)) for m in re.finditer(r"^names\.cu\((\d+)\): error", exc.log, re.M)})
        bad = [symbols[n - 2] if 2 <= n < len(symbols) + 2 else f"line {n}" for n in lines]
        pytest.fail(f"CUDA {toolkit.major}: kernel symbols that do not compile (NVRTC may stop at the first few; "
                    f"add them and rerun): {', '.join(bad)}")


@pytest.mark.parametrize("name", ["norm", "max", "sin", "printf", "rsqrt", "cudaMalloc", "float4"])
def test_a_kernel_named_like_a_cuda_function_compiles(name: str) -> None:
    from tilejit.backends.cuda.values import kernel_symbol

    k = tj.kernel(_kernel_named(name))
    art = tj.compile(k, (tj.float32[:], tj.float32[:]), target="sm_90")
    assert kernel_symbol(name) == "tjk_u_" + name
    assert f" tjk_u_{name}(" in art.cuda_source()
    assert art.cubin()[:4] == b"\x7fELF"


def _kernel_named(name: str) -> Any:
    """A copy kernel whose function is called ``name``."""
    body = "    tj.store(out, index=(tj.bid(0),), tile=tj.load(x, index=(tj.bid(0),), shape=(64,)))\n"
    return _from_source(f"def {name}(x, out):\n" + body, name)


# ----------------------------------------------------------------------------- float literals out of range
F32_CASES = [
    (1e-50, "0.0f"), (-1e-50, "-0.0f"), (3.4e39, "tj::inf_f()"), (-3.4e39, "(-tj::inf_f())"), (1e300, "tj::inf_f()"),
    (1e-45, "__int_as_float(0x00000001)"), (0.1, "0.1f"), (100.0, "100.0f"), (float("nan"), "tj::nan_f()"),
    (3.4028235e38, "3.402823466e+38f"),
]


@pytest.mark.parametrize(("value", "text"), F32_CASES)
def test_float32_literals_round_like_numpy(value: float, text: str) -> None:
    import numpy as np

    assert tables.literal(value, float32) == text
    if text.endswith("f") and not text.startswith("("):
        assert np.float32(text[:-1]).tobytes() == np.float32(value).tobytes()


def test_float_literals_other_dtypes() -> None:
    assert tables.literal(1e39, bfloat16) == "tj::bf16::from_bits(0x7f80)"  # was an OverflowError
    assert tables.literal(-1e300, bfloat16) == "tj::bf16::from_bits(0xff80)"
    assert tables.literal(1e-50, bfloat16) == "tj::bf16::from_bits(0x0000)"
    assert tables.literal(1e5, float16) == "tj::half::from_bits(0x7c00)"
    assert tables.literal(-1e300, float16) == "tj::half::from_bits(0xfc00)"
    assert tables.literal(5e-324, float64) == "__longlong_as_double(0x0000000000000001LL)"
    assert tables.literal(1e-50, float64) == "1e-50" and tables.literal(1e300, float64) == "1e+300"
    assert tables.literal(float("inf"), float64) == "tj::inf_d()"


@tj.kernel
def _literal_everywhere(x, idx, out, V: tj.Constant[float]):  # type: ignore[no-untyped-def]
    t = tj.load(x, index=(0,), shape=(16,), padding=V)
    i = tj.load(idx, index=(0,), shape=(16,))
    g = tj.gather(x, i, padding=V)
    f = tj.full((16,), V, x.dtype)
    w = tj.where(t > f, V, t * V + g)
    tj.atomic_add(out, i, w + V)
    tj.store(out, index=(0,), tile=w * V)


@pytest.mark.parametrize("value", [1e-50, -3.4e39, 1e39, 1e300, 5e-324, 1e-45, float("nan"), float("-inf")])
@pytest.mark.parametrize("dt", ["float16", "bfloat16", "float32", "float64"])
def test_out_of_range_float_constants_compile(value: float, dt: str) -> None:
    d = getattr(tj, dt)
    art = tj.compile(_literal_everywhere, (d[:], tj.int32[:], d[:]), constants={"V": value}, target="sm_90")
    src = art.cuda_source()
    assert not re.search(r"\de[+-]?\d{3}f|e-50f|e\+39f", src)  # no out-of-range float32 literal text
    assert art.ptx()


@pytest.mark.parametrize("value", [1e-50, 3.4e39])
def test_out_of_range_constant_in_mma_accumulator(value: float) -> None:
    @tj.kernel
    def mm(a, b, c, V: tj.Constant[float]):  # type: ignore[no-untyped-def]
        acc = tj.full((64, 64), V, tj.float32)
        acc = tj.mma(tj.load(a, index=(0, 0), shape=(64, 32)), tj.load(b, index=(0, 0), shape=(32, 64)), acc)
        tj.store(c, index=(0, 0), tile=acc * V)

    art = tj.compile(mm, (tj.float16[:, ::1], tj.float16[:, ::1], tj.float32[:, ::1]), constants={"V": value},
                     target="sm_90")
    assert art.ptx()


# ----------------------------------------------------------------------------- numpy's integer and rounding rules


@tj.kernel
def _wrap_compare(x, out, TILE: tj.Constant[int]):
    a = tj.load(x, index=(tj.bid(0),), shape=(TILE,))
    tj.store(out, index=(tj.bid(0),), tile=(a + 1) > a)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_signed_overflow_wraps_and_is_not_assumed_away(dtype: str) -> None:
    """numpy wraps x + 1 at the maximum, so (x + 1) > x is False there. With a plain C++ signed add
    the compiler assumed no overflow and stored a constant True without even reading x."""
    art = tj.compile(_wrap_compare, (BY_NAME[dtype][:], tj.bool_[:]), constants={"TILE": 128}, target="sm_90")
    assert f"tj::wadd<{tables.ctype(BY_NAME[dtype])}>" in art.cuda_source()
    ptx = art.ptx()
    assert "ld.global" in ptx and "setp" in ptx


def test_integer_arithmetic_renders_wrapping_helpers() -> None:
    for dt in ("int8", "int16", "int32", "int64", "uint16", "uint32", "uint64"):
        t = tables.ctype(BY_NAME[dt])
        for fn, helper in (("add", "wadd"), ("sub", "wsub"), ("mul", "wmul")):
            assert tables.table_entry(tables.BINARY, fn, BY_NAME[dt], "").format(x="a", y="b", t=t) == \
                f"tj::{helper}<{t}>(a, b)"
        assert tables.table_entry(tables.UNARY, "neg", BY_NAME[dt], "").format(x="a", t=t) == f"tj::wneg<{t}>(a)"
    headers = device_headers()
    math_h = next(v for k, v in headers.items() if k.endswith("math.cuh"))
    assert "b == T(-1)) return wneg<T>(a)" in math_h  # MIN // -1 is defined
    reduce_h = next(v for k, v in headers.items() if k.endswith("reduce.cuh"))
    assert "wadd<T>(a, b)" in reduce_h and "wmul<T>(a, b)" in reduce_h and "wadd<A>(src[f]" in reduce_h


@tj.kernel
def _to_half(x, out, TILE: tj.Constant[int]):
    a = tj.load(x, index=(tj.bid(0),), shape=(TILE,))
    tj.store(out, index=(tj.bid(0),), tile=a.astype(tj.float16))


def test_float64_to_float16_rounds_once() -> None:
    """numpy rounds float64 to float16 once; through float it rounded twice (1 + 2**-11 + 2**-40 -> 1.0)."""
    art = tj.compile(_to_half, (tj.float64[:], tj.float16[:]), constants={"TILE": 128}, target="sm_90")
    assert "cvt_pair" not in art.cuda_source()
    ptx = art.ptx()
    assert "cvt.rn.f16.f64" in ptx and "cvt.rn.f32.f64" not in ptx


def test_for_loops_count_in_64_bits_and_stop_on_a_non_positive_run_time_step() -> None:
    k = tj.kernel(_from_source(
        "def count(out, lo: int, hi: int, step: int):\n"
        "    c = 0\n"
        "    for _ in range(lo, hi, step):\n"
        "        c += 1\n"
        "    for _ in range(lo, hi):\n"
        "        c += 1\n"
        "    tj.store(out, index=(0,), tile=tj.full((1,), c, tj.int32))\n", "count"))
    src = tj.compile(k, (tj.int32[:], int, int, int), target="sm_90").cuda_source()
    loops = [line.strip() for line in src.splitlines() if line.strip().startswith("for (")]
    assert len(loops) == 2 and all(line.startswith("for (tj::i64 ") for line in loops), loops
    assert "> 0;" in loops[0] and "> 0;" not in loops[1]  # the constant step 1 needs no guard


# ----------------------------------------------------------------------------- values that must not come from a layout


@tj.kernel
def _size_one_aranges(x, out, R: tj.Constant[int], C: tj.Constant[int]):  # type: ignore[no-untyped-def]
    t = tj.load(x, index=(0, 0), shape=(R, C))
    a = tj.broadcast_to(tj.arange(C, tj.int32), (R, C))
    b = tj.arange(C)[None, :]
    c = tj.broadcast_to(tj.broadcast_to(tj.arange(1, tj.int32), (1,)).reshape((1, 1)), (R, C))
    d = tj.expand_dims(tj.arange(1, tj.int64), 0) + tj.zeros((R, 1), tj.int64)
    tj.store(out, index=(0, 0), tile=t + a + b * 3 + c * 5 + d.astype(tj.int32) * 7)


def test_a_broadcast_size_one_arange_is_zero_not_the_lane_index() -> None:
    """``arange(1)`` broadcast to (R, 1) read each lane's flat index of the broadcast shape (0, 1, 2, ...):
    the lazy arange ("element f is f") went through a size-1 broadcast unchanged. It is the constant 0."""
    art = tj.compile(_size_one_aranges, (tj.int32[:, :], tj.int32[:, :]), constants={"R": 16, "C": 1},
                     target="sm_90")
    src = art.cuda_source()
    assert "flat(tj_tid" not in src, src
    assert art.ptx()
    wide = tj.compile(_size_one_aranges, (tj.int32[:, :], tj.int32[:, :]), constants={"R": 16, "C": 8},
                      target="sm_90").cuda_source()
    assert "flat(tj_tid" in wide  # a real arange (C == 8) still reads the index


@tj.kernel
def _carried_swap(out, n):  # type: ignore[no-untyped-def]
    a = tj.zeros((1,), tj.float32)
    s = 0.0
    b = tj.zeros((16,), tj.float32)
    c = tj.zeros((16,), tj.float32)
    for _ in range(n):
        a, b, s, c = a + 1.0, tj.broadcast_to(a, (16,)), s + 1.0, tj.broadcast_to(s, (16,))
    tj.store(out, index=(0,), tile=b * 100.0 + c)


def test_loop_carried_values_are_all_read_before_any_slot_is_replaced() -> None:
    """``a, b = a + 1, broadcast(a)``: the broadcast of a one-element tile is a lazy ``c1.v[0]``, and writing
    the slot of ``a`` before the slot of ``b`` gave ``b`` the new ``a`` (numpy: the old one)."""
    src = tj.compile(_carried_swap, (tj.float32[:], int), target="sm_90").cuda_source()
    lines = [ln.strip() for ln in src.splitlines()]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("for (tj::i64"))
    end = start + lines[start:].index("continue;")
    slots = {m.group(1) for ln in lines[:start] for m in [re.match(r"(?:tj::Tile<.*>|float) (c\d+)\b", ln)] if m}
    assert len(slots) == 4, lines[:start]
    written: set[str] = set()
    for ln in lines[start + 1:end]:
        m = re.match(r"(?:TJ_EACH\(i, \w+\) )?(\w+)(?:\.v\[i\])? = (.*);$", ln)
        if m is None:
            continue
        stale = {w for w in re.findall(r"\b(c\d+)\b", m.group(2)) if w in written}
        assert not stale, f"{ln!r} reads {stale} after the loop replaced it:\n" + "\n".join(lines[start:end])
        if m.group(1) in slots:
            written.add(m.group(1))
    assert written == slots
    assert tj.compile(_carried_swap, (tj.float32[:], int), target="sm_90").ptx()


def _fma_free_ptx(expr: str, dtype: Any) -> str:
    """PTX of a kernel storing ``expr`` over loaded tiles ``a``, ``b``, ``c`` and scalars ``p``, ``q``."""
    k = tj.kernel(_from_source(
        "def k(x, y, z, out, p, q):\n"
        "    a = tj.load(x, index=(0,), shape=(64,))\n"
        "    b = tj.load(y, index=(0,), shape=(64,))\n"
        "    c = tj.load(z, index=(0,), shape=(64,))\n"
        f"    tj.store(out, index=(0,), tile={expr})\n", "k"))
    return tj.compile(k, (dtype[:],) * 4 + (dtype, dtype), target="sm_90").ptx()


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("expr", ["a * b + c", "c - a * b", "(a * b) * c + a", "a * b + (p * q + p)",
                                  "((a * b + c) * 3.0).astype(tj.int8).astype(a.dtype)"])
def test_float_add_sub_mul_round_once_as_numpy_does(expr: str, dtype: str) -> None:
    """numpy rounds x * y and then + z; NVRTC fused them into one FMA (one rounding), so single lanes of
    ``a * b + c`` differed in the last bit, and a cast to int8 or a comparison after it by a whole step."""
    ptx = _fma_free_ptx(expr, BY_NAME[dtype])
    assert "mul.rn." in ptx and not re.search(r"\bfma\.", ptx), [ln for ln in ptx.splitlines() if "fma." in ln]


@pytest.mark.parametrize(("dtype", "div"), [("float32", "div.full.f32"), ("bfloat16", "div.full.f32"),
                                          ("float64", "div.rn.f64")])
def test_sigmoid_divides_as_float_truediv(dtype: str, div: str) -> None:
    """sigmoid's division is ``/``'s: div.full.f32 in float32 (and 16-bit floats, computed in float32), IEEE in
    float64; no IEEE float32 division (its slow path) is left."""
    k = tj.kernel(_from_source(
        "def k(x, out):\n"
        "    tj.store(out, index=(0,), tile=tj.sigmoid(tj.load(x, index=(0,), shape=(64,))))\n", "k"))
    ptx = tj.compile(k, (BY_NAME[dtype][:],) * 2, target="sm_90", backend="cuda").ptx()
    assert div in ptx and "div.rn.f32" not in ptx


def test_sigmoid_constant_folds_like_the_gpu_below_minus_88() -> None:
    """1 / (1 + exp(-x)) overflows exp for x < -88.7 and gave 0; sigmoid(-95) is the subnormal 5.5e-42."""
    import numpy as np

    k = tj.kernel(_from_source(
        "def k(out, V: tj.Constant[float]):\n"
        "    tj.store(out, index=(0,), tile=tj.sigmoid(tj.full((16,), V, tj.float32)))\n", "k"))
    for v in (-95.0, -88.8, -20.0, 0.0, 30.0):
        text = tj.compile(k, (tj.float32[:],), constants={"V": v}, target="sm_90").ir_text()
        got = np.float32(float(re.search(r"constant \{value=([^}]*)\} : tile<16xf32>", text).group(1)))  # type: ignore[union-attr]
        want = np.float32(1 / (1 + math.exp(-float(np.float32(v)))))  # of the float32 input
        ulps = abs(int(got.view(np.int32)) - int(want.view(np.int32)))
        assert ulps <= 1 and (got != 0) == (want != 0), (v, got, want)
