"""Issue 20: array lists, a kernel parameter that takes a tuple or list of arrays of one dtype and rank (shapes and
strides each their own), indexed in the kernel by a run-time integer (``a = As[g]``) and then used as any array; and
``num_warps=`` / ``num_stages=`` given at launch. On the CPU: the IR, located errors, CUDA C++ through NVRTC, Tile IR
through tileiras, the launch's table and specialization (stand-in device, no driver); on a GPU: copies over lists of
arrays of different shapes, out-of-range indices and a grouped matmul of odd sizes against numpy, into poisoned
outputs (each backend)."""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kernels import RTOL, np_dtype, poison
from source_lines import assert_located
from test_tileir_coverage import same_module_text

import tilejit as tj
from tilejit.api.compile import specialize
from tilejit.api.kernel import Kernel, _Compiled
from tilejit.api.signature import ALONE, launch_facts
from tilejit.backends.base import ARRAY_LIST_SPEC
from tilejit.backends.tileir import generate_bytecode
from tilejit.compiler.tileiras import disassemble, run_tileiras
from tilejit.errors import LaunchError, TileCompileError
from tilejit.language.frontend.translate import translate
from tilejit.language.ir.printer import print_function
from tilejit.language.ir.types import ArrayListType, float16, float32
from tilejit.language.ir.verifier import verify
from tilejit.runtime import array_table
from tilejit.runtime.interop import ArrayView

LINES = Path(__file__).read_text(encoding="utf-8").splitlines()
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


# ---------------------------------------------------------------------------------------------- the kernels


@tj.kernel
def copy_lists(src, dst, BM: tj.Constant[int], BN: tj.Constant[int]):
    """Block (i, g): row tile i of src[g] into dst[g], column tile by column tile (blocks past an array's rows copy
    nothing: their loads and stores are out of bounds)."""
    i, g = tj.bid(0), tj.bid(1)
    a, b = src[g], dst[g]
    for j in range(tj.cdiv(a.shape[1], BN)):
        tj.store(b, index=(i, j), tile=tj.load(a, index=(i, j), shape=(BM, BN)))


@tj.kernel
def copy_picked(src, dst, picks, TILE: tj.Constant[int]):
    """Block (i, j): tile i of src[picks[j]] into dst[j] (an index out of range reads an empty array: padding -1)."""
    i, j = tj.bid(0), tj.bid(1)
    a = src[tj.gather(picks, j)]
    tj.store(dst[j], index=(i,), tile=tj.load(a, index=(i,), shape=(TILE,), padding=-1))


@tj.kernel
def describe_lists(src, out, n):
    """Row i of out: len(src), then src[i]'s shape and strides (an empty array past the end: zeros)."""
    for i in range(n):
        a = src[i - 1]
        tj.scatter(out, (i, 0), tj.astype(len(src), tj.int64))
        tj.scatter(out, (i, 1), a.shape[0])
        tj.scatter(out, (i, 2), a.shape[1])
        tj.scatter(out, (i, 3), a.strides[0])
        tj.scatter(out, (i, 4), a.strides[1])


def sig(*types: Any) -> tuple[Any, ...]:
    return types


LIST2_F32 = tj.array_list(tj.float32[:, :])
COPY_SIG = sig(LIST2_F32, LIST2_F32)
PICK_SIG = sig(tj.array_list(tj.float32[:]), tj.array_list(tj.float32[:]), tj.int32[:])
DESCRIBE_SIG = sig(tj.array_list(tj.int16[:, :]), tj.int64[:, :], tj.int32)


# ---------------------------------------------------------------------------------------------- front end and IR


def test_array_list_types() -> None:
    t = tj.array_list(tj.float16[:, ::1])
    assert t == ArrayListType(float16, 2) != ArrayListType(float32, 2) and str(t) == "array_list<f16, 2>"
    assert t.element == tj.float16[:, :] and t.record == 5 and hash(t) == hash(ArrayListType(float16, 2))
    with pytest.raises(TypeError, match=r"tj\.array_list takes an array type"):
        tj.array_list(tj.float16)  # type: ignore[arg-type]


