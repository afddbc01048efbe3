"""Tile IR coverage on the CPU: every example, and every kernel the CPU tests compile with the CUDA backend,
becomes Tile IR bytecode that tileiras compiles for sm_80, sm_90 and sm_100 and tileirdisasm reads back (the
text form of small kernels checked against tileirdisasm's).

The CPU tests' kernels are recorded as they compile (``conftest`` wraps the CUDA code generator and the IR
passes: each kernel the CUDA backend compiles, or that a test takes to optimized IR and the CUDA backend
compiles, in a test not marked ``gpu`` or ``cuda_only``, is lowered to Tile IR at once with :func:`record`); at
the session's end (after every pytest-xdist worker) :func:`check_records` runs the toolchain on each distinct
module and the run fails on any problem, listed in the terminal summary. A kernel the lowering refuses
("the Tile IR backend cannot express ...") must be in ``EXPECTED_REFUSALS``, and a kernel listed there must
still be refused, so the list shrinks as the lowering's coverage grows.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from test_tileir_writer import normalized

import tilejit as tj

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))
#: The targets every module must compile for, and the bytecode version written (the newest; sm_90 needs 13.3+).
TARGETS = ("sm_80", "sm_90", "sm_100")
#: How long tileiras may take for one module and target before that is a problem (a hang, not a slow compile): the
#: largest module, the float32 layer norm over 65536-element rows, takes 84 s for sm_80 alone on a 2-CPU machine, and
#: went past 120 s there while other tileiras runs shared the CPUs.
TILEIRAS_SECONDS = 300.0
#: Modules of at most this many text lines get their text form compared with tileirdisasm's.
SMALL_TEXT_LINES = 60

#: Kernels of the CPU tests ("<test file>::<test function>::<kernel>") and examples ("examples/<file>::<kernel>")
#: the Tile IR lowering refuses by design, with the refusal (a part of its message): what Tile IR or tileiras
#: cannot do. A refusal not listed is a failure, and so is a listed kernel that compiles.
EXPECTED_REFUSALS: dict[str, str] = {
    # Tile IR has no cube root: tj.fuse's math test runs it with the CUDA backend alone.
    "test_fuse.py::test_interpreted_math_functions::cube_root": "fn='cbrt'",
    # A return inside a loop: Tile IR's return may not leave a loop body.
    "test_tileir_control.py::test_a_return_inside_a_loop_is_a_located_refusal::return_in_loop":
        "'return' (inside a loop",
    # ... which auto compiles with CUDA C++ instead.
    "test_backend_auto.py::test_compile_falls_back_to_cuda_for_a_kernel_tile_ir_refuses::_return_in_loop":
        "'return' (inside a loop",
    "test_backend_auto.py::test_a_launch_falls_back_to_the_cuda_targets_and_a_warm_process_skips_tile_ir::"
    "_return_in_loop": "'return' (inside a loop",
    # bfloat16 atomic add before sm_90 (tileiras rejects it): the tests' examples of a refused op.
    "test_tileir_backend.py::test_an_op_the_writer_lacks_is_a_located_error::_bf16_add": "atomic_add on bfloat16",
    "test_tileir_control.py::test_an_op_refused_inside_a_loop_is_located_at_its_line::bf16_add_in_loop":
        "atomic_add on bfloat16",
    "test_tileir_memory.py::test_tileiras_compiles_and_tileirdisasm_reads_back::atomic_add": "atomic_add on bfloat16",
    "test_tileir_writer.py::test_every_op_in_the_encoding_table_is_printed_and_exercised_by_the_test_kernels::"
    "atomic_add": "atomic_add on bfloat16",
    "test_tileir_writer.py::test_unsupported_op_is_a_located_error_naming_it::uses_bf16_add": "atomic_add on bfloat16",
    "test_backend_codegen.py::test_out_of_range_float_constants_compile::_literal_everywhere": "atomic_add on bfloat16",
    # The CUDA backend's every-op kernels (built with the IR builder, beyond what the front end takes): 16-bit
    # atomics other than float adds, float16 atomic max/min (a CAS loop needs 32-bit words), bf16 adds on sm_80.
    "test_backend_codegen.py::test_every_op_compiles_each_cuda_major::all_bfloat16": "atomic_add on bfloat16",
    "test_backend_codegen.py::test_every_op_compiles_nvrtc13::all_bfloat16": "atomic_add on bfloat16",
    "test_backend_codegen.py::test_every_op_compiles_each_cuda_major::all_float16": "atomic_max on float16",
    "test_backend_codegen.py::test_every_op_compiles_nvrtc13::all_float16": "atomic_max on float16",
    "test_backend_codegen.py::test_every_op_compiles_each_cuda_major::all_uint16": "atomic_add on uint16",
    "test_backend_codegen.py::test_every_op_compiles_nvrtc13::all_uint16": "atomic_add on uint16",
    "test_backend_codegen.py::test_every_op_compiles_nvrtc13::all_int16": "atomic_add on int16",
    # The old values of a float atomic max/min: the CAS loop returning them hung on an H100 (tileiras 13.5).
    "test_tileir_memory.py::test_the_old_values_of_a_float_atomic_max_min_are_a_located_refusal::atomic_max":
        "the old values of atomic_max",
    "test_tileir_memory.py::test_the_old_values_of_a_float_atomic_max_min_are_a_located_refusal::atomic_min":
        "the old values of atomic_min",
    "test_tileir_memory.py::test_atomics_gpu::atomic_max": "the old values of atomic_max",
    "test_tileir_memory.py::test_atomics_gpu::atomic_min": "the old values of atomic_min",
    # tj.fence: Tile IR has no memory fence.
    "test_sync.py::test_tileir_refuses_a_fence_naming_the_cuda_backend::fence_only": "'fence' (tj.fence(): Tile IR",
    # int16 inputs into int64 on a 128x32x128 tile: past mmai's types and the product tile's size.
    "test_backend_codegen.py::test_matmul_variants_compile::matmul": "'mma' (int16 inputs with a int64 accumulator",
}

_REFUSAL = re.compile(r"the Tile IR backend cannot express .*? yet")
_FLOAT_CONSTANT = re.compile(r"<(f16|bf16|f32|tf32|f64): ([^>]+)>")
_FLOAT_BITS = {"f16": ("<H", "<e"), "f32": ("<I", "<f"), "tf32": ("<I", "<f"), "f64": ("<Q", "<d")}


def _float_value(elem: str, text: str) -> str:
    """One float constant as the value of its type it names: tileirdisasm writes finite ones in decimal (with as
    few digits as it likes), our text form writes their bits in hex (or short decimals)."""
    if elem == "bf16" and text.startswith("0x"):
        text, elem = hex(int(text, 16) << 16), "f32"
    as_int, as_float = _FLOAT_BITS["f32" if elem == "bf16" else elem]
    if text.startswith("0x"):
        return repr(struct.unpack(as_float, struct.pack(as_int, int(text, 16)))[0])
    try:
        value = struct.unpack(as_float, struct.pack(as_float, float(text)))[0]  # rounded to the type
    except (OverflowError, struct.error):
        return repr(float(text))
    if elem == "bf16":  # a short decimal of a bfloat16 (tileirdisasm's 8.710930e-01, ours 8.710940e-01): to bf16
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
        if bits & 0x7F800000 != 0x7F800000:  # finite: round the float32 to nearest even at 16 bits
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        value = struct.unpack("<f", struct.pack("<I", bits))[0]
    return repr(value)


def same_module_text(disassembled: str, ours: str) -> bool:
    """Whether tileirdisasm's text and our text form show one module: value names and float spellings aside."""
    def canonical(text: str) -> list[str]:
        return normalized(_FLOAT_CONSTANT.sub(lambda m: f"<{m[1]}: {_float_value(m[1], m[2].strip())}>", text))

    return canonical(disassembled) == canonical(ours)


