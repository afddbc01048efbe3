"""IR ops → CUDA C++ statements. One small method per op; the per-element expressions come from
``tables`` and the thread mapping lives in the device headers (``include/tilejit``).

Values become C++ in one of five forms (``CV``): a scalar expression, a tile variable in a layout,
or three *lazy* tiles that cost nothing until an op reads them in some layout: a constant, a scalar
broadcast ("splat") and ``arange``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from tilejit.backends.cuda import memory_lower as mem
from tilejit.backends.cuda import print_lower, tables
from tilejit.backends.cuda import reduce_lower as red
from tilejit.backends.cuda.layouts import Layout, log2
from tilejit.backends.cuda.plan import Plan
from tilejit.backends.cuda.values import CV, USER_PREFIX, c_ident
from tilejit.errors import CompileError
from tilejit.language.ir import ops as O
from tilejit.language.ir.core import Block, Op, Value
from tilejit.language.ir.types import ArrayType, DType, TileType, bfloat16, float16, float64, int32, int64


class Lowering:
    """Emits the statements of a kernel body; ``smem`` ends as the scratch bytes it needs."""

    def __init__(self, plan: Plan, hints: Mapping[str, object]) -> None:
        self.plan = plan
        self.hints = hints
        self.lines: list[str] = []
        self.depth = 1
        self.vals: dict[Value, CV] = {}
        self.count = 0
        self.smem = 0
        self.static_smem = 0  # bytes of __shared__ variables (a warp-specialized ring's mbarriers)
        self.layout_names: dict[Layout, str] = {}
        self.scopes: list[dict[tuple[Value, Layout], str]] = [{}]
        self.loop_vars: list[tuple[list[str], list[Value]]] = []
        self.if_vars: list[tuple[list[str], list[Value]]] = []
        self.staged: dict[int, tuple[str, str, bool]] = {}  # mma → (A stage, B stage, overlapped)
        # a loop prefetching staged mma operands → (buffer parity variable, the loop, next iteration's variable, the
        # test that there is one)
        self.parity: dict[int, tuple[str, O.ForOp, str, str]] = {}
        self.after_mma: dict[int, list[str]] = {}  # mma → statements right after it (a warp-specialized ring's release)
        self.ws_epilogue: int | None = None  # warp-specialized: where the consumers-only code after the loop starts
        self.decls: list[str] = []  # file-scope C++ the kernel needs (e.g. wgmma specializations)
        self.constants: dict[Value, object] = {}  # values of ConstantOp results
        self.facts: dict[Value, tuple[int, int]] = {}  # (div_by, contiguous) of AssumeOp results
        self.current: Op | None = None  # the op being lowered
        self.smem_op: Op | None = None  # the op that needs the most scratch memory (errors point at it)
        self.orders: dict[int, list[Op]] = {}  # blocks emitted in another order than the IR's (schedule.py)

    # ------------------------------------------------------------------ helpers

    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def fresh(self, prefix: str) -> str:
        assert not prefix.startswith(USER_PREFIX), "generated names must stay out of the user namespace"
        self.count += 1
        return f"{prefix}{self.count}"

    def lname(self, layout: Layout) -> str:
        name = self.layout_names.get(layout)
        if name is None:
            name = self.layout_names[layout] = f"L{len(self.layout_names)}"
        return name

    def need_smem(self, nbytes: int, op: Op | None = None) -> None:
        """Make the scratch area at least ``nbytes``, for ``op`` (default: the op being lowered)."""
        if nbytes > self.smem:
            self.smem = nbytes
            self.smem_op = op or self.current

    def tile_t(self, dt: DType, layout: Layout) -> str:
        return f"tj::Tile<{tables.ctype(dt)}, {self.lname(layout)}>"

    def cv(self, v: Value) -> CV:
        return self.vals[v]

    def scalar(self, v: Value) -> str:
        c = self.vals[v]
        if c.kind == "scalar":
            return c.text
        if c.kind == "const":
            return c.text
        if c.kind == "tile" and c.layout is not None and c.layout.is_single:
            return f"{c.text}.v[0]"
        raise CompileError(f"expected a scalar, got a tile of type {v.type}")

    def elem(self, v: Value, layout: Layout, i: str = "i") -> str:
        """Expression of element ``i`` of ``v`` in ``layout`` (converting ``v`` if it lives elsewhere)."""
        c = self.vals[v]
        if c.kind in ("const", "splat", "scalar"):
            return c.text
        if c.kind == "arange":
            return f"tj::cast<{tables.ctype(c.dtype)}>({self.lname(layout)}::flat(tj_tid, {i}))"
        return f"{self.tile(v, layout)}.v[{i}]"

    def pair(self, v: Value, layout: Layout) -> str:
        """Elements ``i`` and ``i + 1`` of a 16-bit float ``v`` in ``layout`` as one ``tj::Pair``."""
        if self.vals[v].kind in ("const", "splat", "scalar"):
            return f"tj::splat2({self.elem(v, layout)})"
        return f"tj::pack2({self.elem(v, layout)}, {self.elem(v, layout, 'i + 1')})"

    def tile(self, v: Value, layout: Layout | None = None) -> str:
        """The name of a tile variable holding ``v`` in ``layout`` (its own one by default)."""
        c = self.vals[v]
        layout = layout or c.layout or self.plan.layout_of(v)
        if c.kind == "tile" and c.layout == layout:
            return c.text
        for scope in reversed(self.scopes):
            if (v, layout) in scope:
                return scope[(v, layout)]
        name = self.fresh("t")
        self.line(f"{self.tile_t(c.dtype, layout)} {name};")
        if c.kind == "tile":
            assert c.layout is not None
            if c.layout.is_single:
                self.line(f"tj::splat({name}, {c.text});")
            else:
                self.need_smem(c.layout.size * c.dtype.itemsize)
                self.line(f"tj::remap<tj::IdentityMap>({name}, {c.text}, tj_smem);")
        else:
            self.line(f"TJ_EACH(i, {self.lname(layout)}) {name}.v[i] = {self.elem(v, layout)};")
        self.scopes[-1][(v, layout)] = name
        return name

    def define_tile(self, v: Value, layout: Layout, init: str | None = None) -> str:
        name = self.fresh("t")
        self.line(f"{self.tile_t(self._dtype(v), layout)} {name}{init or ''};")
        self.vals[v] = CV("tile", name, self._dtype(v), layout)
        return name

    def define_scalar(self, v: Value, expr: str) -> None:
        name = self.fresh("v")
        self.line(f"const {tables.ctype(self._dtype(v))} {name} = {expr};")
        self.vals[v] = CV("scalar", name, self._dtype(v))

    @staticmethod
    def _dtype(v: Value) -> DType:
        assert isinstance(v.type, TileType | ArrayType)
        return v.type.dtype

    @staticmethod
    def _size(v: Value) -> int:
        assert isinstance(v.type, TileType)
        return v.type.size

    # ------------------------------------------------------------------ walking

    def block(self, block: Block) -> None:
        for op in self.orders.get(id(block), block.ops):
            if id(op) in self.plan.elided:  # a view that a staged mma operand's buffer serves
                continue
            outer, self.current = self.current, op
            try:
                self.op(op)
            except CompileError as exc:
                if op.loc.line and not str(exc).startswith(op.loc.filename):
                    raise CompileError(f"{op.loc.filename}:{op.loc.line}: {exc}", exc.log) from None
                raise
            self.current = outer

    def nested(self, block: Block) -> None:
        self.depth += 1
        self.scopes.append({})
        self.block(block)
        self.scopes.pop()
        self.depth -= 1

    def op(self, op: Op) -> None:
        handler: Callable[[Op], None] | None = getattr(self, "op_" + type(op).__name__, None)
        if handler is None:
            raise CompileError(f"the CUDA backend cannot generate code for op '{op.NAME}'")
        handler(op)

    # ------------------------------------------------------------------ values from nothing

    def op_ConstantOp(self, op: O.ConstantOp) -> None:
        t = op.result.type
        assert isinstance(t, TileType)
        self.vals[op.result] = CV("scalar" if t.is_scalar else "const", tables.literal(op.value, t.dtype), t.dtype)
        self.constants[op.result] = op.value

    def op_ArangeOp(self, op: O.ArangeOp) -> None:
        dt = self._dtype(op.result)
        t = op.result.type
        assert isinstance(t, TileType)
        # A lazy arange is "element f is f" in whatever layout reads it; ``arange(1)`` is the constant 0, so
        # broadcasting it (to any shape) must not read the broadcast shape's flat index.
        self.vals[op.result] = CV("const", tables.literal(0, dt), dt) if t.size == 1 else CV("arange", "", dt)

    def op_BlockIdOp(self, op: O.BlockIdOp) -> None:
        self.define_scalar(op.result, f"(tj::i32)blockIdx.{'xyz'[op.axis]}")

    def op_NumBlocksOp(self, op: O.NumBlocksOp) -> None:
        self.define_scalar(op.result, f"(tj::i32)gridDim.{'xyz'[op.axis]}")

    def op_ArrayDimOp(self, op: O.ArrayDimOp) -> None:
        t = op.array.type
        assert isinstance(t, ArrayType)
        if not 0 <= op.axis < t.ndim:
            raise CompileError(f"array_dim axis {op.axis} is out of range for a {t.ndim}-d array")
        field = "shape" if op.which == "shape" else "stride"
        self.define_scalar(op.result, f"{self.vals[op.array].text}.{field}[{op.axis}]")

    def op_ArrayItemOp(self, op: O.ArrayItemOp) -> None:
        t = op.result.type
        assert isinstance(t, ArrayType)
        name = self.fresh("a")
        self.line(f"const tj::Array<{tables.ctype(t.dtype)}, {t.ndim}> {name} = "
                  f"tj::array_item<{tables.ctype(t.dtype)}, {t.ndim}>({self.vals[op.arrays].text}, "
                  f"(tj::i64){self.scalar(op.index)});")
        self.vals[op.result] = CV("array", name, t.dtype)

    def op_ArrayCountOp(self, op: O.ArrayCountOp) -> None:
        self.define_scalar(op.result, f"(tj::i32){self.vals[op.arrays].text}.shape[0]")

    # ------------------------------------------------------------------ elementwise

    def _elementwise(self, op: Op) -> None:
        """Define op.result from its per-element expression."""
        res = op.result
        t = res.type
        assert isinstance(t, TileType)
        if t.is_scalar:
            self.define_scalar(res, self.render(op, self.scalar))
            return
        layout = self.plan.layout_of(res)
        lname = self.lname(layout)
        packed = isinstance(op, O.UnaryOp | O.BinaryOp | O.FmaOp | O.CastOp) and layout.elems % 2 == 0
        if isinstance(op, O.CastOp) and self._dtype(op.x) == float64 and t.dtype == float16:
            packed = False  # float64 -> float16 rounds once (tj::cast), not through float as pairs do
        if packed and isinstance(op, O.BinaryOp) and self._pairwise(op):
            # one packed 16-bit instruction per element pair, with the bits of the float path below (math.cuh)
            expr = tables.PACKED[op.fn].format(x=self.pair(op.x, layout), y=self.pair(op.y, layout))
            name = self.define_tile(res, layout)
            self.line(f"TJ_PAIRS(i, {lname}) tj::unpack2({name}.v[i], {name}.v[i + 1], {expr});")
            return
        if packed and t.dtype in (float16, bfloat16):
            # compute in float, then convert element pairs with one packed cvt each
            expr = self.render(op, lambda v: self.elem(v, layout), compute=True)
            tmp = self.fresh("t")
            self.line(f"tj::Tile<float, {lname}> {tmp};")
            self.line(f"TJ_EACH(i, {lname}) {tmp}.v[i] = {expr};")
            name = self.define_tile(res, layout)
            self.line(f"TJ_PAIRS(i, {lname}) tj::cvt_pair({name}.v[i], {name}.v[i + 1], {tmp}.v[i], {tmp}.v[i + 1]);")
            return
        expr = self.render(op, lambda v: self.elem(v, layout))
        name = self.define_tile(res, layout)
        self.line(f"TJ_EACH(i, {lname}) {name}.v[i] = {expr};")

    def _pairwise(self, op: O.BinaryOp) -> bool:
        """Whether ``op`` computes on 16-bit float element pairs (``tables.PACKED``): operands and result of one
        16-bit float dtype, no fast-math options."""
        dt = self._dtype(op.result)
        return (op.fn in tables.PACKED and dt in (float16, bfloat16) and self._dtype(op.x) == dt
                and self._dtype(op.y) == dt and not op.rounding and not op.ftz)

    @staticmethod
    def _in_compute(dt: DType) -> Callable[[str], str]:
        cdt = tables.compute_dtype(dt)
        if cdt == dt:
            return lambda e: e
        return lambda e: f"static_cast<{tables.ctype(cdt)}>({e})"

    def render(self, op: Op, g: Callable[[Value], str], compute: bool = False) -> str:
        """The C++ expression of one element of an elementwise op; ``g`` gives operand elements.
        ``compute``: leave the value in the result dtype's compute type (float for 16-bit floats)."""
        out = tables.ctype(tables.compute_dtype(self._dtype(op.result)) if compute else self._dtype(op.result))
        if isinstance(op, O.UnaryOp):
            dt = self._dtype(op.x)
            fmt = tables.table_entry(tables.UNARY, op.fn, dt, "unary function")
            if op.rounding or op.ftz:
                fmt = tables.fast_math_entry(op.fn, op.rounding, op.ftz, "{x}")
            t = tables.ctype(tables.compute_dtype(dt))
            x = g(op.x) if op.fn in O.PREDICATE_FNS else self._in_compute(dt)(g(op.x))  # 16-bit: from their bits
            return f"tj::cast<{out}>({fmt.format(x=x, t=t)})"
        if isinstance(op, O.BinaryOp):
            dt = self._dtype(op.x)
            if self._dtype(op.y) != dt:
                raise CompileError(f"binary '{op.fn}' operands differ in dtype: {dt.name} and {self._dtype(op.y).name}")
            fmt = tables.table_entry(tables.BINARY, op.fn, dt, "binary function")
            if op.rounding or op.ftz:
                fmt = tables.fast_math_entry(op.fn, op.rounding, op.ftz, "{x}, {y}")
            if dt.is_int and op.fn in ("floordiv", "mod", "pow", "maximum", "minimum", "lshift", "rshift"):
                return f"tj::cast<{out}>({fmt.format(x=g(op.x), y=g(op.y), t=tables.ctype(dt))})"
            conv = self._in_compute(dt)
            ct = tables.ctype(tables.compute_dtype(dt))
            return f"tj::cast<{out}>(({ct})({fmt.format(x=conv(g(op.x)), y=conv(g(op.y)), t=ct)}))"
        if isinstance(op, O.FmaOp):
            dt = self._dtype(op.result)
            conv = self._in_compute(dt)
            expr = tables.FMA.format(x=conv(g(op.x)), y=conv(g(op.y)), z=conv(g(op.z)))
            return f"tj::cast<{out}>({expr})"
        if isinstance(op, O.CompareOp):
            sym = tables.COMPARE.get(op.fn)
            if sym is None:
                raise CompileError(f"comparison '{op.fn}' is not one of {', '.join(tables.COMPARE)}")
            narrow = self._narrow_compare(op, sym, g)
            if narrow is not None:
                return narrow
            conv = self._in_compute(self._dtype(op.x))
            return f"({conv(g(op.x))} {sym} {conv(g(op.y))})"
        if isinstance(op, O.SelectOp):
            return f"({g(op.cond)} ? {g(op.x)} : {g(op.y)})"
        if isinstance(op, O.CastOp):
            return f"tj::cast<{out}>({g(op.x)})"
        if isinstance(op, O.ConstantOp):
            return tables.literal(op.value, self._dtype(op.result))
        raise CompileError(f"op '{op.NAME}' is not an elementwise op")

    op_UnaryOp = op_BinaryOp = op_FmaOp = op_CompareOp = op_SelectOp = op_CastOp = _elementwise

    def _narrow_compare(self, op: O.CompareOp, sym: str, g: Callable[[Value], str]) -> str | None:
        """``int64(arange) <op> s`` (s block-uniform int64, e.g. a mask against a shape) in 32 bits.

        Arange values lie strictly inside the int32 range, so comparing them with ``s`` clamped
        to int32 gives the same answer for every comparison, at one 32-bit compare per element."""
        t = op.result.type
        if not isinstance(t, TileType) or t.is_scalar or self._dtype(op.x) != int64:
            return None
        for a, s, flip in ((op.x, op.y, False), (op.y, op.x, True)):
            src = self.plan.defs.get(a)
            if not (isinstance(src, O.CastOp) and self._dtype(src.x) == int32):
                continue
            rng = self.plan.defs.get(src.x)
            uniform = s in self.vals and self.vals[s].kind in ("scalar", "splat", "const")
            rt = rng.result.type if isinstance(rng, O.ArangeOp) else None
            if not (isinstance(rt, TileType) and uniform and rt.size < 2**31 - 1):
                continue
            lhs, rhs = g(src.x), f"tj::clamp_i32({g(s)})"
            return f"({rhs} {sym} {lhs})" if flip else f"({lhs} {sym} {rhs})"
        return None

    def expr_at(self, v: Value, env: dict[Value, str]) -> str:
        """A scalar's expression with some values replaced (a later loop iteration's indices)."""
        if v in env:
            return env[v]
        op = self.plan.defs.get(v)
        if v in self.vals or op is None:
            return self.scalar(v)
        return "(" + self.render(op, lambda x: self.expr_at(x, env)) + ")"

    # ------------------------------------------------------------------ shape ops

    def _remap(self, op: Op, src: Value, bitmap: list[int] | None, offset: int = 0, local_ok: bool = False) -> None:
        """op.result = src read through a flat-bit map (None: same flat order), at source flat index bits
        ``offset`` (one block of a larger tile) set too; ``local_ok``: by a copy between registers where each
        thread holds what it reads (``is_local``)."""
        c = self.vals[src]
        res = op.result
        if c.kind in ("const", "splat", "scalar"):
            self.vals[res] = CV("splat" if c.kind == "scalar" else c.kind, c.text, c.dtype)
            return
        layout = self.plan.layout_of(res)
        src_layout = c.layout or self.plan.layout_of(src)
        if c.kind == "tile" and src_layout.is_single:
            self.vals[res] = CV("splat", f"{c.text}.v[0]", c.dtype)
            return
        if bitmap is None and c.kind == "tile" and src_layout == layout:
            self.vals[res] = CV("tile", c.text, c.dtype, layout)
            return
        if bitmap is None and c.kind == "arange":
            # same flat order and size (a reshape): the flat index is still the value
            assert self._size(src) == self._size(res), (src.type, res.type)
            self.vals[res] = c
            return
        local = local_ok and bitmap is not None and is_local(src_layout, layout, bitmap, offset)
        if bitmap is not None and not offset and all(b == p for p, b in enumerate(bitmap)):
            bitmap = None
            if c.kind == "tile" and src_layout == layout:
                self.vals[res] = CV("tile", c.text, c.dtype, layout)
                return
        sname = self.tile(src, src_layout)
        name = self.define_tile(res, layout)
        if local:
            self.line(f"tj::remap_local<{self._map(bitmap, offset)}>({name}, {sname});")
            return
        self.need_smem(src_layout.size * c.dtype.itemsize)
        self.line(f"tj::remap<{self._map(bitmap, offset)}>({name}, {sname}, tj_smem);")

    @staticmethod
    def _map(bitmap: list[int] | None, offset: int = 0) -> str:
        """The device headers' flat-index map type (layout.cuh) of ``bitmap`` (None: identity) and ``offset``."""
        mp = "tj::IdentityMap" if bitmap is None else f"tj::Bits<{', '.join(map(str, bitmap))}>"
        return f"tj::Offset<{offset}, {mp}>" if offset else mp

    def op_AssumeOp(self, op: O.AssumeOp) -> None:
        """The value itself, with its facts kept for the gathers and scatters that index with it; a scalar's
        divisibility is also stated to NVVM (``__builtin_assume``)."""
        self.vals[op.result] = self.vals[op.x]
        self.facts[op.result] = (op.div_by, op.contiguous)
        t = op.result.type
        if isinstance(t, TileType) and t.is_scalar and op.div_by > 1:
            self.line(f"__builtin_assume(({self.scalar(op.x)}) % {op.div_by} == 0);")

    def op_ReshapeOp(self, op: O.ReshapeOp) -> None:
        self._remap(op, op.x, None)

    def op_PermuteOp(self, op: O.PermuteOp) -> None:
        st, dt_ = op.x.type, op.result.type
        assert isinstance(st, TileType) and isinstance(dt_, TileType)
        if sorted(op.perm) != list(range(st.ndim)):
            raise CompileError(f"permute: {op.perm} is not a permutation of {st.ndim} axes")
        bitmap = []
        for d in reversed(range(dt_.ndim)):
            s = op.perm[d]
            base = sum(log2(x) for x in st.shape[s + 1:])
            bitmap += [base + k for k in range(log2(dt_.shape[d]))]
        self._remap(op, op.x, bitmap)

    def op_BroadcastOp(self, op: O.BroadcastOp) -> None:
        st, dt_ = op.x.type, op.result.type
        assert isinstance(st, TileType) and isinstance(dt_, TileType)
        if st.is_scalar or st.size == 1:
            self._remap(op, op.x, None)
            return
        if st.ndim != dt_.ndim or any(a not in (1, b) for a, b in zip(st.shape, dt_.shape)):
            raise CompileError(f"cannot broadcast {st} to {dt_}")
        bitmap = []
        for d in reversed(range(dt_.ndim)):
            base = sum(log2(x) for x in st.shape[d + 1:])
            bitmap += [(base + k if st.shape[d] != 1 else -1) for k in range(log2(dt_.shape[d]))]
        self._remap(op, op.x, bitmap, local_ok=True)

    # ------------------------------------------------------------------ slicing and joining (through the scratch area)

    def op_ExtractOp(self, op: O.ExtractOp) -> None:
        st, rt = op.x.type, op.result.type
        assert isinstance(st, TileType) and isinstance(rt, TileType)
        self._remap(op, op.x, *extract_map(st.shape, rt.shape, op.index), local_ok=True)

    def op_SplitOp(self, op: O.SplitOp) -> None:
        c = self.vals[op.x]
        if c.kind in ("const", "splat", "scalar"):
            for r in op.results:
                self.vals[r] = CV("splat" if c.kind == "scalar" else c.kind, c.text, c.dtype)
            return
        src_layout = c.layout or self.plan.layout_of(op.x)
        sname = self.tile(op.x, src_layout)
        names = [self.define_tile(r, self.plan.layout_of(r)) for r in op.results]
        bitmap = split_map(self._size(op.x))
        maps = ", ".join(self._map(bitmap, half) for half in (0, 1))
        self.need_smem(src_layout.size * c.dtype.itemsize)
        self.line(f"tj::split2<{maps}>({names[0]}, {names[1]}, {sname}, tj_smem);")

    def _two_into_one(self, op: O.CatOp | O.JoinOp, bitmap: list[int]) -> None:
        """op.result from op.x (source flat indices [0, n)) and op.y ([n, 2n)) through ``bitmap``."""
        cx, cy = self.vals[op.x], self.vals[op.y]
        if cx.kind == cy.kind and cx.kind in ("const", "splat") and cx.text == cy.text:
            self.vals[op.result] = cx
            return
        n = self._size(op.x)
        xname, yname = (self.tile(v, self.vals[v].layout or self.plan.layout_of(v)) for v in (op.x, op.y))
        name = self.define_tile(op.result, self.plan.layout_of(op.result))
        self.need_smem(2 * n * cx.dtype.itemsize)
        self.line(f"tj::remap2<{self._map(bitmap)}, {n}>({name}, {xname}, {yname}, tj_smem);")

    def op_CatOp(self, op: O.CatOp) -> None:
        st = op.x.type
        assert isinstance(st, TileType)
        self._two_into_one(op, cat_map(st.shape, op.axis))

    def op_JoinOp(self, op: O.JoinOp) -> None:
        self._two_into_one(op, join_map(self._size(op.x)))

    # ------------------------------------------------------------------ memory ops and reductions (other modules)

    _array = mem._array
    _vec = mem._vec
    _origins = mem._origins
    op_LoadOp = mem.op_LoadOp
    op_StoreOp = mem.op_StoreOp
    _as_array_dtype = mem._as_array_dtype
    _element_indices = mem._element_indices
    op_GatherOp = mem.op_GatherOp
    op_ScatterOp = mem.op_ScatterOp
    op_AtomicOp = mem.op_AtomicOp
    op_FenceOp = mem.op_FenceOp
    op_BarrierOp = mem.op_BarrierOp
    op_PrintOp = print_lower.op_PrintOp
    _acc_copy = red._acc_copy
    _finish = red._finish
    _reduce = red._reduce
    op_ReduceOp = red.op_ReduceOp
    op_ArgReduceOp = red.op_ArgReduceOp
    op_ScanOp = red.op_ScanOp

    # ------------------------------------------------------------------ mma

    def op_MmaOp(self, op: O.MmaOp) -> None:
        from tilejit.backends.cuda.mma_lower import lower_mma

        lower_mma(self, op)

    # ------------------------------------------------------------------ control flow

    def _declare_vars(self, values: list[Value], inits: list[Value] | None) -> list[str]:
        names = []
        for k, v in enumerate(values):
            t = v.type
            assert isinstance(t, TileType)
            init = inits[k] if inits is not None else None
            if t.is_scalar:
                name = self.fresh("c")
                rhs = f" = {self.scalar(init)}" if init is not None else ""
                self.line(f"{tables.ctype(t.dtype)} {name}{rhs};")
            else:
                layout = self.plan.layout_of(v)
                name = self.fresh("c")
                self.line(f"{self.tile_t(t.dtype, layout)} {name};")
                if init is not None:
                    self._assign(name, init, v)
            names.append(name)
        return names

    def _assign(self, name: str, src: Value, like: Value) -> None:
        t = like.type
        assert isinstance(t, TileType)
        if t.is_scalar:
            self.line(f"{name} = {self.scalar(src)};")
            return
        layout = self.plan.layout_of(like)
        c = self.vals[src]
        if c.kind == "tile" and c.layout == layout:
            self.line(f"{name} = {c.text};")
        elif c.kind in ("const", "splat", "arange"):
            self.line(f"TJ_EACH(i, {self.lname(layout)}) {name}.v[i] = {self.elem(src, layout)};")
        else:
            self.line(f"{name} = {self.tile(src, layout)};")

    def _bind_vars(self, values: list[Value], names: list[str]) -> None:
        for v, n in zip(values, names):
            t = v.type
            assert isinstance(t, TileType)
            if t.is_scalar:
                self.vals[v] = CV("scalar", n, t.dtype)
            else:
                self.vals[v] = CV("tile", n, t.dtype, self.plan.layout_of(v))

    def _assign_all(self, names: list[str], values: list[Value], likes: list[Value]) -> None:
        if len(values) != len(names):
            raise CompileError(f"expected {len(names)} values at the end of a region, got {len(values)}")
        moves = [(n, v, like) for n, v, like in zip(names, values, likes) if self.vals[v].text != n]
        if not moves:
            return
        names, values, likes = (list(x) for x in zip(*moves))  # type: ignore[assignment]
        # Every variable the new values read, a lazy splat's "c1.v[0]" included: writing one slot before
        # another slot's value reads it would hand that slot the new value.
        reads = {w for v in values for w in re.findall(r"[A-Za-z_]\w*", self.vals[v].text)}
        if reads & set(names):  # a carried value moves to another slot: go through temporaries
            temps = []
            for v, like in zip(values, likes):
                tmp = self.fresh("c")
                t = like.type
                assert isinstance(t, TileType)
                decl = tables.ctype(t.dtype) if t.is_scalar else self.tile_t(t.dtype, self.plan.layout_of(like))
                self.line(f"{decl} {tmp};")
                self._assign(tmp, v, like)
                temps.append(tmp)
            for n, tmp in zip(names, temps):
                self.line(f"{n} = {tmp};")
            return
        for n, v, like in zip(names, values, likes):
            self._assign(n, v, like)

    def op_ForOp(self, op: O.ForOp) -> None:
        if self.plan.ws is not None and self.plan.ws.loop is op:
            from tilejit.backends.cuda.mma_lower import lower_warp_specialized

            lower_warp_specialized(self, op)
            return
        if id(op) in self.plan.pipelines:
            from tilejit.backends.cuda.mma_lower import lower_pipelined_for

            lower_pipelined_for(self, op)
            return
        iv, carried = op.body.args[0], op.body.args[1:]
        names = self._declare_vars(carried, op.init)
        ivt = iv.type
        assert isinstance(ivt, TileType)
        ivn = self.fresh("v")
        self.vals[iv] = CV("scalar", ivn, ivt.dtype)
        self._bind_vars(carried, names)
        ct = tables.ctype(ivt.dtype)
        lo, hi, step = self.scalar(op.lower), self.scalar(op.upper), self.scalar(op.step)
        wn = self.fresh("w")
        # The counter is 64-bit, so `counter + step` cannot wrap past the int32 limit and loop again (Python's
        # range stops); a run-time step <= 0 runs no iterations instead of never ending.
        known = self.constants.get(op.step)
        positive = "" if isinstance(known, int) and known > 0 else f" && ({step}) > 0"
        bump = ""
        if id(op) in self.plan.prefetched:  # staged mma operands: the first iteration's copies, then one ahead
            from tilejit.backends.cuda.mma_lower import prefetch_prologue

            bump = ", " + prefetch_prologue(self, op, wn, lo, hi, step, positive)
        if op.unroll > 1:
            self.line(f"#pragma unroll {op.unroll}")
        else:
            self.line("#pragma unroll 1")
        self.line(f"for (tj::i64 {wn} = {lo}; {wn} < {hi}{positive}; {wn} += {step}{bump}) {{")
        self.line(f"  const {ct} {ivn} = ({ct}){wn};")
        self.loop_vars.append((names, carried))
        self.nested(op.body)
        self.loop_vars.pop()
        self.line("}")
        self._bind_vars(op.results, names)

    def op_LoopOp(self, op: O.LoopOp) -> None:
        names = self._declare_vars(op.body.args, op.init)
        self._bind_vars(op.body.args, names)
        self.line("while (true) {")
        self.loop_vars.append((names, op.body.args))
        self.nested(op.body)
        self.loop_vars.pop()
        self.line("}")
        self._bind_vars(op.results, names)

    def _loop_exit(self, op: O.ContinueOp | O.BreakOp, stmt: str) -> None:
        if not self.loop_vars:
            raise CompileError(f"'{op.NAME}' outside a loop")
        names, likes = self.loop_vars[-1]
        self._assign_all(names, op.values, likes)
        self.line(stmt)

    def op_ContinueOp(self, op: O.ContinueOp) -> None:
        self._loop_exit(op, "continue;")

    def op_BreakOp(self, op: O.BreakOp) -> None:
        self._loop_exit(op, "break;")

    def op_IfOp(self, op: O.IfOp) -> None:
        names = self._declare_vars(op.results, None)
        self.line(f"if ({self.scalar(op.cond)}) {{")
        self.if_vars.append((names, op.results))
        self.nested(op.then_body)
        self.line("} else {")
        self.nested(op.else_body)
        self.line("}")
        self.if_vars.pop()
        self._bind_vars(op.results, names)

    def op_YieldOp(self, op: O.YieldOp) -> None:
        if not self.if_vars:
            raise CompileError("'yield' outside an if")
        names, likes = self.if_vars[-1]
        self._assign_all(names, op.values, likes)

    def op_ReturnOp(self, op: O.ReturnOp) -> None:
        self.line("return;")


