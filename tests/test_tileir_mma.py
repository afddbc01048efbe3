"""``mma`` on the Tile IR backend: mmaf (f16, bf16, f32, tf32, f64) and mmai (int8, uint8) compiled by tileiras
for sm_80, sm_90 and sm_100 and read back by tileirdisasm, the text form, the refusals; on a GPU, one K tile
per block on both backends against numpy (sizes off the tile, outputs poisoned first)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from source_lines import where_in

import tilejit as tj
from tilejit.backends.tileir import generate_bytecode, module_text
from tilejit.backends.tileir.lower.mma import MAX_INT_K
from tilejit.compiler import tileiras as runner
from tilejit.errors import TileCompileError
from tilejit.language.ir import ops as O


@tj.kernel
def mma_tile(a, b, d, c, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    i, j = tj.bid(0), tj.bid(1)
    ta = tj.load(a, index=(i, 0), shape=(BM, BK))
    tb = tj.load(b, index=(0, j), shape=(BK, BN))
    acc = tj.load(d, index=(i, j), shape=(BM, BN))
    tj.store(c, index=(i, j), tile=tj.mma(ta, tb, acc))


@tj.kernel
def matmul_tile(a, b, c, T: tj.Constant[int]):
    tj.store(c, index=(0, 0), tile=tj.load(a, index=(0, 0), shape=(T, T)) @ tj.load(b, index=(0, 0), shape=(T, T)))


@tj.kernel
def mma_both(a, b, c, i, j, k, T: tj.Constant[int]):
    """mmaf and mmai in one kernel (test_tileir_writer's table test runs every op of the OPS table)."""
    ta, tb = tj.load(a, index=(0, 0), shape=(T, T)), tj.load(b, index=(0, 0), shape=(T, T))
    tj.store(c, index=(0, 0), tile=tj.mma(ta, tb, tj.zeros((T, T), tj.float32)))
    tj.store(k, index=(0, 0), tile=tj.load(i, index=(0, 0), shape=(T, T)) @ tj.load(j, index=(0, 0), shape=(T, T)))


MMA_BOTH_SIG = (tj.float16[:, :], tj.float16[:, :], tj.float32[:, :], tj.int8[:, :], tj.int8[:, :], tj.int32[:, :])

#: name -> (input dtype, accumulator dtype, tf32 allowed)
DTYPES: dict[str, tuple[Any, Any, bool]] = {
    "float16": (tj.float16, tj.float32, False), "bfloat16": (tj.bfloat16, tj.float32, False),
    "float32": (tj.float32, tj.float32, False), "tf32": (tj.float32, tj.float32, True),
    "float64": (tj.float64, tj.float64, False), "int8": (tj.int8, tj.int32, False),
    "uint8": (tj.uint8, tj.int32, False),
}
#: Each target with the oldest bytecode version tileiras compiles for it, and the newest.
TARGETS = {"sm_80": ["13.2", "13.5"], "sm_90": ["13.3", "13.5"], "sm_100": ["13.1", "13.5"]}


def artifact(name: str, target: str, backend: str = "tileir", tile: tuple[int, int, int] = (64, 64, 32),
             rows: bool = False) -> Any:
    """The single-K-tile mma kernel for dtype ``name`` (tf32: the IR's MmaOp allows tf32, which only IR can say);
    ``rows``: arrays typed ``[:, ::1]`` (unit inner stride)."""
    dt, acc, tf32 = DTYPES[name]
    bm, bn, bk = tile
    sig = tuple(t[:, ::1] if rows else t[:, :] for t in (dt, dt, acc, acc))
    art = tj.compile(mma_tile, sig, constants={"BM": bm, "BN": bn, "BK": bk}, target=target, backend=backend)
    (mma,) = [op for op in art.ir().body.ops if isinstance(op, O.MmaOp)]
    mma.tf32 = tf32
    return art


def tileir_fn(name: str, tile: tuple[int, int, int] = (64, 64, 32)) -> O.Function:
    """The kernel's IR for the Tile IR writer (compiled with neither backend, so no toolchain is needed)."""
    return artifact(name, "sm_90", "cuda", tile).ir()


# --------------------------------------------------------------------------------------------- CPU


@pytest.mark.parametrize("name", list(DTYPES))
def test_mma_of_every_dtype_compiles_for_every_target_and_reads_back(name: str, tileir_toolchain: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEJIT_TILEIRAS", tileir_toolchain.tileiras)
    fn = tileir_fn(name)
    elem = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "tf32": "tf32", "float64": "f64",
            "int8": "i8", "uint8": "i8"}[name]
    acc = {"float64": "f64", "int8": "i32", "uint8": "i32"}.get(name, "f32")
    op = "mmai" if name.endswith("int8") else "mmaf"
    sign = {"int8": " signed signed", "uint8": " unsigned unsigned"}.get(name, "")
    want = f"{op} %\\w+, %\\w+, %\\w+{sign} : tile<64x32x{elem}>, tile<32x64x{elem}>, tile<64x64x{acc}>"
    for target, versions in TARGETS.items():
        image = artifact(name, target).image()  # through the backend: the newest version, tileiras, the ELF
        assert image.image[:4] == b"\x7fELF" and image.symbol == "mma_tile"
        for version in versions:
            bc = generate_bytecode(fn, target, version)
            assert runner.run_tileiras(bc, target, toolchain=tileir_toolchain)[:4] == b"\x7fELF"
            text = runner.disassemble(bc, toolchain=tileir_toolchain)
            assert re.search(want, text), text
            assert len(re.findall(r"= mma[fi] ", text)) == 1


def test_float_and_int_mma_in_one_kernel(tileir_toolchain: Any) -> None:
    fn = tj.compile(mma_both, MMA_BOTH_SIG, constants={"T": 16}, target="sm_90").ir()
    for version in ("13.3", "13.5"):
        bc = generate_bytecode(fn, "sm_90", version)
        assert runner.run_tileiras(bc, "sm_90", toolchain=tileir_toolchain)[:4] == b"\x7fELF"
        text = runner.disassemble(bc, toolchain=tileir_toolchain)
        assert " = mmaf " in text and " = mmai " in text


GOLDEN = """\
cuda_tile.module @matmul_tile {
  entry @matmul_tile(%a: tile<ptr<f16>>, %a_shape0: tile<i64>, %a_shape1: tile<i64>, %a_stride0: tile<i64>, \
%a_stride1: tile<i64>, %b: tile<ptr<f16>>, %b_shape0: tile<i64>, %b_shape1: tile<i64>, %b_stride0: \
tile<i64>, %b_stride1: tile<i64>, %c: tile<ptr<f16>>, %c_shape0: tile<i64>, %c_shape1: tile<i64>, \
%c_stride0: tile<i64>, %c_stride1: tile<i64>) {
    %a_view = make_tensor_view %a, shape = [%a_shape0, %a_shape1], strides = [%a_stride0, %a_stride1] : \
tile<i64> -> tensor_view<?x?xf16, strides=[?,?]>
    %a_tiles = make_partition_view %a_view : partition_view<tile=(16x16), padding_value = zero, \
tensor_view<?x?xf16, strides=[?,?]>>
    %b_view = make_tensor_view %b, shape = [%b_shape0, %b_shape1], strides = [%b_stride0, %b_stride1] : \
tile<i64> -> tensor_view<?x?xf16, strides=[?,?]>
    %b_tiles = make_partition_view %b_view : partition_view<tile=(16x16), padding_value = zero, \
tensor_view<?x?xf16, strides=[?,?]>>
    %c_view = make_tensor_view %c, shape = [%c_shape0, %c_shape1], strides = [%c_stride0, %c_stride1] : \
tile<i64> -> tensor_view<?x?xf16, strides=[?,?]>
    %c_tiles = make_partition_view %c_view : partition_view<tile=(16x16), tensor_view<?x?xf16, strides=[?,?]>>
    %0 = constant <i32: 0> : tile<i32>
    %1, %2 = load_view_tko weak %a_tiles[%0, %0] optimization_hints = <sm_90 = {allow_tma = false}> \
: partition_view<tile=(16x16), padding_value = zero, \
tensor_view<?x?xf16, strides=[?,?]>>, tile<i32> -> tile<16x16xf16>, token
    %3, %4 = load_view_tko weak %b_tiles[%0, %0] optimization_hints = <sm_90 = {allow_tma = false}> \
: partition_view<tile=(16x16), padding_value = zero, \
tensor_view<?x?xf16, strides=[?,?]>>, tile<i32> -> tile<16x16xf16>, token
    %5 = constant <f32: 0.000000e+00> : tile<16x16xf32>
    %6 = mmaf %1, %3, %5 : tile<16x16xf16>, tile<16x16xf16>, tile<16x16xf32>
    %7 = ftof %6 : tile<16x16xf32> -> tile<16x16xf16>
    %8 = join_tokens %2, %4 : token
    %9 = store_view_tko weak %7, %c_tiles[%0, %0] token = %8 optimization_hints = <sm_90 = {allow_tma = false}> \
: tile<16x16xf16>, \
partition_view<tile=(16x16), tensor_view<?x?xf16, strides=[?,?]>>, tile<i32> -> token
    return
  }
}
"""


def test_mma_text_golden() -> None:
    fn = tj.compile(matmul_tile, (tj.float16[:, :], tj.float16[:, :], tj.float16[:, :]), constants={"T": 16},
                    target="sm_90").ir()
    assert module_text(fn, "sm_90") == GOLDEN


def test_tf32_rounds_the_operands_to_tf32_and_f32_stays_f32() -> None:
    tf32 = module_text(tileir_fn("tf32"), "sm_90")
    assert "ftof %ta : tile<64x32xf32> -> tile<64x32xtf32>" in tf32
    assert "ftof %tb : tile<32x64xf32> -> tile<32x64xtf32>" in tf32
    assert "tile<64x32xtf32>, tile<32x64xtf32>, tile<64x64xf32>" in tf32
    f32 = module_text(tileir_fn("float32"), "sm_90")
    assert "tf32" not in f32 and "ftof" not in f32


@pytest.mark.parametrize("name", ["int8", "uint8"])
def test_int_mma_sums_from_zero_and_adds_acc_wrapping(name: str) -> None:
    """tileiras's mmai saturates (and folds a plain addi of acc back into it): the products are summed from a
    zero accumulator and acc is added as (acc ^ p) + 2 * (acc & p), which wraps like the CUDA backend."""
    text = module_text(tileir_fn(name), "sm_90")
    sign = "signed" if name == "int8" else "unsigned"
    lines = text.split("\n")
    mma = next(i for i, line in enumerate(lines) if " mmai " in line)
    assert lines[mma - 1].strip() == "%4 = constant <i32: 0> : tile<64x64xi32>"
    types = "tile<64x32xi8>, tile<32x64xi8>, tile<64x64xi32>"
    assert lines[mma].strip() == f"%5 = mmai %ta, %tb, %4 {sign} {sign} : {types}"
    assert [line.strip() for line in lines[mma + 1:mma + 5]] == [
        "%6 = xori %acc, %5 : tile<64x64xi32>",
        "%7 = andi %acc, %5 : tile<64x64xi32>",
        "%8 = addi %7, %7 : tile<64x64xi32>",
        "%9 = addi %6, %8 : tile<64x64xi32>",
    ]


def test_int_mma_bound_is_the_largest_exact_k() -> None:
    for name, largest in (("int8", 128 * 128), ("uint8", 255 * 255)):
        assert MAX_INT_K[name] * largest <= 2**31 - 1 < (MAX_INT_K[name] + 1) * largest


def test_a_k_past_the_exact_int_bound_is_a_located_error() -> None:
    k = 65536  # uint8: 65536 * 255**2 overflows int32
    fn = tileir_fn("uint8", (1, 1, k))
    line, col = where_in(Path(__file__).read_text().splitlines(), "tj.mma(ta, tb, acc)")
    with pytest.raises(TileCompileError) as err:
        generate_bytecode(fn, "sm_90")
    e = err.value
    assert (e.filename, e.line, e.col) == (__file__, line, col)
    assert e.message == (
        f"the Tile IR backend cannot express 'mma' (uint8 inputs with K = {k}: Tile IR's mmai saturates where "
        f'tilejit wraps, exact only for K <= {MAX_INT_K["uint8"]}) yet; compile this kernel with backend="cuda"'
    )


# --------------------------------------------------------------------------------------------- entry hints

HINTED = [
    ("sm_90", "13.3", {"sm_90": {"num_cta_in_cga": 2, "occupancy": 2}}),
    ("sm_90", "13.5", {"sm_90": {"num_cta_in_cga": 2}, "sm_100": {"num_cta_in_cga": 4, "occupancy": 1}}),
    ("sm_100", "13.1", {"sm_100": {"num_cta_in_cga": 4}}),
    ("sm_80", "13.4", {"default": {"occupancy": 2}, "sm_80": {"num_cta_in_cga": 1}}),
    ("sm_90", "13.5", {"sm_90": {"num_worker_warps_per_cta": 8}}),
]


def hinted_module(hints: dict[str, dict[str, int]]) -> Any:
    from tilejit.backends.tileir.lower import lower_function

    module = lower_function(tileir_fn("bfloat16", (128, 128, 64)))
    module.functions[0].hints = hints
    return module


@pytest.mark.parametrize(("target", "version", "hints"), HINTED)
def test_entry_optimization_hints_are_written_read_back_and_compiled(target: str, version: str,
                                                                     hints: dict[str, dict[str, int]],
                                                                     tileir_toolchain: Any) -> None:
    from tilejit.backends.tileir import parse_version
    from tilejit.backends.tileir.bytecode import encode_module
    from tilejit.backends.tileir.text import print_module

    module = hinted_module(hints)
    text = print_module(module)
    bc = encode_module(module, parse_version(version))
    shown = ", ".join(f"{arch} = {{{', '.join(f'{k} = {v}' for k, v in sorted(d.items()))}}}"
                      for arch, d in sorted(hints.items()))
    assert f") optimization_hints=<{shown}> {{\n" in text
    assert f") optimization_hints=<{shown}> {{\n" in runner.disassemble(bc, toolchain=tileir_toolchain)
    plain = encode_module(hinted_module({}), parse_version(version))
    assert runner.run_tileiras(bc, target, toolchain=tileir_toolchain) != runner.run_tileiras(
        plain, target, toolchain=tileir_toolchain)


def test_no_hints_are_an_empty_dictionary_from_13_5_and_absent_before() -> None:
    from tilejit.backends.tileir.bytecode import encode_module

    module = hinted_module({})
    assert "optimization_hints" not in module_text(tileir_fn("bfloat16", (128, 128, 64)), "sm_90")
    assert b"\x0b\x00\x06\x00" in encode_module(module, (13, 5))  # empty hints, empty argument attributes
    assert b"num_cta_in_cga" not in encode_module(hinted_module({"sm_90": {"occupancy": 1}}), (13, 4))


@pytest.mark.parametrize(("hints", "version", "message"), [
    ({"sm_80": {"num_cta_in_cga": 2}}, (13, 5), "optimization hints: sm_80.num_cta_in_cga = 2; expected one of 1"),
    ({"sm_90": {"num_cta_in_cga": 3}}, (13, 5),
     "optimization hints: sm_90.num_cta_in_cga = 3; expected one of 1, 2, 4, 8, 16"),
    ({"sm_90": {"occupancy": 0}}, (13, 5), "optimization hints: sm_90.occupancy = 0; expected one of 1, 2, 3, "),
    ({"sm_90": {"allow_tma": 1}}, (13, 5), "optimization hints: sm_90.allow_tma is not an entry hint "
                                           "(one of num_cta_in_cga, occupancy, num_worker_warps_per_cta)"),
    ({"sm_75": {"occupancy": 1}}, (13, 5), "optimization hints: unknown architecture 'sm_75' (one of default, "),
    ({"sm_90": {"num_worker_warps_per_cta": 4}}, (13, 2),
     "optimization hints: sm_90.num_worker_warps_per_cta needs bytecode version 13.3 or newer, not 13.2"),
])
def test_hints_tileiras_would_reject_are_refused(hints: dict[str, dict[str, int]], version: tuple[int, int],
                                                 message: str) -> None:
    from tilejit.backends.tileir.bytecode import encode_module

    with pytest.raises(ValueError) as err:
        encode_module(hinted_module(hints), version)
    assert str(err.value).startswith(message)


# --------------------------------------------------------------------------------------------- assume (for TMA)


def with_view_facts(module: Any, facts: set[str]) -> Any:
    """``module`` with the alignment and range facts a launch could check, as ``assume`` ops before each
    ``make_tensor_view``: base div_by 16 ("base"), row strides div_by 8 bf16 elements ("strides"), shapes and
    strides in [0, 2**31) ("bounded")."""
    from tilejit.backends.tileir.module import TOp, TValue

    fn = module.functions[0]
    body = []
    for op in fn.body:
        if op.name == "make_tensor_view":
            base, shape, strides = op.operands

            def assume(v: TValue, pred: tuple[Any, ...]) -> TValue:
                r = TValue(v.type, v.name + "_known")
                body.append(TOp("assume", [r], [v], {"predicate": pred}))
                return r

            if "bounded" in facts:
                shape = [assume(v, ("bounded", 0, 2**31 - 1)) for v in shape]
                strides = [assume(v, ("bounded", 0, 2**31 - 1)) for v in strides]
            if "strides" in facts:
                strides = [assume(v, ("div_by", 8)) for v in strides]
            if "base" in facts:
                base = assume(base, ("div_by", 16))
            op.operands = [base, shape, strides]
        body.append(op)
    fn.body = body
    return module


@pytest.mark.parametrize("version", ["13.3", "13.5"])
def test_assume_is_written_read_back_and_lets_tileiras_use_tma(version: str, tileir_toolchain: Any) -> None:
    """With 16-byte aligned bases and rows and i32-sized shapes and strides (what cuTile's matmul states),
    tileiras 13.5 picks TMA loads and a warp-specialized 256-thread CTA for a bf16 mma tile; any two of the
    three facts leave it at element-wise loads in 128 threads."""
    from tilejit.backends.tileir import parse_version
    from tilejit.backends.tileir.bytecode import encode_module
    from tilejit.backends.tileir.lower import lower_function
    from tilejit.backends.tileir.text import print_module
    from tilejit.backends.tileir_backend import required_threads

    fn = artifact("bfloat16", "sm_90", "cuda", (128, 128, 64), rows=True).ir()
    all_facts = {"base", "strides", "bounded"}
    threads = {}
    for facts in (all_facts, *(all_facts - {f} for f in all_facts)):
        module = with_view_facts(lower_function(fn), facts)
        bc = encode_module(module, parse_version(version))
        ours = [line.strip() for line in print_module(module).splitlines() if " assume " in line]
        theirs = [line.strip() for line in runner.disassemble(bc, toolchain=tileir_toolchain).splitlines()
                  if " assume " in line]
        assert len(ours) == len(theirs) > 0
        for a, b in zip(ours, theirs):  # value names differ
            assert re.sub(r"%\w+", "%v", a) == re.sub(r"%\w+", "%v", b)
        cubin = runner.run_tileiras(bc, "sm_90", toolchain=tileir_toolchain)
        threads[frozenset(facts)] = required_threads(cubin, "mma_tile")[0]
    assert threads.pop(frozenset(all_facts)) == 256
    assert set(threads.values()) == {128}


def test_assume_open_and_negative_bounds_read_back(tileir_toolchain: Any) -> None:
    from tilejit.backends.tileir.bytecode import encode_module
    from tilejit.backends.tileir.lower import lower_function
    from tilejit.backends.tileir.module import TOp, TValue
    from tilejit.backends.tileir.text import print_module

    module = lower_function(tileir_fn("int8"))
    fn = module.functions[0]
    shape0 = fn.params[1]
    preds = [("bounded", 0, None), ("bounded", None, -3), ("bounded", -(2**40), 2**40), ("div_by", 64)]
    fn.body[:0] = [TOp("assume", [TValue(shape0.type)], [shape0], {"predicate": p}) for p in preds]
    want = ["bounded<0, ?>", "bounded<?, -3>", f"bounded<{-(2**40)}, {2**40}>", "div_by<64>"]
    ours = re.findall(r"assume (\S+ \S+|\S+), %a_shape0 : tile<i64>", print_module(module))
    assert [o.rstrip(",") for o in ours] == want
    for version in ((13, 1), (13, 5)):
        text = runner.disassemble(encode_module(module, version), toolchain=tileir_toolchain)
        assert [o.rstrip(",") for o in re.findall(r"assume (\S+ \S+|\S+), %arg1 : tile<i64>", text)] == want


def faceted_views(monkeypatch: pytest.MonkeyPatch, aligned16: bool, int32_extents: bool) -> None:
    """memory.view with the launch facts applied, as the one-line change in memory.py would (view_facts on
    the array's base, shapes and strides before its tensor view is made)."""
    from tilejit.backends.tileir.lower import memory
    from tilejit.backends.tileir.lower.memory import view_facts

    original = memory.view

    def view(lo: Any, op: Any, array: Any, tile: Any, padding: Any) -> Any:
        if not any(key[0] is array for key in lo.views):
            base, shape, strides = lo.arrays[array]
            lo.arrays[array] = view_facts(lo, op, base, shape, strides, array.type.dtype.itemsize,
                                          aligned16=aligned16, int32_extents=int32_extents)
        return original(lo, op, array, tile, padding)

    monkeypatch.setattr(memory, "view", view)


def test_view_facts_state_only_what_they_are_given(monkeypatch: pytest.MonkeyPatch) -> None:
    faceted_views(monkeypatch, aligned16=True, int32_extents=True)
    text = module_text(tileir_fn("bfloat16"), "sm_90")  # [:, :] arrays: the inner stride is dynamic
    assert "assume div_by<16>, %a : tile<ptr<bf16>>" in text
    assert re.search(r"= assume div_by<8>, %a_stride0_\d+ : tile<i64>", text)
    assert not re.search(r"assume div_by<\d+>, %a_stride1", text)  # the inner stride: no alignment fact
    assert "assume bounded<0, 2147483647>, %a_shape0 : tile<i64>" in text
    assert "assume bounded<0, 2147483647>, %a_stride1 : tile<i64>" in text
    assert "assume div_by<4>, %d_stride0_" in text  # f32 rows
    monkeypatch.undo()
    faceted_views(monkeypatch, aligned16=False, int32_extents=False)
    text = module_text(tileir_fn("bfloat16"), "sm_90")
    assert re.findall(r"assume (\S+ \S+), %\w+ :", text) == ["bounded<0, ?>"] * 8  # shapes only


def test_view_facts_give_tma_on_rows_of_aligned_arrays(monkeypatch: pytest.MonkeyPatch,
                                                         tileir_toolchain: Any) -> None:
    from tilejit.backends.tileir_backend import required_threads

    fn = artifact("bfloat16", "sm_90", "cuda", (128, 128, 64), rows=True).ir()
    faceted_views(monkeypatch, aligned16=True, int32_extents=True)
    bc = generate_bytecode(fn, "sm_90", "13.5")
    assert required_threads(runner.run_tileiras(bc, "sm_90", toolchain=tileir_toolchain), "mma_tile")[0] == 256


def test_assume_text() -> None:
    from tilejit.backends.tileir.lower import lower_function
    from tilejit.backends.tileir.text import print_module

    text = print_module(with_view_facts(lower_function(tileir_fn("bfloat16")), {"base", "strides", "bounded"}))
    assert "    %a_shape0_known = assume bounded<0, 2147483647>, %a_shape0 : tile<i64>\n" in text
    assert "    %a_stride0_known = assume bounded<0, 2147483647>, %a_stride0 : tile<i64>\n" in text
    assert "    %a_stride0_known_known = assume div_by<8>, %a_stride0_known : tile<i64>\n" in text
    assert "    %a_known = assume div_by<16>, %a : tile<ptr<bf16>>\n" in text
    assert "make_tensor_view %a_known, shape = [%a_shape0_known, %a_shape1_known], strides = " in text


# --------------------------------------------------------------------------------------------- GPU

#: name -> relative error allowed against float64 numpy (ints: exact)
TOLERANCE = {"float16": 1e-3, "bfloat16": 1e-2, "float32": 1e-5, "tf32": 5e-3, "float64": 1e-12, "int8": 0.0,
             "uint8": 0.0}


def launch(name: str, backend: str, host: dict[str, np.ndarray], tile: tuple[int, int, int]) -> np.ndarray:
    """Compile the mma kernel for this GPU with ``backend``, launch it over ``host`` through tilejit's checked
    launcher (a Tile IR entry takes each array as flat parameters, which only the launcher's ABI knows) and
    return ``c``."""
    from tilejit.runtime.device import Device
    from tilejit.runtime.launch import Launcher, ParamKind
    from tilejit.runtime.module import Module

    dev = Device()
    image = artifact(name, dev.arch, backend, tile).image()
    m, n = host["c"].shape
    grid = (-(-m // tile[0]), -(-n // tile[1]), 1)
    module = Module.load(image.image, image.kind)
    launcher = Launcher(module.get_function(image.symbol), [(p, ParamKind.from_spec(s)) for p, s in image.params],
                        block=(image.num_threads, 1, 1), shared_bytes=image.shared_bytes)
    arrays = {p: tj.asarray(host[p]) for p, _ in image.params}
    launcher.launch_checked(grid, [arrays[p] for p, _ in image.params])
    return arrays["c"].numpy()


@pytest.fixture
def both_backends(tileir_env: Any) -> None:
    """Both backends: the Tile IR one through the tests' toolchain (conftest's ``tileir_env``)."""


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "tileir"])
@pytest.mark.parametrize("name", list(DTYPES))
def test_single_k_tile_mma_matches_numpy(name: str, backend: str, both_backends: None) -> None:
    """c = a @ b + d with M, N, K off the 64x64x64 tile (K < BK: the zero padding of one K tile)."""
    from test_backend_gpu import np_dtype, poison, rel_err

    dt, acc, _ = DTYPES[name]
    m, n, k = 100, 90, 50
    rng = np.random.default_rng(17)
    if dt.is_int:
        lo_, hi_ = (-128, 128) if dt.is_signed else (0, 256)
        a, b = (rng.integers(lo_, hi_, s).astype(np_dtype(dt)) for s in ((m, k), (k, n)))
        d = rng.integers(-1000, 1000, (m, n)).astype(np.int32)
    else:
        a, b = (rng.standard_normal(s).astype(np_dtype(dt)) for s in ((m, k), (k, n)))
        d = rng.standard_normal((m, n)).astype(np_dtype(acc))
    host = {"a": a, "b": b, "d": d, "c": poison((m, n), acc)}
    out = launch(name, backend, host, (64, 64, 64))
    want = a.astype(np.float64) @ b.astype(np.float64) + d.astype(np.float64)
    if dt.is_int:
        np.testing.assert_array_equal(out, want.astype(np.int64).astype(np.int32))
    else:
        assert rel_err(out, want) <= TOLERANCE[name]


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "tileir"])
@pytest.mark.parametrize("name", ["int8", "uint8"])
def test_int_mma_wraps_past_int32_like_numpy(name: str, backend: str, both_backends: None) -> None:
    """acc near the int32 limits: a @ b + acc wraps (tileiras's mmai alone would saturate)."""
    dt = DTYPES[name][0]
    m, n, k = 70, 40, 64
    big = 127 if dt.is_signed else 255
    a, b = np.full((m, k), big, np.dtype(dt.name)), np.full((k, n), big, np.dtype(dt.name))
    d = np.where(np.arange(m * n).reshape(m, n) % 2 == 0, 2**31 - 5, -(2**31) + 5).astype(np.int32)
    host = {"a": a, "b": b, "d": d, "c": np.full((m, n), 0x5A, np.int32)}
    out = launch(name, backend, host, (64, 64, 64))
    want = (a.astype(np.int64) @ b.astype(np.int64) + d).astype(np.int32)  # numpy's astype wraps
    np.testing.assert_array_equal(out, want)
