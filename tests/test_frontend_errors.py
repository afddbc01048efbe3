"""Every kind of bad kernel raises TileCompileError located at the user's source: the file, the
line, the column of the offending expression, the source line and a caret under that column."""

# ruff: noqa: F841, B007  (kernels under test assign values only the front end looks at)

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from source_lines import where_in

import tilejit as tj
from tilejit.errors import TileCompileError
from tilejit.language.frontend.params import signature_params
from tilejit.language.frontend.translate import translate
from tilejit.language.ir.types import ArrayType, float16, float32, int8, int32, scalar

F32_1 = ArrayType(float32, 1)
F32_2 = ArrayType(float32, 2)
I32 = scalar(int32)
LINES = Path(__file__).read_text(encoding="utf-8").splitlines()


def where(snippet: str) -> tuple[int, int]:
    """(1-based line, 0-based column) of the one place in this file where ``snippet`` is code."""
    return where_in(LINES, snippet)


def check(kernel: Callable[..., Any], at: str, message: str, consts: dict[str, Any] | None = None,
          **types: Any) -> TileCompileError:
    """Translate ``kernel``, expect an error at the first character of ``at`` containing ``message``."""
    with pytest.raises(TileCompileError) as info:
        translate(kernel, types or {"x": F32_1, "out": F32_1}, consts or {})
    err = info.value
    line, col = where(at)
    assert err.filename == __file__
    assert (err.line, err.col) == (line, col), str(err)
    assert message in err.message, str(err)
    text = str(err).splitlines()
    assert text[0] == f"{__file__}:{line}:{col + 1}: error: {err.message}"
    assert text[1] == "    " + LINES[line - 1]
    assert text[2] == "    " + " " * col + "^"
    return err


# ---------------------------------------------------------------------------------------------- syntax


def k_listcomp(x, out):
    t = [i for i in range(3)]  # listcomp-here


def test_unsupported_syntax() -> None:
    check(k_listcomp, "[i for i in range(3)]", "unsupported syntax: list comprehension")


def k_with(x, out):
    with open("f"):  # with-here
        pass


def test_unsupported_statement() -> None:
    check(k_with, 'with open("f"):', "unsupported syntax: with statement")


def k_lambda(x, out):
    f = lambda v: v


def test_lambda() -> None:
    check(k_lambda, "lambda v: v", "unsupported syntax: lambda")


# ---------------------------------------------------------------------------------------------- names and calls


def k_unknown_name(x, out):
    t = tj.load(x, index=(0,), shape=(16,))
    tj.store(out, index=(0,), tile=t + no_such_thing)  # noqa: F821


def test_unknown_name() -> None:
    check(k_unknown_name, "no_such_thing)", "name 'no_such_thing' is not defined")


def k_unknown_attr(x, out):
    t = tj.load(x, index=(0,), shape=(16,))
    u = t.no_such_attr


def test_unknown_tile_attribute() -> None:
    check(k_unknown_attr, "t.no_such_attr", "a tile has no attribute 'no_such_attr'")


def k_unknown_tj(x, out):
    t = tj.lod(x, index=(0,), shape=(16,))


def test_unknown_tj_function() -> None:
    check(k_unknown_tj, "tj.lod(", "has no attribute 'lod'")


def plain_python(v):
    return v


def k_python_call(x, out):
    t = plain_python(x)


def test_calling_a_python_function() -> None:
    check(k_python_call, "plain_python(x)", "cannot call the Python function 'plain_python'")


def k_wrong_args(x, out):
    t = tj.load(x, (0,), (16,), 0, 5)


def test_wrong_argument_count() -> None:
    check(k_wrong_args, "tj.load(x, (0,), (16,), 0, 5)", "tj.load(): too many positional arguments")


def k_missing_kw(x, out):
    t = tj.load(x, index=(0,))


