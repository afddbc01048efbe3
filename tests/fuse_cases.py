"""Random fused functions for tests/test_fuse_gpu.py: ``generate(seed)`` writes a ``@tj.fuse`` function (its Python
source) of random elementwise expression trees, possibly ending in a reduction, over random arguments: arrays of
shapes that broadcast together (missing and size-1 axes), in random layouts (contiguous, transposed, every other
element, reversed, zero strides, offset into a larger buffer), Python numbers and numpy scalars; and what numpy
computes from the same values in float64 (integers exactly, in their own dtypes).

Values stay small (inputs in [-1, 1], ``exp`` of at most 2, divisors of at least 0.5) so that a float result's
distance from the float64 value is bounded by a few roundings per operation: ``Case.tolerance`` allows
``eps * (2 + ops) * max(1, magnitude)`` per element (``eps``: the coarsest float dtype the function touches).
Comparisons, ``floor`` and ``ceil`` read only arguments and integer values (exact in every dtype), so no rounding
can flip them.

``python tests/fuse_cases.py SEED`` prints one case.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

FLOAT_EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
INT_DTYPES = ("int32", "int8", "uint8", "int64")
_ERF = np.frompyfunc(math.erf, 1, 1)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """Nearest bfloat16 (ties to even) of float32 values, as float32 numbers."""
    f = np.array(x, dtype=np.float32, ndmin=1)
    bits = f.view(np.uint32).astype(np.uint64)
    out = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    return out.reshape(np.shape(x))


def rounded(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x`` rounded to ``dtype``, held as float64 (floats) or as the integer dtype."""
    if dtype == "bfloat16":
        return round_bf16(np.asarray(x, np.float32)).astype(np.float64)
    if dtype in FLOAT_EPS:
        return np.asarray(x).astype(dtype).astype(np.float64)
    return np.asarray(x).astype(dtype)


@dataclass
class Arg:
    """One argument: an array (``values``: its logical contents, ``layout`` how it sits in device memory), a Python
    number or a numpy scalar."""

    name: str
    kind: str  # "array", "weak", "scalar"
    dtype: str
    values: Any
    layout: str = "contiguous"
    perm: tuple[int, ...] = ()


