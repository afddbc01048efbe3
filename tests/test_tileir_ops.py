"""Elementwise, cast, shape, reduction and scan ops in the Tile IR lowering.

CPU: every (fn, dtype) the lowering covers, compiled through tileiras for sm_80, sm_90 and sm_100 at the
oldest bytecode version each target takes and at 13.5, and read back with tileirdisasm (the kernels of one
kind are entries of one module, so each toolchain run checks many); golden text for a few lowerings;
located refusals. GPU: each op on both backends with the same fresh random inputs (edge values where the
semantics are subtle), sizes off the tile, outputs poisoned first, compared with numpy and with each other.
Bool data travels as uint8 (the kernels turn it into bool with ``!= 0`` and back with ``astype``).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _kernels import ALL, BF16, FLOATS, INTS, RTOL, binary_op, np_dtype, poison, reduce_op, unary_op

import tilejit as tj
from tilejit.backends.tileir.module import TFunction, TModule

MATH = ["exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf"]
UNARY = ["neg", "invert", "abs", "floor", "ceil", *MATH]
BINARY = ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "maximum", "minimum", "and", "or", "xor",
          "lshift", "rshift", "mulhi"]
COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]
REDUCE = ["sum", "prod", "max", "min", "argmax", "argmin", "cumsum"]
#: (target, bytecode version) builds: every target, and the oldest and newest versions (sm_90 needs 13.3+).
BUILDS = [("sm_100", "13.1"), ("sm_80", "13.2"), ("sm_90", "13.5")]


def dt(name: str) -> Any:
    """The tilejit dtype called ``name``."""
    return tj.bool_ if name == "bool" else getattr(tj, name)


def mem(name: str) -> str:
    """The dtype an array of ``name`` data has (bool travels as uint8)."""
    return "uint8" if name == "bool" else name


# --------------------------------------------------------------------------------------------- kernels


@tj.kernel
def unary_k(x, out, FN: tj.Constant[str], BOOL: tj.Constant[bool], TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(TILE,))
    if BOOL:
        a = a != 0
    r = unary_op(FN, a)
    tj.store(out, index=(i,), tile=r.astype(out.dtype))


@tj.kernel
def binary_k(x, y, out, OP: tj.Constant[str], BOOL: tj.Constant[bool], TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(TILE,))
    b = tj.load(y, index=(i,), shape=(TILE,))
    if BOOL:
        a = a != 0
        b = b != 0
    r = binary_op(OP, a, b)
    tj.store(out, index=(i,), tile=r.astype(out.dtype))


@tj.kernel
def cast_k(x, out, DST: tj.Constant[object], BOOL: tj.Constant[bool], TILE: tj.Constant[int]):
    i = tj.bid(0)
    a = tj.load(x, index=(i,), shape=(TILE,))
    if BOOL:
        a = a != 0
    tj.store(out, index=(i,), tile=a.astype(DST).astype(out.dtype))


@tj.kernel
def where_k(c, x, y, out, TILE: tj.Constant[int]):
    i = tj.bid(0)
    cond = tj.load(c, index=(i,), shape=(TILE,)) != 0
    a = tj.load(x, index=(i,), shape=(TILE,))
    b = tj.load(y, index=(i,), shape=(TILE,))
    tj.store(out, index=(i,), tile=tj.where(cond, a, b))


@tj.kernel
def reduce_k(x, out, FN: tj.Constant[str], BOOL: tj.Constant[bool], BM: tj.Constant[int], BN: tj.Constant[int]):
    i = tj.bid(0)
    t = tj.load(x, index=(i, 0), shape=(BM, BN))
    if BOOL:
        t = t != 0
    r = reduce_op(FN, t, 1)
    tj.store(out, index=(i,), tile=r.astype(out.dtype))


@tj.kernel
def reduce_cols_k(x, out, FN: tj.Constant[str], BM: tj.Constant[int], BN: tj.Constant[int]):
    j = tj.bid(0)
    t = tj.load(x, index=(0, j), shape=(BM, BN))
    r = reduce_op(FN, t, 0)
    tj.store(out, index=(j,), tile=r.astype(out.dtype))


@tj.kernel
def cumsum_k(x, out, BOOL: tj.Constant[bool], AXIS: tj.Constant[int], BM: tj.Constant[int], BN: tj.Constant[int]):
    i, j = tj.bid(0), tj.bid(1)
    t = tj.load(x, index=(i, j), shape=(BM, BN))
    if BOOL:
        t = t != 0
    tj.store(out, index=(i, j), tile=tj.cumsum(t, axis=AXIS).astype(out.dtype))


@tj.kernel
def shape_k(x, out, OP: tj.Constant[str], BOOL: tj.Constant[bool], BM: tj.Constant[int], BN: tj.Constant[int]):
    i, j = tj.bid(0), tj.bid(1)
    t = tj.load(x, index=(i, j), shape=(BM, BN))
    if BOOL:
        t = t != 0
    if OP == "transpose":
        tj.store(out, index=(j, i), tile=tj.transpose(t).astype(out.dtype))
    elif OP == "permute3":
        p = tj.transpose(tj.reshape(t, (BM, 2, BN // 2)), (2, 0, 1))
        tj.store(out, index=(i, j), tile=tj.reshape(tj.transpose(p, (1, 2, 0)), (BM, BN)).astype(out.dtype))
    elif OP == "broadcast":
        row = tj.load(x, index=(0, j), shape=(1, BN))
        if BOOL:
            row = row != 0
        tj.store(out, index=(i, j), tile=(tj.broadcast_to(row, (BM, BN)) ^ t).astype(out.dtype))
    else:
        tj.store(out, index=(i, j), tile=tj.reshape(tj.reshape(t, (BM * BN,)), (BM, BN)).astype(out.dtype))


@tj.kernel
def creation_k(out, WHAT: tj.Constant[str], DT: tj.Constant[object], VALUE: tj.Constant[object],
               N: tj.Constant[int]):
    if WHAT == "arange":
        t = tj.arange(N, DT)
    else:
        t = tj.full((N,), VALUE, DT)
    tj.store(out, index=(tj.bid(0),), tile=t.astype(out.dtype))


# --------------------------------------------------------------------------------------------- the cases

Case = tuple[Any, tuple[Any, ...], dict[str, Any]]


def unary_out(fn: str, dtype: str) -> str:
    """The dtype of ``fn(x)`` for an ``x`` of ``dtype``, as memory holds it."""
    if fn in MATH:
        return dtype if dtype in FLOATS else "float32"
    return mem(dtype)


def unary_dtypes(fn: str) -> list[str]:
    """The dtypes the front end takes ``fn`` on."""
    if fn == "neg":
        return INTS + FLOATS
    if fn == "invert":
        return ["bool", *INTS]
    return ALL


def binary_out(op: str, dtype: str) -> str:
    """The dtype of ``x op y`` for two ``dtype`` operands, as memory holds it."""
    if op in COMPARE:
        return "uint8"
    if op == "truediv" and dtype not in FLOATS:
        return "float32"
    if dtype == "bool":
        return "int8" if op in ("floordiv", "mod", "pow") else "uint8"
    return dtype


def binary_dtypes(op: str) -> list[str]:
    """The dtypes the front end takes ``op`` on (bool - bool is an error, as in numpy)."""
    if op in ("and", "or", "xor"):
        return ["bool", *INTS]
    if op in ("lshift", "rshift", "mulhi"):
        return INTS
    if op == "sub":
        return INTS + FLOATS
    return ALL


def reduce_out(fn: str, dtype: str) -> str:
    """The dtype of ``fn`` over a ``dtype`` tile (sums of narrow ints and bools widen to 32 bits)."""
    if fn.startswith("arg"):
        return "int32"
    if fn in ("sum", "prod", "cumsum") and (dtype == "bool" or (dtype in INTS and int(dtype[-2:].lstrip("t")) < 32)):
        return "uint32" if dtype.startswith("u") else "int32"
    return mem(dtype)


def a1(name: str) -> Any:
    """A rank-1 array type of the memory dtype of ``name``."""
    return dt(mem(name))[:]


def a2(name: str) -> Any:
    """A rank-2 array type of the memory dtype of ``name``."""
    return dt(mem(name))[:, :]


def cases(kind: str) -> dict[str, Case]:
    """The kernels of one kind of op, by a name that says what each covers."""
    out: dict[str, Case] = {}
    if kind == "unary":
        for fn in UNARY:
            for d in unary_dtypes(fn):
                out[f"{fn}_{d}"] = (unary_k, (a1(d), a1(unary_out(fn, d))),
                                    {"FN": fn, "BOOL": d == "bool", "TILE": 128})
    elif kind == "binary":
        for op in BINARY + COMPARE:
            for d in binary_dtypes(op) if op in BINARY else ALL:
                out[f"{op}_{d}"] = (binary_k, (a1(d), a1(d), a1(binary_out(op, d))),
                                    {"OP": op, "BOOL": d == "bool", "TILE": 64})
        for d in ALL:
            out[f"where_{d}"] = (where_k, (tj.uint8[:], a1(d), a1(d), a1(d)), {"TILE": 64})
    elif kind == "cast":
        for s in ALL:
            for d in ALL:
                out[f"{s}_to_{d}"] = (cast_k, (a1(s), a1(d)), {"DST": dt(d), "BOOL": s == "bool", "TILE": 64})
    elif kind == "reduce":
        for fn in REDUCE:
            for d in ALL:
                if fn == "cumsum":
                    for axis in (0, 1):
                        out[f"cumsum{axis}_{d}"] = (cumsum_k, (a2(d), a2(reduce_out(fn, d))),
                                                    {"BOOL": d == "bool", "AXIS": axis, "BM": 8, "BN": 32})
                else:
                    out[f"{fn}_{d}"] = (reduce_k, (a2(d), a1(reduce_out(fn, d))),
                                        {"FN": fn, "BOOL": d == "bool", "BM": 8, "BN": 64})
        for fn in ("sum", "max", "argmin"):
            for d in ("int16", "float16", "float64"):
                out[f"{fn}_cols_{d}"] = (reduce_cols_k, (a2(d), a1(reduce_out(fn, d))), {"FN": fn, "BM": 16, "BN": 8})
    else:  # shape and creation
        for op in ("transpose", "permute3", "broadcast", "reshape"):
            for d in ("bool", "int8", "uint16", "int64", "bfloat16", "float32"):
                if op == "broadcast" and d in FLOATS:
                    continue
                out[f"{op}_{d}"] = (shape_k, (a2(d), a2(d)), {"OP": op, "BOOL": d == "bool", "BM": 16, "BN": 8})
        for d in ALL:
            value = True if d == "bool" else -3.25 if d in FLOATS else -3 if not d.startswith("u") else 200
            out[f"full_{d}"] = (creation_k, (a1(d),), {"WHAT": "full", "DT": dt(d), "VALUE": value, "N": 64})
            if d != "bool":
                out[f"arange_{d}"] = (creation_k, (a1(d),), {"WHAT": "arange", "DT": dt(d), "VALUE": 0, "N": 64})
    return out


KINDS = ["unary", "binary", "cast", "reduce", "shape"]
#: The Tile IR ops (rows of OPS) these cases are the ones to put through tileiras and tileirdisasm.
OPS_TESTED_HERE = {"bitcast", "cos", "divi", "exp", "exp2", "fpowf", "ftoi", "log", "log2", "mulhii", "permute", "remf",
                   "remi", "rsqrt", "scan", "shli", "shri", "sin", "tanh"}


@functools.cache
def module_of(kind: str, dtype: str) -> TModule:
    """The kernels of ``kind`` on ``dtype`` (their names end in it) lowered, as the entries of one module (entry
    names: the case names)."""
    from tilejit.backends.tileir.lower import lower_function

    functions: list[TFunction] = []
    for name, (kernel, sig, constants) in cases(kind).items():
        if not name.endswith(f"_{dtype}"):
            continue
        (fn,) = lower_function(tj.compile(kernel, sig, constants=constants, target="sm_90").ir()).functions
        fn.name = name
        functions.append(fn)
    return TModule(kind, functions)


def normalized(text: str) -> list[str]:
    """The entries' lines with value names replaced by their order of first appearance in their entry (names
    defined in a region are free again after it), spaces collapsed."""
    out: list[str] = []
    names: dict[str, str] = {}
    scopes: list[dict[str, str]] = []
    for raw in text.splitlines():
        ln = re.sub(r"\s+", " ", raw.strip())
        if ln == "}" and scopes:
            names = scopes.pop()
        if not ln or ln.startswith(("cuda_tile.module", "}")):
            continue
        if ln.startswith("entry "):
            names, scopes = {}, []
        elif ln.startswith("(") and ln.endswith("{"):
            scopes.append(dict(names))
        ln = re.sub(r"<(f16|bf16|f32|f64): ([^>]+)>", float_bits, ln)
        out.append(re.sub(r"%[\w.$-]+", functools.partial(renamed, names), ln))
    return out


def renamed(names: dict[str, str], m: re.Match[str]) -> str:
    """The normalized name of the value ``m`` matched: ``%v<n>``, n its order of first appearance."""
    return names.setdefault(m.group(0), f"%v{len(names)}")


def float_bits(m: re.Match[str]) -> str:
    """A float constant ``<f32: 4.29496704E+9>`` as its bits, ``<f32: 0x4F7FFFFF>``: tileirdisasm spells some
    values (those needing 7 or more digits) differently from the text form."""
    from tilejit.backends.tileir.module import Scalar, constant_bytes

    elem, text = m.group(1), m.group(2)
    data = bytes.fromhex(text[2:])[::-1] if text.startswith("0x") else constant_bytes(float(text), Scalar(elem))
    return f"<{elem}: 0x{data[::-1].hex().upper()}>"


# --------------------------------------------------------------------------------------------- CPU: toolchain


@pytest.mark.parametrize(("target", "version"), BUILDS)
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("kind", KINDS)
def test_every_op_compiles_with_tileiras_and_reads_back(kind: str, dtype: str, target: str, version: str,
                                                        tileir_toolchain: Any) -> None:
    """tileiras type-checks and compiles every case of ``kind`` on ``dtype`` to a CUBIN; tileirdisasm prints each
    entry exactly as our text form does (names and the spelling of float constants aside)."""
    from tilejit.backends.tileir.bytecode import encode_module
    from tilejit.backends.tileir.text import print_module
    from tilejit.compiler.tileiras import disassemble, run_tileiras

    module = module_of(kind, dtype)
    assert module.functions
    bytecode = encode_module(module, tuple(int(p) for p in version.split(".")))  # type: ignore[arg-type]
    cubin = run_tileiras(bytecode, target, toolchain=tileir_toolchain)
    assert cubin[:4] == b"\x7fELF"
    for fn in module.functions:
        assert f"{fn.name}\0".encode() in cubin
    assert normalized(disassemble(bytecode, toolchain=tileir_toolchain)) == normalized(print_module(module))


def test_the_cases_cover_every_fn_and_dtype_the_lowering_takes() -> None:
    """Each UNARY/BINARY fn of the CUDA backend's tables on each dtype kind it takes, every
    cast pair, every reduction on every dtype, and every Tile IR op this lowering adds, are among the cases."""
    from test_math_ext import BIT_COUNTS, CUDA_ONLY_MATH, PREDICATES, TILEIR_MATH

    from tilejit.backends.cuda.tables import BINARY as CUDA_BINARY
    from tilejit.backends.cuda.tables import UNARY as CUDA_UNARY
    from tilejit.backends.tileir.module import TOp

    names = set().union(*(cases(k) for k in KINDS))
    kinds = {"b": ["bool"], "i": INTS[:4], "u": INTS[4:], "f": FLOATS}
    for fn, entry in CUDA_UNARY.items():
        if fn == "not":  # 'not' is invert of bool here (the front end's 'not' makes a bool first)
            continue
        if fn in (*TILEIR_MATH, *CUDA_ONLY_MATH, *PREDICATES, *BIT_COUNTS):
            continue  # test_math_ext.py's cases (on both backends; cbrt and erfinv are CUDA C++ only)
        for k in entry:
            assert all(f"{fn}_{d}" in names for d in kinds[k] if d in unary_dtypes(fn)), (fn, k)
    for fn, entry in CUDA_BINARY.items():
        if fn in TILEIR_MATH:
            continue  # atan2: test_math_ext.py
        for k in entry:
            assert all(f"{fn}_{d}" in names for d in kinds[k] if d in binary_dtypes(fn)), (fn, k)
    assert all(f"{s}_to_{d}" in names for s in ALL for d in ALL)

    def used(ops: list[TOp]) -> set[str]:
        return {op.name for op in ops} | {n for op in ops for b in op.regions for n in used(b.ops)}

    ops = set().union(*(used(fn.body) for k in KINDS for d in ALL for fn in module_of(k, d).functions))
    assert ops >= OPS_TESTED_HERE


# --------------------------------------------------------------------------------------------- CPU: text


def entry_body(kernel: Any, sig: tuple[Any, ...], constants: dict[str, Any]) -> list[str]:
    """The body lines of a kernel's entry, between its loads and its store, stripped."""
    from tilejit.backends.tileir import module_text

    text = module_text(tj.compile(kernel, sig, constants=constants, target="sm_90").ir(), "sm_90")
    lines = [ln.strip() for ln in text.splitlines()]
    first = max(i for i, ln in enumerate(lines) if "load_view_tko" in ln) + 1
    last = next(i for i, ln in enumerate(lines) if "store_view_tko" in ln)
    return lines[first:last]


