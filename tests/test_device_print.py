"""Device print: ``print(...)`` and ``tj.print(prefix, *values)`` in tile code, on both backends.

CPU: the print op the front end makes (text around the run-time values, f-strings, ``sep``/``end``, tuples and
``array.shape``, tiles broadcast); located errors for what it refuses (the supported f-string form named); the CUDA
backend's ``printf`` calls and PTX; Tile IR's ``print_tko`` text, its bytecode read back by tileirdisasm (13.1
too, without print tokens) and compiled by tileiras, strings escaped as MLIR writes them.
GPU (marker; each backend): kernels run in a child process whose standard output (where the driver writes device
printf) is parsed: every element of tiles that are not multiples of the tile size with its block and index,
padding included, float16, bool and int64 values, scalars, '%' in the text, and prints in a loop in order.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from source_lines import where_in

import tilejit as tj
from tilejit.errors import TileCompileError
from tilejit.language.frontend.printing import MAX_ELEMENTS, MAX_VALUES
from tilejit.language.ir import ops as O

LINES = Path(__file__).read_text(encoding="utf-8").splitlines()


# --------------------------------------------------------------------------------------------- kernels


def print_tile(x, PAD: tj.Constant[float], TILE: tj.Constant[int]):
    i = tj.bid(0)
    t = tj.load(x, index=(i,), shape=(TILE,), padding=PAD)
    print("v", t, "s", i)


def print_2d(x, m, TR: tj.Constant[int], TC: tj.Constant[int]):
    i, j = tj.bid(0), tj.bid(1)
    t = tj.load(x, index=(i, j), shape=(TR, TC))
    flags = tj.load(m, index=(i, j), shape=(TR, TC))
    print(f"h={t} b={flags} n={t.astype(tj.int64) * 3}")


def print_scalars(x, n):
    i = tj.bid(0)
    tj.print("scalar:", i, n, x.shape, 1.5, "100%d")
    for k in range(3):
        print("step", k, sep="=")


def print_broadcast(x, TILE: tj.Constant[int]):
    col = tj.load(x, index=(0,), shape=(TILE,))
    print("outer", col[:, None], tj.arange(4)[None, :], sep=" | ", end=" .\n")


# --------------------------------------------------------------------------------------------- helpers


def where(snippet: str) -> tuple[int, int]:
    return where_in(LINES, snippet)


def compile_(fn: Any, sig: Any, constants: dict[str, Any] | None = None, target: str = "sm_90") -> Any:
    return tj.compile(tj.kernel(fn), sig, constants=constants or {}, target=target)


def print_ops(art: Any) -> list[O.PrintOp]:
    return [op for op in art.ir().body.walk() if isinstance(op, O.PrintOp)]


SIGS: dict[str, tuple[Any, Any, dict[str, Any]]] = {
    "tile": (print_tile, (tj.float32[:],), {"PAD": -1.5, "TILE": 16}),
    "2d": (print_2d, (tj.float16[:, :], tj.bool_[:, :]), {"TR": 4, "TC": 8}),
    "scalars": (print_scalars, (tj.int32[:], tj.int64), {}),
    "broadcast": (print_broadcast, (tj.float64[:],), {"TILE": 8}),
}


def art_of(name: str, target: str = "sm_90") -> Any:
    fn, sig, constants = SIGS[name]
    return compile_(fn, sig, constants, target)


# --------------------------------------------------------------------------------------------- CPU: front end


def test_print_is_one_op_with_the_text_around_its_run_time_values() -> None:
    (op,) = print_ops(art_of("tile"))
    assert op.texts == ("v ", " s ", "\n")
    assert [v.type.shape for v in op.values] == [(16,), ()]
    (fop,) = print_ops(art_of("2d"))
    assert fop.texts == ("h=", " b=", " n=", "\n")
    assert [(v.type.dtype.name, v.type.shape) for v in fop.values] == [
        ("float16", (4, 8)), ("bool", (4, 8)), ("int64", (4, 8))]


def test_tj_print_sep_end_tuples_shapes_and_compile_time_text() -> None:
    first, loop = print_ops(art_of("scalars"))
    assert first.texts == ("scalar: ", " ", " (", ",) 1.5 100%d\n")  # x.shape is a 1-tuple of a run-time extent
    assert [v.type.dtype.name for v in first.values] == ["int32", "int64", "int64"]
    assert loop.texts == ("step=", "\n")
    (bop,) = print_ops(art_of("broadcast"))
    assert bop.texts == ("outer | ", " | ", " .\n")
    assert [v.type.shape for v in bop.values] == [(8, 4), (8, 4)]  # broadcast to one shape


def k_print_const_only(x):
    print("only", (1, "a"), 2.5, None, sep=",")


def test_a_print_of_compile_time_values_only_is_their_python_text() -> None:
    (op,) = print_ops(compile_(k_print_const_only, (tj.float32[:],)))
    assert op.values == [] and op.texts == ("only,(1, 'a'),2.5,None\n",)


def k_file(x):
    print("x", file=None)  # file-kwarg


def k_spec(x):
    i = tj.bid(0)
    print(f"i={i:4d}")  # fstring-spec


def k_conv(x):
    i = tj.bid(0)
    print(f"i={i!r}")  # fstring-conv


def k_array(x):
    print("arr", x)  # print-array


def k_many(x):
    i = tj.bid(0)
    print(i, i, i, i, i, i, i, i, i, i, i, i, i, i, i, i, i)  # many-values


def k_big(x):
    print(tj.load(x, index=(0,), shape=(8192,)))  # big-tile


def k_shapes(x):
    print(tj.arange(8), tj.arange(16))  # no-broadcast


def k_prefix(x):
    tj.print(tj.bid(0), 1)  # tj-print-prefix


def k_sep(x):
    print("a", "b", sep=tj.bid(0))  # sep-runtime


def k_fstring_outside(x):
    i = tj.bid(0)
    s = f"{i}"  # noqa: F841  (fstring-outside)


@pytest.mark.parametrize(("kernel", "at", "message"), [
    (k_file, 'print("x", file=None)', "print() in tile code takes sep= and end= only, not file="),
    (k_spec, "i:4d}", "print() writes a run-time value of an f-string in its one device format: write f'{x}'"),
    (k_conv, "i!r}", "(not f'{x:.3f}' or f'{x!r}')"),
    (k_array, 'print("arr", x)', "(print its elements: tj.load from 'x')"),
    (k_many, "print(i, i, i,", f"print() of 17 run-time values: at most {MAX_VALUES} per print"),
    (k_big, "print(tj.load(x, index=(0,), shape=(8192,)))",
     f"print() of a tile of shape (8192,) (8192 elements): at most {MAX_ELEMENTS} elements per print"),
    (k_shapes, "print(tj.arange(8), tj.arange(16))", "the tiles printed together must broadcast to one shape"),
    (k_prefix, "tj.print(tj.bid(0), 1)", "tj.print(): prefix must be a compile-time string, got a scalar"),
    (k_sep, 'print("a", "b", sep=tj.bid(0))', "print(): sep must be a compile-time string"),
    (k_fstring_outside, 'f"{i}"', "f-strings can only format compile-time values (print() also takes run-time"),
])
def test_what_print_refuses_is_a_located_error(kernel: Any, at: str, message: str) -> None:
    with pytest.raises(TileCompileError) as info:
        compile_(kernel, (tj.float32[:],)).ir()
    err = info.value
    line, col = where(at)
    assert (err.filename, err.line) == (__file__, line), str(err)
    if at.endswith("}"):  # an f-string's field: located at the field's expression
        col = LINES[line - 1].index(at)
    assert err.col == col, str(err)
    assert message in err.message, err.message


# --------------------------------------------------------------------------------------------- CPU: CUDA backend


def test_cuda_prints_each_owned_element_with_its_block_thread_and_index() -> None:
    source = art_of("2d").cuda_source()
    call = re.search(r'printf\("(.*?)", (.*)\);', source)
    assert call, source
    assert call.group(1) == "pid (%d, %d, %d) tid %d idx (%d, %d) h=%.5g b=%d n=%lld\\012"
    args = call.group(2).split(", ")
    assert args[:4] == ["(int)blockIdx.x", "(int)blockIdx.y", "(int)blockIdx.z", "tj_tid"]
    assert args[4:6] == ["(tj_f >> 3) & 3", "(tj_f >> 0) & 7"]
    assert args[6].startswith("(double)(float)(") and args[7].startswith("(int)(") and args[8].startswith(
        "(long long)(")
    lines = source.splitlines()
    k = next(i for i, line in enumerate(lines) if "printf(" in line)
    assert re.fullmatch(r"\s*if \((L\d+)::owner\(tj_tid\)\) TJ_EACH\(i, \1\) \{", lines[k - 2])
    assert re.fullmatch(r"\s*const int tj_f = L\d+::flat\(tj_tid, i\);", lines[k - 1])


def test_cuda_prints_scalars_once_from_thread_0_and_escapes_the_text() -> None:
    source = art_of("scalars").cuda_source()
    calls = re.findall(r"(if \(tj_tid == 0\) )?printf\(\"(.*?)\", ", source)
    assert calls == [("if (tj_tid == 0) ", "pid (%d, %d, %d) tid %d scalar: %d %lld (%lld,) 1.5 100%%d\\012"),
                     ("if (tj_tid == 0) ", "pid (%d, %d, %d) tid %d step=%d\\012")]


def k_quotes(x):
    print('say "hi" \\ 50% é\t', tj.bid(0))


def test_text_with_quotes_backslashes_and_non_ascii_compiles_to_ptx(nvrtc_here: Path) -> None:
    art = compile_(k_quotes, (tj.float32[:],))
    assert 'say \\"hi\\" \\\\ 50%% \\303\\251\\011 %d' in art.cuda_source()
    text = art.ptx()
    assert "vprintf" in text
    # the format's bytes are a global of the PTX: "%%" (printf's literal '%') and "é"'s UTF-8 bytes among them
    assert re.search(r"\.global \.align 1 \.b8 \$str[^=]*= \{[^}]*37, 37, 32, 195, 169, 9", text), text


def test_every_dtype_prints_on_every_cuda_major(toolkit: Any) -> None:
    from tilejit.bindings.nvrtc import load_nvrtc
    from tilejit.compiler.nvrtc import compile_cuda

    def every(a, b, c, d, e, f, g, h, i, j, k, m, n):
        print(tj.load(a, index=(0,), shape=(4,)), tj.load(b, index=(0,), shape=(4,)),
              tj.load(c, index=(0,), shape=(4,)), tj.load(d, index=(0,), shape=(4,)),
              tj.load(e, index=(0,), shape=(4,)), tj.load(f, index=(0,), shape=(4,)),
              tj.load(g, index=(0,), shape=(4,)), tj.load(h, index=(0,), shape=(4,)),
              tj.load(i, index=(0,), shape=(4,)), tj.load(j, index=(0,), shape=(4,)),
              tj.load(k, index=(0,), shape=(4,)), tj.load(m, index=(0,), shape=(4,)),
              tj.load(n, index=(0,), shape=(4,)))

    names = ("bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
             "bfloat16", "float32", "float64")
    target = "sm_75" if toolkit.major >= 13 else "sm_70"
    ck = compile_(every, tuple(getattr(tj, n)[:] for n in names), target=target).cuda_kernel()
    assert "%d %d %d %d %lld %u %u %u %llu %.5g %.4g %.9g %.17g\\012" in ck.source
    prog = compile_cuda(ck.source, name="every.cu", headers=ck.headers, target=target, output="ptx",
                        nvrtc=load_nvrtc(str(toolkit.nvrtc)), cache=False)
    assert "vprintf" in (prog.code.decode() if isinstance(prog.code, bytes) else prog.code)


# --------------------------------------------------------------------------------------------- CPU: Tile IR


def tileir_text(name: str) -> str:
    from tilejit.backends.tileir import module_text

    return module_text(art_of(name).ir(), "sm_90")


def test_tileir_prints_whole_tiles_with_print_tko() -> None:
    text = tileir_text("2d")
    m = re.search(r'print_tko "pid \(%d, %d, %d\) h=%.5g b=%d n=%lld\\0A", %bid_x, %bid_y, %bid_z, (%\w+), (%\w+), '
                  r"%\w+ token=%\w+ : tile<i32>, tile<i32>, tile<i32>, tile<4x8xf32>, tile<4x8xi32>, tile<4x8xi64> "
                  r"-> token", text)
    assert m, text
    assert re.search(rf"{m.group(1)} = ftof %t : tile<4x8xf16> -> tile<4x8xf32>", text)
    assert re.search(rf"{m.group(2)} = exti %\w+ unsigned : tile<4x8xi1> -> tile<4x8xi32>", text)


def test_tileir_prints_are_chained_in_program_order() -> None:
    text = tileir_text("scalars")
    first = re.search(r'(%\w+) = print_tko "pid \(%d, %d, %d\) scalar: %d %lld \(%lld,\) 1.5 100%%d\\0A"', text)
    assert first, text
    loop = re.search(r"for %k in .* iter_values\(%stored = (%\w+), %loaded = (%\w+)\)", text)
    assert loop and first.group(1) in loop.groups(), text
    assert re.search(r'(%\w+) = print_tko "pid \(%d, %d, %d\) step=%d\\0A", %bid_x, %bid_y, %bid_z, %k '
                     r"token=%\w+ :", text), text


@pytest.mark.parametrize("name", sorted(SIGS))
def test_tileir_print_reads_back_and_compiles(name: str, tileir_toolchain: Any, tmp_path: Path) -> None:
    """tileirdisasm prints the module our text form shows (13.5) and, at 13.1, print_tko with a make_token for
    its token; tileiras compiles both for sm_80, sm_90 and sm_100."""
    from test_tileir_coverage import same_module_text

    from tilejit.backends.tileir import generate_bytecode, module_text
    from tilejit.compiler.tileiras import disassemble, run_tileiras

    ir = art_of(name).ir()
    for target, version in (("sm_100", (13, 1)), ("sm_80", (13, 5)), ("sm_90", (13, 5)), ("sm_100", (13, 5))):
        bc = generate_bytecode(ir, target, version)
        assert run_tileiras(bc, target, toolchain=tileir_toolchain)[:4] == b"\x7fELF", (target, version)
        if tileir_toolchain.tileirdisasm is None or target != "sm_100":
            continue
        disasm = disassemble(bc, toolchain=tileir_toolchain)
        if version == (13, 5):
            assert same_module_text(disasm, module_text(ir, "sm_100")), disasm
        else:  # no print tokens before 13.2: the writer makes each print's token with make_token
            assert disasm.count("make_token") == disasm.count("print_tko") + module_text(ir, "sm_100").count(
                "make_token")


def test_tileir_strings_are_escaped_as_mlir_writes_them(tileir_toolchain: Any) -> None:
    from test_tileir_coverage import same_module_text

    from tilejit.backends.tileir import generate_bytecode, module_text
    from tilejit.backends.tileir.text import string_text
    from tilejit.compiler.tileiras import disassemble

    assert string_text('a "b" \\ é\n') == '"a \\22b\\22 \\\\ \\C3\\A9\\0A"'
    ir = compile_(k_quotes, (tj.float32[:],)).ir()
    ours = module_text(ir, "sm_90")
    assert 'print_tko "pid (%d, %d, %d) say \\22hi\\22 \\\\ 50%% \\C3\\A9\\09 %d\\0A"' in ours
    if tileir_toolchain.tileirdisasm is None:
        pytest.skip("the toolchain has no tileirdisasm")
    assert same_module_text(disassemble(generate_bytecode(ir, "sm_90"), toolchain=tileir_toolchain), ours)


# --------------------------------------------------------------------------------------------- GPU


_CHILD = """
import sys
import numpy as np
import tilejit as tj
sys.path.insert(0, sys.argv[1])
import test_device_print as t
folder = sys.argv[2]
x = np.load(folder + "/x.npy")
tj.kernel(t.print_tile)[3](tj.asarray(x), PAD=-1.5, TILE=16)
h, m = np.load(folder + "/h.npy"), np.load(folder + "/m.npy")
tj.kernel(t.print_2d)[(2, 2)](tj.asarray(h), tj.asarray(m), TR=4, TC=8)
tj.kernel(t.print_scalars)[int(sys.argv[3])](tj.asarray(np.zeros(5, np.int32)), 2**40 + 3)
tj.get_device().synchronize()
"""

_LINE = re.compile(r"pid \((\d+), (\d+), (\d+)\) (.*)")
_NUMBER = re.compile(r"[-+]?(?:nan|inf|\d+(?:\.\d*)?(?:e[-+]?\d+)?)")


def _numbers(text: str) -> list[float]:
    return [float(v) for v in _NUMBER.findall(text)]


def scalar_blocks(backend: str) -> int:
    """Blocks of the scalar-print kernel: one on Tile IR, where tileiras writes a print of scalars in pieces that
    the pieces of other blocks' prints may split (seen on an H100: ``pid (pid (01, , 00, ...``)."""
    return 2 if backend == "cuda" else 1


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """What the child process's kernels print (its standard output's lines by block), with the inputs, per
    backend: (backend, lines, x, h, m)."""
    runs: dict[str, Any] = {}

    def run(backend: str) -> Any:
        if backend not in runs:
            folder = tmp_path_factory.mktemp(f"print-{backend}")
            rng = np.random.default_rng()
            x = rng.standard_normal(37).astype(np.float32)  # 3 tiles of 16: the last one 5 elements
            h = (rng.standard_normal((7, 13)) * 100).astype(np.float16)  # 2x2 tiles of 4x8 cover 8x16
            m = rng.random((7, 13)) < 0.5
            for name, a in (("x", x), ("h", h), ("m", m)):
                np.save(folder / f"{name}.npy", a)
            done = subprocess.run([sys.executable, "-c", _CHILD, str(Path(__file__).parent), str(folder),
                                   str(scalar_blocks(backend))],
                                  env=dict(os.environ), capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stderr[-3000:]
            lines = [m_ for m_ in map(_LINE.fullmatch, done.stdout.splitlines()) if m_]
            assert len(lines) == len(done.stdout.splitlines()), done.stdout[:3000]
            runs[backend] = (lines, x, h, m)
        return runs[backend]

    return run


@pytest.mark.gpu
def test_a_tile_prints_every_element_padding_included(printed: Any, tj_backend: str) -> None:
    lines, x, _, _ = printed(tj_backend)
    tile_lines = [m for m in lines if m.group(4).startswith(("v ", "tid")) and " v " in f" {m.group(4)}"]
    padded = np.concatenate([x, np.full(48 - 37, -1.5, np.float32)]).reshape(3, 16)
    if tj_backend == "cuda":
        seen: dict[tuple[int, int], float] = {}
        for m in tile_lines:
            rest = re.fullmatch(r"tid (\d+) idx \((\d+)\) v (\S+) s (\d+)", m.group(4))
            assert rest, m.group(0)
            b, j = int(m.group(1)), int(rest.group(2))
            assert (m.group(2), m.group(3)) == ("0", "0") and int(rest.group(4)) == b and int(rest.group(1)) >= 0
            assert (b, j) not in seen, m.group(0)  # each element once (by the thread that owns it)
            seen[(b, j)] = float(rest.group(3))
        assert sorted(seen) == [(b, j) for b in range(3) for j in range(16)]
        got = np.array([[seen[(b, j)] for j in range(16)] for b in range(3)], np.float32)
    else:
        by_block = {}
        for m in tile_lines:
            rest = re.fullmatch(r"v (.*) s (\d+)", m.group(4))
            assert rest and int(rest.group(2)) == int(m.group(1)), m.group(0)
            by_block[int(m.group(1))] = _numbers(rest.group(1))
        assert sorted(by_block) == [0, 1, 2]
        got = np.array([by_block[b] for b in range(3)], np.float32)
    np.testing.assert_array_equal(got, padded)  # %.9g reads back to the same float32


@pytest.mark.gpu
def test_a_2d_print_of_float16_bools_and_int64(printed: Any, tj_backend: str) -> None:
    lines, _, h, m = printed(tj_backend)
    hp = np.zeros((8, 16), np.float16)
    hp[:7, :13] = h
    mp = np.zeros((8, 16), bool)
    mp[:7, :13] = m
    ours = [x for x in lines if "h=" in x.group(4)]
    got_h, got_b, got_n = (np.full((8, 16), np.nan) for _ in range(3))
    for line in ours:
        bi, bj = int(line.group(1)), int(line.group(2))
        if tj_backend == "cuda":
            rest = re.fullmatch(r"tid \d+ idx \((\d+), (\d+)\) h=(\S+) b=([01]) n=(-?\d+)", line.group(4))
            assert rest, line.group(0)
            r, c = bi * 4 + int(rest.group(1)), bj * 8 + int(rest.group(2))
            assert np.isnan(got_h[r, c]), line.group(0)
            got_h[r, c], got_b[r, c], got_n[r, c] = (float(rest.group(k)) for k in (3, 4, 5))
        else:
            rest = re.fullmatch(r"h=(.*) b=(.*) n=(.*)", line.group(4))
            assert rest, line.group(0)
            for k, target in zip((1, 2, 3), (got_h, got_b, got_n)):
                target[bi * 4:bi * 4 + 4, bj * 8:bj * 8 + 8] = np.array(_numbers(rest.group(k))).reshape(4, 8)
    assert len(ours) == (2 * 2 * 32 if tj_backend == "cuda" else 4)
    np.testing.assert_array_equal(got_h.astype(np.float16), hp)
    np.testing.assert_array_equal(got_b, mp.astype(np.float64))
    np.testing.assert_array_equal(got_n, hp.astype(np.int64) * 3)


@pytest.mark.gpu
def test_scalars_print_once_per_block_and_a_loops_prints_in_order(printed: Any, tj_backend: str) -> None:
    lines, _, _, _ = printed(tj_backend)
    head = "tid 0 " if tj_backend == "cuda" else ""
    for b in range(scalar_blocks(tj_backend)):
        mine = [x.group(4) for x in lines if int(x.group(1)) == b and ("scalar:" in x.group(4) or "step" in
                                                                          x.group(4))]
        assert mine == [f"{head}scalar: {b} {2**40 + 3} (5,) 1.5 100%d", f"{head}step=0", f"{head}step=1",
                        f"{head}step=2"]
