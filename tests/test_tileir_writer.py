"""The Tile IR writer: bytecode layout, the text form, tileirdisasm reading back every module we write,
tileiras compiling one to a CUBIN, and located refusals of what the Tile IR lowering can't express.

tileirdisasm and tileiras come from TILEJIT_TILEIRDISASM / TILEJIT_TILEIRAS (paths to the programs)
or from the toolchain .ci/run installs under .ci-cache/tileir; tests that need them skip without them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from source_lines import where_in

import tilejit as tj
from tilejit.backends.tileir import VERSIONS, generate_bytecode, module_text, newest_accepted, parse_version
from tilejit.backends.tileir.bytecode import MAGIC, varint
from tilejit.errors import TileCompileError

ROOT = Path(__file__).resolve().parent.parent
TOOL_BIN = ROOT / ".ci-cache" / "tileir" / "nvidia" / "cu13" / "bin"
sys.path.insert(0, str(ROOT / "examples"))

from test_tileir_mma import MMA_BOTH_SIG, mma_both  # noqa: E402
from vector_add import vector_add  # noqa: E402


def tool(name: str, env_var: str) -> Path | None:
    """The program ``name`` from ``env_var`` or the CI toolchain folder, or ``None`` when neither has it."""
    given = os.environ.get(env_var)
    path = Path(given) if given else TOOL_BIN / name
    return path if path.is_file() and os.access(path, os.X_OK) else None


@tj.kernel
def mixed(x, y, out, s, TM: tj.Constant[int], TN: tj.Constant[int]):
    i = tj.bid(0)
    j = tj.bid(1)
    a = tj.load(x, index=(i, j), shape=(TM, TN))
    b = tj.load(y, index=(i, j), shape=(TM, TN), padding=float("-inf"))
    c = (a - b) * 2.0 / s
    tj.store(out, index=(i, j), tile=c.astype(tj.float16))


@tj.kernel
def int_ops(x, out, TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(TILE,))
    b = a * 3 + a.astype(tj.int64).astype(tj.int32) - 1
    tj.store(out, index=(i,), tile=b.astype(tj.float32))


@tj.kernel
def in_place(x, TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(TILE,))
    tj.store(x, index=(i,), tile=a + a)
    b = tj.load(x, index=(i,), shape=(TILE,))
    tj.store(x, index=(i,), tile=b * b)


@tj.kernel
def reductions(x, h, n, out, hout, nout, TM: tj.Constant[int], TN: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i, 0), shape=(TM, TN))
    tj.store(out, index=(i,), tile=tj.max(a, axis=1) + tj.sum(a, axis=1) - tj.min(a, axis=1) * tj.prod(a, axis=1))
    b = tj.load(h, index=(i,), shape=(TN,))
    tj.store(hout, index=(i,), tile=tj.sum(b, axis=0, keepdims=True))
    c = tj.load(n, index=(i, 0), shape=(TM, TN))
    tj.store(nout, index=(i,), tile=tj.max(c, axis=1) - tj.min(c, axis=1) + tj.sum(c, axis=1) * tj.prod(c, axis=1))


@tj.kernel
def row_of(x, out, row, TILE: tj.Constant[int]):
    i = tj.bid(0)
    tj.store(out, index=(row, i), tile=tj.load(x, index=(row, i), shape=(1, TILE)))


@tj.kernel
def row_softmax(x, out, TILE: tj.Constant[int]):  # a float32 row kernel: its view accesses carry allow_tma = false
    i = tj.bid(0)
    t = tj.load(x, index=(i, 0), shape=(1, TILE), padding=float("-inf"))
    e = tj.exp(t - tj.max(t, axis=1, keepdims=True))
    tj.store(out, index=(i, 0), tile=e / tj.sum(e, axis=1, keepdims=True))


@tj.kernel
def elementwise(x, n, out, nout, TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(TILE,))
    k = tj.load(n, index=(i,), shape=(TILE,))
    pos = tj.arange(TILE) + i * TILE
    f = tj.where(a != a, -a, tj.sqrt(tj.abs(a)) + tj.floor(a) - tj.ceil(a))
    f = tj.where((pos < tj.num_blocks(0) * 7) & (a >= 0.5), tj.maximum(f, a), tj.minimum(f, 1.0))
    tj.store(out, index=(i,), tile=f)
    far = (k > 3) | (k < -3)
    tj.store(nout, index=(i,), tile=tj.where(far, -k, tj.abs(k)) + tj.maximum(k, pos) - tj.minimum(k ^ 5, 2))


@tj.kernel
def nothing(x, s):
    pass


@tj.kernel
def uses_bf16_add(h, idx, v, TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(v, index=(i,), shape=(TILE,))
    tj.atomic_add(h, tj.load(idx, index=(i,), shape=(TILE,)), a)


@tj.kernel
def control(x, out, n, TILE: tj.Constant[int]):
    i = tj.bid(0)
    t = tj.load(x, index=(i,), shape=(TILE,))
    for k in range(n):
        if k == 2:
            continue
        t = t + 1.0
    for k in range(n):
        if k > 5:
            break
        tj.store(out, index=(i,), tile=t)


F32 = tj.float32[:]
KERNELS = {
    "vector_add": (vector_add, (F32, F32, F32), {"TILE": 1024}),
    "mma_both": (mma_both, MMA_BOTH_SIG, {"T": 16}),
    "mixed": (mixed, (tj.float32[:, :], tj.float32[:, ::1], tj.float16[:, :], tj.float32), {"TM": 16, "TN": 32}),
    "int_ops": (int_ops, (tj.int32[:], F32), {"TILE": 256}),
    "in_place": (in_place, (F32,), {"TILE": 128}),
    "nothing": (nothing, (F32, tj.float64), {}),
    "row_of": (row_of, (tj.float32[:, :], tj.float32[:, :], tj.int64), {"TILE": 64}),
    "row_softmax": (row_softmax, (tj.float32[:, ::1], tj.float32[:, ::1]), {"TILE": 4096}),
    "elementwise": (elementwise, (F32, tj.int32[:], F32, tj.int32[:]), {"TILE": 128}),
    "control": (control, (F32, F32, tj.int32), {"TILE": 128}),
    "reductions": (
        reductions,
        (tj.float32[:, :], tj.float16[:], tj.uint32[:, :], F32, tj.float16[:], tj.uint32[:]),
        {"TM": 16, "TN": 32},
    ),
}


def ir_of(name: str) -> tj.language.ir.ops.Function:  # type: ignore[name-defined]
    kernel, sig, constants = KERNELS[name]
    return tj.compile(kernel, sig, constants=constants, target="sm_90").ir()


def sections(data: bytes) -> list[tuple[int, int]]:
    """(section id byte, content length) of each section after the 12-byte header, up to the end byte."""
    out, pos = [], 12
    while data[pos] != 0:
        sid = data[pos]
        pos += 1
        length, pos = read_varint(data, pos)
        if sid & 0x80:
            align, pos = read_varint(data, pos)
            pos += -pos % align
        out.append((sid, length))
        pos += length
    assert pos == len(data) - 1, "bytes after the end-of-bytecode byte"
    return out


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, pos


# --------------------------------------------------------------------------------------------- format


@pytest.mark.parametrize("value, encoded", [(0, b"\x00"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02")])
def test_varint_is_leb128(value: int, encoded: bytes) -> None:
    buf = bytearray()
    varint(value, buf)
    assert bytes(buf) == encoded
    assert read_varint(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize("version", VERSIONS)
def test_header_and_sections(version: tuple[int, int]) -> None:
    data = generate_bytecode(ir_of("vector_add"), "sm_90", f"{version[0]}.{version[1]}")
    assert data[:8] == MAGIC == b"\x7fTileIR\x00"
    assert data[8:12] == bytes([version[0], version[1], 0, 0])
    # functions, constants, debug info (8-byte aligned), types, strings (4-byte aligned), then the end byte
    assert [sid for sid, _ in sections(data)] == [0x82, 0x84, 0x83, 0x85, 0x81]
    assert b"vector_add" in data


def test_default_version_is_the_newest_and_bad_versions_are_refused() -> None:
    fn = ir_of("vector_add")
    assert parse_version(None) == VERSIONS[-1] == (13, 5)
    assert generate_bytecode(fn, "sm_90") == generate_bytecode(fn, "sm_90", "13.5")
    assert generate_bytecode(fn, "sm_90", (13, 3))[8:10] == b"\x0d\x03"
    with pytest.raises(ValueError, match=r"^version: Tile IR bytecode version '12\.9' is not one of 13\.1, "):
        generate_bytecode(fn, "sm_90", "12.9")
    with pytest.raises(ValueError, match=r"^target: expected an architecture such as 'sm_90', got 'gfx90a'$"):
        module_text(fn, "gfx90a")


def test_output_is_deterministic() -> None:
    assert generate_bytecode(ir_of("mixed"), "sm_90") == generate_bytecode(ir_of("mixed"), "sm_90")
    assert module_text(ir_of("mixed"), "sm_90") == module_text(ir_of("mixed"), "sm_90")


VECTOR_ADD_TEXT = """\
cuda_tile.module @vector_add {
  entry @vector_add(%x: tile<ptr<f32>>, %x_shape0: tile<i64>, %x_stride0: tile<i64>, %y: tile<ptr<f32>>, \
%y_shape0: tile<i64>, %y_stride0: tile<i64>, %out: tile<ptr<f32>>, %out_shape0: tile<i64>, %out_stride0: tile<i64>) \
optimization_hints=<sm_90 = {occupancy = 8}> {
    %bid_x, %bid_y, %bid_z = get_tile_block_id : tile<i32>
    %x_view = make_tensor_view %x, shape = [%x_shape0], strides = [%x_stride0] : tile<i64> -> \
tensor_view<?xf32, strides=[?]>
    %x_tiles = make_partition_view %x_view : partition_view<tile=(1024), padding_value = zero, \
tensor_view<?xf32, strides=[?]>>
    %y_view = make_tensor_view %y, shape = [%y_shape0], strides = [%y_stride0] : tile<i64> -> \
tensor_view<?xf32, strides=[?]>
    %y_tiles = make_partition_view %y_view : partition_view<tile=(1024), padding_value = zero, \
tensor_view<?xf32, strides=[?]>>
    %out_view = make_tensor_view %out, shape = [%out_shape0], strides = [%out_stride0] : tile<i64> -> \
tensor_view<?xf32, strides=[?]>
    %out_tiles = make_partition_view %out_view : partition_view<tile=(1024), tensor_view<?xf32, strides=[?]>>
    %a, %0 = load_view_tko weak %x_tiles[%bid_x] : partition_view<tile=(1024), padding_value = zero, \
tensor_view<?xf32, strides=[?]>>, tile<i32> -> tile<1024xf32>, token
    %b, %1 = load_view_tko weak %y_tiles[%bid_x] : partition_view<tile=(1024), padding_value = zero, \
tensor_view<?xf32, strides=[?]>>, tile<i32> -> tile<1024xf32>, token
    %2 = addf %a, %b : tile<1024xf32>
    %3 = join_tokens %0, %1 : token
    %4 = store_view_tko weak %2, %out_tiles[%bid_x] token = %3 : tile<1024xf32>, partition_view<tile=(1024), \
tensor_view<?xf32, strides=[?]>>, tile<i32> -> token
    return
  }
}
"""


def test_vector_add_text_golden() -> None:
    assert module_text(ir_of("vector_add"), "sm_90") == VECTOR_ADD_TEXT


def test_in_place_kernel_orders_its_memory_ops_with_tokens() -> None:
    """Each store waits on the loads before it, and the second load waits on the first store."""
    text = module_text(ir_of("in_place"), "sm_90")
    loads = re.findall(r"load_view_tko weak \S+\[%bid_x\]( token = %\w+)?", text)
    stores = re.findall(r"(%\w+) = store_view_tko weak \S+, \S+\[%bid_x\] token = (%\w+)", text)
    assert loads[0] == "" and len(stores) == 2
    assert loads[1] == f" token = {stores[0][0]}"
    assert "join_tokens" in text  # the second store waits on the first store and the second load


# --------------------------------------------------------------------------------------------- tools


def normalized(text: str) -> list[str]:
    """The entry's lines with value names replaced by numbers in order of definition (not inside string literals:
    a print's format has its own %d), spaces collapsed; a region's names are its own (sibling regions may reuse
    names, as both printers do, for different values)."""
    body = [re.sub(r"\s+", " ", ln.strip()) for ln in text.splitlines() if ln.strip()]
    if body[0].startswith("cuda_tile.module"):  # our wrapper; tileirdisasm prints the entry alone
        body = body[1:-1]
    scopes: list[dict[str, str]] = [{}]
    count = 0

    def rename(part: str) -> str:
        def one(m: re.Match[str]) -> str:
            nonlocal count
            for scope in reversed(scopes):
                if m.group(0) in scope:
                    return scope[m.group(0)]
            count += 1
            scopes[-1][m.group(0)] = f"%v{count}"
            return f"%v{count}"

        return re.sub(r'"(?:[^"\\]|\\.)*"|%[\w.$-]+', lambda m: m.group(0) if m.group(0)[0] == '"' else one(m), part)

    out = []
    for ln in body:
        if ln.startswith("}"):
            scopes.pop()
        if not ln.endswith("{"):
            out.append(rename(ln))
            continue
        results, eq, rest = ln.partition(" = ") if re.match(r"%[\w:#]+ = ", ln) else ("", "", ln)
        head = rename(results) + eq
        scopes.append({})  # the region's arguments, named on its op's line, are the region's
        out.append(head + rename(rest))
    return out


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_tileirdisasm_reads_every_module(kernel: str, version: tuple[int, int], tmp_path: Path) -> None:
    """tileirdisasm parses the bytecode, and prints the module the text form shows (names aside)."""
    disasm = tool("tileirdisasm", "TILEJIT_TILEIRDISASM")
    if disasm is None:
        pytest.skip("no tileirdisasm: set TILEJIT_TILEIRDISASM or install the toolchain into .ci-cache/tileir")
    fn = ir_of(kernel)
    path = tmp_path / f"{kernel}.tileirbc"
    path.write_bytes(generate_bytecode(fn, "sm_90", version))
    proc = subprocess.run([str(disasm), str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert normalized(proc.stdout) == normalized(module_text(fn, "sm_90"))


@pytest.mark.parametrize("version", [VERSIONS[0], VERSIONS[-1]])
@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_tileiras_compiles_to_a_cubin(kernel: str, version: tuple[int, int], tmp_path: Path) -> None:
    """With libnvvm and ptxas of the same release beside it, tileiras turns our bytecode into an ELF CUBIN
    (its verifier checks the types and operands that tileirdisasm only parses)."""
    tileiras = tool("tileiras", "TILEJIT_TILEIRAS")
    if tileiras is None:
        pytest.skip("no tileiras: set TILEJIT_TILEIRAS or install the toolchain into .ci-cache/tileir")
    bc, cubin = tmp_path / f"{kernel}.tileirbc", tmp_path / f"{kernel}.cubin"
    bc.write_bytes(generate_bytecode(ir_of(kernel), "sm_90", version))
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    env["TMPDIR"] = str(tmp_path)
    proc = subprocess.run(
        [str(tileiras), "--gpu-name=sm_90", "-o", str(cubin), str(bc)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    if proc.returncode == 5 and "failed to compile Tile IR program" in proc.stderr:
        pytest.skip("tileiras found no libnvvm/ptxas of its release beside it")
    assert proc.returncode == 0, proc.stderr
    assert cubin.read_bytes()[:4] == b"\x7fELF"
    if kernel == "vector_add":  # with --lineinfo, the CUBIN's line table names the kernel's file
        lined = tmp_path / "lined.cubin"
        proc = subprocess.run(
            [str(tileiras), "--lineinfo", "--gpu-name=sm_90", "-o", str(lined), str(bc)],
            capture_output=True, text=True, timeout=300, env=env,
        )
        assert proc.returncode == 0, proc.stderr
        assert b"vector_add.py" in lined.read_bytes() and b"vector_add.py" not in cubin.read_bytes()


# --------------------------------------------------------------------------------------------- refusals


def test_unsupported_op_is_a_located_error_naming_it() -> None:
    bf16 = tj.bfloat16[:]
    fn = tj.compile(uses_bf16_add, (bf16, tj.int32[:], bf16), constants={"TILE": 128}, target="sm_80").ir()
    lines = Path(__file__).read_text().splitlines()
    line, col = where_in(lines, "tj.atomic_add(h, tj.load(idx")
    for produce in (lambda: generate_bytecode(fn, "sm_80"), lambda: module_text(fn, "sm_80")):
        with pytest.raises(TileCompileError) as err:
            produce()
        e = err.value
        assert (e.filename, e.line, e.col) == (__file__, line, col)
        assert e.message == "the Tile IR backend cannot express 'atomic' (atomic_add on bfloat16 for sm_80; Tile " \
            'IR has it from sm_90 on) yet; compile this kernel with backend="cuda"'
        assert str(e).splitlines()[-1].strip() == "^"


def test_reductions_use_the_identity_of_their_dtype_and_accumulate_f16_in_f32() -> None:
    text = module_text(ir_of("reductions"), "sm_90")
    # float max starts at -inf and propagates NaN, as the CUDA backend's maximum does
    assert re.search(r"reduce %a dim=1 identities=\[0xFF800000 : f32\] .*\n.*\n\s+%combined = maxf %elem, "
                     r"%accum propagate_nan : tile<f32>", text)
    # uint32 min starts at 0xFFFFFFFF and compares unsigned; uint32 max starts at 0
    assert re.search(r"identities=\[-1 : i32\] .*\n.*\n\s+%combined = mini %elem, %accum unsigned", text)
    assert re.search(r"identities=\[0 : i32\] .*\n.*\n\s+%combined = maxi %elem, %accum unsigned", text)
    # the float16 sum widens to f32, reduces, and narrows its result
    assert re.search(r"(%\d+) = ftof %b : tile<32xf16> -> tile<32xf32>\n\s+(%\d+) = reduce \1 dim=0 "
                     r"identities=\[0\.000000e\+00 : f32\] : tile<32xf32> -> tile<f32>", text)
    assert re.search(r"ftof %\d+ : tile<f32> -> tile<f16>", text)


def test_indices_of_mixed_widths_are_widened_to_one_type() -> None:
    text = module_text(ir_of("row_of"), "sm_90")
    assert "%0 = exti %bid_x signed : tile<i32> -> tile<i64>" in text
    assert "load_view_tko weak %x_tiles[%row, %0] optimization_hints = <sm_90 = {allow_tma = false}> :" in text
    assert ", tile<i64> -> tile<1x64xf32>, token" in text



@pytest.mark.parametrize(
    "value, elem, expected",
    [
        (2.0, "f32", "40000000"),
        (0.1, "bf16", "3dcd"),  # float32 0x3dcccccd rounds up to 0x3dcd (truncating gives 0x3dcc)
        (1.0 + 2**-8, "bf16", "3f80"),  # a tie rounds to even
        (1e6, "f16", "7c00"),  # past the f16 range: inf, not an OverflowError
        (-1e300, "f32", "ff800000"),
        (float("nan"), "bf16", "7fc0"),
        (-1, "i32", "ffffffff"),
        (2**64 - 1, "i64", "ffffffffffffffff"),
    ],
)
def test_constant_bytes_round_and_saturate_like_a_cast(value: float, elem: str, expected: str) -> None:
    from tilejit.backends.tileir.module import Scalar, constant_bytes

    assert constant_bytes(value, Scalar(elem))[::-1].hex() == expected


def test_newest_accepted_version_comes_from_tileiras_list() -> None:
    assert newest_accepted("13.1\n13.2\n13.3\n13.4\n13.5\n") == (13, 5)
    assert newest_accepted("13.1\n13.2\n13.3\n") == (13, 3)
    assert newest_accepted("13.1\n13.2\n13.3\n13.4\n13.5\n13.6\n") == (13, 5)  # a newer tileiras
    with pytest.raises(ValueError, match=r"^tileiras accepts bytecode versions 14\.0; this writer emits 13\.1, "):
        newest_accepted("14.0\n")


def test_newest_accepted_of_the_found_tileiras() -> None:
    tileiras = tool("tileiras", "TILEJIT_TILEIRAS")
    if tileiras is None:
        pytest.skip("no tileiras: set TILEJIT_TILEIRAS or install the toolchain into .ci-cache/tileir")
    out = subprocess.run([str(tileiras), "--list-versions"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert newest_accepted(out.stdout) == (13, 5)


def test_every_op_in_the_encoding_table_is_printed_and_exercised_by_the_test_kernels() -> None:
    """So every table row has gone through tileirdisasm and tileiras above or in test_tileir_memory (where they
    are installed)."""
    from tilejit.backends.tileir.lower import lower_function
    from tilejit.backends.tileir.module import OPS, TOp
    from tilejit.backends.tileir.text import OP_TEXT

    def names(ops: list[TOp]) -> set[str]:
        return {op.name for op in ops} | {n for op in ops for b in op.regions for n in names(b.ops)}

    from test_math_ext import TILEIR_OPS_TESTED_HERE as MATH_OPS  # atan2, sinh, cosh, fma go through them there
    from test_tileir_memory import KERNELS as MEMORY_KERNELS
    from test_tileir_memory import ir_of as memory_ir
    from test_tileir_ops import OPS_TESTED_HERE  # the elementwise/reduction ops go through the tools there

    used = set().union(*(names(lower_function(ir_of(k)).functions[0].body) for k in KERNELS))
    used |= set().union(*(names(lower_function(memory_ir(k)).functions[0].body) for k in MEMORY_KERNELS))
    assert set(OP_TEXT) == set(OPS)
    # assume: tests/test_tileir_mma.py; ptr_to_int (versioned read-only loops): tests/test_tileir_loop_versions.py;
    # print_tko: tests/test_device_print.py; extract, cat (tj.extract, tj.cat, tj.split, tj.join): tests/test_slicing.py
    # int_to_ptr (array lists): tests/test_array_list.py
    tested_elsewhere = {"assume", "ptr_to_int", "print_tko", "extract", "cat", "int_to_ptr"}
    assert used | OPS_TESTED_HERE | MATH_OPS | tested_elsewhere == set(OPS)


@pytest.mark.parametrize("version", [VERSIONS[0], VERSIONS[-1]])
def test_ops_carry_the_user_source_locations(version: tuple[int, int], tmp_path: Path) -> None:
    """Each op's debug location is its kernel line and column (tileirdisasm -g shows them)."""
    disasm = tool("tileirdisasm", "TILEJIT_TILEIRDISASM")
    if disasm is None:
        pytest.skip("no tileirdisasm: set TILEJIT_TILEIRDISASM or install the toolchain into .ci-cache/tileir")
    path = tmp_path / "vector_add.tileirbc"
    path.write_bytes(generate_bytecode(ir_of("vector_add"), "sm_90", version))
    out = subprocess.run([str(disasm), "-g", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    src = ROOT / "examples" / "vector_add.py"
    lines = src.read_text().splitlines()
    refs = {ref: f"{path}:{line}:{col}" for ref, path, line, col in re.findall(
        r'^(#loc\d*) = loc\("(.+)":(\d+):(\d+)\)$', out.stdout, re.M)}
    scoped = dict(re.findall(r"^(#loc\d+) = #cuda_tile\.di_loc<(#loc\d*) in #di_subprogram>$", out.stdout, re.M))

    def where(op_pattern: str) -> str:
        m = re.search(op_pattern + r".* loc\((#loc\d+)\)$", out.stdout, re.M)
        assert m, op_pattern
        return refs[scoped[m.group(1)]]

    for pattern, snippet in (("= addf ", "a + b"), ("load_view_tko weak %pview\\[", "tj.load(x"),
                             ("store_view_tko ", "tj.store("), ("get_tile_block_id", "tj.bid(0)")):
        line, col = where_in(lines, snippet)
        assert where(pattern) == f"{src}:{line}:{col + 1}"
    assert 'name = "vector_add", linkageName = "vector_add"' in out.stdout


@tj.kernel
def true_splat(x, out, TILE: tj.Constant[int]):
    i = tj.bid(0)
    keep = tj.maximum(True, tj.load(x, index=(i,), shape=(TILE,)) > 0)
    tj.store(out, index=(i,), tile=tj.where(keep, 1, 2))


def test_a_true_bool_constant_is_a_splat_for_tileirdisasm(tileir_toolchain: Any) -> None:
    """MLIR reads a dense i1 splat of 0x01 as packed bits (only element 0 true): true is written 0xFF (a fuzzed
    program on the GPU read [true, false] for a 2-element tile of True)."""
    from tilejit.compiler.tileiras import disassemble

    art = tj.compile(true_splat, (F32, tj.int32[:]), constants={"TILE": 8}, target="sm_90")
    text = disassemble(art.tileir_bytecode(), toolchain=tileir_toolchain)
    assert re.search(r"constant <i1: true> : tile<8xi1>", text), text