def test_text_shift_clamps_the_count_golden() -> None:
    body = entry_body(binary_k, (tj.int8[:], tj.int8[:], tj.int8[:]), {"OP": "rshift", "BOOL": False, "TILE": 16})
    assert body == [
        "%2 = constant <i8: 8> : tile<16xi8>",
        "%3 = cmpi greater_than_or_equal %b, %2, unsigned : tile<16xi8> -> tile<16xi1>",
        "%4 = constant <i8: 7> : tile<16xi8>",
        "%5 = select %3, %4, %b : tile<16xi1>, tile<16xi8>",
        "%r = shri %a, %5 signed : tile<16xi8>",
        "%6 = join_tokens %0, %1 : token",
    ]


def test_text_float_to_int_saturates_with_nan_zero_golden() -> None:
    body = entry_body(cast_k, (tj.float32[:], tj.uint8[:]), {"DST": tj.uint8, "BOOL": False, "TILE": 16})
    assert body == [
        "%1 = cmpf not_equal unordered %a, %a : tile<16xf32> -> tile<16xi1>",
        "%2 = constant <f32: 0.000000e+00> : tile<16xf32>",
        "%3 = select %1, %2, %a : tile<16xi1>, tile<16xf32>",
        "%4 = constant <f32: 0.000000e+00> : tile<16xf32>",
        "%5 = maxf %3, %4 : tile<16xf32>",
        "%6 = constant <f32: 4.29496704E+9> : tile<16xf32>",
        "%7 = minf %5, %6 : tile<16xf32>",
        "%8 = ftoi %7 unsigned : tile<16xf32> -> tile<16xi32>",
        "%9 = constant <f32: 4.2949673E+9> : tile<16xf32>",
        "%10 = cmpf greater_than_or_equal ordered %3, %9 : tile<16xf32> -> tile<16xi1>",
        "%11 = constant <i32: -1> : tile<16xi32>",
        "%12 = select %10, %11, %8 : tile<16xi1>, tile<16xi32>",
        "%13 = trunci %12 : tile<16xi32> -> tile<16xi8>",
    ]


