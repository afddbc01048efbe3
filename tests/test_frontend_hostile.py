"""Hostile kernel code gets a clear, located TileCompileError quickly: never a hang, a MemoryError, a
raw internal exception or a silent wrong result (issue #16: huge compile-time values, source edited
after import, print(), integer powers with a negative exponent)."""

# ruff: noqa: F841, B007, B011, RUF059, UP031  (kernels under test assign values only the front end looks at)

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from source_lines import where_in

import tilejit as tj
from tilejit.errors import TileCompileError
from tilejit.language.frontend.translate import translate
from tilejit.language.ir.types import ArrayType, float32, int32

F32_1 = ArrayType(float32, 1)
I32_1 = ArrayType(int32, 1)
LINES = Path(__file__).read_text(encoding="utf-8").splitlines()
BIG = 10 ** 5000  # a global integer Python itself refuses to print (over 4300 digits)


def where(snippet: str) -> tuple[int, int]:
    """(1-based line, 0-based column) of the one place in this file where ``snippet`` is code."""
    return where_in(LINES, snippet)


# ------------------------------------------------------------------------------ kernels that must fail fast


@tj.function
def takes_any(*args):
    return 0


def k_pow(x, out):
    v = 3 ** (10 ** 8)


def k_builtin_pow(x, out):
    v = pow(3, 10 ** 8)


def k_pow_keywords(x, out):
    v = pow(base=3, exp=10 ** 8)


def k_round_keywords(x, out):
    assert round(12345, ndigits=-10 ** 9) == 0


def k_tj_pow(x, out):
    v = tj.pow(7, 10 ** 9)


def k_shift(x, out):
    v = 1 << (10 ** 10)


def k_big_global_mul(x, out):
    v = BIG * BIG


def k_str_repeat(x, out):
    v = "a" * 10 ** 10


def k_tuple_repeat(x, out):
    v = (1,) * 10 ** 9


def k_tuple_doubling(x, out):
    t = (1,) * 60000
    for i in tj.static_range(20):
        t = (t, t)  # doubling
    v = hash(t)


def k_static_range(x, out):
    for i in tj.static_range(10 ** 12):
        pass


def k_nested_unroll(x, out):
    for i in tj.static_range(60000):
        for j in tj.static_range(60000):
            pass  # nested-unroll


def k_quadratic_concat(x, out):
    t = ()
    for i in tj.static_range(65536):
        t = t + (i,)  # quadratic-concat


def k_sum_range(x, out):
    v = sum(tj.static_range(10 ** 12))


def k_max_range(x, out):
    v = max(range(10 ** 12))


def k_tuple_of_range(x, out):
    v = tuple(range(10 ** 10))


def k_sorted_range(x, out):
    v = sorted(range(10 ** 9))


def k_zip_ranges(x, out):
    v = zip(range(10 ** 12), range(10 ** 12))


def k_float_in_range(x, out):
    v = 1.5 in tj.static_range(10 ** 12)


def k_unpack_range(x, out):
    a, b = tj.static_range(10 ** 12)


def k_star_range(x, out):
    takes_any(*tj.static_range(10 ** 9))


def k_fstring_width(x, out):
    v = f"{1:>1000000000}"


def k_percent_width(x, out):
    v = "%0999999999d" % 1


def k_percent_star(x, out):
    v = "%*d" % (10 ** 9, 1)


def k_factorial(x, out):
    v = math.factorial(10 ** 7)


def k_comb(x, out):
    v = math.comb(10 ** 7, 5 * 10 ** 6)


def k_prod(x, out):
    v = math.prod(tj.static_range(1, 60000))


def k_lcm(x, out):
    v = math.lcm(*tj.static_range(1, 60000))


def k_huge_shape(x, out):
    v = tj.zeros((2 ** 4000,) * 200, tj.float32)


def k_fstring_bad_spec(x, out):
    v = f"{1:q}"


def k_fstring_big_global(x, out):
    v = f"{BIG}"


def k_big_global_in_tile(x, out):
    t = tj.load(x, index=(0,), shape=(16,))
    u = t + BIG  # big-global


def k_exp_of_huge(x, out):
    v = tj.exp(10 ** 400)


def k_complex(x, out):
    v = (-8) ** 0.5