def test_missing_argument() -> None:
    check(k_missing_kw, "tj.load(x, index=(0,))", "tj.load(): missing a required argument: 'shape'")


@tj.function
def helper_two(a, b):
    return a + b


def k_helper_args(x, out):
    t = helper_two(1)


def test_wrong_helper_arguments() -> None:
    check(k_helper_args, "helper_two(1)", "helper_two(): missing a required argument: 'b'")


@tj.function
def helper_with_error(t):
    return t + undefined_in_helper  # noqa: F821


def k_calls_bad_helper(x, out):
    t = helper_with_error(tj.load(x, index=(0,), shape=(16,)))


def test_error_inside_helper_points_into_the_helper() -> None:
    err = check(k_calls_bad_helper, "undefined_in_helper", "name 'undefined_in_helper' is not defined")
    call_line = where("helper_with_error(tj.load(")[0]
    assert err.message.endswith(f"(in @tj.function 'helper_with_error' called at {__file__}:{call_line})")


@tj.function
def recursive(t):
    return recursive(t)  # recursion-here


def k_recursive(x, out):
    recursive(1)


def test_recursion() -> None:
    check(k_recursive, "recursive(t)  # recursion-here", "recursive call of @tj.function 'recursive'")


# ---------------------------------------------------------------------------------------------- shapes and types


def k_not_pow2(x, out):
    t = tj.load(x, index=(0,), shape=(12,))


def test_non_power_of_two_shape() -> None:
    check(k_not_pow2, "tj.load(x, index=(0,), shape=(12,))", "not a power of two (12)")


def k_runtime_shape(x, out, n):
    t = tj.load(x, index=(0,), shape=(n,))


def test_non_constant_shape() -> None:
    check(k_runtime_shape, "tj.load(x, index=(0,), shape=(n,))",
          "shape must be a tuple of compile-time constant ints, but item 0 is a run-time value (a scalar of type i32)",
          x=F32_1, out=F32_1, n=I32)


def k_index_count(x, out):
    t = tj.load(x, index=(0, 0), shape=(16,))


def test_index_count() -> None:
    check(k_index_count, "tj.load(x, index=(0, 0), shape=(16,))", "index has 2 entries but the array 'x' has 1")


def k_store_rank(x, out):
    t = tj.load(x, index=(0, 0), shape=(4, 4))
    tj.store(out, index=(0,), tile=t)  # store-rank


def test_store_rank_mismatch() -> None:
    check(k_store_rank, "tj.store(out, index=(0,), tile=t)  # store-rank",
          "the tile has rank 2 (shape (4, 4)) but the array 'out' has rank 1", x=F32_2, out=F32_1)


def k_broadcast(x, out):
    a = tj.load(x, index=(0,), shape=(16,))
    b = tj.load(x, index=(0,), shape=(32,))
    c = a + b  # bcast


def test_broadcast_mismatch() -> None:
    check(k_broadcast, "a + b  # bcast", "shapes (16,), (32,) cannot be broadcast together")


def k_mma_shapes(x, out):
    a = tj.load(x, index=(0, 0), shape=(16, 32))
    b = tj.load(x, index=(0, 0), shape=(16, 16))
    c = tj.mma(a, b, tj.zeros((16, 16), tj.float32))


def test_mma_shape_mismatch() -> None:
    check(k_mma_shapes, "tj.mma(a, b,", "inner dimensions differ: a is (16, 32) (M, K) and b is (16, 16)",
          x=F32_2, out=F32_2)


def k_mma_acc(x, out):
    a = tj.load(x, index=(0, 0), shape=(16, 16))
    c = tj.mma(a, a, tj.zeros((16, 16), tj.float16))


def test_mma_accumulator_dtype() -> None:
    check(k_mma_acc, "tj.mma(a, a,", "the accumulator must be float32 for float16 inputs, got float16",
          x=ArrayType(float16, 2), out=F32_2)


def k_overflow(x, out):
    t = tj.load(x, index=(0,), shape=(16,))
    u = t + 300


