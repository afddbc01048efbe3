"""Issue 20: slicing and joining tiles. ``tj.extract`` (cuTile's ct.extract: one block of a tile), ``tj.cat``
(ct.cat), ``tj.split`` / ``tj.join`` (Triton's tl.split / tl.join: a last dim of 2) and ``order=`` of ``tj.load``,
``tj.store`` and ``tj.num_tiles`` (cuTile's: the tile of the array with its dims permuted). On the CPU: the IR, the
verifier, constant folding, the flat-index maps the CUDA backend reads its scratch area through (emulated thread by
thread against numpy), CUDA C++ through NVRTC (sm_80, sm_90, sm_90a), Tile IR through tileiras and tileirdisasm,
located errors; on a GPU: each op against numpy on arrays whose sizes are not tile multiples, in several dtypes, with
reductions and as mma operands, into poisoned outputs (each backend)."""

# ruff: noqa: F841  (kernels under test assign values only the front end looks at)

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kernels import RTOL, np_dtype, poison
from source_lines import assert_located
from test_tileir_coverage import same_module_text

import tilejit as tj
from tilejit.backends.cuda.layouts import Layout, WarpGrid, blocked, mma_layout
from tilejit.backends.cuda.lower import cat_map, extract_map, is_local, join_map, split_map
from tilejit.backends.tileir import generate_bytecode
from tilejit.compiler.tileiras import disassemble, run_tileiras
from tilejit.errors import IRVerificationError, TileCompileError
from tilejit.language.frontend.translate import translate
from tilejit.language.ir import ops as O
from tilejit.language.ir.types import ArrayType, TileType, float32, int32, scalar
from tilejit.language.ir.verifier import verify

LINES = Path(__file__).read_text(encoding="utf-8").splitlines()


def arr(dtype: str, ndim: int) -> Any:
    """The ``tj.compile`` type of a rank-``ndim`` array of ``dtype``."""
    return getattr(tj, "bool_" if dtype == "bool" else dtype)[(slice(None),) * ndim]


# ---------------------------------------------------------------------------------------------- the kernels