# name, where the error points, what its message says
FAST_ERRORS = [
    ("k_pow", "3 ** (10 ** 8)", "3 ** 100000000 is too large: more than 4096 bits"),
    ("k_builtin_pow", "pow(3, 10 ** 8)", "3 ** 100000000 is too large"),
    ("k_pow_keywords", "pow(base=3, exp=10 ** 8)", "3 ** 100000000 is too large"),
    ("k_tj_pow", "tj.pow(7, 10 ** 9)", "7 ** 1000000000 is too large"),
    ("k_shift", "1 << (10 ** 10)", "1 << 10000000000 is too large: 10000000001 bits"),
    ("k_big_global_mul", "BIG * BIG", "is too large: 16610 bits"),
    ("k_str_repeat", '"a" * 10 ** 10', "'a' * 10000000000 is too large"),
    ("k_tuple_repeat", "(1,) * 10 ** 9", "(1,) * 1000000000 is too large"),
    ("k_tuple_doubling", "(t, t)  # doubling", "the tuple is too large"),
    ("k_static_range", "for i in tj.static_range(10 ** 12)", "range(0, 1000000000000, 1) is too large to iterate"),
    ("k_nested_unroll", "pass  # nested-unroll", "the kernel is too large: translating it took more than 524288"),
    ("k_quadratic_concat", "t + (i,)  # quadratic-concat", "the kernel is too large"),
    ("k_sum_range", "sum(tj.static_range(10 ** 12))", "sum(): range(0, 1000000000000, 1) is too large"),
    ("k_max_range", "max(range(10 ** 12))", "max(): range(0, 1000000000000, 1) is too large"),
    ("k_tuple_of_range", "tuple(range(10 ** 10))", "tuple(): range(0, 10000000000, 1) is too large"),
    ("k_sorted_range", "sorted(range(10 ** 9))", "sorted(): range(0, 1000000000, 1) is too large"),
    ("k_zip_ranges", "zip(range(10 ** 12), range(10 ** 12))", "zip(): range(0, 1000000000000, 1) is too large"),
    ("k_float_in_range", "1.5 in tj.static_range(10 ** 12)", "'in': range(0, 1000000000000, 1) is too large"),
    ("k_unpack_range", "a, b = tj.static_range(10 ** 12)", "is too large to iterate"),
    ("k_star_range", "takes_any(*tj.static_range(10 ** 9))", "range(0, 1000000000, 1) is too large to iterate"),
    ("k_fstring_width", 'f"{1:>1000000000}"', "the format spec '>1000000000' is too large"),
    ("k_percent_width", '"%0999999999d" % 1', "the %-format '%0999999999d' is too large"),
    ("k_percent_star", '"%*d" % (10 ** 9, 1)', "the %-format '%*d' is too large"),
    ("k_factorial", "math.factorial(10 ** 7)", "math.factorial(10000000) is too large"),
    ("k_comb", "math.comb(10 ** 7, 5 * 10 ** 6)", "math.comb(10000000, 5000000) is too large"),
    ("k_prod", "math.prod(tj.static_range(1, 60000))", "the result of math.prod() is too large"),
    ("k_lcm", "math.lcm(*tj.static_range(1, 60000))", "the result of math.lcm() is too large"),
    ("k_huge_shape", "tj.zeros((2 ** 4000,) * 200, tj.float32)", "a tile holds at most 1048576 (2**20) elements"),
    ("k_fstring_bad_spec", 'f"{1:q}"', "cannot format the constant 1 with 'q': Unknown format code 'q'"),
    ("k_fstring_big_global", 'f"{BIG}"', "the value formatted by the f-string is too large: 16610 bits"),
    ("k_big_global_in_tile", "t + BIG  # big-global", "the constant <an integer of 16610 bits> does not fit float32"),
    ("k_exp_of_huge", "tj.exp(10 ** 400)", "the constant 100000...000 (401 digits) does not fit float64"),
    ("k_complex", "(-8) ** 0.5", "is the complex number"),
]

# kernels with huge values that are cheap to compute with, so they must translate
CHEAP = ["k_len_of_huge_range", "k_round_huge_negative", "k_round_keywords", "k_runtime_range_wide"]

# every case runs in one child process: a memory cap, so that a regression fails with a MemoryError
# instead of swapping the machine, and a time limit, so that a hang fails instead of blocking the run
_CHILD = r"""
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
sys.path.insert(0, sys.argv[1])
import test_frontend_hostile as m
from tilejit.errors import TileCompileError
from tilejit.language.frontend.translate import translate
for name in sys.argv[2:]:
    t0 = time.perf_counter()
    try:
        translate(getattr(m, name), {"x": m.F32_1, "out": m.F32_1}, {})
        out = {"kind": "ok"}
    except TileCompileError as e:
        out = {"kind": "TileCompileError", "message": e.message, "filename": e.filename, "line": e.line,
               "col": e.col, "text": str(e)}
    except BaseException as e:
        out = {"kind": type(e).__name__, "message": str(e)[:500]}
    out["name"], out["seconds"] = name, time.perf_counter() - t0
    print(json.dumps(out), flush=True)
"""