def test_constant_does_not_fit() -> None:
    check(k_overflow, "t + 300", "the constant 300 does not fit in int8", x=ArrayType(int8, 1), out=F32_1)


def k_float_bitand(x, out):
    t = tj.load(x, index=(0,), shape=(16,))
    u = t & 1


def test_bitwise_on_float() -> None:
    check(k_float_bitand, "t & 1", "operator & needs integer or bool operands, got float32")


def k_padding(x, out):
    t = tj.load(x, index=(0,), shape=(16,), padding=float("-inf"))


def test_padding_not_representable() -> None:
    check(k_padding, 'tj.load(x, index=(0,), shape=(16,), padding=float("-inf"))', "padding -inf is not a valid "
          "int32", x=ArrayType(int32, 1), out=F32_1)


def k_tile_if(x, out):
    t = tj.load(x, index=(0,), shape=(16,))
    if t > 0:
        pass


def test_if_on_a_tile() -> None:
    check(k_tile_if, "if t > 0:", "the condition of an if must be a scalar, got a tile of shape (16,)")


def k_array_index(x, out):
    v = x[3]


def test_indexing_an_array() -> None:
    check(k_array_index, "x[3]", "arrays cannot be indexed in tile code")


def k_axis(x, out):
    t = tj.load(x, index=(0,), shape=(16,))
    s = tj.sum(t, axis=1)


def test_reduce_axis_out_of_range() -> None:
    check(k_axis, "tj.sum(t, axis=1)", "tj.sum() axis 1 is out of range for a tile of rank 1")


# ---------------------------------------------------------------------------------------------- control flow


def k_one_branch(x, out, n):
    if n > 0:  # one-branch-if
        y = tj.load(x, index=(0,), shape=(16,))
    tj.store(out, index=(0,), tile=y)  # one-branch


def test_name_defined_in_one_branch() -> None:
    err = check(k_one_branch, "y)  # one-branch", "'y' is not defined on every path", x=F32_1, out=F32_1, n=I32)
    assert f"the if at line {where('if n > 0:  # one-branch-if')[0]}" in err.message


def k_loop_only(x, out, n):
    for i in range(n):
        z = tj.load(x, index=(i,), shape=(16,))
    tj.store(out, index=(0,), tile=z)


def test_name_defined_only_in_loop() -> None:
    check(k_loop_only, "z)", "'z' is not defined on every path: it is first assigned inside the run-time loop",
          x=F32_1, out=F32_1, n=I32)


def k_carried_type(x, out, n):
    acc = tj.zeros((16,), tj.float32)
    for i in range(n):
        acc = acc.astype(tj.float16)  # carried-type
    tj.store(out, index=(0,), tile=acc)


def test_loop_carried_type_change() -> None:
    err = check(k_carried_type, "acc = acc.astype(tj.float16)", "'acc' is carried by the loop at line",
                x=F32_1, out=F32_1, n=I32)
    assert "tile<16xf32>" in err.message and "tile<16xf16>" in err.message


def k_branch_types(x, out, n):
    t = tj.load(x, index=(0,), shape=(16,))
    if n > 0:
        t = t.astype(tj.float16)
    tj.store(out, index=(0,), tile=t)  # use-after-if


def test_if_branch_type_mismatch() -> None:
    err = check(k_branch_types, "t)  # use-after-if", "'t' is tile<16xf16> in one branch of the if", x=F32_1,
                out=F32_1, n=I32)
    assert "tile<16xf32> in the other" in err.message


def k_static_break(x, out, n):
    for i in tj.static_range(4):
        if n > i:
            break  # static-break


def test_static_loop_break_on_runtime_condition() -> None:
    check(k_static_break, "break  # static-break", "cannot depend on a run-time condition",
          x=F32_1, out=F32_1, n=I32)


def k_neg_step(x, out, n):
    for i in range(n, 0, -1):
        pass