@dataclass
class Record:
    """A kernel one CPU test compiled with the CUDA backend, lowered to Tile IR: its bytecode (13.5) and,
    when small, its text form; or the lowering's refusal; or the lowering's unexpected error."""

    key: str  # "<test file>::<test function>::<kernel name>"
    test: str  # the node id of the test that compiled it
    bytecode: bytes | None = None
    text: str | None = None
    refusal: str | None = None
    error: str | None = None
    targets: tuple[str, ...] = TARGETS  # those Tile IR has the kernel's types for (8-bit floats: from sm_89)


def kernel_targets(fn: Any) -> tuple[str, ...]:
    """The ``TARGETS`` a kernel is checked for: tileiras has the 8-bit floats from sm_89 on (before, the lowering
    refuses them, naming the CUDA backend)."""
    from tilejit.language.ir.types import ArrayType, TileType

    types = [p.type for p in fn.params] + [r.type for op in fn.body.walk() for r in op.results]
    fp8 = any(isinstance(t, ArrayType | TileType) and t.dtype.is_float8 for t in types)
    return tuple(t for t in TARGETS if t != "sm_80") if fp8 else TARGETS


def record(fn: Any, test: str) -> Record:
    """Lower ``fn`` (a tile IR function the CUDA backend just compiled in ``test``) to Tile IR; never raises."""
    from tilejit.backends.tileir import generate_bytecode, module_text
    from tilejit.errors import TileCompileError

    file, _, function = test.partition("::")
    rec = Record(key=f"{Path(file).name}::{function.split('[')[0]}::{fn.name}", test=test)
    try:
        rec.targets = kernel_targets(fn)
        for target in rec.targets:  # what a target lacks (bf16 atomic add before sm_90) is refused for it alone
            bytecode = generate_bytecode(fn, target)
        rec.bytecode = generate_bytecode(fn, "sm_90") if target != "sm_90" else bytecode
        text = module_text(fn, "sm_90")
        rec.text = text if text.count("\n") <= SMALL_TEXT_LINES else None
    except TileCompileError as exc:
        found = _REFUSAL.search(str(exc))
        if found:
            rec.refusal = found.group(0)
        else:
            rec.error = f"the Tile IR lowering raised a TileCompileError that is no refusal: {exc}"
    except Exception as exc:  # a crash of the lowering: reported by check_records, never a test's failure
        rec.error = f"the Tile IR lowering crashed: {type(exc).__name__}: {exc}"
    return rec