def test_text_cumsum_of_f16_scans_in_f32_golden() -> None:
    body = entry_body(cumsum_k, (tj.float16[:, :], tj.float16[:, :]), {"BOOL": False, "AXIS": 1, "BM": 2, "BN": 4})
    assert body == [
        "%1 = ftof %t : tile<2x4xf16> -> tile<2x4xf32>",
        "%2 = scan %1 dim=1 reverse=false identities=[0.000000e+00 : f32] : tile<2x4xf32> -> tile<2x4xf32>",
        "(%elem: tile<f32>, %accum: tile<f32>) {",
        "%combined = addf %elem, %accum : tile<f32>",
        "yield %combined : tile<f32>",
        "}",
        "%3 = reshape %2 : tile<2x4xf32> -> tile<1x2x4xf32>",
        "%4 = reduce %3 dim=0 identities=[0xFF800000 : f32] : tile<1x2x4xf32> -> tile<2x4xf32>",
        "(%elem: tile<f32>, %accum: tile<f32>) {",
        "%combined = maxf %elem, %accum propagate_nan : tile<f32>",
        "yield %combined : tile<f32>",
        "}",
        "%5 = ftof %4 : tile<2x4xf32> -> tile<2x4xf16>",
    ]


def test_argmax_reduces_value_index_pairs_with_the_first_index_and_nan_rules() -> None:
    body = entry_body(reduce_k, (tj.float32[:, :], tj.int32[:]), {"FN": "argmax", "BOOL": False, "BM": 2, "BN": 4})
    text = "\n".join(body)
    assert body[0] == "%2 = iota : tile<4xi32>"
    assert "broadcast" in text and "identities=[0xFF800000 : f32, 2147483647 : i32]" in text
    assert "(%value: tile<f32>, %acc_value: tile<f32>, %index: tile<i32>, %acc_index: tile<i32>) {" in text
    assert "cmpf not_equal unordered %value, %value" in text  # NaN wins
    assert "cmpf not_equal unordered %acc_value, %acc_value" in text
    assert "cmpi less_than %acc_index, %index, signed" in text  # of equals, the first index


