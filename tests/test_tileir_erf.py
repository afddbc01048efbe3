"""The Tile IR backend's erf (lower/erf.py: fdlibm's algorithm built from Tile IR ops), evaluated step for step
in numpy float32/float64 arithmetic against math.erf over a dense sweep with the edge values, and compiled
through tileiras + tileirdisasm."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest

import tilejit as tj
from tilejit.backends.tileir import module_text
from tilejit.backends.tileir.lower import erf as E

Arr = Any


class NumpyMath:
    """lower/erf.py's FloatMath in numpy arithmetic of one dtype: each op rounded once, as the emitted op.
    ``exp_ulps`` moves every exp result that many ulps (to bound the GPU's exp error, not correctly rounded)."""

    def __init__(self, dtype: type, exp_ulps: int = 0) -> None:
        self.dtype, self.exp_ulps = dtype, exp_ulps
        self.ibits = np.int64 if dtype is np.float64 else np.int32

    def const(self, value: float) -> Arr:
        """``value`` in the dtype (exactly: the formula's constants are representable)."""
        v = self.dtype(value)
        assert float(v) == value
        return v

    def add(self, x: Arr, y: Arr) -> Arr:
        """x + y."""
        return np.add(x, y, dtype=self.dtype)

    def sub(self, x: Arr, y: Arr) -> Arr:
        """x - y."""
        return np.subtract(x, y, dtype=self.dtype)

    def mul(self, x: Arr, y: Arr) -> Arr:
        """x * y."""
        return np.multiply(x, y, dtype=self.dtype)

    def div(self, x: Arr, y: Arr) -> Arr:
        """x / y."""
        return np.divide(x, y, dtype=self.dtype)

    def neg(self, x: Arr) -> Arr:
        """-x."""
        return np.negative(x)

    def abs(self, x: Arr) -> Arr:
        """|x|."""
        return np.abs(x)

    def exp(self, x: Arr) -> Arr:
        """numpy's exp, moved ``exp_ulps`` ulps."""
        r = np.exp(x, dtype=self.dtype)
        step = np.inf if self.exp_ulps > 0 else -np.inf
        for _ in range(abs(self.exp_ulps)):
            r = np.nextafter(r, self.dtype(step))
        return r

    def lt(self, x: Arr, y: Arr) -> Arr:
        """x < y."""
        return np.less(x, y)

    def ge(self, x: Arr, y: Arr) -> Arr:
        """x >= y."""
        return np.greater_equal(x, y)

    def select(self, c: Arr, x: Arr, y: Arr) -> Arr:
        """c ? x : y."""
        return np.where(c, x, y).astype(self.dtype)

    def clear_low_bits(self, x: Arr, n: int) -> Arr:
        """x with its low n encoding bits cleared."""
        return (np.asarray(x).view(self.ibits) & self.ibits(-(1 << n))).view(self.dtype)

    def copysign(self, x: Arr, s: Arr) -> Arr:
        """x with s's sign bit (or of the sign bits, as emitted)."""
        sign = self.ibits(np.iinfo(self.ibits).min)
        xi, si = np.asarray(x).view(self.ibits), np.asarray(s).view(self.ibits)
        return (xi | (si & sign)).view(self.dtype)


def _sweep(dtype: type) -> np.ndarray:
    """Dense values over the branches (both signs), every branch bound and its neighbours, tiny, subnormal
    and huge values."""
    f = np.finfo(dtype)
    lin = np.linspace(0.0, 7.0, 400_001)
    logs = np.logspace(-45 if dtype is np.float32 else -320, 38, 20_001)
    c = E._C64 if dtype is np.float64 else E._C32
    bounds = [c[k] for k in ("tiny", "small", "mid", "split", "big")] + [1.0, 0.5, 2.0, 4.0, 27.0, 28.0]
    edges = []
    for b in bounds:
        v = dtype(b)
        for _ in range(4):
            edges += [v]
            v = np.nextafter(v, dtype(0))
        v = dtype(b)
        for _ in range(4):
            v = np.nextafter(v, dtype(np.inf))
            edges += [v]
    special = [0.0, f.smallest_subnormal, f.tiny, f.max, 1e-30]
    pos = np.concatenate([lin, logs, np.array(edges, dtype=np.float64), np.array(special, dtype=np.float64)])
    pos = pos.astype(dtype)
    return np.concatenate([pos, -pos])


def _ulp_error(got: np.ndarray, x: np.ndarray, dtype: type) -> float:
    """Largest |got - erf(x)| in ulps of the exact result (computed by math.erf in float64; for float64 the
    float64 reference itself is within an ulp of the true value, see the caller's bound)."""
    ref = np.array([math.erf(float(v)) for v in x], dtype=np.float64)
    # ulp of the reference in the dtype (the subnormal spacing at the bottom)
    spacing = np.spacing(np.abs(ref).astype(dtype)).astype(np.float64)
    return float(np.max(np.abs(got.astype(np.float64) - ref) / spacing))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("exp_ulps", [0, -2, 2])
def test_erf_formula_accuracy(dtype: type, exp_ulps: int) -> None:
    """The formula in the dtype's own arithmetic stays within 2 ulp of math.erf (float32) / 2 ulp of the
    float64 reference (float64) everywhere, also with every exp off by 2 ulp (the GPU's exp is not correctly
    rounded); erf(+-0) = +-0, erf(+-inf) = +-1, erf(NaN) = NaN, odd symmetry exact."""
    x = _sweep(dtype)
    with np.errstate(all="ignore"):  # the unselected branches divide by zero / overflow, as on the GPU
        got = E.erf(NumpyMath(dtype, exp_ulps), x, dtype is np.float64)
    assert got.dtype == dtype
    err = _ulp_error(got, x, dtype)
    print(f"{np.dtype(dtype).name} exp_ulps={exp_ulps}: max error {err:.3f} ulp over {x.size} values")
    assert err <= 2.0, err
    assert np.array_equal(got[: x.size // 2], -got[x.size // 2:])
    with np.errstate(all="ignore"):
        sp = E.erf(NumpyMath(dtype), np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan], dtype=dtype),
                   dtype is np.float64)
    assert list(sp[:4]) == [0.0, 0.0, 1.0, -1.0]
    assert not np.signbit(sp[0]) and np.signbit(sp[1])
    assert np.isnan(sp[4]) and np.isnan(sp[5])


class CountingMath(NumpyMath):
    """NumpyMath that also counts the Tile IR ops lower/elementwise.py's ``_ErfMath`` emits for each call."""

    EMITS = {"add": ["addf"], "sub": ["subf"], "mul": ["mulf"], "div": ["divf"], "neg": ["negf"], "abs": ["absf"],
             "exp": ["exp"], "lt": ["cmpf"], "ge": ["cmpf"], "select": ["select"],
             "clear_low_bits": ["bitcast", "andi", "bitcast"], "copysign": ["bitcast", "bitcast", "andi", "ori",
                                                                          "bitcast"]}

    def __init__(self, dtype: type) -> None:
        super().__init__(dtype)
        self.counts: dict[str, int] = {}
        for name, ops in self.EMITS.items():
            setattr(self, name, self._counting(getattr(self, name), ops))

    def _counting(self, fn: Any, ops: list[str]) -> Any:
        """``fn``, counting ``ops`` at each call."""
        def call(*args: Any) -> Any:
            for o in ops:
                self.counts[o] = self.counts.get(o, 0) + 1
            return fn(*args)
        return call


@tj.kernel
def erf_kernel(x, out, TILE: tj.Constant[int]):  # type: ignore[no-untyped-def]
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.erf(tj.load(x, index=(i,), shape=(TILE,))))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_the_lowering_emits_the_formula_op_for_op(dtype: str) -> None:
    """The Tile IR text holds exactly the ops the formula's calls emit (so the numpy mirror above is what the GPU
    computes, exp aside): f16/bf16 widened to f32 and rounded back once, IEEE divisions (no rounding<full>
    shown), exp at its default (full) rounding."""
    t = getattr(tj, dtype)[:]
    fn = tj.compile(erf_kernel, (t, t), constants={"TILE": 128}, target="sm_90").ir()
    text = module_text(fn, "sm_90")
    body = text[text.index("load_view_tko"):text.index("store_view_tko")]
    found: dict[str, int] = {}
    for name in re.findall(r"= (\w+) ", body):
        found[name] = found.get(name, 0) + 1
    f64 = dtype == "float64"
    m = CountingMath(np.float64 if f64 else np.float32)
    with np.errstate(all="ignore"):
        E.erf(m, np.zeros(1, np.float64 if f64 else np.float32), f64)
    want = dict(m.counts)
    if dtype in ("float16", "bfloat16"):
        want["ftof"] = 2
    found.pop("constant", None)
    assert found == want
    compute = "f64" if f64 else "f32"
    assert len(re.findall(rf"= exp %\w+ : tile<128x{compute}>", body)) == 2
    assert "rounding<" not in "".join(re.findall(r"= divf [^\n]*", body))