@dataclass
class Outcome:
    """What :func:`check_records` found: the problems (each a line), and counts for the summary."""

    problems: list[str] = field(default_factory=list)
    kernels: int = 0
    modules: int = 0
    refused: int = 0


def check_records(records: list[Record], toolchain: Any, expected: dict[str, str] | None = None,
                  workers: int | None = None) -> Outcome:
    """Run ``toolchain`` on every distinct module of ``records``: tileiras for each of ``TARGETS`` and
    tileirdisasm (its text compared with ours for small modules), unless ``toolchain`` is None; and hold the
    refusals to ``expected`` (default ``EXPECTED_REFUSALS``): a refusal not listed, or a listed kernel not
    refused, is a problem."""
    from tilejit.compiler.tileiras import disassemble, run_tileiras

    expected = EXPECTED_REFUSALS if expected is None else expected
    out = Outcome()
    by_key: dict[str, list[Record]] = {}
    for rec in records:
        by_key.setdefault(rec.key, []).append(rec)
    out.kernels = len(by_key)
    modules: dict[bytes, Record] = {}
    for key, recs in sorted(by_key.items()):
        refusals = [r for r in recs if r.refusal is not None]
        out.problems += [f"{key} (in {r.test}): {r.error}" for r in recs if r.error is not None]
        if refusals:
            out.refused += 1
            if key not in expected:
                out.problems.append(f"{key} (in {refusals[0].test}): refused but not in EXPECTED_REFUSALS: "
                                    f"{refusals[0].refusal}")
            elif not any(expected[key] in (r.refusal or "") for r in refusals):
                out.problems.append(f"{key}: refused with {refusals[0].refusal!r}, EXPECTED_REFUSALS says "
                                    f"{expected[key]!r}")
        elif key in expected:
            out.problems.append(f"{key}: in EXPECTED_REFUSALS but now lowers to Tile IR: remove it from the list")
        for r in recs:
            if r.bytecode is not None:
                modules.setdefault(r.bytecode, r)
    out.modules = len(modules)
    if toolchain is None:
        return out

    def check(rec: Record) -> list[str]:
        assert rec.bytecode is not None
        found = []
        for target in rec.targets:
            try:
                run_tileiras(rec.bytecode, target, toolchain=toolchain, timeout=TILEIRAS_SECONDS)
            except Exception as exc:
                found.append(f"{rec.key} (in {rec.test}): tileiras for {target}: {exc}")
        try:
            disasm = disassemble(rec.bytecode, toolchain=toolchain)
        except Exception as exc:
            return [*found, f"{rec.key} (in {rec.test}): tileirdisasm: {exc}"]
        if rec.text is not None and not same_module_text(disasm, rec.text):
            found.append(f"{rec.key} (in {rec.test}): tileirdisasm prints another module than the text form:\n"
                         f"{disasm}\n--- ours ---\n{rec.text}")
        return found

    with concurrent.futures.ThreadPoolExecutor(workers or os.cpu_count() or 4) as pool:
        for found in pool.map(check, modules.values()):
            out.problems += found
    return out