def test_negative_range_step() -> None:
    check(k_neg_step, "range(n, 0, -1)", "range() step must be positive", x=F32_1, out=F32_1, n=I32)


def k_return_value(x, out):
    return 1


def test_kernel_returns_value() -> None:
    check(k_return_value, "return 1", "a kernel cannot return a value")


@tj.function
def early_helper(t, n):
    if n > 0:
        return t  # early-return
    return t + 1


def k_early_helper(x, out, n):
    early_helper(1, n)


def test_helper_return_inside_runtime_if() -> None:
    check(k_early_helper, "return t  # early-return", "can only return outside run-time if/for/while",
          x=F32_1, out=F32_1, n=I32)


def k_assert(x, out, N: tj.Constant[int]):
    assert N > 4, "N too small"


def test_assert_on_constant() -> None:
    check(k_assert, 'assert N > 4, "N too small"', "assertion failed: N too small", {"N": 2})


def k_runtime_assert(x, out, n):
    assert n > 4


def test_assert_on_runtime_value() -> None:
    check(k_runtime_assert, "assert n > 4", "assert needs a compile-time condition", x=F32_1, out=F32_1, n=I32)


def k_tile_and(x, out):
    t = tj.load(x, index=(0,), shape=(16,))
    u = (t > 0) and (t < 1)


def test_and_on_tiles() -> None:
    check(k_tile_and, "(t > 0) and (t < 1)", "'and' needs scalar operands; use & and |")


# ---------------------------------------------------------------------------------------------- parameters


def k_params(x, out, TILE: tj.Constant[int]):
    pass


def test_missing_constant_is_located_at_def() -> None:
    check(k_params, "def k_params", "missing the value of constant parameter 'TILE'")


def test_extra_argument_is_located_at_def() -> None:
    with pytest.raises(TileCompileError) as info:
        translate(k_params, {"x": F32_1, "out": F32_1, "bogus": F32_1}, {"TILE": 4})
    assert info.value.line == where("def k_params")[0]
    assert "k_params() has no parameter 'bogus'" in info.value.message


def test_type_given_for_a_constant() -> None:
    with pytest.raises(TileCompileError, match=r"'TILE' is a tj\.Constant parameter: give its value in constants"):
        translate(k_params, {"x": F32_1, "out": F32_1, "TILE": I32}, {})


def test_array_rank_limit() -> None:
    with pytest.raises(TileCompileError, match="arrays must have 1 to 4 dims, got 5"):
        translate(k_params, {"x": ArrayType(float32, 5), "out": F32_1}, {"TILE": 4})


def k_varargs(*args):
    pass


def test_varargs_kernel() -> None:
    with pytest.raises(TileCompileError, match=r"kernel parameters cannot be \*args") as info:
        signature_params(k_varargs)
    assert info.value.line == where("def k_varargs")[0]


# ---------------------------------------------------------------------------------------------- locations


def test_columns_of_indented_kernels() -> None:
    class Holder:
        @staticmethod
        def nested(x, out):
            t = tj.load(x, index=(0,), shape=(16,))
            u = t + bogus_nested_name  # noqa: F821

    check(Holder.nested, "bogus_nested_name", "name 'bogus_nested_name' is not defined")


def k_unicode(x, out):
    s = "ééé"; u = bogus_after_unicode  # noqa: E702, F821


def test_columns_count_characters_not_bytes() -> None:
    check(k_unicode, "bogus_after_unicode", "name 'bogus_after_unicode' is not defined")


def test_internal_errors_are_located_and_chained(monkeypatch: pytest.MonkeyPatch) -> None:
    from tilejit.language.frontend import calls

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("boom")

    api, _ = calls.BUILTINS[id(tj.bid)]
    monkeypatch.setitem(calls.BUILTINS, id(tj.bid), (api, broken))

    def k_internal(x, out):
        i = tj.bid(0)  # internal-error

    err = check(k_internal, "tj.bid(0)  # internal-error", "internal error: KeyError: 'boom'")
    assert isinstance(err.__cause__, KeyError)