def test_ir_indexes_the_list_at_run_time() -> None:
    fn = translate(copy_picked, specialize(copy_picked, PICK_SIG), {"TILE": 128})
    verify(fn)
    text = print_function(fn)
    assert "%src: array_list<f32, 1>" in text and "%dst: array_list<f32, 1>" in text
    assert text.count("array_item") == 2 and ": array<f32, 1>" in text
    fn = translate(describe_lists, specialize(describe_lists, DESCRIBE_SIG), {})
    verify(fn)
    assert "array_count %src : i32" in print_function(fn)


@tj.kernel
def index_with_float(src, x: float):
    tj.store(src[x], index=(0,), tile=tj.zeros((16,), tj.float32))


@tj.kernel
def index_with_constant_float(src):
    tj.store(src[1.5], index=(0,), tile=tj.zeros((16,), tj.float32))


@tj.kernel
def index_with_tile(src):
    tj.store(src[tj.arange(4)], index=(0,), tile=tj.zeros((16,), tj.float32))


@tj.kernel
def store_to_the_list(src):
    tj.store(src, index=(0,), tile=tj.zeros((16,), tj.float32))


@tj.kernel
def shape_of_the_list(arrays):
    dims = arrays.shape  # noqa: F841


@tj.kernel
def item_changes_in_loop(src, n):
    a = src[0]
    for i in range(n):
        a = src[i]
    tj.store(a, index=(0,), tile=tj.zeros((16,), tj.float32))


@pytest.mark.parametrize("kernel, scalars, at, message", [
    (index_with_float, (tj.float32,), "src[x]",
     "the index into the array list 'src' must be an integer scalar, got a scalar of type f32"),
    (index_with_constant_float, (), "src[1.5]", "must be an integer scalar, got the constant 1.5"),
    (index_with_tile, (), "src[tj.arange(4)]", "must be an integer scalar, got a tile of type tile<4xi32>"),
    (store_to_the_list, (), "tj.store(src,", "got the array list 'src' (array_list<f32, 1>); index it for one of its "
     "arrays: src[i]"),
    (shape_of_the_list, (), "arrays.shape", "the array list 'arrays' has no attribute 'shape'"),
    (item_changes_in_loop, (tj.int32,), "a = src[i]", "only tiles and numbers can change from one iteration"),
])
def test_misuse_is_a_located_error(kernel: Any, scalars: tuple[Any, ...], at: str, message: str) -> None:
    with pytest.raises(TileCompileError) as exc:
        tj.compile(kernel, (tj.array_list(tj.float32[:]), *scalars), target="sm_90", backend="cuda").ir()
    assert_located(exc.value, __file__, LINES, at, message)


# ---------------------------------------------------------------------------------------------- CUDA C++


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_90a"])
def test_cuda_source_reads_the_table_and_nvrtc_compiles_it(target: str) -> None:
    art = tj.compile(copy_lists, COPY_SIG, constants={"BM": 16, "BN": 64}, target=target, backend="cuda")
    src = art.cuda_source()
    assert "tj::Array<tj::i64, 2> u_src" in src and "tj::Array<tj::i64, 2> u_dst" in src
    assert src.count("tj::array_item<float, 2>(") == 2
    assert dict(art.image().params) == {"src": ARRAY_LIST_SPEC, "dst": ARRAY_LIST_SPEC}
    assert art.cubin()[:4] == b"\x7fELF"
    for kernel, signature in ((copy_picked, PICK_SIG), (describe_lists, DESCRIBE_SIG)):
        consts = {"TILE": 256} if kernel is copy_picked else {}
        art = tj.compile(kernel, signature, constants=consts, target=target, backend="cuda")
        assert art.cubin()[:4] == b"\x7fELF"
    assert "(tj::i32)u_src.shape[0]" in art.cuda_source()  # len(src)


def test_array_item_header_reads_the_zero_row_out_of_range() -> None:
    """The device helper: row ``count`` (the launch's zero row, an empty array) for any index outside [0, count)."""
    from tilejit.backends.cuda.abi import device_headers

    text = device_headers()["tilejit/types.cuh"]
    assert "(i >= 0 && i < count ? i : count) * table.stride[0]" in text