# Flat-index maps of the slicing and joining ops (``tj::remap`` and friends, layout.cuh): item p is the source
# flat-index bit that bit p of the result's flat index comes from; the two sources of a cat or join are one after
# the other (the second's flat indices start at its size n, so source bit log2(n) tells them apart).


def flat_shifts(shape: tuple[int, ...]) -> list[int]:
    """Where each dim's coordinate starts in a row-major flat index of a tile of ``shape`` (powers of two)."""
    return [sum(log2(s) for s in shape[d + 1:]) for d in range(len(shape))]


def extract_map(src: tuple[int, ...], dst: tuple[int, ...], index: tuple[int, ...]) -> tuple[list[int], int]:
    """The bit map and the source flat-index bits (offset) of block ``index`` of shape ``dst`` in a tile of ``src``."""
    shifts = flat_shifts(src)
    bitmap = [shifts[d] + k for d in reversed(range(len(dst))) for k in range(log2(dst[d]))]
    return bitmap, sum((i * b) << sh for i, b, sh in zip(index, dst, shifts))


def cat_map(src: tuple[int, ...], axis: int) -> list[int]:
    """The bit map of ``x`` and ``y`` of shape ``src`` concatenated along ``axis``: the top bit of the result's
    coordinate along ``axis`` tells them apart."""
    shifts, top, which = flat_shifts(src), log2(src[axis]), sum(log2(s) for s in src)
    return [which if d == axis and k == top else shifts[d] + k
            for d in reversed(range(len(src))) for k in range(log2(src[d]) + (d == axis))]