def test_source_must_be_available() -> None:
    namespace: dict[str, Any] = {"tj": tj}
    exec("def k(x, out):\n    pass\n", namespace)
    with pytest.raises(TileCompileError, match="cannot read the source of k"):
        translate(namespace["k"], {"x": F32_1, "out": F32_1}, {})


def test_calling_tile_functions_outside_a_kernel() -> None:
    with pytest.raises(TileCompileError, match=r"tj.load\(\) can only be used inside a @tj.kernel"):
        tj.load(None, index=(0,), shape=(4,))
    with pytest.raises(TileCompileError, match=r"is a @tj\.function"):
        helper_two(1, 2)
    assert tj.cdiv(10, 4) == 3
    assert list(tj.static_range(1, 7, 2)) == [1, 3, 5]


GLOBAL_SHADOWED = 3


def k_local_before_assignment(x, out, n):
    if n > 0:
        GLOBAL_SHADOWED = 4
        return
    t = GLOBAL_SHADOWED + 1  # shadowed-use


def test_local_name_is_never_read_from_globals() -> None:
    check(k_local_before_assignment, "GLOBAL_SHADOWED + 1  # shadowed-use", "'GLOBAL_SHADOWED' is not defined on "
          "every path", x=F32_1, out=F32_1, n=I32)


# ------------------------------------------------------------------------------- audit: user mistakes


def k_int_of_text(x, out):
    v = int("abc")  # int-of-text


def k_huge_int(x, out):
    t = tj.load(x, index=(0,), shape=(16,))
    tj.store(out, index=(0,), tile=t + 10**400)  # huge-int


def k_range_step0(x, out):
    for i in tj.static_range(1, 10, 0):  # step-zero
        pass


def k_int_three_args(x, out):
    v = int(1, 2, 3)  # int-three


def k_huge_tile(x, out, T: tj.Constant[int]):
    tj.store(out, index=(0,), tile=tj.load(x, index=(0,), shape=(T,)))  # huge-tile


def k_huge_bcast(x, out):
    a = tj.zeros((2048, 1), tj.float32)
    b = tj.zeros((1, 1024), tj.float32)
    c = a + b  # huge-bcast


def k_bare_raise(x, out):
    raise  # bare-raise


def k_raise_class(x, out):
    raise ValueError  # raise-class


def k_keepdims_str(x, out):
    t = tj.load(x, index=(0,), shape=(16,))
    s = tj.sum(t, keepdims="yes")  # keepdims-str


def k_carried_dims(x, out, n):
    s = tj.zeros((16,), tj.float32)
    for i in range(n):
        s = x.shape  # carried-dims
    tj.store(out, index=(0,), tile=s)


def test_audit_user_mistakes_get_plain_located_messages() -> None:
    for kernel, at, message, consts, types in [
        (k_int_of_text, 'int("abc")', "int() of 'abc' is not a number", {}, {}),
        (k_huge_int, "t + 10**400", "does not fit float32", {}, {}),
        (k_range_step0, "tj.static_range(1, 10, 0)", "step must not be zero", {}, {}),
        (k_int_three_args, "int(1, 2, 3)", "at most 2 arguments", {}, {}),
        (k_huge_tile, "tj.load(x, index=(0,), shape=(T,))", "at most 1048576 (2**20) elements", {"T": 2**31}, {}),
        (k_huge_bcast, "a + b  # huge-bcast", "at most 1048576 (2**20) elements", {}, {}),
        (k_bare_raise, "raise  # bare-raise", "bare 'raise'", {}, {}),
        (k_raise_class, "raise ValueError  #", "the kernel raised ValueError", {}, {}),
        (k_keepdims_str, 'tj.sum(t, keepdims="yes")', "keepdims must be a compile-time True or False", {}, {}),
        (k_carried_dims, "s = x.shape  # carried-dims", "is assigned x.shape here", {}, {"n": I32}),
    ]:
        err = check(kernel, at, message, consts, **({"x": F32_1, "out": F32_1} | types))
        assert "internal error" not in str(err) and "ArrayDims" not in str(err)