@pytest.fixture(scope="module")
def outcomes() -> dict[str, dict[str, Any]]:
    """Each FAST_ERRORS kernel translated in a child process: name -> what happened (missing: it hung)."""
    names = [c[0] for c in FAST_ERRORS] + CHEAP
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(Path(__file__).parent), *names],
                              capture_output=True, text=True, timeout=240, env=os.environ.copy())
        stdout = proc.stdout
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
    results = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return {r["name"]: r for r in results}


@pytest.mark.parametrize(("name", "at", "message"), FAST_ERRORS, ids=[c[0] for c in FAST_ERRORS])
def test_hostile_compile_time_work_is_a_fast_located_error(
    outcomes: dict[str, dict[str, Any]], name: str, at: str, message: str
) -> None:
    got = outcomes.get(name)
    assert got is not None, f"translating {name} did not finish within the time limit (a hang)"
    assert got["kind"] == "TileCompileError", got
    assert message in got["message"], got["text"]
    assert "internal error" not in got["message"], got["text"]
    line, col = where(at)
    assert (got["filename"], got["line"]) == (__file__, line), got["text"]
    if not at.startswith('f"'):  # an f-string's parts are located at the f-string before Python 3.12
        assert got["col"] == col, got["text"]
    assert got["seconds"] < 5.0, f"{name} took {got['seconds']:.1f} s"


def k_len_of_huge_range(x, out):
    assert len(tj.static_range(10 ** 30)) == 10 ** 30


def k_round_huge_negative(x, out):
    assert round(12345, -10 ** 9) == 0


def k_runtime_range_wide(x, out):
    for i in range(-2 ** 63, 2 ** 63 - 1):
        pass


@pytest.mark.parametrize("name", CHEAP)
def test_huge_but_cheap_values_still_work(outcomes: dict[str, dict[str, Any]], name: str) -> None:
    """len() of a range past sys.maxsize, round() to a huge negative ndigits and a run-time range()
    whose trip count is past sys.maxsize are exact and fast (they raised OverflowError or hung)."""
    got = outcomes.get(name)
    assert got is not None, f"translating {name} did not finish within the time limit (a hang)"
    assert got["kind"] == "ok", got
    assert got["seconds"] < 5.0


def k_big_but_allowed(x, out, N: tj.Constant[int]):
    a = 3 ** 2000 + (1 << 4000)
    s = "ab" * 100_000
    t = tuple(range(N)) * 4
    total = 0
    for v in t:
        total += v
    assert total == 4 * N * (N - 1) // 2 and len(s) == 200_000 and a > 0
    tj.store(out, index=(0,), tile=tj.full((16,), total, tj.int32))


def test_large_values_within_the_bounds_still_compile() -> None:
    start = time.perf_counter()
    translate(k_big_but_allowed, {"x": F32_1, "out": I32_1}, {"N": 4096})
    assert time.perf_counter() - start < 10