# --------------------------------------------------------------------------------------------- GPU

#: Ops whose results the two backends must agree on bit for bit (NaN matching NaN): everything but the math
#: library's functions and float32 division and pow, where each backend may round the last bits its own way.
INEXACT = {*MATH, "truediv", "pow", "sum", "prod", "cumsum"}

def rand(shape: tuple[int, ...], name: str, rng: np.random.Generator, *, edges: bool = True) -> np.ndarray:
    """Random data of ``name`` (bool as 0/1 uint8) with the dtype's edge values mixed in."""
    if name == "bool":
        return rng.integers(0, 2, shape).astype(np.uint8)
    if name in INTS:
        info = np.iinfo(name)
        a = rng.integers(info.min, int(info.max) + 1, shape, dtype=np.int64 if info.min < 0 else np.uint64)
        small = rng.integers(max(int(info.min), -9), 10, shape)
        a = np.where(rng.random(shape) < 0.5, small.astype(a.dtype), a)
        specials = [0, 1, info.max] + ([-1, info.min] if info.min < 0 else [])
    else:
        a = rng.standard_normal(shape) * np.where(rng.random(shape) < 0.2, 1e3, 3.0)
        specials = [0.0, -0.0, np.nan, np.inf, -np.inf, 0.5, -0.5, 2.5, -2.5]
    if edges:
        pick = rng.random(shape) < 0.1
        a = np.where(pick, rng.choice(np.array(specials, dtype=a.dtype), shape), a)
    return a.astype(np_dtype(name))