def test_grouped_matmul_example_compiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", [str(EXAMPLES), *sys.path])
    import grouped_matmul as gm

    for dtype, target in ((tj.float16, "sm_80"), (tj.bfloat16, "sm_90a")):
        s = sig(tj.array_list(dtype[:, :]), tj.array_list(dtype[:, :]), tj.array_list(tj.float32[:, :]), tj.int32[:])
        art = tj.compile(gm.grouped_matmul, s, constants={"BM": 64, "BN": 64, "BK": 32}, target=target,
                         backend="cuda")
        assert art.cubin()[:4] == b"\x7fELF" and "mma" in art.ptx()
    assert gm.tile_starts([(100, 65, 3), (1, 1, 1), (64, 64, 64)], 64, 64).tolist() == [0, 4, 5, 6]


# ---------------------------------------------------------------------------------------------- Tile IR


def test_tileir_text_loads_the_row_and_makes_pointers() -> None:
    art = tj.compile(copy_lists, COPY_SIG, constants={"BM": 16, "BN": 64}, target="sm_90", backend="cuda")
    text = art.tileir_text()
    assert text.count("int_to_ptr") == 2 and "tile<i64> -> tile<ptr<f32>>" in text
    assert text.count("load_ptr_tko weak") == 10  # pointer, 2 extents, 2 strides per array
    assert "make_tensor_view" in text


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_100"])
def test_tileir_compiles_with_tileiras(target: str, tileir_env: Any) -> None:
    cases = [(copy_lists, COPY_SIG, {"BM": 16, "BN": 64}), (copy_picked, PICK_SIG, {"TILE": 256}),
             (describe_lists, DESCRIBE_SIG, {})]
    for kernel, signature, consts in cases:
        art = tj.compile(kernel, signature, constants=consts, target="sm_90", backend="cuda")
        cubin = run_tileiras(generate_bytecode(art.ir(), target, None, art.hints), target, toolchain=tileir_env)
        assert cubin[:4] == b"\x7fELF", kernel.__name__
        # the bytecode reads back as the text we print (int_to_ptr's encoding included)
        assert same_module_text(disassemble(art.tileir_bytecode(), toolchain=tileir_env), art.tileir_text())