def test_memory_error_is_a_located_too_large_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A MemoryError from some path the bounds miss reads 'too large', not 'internal error: MemoryError: '."""
    from tilejit.language.frontend import calls

    def exhausted(*args: Any, **kwargs: Any) -> Any:
        raise MemoryError

    api, _ = calls.BUILTINS[id(tj.cdiv)]
    monkeypatch.setitem(calls.BUILTINS, id(tj.cdiv), (api, exhausted))

    def k_memory(x, out):
        v = tj.cdiv(7, 2)  # memory-error

    with pytest.raises(TileCompileError) as info:
        translate(k_memory, {"x": F32_1, "out": F32_1}, {})
    assert info.value.message == "too large: translating this ran out of memory (a compile-time value too large?)"
    assert (info.value.line, info.value.col) == where("tj.cdiv(7, 2)  # memory-error")


# ------------------------------------------------------------------------------ errors raised by user values


class Sensor:
    @property
    def reading(self) -> int:
        raise KeyError("unplugged")


SENSOR = Sensor()


def k_zip_strict(x, out):
    v = zip((1, 2), (1,), strict=True)


def k_assert_big_message(x, out):
    assert False, BIG


def k_raise_big(x, out):
    raise ValueError(BIG)


def k_raising_property(x, out):
    v = SENSOR.reading


@pytest.mark.parametrize(("kernel", "at", "message"), [
    (k_zip_strict, "zip((1, 2), (1,), strict=True)", "zip(): zip() argument 2 is shorter than argument 1"),
    (k_assert_big_message, "assert False, BIG", "assertion failed: <an integer of 16610 bits>"),
    (k_raise_big, "raise ValueError(BIG)", "the kernel raised ValueError: <an integer of 16610 bits>"),
    (k_raising_property, "SENSOR.reading",
     "reading attribute 'reading' of a Python Sensor raised KeyError: 'unplugged'"),
])
def test_errors_from_user_values_are_not_internal_errors(kernel: Any, at: str, message: str) -> None:
    """Each was 'internal error: ValueError/KeyError: ...' (a tilejit bug, by its wording)."""
    with pytest.raises(TileCompileError) as info:
        translate(kernel, {"x": F32_1, "out": F32_1}, {})
    err = info.value
    assert err.message == message, str(err)
    assert (err.line, err.col) == where(at), str(err)


# ------------------------------------------------------------------------------ integer powers


def k_int_pow_negative(x, out):
    t = tj.arange(16)
    u = t ** -1  # int-pow


def k_tj_pow_negative(x, out):
    u = tj.pow(tj.arange(16, tj.int64), -3)


def k_aug_pow_negative(x, out):
    u = tj.arange(16, tj.int16)
    u **= -2


def k_bool_pow_negative(x, out):
    u = (tj.arange(16) > 3) ** -1


@pytest.mark.parametrize(("kernel", "at", "exponent", "dtype"), [
    (k_int_pow_negative, "t ** -1  # int-pow", "-1", "int32"),
    (k_tj_pow_negative, "tj.pow(tj.arange(16, tj.int64), -3)", "-3", "int64"),
    (k_aug_pow_negative, "u **= -2", "-2", "int16"),
    (k_bool_pow_negative, "(tj.arange(16) > 3) ** -1", "-1", "int32"),
])
def test_integer_tile_to_a_negative_constant_power_is_an_error(kernel: Any, at: str, exponent: str, dtype: str) -> None:
    """numpy raises for integers to negative integer powers; this gave 0 silently."""
    with pytest.raises(TileCompileError) as info:
        translate(kernel, {"x": F32_1, "out": F32_1}, {})
    err = info.value
    assert (err.filename, err.line, err.col) == (__file__, *where(at)), str(err)
    assert err.message == (
        f"integers to negative integer powers are not allowed (as in numpy): the exponent is {exponent} and the "
        f"result would be {dtype}; use a float base, e.g. x.astype(tj.float32) ** {exponent}"
    )


def k_pow_allowed(x, out):
    t = tj.arange(16)
    a = t.astype(tj.float32) ** -1
    b = t ** 2
    c = t ** -1.0
    assert 2 ** -1 == 0.5  # compile-time values follow Python
    tj.store(out, index=(0,), tile=a + b + c)


def test_float_and_positive_powers_are_fine() -> None:
    translate(k_pow_allowed, {"x": F32_1, "out": F32_1}, {})


@tj.kernel
def runtime_negative_pow(x, y, out):
    tj.store(out, index=(0,), tile=tj.load(x, index=(0,), shape=(64,)) ** tj.load(y, index=(0,), shape=(64,)))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8])
def test_runtime_negative_integer_exponent_is_as_documented(dtype: type) -> None:
    """tile.py: a run-time negative exponent gives 1 / x**-y truncated toward zero: 1 where x == 1,
    +-1 where x == -1 (even or odd exponent), 0 elsewhere (x == 0 included); numpy raises."""
    xs = np.array([0, 1, -1, 2, -2, 3, -3, 7] * 8, dtype=dtype)
    ys = np.array([-1, -2, -3, -4, -1, -5, -6, -7] * 4 + [0, 1, 2, 3, -1, -2, 5, 4] * 4, dtype=dtype)
    out = tj.asarray(np.full(64, 99, dtype))
    runtime_negative_pow[1](tj.asarray(xs), tj.asarray(ys), out)
    want = []
    for x, y in zip(xs.tolist(), ys.tolist()):
        if y >= 0:
            want.append(x ** y)
        else:
            want.append(1 if x == 1 else (1 if y % 2 == 0 else -1) if x == -1 else 0)
    np.testing.assert_array_equal(out.numpy(), np.array(want, dtype=np.int64).astype(dtype))  # wraps as numpy


# ------------------------------------------------------------------------------ print()


def k_print_unknown(x, out):
    print(no_such_name_in_print)  # noqa: F821


def k_print_tile(x, out):
    t = tj.load(x, index=(0,), shape=(16,))
    print("value", t, sep=": ")  # print-site
    tj.store(out, index=(0,), tile=t)


def test_print_arguments_are_evaluated() -> None:
    """print(no_such_name) compiled: print()'s arguments were dropped unevaluated."""
    with pytest.raises(TileCompileError) as info:
        translate(k_print_unknown, {"x": F32_1, "out": F32_1}, {})
    err = info.value
    assert err.message == "name 'no_such_name_in_print' is not defined"
    assert (err.line, err.col) == where("no_such_name_in_print)")