# ----------------------------------------------------------------------------------------------- examples


def _example_kernels(name: str, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, tuple[Any, ...], dict[str, Any]]]:
    """(kernel, signature, constants) of each compile example ``name`` makes with ``--compile-only`` (each of
    its ``--dtype`` choices (``DTYPES``) where it has them)."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    module = __import__(name)
    found: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []
    monkeypatch.setattr(module, "compile_only", lambda args, k, sig, consts: found.append((k, sig, consts)))
    variants = [["--dtype", d] for d in sorted(getattr(module, "DTYPES", {}))] or [[]]
    for extra in variants:
        monkeypatch.setattr(sys, "argv", [f"{name}.py", "--compile-only", *extra])
        module.main()
    return found


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_compiles_to_tile_ir_for_each_target(name: str, tileir_toolchain: Any,
                                                          monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each example's kernel: bytecode that tileiras compiles for sm_80, sm_90 and sm_100 into a CUBIN, that
    tileirdisasm reads back as the module the text form shows."""
    import conftest

    from tilejit.compiler.tileiras import disassemble

    monkeypatch.setattr(conftest, "_RECORDING_FOR", [""])  # checked here, not again by the session's check
    monkeypatch.setenv("TILEJIT_TILEIRAS", tileir_toolchain.tileiras)
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    kernels = _example_kernels(name, monkeypatch)
    assert kernels, f"examples/{name}.py compiled nothing with --compile-only"
    for kernel, signature, constants in kernels:
        key = f"examples/{name}.py::{kernel.__name__}"
        try:
            arts = [tj.compile(kernel, signature, constants=constants, target=target, backend="tileir")
                    for target in TARGETS]
            bytecode = arts[0].tileir_bytecode()
        except tj.TileCompileError as exc:
            found = _REFUSAL.search(str(exc))
            assert found and key in EXPECTED_REFUSALS, f"{key}: refused but not in EXPECTED_REFUSALS: {exc}"
            assert EXPECTED_REFUSALS[key] in found.group(0), f"{key}: refused with {found.group(0)!r}"
            continue
        assert key not in EXPECTED_REFUSALS, f"{key}: in EXPECTED_REFUSALS but now lowers to Tile IR: remove it"
        for art in arts:
            assert art.image().image[:4] == b"\x7fELF"
        assert bytecode[:8] == b"\x7fTileIR\x00"
        assert same_module_text(disassemble(bytecode, toolchain=tileir_toolchain), arts[0].tileir_text())


# ----------------------------------------------------------------------------------------------- the check


@tj.kernel
def _cov_add(x, y, out):  # type: ignore[no-untyped-def]
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(64,)) + tj.load(y, index=(i,), shape=(64,)))


F32 = (tj.float32[:], tj.float32[:], tj.float32[:])


def test_a_kernel_a_cpu_test_compiles_with_cuda_is_recorded(request: pytest.FixtureRequest) -> None:
    """conftest's hook records this test's CUDA compile, lowered to Tile IR, under this file and kernel."""
    import conftest

    before = len(conftest.CUDA_COMPILED)
    tj.compile(_cov_add, F32, target="sm_90", backend="cuda").cuda_source()
    new = conftest.CUDA_COMPILED[before:]
    key = "test_tileir_coverage.py::test_a_kernel_a_cpu_test_compiles_with_cuda_is_recorded::_cov_add"
    assert [(r.key, r.test) for r in new] == [(key, request.node.nodeid)]
    assert new[0].bytecode is not None and new[0].bytecode[:8] == b"\x7fTileIR\x00"
    assert new[0].text is not None and new[0].text.startswith("cuda_tile.module @_cov_add {")