def test_tileir_backend_builds_the_grouped_matmul(tileir_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", [str(EXAMPLES), *sys.path])
    import grouped_matmul as gm

    s = sig(tj.array_list(tj.float16[:, :]), tj.array_list(tj.float16[:, :]), tj.array_list(tj.float32[:, :]),
            tj.int32[:])
    art = tj.compile(gm.grouped_matmul, s, constants={"BM": 64, "BN": 64, "BK": 32}, target="sm_90",
                     backend="tileir")
    image = art.image()
    assert art.backend == "tileir" and image.image[:4] == b"\x7fELF"
    assert dict(image.params)["As"] == ARRAY_LIST_SPEC


# ---------------------------------------------------------------------------------------------- launching


class FakeDevice:
    ordinal = 0
    arch = "sm_90"


FAKE_DEVICE = FakeDevice()


class Recorder:
    """Stands in for ``Kernel._build``: one fake launcher per specialization, each build and launch recorded."""

    def __init__(self, kernel: Kernel) -> None:
        self.builds: list[tuple[dict[str, Any], Any]] = []
        self.launches: list[tuple[int, list[Any]]] = []
        kernel._build = self.build  # type: ignore[method-assign]
        for memo in (kernel._specs, kernel._fast, kernel._bound):
            memo.clear()

    def build(self, arg_types: dict[str, Any], hints: dict[str, Any], consts: tuple[Any, ...], device: Any,
              options: Any = None) -> _Compiled:
        index = len(self.builds)
        self.builds.append((dict(arg_types), options))

        def launcher(grid: tuple[int, int, int], views: Any, stream: Any) -> None:
            self.launches.append((index, list(views)))

        return _Compiled(launcher=launcher, artifact=None, module=None)


class FakeBuffer:
    def __init__(self, rows: bytes, ptr: int) -> None:
        self.rows, self.ptr = rows, ptr


@pytest.fixture
def tables(use_device: Callable[[Any], Any], monkeypatch: pytest.MonkeyPatch) -> list[FakeBuffer]:
    """A stand-in current device, and tables kept in host memory (each "address" a new multiple of 4096)."""
    use_device(FAKE_DEVICE)
    made: list[FakeBuffer] = []

    def table(device: Any, rows: bytes) -> FakeBuffer:
        assert device is FAKE_DEVICE
        made.append(FakeBuffer(rows, 4096 * (len(made) + 1)))
        return made[-1]

    monkeypatch.setattr(array_table, "_table", table)
    return made


def view(shape: tuple[int, ...], strides: tuple[int, ...] | None = None, dtype: str = "float32",
         ptr: int = 1 << 20) -> ArrayView:
    return ArrayView(ptr, shape, strides or tuple(int(np.prod(shape[d + 1:])) for d in range(len(shape))), dtype, None)


def rows_of(buffer: FakeBuffer, record: int) -> list[list[int]]:
    words = struct.unpack(f"<{len(buffer.rows) // 8}q", buffer.rows)
    return [list(words[i:i + record]) for i in range(0, len(words), record)]


def test_lists_of_any_length_share_one_specialization(tables: list[FakeBuffer]) -> None:
    rec = Recorder(copy_lists)
    three = [view((5, 7), ptr=0x10000 + 256 * i) for i in range(3)]
    seven = tuple(view((i + 1, 3), (1, 9), ptr=0x20000 + 256 * i) for i in range(7))
    copy_lists[(1, 3)](three, three, BM=16, BN=64)
    copy_lists[(1, 7)](seven, list(seven), BM=16, BN=64)
    assert len(rec.builds) == 1
    assert rec.builds[0][0] == {"src": ArrayListType(float32, 2), "dst": ArrayListType(float32, 2)}
    (_, views3), (_, views7) = rec.launches
    assert views3[0] == ArrayView(4096, (3, 5), (5, 1), "int64", views3[0].owner)
    assert views7[1][:4] == (4096 * 4, (7, 5), (5, 1), "int64")
    assert rows_of(tables[0], 5) == [[0x10000 + 256 * i, 5, 7, 7, 1] for i in range(3)] + [[0] * 5]
    assert rows_of(tables[2], 5) == [[0x20000 + 256 * i, i + 1, 3, 1, 9] for i in range(7)] + [[0] * 5]
    copy_lists[(1, 1)]([view((4, 4), dtype="float16")], [view((4, 4), dtype="float16")], BM=16, BN=64)
    assert len(rec.builds) == 2 and rec.builds[1][0]["src"] == ArrayListType(float16, 2)


@pytest.mark.parametrize("items, message", [
    ([view((4, 4)), view((4, 4), dtype="float16")], "item 0 is a 2-d float32 array, item 1 a 2-d float16 array"),
    ([view((4, 4)), view((16,))], "item 0 is a 2-d float32 array, item 1 a 1-d float32 array"),
    ([view((4, 4)), 3], "item 1 of the array list is not a device array"),
    ([view((4, 4)), np.zeros((4, 4), np.float32)], "item 1 of the array list is not a device array"),
    ([view((4, 4), ptr=4098)], "item 0 starts at 0x1002, which is not a multiple of 4"),
    ((), "an array list needs at least one array"),
])
def test_bad_lists_are_launch_errors_naming_the_item(tables: list[FakeBuffer], items: Any, message: str) -> None:
    Recorder(copy_lists)
    with pytest.raises(LaunchError, match="parameter 'src': ") as exc:
        copy_lists[1](items, [view((4, 4))], BM=16, BN=64)
    assert message in str(exc.value)
    assert not tables  # nothing reached the device


def test_an_array_list_makes_no_array_alone(tables: list[FakeBuffer]) -> None:
    """The list's arrays may overlap any other argument, which the launch facts do not look into."""
    out = view((64,), ptr=1 << 30)
    alone = launch_facts([view((4,)), out])
    assert all(f is not None and f & ALONE for f in alone)
    table = array_table.table_view("src", [view((4,), ptr=1 << 30)])
    assert [f & ALONE for f in launch_facts([table, out]) if f is not None] == [0, 0]
    assert array_table.is_table(table) and not array_table.is_table(out)


class FakeDriver:
    """The driver calls a new table makes: allocations, copies and syncs recorded."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.memory: dict[int, bytes] = {}

    def check(self, status: int, name: str, detail: str = "") -> None:
        assert status == 0

    def cuMemcpyHtoDAsync(self, dst: int, src: Any, n: int, stream: Any) -> int:
        self.calls.append("copy")
        self.memory[dst] = bytes(src.value[:n]) if src.value is not None else b""
        return 0

    def cuStreamSynchronize(self, stream: Any) -> int:
        self.calls.append("sync")
        return 0


def test_tables_are_kept_by_content_and_the_oldest_dropped_after_a_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    drv, freed, synced = FakeDriver(), [], []

    class Device:
        ordinal = 0
        context = type("Ctx", (), {"ensure_current": staticmethod(lambda: None)})

        @staticmethod
        def synchronize() -> None:
            synced.append(len(freed))

    class Buffer:
        count = 0

        def __init__(self, nbytes: int, device: Any) -> None:
            Buffer.count += 1
            self.ptr, self.device = 4096 * Buffer.count, device

        def close(self) -> None:
            freed.append(self.ptr)

    class Stream:
        handle = 7

        def __init__(self, device: Any, non_blocking: bool) -> None:
            assert non_blocking

    import tilejit.runtime.device as device_mod
    import tilejit.runtime.memory as memory_mod
    import tilejit.runtime.stream as stream_mod

    monkeypatch.setattr(device_mod, "initialized_driver", lambda: drv)
    monkeypatch.setattr(memory_mod, "DeviceBuffer", Buffer)
    monkeypatch.setattr(stream_mod, "Stream", Stream)
    monkeypatch.setattr(array_table, "MAX_TABLES", 2)
    monkeypatch.setattr(array_table, "_tables", type(array_table._tables)())
    monkeypatch.setattr(array_table, "_streams", {})
    dev = Device()
    a = array_table._table(dev, b"\x01" * 8)
    assert array_table._table(dev, b"\x01" * 8) is a and drv.calls == ["copy", "sync"]  # kept: no copy
    assert drv.memory[a.ptr] == b"\x01" * 8
    b = array_table._table(dev, b"\x02" * 8)
    array_table._table(dev, b"\x03" * 8)  # a third: the oldest (a) goes, after its device finished
    assert freed == [a.ptr] and synced == [0]
    assert array_table._table(dev, b"\x02" * 8) is b


# ---------------------------------------------------------------------------------------------- launch options


@tj.kernel
def scale(x, n, TILE: tj.Constant[int]):
    tj.store(x, index=(0,), tile=tj.load(x, index=(0,), shape=(TILE,)) * n)


@tj.kernel
def has_num_warps(x, num_warps):
    tj.store(x, index=(0,), tile=tj.load(x, index=(0,), shape=(16,)) * num_warps)


def test_num_warps_and_num_stages_at_launch_specialize(use_device: Callable[[Any], Any]) -> None:
    use_device(FAKE_DEVICE)
    rec = Recorder(scale)
    x = view((16,))
    launch = scale[1]
    launch(x, 2, TILE=16)
    launch(x, 2, TILE=16, num_warps=8)
    launch(x, 2, TILE=16, num_warps=8)  # the same options: the same specialization
    launch(x, 2, TILE=16, num_stages=2)
    launch(x, 2, TILE=16, num_warps=2, num_stages=3)
    launch(x, 2, TILE=16)  # no options again: the kernel's own
    assert [b[1] for b in rec.builds] == [None, (256, None), (None, 2), (64, 3)]
    assert [i for i, _ in rec.launches] == [0, 1, 1, 2, 3, 0]
    with pytest.raises(LaunchError, match=r"num_warps"):
        launch(x, 2, TILE=16, num_warps=3)
    with pytest.raises(LaunchError, match=r"num_stages"):
        launch(x, 2, TILE=16, num_stages=0)


def test_launch_options_override_the_kernels_own(use_device: Callable[[Any], Any]) -> None:
    k = tj.kernel(scale.func, num_warps=4, num_stages=2)
    assert k._launch_options(8, None) == (256, 2) and k._launch_options(None, 3) == (128, 3)
    art = k._artifact({"x": tj.float32[:], "n": tj.int32}, {}, {"TILE": 16}, "sm_90", "cuda", opts=(64, 1))
    assert art.num_threads == 64 and art.kernel_hints.num_stages == 1
    assert k._artifact({"x": tj.float32[:], "n": tj.int32}, {}, {"TILE": 16}, "sm_90", "cuda").num_threads == 128


def test_a_parameter_named_num_warps_hides_the_option(use_device: Callable[[Any], Any]) -> None:
    use_device(FAKE_DEVICE)
    rec = Recorder(has_num_warps)
    has_num_warps[1](view((16,)), num_warps=3)
    assert rec.builds[0][1] is None and rec.launches[0][1][1] == 3
    assert "num_stages=None" in has_num_warps[1].source  # type: ignore[attr-defined]


def test_launch_options_compile_into_the_image() -> None:
    k = tj.kernel(scale.func)
    art = k._artifact(specialize(k, (tj.float32[:], tj.int32)), {}, {"TILE": 1024}, "sm_90", "cuda", opts=(512, None))
    assert art.image().num_threads == 512 and "__launch_bounds__(512" in art.cuda_source()


# ---------------------------------------------------------------------------------------------- on a GPU


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "float64"])
def test_copies_over_lists_of_different_shapes(dtype: str) -> None:
    rng = np.random.default_rng()
    bm, bn = 16, 64
    for count in (3, 7):  # one compiled kernel for both
        shapes = [(int(rng.integers(1, 70)), int(rng.integers(1, 150))) for _ in range(count)]
        host = [(rng.standard_normal(s) * 50).astype(np_dtype(dtype)) for s in shapes]
        src = [tj.asarray(h) for h in host]
        # strided sources too: every other column of a wider array
        wide = tj.asarray(np.repeat(host[0], 2, axis=1))
        src[0] = wide[:, ::2]
        dst = [tj.asarray(poison(s, dtype)) for s in shapes]
        rows = max(tj.cdiv(m, bm) for m, _ in shapes)
        copy_lists[(rows, count)](tuple(src), dst, BM=bm, BN=bn)
        for h, d in zip(host, dst):
            np.testing.assert_array_equal(d.numpy(), h)


@pytest.mark.gpu
def test_out_of_range_indices_read_an_empty_array() -> None:
    rng = np.random.default_rng()
    sizes = [1000, 3, 513]
    host = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    src = [tj.asarray(h) for h in host]
    picks = np.array([2, -1, 3, 0, 1 << 30, 1], np.int32)
    dst = [tj.asarray(poison((1024,), "float32")) for _ in picks]
    copy_picked[(4, len(picks))](src, dst, tj.asarray(picks), TILE=256)
    for p, d in zip(picks, dst):
        want = np.full(1024, -1.0, np.float32)
        if 0 <= p < len(sizes):
            want[: sizes[p]] = host[p]
        np.testing.assert_array_equal(d.numpy(), want)


@pytest.mark.gpu
def test_count_shapes_and_strides_reach_the_kernel() -> None:
    base = tj.asarray(np.zeros((40, 30), np.int16))
    src = [base, base[::2, 1::3], tj.asarray(np.zeros((1, 7), np.int16))]
    out = tj.asarray(np.full((5, 5), -7, np.int64))
    describe_lists[1](src, out, 5)
    want = [[3, 0, 0, 0, 0], [3, 40, 30, 30, 1], [3, 20, 10, 60, 3], [3, 1, 7, 7, 1], [3, 0, 0, 0, 0]]
    np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_grouped_matmul_of_odd_sizes(dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", [str(EXAMPLES), *sys.path])
    import grouped_matmul as gm
    from matmul import random_input

    rng = np.random.default_rng()
    consts = {"BM": 64, "BN": 64, "BK": 32}
    for groups in (1, 3, 7):
        shapes = [(int(rng.integers(1, 200)), int(rng.integers(1, 200)), int(rng.integers(1, 150)))
                  for _ in range(groups)]
        ins = [(random_input(rng, (m, k), dtype), random_input(rng, (k, n), dtype)) for m, n, k in shapes]
        outs = [tj.asarray(poison((m, n), "float32")) for m, n, _ in shapes]
        gm.run_groups([da for (_, da), _ in ins], [db for _, (_, db) in ins], outs, consts)
        for ((a, _), (b, _)), out in zip(ins, outs):
            np.testing.assert_allclose(out.numpy(), a @ b, rtol=RTOL[dtype], atol=RTOL[dtype] * np.sqrt(a.shape[1]))


@pytest.mark.gpu
@pytest.mark.cuda_only  # the Tile IR backend refuses a block size: tileiras fixes it
def test_launch_num_warps_gives_the_same_values() -> None:
    x = np.random.default_rng().standard_normal(1024).astype(np.float32)
    for warps, stages in ((None, None), (1, None), (8, 2), (32, 1)):
        d = tj.asarray(x)
        scale[1](d, 3, TILE=1024, num_warps=warps, num_stages=stages)
        np.testing.assert_allclose(d.numpy(), x * 3, rtol=1e-6)