def test_print_becomes_a_device_print_of_its_run_time_values() -> None:
    """print() in tile code is no longer dropped with a warning: it is a print op of the tile, the text around it
    joined by sep (tests/test_device_print.py covers the rest)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn = translate(k_print_tile, {"x": F32_1, "out": F32_1}, {})
    (op,) = [op for op in fn.body.walk() if op.NAME == "print"]
    assert op.texts == ("value: ", "\n") and op.values[0].type.shape == (16,)


# ------------------------------------------------------------------------------ source edited after import

MODULE_A = '''import tilejit as tj


def kern_a(x, out):
    tj.store(out, index=(0,), tile=tj.load(x, index=(0,), shape=(16,)) + 1)


def kern_b(x, out):
    tj.store(out, index=(0,), tile=tj.load(x, index=(0,), shape=(16,)) * 2)


@tj.function
def helper(t):
    return t + 1


@tj.kernel
def uses_helper(x, out):
    tj.store(out, index=(0,), tile=helper(tj.load(x, index=(0,), shape=(16,))))
'''


def _import_then_edit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, before: str,
                      after: str) -> Any:
    """Import module ``name`` written as ``before``, then rewrite its file as ``after`` (newer mtime)."""
    path = tmp_path / f"{name}.py"
    path.write_text(before, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    mod = importlib.import_module(name)
    monkeypatch.delitem(sys.modules, name)
    path.write_text(after, encoding="utf-8")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    return mod


def test_another_function_now_at_the_def_line_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue: with kern_a and kern_b swapped on disk, translating kern_a translated kern_b's body."""
    swapped = MODULE_A.replace("kern_a", "TMP").replace("kern_b", "kern_a").replace("TMP", "kern_b")
    mod = _import_then_edit(tmp_path, monkeypatch, "edited_swap_mod", MODULE_A, swapped)
    with pytest.raises(TileCompileError) as info:
        translate(mod.kern_a, {"x": F32_1, "out": F32_1}, {})
    err = info.value
    path = str(tmp_path / "edited_swap_mod.py")
    assert (err.filename, err.line) == (path, 4)
    assert err.message == (
        f"the source of kern_a has changed since it was imported: line 4 of {path} now defines 'kern_b', not "
        "'kern_a'; the file was edited after it was imported: reload the module (importlib.reload) or restart "
        "Python"
    )
    assert str(err).splitlines()[1] == "    def kern_b(x, out):"


def test_an_edited_body_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _import_then_edit(tmp_path, monkeypatch, "edited_body_mod", MODULE_A, MODULE_A.replace("+ 1)", "- 1)"))
    with pytest.raises(TileCompileError, match=r"the source of kern_a has changed since it was imported: the def "
                       r"at line 4 of .* no longer compiles to the function's code"):
        translate(mod.kern_a, {"x": F32_1, "out": F32_1}, {})
    translate(mod.kern_b, {"x": F32_1, "out": F32_1}, {})  # unchanged: still fine


def test_an_edited_helper_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _import_then_edit(tmp_path, monkeypatch, "edited_helper_mod", MODULE_A,
                            MODULE_A.replace("return t + 1", "return t * 3"))
    with pytest.raises(TileCompileError) as info:
        translate(mod.uses_helper, {"x": F32_1, "out": F32_1}, {})
    assert "the source of helper has changed since it was imported" in info.value.message
    assert info.value.line == 13  # the def, below its decorator