@pytest.fixture
def backends(tileir_env: Any) -> None:
    """Both backends: the Tile IR one through the tests' toolchain (conftest's ``tileir_env``)."""


@functools.cache
def on(kernel: Any, backend: str) -> Any:
    """``kernel`` bound to ``backend``."""
    return tj.kernel(kernel.func, backend=backend)


def run_both(kernel: Any, grid: Any, inputs: list[np.ndarray], out_shape: tuple[int, ...], out_dtype: str,
             **constants: Any) -> dict[str, np.ndarray]:
    """The output of ``kernel`` on each backend, from the same inputs, into a poisoned output each time."""
    results = {}
    for backend in ("cuda", "tileir"):
        out = tj.asarray(poison(out_shape, out_dtype))
        on(kernel, backend)[grid](*(tj.asarray(np.ascontiguousarray(a)) for a in inputs), out, **constants)
        results[backend] = out.numpy()
    return results


def check(results: dict[str, np.ndarray], want: np.ndarray, out_dtype: str, exact: bool) -> None:
    """Both backends against numpy (exact, or within the dtype's tolerance) and against each other (bit for bit
    for ``exact`` ops and all integers)."""
    want = np.asarray(want)
    for backend, got in results.items():
        if out_dtype in FLOATS and not exact:
            g, w = got.astype(np.float64), want.astype(np.float64)
            assert np.array_equal(np.isnan(g), np.isnan(w)), f"{backend}: NaNs differ from numpy's"
            assert np.array_equal(g[np.isinf(w)], w[np.isinf(w)]), f"{backend}: infinities differ from numpy's"
            fin = np.isfinite(w)
            scale = max(float(np.abs(w[fin]).max(initial=0.0)), 1e-300)  # norms of values near 1e308 overflow
            err = np.linalg.norm((g[fin] - w[fin]) / scale) / max(np.linalg.norm(w[fin] / scale), 1e-30)
            assert err <= RTOL[out_dtype], f"{backend}: relative error {err:.3e} > {RTOL[out_dtype]}"
        else:
            np.testing.assert_array_equal(got.astype(np.float64) if out_dtype in FLOATS else got,
                                          want.astype(got.dtype).astype(np.float64) if out_dtype in FLOATS
                                          else want.astype(got.dtype), err_msg=backend)
    if exact or out_dtype not in FLOATS:  # floats through float64: numpy's NaN-aware compare misses bfloat16's
        tileir, cuda = results["tileir"], results["cuda"]
        if out_dtype in FLOATS:
            tileir, cuda = tileir.astype(np.float64), cuda.astype(np.float64)
        np.testing.assert_array_equal(tileir, cuda)