def is_local(src: Layout, dst: Layout, bitmap: list[int], offset: int) -> bool:
    """Whether each thread of ``dst`` holds in ``src`` every element it reads through ``bitmap`` and ``offset``, in a
    register its own register index alone decides (layout.cuh's remap_local): each thread bit of ``dst`` maps to the
    same thread bit of ``src`` (a flat bit that ``bitmap`` takes one to the other), or to a replica bit of ``src``
    where it is a replica itself or ``bitmap`` drops its flat bit (a broadcast dim), and ``offset`` sets no thread bit
    of ``src``. ``bitmap`` is an extract's (one-to-one) or a broadcast's (-1: a dropped bit)."""
    if src.nt != dst.nt:
        return False
    for d, s in zip(dst.tbits, src.tbits):
        if (bitmap[d] if d >= 0 else -1) != s:
            return False
    return not any(offset >> s & 1 for s in src.tbits if s >= 0)


def join_map(n: int) -> list[int]:
    """The bit map of two tiles of ``n`` elements joined along a new last dim: its bit tells them apart."""
    return [log2(n)] + list(range(log2(n)))


def split_map(n: int) -> list[int]:
    """The bit map of either half of a tile of ``n`` elements split along its last dim (of size 2), whose bit the
    half's offset (0 or 1) sets."""
    return [p + 1 for p in range(log2(n) - 1)]


__all__ = ["CV", "Lowering", "c_ident", "cat_map", "extract_map", "flat_shifts", "is_local", "join_map", "split_map"]