def _refused_record(key: str) -> Record:
    return Record(key=key, test=f"{key.split('::')[0]}::test_x",
                  refusal="the Tile IR backend cannot express 'frob' yet")


def test_the_check_holds_refusals_to_the_list_both_ways() -> None:
    """A refusal not listed fails, a listed kernel that lowers fails, a listed refusal passes, a different
    refusal than the one listed fails, and a crash of the lowering always fails."""
    ok = record(tj.compile(_cov_add, F32, target="sm_90", backend="cuda").ir(), "test_a.py::test_ok")
    assert ok.refusal is None and ok.error is None
    listed = {"test_b.py::frob": "cannot express 'frob'", "test_a.py::test_ok::_cov_add": "cannot express 'add'"}
    crash = Record(key="test_c.py::k", test="test_c.py::test_y", error="the Tile IR lowering crashed: KeyError: 3")
    got = check_records([_refused_record("test_b.py::frob"), _refused_record("test_d.py::frob"), crash, ok],
                        None, listed).problems
    assert got == [
        "test_a.py::test_ok::_cov_add: in EXPECTED_REFUSALS but now lowers to Tile IR: remove it from the list",
        "test_c.py::k (in test_c.py::test_y): the Tile IR lowering crashed: KeyError: 3",
        "test_d.py::frob (in test_d.py::test_x): refused but not in EXPECTED_REFUSALS: the Tile IR backend "
        "cannot express 'frob' yet",
    ]
    assert check_records([_refused_record("test_b.py::frob")], None, {"test_b.py::frob": "'grok'"}).problems == [
        "test_b.py::frob: refused with \"the Tile IR backend cannot express 'frob' yet\", EXPECTED_REFUSALS says "
        "\"'grok'\""]


def test_the_check_runs_tileiras_for_each_target_and_tileirdisasm(tileir_toolchain: Any) -> None:
    """A good module passes; bytecode tileiras cannot read is a problem for each target and tileirdisasm; a
    text form that is not the module's is a problem."""
    rec = record(tj.compile(_cov_add, F32, target="sm_90", backend="cuda").ir(), "test_a.py::test_ok")
    assert check_records([rec], tileir_toolchain, {}).problems == []
    assert rec.bytecode is not None and rec.text is not None
    broken = Record(key="test_a.py::broken", test="test_a.py::test_x", bytecode=rec.bytecode[:40])
    problems = check_records([broken], tileir_toolchain, {}).problems
    steps = [m.group(1) for m in (re.search(r"\): (tileiras for sm_\d+|tileirdisasm): ", p) for p in problems) if m]
    assert steps == ["tileiras for sm_80", "tileiras for sm_90", "tileiras for sm_100", "tileirdisasm"], problems
    wrong = Record(key="test_a.py::wrong", test="test_a.py::test_x", bytecode=rec.bytecode,
                   text=rec.text.replace("addf", "subf"))
    (problem,) = check_records([wrong], tileir_toolchain, {}).problems
    assert "tileirdisasm prints another module than the text form" in problem


@tj.kernel
def _cov_fp8(x, y, out):  # type: ignore[no-untyped-def]
    i = tj.bid(0)
    tj.store(y, index=(i,), tile=tj.load(x, index=(i,), shape=(64,)).astype(y.dtype))
    tj.store(out, index=(i,), tile=tj.load(y, index=(i,), shape=(64,)).astype(tj.float32))


def test_kernels_with_8_bit_floats_are_checked_from_sm_89(tileir_toolchain: Any) -> None:
    """Tile IR has f8E4M3FN and f8E5M2 from sm_89 on (the lowering refuses them before): a kernel with 8-bit floats
    is lowered and compiled for the targets past sm_80, and passes; other kernels keep every target."""
    sig = (tj.float32[:], tj.float8_e4m3fn[:], tj.float32[:])
    rec = record(tj.compile(_cov_fp8, sig, target="sm_90", backend="cuda").ir(), "test_a.py::test_fp8")
    assert rec.targets == ("sm_90", "sm_100") and rec.error is None and rec.refusal is None
    assert check_records([rec], tileir_toolchain, {}).problems == []
    assert record(tj.compile(_cov_add, F32, target="sm_90", backend="cuda").ir(), "test_a.py::test_ok").targets == \
        TARGETS