def test_changed_parameters_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _import_then_edit(tmp_path, monkeypatch, "edited_params_mod", MODULE_A,
                            MODULE_A.replace("def kern_a(x, out)", "def kern_a(out, x)"))
    with pytest.raises(TileCompileError, match=r"the def at line 4 of .* has parameters \(out, x\), the function "
                       r"has \(x, out\)"):
        translate(mod.kern_a, {"x": F32_1, "out": F32_1}, {})


def test_a_shortened_file_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _import_then_edit(tmp_path, monkeypatch, "edited_short_mod", MODULE_A, "x = 1\n")
    with pytest.raises(TileCompileError, match=r"cannot find the source of kern_b in .*; was the file edited after "
                       r"it was imported\? Reload the module"):
        translate(mod.kern_b, {"x": F32_1, "out": F32_1}, {})


def test_identical_functions_in_two_files_are_located_in_their_own(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Code objects compare equal across files (their filename is not part of equality): the source cache
    handed the first file's source to the second file's identical kernel, locating its errors there."""
    bad = MODULE_A.replace("+ 1)", "+ no_such_name)")
    for name in ("twin_one_mod", "twin_two_mod"):
        mod = _import_then_edit(tmp_path, monkeypatch, name, bad, bad)
        with pytest.raises(TileCompileError) as info:
            translate(mod.kern_a, {"x": F32_1, "out": F32_1}, {})
        assert (info.value.filename, info.value.line) == (str(tmp_path / f"{name}.py"), 5)


CONTEXTS = '''from __future__ import annotations

import functools
import math

import tilejit as tj
from tilejit import language

SCALE = 2


def deco(f):
    @functools.wraps(f)
    def w(*a, **k):
        return f(*a, **k)
    return w


def make(n):
    m = n + 1

    @tj.kernel
    def closure_k(x, out):
        t = tj.load(x, index=(0,), shape=(16,))
        tj.store(out, index=(0,), tile=t * n + m)
    return closure_k


class Base:
    pass


class Holder(Base):
    __secret = 3

    @staticmethod
    def st(x, out):
        t = tj.load(x, index=(0,), shape=(16,))
        tj.store(out, index=(0,), tile=t + Holder._Holder__secret)

    def meth(self, x, out):
        v = self.__secret
        w = __class__
        u = super().__init__

    class Inner:
        @staticmethod
        def deep(x, out):
            tj.store(out, index=(0,), tile=tj.load(x, index=(0,), shape=(16,)) + math.pi)


def outer():
    k = 4

    class Local:
        @staticmethod
        def f(x, out):
            tj.store(out, index=(0,), tile=tj.load(x, index=(0,), shape=(16,)) + k)
    return Local.f


@deco
def wrapped(x, out):
    tj.store(out, index=(0,), tile=tj.load(x, index=(0,), shape=(16,)) * SCALE)


@tj.function
def helper(t):
    return language.tile.exp(t) if False else t * 2


@tj.kernel
def uses_helper(x, out):
    tj.store(out, index=(0,), tile=helper(tj.load(x, index=(0,), shape=(16,))))
'''


def test_unedited_sources_in_every_context_are_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check compiles the whole file again: closures, methods with super() and mangled names, nested
    classes, functools.wraps, helpers and module imports (3.11+ call imported modules' functions with
    other bytecode) all match their code objects."""
    from tilejit.language.frontend.params import unwrap
    from tilejit.language.frontend.source import get_source

    mod = _import_then_edit(tmp_path, monkeypatch, "contexts_mod", CONTEXTS, CONTEXTS)
    for f in [mod.make(3), mod.Holder.st, mod.Holder.meth, mod.Holder.Inner.deep, mod.outer(), mod.wrapped,
              mod.helper, mod.uses_helper]:
        assert get_source(unwrap(f)).tree.name == unwrap(f).__name__
    translate(mod.uses_helper, {"x": F32_1, "out": F32_1}, {})
    translate(mod.make(5), {"x": F32_1, "out": F32_1}, {})


def k_with_assert(x, out, N: tj.Constant[int]):
    assert N > 0, "N must be positive"
    tj.store(out, index=(0,), tile=tj.load(x, index=(0,), shape=(16,)))


def test_pytest_rewritten_asserts_are_not_mistaken_for_edits() -> None:
    """pytest rewrites this file's asserts on import (unless run with --assert=plain), so k_with_assert's
    bytecode differs from what its source compiles to."""
    translate(k_with_assert, {"x": F32_1, "out": F32_1}, {"N": 4})