def wrap(values: Any, name: str) -> np.ndarray:
    """Python ints (a list, or an array) wrapped into dtype ``name``; a list is not handed to numpy before it is
    wrapped, as a list holding 2**63 would become float64 and lose the low bits."""
    info = np.iinfo(name)
    span = 1 << info.bits
    flat = values if isinstance(values, list) else np.ravel(values).tolist()
    wrapped = [(int(x) - int(info.min)) % span + int(info.min) for x in flat]
    return np.array(wrapped, dtype=name)


def f32(a: np.ndarray) -> np.ndarray:
    """16-bit floats as the float32 the CUDA backend computes them in (other dtypes unchanged)."""
    return a.astype(np.float32) if a.dtype in (np.float16, BF16) else a


def ref_unary(fn: str, x: np.ndarray, name: str) -> np.ndarray:
    """numpy's ``fn`` (16-bit floats through float32, ints and bools to float32 for float math)."""
    if name == "bool":
        x = x.astype(bool)
    if fn == "neg":
        return wrap([-int(v) for v in x.ravel()], name).reshape(x.shape) if name in INTS else -x
    if fn == "invert":
        return ~x
    if fn in ("abs", "floor", "ceil"):
        if name in INTS and fn == "abs":
            return wrap([abs(int(v)) for v in x.ravel()], name).reshape(x.shape)
        return x if name in INTS or name == "bool" else getattr(np, fn)(x)
    xf = (x if name in FLOATS else x.astype(np.float32)).astype(np.float64)  # ints and bools: float32 first
    with np.errstate(all="ignore"):
        if fn == "rsqrt":
            r = 1 / np.sqrt(xf)
        elif fn == "erf":
            r = np.vectorize(math.erf, otypes=[np.float64])(xf)
        elif fn == "sigmoid":
            r = np.where(xf >= 0, 1 / (1 + np.exp(-np.abs(xf))), np.exp(-np.abs(xf)) / (1 + np.exp(-np.abs(xf))))
        else:
            r = getattr(np, fn)(xf)
    return r


#: Integer and bool float math is a cast to float32 and the float32 function (each checked on its own): on the GPU
#: a few of those dtypes stand for all.
GPU_MATH_DTYPES = ["bool", "int16", "uint64", *FLOATS]


@pytest.mark.gpu
@pytest.mark.parametrize(("fn", "dtype"), [(fn, d) for fn in UNARY for d in unary_dtypes(fn)
                                           if fn not in MATH or d in GPU_MATH_DTYPES])
def test_unary_on_both_backends(fn: str, dtype: str, rng: np.random.Generator, backends: None) -> None:
    n, tile = 1000, 128
    x = rand((n,), dtype, rng)
    out = unary_out(fn, dtype)
    res = run_both(unary_k, tj.cdiv(n, tile), [x], (n,), out, FN=fn, BOOL=dtype == "bool", TILE=tile)
    want = ref_unary(fn, x, dtype)
    check(res, np.asarray(want).astype(np_dtype(out)) if out in FLOATS else want, out, fn not in INEXACT)


def ipow(a: int, b: int, name: str) -> int:
    """tj::ipow: wrapping power, and 1 / a**-b truncated for a negative exponent."""
    if b < 0:
        return 1 if a == 1 else (1 if b % 2 == 0 else -1) if a == -1 else 0
    return pow(a, b, 1 << np.iinfo(name).bits)


def shift(a: int, b: int, op: str, name: str) -> int:
    """tj::lshift / tj::rshift: a count < 0 or >= the width gives 0 (-1 for >> of a negative)."""
    if b < 0 or b >= np.iinfo(name).bits:
        return -1 if op == "rshift" and a < 0 else 0
    return a << b if op == "lshift" else a >> b


