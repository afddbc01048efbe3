"""The tile kernels of ``tj.fuse``, written as Python source: readable kernels named after the user's function, one
statement per traced operation (each commented with the user's file:line), compiled by the normal ``@tj.kernel`` path.

Three shapes of kernel:

- *map* (elementwise): a 1-D grid of blocks, each over ``TILE`` consecutive elements of the iteration space (C
  order). A flat array is read and written with ``tj.load``/``tj.store`` through a 1-D view (vector accesses when it
  is aligned); any other is read with ``tj.gather`` / written with ``tj.scatter`` at offsets computed from the flat
  index, the run-time sizes of the merged axes and the array's run-time strides.
- *reduce*: a block per ``TK`` outputs (kept axes flattened), looping over the reduced elements ``TR`` at a time,
  accumulating in ``acc`` (float32 for 16-bit floats, (u)int32 for narrow integers); with ``split``, the reduced
  elements are shared by ``nsplit`` blocks per output tile, each writing its partial to a workspace.
- *combine*: reduces the workspace's ``nsplit`` partials of each output and finishes (mean, the operations after
  the reduction, the store).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import NamedTuple

from tilejit.api.fuse_layout import Access
from tilejit.api.fuse_trace import WEAK_DTYPE, Graph, Node, ScalarSpec, WeakSpec, dtype_text, literal_text
from tilejit.language.ir.types import DType, bfloat16, float16, float32, int32, uint32

# ------------------------------------------------------------------------------------------ kernel parameters


class Slot(NamedTuple):
    """What one kernel parameter receives: ``kind`` "in" (array argument ``at``), "scalar" (scalar argument
    ``at``), "out" (output ``at``), "work" (the workspace of reduction ``at``), or a run-time number:
    "size" / "ksize" / "rsize" (merged axis ``at`` of the space, its kept or reduced part), "stride" / "kstride"
    / "rstride" (of the array ``array`` along axis ``at``), "base" (the array's lowest offset), "count" (the
    elements of the space, or its kept part), "rcount" (the reduced part), "nsplit", "ntiles" (tiles of nsplit)."""

    kind: str
    at: int = 0
    array: str = ""
    access: Access | None = None


class Source(NamedTuple):
    """A generated kernel: ``name`` of its function, ``text`` (a module defining it), its parameters (names and
    what each receives) and the 1-based lines of ``text`` that compute each traced node (for located errors)."""

    name: str
    text: str
    params: tuple[tuple[str, Slot], ...]
    lines: dict[int, Node]


class MapPlan(NamedTuple):
    """The layout of an elementwise kernel (its key, with the trace's): the merged rank of the space, how each used
    array argument (by parameter index) and each output is reached, 64-bit indices, and the tile."""

    rank: int
    inputs: tuple[tuple[int, Access], ...]
    outputs: tuple[Access, ...]
    index64: bool
    tile: int


class ReducePlan(NamedTuple):
    """The layout of a reduction kernel: merged ranks of the kept and reduced parts of the space, for each used array
    argument the kept and reduced axes it varies along and whether a stride is negative, how each output is reached
    over the kept part (ignored with ``split``: partials go to workspaces), 64-bit indices, the tile (TK outputs,
    TR reduced elements), ``split``, and ``columns``: the tile is (TR, TK), reduced along axis 0, so that lanes next
    to each other read outputs next to each other (the arrays' contiguous axis is a kept one)."""

    kept_rank: int
    red_rank: int
    inputs: tuple[tuple[int, tuple[int, ...], tuple[int, ...], bool], ...]
    outputs: tuple[Access, ...]
    index64: bool
    tile: tuple[int, int]
    split: bool
    columns: bool = False


class CombinePlan(NamedTuple):
    """The layout of the kernel finishing a split reduction: how each output is reached, 64-bit indices, the tile
    (splits, outputs)."""

    outputs: tuple[Access, ...]
    index64: bool
    tile: tuple[int, int]


# ------------------------------------------------------------------------------------------ writing


class _Writer:
    """Collects a kernel's parameters and body lines, and the names in use."""

    def __init__(self, graph: Graph, kind: str) -> None:
        self.graph = graph
        self.kind = kind
        self.params: list[tuple[str, str, Slot]] = []  # (name, annotation, slot)
        self.body: list[tuple[str, Node | None]] = []
        self.taken: set[str] = {"tj"}
        self.arg_names: dict[int, str] = {}
        self.magic: dict[str, tuple[str, str]] = {}  # a size parameter's magic-number parameters
        for i, name in enumerate(graph.names):
            self.arg_names[i] = self.fresh(name)

    def fresh(self, base: str) -> str:
        name = base
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        return name

    def param(self, name: str, slot: Slot, annotation: str = "") -> str:
        self.params.append((name, annotation, slot))
        return name

    def line(self, text: str, node: Node | None = None, indent: int = 1) -> None:
        self.body.append(("    " * indent + text, node))

    def source(self, header: str) -> Source:
        name = self.graph.func.__name__
        fn = self.fresh(name if name.isidentifier() else "fused")
        params = ", ".join(f"{n}: {a}" if a else n for n, a, _ in self.params)
        doc = textwrap.wrap(header, 112, initial_indent='    """', subsequent_indent="    ", break_long_words=False,
                            break_on_hyphens=False)
        doc[-1] += '"""'
        lines = ["import tilejit as tj", "", "", "@tj.kernel", f"def {fn}({params}):", *doc]
        nodes: dict[int, Node] = {}
        for text, node in self.body:
            lines.append(text)
            if node is not None:
                nodes[len(lines)] = node
        text = "\n".join(lines) + "\n"
        return Source(fn, text, tuple((n, s) for n, _, s in self.params), nodes)


def _index_type(index64: bool) -> str:
    return "tj.int64" if index64 else "tj.int32"


def _describe_call(graph: Graph) -> str:
    code = graph.func.__code__
    return f"tj.fuse of {graph.func.__qualname__} ({code.co_filename}:{code.co_firstlineno})"


def _scalar_params(w: _Writer, used: Sequence[int]) -> None:
    """The scalar arguments the kernel reads, typed: weak numbers as 64-bit (or bool), typed ones as themselves."""
    for i in used:
        spec = w.graph.specs[i]
        if isinstance(spec, WeakSpec):
            w.param(w.arg_names[i], Slot("scalar", i), dtype_text(WEAK_DTYPE[spec.kind]))
        elif isinstance(spec, ScalarSpec):
            w.param(w.arg_names[i], Slot("scalar", i), dtype_text(spec.dtype))


def _operand_text(w: _Writer, names: dict[int, str], o: object, cast: DType | None) -> str:
    if isinstance(o, Node):
        text = names[o.index]
    elif isinstance(o, DType):
        return dtype_text(o)
    elif o is None or isinstance(o, str):
        return repr(o)
    else:
        assert isinstance(o, bool | int | float)
        text = literal_text(o)
    return f"{text}.astype({dtype_text(cast)})" if cast is not None else text


def _node_text(w: _Writer, names: dict[int, str], n: Node) -> str:
    """The expression computing an op node from its operands' names."""
    ops = [_operand_text(w, names, o, c) for o, c in zip(n.operands, n.casts)]
    form = n.form
    if form[0] in ("binary", "compare"):
        return f"{ops[0]} {form[2]} {ops[1]}"
    if form[0] == "unary":
        return {"neg": f"-{ops[0]}", "invert": f"~{ops[0]}", "abs": f"tj.abs({ops[0]})", "not": f"~{ops[0]}"}[form[1]]
    if form[0] == "astype":
        return f"{ops[0]}.astype({dtype_text(form[1])})"
    assert form[0] == "call", form
    kws = form[2] if len(form) > 2 else ()
    first = len(ops) - len(kws)
    args = ops[:first] + [f"{k}={v}" for k, v in zip(kws, ops[first:])]
    return f"tj.{form[1]}({', '.join(args)})"


def _where_comment(n: Node) -> str:
    return f"  # {n.where}" if n.where is not None else ""


def _compute(w: _Writer, names: dict[int, str], nodes: Sequence[Node], indent: int = 1) -> None:
    """One statement per op node (in trace order), named ``v<index>``; constants are typed numbers."""
    for n in nodes:
        if n.kind == "const":
            names[n.index] = f"{dtype_text(n.dtype)}({literal_text(n.form[0])})"
        elif n.kind == "op":
            name = names[n.index] = w.fresh(f"v{n.index}")
            w.line(f"{name} = {_node_text(w, names, n)}{_where_comment(n)}", n, indent)


def _decompose(w: _Writer, flat: str, sizes: Sequence[str], needed: set[int], prefix: str,
               indent: int = 1) -> dict[int, str]:
    """Statements giving the index along each ``needed`` axis of the flat (C order) index ``flat`` over axes of
    run-time ``sizes`` (the outermost size is never needed); returns axis -> its index's name. With 32-bit indices
    a size's division is a multiply by its magic numbers (``_size_params``): a few instructions, not a division
    routine, for each element."""
    out: dict[int, str] = {}
    if not needed:
        return out
    q = flat
    for d in range(len(sizes) - 1, min(needed) - 1, -1):
        if d == 0:
            out[0] = q
            break
        qn = w.fresh(f"{prefix}q{d}")
        magic = w.magic.get(sizes[d])
        if magic is None:
            w.line(f"{qn} = {q} // {sizes[d]}", indent=indent)
        else:
            w.line(f"{qn} = (tj.umulhi({q}.astype(tj.uint32), {magic[0]}) >> {magic[1]}).astype(tj.int32)  "
                   f"# {q} // {sizes[d]}", indent=indent)
        if d in needed:
            out[d] = w.fresh(f"{prefix}i{d}")
            w.line(f"{out[d]} = {q} - {qn} * {sizes[d]}", indent=indent)
        q = qn
    return out


def _size_params(w: _Writer, rank: int, axes: set[int], prefix: str, slot: str, idx: str) -> list[str]:
    """The run-time sizes ``_decompose`` reads to find the indices along ``axes``: those of the axes from the
    outermost of them inwards (never axis 0's); "" for the others. With 32-bit indices each comes with its magic
    numbers (slots ``<slot>_magic``, ``<slot>_shift``: ``fuse_layout.magic``)."""
    lo = max(min(axes), 1) if axes else rank
    sizes = [w.param(w.fresh(f"{prefix}{d}"), Slot(slot, d), idx) if d >= lo else "" for d in range(rank)]
    if idx == "tj.int32":
        for d in range(lo, rank):
            w.magic[sizes[d]] = (w.param(w.fresh(f"{sizes[d]}_m"), Slot(f"{slot}_magic", d), "tj.uint32"),
                                 w.param(w.fresh(f"{sizes[d]}_s"), Slot(f"{slot}_shift", d), "tj.uint32"))
    return sizes


def _offset(terms: Sequence[tuple[str, str]], base: str | None) -> str:
    """``sum(index * stride) (+ base)`` as an expression (``0`` when the array varies along no axis)."""
    parts = [f"{i} * {s}" for i, s in terms] + ([base] if base else [])
    return " + ".join(parts) if parts else "0"


# ------------------------------------------------------------------------------------------ elementwise


def map_source(graph: Graph, plan: MapPlan) -> Source:
    """The elementwise kernel of ``graph`` for ``plan``."""
    w = _Writer(graph, "map")
    idx = _index_type(plan.index64)
    names: dict[int, str] = {}
    for i, a in plan.inputs:
        w.param(w.arg_names[i], Slot("in", i, w.arg_names[i], a))
    out_names = _output_params(w, plan.outputs)
    gathered = [(w.arg_names[i], a) for i, a in plan.inputs if not a.flat]
    gathered += [(out_names[k], a) for k, a in enumerate(plan.outputs) if not a.flat]
    axes = {d for _, a in gathered for d in a.axes}
    sizes = _size_params(w, plan.rank, axes, "n", "size", idx)
    strides = {name: [(d, "1" if a.runs and d == plan.rank - 1 else
                       w.param(w.fresh(f"{name}_s{d}"), Slot("stride", d, name), idx)) for d in a.axes]
               for name, a in gathered}
    bases = {name: w.param(w.fresh(f"{name}_base"), Slot("base", 0, name), idx) for name, a in gathered if a.negative}
    scattered = any(not a.flat for a in plan.outputs)
    count = w.param(w.fresh("n"), Slot("count"), idx) if scattered else ""
    needed = graph.needed()
    _scalar_setup(w, graph, needed, names)
    tile = plan.tile
    pid = w.fresh("pid")
    w.line(f"{pid} = tj.bid(0)")
    offs: dict[str, str] = {}
    e = ""
    if gathered:
        e = _flat_index(w, "e", pid, tile, plan.index64, "the flat (C order) index of each element of this tile")
        index = _decompose(w, e, sizes, axes, "")
        for name, a in gathered:
            offs[name] = w.fresh(f"{name}_off")
            terms = [(index[d], st) for d, st in strides[name]]
            if a.runs:  # unit innermost stride: the innermost index alone, in runs a vector gather reads
                off = _offset(terms[:-1], None) + " + " if len(terms) > 1 else ""
                w.line(f"{offs[name]} = tj.max_contiguous(tj.multiple_of({off}{terms[-1][0]}, {a.runs}), "
                       f"{a.runs})  # runs of {a.runs} consecutive offsets")
            else:
                w.line(f"{offs[name]} = {_offset(terms, bases.get(name))}")
    for i, a in plan.inputs:
        name = w.arg_names[i]
        v = names[graph_param_node(graph, i).index] = w.fresh(f"{name}_v")
        if a.flat:
            w.line(f"{v} = tj.load({name}, index=({pid},), shape=({tile},))")
        else:
            w.line(f"{v} = tj.gather({name}, {offs[name]})")
    _compute(w, names, [n for n in needed if n.kind in ("op", "const") and n.deps])
    # a value whose arrays are all broadcast along every axis is a scalar here: a flat store needs the tile
    tiled = {graph_param_node(graph, i).index for i, a in plan.inputs if a.flat or a.axes}
    for n in needed:
        if any(isinstance(o, Node) and o.index in tiled for o in n.operands):
            tiled.add(n.index)
    inside = ""
    if scattered:
        inside = w.fresh("inside")
        w.line(f"{inside} = {e} < {count}  # lanes past the end write nothing")
    for k, a in enumerate(plan.outputs):
        node = graph.outputs[k]
        value = names[node.index]
        if a.flat:
            if node.index not in tiled:
                value = f"tj.broadcast_to({value}, ({tile},))"
            w.line(f"tj.store({out_names[k]}, index=({pid},), tile={value})")
        else:
            w.line(f"tj.scatter({out_names[k]}, tj.where({inside}, {offs[out_names[k]]}, -1), {value})")
    layout = ", ".join(f"{w.arg_names[i]} {'flat' if a.flat else 'gathered'}"
                       f"{f' in runs of {a.runs}' if a.runs else ''}" for i, a in plan.inputs)
    axes_text = "1 axis" if plan.rank <= 1 else f"{plan.rank} merged axes"
    return w.source(f"{_describe_call(graph)}: elementwise over {axes_text}, tiles of {tile}, "
                    f"{'64' if plan.index64 else '32'}-bit indices{'; ' + layout if layout else ''}.")


def graph_param_node(graph: Graph, index: int) -> Node:
    """The node of parameter ``at``."""
    return next(n for n in graph.nodes if n.kind in ("array", "scalar") and n.param == index)


# ------------------------------------------------------------------------------------------ reductions


def accumulator_dtype(fn: str, dtype: DType) -> DType:
    """The dtype a reduction ``fn`` accumulates a ``dtype`` value in: float32 for 16-bit floats, (u)int32 for bools
    and integers narrower than 32 bits (sums and products, as tj.sum), the value's own otherwise."""
    if fn in ("max", "min"):
        return dtype
    if dtype in (float16, bfloat16):
        return float32
    if dtype.is_bool or (dtype.is_int and dtype.bits < 32):
        return uint32 if dtype.kind == "u" else int32
    return dtype


def identity(fn: str, dtype: DType) -> bool | int | float:
    """The identity of reduction ``fn`` for ``dtype``: what padded lanes hold."""
    if fn in ("sum", "mean"):
        return False if dtype.is_bool else 0
    if fn == "prod":
        return True if dtype.is_bool else 1
    low = fn == "max"
    if dtype.is_float:
        return float("-inf") if low else float("inf")
    if dtype.is_bool:
        return not low
    bits = dtype.bits
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dtype.kind == "i" else (0, (1 << bits) - 1)
    return lo if low else hi


def _accumulate(fn: str, acc: str, part: str) -> str:
    if fn in ("sum", "mean"):
        return f"{acc} + {part}"
    if fn == "prod":
        return f"{acc} * {part}"
    return f"tj.{'maximum' if fn == 'max' else 'minimum'}({acc}, {part})"


def _reductions(graph: Graph) -> list[Node]:
    return [n for n in graph.needed() if n.kind == "reduce"]


def _epilogue(graph: Graph) -> list[Node]:
    """The nodes the outputs of a reduction read after it (the reductions not included, nor what they read)."""
    seen: set[int] = set()
    todo = list(graph.outputs)
    while todo:
        n = todo.pop()
        if n.index in seen or n.kind == "reduce":
            continue
        seen.add(n.index)
        todo += [o for o in n.operands if isinstance(o, Node)]
    return [n for n in graph.nodes if n.index in seen]


def _scalar_setup(w: _Writer, graph: Graph, nodes: Sequence[Node], names: dict[int, str]) -> None:
    """Parameters for the scalar arguments among ``nodes``, and the statements of the operations on numbers alone
    among them (before any loop: they are the same for every element)."""
    used = sorted({n.param for n in nodes if n.kind == "scalar"})
    _scalar_params(w, used)
    for i in used:
        names[graph_param_node(graph, i).index] = w.arg_names[i]
    _compute(w, names, [n for n in nodes if n.kind in ("op", "const") and not n.deps and not n.reduced])


def _init_accumulators(w: _Writer, reductions: Sequence[Node], tk: int) -> dict[int, str]:
    accs: dict[int, str] = {}
    for n in reductions:
        fn = n.form[1]
        adt = accumulator_dtype(fn, n.operands[0].dtype)
        accs[n.index] = w.fresh(f"acc{n.index}")
        w.line(f"{accs[n.index]} = tj.full(({tk},), {literal_text(identity(fn, adt))}, {dtype_text(adt)})")
    return accs


def _output_offsets(w: _Writer, outputs: Sequence[Access], out_names: Sequence[str], sizes: Sequence[str],
                    flat: str, idx: str, count: str) -> tuple[dict[str, str], str | None]:
    """For outputs not written flat: their kept-axis strides as parameters, their offsets at the flat output index
    ``flat`` and the mask of lanes inside the ``count`` outputs."""
    offsets: dict[str, str] = {}
    scattered = [(out_names[k], a) for k, a in enumerate(outputs) if not a.flat]
    if not scattered:
        return offsets, None
    axes = {d for _, a in scattered for d in a.axes}
    index = _decompose(w, flat, sizes, axes, "o")
    for name, a in scattered:
        terms = [(index[d], w.param(w.fresh(f"{name}_s{d}"), Slot("stride", d, name), idx)) for d in a.axes]
        base = w.param(w.fresh(f"{name}_base"), Slot("base", 0, name), idx) if a.negative else None
        offsets[name] = w.fresh(f"{name}_off")
        w.line(f"{offsets[name]} = {_offset(terms, base)}")
    inside = w.fresh("inside")
    w.line(f"{inside} = {flat} < {count}  # lanes past the end write nothing")
    return offsets, inside


def _finish(w: _Writer, graph: Graph, names: dict[int, str], accs: dict[int, str], count: str | None,
            outputs: Sequence[Access], out_names: Sequence[str], pid: str, offsets: dict[str, str],
            inside: str | None) -> None:
    """After the accumulation: each reduction's value (a mean divides by the count), the operations after it and
    the stores of the outputs."""
    for n in _reductions(graph):
        fn = n.form[1]
        acc = accs[n.index]
        if fn == "mean":
            value = f"({acc} / {count}).astype({dtype_text(n.dtype)})"
        elif accumulator_dtype(fn, n.operands[0].dtype) != n.dtype:
            value = f"{acc}.astype({dtype_text(n.dtype)})"
        else:
            value = acc
        name = names[n.index] = w.fresh(f"v{n.index}")
        w.line(f"{name} = {value}{_where_comment(n)}", n)
    _compute(w, names, [n for n in _epilogue(graph) if n.kind in ("op", "const") and n.reduced])
    for k, a in enumerate(outputs):
        value = names[graph.outputs[k].index]
        if a.flat:
            w.line(f"tj.store({out_names[k]}, index=({pid},), tile={value})")
        else:
            w.line(f"tj.scatter({out_names[k]}, tj.where({inside}, {offsets[out_names[k]]}, -1), {value})")


def _output_params(w: _Writer, outputs: Sequence[Access]) -> list[str]:
    names = [w.fresh("out" if len(outputs) == 1 else f"out{k}") for k in range(len(outputs))]
    for k, a in enumerate(outputs):
        w.param(names[k], Slot("out", k, names[k], a))
    return names


def _flat_index(w: _Writer, name: str, start: str, n: int, index64: bool, what: str, indent: int = 1) -> str:
    """``name = start * n + arange(n)`` in the index dtype (``start``: an int32 scalar)."""
    var = w.fresh(name)
    if index64:
        w.line(f"{var} = {start}.astype(tj.int64) * {n} + tj.arange({n}, tj.int64)  # {what}", indent=indent)
    else:
        w.line(f"{var} = {start} * {n} + tj.arange({n})  # {what}", indent=indent)
    return var


def reduce_source(graph: Graph, plan: ReducePlan) -> Source:
    """The reduction kernel of ``graph`` (whose outputs all follow its one kind of reduction) for ``plan``."""
    w = _Writer(graph, "reduce")
    idx = _index_type(plan.index64)
    needed = graph.needed()
    reductions = _reductions(graph)
    names: dict[int, str] = {}
    for i, *_ in plan.inputs:
        w.param(w.arg_names[i], Slot("in", i, w.arg_names[i]))
    if plan.split:
        out_names = [w.param(w.fresh(f"work{k}"), Slot("work", k)) for k in range(len(reductions))]
    else:
        out_names = _output_params(w, plan.outputs)
    k_axes = {d for _, ka, _, _ in plan.inputs for d in ka}
    r_axes = {d for _, _, ra, _ in plan.inputs for d in ra}
    o_axes = set() if plan.split else {d for a in plan.outputs if not a.flat for d in a.axes}
    ksizes = _size_params(w, plan.kept_rank, k_axes | o_axes, "nk", "ksize", idx)
    rsizes = _size_params(w, plan.red_rank, r_axes, "nr", "rsize", idx)
    nk = w.param(w.fresh("nk"), Slot("count"), idx)
    nr = w.param(w.fresh("nr"), Slot("rcount"), idx)
    means = any(n.form[1] == "mean" for n in reductions)
    count = w.param(w.fresh("count"), Slot("rcount"), "tj.int64") if means and not plan.split else None
    nsplit = w.param(w.fresh("nsplit"), Slot("nsplit"), "tj.int32") if plan.split else ""
    terms: dict[str, list[tuple[str, int, str]]] = {}
    bases: dict[str, str] = {}
    for i, ka, ra, neg in plan.inputs:
        name = w.arg_names[i]
        terms[name] = [("k", d, w.param(w.fresh(f"{name}_k{d}"), Slot("kstride", d, name), idx)) for d in ka]
        terms[name] += [("r", d, w.param(w.fresh(f"{name}_r{d}"), Slot("rstride", d, name), idx)) for d in ra]
        if neg:
            bases[name] = w.param(w.fresh(f"{name}_base"), Slot("base", 0, name), idx)
    _scalar_setup(w, graph, needed, names)
    tk, tr = plan.tile
    kdim, rdim, axis = ("None, :", ":, None", 0) if plan.columns else (":, None", "None, :", 1)
    pid = w.fresh("pid")
    w.line(f"{pid} = tj.bid(0)")
    ktile = pid
    if plan.split:
        ktile, part = w.fresh("kt"), w.fresh("part")
        w.line(f"{ktile} = {pid} // {nsplit}  # this block's tile of outputs")
        w.line(f"{part} = {pid} - {ktile} * {nsplit}  # and its share of the reduced elements")
    ek = _flat_index(w, "ek", ktile, tk, plan.index64, "the flat index of each output of this tile (kept axes)")
    kindex = _decompose(w, ek, ksizes, k_axes, "k")
    koffs: dict[str, str] = {}
    for i, *_ in plan.inputs:
        name = w.arg_names[i]
        ks = [(kindex[d], st) for kind, d, st in terms[name] if kind == "k"]
        if ks:
            koffs[name] = w.fresh(f"{name}_koff")
            w.line(f"{koffs[name]} = ({_offset(ks, bases.pop(name, None))})[{kdim}]")
    accs = _init_accumulators(w, reductions, tk)
    r = w.fresh("r")
    if plan.split:
        w.line(f"for {r} in range({part} * {tr}, {nr}, {nsplit} * {tr}):  # this block's share of the elements")
    else:
        w.line(f"for {r} in range(0, {nr}, {tr}):")
    er = w.fresh("er")
    start = f"{r}.astype(tj.int64)" if plan.index64 else r
    arange = f"tj.arange({tr}, tj.int64)" if plan.index64 else f"tj.arange({tr})"
    w.line(f"{er} = ({start} + {arange})[{rdim}]  # the flat index of each reduced element (reduced axes)",
           indent=2)
    rindex = _decompose(w, er, rsizes, r_axes, "r", indent=2)
    for i, _, _, _ in plan.inputs:
        name = w.arg_names[i]
        rs = [(rindex[d], st) for kind, d, st in terms[name] if kind == "r"]
        parts = ([koffs[name]] if name in koffs else []) + ([_offset(rs, None)] if rs else [])
        parts += [bases[name]] if name in bases else []  # an array that varies along no kept axis
        v = names[graph_param_node(graph, i).index] = w.fresh(f"{name}_v")
        w.line(f"{v} = tj.gather({name}, {' + '.join(parts) or '0'})", indent=2)
    _compute(w, names, [n for n in needed if n.kind in ("op", "const") and n.deps and not n.reduced], indent=2)
    valid = w.fresh("valid")
    w.line(f"{valid} = {er} < {nr}  # lanes past the end hold the identity", indent=2)
    for n in reductions:
        fn = n.form[1]
        src = n.operands[0]
        adt = accumulator_dtype(fn, src.dtype)
        value = names[src.index] if src.dtype == adt else f"{names[src.index]}.astype({dtype_text(adt)})"
        masked = f"tj.where({valid}, {value}, {literal_text(identity(fn, adt))})"
        reducer = "sum" if fn == "mean" else fn
        w.line(f"{accs[n.index]} = {_accumulate(fn, accs[n.index], f'tj.{reducer}({masked}, axis={axis})')}"
               f"{_where_comment(n)}", n, indent=2)
    bits = "64" if plan.index64 else "32"
    if plan.split:
        for k, n in enumerate(reductions):
            w.line(f"tj.store({out_names[k]}, index=({part}, {ktile}), tile={accs[n.index]}[None, :])")
        return w.source(f"{_describe_call(graph)}: partial reductions of {tk} outputs per block over a share of the "
                        f"reduced elements, {tr} at a time ({bits}-bit indices).")
    offsets, inside = _output_offsets(w, plan.outputs, out_names, ksizes, ek, idx, nk)
    _finish(w, graph, names, accs, count, plan.outputs, out_names, pid, offsets, inside)
    shape = f"({tr}, {tk}) tiles" if plan.columns else f"({tk}, {tr}) tiles"
    return w.source(f"{_describe_call(graph)}: {tk} outputs per block, reducing {tr} elements at a time ({shape}, "
                    f"{bits}-bit indices).")


def combine_source(graph: Graph, plan: CombinePlan) -> Source:
    """The kernel that finishes a split reduction: reduces the ``nsplit`` partials of each output and stores it."""
    w = _Writer(graph, "combine")
    idx = _index_type(plan.index64)
    reductions = _reductions(graph)
    names: dict[int, str] = {}
    works = [w.param(w.fresh(f"work{k}"), Slot("work", k)) for k in range(len(reductions))]
    out_names = _output_params(w, plan.outputs)
    o_axes = {d for a in plan.outputs if not a.flat for d in a.axes}
    ksizes = _size_params(w, max(o_axes, default=0) + 1, o_axes, "nk", "ksize", idx)
    nk = w.param(w.fresh("nk"), Slot("count"), idx)
    means = any(n.form[1] == "mean" for n in reductions)
    count = w.param(w.fresh("count"), Slot("rcount"), "tj.int64") if means else None
    ntiles = w.param(w.fresh("ntiles"), Slot("ntiles"), "tj.int32")
    _scalar_setup(w, graph, _epilogue(graph), names)
    ts, tk = plan.tile
    pid = w.fresh("pid")
    w.line(f"{pid} = tj.bid(0)")
    ek = _flat_index(w, "ek", pid, tk, plan.index64, "the flat index of each output of this tile")
    accs = _init_accumulators(w, reductions, tk)
    s = w.fresh("s")
    w.line(f"for {s} in range({ntiles}):")
    for k, n in enumerate(reductions):
        fn = n.form[1]
        adt = accumulator_dtype(fn, n.operands[0].dtype)
        part = w.fresh(f"part{n.index}")
        w.line(f"{part} = tj.load({works[k]}, index=({s}, {pid}), shape=({ts}, {tk}), "
               f"padding={literal_text(identity(fn, adt))})", indent=2)
        reducer = "sum" if fn == "mean" else fn
        w.line(f"{accs[n.index]} = {_accumulate(fn, accs[n.index], f'tj.{reducer}({part}, axis=0)')}", indent=2)
    offsets, inside = _output_offsets(w, plan.outputs, out_names, ksizes, ek, idx, nk)
    _finish(w, graph, names, accs, count, plan.outputs, out_names, pid, offsets, inside)
    return w.source(f"{_describe_call(graph)}: finishes a split reduction, {tk} outputs per block, {ts} partials at "
                    "a time.")


__all__ = ["CombinePlan", "MapPlan", "ReducePlan", "Slot", "Source", "accumulator_dtype", "combine_source",
           "graph_param_node", "identity", "map_source", "reduce_source"]