def k_const_int(x, out, TILE: tj.Constant[int]):
    tj.store(out, index=(0,), tile=tj.load(x, index=(0,), shape=(TILE,)))


@pytest.mark.parametrize("value", [16.0, "16", True, None])
def test_constant_value_is_checked_against_its_annotation(value: object) -> None:
    with pytest.raises(TileCompileError) as info:
        translate(k_const_int, {"x": F32_1, "out": F32_1}, {"TILE": value})
    msg = info.value.message
    assert "'TILE'" in msg and "tj.Constant[int]" in msg and repr(value) in msg, msg
    assert info.value.line == where("def k_const_int(")[0]


def k_same_const_in_loop(x, out, n, BM: tj.Constant[int]):
    shape = (BM,)
    acc = tj.zeros(shape, tj.float32)
    for i in range(n):
        shape = (BM,)
        acc += tj.load(x, index=(i,), shape=shape)
    tj.store(out, index=(0,), tile=acc)


def test_reassigning_an_equal_constant_in_a_runtime_loop_is_allowed() -> None:
    translate(k_same_const_in_loop, {"x": F32_1, "out": F32_1, "n": I32}, {"BM": 16})


def test_long_expressions_and_deep_helper_chains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    terms = " + ".join(["t"] * 800)
    src = ("import tilejit as tj\n@tj.function\ndef f0(t):\n    return t + 1\n"
           + "".join(f"@tj.function\ndef f{i}(t):\n    return f{i - 1}(t)\n" for i in range(1, 2000))
           + "@tj.kernel\ndef long_sum(x, out):\n    t = tj.load(x, index=(0,), shape=(16,))\n"
           + f"    tj.store(out, index=(0,), tile={terms})\n"
           + "@tj.kernel\ndef deep(x, out):\n    t = tj.load(x, index=(0,), shape=(16,))\n"
           + "    tj.store(out, index=(0,), tile=f1999(t))\n")
    (tmp_path / "deep_kernels_mod.py").write_text(src, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import deep_kernels_mod as m  # type: ignore[import-not-found]

    translate(m.long_sum, {"x": F32_1, "out": F32_1}, {})
    with pytest.raises(TileCompileError) as info:
        translate(m.deep, {"x": F32_1, "out": F32_1}, {})
    assert "too deeply nested" in str(info.value) and info.value.filename == str(tmp_path / "deep_kernels_mod.py")


def test_caret_lines_up_under_tab_indented_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The caret's indent copies the line's tabs (it was all spaces, so it sat left of the error wherever a
    terminal expands tabs)."""
    src = ("import tilejit as tj\n\n\nclass Holder:\n\t@staticmethod\n\tdef k(x, out):\n"
           "\t\tt = tj.load(x, index=(0,), shape=(16,))\n\t\tu = t +\tbogus_after_tab  # noqa: F821\n")
    (tmp_path / "tab_kernels_mod.py").write_text(src, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import tab_kernels_mod as m  # type: ignore[import-not-found]

    with pytest.raises(TileCompileError) as info:
        translate(m.Holder.k, {"x": F32_1, "out": F32_1}, {})
    err = info.value
    assert (err.line, err.col) == (8, 10)
    _, shown, caret = str(err).splitlines()
    assert shown == "    \t\tu = t +\tbogus_after_tab  # noqa: F821"
    assert caret == "    \t\t       \t^"
    for width in (2, 4, 8):
        assert caret.expandtabs(width).index("^") == shown.expandtabs(width).index("bogus_after_tab")