def ref_binary(op: str, x: np.ndarray, y: np.ndarray, name: str) -> np.ndarray:
    """What ``x op y`` must give on ``name`` data (bool as 0/1 uint8): numpy's, with tilejit's rules where numpy
    has none (integer x // 0 and x % 0 are 0, negative integer powers, shifts past the width)."""
    if name == "bool":
        a, b = x.astype(bool), y.astype(bool)
        if op in ("floordiv", "mod", "pow"):
            a, b = a.astype(np.int8), b.astype(np.int8)
            return ref_binary(op, a, b, "int8")
        return {"add": a | b, "mul": a & b, "maximum": a | b, "minimum": a & b, "and": a & b, "or": a | b,
                "xor": a ^ b, "truediv": a.astype(np.float32) / b.astype(np.float32),
                **{c: getattr(np, {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
                                   "gt": "greater", "ge": "greater_equal"}[c])(a, b) for c in COMPARE}}[op]
    if op in COMPARE:
        return getattr(np, {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
                            "ge": "greater_equal"}[op])(x, y)
    if name in INTS:
        pa, pb = [int(v) for v in x], [int(v) for v in y]
        bits = np.iinfo(name).bits
        if op == "truediv":
            return (x.astype(np.float32) / y.astype(np.float32)).astype(np.float32)
        fns: dict[str, Callable[[int, int], int]] = {
            "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
            "floordiv": lambda a, b: 0 if b == 0 else a // b, "mod": lambda a, b: 0 if b == 0 else a % b,
            "pow": lambda a, b: ipow(a, b, name), "maximum": max, "minimum": min,
            "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
            "lshift": lambda a, b: shift(a, b, "lshift", name), "rshift": lambda a, b: shift(a, b, "rshift", name),
            "mulhi": lambda a, b: (a % (1 << bits)) * (b % (1 << bits)) >> bits,  # the bits as unsigned numbers
        }
        return wrap([fns[op](a, b) for a, b in zip(pa, pb)], name)
    a, b = f32(x), f32(y)
    with np.errstate(all="ignore"):
        r = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
             "floordiv": np.floor_divide, "mod": np.remainder, "pow": np.power, "maximum": np.maximum,
             "minimum": np.minimum}[op](a, b)
    return np.asarray(r).astype(np_dtype(name))


@pytest.mark.gpu
@pytest.mark.parametrize(("op", "dtype"), [(op, d) for op in BINARY + COMPARE
                                           for d in (binary_dtypes(op) if op in BINARY else ALL)])
def test_binary_on_both_backends(op: str, dtype: str, rng: np.random.Generator, backends: None) -> None:
    n, tile = 1000, 64
    x, y = rand((n,), dtype, rng), rand((n,), dtype, rng)
    if op in ("lshift", "rshift"):  # counts around the width, negative ones included for signed types
        bits = np.iinfo(dtype).bits
        lo = -3 if dtype.startswith("i") else 0
        y = rng.integers(lo, bits + 4, n).astype(dtype)
    if op == "pow" and dtype in INTS:
        y = rng.integers(-2 if dtype.startswith("i") else 0, 70, n).astype(dtype)
    if op == "pow" and dtype in FLOATS:
        x = np.abs(x)
    out = binary_out(op, dtype)
    res = run_both(binary_k, tj.cdiv(n, tile), [x, y], (n,), out, OP=op, BOOL=dtype == "bool", TILE=tile)
    want = ref_binary(op, x, y, dtype)
    check(res, np.asarray(want).astype(np_dtype(out)), out, op not in INEXACT)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ALL)
def test_where_on_both_backends(dtype: str, rng: np.random.Generator, backends: None) -> None:
    n, tile = 1000, 64
    c, x, y = rand((n,), "bool", rng), rand((n,), dtype, rng), rand((n,), dtype, rng)
    res = run_both(where_k, tj.cdiv(n, tile), [c, x, y], (n,), mem(dtype), TILE=tile)
    check(res, np.where(c != 0, x, y), mem(dtype), True)


def ref_cast(x: np.ndarray, s: str, d: str) -> np.ndarray:
    """tj::cast: to bool is != 0 (NaN too), 16-bit floats through float32 (f64 -> f16 once), and float -> int
    truncates, NaN giving 0, saturating at the 32-bit range (64-bit for 64-bit results; unsigned at 0), 8- and
    16-bit results keeping the low bits."""
    if s == "bool":
        x = x.astype(bool)
    if d == "bool":
        return (x != 0).astype(np.uint8)
    if s in FLOATS and d in INTS:
        v = x.astype(np.float64)
        bits = 64 if np.iinfo(d).bits == 64 else 32
        lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if d.startswith("i") else (0, 2 ** bits - 1)
        ints = [0 if math.isnan(e) else lo if e <= lo else hi if e >= hi else int(e) for e in v.tolist()]
        return wrap(ints, d)
    if d == "bfloat16" or (d == "float16" and s != "float64"):
        return x.astype(np.float32).astype(np_dtype(d)) if s != "bool" else x.astype(np_dtype(d))
    return x.astype(np_dtype(d)) if s != "bfloat16" else x.astype(np.float32).astype(np_dtype(d))


@pytest.mark.gpu
@pytest.mark.parametrize("dst", ALL)
@pytest.mark.parametrize("src", ALL)
def test_cast_on_both_backends(src: str, dst: str, rng: np.random.Generator, backends: None) -> None:
    n, tile = 1000, 64
    x = rand((n,), src, rng)
    if src in FLOATS and dst in INTS:  # around and past the ranges of the 8- to 64-bit types
        scale = np.array([1, 200, 7e4, 3e9, 5e18, 4e19, 1e30])[rng.integers(0, 7, n)]
        x = (x.astype(np.float64) * scale).astype(np_dtype(src))
    res = run_both(cast_k, tj.cdiv(n, tile), [x], (n,), mem(dst), DST=dt(dst), BOOL=src == "bool", TILE=tile)
    check(res, ref_cast(x, src, dst), mem(dst), True)