@tj.kernel
def every_op(x, out, BM: tj.Constant[int], BN: tj.Constant[int]):
    """Each op once on a (BM, BN) tile of row block i; the result, a (BM, BN) tile, stored at the same place."""
    i = tj.bid(0)
    t = tj.load(x, index=(i, 0), shape=(BM, BN))
    top, bottom = tj.extract(t, (0, 0), (BM // 2, BN)), t.extract((1, 0), (BM // 2, BN))
    swapped = tj.cat((bottom, top), axis=0)                       # the two row halves swapped
    even, odd = tj.split(t.reshape((BM, BN // 2, 2)))            # even and odd columns
    pairs = tj.join(odd, even).reshape((BM, BN))                  # each column pair swapped
    corner = tj.extract(t, (BM - 1, BN - 1), ())                  # one element, as a scalar
    tj.store(out, index=(i, 0), tile=swapped + pairs + corner)


def every_op_reference(x: np.ndarray, bm: int, bn: int) -> np.ndarray:
    """What ``every_op`` stores in an output of ``bn`` columns, in ``x``'s dtype (integers wrap as on the GPU)."""
    m, n = x.shape
    rows = -(-m // bm) * bm
    p = np.zeros((rows, bn), dtype=x.dtype)
    p[:m, :min(n, bn)] = x[:, :bn]
    out = np.empty_like(p)
    with np.errstate(over="ignore"):
        for r in range(0, rows, bm):
            t = p[r:r + bm]
            swapped = np.concatenate((t[bm // 2:], t[:bm // 2]))
            pairs = np.empty_like(t)
            pairs[:, 0::2], pairs[:, 1::2] = t[:, 1::2], t[:, 0::2]
            out[r:r + bm] = swapped + pairs + t[bm - 1, bn - 1]
    return out[:m, :min(n, bn)]


@tj.kernel
def scalars_and_vectors(x, out, n):
    """1-d forms: an int index and shape, a join of two scalars (a pair), its split back to scalars."""
    v = tj.load(x, index=(0,), shape=(16,))
    pair = tj.join(tj.bid(0), n)                                   # (2,) int32 from two scalars
    a, b = tj.split(pair)
    w = tj.extract(v, 3, 4)                                        # elements 12..15
    tj.store(out, index=(0,), tile=tj.cat((w, w * (a + b)), axis=0))


@tj.kernel
def ordered(x, out1, out2, counts, TM: tj.Constant[int], TN: tj.Constant[int]):
    """``x.T`` through a permuted load (order "F") into ``out1`` and through a permuted store into ``out2``; the
    number of tiles of the permuted array along its dim 0 into ``counts``."""
    i, j = tj.bid(0), tj.bid(1)
    t = tj.load(x, index=(j, i), shape=(TN, TM), order="F")       # the (TN, TM) tile of x.T
    tj.store(out1, index=(j, i), tile=t)
    u = tj.load(x, index=(i, j), shape=(TM, TN))
    tj.store(out2, index=(i, j), tile=u, order=(1, 0))
    tj.store(counts, index=(0,), tile=tj.num_tiles(x, 0, (TN, TM), order="F"))


@tj.kernel
def ordered3(x, out, TM: tj.Constant[int], TN: tj.Constant[int]):
    """``x.transpose(0, 2, 1)`` of a 3-d array: a permuted load of (1, TN, TM) tiles, padded with -1, whose row sums
    (pad included) are added to every element."""
    b, j, i = tj.bid(0), tj.bid(1), tj.bid(2)
    t = tj.load(x, index=(b, j, i), shape=(1, TN, TM), padding=-1, order=(0, 2, 1))
    tj.store(out, index=(b, j, i), tile=t + tj.sum(t, axis=2, keepdims=True))


@tj.kernel
def mma_halves(a, b, c1, c2, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    """``a @ b`` for (BM, 2 BK) @ (2 BK, BN) tiles from halves of both: the two K blocks (extract) into ``c1``, the
    even and odd K (split) into ``c2``."""
    i, j = tj.bid(0), tj.bid(1)
    ta = tj.load(a, index=(i, 0), shape=(BM, 2 * BK))
    tb = tj.load(b, index=(0, j), shape=(2 * BK, BN))
    acc = tj.mma(tj.extract(ta, (0, 0), (BM, BK)), tj.extract(tb, (0, 0), (BK, BN)), 0.0)
    acc = tj.mma(tj.extract(ta, (0, 1), (BM, BK)), tj.extract(tb, (1, 0), (BK, BN)), acc)
    ae, ao = tj.split(ta.reshape((BM, BK, 2)))
    be, bo = tj.split(tb.reshape((BK, 2, BN)).transpose((0, 2, 1)))
    acc2 = tj.mma(ao, bo, tj.mma(ae, be, 0.0))
    tj.store(c1, index=(i, j), tile=acc)
    tj.store(c2, index=(i, j), tile=tj.cat((acc, acc2), axis=1).extract((0, 1), (BM, BN)))


# ---------------------------------------------------------------------------------------------- IR


def _ir(kernel: Any, sig: tuple[Any, ...], **constants: Any) -> str:
    return tj.compile(kernel, sig, constants=constants, target="sm_90", backend="cuda").ir_text()


def test_ir_of_each_op() -> None:
    text = _ir(every_op, (arr("float32", 2), arr("float32", 2)), BM=16, BN=32)
    assert "%top = extract %t {index=(0, 0)} : tile<8x32xf32>" in text
    assert "%bottom = extract %t {index=(1, 0)} : tile<8x32xf32>" in text
    assert "%swapped = cat %bottom, %top {axis=0} : tile<16x32xf32>" in text
    assert "%1 = reshape %t : tile<16x16x2xf32>\n  %even, %odd = split %1 : tile<16x16xf32>, tile<16x16xf32>" in text
    assert "%2 = join %odd, %even : tile<16x16x2xf32>\n  %pairs = reshape %2 : tile<16x32xf32>" in text
    assert "%3 = extract %t {index=(15, 31)} : tile<1x1xf32>\n  %corner = reshape %3 : f32" in text


def test_ir_of_the_1d_and_scalar_forms() -> None:
    text = _ir(scalars_and_vectors, (arr("int32", 1), arr("int32", 1), scalar(int32)))
    assert "%1 = block_id {axis=0} : i32\n  %pair = join %1, %n : tile<2xi32>" in text
    assert "%a, %b = split %pair : i32, i32" in text
    assert "%w = extract %v {index=(3,)} : tile<4xi32>" in text
    assert "= cat %w, %4 {axis=0} : tile<8xi32>" in text


def test_ir_of_permuted_loads_and_stores() -> None:
    text = _ir(ordered, (arr("float32", 2),) * 3 + (arr("int32", 1),), TM=32, TN=16)
    # order "F": the (16, 32) tile of x.T is the (32, 16) tile of x at (i, j), transposed
    assert "%0 = load %x, [%i, %j] {padding=0.0} : tile<32x16xf32>" in text
    assert "%t = permute %0 {perm=(1, 0)} : tile<16x32xf32>" in text
    assert "store %out1, [%j, %i], %t" in text
    # a store with order (1, 0): the tile transposed to out2's dims, the index too
    assert "%1 = permute %u {perm=(1, 0)} : tile<16x32xf32>\n  store %out2, [%j, %i], %1" in text
    # num_tiles of the permuted array along its dim 0: x's dim 1
    assert "array_dim %x {axis=1, which='shape'}" in text
    text3 = _ir(ordered3, (arr("float32", 3),) * 2, TM=32, TN=16)
    assert "%0 = load %x, [%b, %i, %j] {padding=-1.0} : tile<1x32x16xf32>" in text3
    assert "%t = permute %0 {perm=(0, 2, 1)} : tile<1x16x32xf32>" in text3
    assert "store %out, [%b, %j, %i], %" in text3


def test_order_c_and_identity_permutations_are_plain_loads() -> None:
    @tj.kernel
    def plain(x, out, ORDER: tj.Constant):
        t = tj.load(x, index=(0, 0), shape=(8, 8), order=ORDER)
        tj.store(out, index=(0, 0), tile=t, order=ORDER)

    sig = (arr("float32", 2), arr("float32", 2))
    texts = [_ir(plain, sig, ORDER=o) for o in ("C", (0, 1), (-2, -1))]
    assert texts[0] == texts[1] == texts[2] and "permute" not in texts[0]
    assert _ir(plain, sig, ORDER="F") == _ir(plain, sig, ORDER=(1, 0)) == _ir(plain, sig, ORDER=(-1, 0))


def test_a_scalar_stored_with_an_order_needs_no_transpose() -> None:
    @tj.kernel
    def one(x, out):
        i, j = tj.bid(0), tj.bid(1)
        tj.store(out, index=(i, j), tile=tj.bid(2) * 1.0, order="F")  # out.T[i, j], that is out[j, i]

    text = _ir(one, (arr("float32", 2), arr("float32", 2)))
    assert "permute" not in text and "store %out, [%j, %i], %" in text


@tj.kernel
def promoted(x, y, out, KIND: tj.Constant[str]):
    a = tj.load(x, index=(0,), shape=(8,))
    b = tj.load(y, index=(0,), shape=(8,))
    if KIND == "cat":
        r = tj.cat((a, b), axis=-1)
    elif KIND == "cat_one":
        r = tj.cat([a], axis=0) + 0
    elif KIND == "join_number":
        r = tj.join(a, 1.5).reshape((16,))
    elif KIND == "join_broadcast":
        r = tj.sum(tj.join(a[:, None], b[None, :]), axis=2).reshape((64,))
    elif KIND == "whole":
        r = tj.extract(a, (0,), (8,)) + 0
    tj.store(out, index=(0,), tile=r)


@pytest.mark.parametrize(("kind", "line"), [
    ("cat", "%1 = cast %a : tile<8xf32>\n  %r = cat %1, %b {axis=0} : tile<16xf32>"),  # int32 with float32: float32
    ("cat_one", "binary %a, %"),                                                      # one tile: itself
    ("join_number", "%1 = constant {value=1.5} : tile<8xf16>\n  %2 = join %a, %1 : tile<8x2xf16>"),  # a weak number
    ("join_broadcast", "%6 = join %4, %5 : tile<8x8x2xf32>"),                         # broadcast, promoted
    ("whole", "binary %a, %"),                                                        # the whole tile: no extract
])
def test_front_end_forms(kind: str, line: str) -> None:
    dx = "float16" if kind == "join_number" else "int32" if kind in ("cat", "join_broadcast") else "float32"
    text = _ir(promoted, (arr(dx, 1), arr("float32", 1), arr("float32", 1)), KIND=kind)
    assert line in text, text
    assert kind.startswith(("cat", "join")) or "extract" not in text


@tj.kernel
def constants(out, KIND: tj.Constant[str]):
    c = tj.full((8, 8), 2.5)
    if KIND == "extract":
        r = tj.extract(c, (1, 1), (4, 4)).reshape((16,))
    elif KIND == "same":
        r = tj.cat((c[0:1, :].reshape((8,)), tj.full((8,), 2.5)), axis=0)
    elif KIND == "join":
        r = tj.join(tj.full((8,), 2.5), 2.5).reshape((16,))
    elif KIND == "differ":
        r = tj.cat((tj.full((8,), 2.5), tj.full((8,), -0.0)), axis=0)
    tj.store(out, index=(0,), tile=r)


@pytest.mark.parametrize(("kind", "folds"), [("extract", True), ("join", True), ("differ", False)])
def test_constants_fold(kind: str, folds: bool) -> None:
    text = _ir(constants, (arr("float32", 1),), KIND=kind)
    assert (" extract " not in text and " cat " not in text and " join " not in text) == folds, text
    if folds:
        assert "constant {value=2.5} : tile<16xf32>" in text


# ---------------------------------------------------------------------------------------------- the verifier


def _fn() -> O.Function:
    return tj.compile(every_op, (arr("float32", 2), arr("float32", 2)), constants={"BM": 16, "BN": 32},
                      target="sm_90", backend="cuda").ir()


def _op(fn: O.Function, cls: type[O.Op], k: int = 0) -> Any:
    return [op for op in fn.body.walk() if isinstance(op, cls)][k]


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda fn: setattr(_op(fn, O.ExtractOp), "index", (2, 0)), "index 2 of dimension 0 is not a block of it"),
    (lambda fn: setattr(_op(fn, O.ExtractOp), "index", (0,)), "one index per dimension"),
    (lambda fn: setattr(_op(fn, O.ExtractOp).results[0], "type", TileType(float32, (8, 24))),
     "dimension that is not a power of two"),
    (lambda fn: setattr(_op(fn, O.ExtractOp).results[0], "type", TileType(float32, (32, 32))),
     "is not a block of it"),
    (lambda fn: setattr(_op(fn, O.CatOp), "axis", 2), "axis 2 is out of range for rank 2"),
    (lambda fn: setattr(_op(fn, O.CatOp).results[0], "type", TileType(float32, (8, 64))), "result type"),
    (lambda fn: setattr(_op(fn, O.CatOp), "y", _op(fn, O.LoadOp).result), "y type vs x type"),
    (lambda fn: setattr(_op(fn, O.JoinOp).results[0], "type", TileType(float32, (16, 32))), "result type"),
    (lambda fn: _op(fn, O.SplitOp).results.pop(), "must have two results, has 1"),
    (lambda fn: setattr(_op(fn, O.SplitOp), "x", _op(fn, O.LoadOp).result), "needs a last dimension of size 2"),
    (lambda fn: setattr(_op(fn, O.SplitOp).results[1], "type", TileType(int32, (16, 16))), "result type"),
])
def test_verifier_catches_malformed_ops(mutate: Any, message: str) -> None:
    fn = _fn()
    verify(fn)
    mutate(fn)
    with pytest.raises(IRVerificationError, match="internal error: invalid tile IR") as info:
        verify(fn)
    assert message in str(info.value), str(info.value)


# ---------------------------------------------------------------------------------------------- the CUDA maps
# The CUDA backend moves elements through its scratch area: the owners of each source element write it at its
# flat index (the second source of a cat or join after the first), and each thread reads its result elements at
# the source flat index the op's bit map (plus offset) gives. Emulated here thread by thread for several layouts.


def _flat(layout: Layout, tid: int, i: int) -> int:
    """The flat index of register ``i`` of thread ``tid`` (tile.cuh's ``Layout::flat``)."""
    f = 0
    for k, b in enumerate(layout.tbits):
        if b >= 0:
            f |= ((tid >> k) & 1) << b
    for k, b in enumerate(layout.ibits):
        f |= ((i >> k) & 1) << b
    return f


def _owner(layout: Layout, tid: int) -> bool:
    return all(not (tid >> k) & 1 for k, b in enumerate(layout.tbits) if b < 0)


def _at(bitmap: list[int], offset: int, f: int) -> int:
    """The source flat index of result flat index ``f`` (layout.cuh's ``map_flat<Offset<offset, Bits<bitmap>>>``)."""
    s = offset
    for p, b in enumerate(bitmap):
        if b >= 0:
            s |= ((f >> p) & 1) << b
    return s


def emulate(dst: Layout, dst_shape: tuple[int, ...], sources: list[tuple[Layout, np.ndarray]], bitmap: list[int],
            offset: int = 0) -> np.ndarray:
    """The tile each thread of ``dst`` ends with after layout.cuh's to_scratch of ``sources`` and from_scratch
    through ``Offset<offset, Bits<bitmap>>``; every element a thread reads was written, replicas agree."""
    scratch: dict[int, Any] = {}
    at = 0
    for layout, values in sources:
        flat_values = values.reshape(-1)
        for tid in range(layout.nt):
            if _owner(layout, tid):
                for i in range(layout.elems):
                    f = _flat(layout, tid, i)
                    scratch[at + f] = flat_values[f]
        at += values.size
    out: dict[int, Any] = {}
    for tid in range(dst.nt):
        for j in range(dst.elems):
            f = _flat(dst, tid, j)
            s = _at(bitmap, offset, f)
            assert s in scratch, (tid, j, s)
            assert out.setdefault(f, scratch[s]) == scratch[s]
    size = int(np.prod(dst_shape, dtype=np.int64))
    assert sorted(out) == list(range(size))
    return np.array([out[f] for f in range(size)]).reshape(dst_shape)


def emulate_local(dst: Layout, dst_shape: tuple[int, ...], src: Layout, values: np.ndarray, bitmap: list[int],
                  offset: int) -> np.ndarray:
    """The tile each thread of ``dst`` ends with after layout.cuh's remap_local from ``values`` in layout ``src``:
    register ``Ls::reg(map_flat(Ld::iflat(j)))`` of its own, which must hold the element the map names."""
    flat_values = values.reshape(-1)
    out: dict[int, Any] = {}
    for tid in range(dst.nt):
        for j in range(dst.elems):
            i = sum(((_at(bitmap, offset, _flat(dst, 0, j)) >> b) & 1) << k for k, b in enumerate(src.ibits))
            f = _flat(dst, tid, j)
            assert _flat(src, tid, i) == _at(bitmap, offset, f), (tid, j)
            out[f] = flat_values[_flat(src, tid, i)]
    return np.array([out[f] for f in range(len(out))]).reshape(dst_shape)


def _layout(shape: tuple[int, ...], nt: int, vec: int = 4) -> Layout:
    return blocked(shape, nt, vec)


EXTRACTS = [((16,), (4,)), ((16,), (1,)), ((8, 8), (4, 8)), ((8, 8), (8, 2)), ((4, 8, 16), (2, 8, 4)),
            ((32, 64), (16, 16)), ((32, 64), (1, 1)), ((2, 2), (2, 2))]


@pytest.mark.parametrize("nt", [32, 128])
@pytest.mark.parametrize(("src", "dst"), EXTRACTS, ids=[f"{s}-{d}" for s, d in EXTRACTS])
def test_extract_maps_read_each_block(src: tuple[int, ...], dst: tuple[int, ...], nt: int) -> None:
    x = np.arange(int(np.prod(src))).reshape(src)
    blocks = [range(s // d) for s, d in zip(src, dst)]
    for index in itertools.islice(itertools.product(*blocks), 16):
        want = x[tuple(slice(i * d, (i + 1) * d) for i, d in zip(index, dst))]
        got = emulate(_layout(dst, nt), dst, [(_layout(src, nt, 2), x)], *extract_map(src, dst, index))
        np.testing.assert_array_equal(got, want)


LOCAL_EXTRACTS = [((64, 64), (32, 64), 256, True), ((64, 64), (16, 64), 128, True), ((64, 64), (64, 32), 256, False),
                  ((256, 32), (64, 32), 128, True), ((4, 64, 64), (1, 64, 64), 256, True), ((8, 8), (4, 8), 32, False)]


@pytest.mark.parametrize(("src", "dst", "nt", "local"), LOCAL_EXTRACTS,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in LOCAL_EXTRACTS])
def test_extracts_held_by_each_thread_copy_registers(src: tuple[int, ...], dst: tuple[int, ...], nt: int,
                                                     local: bool) -> None:
    """Blocks of leading (row) register bits of a large tile need no scratch area: each thread copies its own
    registers (layout.cuh's remap_local); a block of columns, or of a small tile, moves between threads."""
    x = np.arange(int(np.prod(src))).reshape(src)
    ls, ld = _layout(src, nt), _layout(dst, nt)
    for index in itertools.product(*(range(s // d) for s, d in zip(src, dst))):
        bitmap, offset = extract_map(src, dst, index)
        assert is_local(ls, ld, bitmap, offset) == local
        if local:
            want = x[tuple(slice(i * d, (i + 1) * d) for i, d in zip(index, dst))]
            np.testing.assert_array_equal(emulate_local(ld, dst, ls, x, bitmap, offset), want)


@pytest.mark.parametrize("nt", [32, 256])
@pytest.mark.parametrize("shape", [(8,), (1,), (4, 8), (8, 1), (2, 4, 8)])
def test_cat_maps_concatenate(shape: tuple[int, ...], nt: int) -> None:
    x = np.arange(int(np.prod(shape))).reshape(shape)
    y = x + 1000
    for axis in range(len(shape)):
        out = tuple(2 * s if d == axis else s for d, s in enumerate(shape))
        got = emulate(_layout(out, nt), out, [(_layout(shape, nt), x), (_layout(shape, nt, 1), y)],
                      cat_map(shape, axis))
        np.testing.assert_array_equal(got, np.concatenate((x, y), axis=axis))


@pytest.mark.parametrize("shape", [(), (8,), (4, 8), (2, 2, 4)])
def test_join_and_split_maps_are_stack_and_its_halves(shape: tuple[int, ...]) -> None:
    n = int(np.prod(shape, dtype=np.int64))
    x = np.arange(n).reshape(shape)
    y = -x - 1
    joined = shape + (2,)
    got = emulate(_layout(joined, 64), joined, [(_layout(shape, 64), x), (_layout(shape, 64), y)], join_map(n))
    np.testing.assert_array_equal(got, np.stack((x, y), axis=-1))
    for half in (0, 1):
        part = emulate(_layout(shape, 64), shape, [(_layout(joined, 64), got)], split_map(2 * n), half)
        np.testing.assert_array_equal(part, (x, y)[half])


def test_maps_read_an_mma_accumulator() -> None:
    """A source in the mma.sync accumulator layout (an mma result) reads through the same flat indices."""
    acc = mma_layout(32, 32, 128, WarpGrid(2, 2))
    x = np.arange(32 * 32).reshape(32, 32)
    got = emulate(_layout((16, 32), 128), (16, 32), [(acc, x)], *extract_map((32, 32), (16, 32), (1, 0)))
    np.testing.assert_array_equal(got, x[16:])
    got = emulate(_layout((32, 64), 128), (32, 64), [(acc, x), (_layout((32, 32), 128), x)], cat_map((32, 32), 1))
    np.testing.assert_array_equal(got, np.concatenate((x, x), axis=1))


# ---------------------------------------------------------------------------------------------- CUDA C++ and NVRTC


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_cuda_cpp_compiles_with_nvrtc(dtype: str, nvrtc_here: Path) -> None:
    for target in ("sm_80", "sm_90"):
        art = tj.compile(every_op, (arr(dtype, 2), arr(dtype, 2)), constants={"BM": 16, "BN": 32}, target=target,
                         backend="cuda")
        src = art.cuda_source()
        assert "tj::remap<tj::Offset<256, tj::Bits<0, 1, 2, 3, 4, 5, 6, 7>>>" in src  # the bottom half: row 8 on
        assert "tj::split2<tj::Bits<1, 2, 3, 4, 5, 6, 7, 8>, tj::Offset<1, tj::Bits<1, 2, 3, 4, 5, 6, 7, 8>>>" in src
        assert "tj::remap2<tj::Bits<0, 1, 2, 3, 4, 5, 6, 7, 8>, 256>" in src  # cat along rows: in flat order
        assert "tj::remap2<tj::Bits<8, 0, 1, 2, 3, 4, 5, 6, 7>, 256>" in src  # join: the new bit picks the tile
        assert "tj::remap<tj::Offset<511, tj::Bits<>>>" in src  # the corner
        assert art.cubin()[:4] == b"\x7fELF"


def test_each_cuda_major_compiles_the_device_code(toolkit: Any) -> None:
    """The device headers' maps (constexpr, also on the host), remap2, split2 and remap_local with NVRTC 11, 12 and
    13 (those installed), for sm_80."""
    from test_backend_codegen import _nvrtc_at, cubin, gen

    for kernel, sig, consts in [
        (every_op, (arr("float32", 2),) * 2, {"BM": 16, "BN": 32}),
        (extract_copy, (arr("float16", 2),) * 3, {"BM": 128, "BN": 64, "SM": 32, "SN": 64}),
        (scalars_and_vectors, (arr("int32", 1), arr("int32", 1), scalar(int32)), {}),
    ]:
        fn = tj.compile(kernel, sig, constants=consts, target="sm_80", backend="cuda").ir()
        cubin(gen(fn, arch=80), 80, _nvrtc_at(str(toolkit.nvrtc)))


def test_other_kernels_compile_with_nvrtc(nvrtc_here: Path) -> None:
    for kernel, sig, consts in [
        (scalars_and_vectors, (arr("int32", 1), arr("int32", 1), scalar(int32)), {}),
        (ordered, (arr("float64", 2),) * 3 + (arr("int32", 1),), {"TM": 32, "TN": 16}),
        (ordered3, (arr("bfloat16", 3),) * 2, {"TM": 16, "TN": 8}),
    ]:
        assert tj.compile(kernel, sig, constants=consts, target="sm_80", backend="cuda").cubin()[:4] == b"\x7fELF"


def test_blocks_of_rows_need_no_shared_memory(nvrtc_here: Path) -> None:
    """A (128, 64) float32 tile's blocks of 32 rows are in each thread's registers (256 threads, 4 elements per row
    chunk): the CUDA C++ copies registers (remap_local), and the PTX has no barrier and no local memory."""
    sig = (arr("float32", 2),) * 3
    art = tj.compile(extract_copy, sig, constants={"BM": 128, "BN": 64, "SM": 32, "SN": 64}, target="sm_90",
                     backend="cuda")
    src = art.cuda_source()
    assert src.count("tj::remap_local<") == 4 and "tj::remap_local<tj::IdentityMap>" in src
    assert "tj::remap_local<tj::Offset<6144, tj::Bits<0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10>>>" in src  # rows 96..127
    assert src.count("tj::remap<") == 1  # the corner: one element for every thread
    ptx = art.ptx()
    assert ptx.count("bar.sync") == 2 and ".local" not in ptx  # the corner's two


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_mma_of_slices_compiles_with_nvrtc(target: str, nvrtc_here: Path) -> None:
    sig = (arr("float16", 2), arr("float16", 2), arr("float32", 2), arr("float32", 2))
    art = tj.compile(mma_halves, sig, constants={"BM": 64, "BN": 64, "BK": 32}, target=target, backend="cuda")
    src = art.cuda_source()
    assert src.count("tj::TensorCore<") == 4  # every mma of slices on the tensor cores
    assert art.cubin()[:4] == b"\x7fELF"


@tj.kernel
def big_cat(x, out, N: tj.Constant[int]):
    t = tj.load(x, index=(0, 0), shape=(N, 128))
    tj.store(out, index=(0, 0), tile=tj.cat((t, t + 1), axis=0))


def test_a_cat_past_the_targets_shared_memory_is_a_located_error() -> None:
    """The CUDA backend's scratch area holds both halves of a cat: two float32 (128, 128) tiles are 128 KiB, which
    sm_90 has and sm_86 has not."""
    sig = (arr("float32", 2), arr("float32", 2))
    assert "tj::remap2<" in tj.compile(big_cat, sig, constants={"N": 128}, target="sm_90", backend="cuda").cuda_source()
    with pytest.raises(TileCompileError) as info:
        tj.compile(big_cat, sig, constants={"N": 128}, target="sm_86", backend="cuda").cuda_source()
    assert_located(info.value, __file__, LINES, "tj.cat((t, t + 1), axis=0)", "this cat needs 131072 bytes of shared "
                   "memory per block; sm_86 allows at most 101376 (99 KiB): use smaller tiles")


# ---------------------------------------------------------------------------------------------- Tile IR


def test_tileir_text_of_each_op() -> None:
    text = tj.compile(every_op, (arr("float32", 2),) * 2, constants={"BM": 16, "BN": 32}, target="sm_90",
                      backend="cuda").tileir_text()
    for line in [
        "%2 = constant <i32: 0> : tile<i32>\n    %top = extract %t[%2, %2] : tile<16x32xf32> -> tile<8x32xf32>",
        "%bottom = extract %t[%4, %3] : tile<16x32xf32> -> tile<8x32xf32>",
        "%swapped = cat %bottom, %top dim = 0 : tile<8x32xf32>, tile<8x32xf32> -> tile<16x32xf32>",
        # split: an extract of each half along the last dim, reshaped to drop it
        "%5 = reshape %t : tile<16x32xf32> -> tile<16x16x2xf32>",
        "%7 = extract %5[%6, %6, %6] : tile<16x16x2xf32> -> tile<16x16x1xf32>\n"
        "    %even = reshape %7 : tile<16x16x1xf32> -> tile<16x16xf32>",
        "%10 = extract %5[%8, %8, %9] : tile<16x16x2xf32> -> tile<16x16x1xf32>",
        # join: each operand with a last dim of 1, cat along it
        "%11 = reshape %odd : tile<16x16xf32> -> tile<16x16x1xf32>\n"
        "    %12 = reshape %even : tile<16x16xf32> -> tile<16x16x1xf32>\n"
        "    %13 = cat %11, %12 dim = 2 : tile<16x16x1xf32>, tile<16x16x1xf32> -> tile<16x16x2xf32>",
        # one element: its row, then the element of the row (one dim at a time: see the next test)
        "%16 = extract %t[%15, %14] : tile<16x32xf32> -> tile<1x32xf32>",
        "%19 = extract %16[%17, %18] : tile<1x32xf32> -> tile<1x1xf32>\n"
        "    %corner = reshape %19 : tile<1x1xf32> -> tile<f32>",
    ]:
        assert line in text, line


def test_tileir_cuts_an_extract_one_dim_at_a_time(tileir_env: Any) -> None:
    """tileiras 13.5 did not finish in minutes a kernel that stores the four 32-row blocks of a float32 (128, 64) tile
    and, cut from the tile in one extract, its (1, 1) block at (127, 3); with that block cut in two steps (its row,
    then its column) it compiles in about a second."""
    art = tj.compile(extract_copy, (arr("float32", 2),) * 3, constants={"BM": 128, "BN": 64, "SM": 32, "SN": 64},
                     target="sm_90", backend="tileir")
    text = art.tileir_text()
    assert ": tile<128x64xf32> -> tile<1x64xf32>" in text and ": tile<1x64xf32> -> tile<1x1xf32>" in text
    assert ": tile<128x64xf32> -> tile<1x1xf32>" not in text
    cubin = run_tileiras(generate_bytecode(art.ir(), "sm_90", None, art.hints), "sm_90", toolchain=tileir_env,
                         timeout=60)
    assert cubin[:4] == b"\x7fELF"


TARGET_VERSIONS = [("sm_80", "13.2"), ("sm_90", "13.5"), ("sm_100", "13.1")]


@pytest.mark.parametrize(("kernel", "sig", "consts"), [
    (every_op, (arr("float32", 2),) * 2, {"BM": 16, "BN": 32}),
    (every_op, (arr("int8", 2),) * 2, {"BM": 64, "BN": 16}),
    (scalars_and_vectors, (arr("int32", 1), arr("int32", 1), scalar(int32)), {}),
    (ordered3, (arr("float16", 3),) * 2, {"TM": 16, "TN": 8}),
    (mma_halves, (arr("float16", 2), arr("float16", 2), arr("float32", 2), arr("float32", 2)),
     {"BM": 64, "BN": 64, "BK": 32}),
], ids=["every_op-f32", "every_op-i8", "scalars", "ordered3-f16", "mma-f16"])
def test_tileir_compiles_with_tileiras(kernel: Any, sig: tuple[Any, ...], consts: dict[str, Any],
                                       tileir_env: Any) -> None:
    """Through tileiras for sm_80, sm_90 and sm_100 (at the oldest bytecode version each takes and 13.5); the
    disassembly reads back as our text."""
    art = tj.compile(kernel, sig, constants=consts, target="sm_90", backend="tileir")
    assert same_module_text(disassemble(art.tileir_bytecode(), toolchain=tileir_env), art.tileir_text())
    for target, version in TARGET_VERSIONS:
        cubin = run_tileiras(generate_bytecode(art.ir(), target, version, art.hints), target, toolchain=tileir_env)
        assert cubin[:4] == b"\x7fELF", target


# ---------------------------------------------------------------------------------------------- located errors

F32_2, F32_1 = ArrayType(float32, 2), ArrayType(float32, 1)


def check(kernel: Any, at: str, message: str) -> None:
    """Translating ``kernel`` raises the located error ``message`` at the first character of ``at``."""
    with pytest.raises(TileCompileError) as info:
        translate(kernel, {"x": F32_2, "out": F32_1, "n": scalar(int32)}, {})
    assert_located(info.value, __file__, LINES, at, message)


def k_run_time_index(x, out, n):
    t = tj.load(x, index=(0, 0), shape=(16, 16))
    r = tj.extract(t, (tj.bid(0), 0), (8, 16))


def k_index_out_of_range(x, out, n):
    t = tj.load(x, index=(0, 0), shape=(16, 16))
    r = tj.extract(t, (2, 0), (8, 16))


def k_negative_index(x, out, n):
    t = tj.load(x, index=(0, 0), shape=(16, 16))
    r = tj.extract(t, (0, -1), (8, 8))


def k_index_length(x, out, n):
    t = tj.load(x, index=(0, 0), shape=(16, 16))
    r = tj.extract(t, (0,), (8, 16))


def k_shape_rank(x, out, n):
    t = tj.load(x, index=(0, 0), shape=(16, 16))
    r = tj.extract(t, (0, 0), (8,))


def k_shape_too_big(x, out, n):
    t = tj.load(x, index=(0, 0), shape=(16, 16))
    r = tj.extract(t, (0, 0), (32, 16))


def k_shape_not_pow2(x, out, n):
    t = tj.load(x, index=(0, 0), shape=(16, 16))
    r = tj.extract(t, (0, 0), (6, 16))


def k_extract_scalar(x, out, n):
    r = tj.extract(n, 0, ())


def k_cat_three(x, out, n):
    t = tj.load(x, index=(0, 0), shape=(16, 16))
    r = tj.cat((t, t, t), axis=0)


def k_cat_shapes(x, out, n):
    t = tj.load(x, index=(0, 0), shape=(16, 16))
    r = tj.cat((t, t.extract((0, 0), (8, 16))), axis=0)


def k_cat_axis(x, out, n):
    t = tj.load(x, index=(0, 0), shape=(16, 16))
    r = tj.cat((t, t), axis=2)


def k_cat_not_pair(x, out, n):
    t = tj.load(x, index=(0, 0), shape=(16, 16))
    r = tj.cat(t, 0)


def k_cat_scalars(x, out, n):
    r = tj.cat((n, n))


def k_cat_too_large(x, out, n):
    t = tj.zeros((1024, 1024))
    r = tj.cat((t, t), axis=1)


def k_split_last_dim(x, out, n):
    t = tj.load(x, index=(0, 0), shape=(16, 16))
    r = tj.split(t)


def k_split_scalar(x, out, n):
    r = tj.split(n)


def k_join_shapes(x, out, n):
    t = tj.load(x, index=(0, 0), shape=(16, 16))
    r = tj.join(t, tj.zeros((8,)))


def k_join_array(x, out, n):
    r = tj.join(x, n)


def k_load_order_repeats(x, out, n):
    t = tj.load(x, index=(0, 0), shape=(16, 16), order=(0, 0))


def k_load_order_text(x, out, n):
    t = tj.load(x, index=(0, 0), shape=(16, 16), order="A")


def k_store_order_length(x, out, n):
    tj.store(x, index=(0, 0), tile=tj.zeros((16, 16)), order=(1,))


def k_num_tiles_order(x, out, n):
    r = tj.num_tiles(x, 0, (16, 16), order=(2, 0))


ERRORS = [
    (k_run_time_index, "tj.extract(t, (tj.bid(0)", "tj.extract() index must be compile-time ints, but item 0 is a "
     "run-time value (a scalar of type i32); blocks of a tile are chosen when the kernel compiles (for a run-time "
     "choice, tj.where)"),
    (k_index_out_of_range, "tj.extract(t, (2, 0)", "tj.extract(): index 2 of dim 0 is out of range: the tile of shape "
     "(16, 16) has 2 blocks of 8 along dim 0 (indices are in units of shape)"),
    (k_negative_index, "tj.extract(t, (0, -1)", "index -1 of dim 1 is out of range"),
    (k_index_length, "tj.extract(t, (0,)", "tj.extract() index has 1 entries for a tile of rank 2"),
    (k_shape_rank, "tj.extract(t, (0, 0), (8,))", "tj.extract(): shape (8,) has 1 dims but the tile has rank 2"),
    (k_shape_too_big, "tj.extract(t, (0, 0), (32", "shape (32, 16) does not fit in the tile of shape (16, 16) "
     "(dim 0: 32 > 16)"),
    (k_shape_not_pow2, "tj.extract(t, (0, 0), (6", "has a dimension that is not a power of two (6)"),
    (k_extract_scalar, "tj.extract(n, 0, ())", "tj.extract() needs a tile of rank >= 1, got a scalar"),
    (k_cat_three, "tj.cat((t, t, t)", "tj.cat() concatenates two tiles (so that the result's shape stays a power "
     "of two), got 3"),
    (k_cat_shapes, "tj.cat((t, t.extract(", "the tiles must have one shape (so that the result's stays a power of "
     "two), got (16, 16) and (8, 16)"),
    (k_cat_axis, "tj.cat((t, t), axis=2)", "tj.cat() axis 2 is out of range for a tile of rank 2"),
    (k_cat_not_pair, "tj.cat(t, 0)", "tj.cat(): tiles must be a pair of tiles (a, b), got a tile"),
    (k_cat_scalars, "tj.cat((n, n))", "tj.cat(): tile 0 must be a tile of rank >= 1"),
    (k_cat_too_large, "tj.cat((t, t), axis=1)", "tj.cat() result shape (1024, 2048) is too large"),
    (k_split_last_dim, "tj.split(t)", "tj.split() needs a tile whose last dim has size 2, got shape (16, 16) "
     "(reshape it to (16, 8, 2) first)"),
    (k_split_scalar, "tj.split(n)", "tj.split() needs a tile whose last dim has size 2, got shape ()"),
    (k_join_shapes, "tj.join(t, tj.zeros", "shapes (16, 16), (8,) cannot be broadcast together"),
    (k_join_array, "tj.join(x, n)", "tj.join() expects tiles or numbers, got the array 'x'"),
    (k_load_order_repeats, "tj.load(x, index=(0, 0), shape=(16, 16), order=(0, 0))",
     "tj.load(): order (0, 0) is not a permutation of the 2 dims of the array 'x'"),
    (k_load_order_text, "tj.load(x, index=(0, 0), shape=(16, 16), order=\"A\")",
     "tj.load(): order must be \"C\", \"F\" or a compile-time tuple of the dims of 'x'"),
    (k_store_order_length, "tj.store(x, index=(0, 0), tile=tj.zeros((16, 16)), order=(1,))",
     "tj.store(): order (1,) is not a permutation of the 2 dims of the array 'x'"),
    (k_num_tiles_order, "tj.num_tiles(x, 0, (16, 16), order=(2, 0))", "tj.num_tiles(): order (2, 0) is not a "
     "permutation"),
]


@pytest.mark.parametrize(("kernel", "at", "message"), ERRORS, ids=[e[0].__name__ for e in ERRORS])
def test_located_errors(kernel: Any, at: str, message: str) -> None:
    check(kernel, at, message)


# ---------------------------------------------------------------------------------------------- on the GPU


def _rand(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.startswith(("int", "uint")):
        return rng.integers(-100 if dtype.startswith("i") else 0, 100, shape).astype(dtype)
    return rng.standard_normal(shape).astype(np_dtype(dtype))


def _padded(x: np.ndarray, shape: tuple[int, ...], value: Any = 0) -> np.ndarray:
    """``x`` in the top corner of an array of ``shape`` filled with ``value`` (what loads past the end read)."""
    p = np.full(shape, value, dtype=x.dtype)
    p[tuple(slice(0, s) for s in x.shape)] = x
    return p


def _up(n: int, t: int) -> int:
    return -(-n // t) * t


def _exact(got: np.ndarray, want: np.ndarray) -> None:
    """Equal element for element (floats compared as float64: slicing and joining move values unchanged)."""
    if got.dtype.kind == "f" or got.dtype.name == "bfloat16":
        got, want = got.astype(np.float64), np.asarray(want).astype(np.float64)
    np.testing.assert_array_equal(got, want)


def _outputs(shape: tuple[int, ...], dtype: str) -> list[np.ndarray]:
    """Poisoned outputs, one per launch: for bools, all True and then all False, so that an element left
    unwritten shows in one of them."""
    if dtype == "bool":
        return [np.ones(shape, bool), np.zeros(shape, bool)]
    return [poison(shape, dtype)]


DTYPES = ["float32", "float16", "int32"]


@tj.kernel
def extract_copy(x, out, corner, BM: tj.Constant[int], BN: tj.Constant[int], SM: tj.Constant[int],
                 SN: tj.Constant[int]):
    """``x`` copied block by block: each (BM, BN) tile's (SM, SN) blocks stored one by one; one element of each
    tile (its row BM - 1, column 3) into ``corner``."""
    i, j = tj.bid(0), tj.bid(1)
    t = tj.load(x, index=(i, j), shape=(BM, BN))
    for r in tj.static_range(BM // SM):
        for c in tj.static_range(BN // SN):
            tj.store(out, index=(i * (BM // SM) + r, j * (BN // SN) + c), tile=tj.extract(t, (r, c), (SM, SN)))
    tj.store(corner, index=(i, j), tile=t.extract((BM - 1, 3), ()))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [*DTYPES, "bool"])
@pytest.mark.parametrize(("bm", "bn", "sm", "sn"),
                         [(32, 32, 8, 16), (16, 64, 16, 4), (64, 16, 1, 16), (128, 64, 32, 64)])
def test_gpu_extract(dtype: str, bm: int, bn: int, sm: int, sn: int, rng: np.random.Generator) -> None:
    m, n = 100, 70
    x = _rand((m, n), dtype, rng)
    grid = (tj.cdiv(m, bm), tj.cdiv(n, bn))
    for out_host, corner_host in zip(_outputs((m, n), dtype), _outputs(grid, dtype)):
        out, corner = tj.asarray(out_host), tj.asarray(corner_host)
        extract_copy[grid](tj.asarray(x), out, corner, BM=bm, BN=bn, SM=sm, SN=sn)
        _exact(out.numpy(), x)
        _exact(corner.numpy(), _padded(x, (_up(m, bm), _up(n, bn)))[bm - 1::bm, 3::bn])


@tj.kernel
def cat_tiles(x, y, out, AXIS: tj.Constant[int], BM: tj.Constant[int], BN: tj.Constant[int]):
    i, j = tj.bid(0), tj.bid(1)
    a = tj.load(x, index=(i, j), shape=(BM, BN))
    b = tj.load(y, index=(i, j), shape=(BM, BN))
    tj.store(out, index=(i, j), tile=tj.cat((a, b), axis=AXIS))


def _blockwise(x: np.ndarray, tile: tuple[int, int], fn: Any, out_tile: tuple[int, int], out_shape: tuple[int, int],
               *more: np.ndarray) -> np.ndarray:
    """``fn`` of each tile of ``x`` (and of ``more``), zero-padded, placed as tiles of ``out_tile``, cropped to
    ``out_shape``."""
    gm, gn = -(-x.shape[0] // tile[0]), -(-x.shape[1] // tile[1])
    ins = [_padded(a, (gm * tile[0], gn * tile[1])) for a in (x, *more)]
    full = np.zeros((gm * out_tile[0], gn * out_tile[1]), dtype=x.dtype)
    for i, j in itertools.product(range(gm), range(gn)):
        parts = [a[i * tile[0]:(i + 1) * tile[0], j * tile[1]:(j + 1) * tile[1]] for a in ins]
        full[i * out_tile[0]:(i + 1) * out_tile[0], j * out_tile[1]:(j + 1) * out_tile[1]] = fn(*parts)
    return full[:out_shape[0], :out_shape[1]]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [*DTYPES, "bool"])
@pytest.mark.parametrize("axis", [0, 1])
def test_gpu_cat(dtype: str, axis: int, rng: np.random.Generator) -> None:
    m, n, bm, bn = 90, 75, 32, 16
    x, y = _rand((m, n), dtype, rng), _rand((m, n), dtype, rng)
    out_shape = (2 * m, n) if axis == 0 else (m, 2 * n)
    out_tile = (2 * bm, bn) if axis == 0 else (bm, 2 * bn)
    want = _blockwise(x, (bm, bn), lambda a, b: np.concatenate((a, b), axis=axis), out_tile, out_shape, y)
    for host in _outputs(out_shape, dtype):
        out = tj.asarray(host)
        cat_tiles[tj.cdiv(m, bm), tj.cdiv(n, bn)](tj.asarray(x), tj.asarray(y), out, AXIS=axis, BM=bm, BN=bn)
        _exact(out.numpy(), want)


@tj.kernel
def split_join(x, ev, od, swapped, BM: tj.Constant[int], BK: tj.Constant[int]):
    """Even and odd columns of ``x`` (split) and ``x`` with each column pair swapped (join)."""
    i, j = tj.bid(0), tj.bid(1)
    t = tj.load(x, index=(i, j), shape=(BM, 2 * BK))
    e, o = t.reshape((BM, BK, 2)).split()
    tj.store(ev, index=(i, j), tile=e)
    tj.store(od, index=(i, j), tile=o)
    tj.store(swapped, index=(i, j), tile=tj.join(o, e).reshape((BM, 2 * BK)))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [*DTYPES, "bool"])
@pytest.mark.parametrize(("bm", "bk"), [(32, 16), (8, 1), (128, 4)])
def test_gpu_split_join(dtype: str, bm: int, bk: int, rng: np.random.Generator) -> None:
    m, n = 100, 45
    x = _rand((m, 2 * n), dtype, rng)
    want = np.empty_like(x)
    want[:, 0::2], want[:, 1::2] = x[:, 1::2], x[:, 0::2]
    for k in range(len(_outputs((1,), dtype))):
        ev, od, sw = (tj.asarray(_outputs(s, dtype)[k]) for s in ((m, n), (m, n), (m, 2 * n)))
        split_join[tj.cdiv(m, bm), tj.cdiv(n, bk)](tj.asarray(x), ev, od, sw, BM=bm, BK=bk)
        _exact(ev.numpy(), x[:, 0::2])
        _exact(od.numpy(), x[:, 1::2])
        _exact(sw.numpy(), want)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "int32", "int8"])
def test_gpu_every_op(dtype: str, rng: np.random.Generator) -> None:
    m, n, bm, bn = 77, 40, 16, 32  # the tiles read x's first 32 columns; the last one's rows past 77 read 0
    x = _rand((m, n), dtype, rng)
    out = tj.asarray(poison((m, bn), dtype))
    every_op[tj.cdiv(m, bm)](tj.asarray(x), out, BM=bm, BN=bn)
    _exact(out.numpy(), every_op_reference(x, bm, bn))


@pytest.mark.gpu
def test_gpu_scalars_and_vectors(rng: np.random.Generator) -> None:
    x = rng.integers(-50, 50, 20).astype(np.int32)
    out = tj.asarray(poison((8,), "int32"))
    scalars_and_vectors[1](tj.asarray(x), out, 5)
    _exact(out.numpy(), np.concatenate((x[12:16], x[12:16] * 5)))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_permuted_loads_and_stores(dtype: str, rng: np.random.Generator) -> None:
    m, n, tm, tn = 100, 70, 32, 16
    x = _rand((m, n), dtype, rng)
    out1, out2 = tj.asarray(poison((n, m), dtype)), tj.asarray(poison((n, m), dtype))
    counts = tj.asarray(poison((1,), "int32"))
    ordered[tj.cdiv(m, tm), tj.cdiv(n, tn)](tj.asarray(x), out1, out2, counts, TM=tm, TN=tn)
    _exact(out1.numpy(), x.T)
    _exact(out2.numpy(), x.T)
    assert counts.numpy()[0] == tj.cdiv(n, tn)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_permuted_3d_load_with_padding(dtype: str, rng: np.random.Generator) -> None:
    b, m, n, tm, tn = 3, 50, 20, 16, 8
    x = _rand((b, m, n), dtype, rng)
    out = tj.asarray(poison((b, n, m), dtype))
    ordered3[b, tj.cdiv(n, tn), tj.cdiv(m, tm)](tj.asarray(x), out, TM=tm, TN=tn)
    xt = _padded(x.transpose(0, 2, 1).astype(np.float64), (b, _up(n, tn), _up(m, tm)), -1)
    sums = xt.reshape(b, xt.shape[1], -1, tm).sum(axis=3, keepdims=True)
    want = (xt.reshape(b, xt.shape[1], -1, tm) + sums).reshape(xt.shape)[:, :n, :m]
    got = out.numpy().astype(np.float64)
    if dtype == "float16":  # the row sums are float16 (accumulated in float32, rounded once)
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=0.05)
    else:  # float32: element + row sum rounds to float32 (exact for int32)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


@tj.kernel
def halves_reduced(x, sums, maxes, evens, BM: tj.Constant[int], BN: tj.Constant[int]):
    """Row reductions of slices of a (BM, BN) tile: the left half's sum minus the right half's, the max of the
    halves concatenated the other way round, and the sum of the even columns."""
    i = tj.bid(0)
    t = tj.load(x, index=(i, 0), shape=(BM, BN))
    left, right = tj.extract(t, (0, 0), (BM, BN // 2)), tj.extract(t, (0, 1), (BM, BN // 2))
    tj.store(sums, index=(i,), tile=tj.sum(left, axis=1) - tj.sum(right, axis=1))
    tj.store(maxes, index=(i,), tile=tj.max(tj.cat((right, left), axis=1), axis=1))
    even = tj.split(t.reshape((BM, BN // 2, 2)))[0]
    tj.store(evens, index=(i,), tile=tj.sum(even, axis=1))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_slices_with_reductions(dtype: str, rng: np.random.Generator) -> None:
    m, n, bm, bn = 100, 70, 16, 128
    x = _rand((m, n), dtype, rng)
    outs = [tj.asarray(poison((m,), dtype)) for _ in range(3)]
    halves_reduced[tj.cdiv(m, bm)](tj.asarray(x), *outs, BM=bm, BN=bn)
    p = _padded(x.astype(np.float64), (m, bn))  # columns past 70 read 0
    wants = [p[:, :bn // 2].sum(1) - p[:, bn // 2:].sum(1), p.max(1), p[:, 0::2].sum(1)]
    for got, want in zip(outs, wants):
        g = got.numpy().astype(np.float64)
        if dtype == "float16":
            np.testing.assert_allclose(g, want, rtol=2e-3, atol=0.05)
        else:
            np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize(("bm", "bn", "bk"), [(64, 64, 32), (32, 16, 16), (16, 64, 8)])
def test_gpu_mma_of_halves(dtype: str, bm: int, bn: int, bk: int, rng: np.random.Generator) -> None:
    m, n = 100, 70
    a, b = _rand((m, 2 * bk), dtype, rng), _rand((2 * bk, n), dtype, rng)
    c1, c2 = tj.asarray(poison((m, n), "float32")), tj.asarray(poison((m, n), "float32"))
    mma_halves[tj.cdiv(m, bm), tj.cdiv(n, bn)](tj.asarray(a), tj.asarray(b), c1, c2, BM=bm, BN=bn, BK=bk)
    want = a.astype(np.float64) @ b.astype(np.float64)
    for got in (c1.numpy(), c2.numpy()):
        assert not np.isnan(got).any()
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err < max(RTOL[dtype], 1e-5) * 10, err


# ---------------------------------------------------------------------------------------------- the GPU kernels here

#: A configuration of each GPU test's kernel (the smallest blocks, 1-byte and 16-bit dtypes among them).
GPU_KERNELS = [
    (extract_copy, (arr("bool", 2),) * 3, {"BM": 64, "BN": 16, "SM": 1, "SN": 16}),
    (extract_copy, (arr("float16", 2),) * 3, {"BM": 16, "BN": 64, "SM": 16, "SN": 4}),
    (cat_tiles, (arr("bool", 2),) * 3, {"AXIS": 1, "BM": 32, "BN": 16}),
    (split_join, (arr("bool", 2),) * 4, {"BM": 8, "BK": 1}),
    (split_join, (arr("int32", 2),) * 4, {"BM": 128, "BK": 4}),
    (every_op, (arr("int8", 2),) * 2, {"BM": 16, "BN": 32}),
    (halves_reduced, (arr("float16", 2),) + (arr("float16", 1),) * 3, {"BM": 16, "BN": 128}),
    (ordered, (arr("int32", 2),) * 3 + (arr("int32", 1),), {"TM": 32, "TN": 16}),
    (mma_halves, (arr("bfloat16", 2),) * 2 + (arr("float32", 2),) * 2, {"BM": 32, "BN": 16, "BK": 16}),
    (mma_halves, (arr("float32", 2),) * 4, {"BM": 16, "BN": 64, "BK": 8}),
]


@pytest.mark.parametrize(("kernel", "sig", "consts"), GPU_KERNELS,
                         ids=[f"{k.__name__}-{s[0].dtype.name}-{'-'.join(map(str, c.values()))}"
                              for k, s, c in GPU_KERNELS])
def test_the_gpu_tests_kernels_compile_with_both_backends(kernel: Any, sig: tuple[Any, ...], consts: dict[str, Any],
                                                          nvrtc_here: Path, tileir_env: Any) -> None:
    for backend in ("cuda", "tileir"):
        art = tj.compile(kernel, sig, constants=consts, target="sm_90", backend=backend)
        assert art.cubin()[:4] == b"\x7fELF", backend
