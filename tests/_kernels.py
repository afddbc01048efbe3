"""What the op tests (test_ops_gpu.py, test_tileir_ops.py) share: the dtype lists and tolerances, host arrays of
a dtype by name, poisoned outputs, and the ``@tj.function`` bodies their kernels apply an op named by a
``tj.Constant[str]`` with (the front end inlines them, so each kernel's IR is what the inline ``if`` chain made)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tilejit as tj

try:
    import ml_dtypes

    BF16: Any = ml_dtypes.bfloat16
except ImportError:  # pragma: no cover - bf16 cases skip
    BF16 = None

INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
ALL = ["bool", *INTS, *FLOATS]
#: Relative error (norm of the difference over the norm of the reference) each float dtype may have.
RTOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-6, "float64": 1e-12}


def np_dtype(name: str) -> Any:
    """The numpy dtype called ``name`` (bfloat16: ml_dtypes', skipping the test without it)."""
    if name == "bfloat16":
        if BF16 is None:
            pytest.skip("ml_dtypes is needed for bfloat16 host arrays")
        return BF16
    return np.dtype(name)


def poison(shape: tuple[int, ...], name: str) -> np.ndarray:
    """An output that shows unwritten elements: NaN for floats, True for bools, 0x5A for integers."""
    if name in FLOATS:
        return np.full(shape, np.nan).astype(np_dtype(name))
    if name == "bool":
        return np.ones(shape, dtype=bool)
    return np.full(shape, 0x5A, dtype=name)


@tj.function
def unary_op(FN, a):
    """``FN`` of tile ``a``: neg, invert, abs, floor, ceil, exp, exp2, log, log2, sqrt, rsqrt, sin, cos, tanh, erf,
    sigmoid, or pow (``a ** 2.0``)."""
    if FN == "neg":
        r = -a
    elif FN == "invert":
        r = ~a
    elif FN == "abs":
        r = tj.abs(a)
    elif FN == "floor":
        r = tj.floor(a)
    elif FN == "ceil":
        r = tj.ceil(a)
    elif FN == "exp":
        r = tj.exp(a)
    elif FN == "exp2":
        r = tj.exp2(a)
    elif FN == "log":
        r = tj.log(a)
    elif FN == "log2":
        r = tj.log2(a)
    elif FN == "sqrt":
        r = tj.sqrt(a)
    elif FN == "rsqrt":
        r = tj.rsqrt(a)
    elif FN == "sin":
        r = tj.sin(a)
    elif FN == "cos":
        r = tj.cos(a)
    elif FN == "tanh":
        r = tj.tanh(a)
    elif FN == "erf":
        r = tj.erf(a)
    elif FN == "sigmoid":
        r = tj.sigmoid(a)
    elif FN == "pow":
        r = a**2.0
    return r


@tj.function
def binary_op(OP, a, b):
    """``a OP b``: add, sub, mul, truediv, floordiv, mod, pow, maximum, minimum, and, or, xor, lshift, rshift, mulhi
    (``tj.umulhi``), or a comparison eq, ne, lt, le, gt, ge."""
    if OP == "add":
        r = a + b
    elif OP == "sub":
        r = a - b
    elif OP == "mul":
        r = a * b
    elif OP == "truediv":
        r = a / b
    elif OP == "floordiv":
        r = a // b
    elif OP == "mod":
        r = a % b
    elif OP == "pow":
        r = a**b
    elif OP == "maximum":
        r = tj.maximum(a, b)
    elif OP == "minimum":
        r = tj.minimum(a, b)
    elif OP == "and":
        r = a & b
    elif OP == "or":
        r = a | b
    elif OP == "xor":
        r = a ^ b
    elif OP == "lshift":
        r = a << b
    elif OP == "rshift":
        r = a >> b
    elif OP == "mulhi":
        r = tj.umulhi(a, b)
    elif OP == "eq":
        r = a == b
    elif OP == "ne":
        r = a != b
    elif OP == "lt":
        r = a < b
    elif OP == "le":
        r = a <= b
    elif OP == "gt":
        r = a > b
    elif OP == "ge":
        r = a >= b
    return r


@tj.function
def reduce_op(FN, t, AXIS):
    """``FN`` of tile ``t`` along ``AXIS``: sum, prod, max, min, argmax or argmin."""
    if FN == "sum":
        r = tj.sum(t, axis=AXIS)
    elif FN == "prod":
        r = tj.prod(t, axis=AXIS)
    elif FN == "max":
        r = tj.max(t, axis=AXIS)
    elif FN == "min":
        r = tj.min(t, axis=AXIS)
    elif FN == "argmax":
        r = tj.argmax(t, axis=AXIS)
    elif FN == "argmin":
        r = tj.argmin(t, axis=AXIS)
    return r