def ref_reduce(fn: str, x: np.ndarray, name: str, axis: int) -> np.ndarray:
    """numpy's ``fn`` along ``axis`` in tilejit's result dtype (sums and products wrap in it)."""
    out = reduce_out(fn, name)
    if name == "bool":
        x = x.astype(bool)
    if fn.startswith("arg"):
        return getattr(np, fn)(f32(x), axis=axis)
    if fn in ("max", "min"):
        return getattr(np, fn)(f32(x), axis=axis).astype(np_dtype(out))
    if out in FLOATS:
        r = getattr(np, fn)(x.astype(np.float64), axis=axis)
        return np.asarray(r).astype(np_dtype(out))
    with np.errstate(all="ignore"):
        return getattr(np, fn)(x.astype(out), axis=axis, dtype=out)


@pytest.mark.gpu
@pytest.mark.parametrize(("fn", "dtype"), [(fn, d) for fn in REDUCE[:-1] for d in ALL])
def test_reduce_on_both_backends(fn: str, dtype: str, rng: np.random.Generator, backends: None) -> None:
    m, n, bm, bn = 37, 64, 8, 64  # rows not a multiple of the tile; whole rows, so no padding is reduced
    x = rand((m, n), dtype, rng, edges=fn != "prod")
    if fn in ("sum", "prod") and dtype in FLOATS:  # keep products finite and sums of one magnitude
        x = (np.sign(x.astype(np.float64)) * (1 + rng.random((m, n)) * 0.05)).astype(np_dtype(dtype))
    if fn.startswith("arg") and dtype in INTS + ["bool"]:  # ties: the first index must win
        x = (x.astype(np.int64) % 3).astype(np_dtype(mem(dtype)))
    out = reduce_out(fn, dtype)
    res = run_both(reduce_k, tj.cdiv(m, bm), [x], (m,), out, FN=fn, BOOL=dtype == "bool", BM=bm, BN=bn)
    check(res, ref_reduce(fn, x, dtype, 1), out, fn not in INEXACT)


@pytest.mark.gpu
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("dtype", ALL)
def test_cumsum_on_both_backends(dtype: str, axis: int, rng: np.random.Generator, backends: None) -> None:
    m, n, bm, bn = 21, 100, 8, 32
    x = rand((m, n), dtype, rng, edges=False)
    out = reduce_out("cumsum", dtype)
    res = run_both(cumsum_k, (tj.cdiv(m, bm), tj.cdiv(n, bn)), [x], (m, n), out, BOOL=dtype == "bool",
                   AXIS=axis, BM=bm, BN=bn)
    # each tile scans its own block of rows or columns
    want = np.empty((m, n), dtype=np_dtype(out))
    for i0 in range(0, m, bm):
        for j0 in range(0, n, bn):
            blk = x[i0:i0 + bm, j0:j0 + bn]
            want[i0:i0 + bm, j0:j0 + bn] = ref_reduce("cumsum", blk, dtype, axis)
    check(res, want, out, False)


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["transpose", "permute3", "broadcast", "reshape"])
@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int64", "bfloat16", "float32"])
def test_shape_ops_on_both_backends(op: str, dtype: str, rng: np.random.Generator, backends: None) -> None:
    if op == "broadcast" and dtype in FLOATS:
        pytest.skip("broadcast is checked with ^ (integers and bools)")
    m, n, bm, bn = 50, 36, 16, 8
    x = rand((m, n), dtype, rng)
    out_shape = (n, m) if op == "transpose" else (m, n)
    res = run_both(shape_k, (tj.cdiv(m, bm), tj.cdiv(n, bn)), [x], out_shape, mem(dtype), OP=op,
                   BOOL=dtype == "bool", BM=bm, BN=bn)
    v = (x != 0).astype(np.uint8) if dtype == "bool" else x
    if op == "transpose":
        want = v.T
    elif op == "broadcast":  # each tile xors with row 0 of its column block
        want = v ^ v[0:1, :]
    else:  # permute3 permutes there and back again
        want = v
    check(res, want, mem(dtype), True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ALL)
def test_full_and_arange_on_both_backends(dtype: str, backends: None) -> None:
    n = 100
    value = True if dtype == "bool" else -3.25 if dtype in FLOATS else -3 if not dtype.startswith("u") else 200
    res = run_both(creation_k, 1, [], (n,), mem(dtype), WHAT="full", DT=dt(dtype), VALUE=value, N=128)
    check(res, np.full(n, value).astype(np_dtype(mem(dtype))), mem(dtype), True)
    if dtype != "bool":
        res = run_both(creation_k, 1, [], (n,), mem(dtype), WHAT="arange", DT=dt(dtype), VALUE=0, N=128)
        check(res, np.arange(n).astype(np_dtype(dtype)), dtype, True)