def physical(arg: Arg) -> tuple[np.ndarray, tuple[int, ...], int]:
    """Where an array argument's elements are in its buffer: (the buffer's values, C-contiguous and 1-D; the view's
    strides and first element's offset, in elements), per ``arg.layout``."""
    v = np.asarray(arg.values)
    shape = v.shape

    def c(sh: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(int(x) // v.itemsize for x in np.empty(sh, v.dtype).strides)

    if arg.layout == "transposed":
        phys = np.transpose(v, arg.perm)
        st = [0] * len(shape)
        for k, p in enumerate(arg.perm):
            st[p] = c(phys.shape)[k]
        return np.ascontiguousarray(phys).reshape(-1), tuple(st), 0
    if arg.layout == "every_other":
        big = np.zeros(tuple(2 * n for n in shape), dtype=v.dtype)
        big[tuple(slice(None, None, 2) for _ in shape)] = v
        return big.reshape(-1), tuple(2 * s for s in c(big.shape)), 0
    if arg.layout == "reversed":
        phys = np.ascontiguousarray(v[tuple(slice(None, None, -1) for _ in shape)])
        return phys.reshape(-1), tuple(-s for s in c(shape)), sum((n - 1) * s for n, s in zip(shape, c(shape)))
    if arg.layout == "zero_stride":
        k = arg.perm[0]
        phys = np.ascontiguousarray(np.take(v, [0], axis=k))
        return phys.reshape(-1), tuple(0 if d == k else s for d, s in enumerate(c(phys.shape))), 0
    if arg.layout == "offset":
        return np.concatenate([np.zeros(3, v.dtype), v.reshape(-1)]), c(shape), 3
    return np.ascontiguousarray(v).reshape(-1), c(shape), 0


@dataclass
class Expr:
    """A generated expression: its source, its float64 (or exact integer) value broadcast to ``shape``, whether it
    is exact (integer, or an argument's own values), how many inexact operations made it, its largest magnitude."""

    text: str
    value: np.ndarray
    shape: tuple[int, ...]
    is_int: bool
    exact: bool
    ops: int
    mag: float


@dataclass
class Case:
    """One random fused function, its arguments and the outputs numpy computes."""

    seed: int
    source: str
    args: list[Arg]
    expected: list[np.ndarray]
    exact: list[bool]
    ops: list[int]
    mags: list[float]
    eps: float
    reduce_counts: list[int] = field(default_factory=list)
    use_out: bool = False

    def tolerance(self, k: int) -> float:
        """How far output ``k`` may be from the float64 value, per element."""
        if self.exact[k]:
            return 0.0
        per = self.eps * (2 + self.ops[k]) * max(1.0, self.mags[k])
        n = self.reduce_counts[k] if self.reduce_counts else 1
        return per * n + 2.0**-20 * n * max(1.0, self.mags[k])

    def report(self) -> str:
        lines = [f"seed {self.seed}:", self.source]
        for a in self.args:
            if a.kind == "array":
                lines.append(f"  {a.name}: {a.dtype}{list(np.shape(a.values))} {a.layout} {a.perm or ''}")
            else:
                lines.append(f"  {a.name}: {a.kind} {a.dtype} {a.values!r}")
        return "\n".join(lines)


class Generator:
    """Draws one case from a seed."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.args: list[Arg] = []
        self.exprs: list[Expr] = []
        self.dtypes: set[str] = set()

    def pick(self, items: Any, p: Any = None) -> Any:
        return items[int(self.rng.choice(len(items), p=p))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    # ---------------------------------------------------------------- arguments

    def full_shape(self) -> tuple[int, ...]:
        rank = int(self.pick([0, 1, 1, 2, 2, 2, 3, 3, 4, 5, 6]))
        budget = 200_000 if rank <= 2 else 60_000
        shape = []
        for _ in range(rank):
            shape.append(int(self.pick([1, 2, 3, 5, 7, 17, 31, 64, 100, 129, 1000, 4100])))
        while math.prod(shape) > budget:
            k = int(self.rng.integers(len(shape)))
            shape[k] = max(1, shape[k] // 3)
        return tuple(shape)

    def arg_shape(self, full: tuple[int, ...]) -> tuple[int, ...]:
        """A shape that broadcasts to ``full``: some leading axes dropped, some axes of size 1."""
        drop = int(self.rng.integers(0, len(full) + 1)) if self.chance(0.4) else 0
        shape = list(full[drop:])
        for k in range(len(shape)):
            if self.chance(0.2):
                shape[k] = 1
        return tuple(shape)

    def array(self, full: tuple[int, ...], dtype: str) -> Arg:
        shape = self.arg_shape(full) if self.args else full
        if dtype in FLOAT_EPS:
            values = rounded(self.rng.uniform(-1, 1, shape), dtype)
        elif dtype == "uint8":
            values = self.rng.integers(0, 40, shape).astype(dtype)
        else:
            values = self.rng.integers(-40, 40, shape).astype(dtype)
        layouts = ["contiguous", "transposed", "every_other", "reversed", "zero_stride", "offset"]
        layout = self.pick(layouts, p=[0.35, 0.15, 0.15, 0.1, 0.1, 0.15])
        if not shape:
            layout = "contiguous"
        perm: tuple[int, ...] = ()
        if layout == "transposed":
            perm = tuple(int(p) for p in self.rng.permutation(len(shape)))
        if layout == "zero_stride":
            big = [k for k, n in enumerate(shape) if n > 1]
            if not big:
                layout = "contiguous"
            else:
                k = int(self.pick(big))
                perm = (k,)
                values = np.broadcast_to(np.take(values, [0], axis=k), shape).copy()
        name = "abcdefgh"[len(self.args)]
        return Arg(name, "array", dtype, values, layout, perm)

    def arguments(self, full: tuple[int, ...]) -> None:
        kind = self.pick(["float32", "float64", "bfloat16", "float16", "mixed", "int"], p=[0.3, 0.15, 0.15, 0.1, 0.2,
                                                                                             0.1])
        floats = {"mixed": ["float32", "bfloat16", "float16"]}.get(kind, [kind] if kind in FLOAT_EPS else ["float32"])
        self.dtypes.update(floats[:1])
        n = int(self.rng.integers(1, 4))
        for _ in range(n):
            dt = self.pick(floats)
            self.args.append(self.array(full, dt))
            self.dtypes.add(dt)
        if kind == "int" or self.chance(0.25):
            self.args.append(self.array(full, self.pick(INT_DTYPES[:3])))
        if self.chance(0.5):
            name = "abcdefgh"[len(self.args)]
            if self.chance(0.7) or not self.int_arrays():
                self.args.append(Arg(name, "weak", "float", float(np.round(self.rng.uniform(-1, 1), 3))))
            else:
                self.args.append(Arg(name, "weak", "int", int(self.rng.integers(1, 4))))
        if self.chance(0.2):
            name = "abcdefgh"[len(self.args)]
            dt = self.pick(sorted(self.dtypes))
            v = float(rounded(np.array(self.rng.uniform(-1, 1)), dt))
            self.args.append(Arg(name, "scalar", dt, v))

    # ---------------------------------------------------------------- expressions

    def int_arrays(self) -> list[Arg]:
        return [a for a in self.args if a.kind == "array" and a.dtype not in FLOAT_EPS]

    def leaf(self) -> Expr:
        """A float argument: an array (often) or a number argument."""
        return self.leaf_typed()[0]

    def leaf_typed(self) -> tuple[Expr, str]:
        """``leaf()`` and its dtype ("weak" for a Python number)."""
        arrays = [a for a in self.args if a.kind == "array" and a.dtype in FLOAT_EPS]
        numbers = [a for a in self.args if a.kind in ("weak", "scalar") and a.dtype != "int"]
        a = self.pick(arrays) if arrays and (not numbers or self.chance(0.85)) else self.pick(numbers)
        v = np.asarray(a.values, dtype=np.float64)
        return Expr(a.name, v, v.shape, False, True, 0, float(np.max(np.abs(v), initial=0))), \
            "weak" if a.kind == "weak" else a.dtype

    def literal(self) -> tuple[str, float]:
        c = float(np.round(self.rng.uniform(-1.5, 1.5), 2))
        return repr(c), c

    def combine(self, text: str, value: Any, parts: list[Expr], inexact: bool) -> Expr:
        shape = np.broadcast_shapes(*(p.shape for p in parts))
        v = np.asarray(value, dtype=np.float64)
        ops = sum(p.ops for p in parts) + (1 if inexact else 0)
        mag = max([float(np.max(np.abs(v), initial=0))] + [p.mag for p in parts])
        return Expr(text, np.broadcast_to(v, shape), shape, False, False, ops, mag)

    def float_expr(self, depth: int) -> Expr:
        if depth <= 0 or self.chance(0.15):
            if self.int_arrays() and self.chance(0.2):
                i = self.int_expr(1)
                return Expr(f"({i.text}).astype(tj.float32)", i.value.astype(np.float64), i.shape, False, True, 0,
                            i.mag)
            return self.leaf()
        kind = self.pick(["bin", "bin", "literal", "div", "minmax", "unary", "unary", "math", "where", "cast", "floor"])
        if kind == "math":
            return self.math(self.float_expr(depth - 1))
        if kind == "literal":
            a = self.float_expr(depth - 1)
            text, c = self.literal()
            op = self.pick(["+", "-", "*", "r-"])
            if op == "r-":
                return self.combine(f"({text} - {a.text})", c - a.value, [a], False)
            v = {"+": a.value + c, "-": a.value - c, "*": a.value * c}[op]
            return self.combine(f"({a.text} {op} {text})", v, [a], False)
        if kind in ("bin", "div", "minmax"):
            a, b = self.float_expr(depth - 1), self.float_expr(depth - 1)
            if kind == "div":
                return self.combine(f"({a.text} / (tj.abs({b.text}) + 0.5))", a.value / (np.abs(b.value) + 0.5),
                                    [a, b], True)
            if kind == "minmax":
                fn = self.pick(["maximum", "minimum"])
                return self.combine(f"tj.{fn}({a.text}, {b.text})", getattr(np, fn)(a.value, b.value), [a, b], False)
            op = self.pick(["+", "-", "*"])
            if op == "*" and a.mag * b.mag > 8:
                return self.combine(f"tj.tanh({a.text} * {b.text})", np.tanh(a.value * b.value), [a, b], True)
            v = {"+": a.value + b.value, "-": a.value - b.value, "*": a.value * b.value}[op]
            return self.combine(f"({a.text} {op} {b.text})", v, [a, b], False)
        if kind == "unary":
            a = self.float_expr(depth - 1)
            fn = self.pick(["neg", "abs", "tanh", "sigmoid", "sin", "cos", "erf", "exp", "log", "sqrt", "square",
                            "numpy", "math"])
            x = a.value
            if fn == "math":
                return self.math(a)
            table: dict[str, tuple[str, Any]] = {
                "neg": (f"(-{a.text})", -x), "abs": (f"tj.abs({a.text})", np.abs(x)),
                "tanh": (f"tj.tanh({a.text})", np.tanh(x)), "sigmoid": (f"tj.sigmoid({a.text})", 1 / (1 + np.exp(-x))),
                "sin": (f"tj.sin({a.text})", np.sin(x)), "cos": (f"tj.cos({a.text})", np.cos(x)),
                "erf": (f"tj.erf({a.text})", np.asarray(_ERF(x), dtype=np.float64)),
                "exp": (f"tj.exp(tj.minimum({a.text}, 2.0))", np.exp(np.minimum(x, 2.0))),
                "log": (f"tj.log(tj.abs({a.text}) + 1.0)", np.log(np.abs(x) + 1.0)),
                "sqrt": (f"tj.sqrt(tj.abs({a.text}))", np.sqrt(np.abs(x))),
                "square": (f"({a.text}) ** 2", x * x),
                "numpy": (f"np.tanh({a.text})", np.tanh(x)),
            }
            if fn == "square" and a.mag > 3:
                fn = "tanh"
            text, v = table[fn]
            return self.combine(text, v, [a], fn not in ("neg", "abs"))
        if kind == "where":
            c = self.condition()
            a, b = self.float_expr(depth - 1), self.float_expr(depth - 1)
            return self.combine(f"tj.where({c.text}, {a.text}, {b.text})", np.where(c.value, a.value, b.value),
                                [a, b, c], False)
        if kind == "cast":
            a = self.float_expr(depth - 1)
            dt = self.pick(["float32", "float16", "bfloat16", "float64"])
            self.dtypes.add(dt)
            return self.combine(f"({a.text}).astype(tj.{dt})", a.value, [a], True)
        leaf = self.leaf()
        fn = self.pick(["floor", "ceil"])
        return self.combine(f"tj.{fn}({leaf.text})", getattr(np, fn)(leaf.value), [leaf], False)

    def math(self, a: Expr) -> Expr:
        """One of the language's further math functions of ``a`` (or with a second value), its operand kept where
        the function is well conditioned (and finite: exp2 and expm1 of at most 2, logs of at least 0 or 1)."""
        t, x = a.text, a.value
        fn = self.pick(["exp2", "log2", "log1p", "expm1", "rsqrt", "sinh", "cosh", "asin", "acos", "atan", "atan2",
                        "fma", "truediv"])  # not cbrt and erfinv: the Tile IR backend refuses them
        if fn in ("atan2", "fma", "truediv"):
            b = self.float_expr(0)
            if fn == "atan2":  # away from the origin, where its angle is ill conditioned
                return self.combine(f"tj.atan2({t}, tj.abs({b.text}) + 0.5)", np.arctan2(x, np.abs(b.value) + 0.5),
                                    [a, b], True)
            if fn == "truediv":
                return self.combine(f"tj.truediv({t}, tj.abs({b.text}) + 0.5)", x / (np.abs(b.value) + 0.5),
                                    [a, b], True)
            c = self.float_expr(0)
            return self.combine(f"tj.fma({t}, {b.text}, {c.text})", x * b.value + c.value, [a, b, c], True)
        table: dict[str, tuple[str, Any]] = {
            "exp2": (f"tj.exp2(tj.minimum({t}, 2.0))", np.exp2(np.minimum(x, 2.0))),
            "log2": (f"tj.log2(tj.abs({t}) + 1.0)", np.log2(np.abs(x) + 1.0)),
            "log1p": (f"tj.log1p(tj.abs({t}))", np.log1p(np.abs(x))),
            "expm1": (f"tj.expm1(tj.minimum({t}, 2.0))", np.expm1(np.minimum(x, 2.0))),
            "rsqrt": (f"tj.rsqrt(tj.abs({t}) + 0.5)", 1 / np.sqrt(np.abs(x) + 0.5)),
            "sinh": (f"tj.sinh(tj.minimum(tj.maximum({t}, -2.0), 2.0))", np.sinh(np.clip(x, -2.0, 2.0))),
            "cosh": (f"tj.cosh(tj.minimum(tj.maximum({t}, -2.0), 2.0))", np.cosh(np.clip(x, -2.0, 2.0))),
            "asin": (f"tj.asin(tj.minimum(tj.maximum({t}, -0.75), 0.75))", np.arcsin(np.clip(x, -0.75, 0.75))),
            "acos": (f"tj.acos(tj.minimum(tj.maximum({t}, -0.75), 0.75))", np.arccos(np.clip(x, -0.75, 0.75))),
            "atan": (f"tj.atan({t})", np.arctan(x)),
        }
        text, v = table[fn]
        return self.combine(text, v, [a], True)

    def condition(self) -> Expr:
        """A bool value from exact values only (arguments, integers), so that no rounding can flip it."""
        if self.chance(0.15):  # predicates of exact values: NaN from log of a negative, -inf from log(0)...
            a, _ = self.leaf_typed()
            x = a.value
            fn = self.pick(["isnan", "isinf", "signbit"])
            text, v = {"isnan": (f"tj.isnan(tj.log({a.text}))", x < 0),
                       "isinf": (f"tj.isinf(tj.log(tj.abs({a.text})))", x == 0),
                       "signbit": (f"tj.signbit({a.text})", np.signbit(x))}[fn]
            return Expr(text, np.asarray(v), a.shape, True, True, 0, 1.0)
        if self.int_arrays() and self.chance(0.4):
            i = self.int_expr(1)
            c = int(self.rng.integers(0, 6))
            return Expr(f"({i.text} > {c})", np.asarray(i.value > c), i.shape, True, True, 0, 1.0)
        (a, da), (b, db) = self.leaf_typed(), self.leaf_typed()
        # a Python number meets an array in the array's dtype (the tile language's weak numbers)
        if da == "weak" and db not in ("weak", "int"):
            a = Expr(a.text, rounded(a.value, db), a.shape, a.is_int, True, 0, a.mag)
        if db == "weak" and da not in ("weak", "int"):
            b = Expr(b.text, rounded(b.value, da), b.shape, b.is_int, True, 0, b.mag)
        op = self.pick(["<", "<=", ">", ">=", "!="])
        v = {"<": a.value < b.value, "<=": a.value <= b.value, ">": a.value > b.value, ">=": a.value >= b.value,
             "!=": a.value != b.value}[op]
        shape = np.broadcast_shapes(a.shape, b.shape)
        return Expr(f"({a.text} {op} {b.text})", np.broadcast_to(v, shape), shape, True, True, 0, 1.0)

    def int_expr(self, depth: int) -> Expr:
        """An integer expression over an integer array (numpy computes it in the array's own dtype: the same
        wraparound and floor division), with small positive constants (literals or the int argument)."""
        if depth > 1 and self.chance(0.5):
            a = self.int_expr(depth - 1)
        else:
            arr = self.pick(self.int_arrays())
            v = np.asarray(arr.values)
            a = Expr(arr.name, v, v.shape, True, True, 0, float(np.max(np.abs(v), initial=0)))
        if self.chance(0.1):  # bit counts of the 32-bit two's complement: int32 values
            x32 = np.asarray(a.value).astype(np.int32)
            u = x32.view(np.uint32)
            if self.chance(0.5):
                v = np.bitwise_count(u).astype(np.int32)
                return Expr(f"tj.popc(({a.text}).astype(tj.int32))", v, a.shape, True, True, 0, 32.0)
            v = (32 - np.asarray(np.frompyfunc(int.bit_length, 1, 1)(u.astype(object)), np.int64)).astype(np.int32)
            return Expr(f"tj.clz(({a.text}).astype(tj.int32))", v, a.shape, True, True, 0, 32.0)
        op = self.pick(["+", "-", "*", "&", "|", "^", ">>", "//", "%"])
        weak = [x for x in self.args if x.kind == "weak" and x.dtype == "int"]
        if weak and op not in (">>",) and self.chance(0.3):
            w = self.pick(weak)
            text, c = w.name, int(w.values)
        else:
            c = int(self.rng.integers(1, 4 if op == ">>" else 8))
            text = str(c)
        x = a.value
        lit = x.dtype.type(c)
        with np.errstate(over="ignore"):
            v = {"+": x + lit, "-": x - lit, "*": x * lit, "&": x & lit, "|": x | lit, "^": x ^ lit, ">>": x >> lit,
                 "//": x // lit, "%": x % lit}[op]
        return Expr(f"({a.text} {op} {text})", np.asarray(v), a.shape, True, True, 0,
                    float(np.max(np.abs(v.astype(np.float64)), initial=0)))

    # ---------------------------------------------------------------- one case

    def case(self) -> Case:
        full = self.full_shape()
        self.arguments(full)
        floats = [a.dtype for a in self.args if a.kind == "array" and a.dtype in FLOAT_EPS]
        reduce = self.chance(0.25) and bool(full) and set(floats) <= {"float32", "float64"}
        n_out = 1 if reduce else int(self.pick([1, 1, 2, 3]))
        outs: list[Expr] = []
        short = bool(self.dtypes - {"float32", "float64"})
        for _ in range(n_out):
            if not reduce and self.int_arrays() and self.chance(0.2):
                outs.append(self.int_expr(2))
            else:
                outs.append(self.float_expr(int(self.rng.integers(1, 4 if short else 6))))
        counts: list[int] = []
        if reduce and outs[0].shape == ():  # a value of numbers alone: nothing to reduce
            reduce = False
        if reduce:
            e = outs[0]
            rank = len(e.shape)
            fn = self.pick(["sum", "max", "min", "mean"])
            axes: Any = None
            if rank and self.chance(0.7):
                axes = tuple(sorted(int(a) for a in self.rng.choice(rank, int(self.rng.integers(1, rank + 1)),
                                                                    replace=False)))
            keep = self.chance(0.3)
            red = getattr(np, fn)(e.value, axis=axes, keepdims=keep)
            parts = ([] if axes is None else [f"axis={axes if len(axes) > 1 else axes[0]}"]) + \
                (["keepdims=True"] if keep else [])
            if fn == "mean" or self.chance(0.5):
                text = f"({e.text}).{fn}({', '.join(parts)})"
            else:
                text = f"tj.{fn}({', '.join([e.text, *parts])})"
            n = int(e.value.size // max(1, np.size(red)))
            counts = [n if fn == "sum" else 1]
            outs = [Expr(text, np.asarray(red), np.shape(red), False, False, e.ops + 1, max(e.mag, 1.0))]
        names = [a.name for a in self.args]
        body = [f"def f({', '.join(names)}):"]
        body += [f"    r{k} = {o.text}" for k, o in enumerate(outs)]
        body.append(f"    return {', '.join(f'r{k}' for k in range(len(outs)))}")
        source = "import numpy as np\nimport tilejit as tj\n\n\n@tj.fuse\n" + "\n".join(body) + "\n"
        eps = max((FLOAT_EPS[d] for d in self.dtypes), default=2.0**-23)
        return Case(self.seed, source, self.args, [np.asarray(o.value) for o in outs], [o.is_int for o in outs],
                    [o.ops for o in outs], [o.mag for o in outs], eps, counts, self.chance(0.5))


def generate(seed: int) -> Case:
    """The random case of ``seed`` (the same with any numpy of the same major version)."""
    return Generator(seed).case()


if __name__ == "__main__":
    c = generate(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    print(c.report())
    for k, e in enumerate(c.expected):
        print(f"output {k}: {e.dtype}{list(e.shape)}")
