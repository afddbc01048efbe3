"""``@tj.fuse``: a Python function of arrays, written with numpy-style operators and the tile language's elementwise
functions, runs as one generated tile kernel: one read of each input, one write of each output.

The function is traced once per argument signature (dtypes, ranks, kinds of numbers: ``fuse_trace``), with the
tile language's promotion rules. Each call then works out where its arrays are (numpy broadcasting, merged axes:
``fuse_layout``) and takes the kernel for that layout (``fuse_source`` writes it as Python tile-kernel source,
compiled by ``@tj.kernel`` and kept in the disk cache like every kernel). A kernel depends on the dtypes, ranks,
broadcast pattern and contiguity, never on the sizes: sizes and strides are run-time scalars, so one kernel serves
every size (a trailing reduction's kernel also depends on a class of the reduced extent and on whether it splits
the reduction over several blocks). A repeated call with arrays laid out as before goes straight to the kernel's
launch function, the same fast path a hand-written kernel's launch takes.
"""

from __future__ import annotations

import functools
import hashlib
import linecache
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from tilejit.api.fuse_layout import (
    Access,
    access,
    aligned_strides,
    broadcast_shapes,
    c_strides,
    coalesce,
    needs_int64,
    reduction_order,
    span,
)
from tilejit.api.fuse_source import (
    CombinePlan,
    MapPlan,
    ReducePlan,
    Slot,
    Source,
    accumulator_dtype,
    combine_source,
    map_source,
    reduce_source,
    spec_text,
)
from tilejit.api.fuse_trace import ArraySpec, Graph, Node, ScalarSpec, Spec, WeakSpec, Where, def_where, trace
from tilejit.errors import LaunchError, TileCompileError
from tilejit.language.ir.types import BY_NAME, ArrayType, DType, TileType
from tilejit.runtime.interop import ArrayView

_I32 = (-(1 << 31), (1 << 31) - 1)
_I64 = (-(1 << 63), (1 << 63) - 1)
_MEMO_LIMIT = 4096
#: Bytes of each array a thread of an elementwise tile handles (256 threads a block): 64 B is four 16-byte vector
#: accesses in flight per array, which streams at full bandwidth on an H100 (the vector add of bench_tile.py).
_THREAD_BYTES = 64
_THREADS = 256
#: Tiles of a reduction: (outputs, reduced elements) per block by the reduced extent's class, for 4-byte values.
_REDUCE_TILES = ((4, (1024, 4)), (32, (128, 32)), (256, (16, 256)))
_COMBINE_TILE = (32, 128)  # (partials, outputs) of the kernel finishing a split reduction
_MAX_SPLIT = 1024
_RESERVED = ("out", "stream")


# ------------------------------------------------------------------------------------------ arguments


def _device_ordinal(a: Any) -> int | None:
    """The device a library says its array is on (None when it does not say)."""
    cls = type(a)
    module = cls.__module__.split(".")[0]
    try:
        if module == "tilejit":
            return int(a.device.ordinal)
        if module == "torch":
            return int(a.get_device())
        if module == "cupy":
            return int(a.device.id)
        owner = getattr(a, "owner", None) if cls is ArrayView else None
        if owner is not None and type(owner).__name__ == "DLPackOwner":
            return int(owner.device_id)
    except (AttributeError, TypeError, ValueError):
        pass
    return None


class _Arg(NamedTuple):
    """One argument as a call sees it: its view (arrays), its value (numbers) and its spec."""

    view: ArrayView | None
    value: Any
    spec: Spec
    device: int | None


def _classify(func_name: str, name: str, a: Any, where: Where) -> _Arg:
    """What an argument is: an array (its view), a Python number (weak) or a typed scalar; a clear error otherwise."""
    from tilejit.runtime.interop import as_view

    cls = a.__class__
    if cls is bool:
        return _Arg(None, a, WeakSpec("bool"), None)
    if cls is int:
        if not _I64[0] <= a <= _I64[1]:
            raise _arg_error(func_name, name, where, f"the Python int {a} does not fit in int64")
        return _Arg(None, a, WeakSpec("int", not _I32[0] <= a <= _I32[1]), None)
    if cls is float:
        return _Arg(None, a, WeakSpec("float"), None)
    if cls.__module__ == "numpy" and getattr(a, "shape", None) == ():
        dt = BY_NAME.get(str(a.dtype))
        if dt is None:
            raise _arg_error(func_name, name, where, f"a numpy {a.dtype} scalar: the tile language has no such dtype")
        return _Arg(None, a.item(), ScalarSpec(dt), None)
    try:
        v = as_view(a)
    except (TypeError, ValueError) as exc:
        raise _arg_error(func_name, name, where, str(exc)) from None
    dt = BY_NAME.get(v.dtype)
    if dt is None:
        raise _arg_error(func_name, name, where, f"a {v.dtype} array: the tile language has no such dtype")
    return _Arg(v, None, ArraySpec(dt, len(v.shape)), _device_ordinal(a))


def _arg_error(func_name: str, name: str, where: Where, message: str) -> LaunchError:
    return LaunchError(f"{func_name}() argument '{name}' (the fused function at {where}): {message}")


# ------------------------------------------------------------------------------------------ compiled kernels


class _Program:
    """One generated kernel: its source, the ``@tj.kernel`` made from it, its (linecache) file name."""

    __slots__ = ("filename", "kernel", "source")

    def __init__(self, source: Source, filename: str, kernel: Any) -> None:
        self.source = source
        self.filename = filename
        self.kernel = kernel

    def register(self) -> None:
        """Put the source where ``inspect`` and tracebacks find it (again: ``linecache.clearcache`` drops it)."""
        text = self.source.text
        linecache.cache[self.filename] = (len(text), None, text.splitlines(True), self.filename)

    def relocated(self, exc: TileCompileError) -> TileCompileError:
        """An error the front end or a backend found in this generated kernel, told at the user's line that
        the kernel's line computes (with the generated line), else as it is."""
        if exc.filename != self.filename or exc.line is None:
            return exc
        node = self.source.lines.get(exc.line)
        gen = f" (in the kernel tj.fuse generated for it, {self.filename}:{exc.line}: {exc.source_line or ''})"
        if node is None or node.where is None:
            return TileCompileError(exc.message + gen)
        return node.where.error(exc.message + gen.rstrip(": )") + ")")


def _make_program(source: Source, backend: str | None) -> _Program:
    """Compile ``source`` as a module (under a name of its own in ``linecache``) and take its kernel."""
    import tilejit

    digest = hashlib.sha256(source.text.encode()).hexdigest()[:12]
    filename = f"<tj.fuse {source.name} {digest}>"
    prog = _Program(source, filename, None)
    prog.register()
    namespace: dict[str, Any] = {"__name__": f"tilejit.fuse.{source.name}", "tj": tilejit}
    exec(compile(source.text, filename, "exec", dont_inherit=True), namespace)
    kernel = namespace[source.name]
    if backend is not None:
        from tilejit.api.kernel import Kernel

        kernel = Kernel(kernel.func, backend=backend)
    prog.kernel = kernel
    return prog


# ------------------------------------------------------------------------------------------ one call's layout


class _Fill(NamedTuple):
    """How a call fills one kernel parameter: ``kind`` "num" (``data`` is the value), "in" / "out" (the view of
    argument / output ``at``, reshaped by ``data``: None to pass it as is, else (element offset, shape, strides)),
    "scalar" (argument ``at``'s value), "work" (workspace ``at``)."""

    kind: str
    at: int = 0
    data: Any = None


def _reshaped(shape: tuple[int, ...], strides: tuple[int, ...], acc: Access | None, n: int) -> Any:
    """The view a kernel parameter takes of an array: flat, (n,) from element 0; gathered, its whole span from its
    lowest element; None when the array's own view is already that."""
    if acc is not None and acc.flat:
        if tuple(shape) == (n,) and tuple(strides) == (1,):
            return None
        return (0, (n,), (1,))
    lo, hi = span(tuple(shape), tuple(strides))
    if lo == 0 and tuple(shape) == (hi,) and tuple(strides) == (1,):
        return None
    return (lo, (hi - lo,), (1,))


class _Launch(NamedTuple):
    """One kernel launch of a call: the program, its grid and how each parameter is filled."""

    program: _Program
    grid: int
    fills: tuple[_Fill, ...]


class _Recipe:
    """Everything one call needs besides its arrays' addresses: output shapes and dtypes, workspaces, launches."""

    __slots__ = ("launches", "out_dtypes", "out_shapes", "ranges", "reduction", "single", "works")

    def __init__(self, graph: Graph, out_shapes: list[tuple[int, ...]], launches: list[_Launch],
                 works: list[tuple[tuple[int, ...], DType]], ranges: list[tuple[int, int, int]]) -> None:
        self.out_shapes = out_shapes
        self.out_dtypes = [o.dtype for o in graph.outputs]
        self.single = graph.single
        self.reduction = graph.reduction is not None
        self.launches = launches  # none when there is nothing to compute (an empty result)
        self.works = works  # (shape, dtype) of each workspace of a split reduction
        self.ranges = ranges  # (argument index, lo, hi) of weak ints that meet a narrower integer type


def _tile_for(dtypes: Sequence[DType]) -> int:
    """Elements per block of an elementwise kernel: ``_THREAD_BYTES`` of its widest array per thread."""
    widest = max((d.itemsize for d in dtypes), default=4)
    return _THREADS * max(1, _THREAD_BYTES // widest)


def _reduce_tile(nk: int, nr: int, itemsize: int, columns: bool) -> tuple[int, int]:
    """(outputs, reduced elements) per block of a reduction kernel, 4096 elements (2048 of 8 bytes) in all: by the
    class of the reduced extent ``nr``; with ``columns`` (outputs next to each other in memory) 256 outputs (128)
    and 16 reduced elements; fewer outputs (a power of two) when there are only ``nk`` of them."""
    scale = 2 if itemsize >= 8 else 1
    if columns:
        tk = min(256 // scale, _pow2_at_least(nk))
        return tk, 4096 // scale // tk
    tk, tr = 1, 4096 // scale
    for most, (k, r) in _REDUCE_TILES:
        if nr <= most:
            tk, tr = max(1, k // scale), r
            break
    return min(tk, _pow2_at_least(nk)), tr


def _pow2_at_least(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _broadcast_error(graph: Graph, shapes: dict[int, tuple[int, ...]]) -> TileCompileError:
    """The error of arguments whose shapes do not broadcast, at the first operation that combines two of them."""
    name = graph.func.__name__
    for n in graph.needed():
        deps = sorted(n.deps)
        if broadcast_shapes([shapes[d] for d in deps]) is not None:
            continue
        for k, a in enumerate(deps):
            for b in deps[k + 1:]:
                if broadcast_shapes([shapes[a], shapes[b]]) is None:
                    message = (f"{name}(): argument '{graph.names[a]}' of shape {shapes[a]} and argument "
                               f"'{graph.names[b]}' of shape {shapes[b]} cannot be broadcast together")
                    if n.where is not None:
                        return n.where.error(message)
                    return TileCompileError(message)
    message = f"{name}(): the shapes of its arguments cannot be broadcast together: " + ", ".join(
        f"'{graph.names[i]}' {s}" for i, s in shapes.items())
    return def_where(graph.func).error(message)


def _several(out: Any) -> bool:
    """Whether ``out=`` is a tuple or list of arrays (exactly: a tilejit ``ArrayView`` is a tuple too)."""
    return out.__class__ is tuple or out.__class__ is list


def _operands(prog: _Program, used: list[int]) -> dict[str, int]:
    """Each array parameter of a program (by name) as an operand index: used array arguments, then outputs."""
    out: dict[str, int] = {}
    for _, slot in prog.source.params:
        if slot.kind == "in":
            out[slot.array] = used.index(slot.at)
        elif slot.kind == "out":
            out[slot.array] = len(used) + slot.at
    return out


def _extent(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """How many elements an array's span covers."""
    lo, hi = span(shape, strides)
    return hi - lo


def _shape_of(deps: frozenset[int], shapes: dict[int, tuple[int, ...]]) -> tuple[int, ...]:
    out = broadcast_shapes([shapes[d] for d in sorted(deps)])
    assert out is not None
    return out


# ------------------------------------------------------------------------------------------ tj.fuse


class Fused:
    """A fused function: call it with arrays (tilejit, torch, CuPy, JAX...) and numbers; ``out=`` takes the output
    array (a tuple of them for several), ``stream=`` the stream to launch on. ``tj.compile(fused, signature)``
    compiles it ahead of time."""

    def __init__(self, func: Callable[..., Any], *, backend: str | None = None) -> None:
        from tilejit.api.compile import check_backend
        from tilejit.language.frontend.params import signature_params

        if not callable(func) or not hasattr(func, "__code__"):
            raise TypeError(f"tj.fuse: expected a Python function, got {type(func).__name__} {func!r}")
        self.func = func
        self.__name__ = func.__name__
        self.__doc__ = func.__doc__
        self.__wrapped__ = func
        self.backend = check_backend(backend, f"tj.fuse(backend=...) of {func.__name__}")
        self._where = def_where(func)
        try:
            self._names = tuple(signature_params(func))
        except TileCompileError as exc:
            raise TileCompileError(exc.message.replace("kernel parameters", "fused function parameters"),
                                   exc.filename, exc.line, exc.col, exc.source_line) from None
        clash = [n for n in self._names if n in _RESERVED]
        if clash:
            raise self._where.error(f"tj.fuse: {func.__name__} has a parameter named '{clash[0]}', which a fused "
                                    f"function's call takes itself ({', '.join(_RESERVED)}=)")
        self._graphs: dict[tuple[Spec, ...], Graph] = {}
        self._programs: dict[Any, _Program] = {}
        self._recipes: dict[Any, _Recipe] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<tilejit.Fused {self.func.__module__}.{self.func.__qualname__}>"

    @property
    def kernels(self) -> list[str]:
        """The source of every kernel generated so far, in the order they were made."""
        return [p.source.text for p in self._programs.values()]

    # -------------------------------------------------------------- calling

    def __call__(self, *args: Any, out: Any = None, stream: Any = None, **kwargs: Any) -> Any:
        if kwargs or len(args) != len(self._names):
            args = self._bind(args, kwargs)
        key, values = self._key(args, out)
        recipe = self._recipes.get(key)
        if recipe is None:
            recipe = self._recipe_for(key, values, out)
        return self._run(recipe, args, values, out, stream)

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """The arguments in parameter order (Python's own errors for wrong ones)."""
        sig = _signature(self.func)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.__name__}(): {exc}") from None
        bound.apply_defaults()
        return tuple(bound.arguments[n] for n in self._names)

    def _key(self, args: Sequence[Any], out: Any) -> tuple[Any, list[_Arg]]:
        """The call's key (what its recipe depends on: arrays' dtypes, shapes, strides, alignment and devices,
        numbers' kinds, the outputs') and each argument classified."""
        name = self.__name__
        values = [_classify(name, n, a, self._where) for n, a in zip(self._names, args)]
        parts: list[Any] = []
        for v in values:
            if v.view is not None:
                w = v.view
                parts.append((w[3], tuple(w[1]), tuple(w[2]), w[0] & 15, v.device))
            else:
                parts.append(v.spec)
        if out is not None:
            many = _several(out)
            outs = out if many else (out,)
            parts.append(("out", len(outs), many))
            for k, o in enumerate(outs):
                ov = _classify(name, f"out[{k}]" if many else "out", o, self._where)
                if ov.view is None:
                    raise _arg_error(name, "out", self._where, f"expected a device array, got {type(o).__name__}")
                w = ov.view
                parts.append((w[3], tuple(w[1]), tuple(w[2]), w[0] & 15, ov.device))
        from tilejit.runtime.device import get_device

        parts.append(get_device().ordinal)
        return tuple(parts), values

    def _graph(self, specs: tuple[Spec, ...]) -> Graph:
        graph = self._graphs.get(specs)
        if graph is None:
            graph = self._graphs[specs] = trace(self.func, self._names, specs)
        return graph

    def _program(self, graph: Graph, plan: Any, make: Callable[[Graph, Any], Source]) -> _Program:
        key = (graph.specs, plan)
        prog = self._programs.get(key)
        if prog is None:
            prog = self._programs[key] = _make_program(make(graph, plan), self.backend)
        return prog

    def _recipe_for(self, key: Any, values: list[_Arg], out: Any) -> _Recipe:
        """Plan a call whose key is new (and remember the plan)."""
        from tilejit.runtime.device import get_device

        device = get_device()
        for name, v in zip(self._names, values):
            if v.device is not None and v.device != device.ordinal:
                raise _arg_error(self.__name__, name, self._where,
                                 f"the array is on device {v.device}, but the current device is {device.ordinal}: "
                                 "make it current (tj.Device(i).set_current()) or move the array")
        with self._lock:
            graph = self._graph(tuple(v.spec for v in values))
            outs = None if out is None else list(out if _several(out) else (out,))
            out_views = None
            if outs is not None:
                if len(outs) != len(graph.outputs):
                    raise _arg_error(self.__name__, "out", self._where,
                                     f"{len(outs)} arrays given, the function returns {len(graph.outputs)}")
                if _several(out) == graph.single:
                    what = "one array" if graph.single else f"a tuple of {len(graph.outputs)} arrays"
                    raise _arg_error(self.__name__, "out", self._where, f"the function returns {what}: pass out= as "
                                     f"{what}")
                from tilejit.runtime.interop import as_view

                out_views = [as_view(o) for o in outs]
                for k, o in enumerate(outs):
                    dev = _device_ordinal(o)
                    if dev is not None and dev != device.ordinal:
                        raise _arg_error(self.__name__, "out", self._where,
                                         f"output {k} is on device {dev}, but the current device is {device.ordinal}")
            if graph.reduction is None:
                recipe = self._map_recipe(graph, values, out_views)
            else:
                recipe = self._reduce_recipe(graph, values, out_views, device)
            if len(self._recipes) >= _MEMO_LIMIT:
                self._recipes.clear()
            self._recipes[key] = recipe
            return recipe

    # -------------------------------------------------------------- planning: elementwise

    def _shapes(self, graph: Graph, values: list[_Arg]) -> tuple[list[int], dict[int, tuple[int, ...]],
                                                                 tuple[int, ...]]:
        """(the array arguments the outputs read, their shapes, the broadcast of them) or the located error."""
        used = [i for i in graph.used_params() if isinstance(graph.specs[i], ArraySpec)]
        shapes = {i: tuple(values[i].view[1]) for i in used}  # type: ignore[index]
        full = broadcast_shapes(list(shapes.values()))
        if full is None:
            raise _broadcast_error(graph, shapes)
        return used, shapes, full

    def _check_outs(self, out_views: list[ArrayView] | None, shapes: list[tuple[int, ...]]) -> None:
        if out_views is None:
            return
        for k, (ov, shape) in enumerate(zip(out_views, shapes)):
            if tuple(ov[1]) != shape:
                raise _arg_error(self.__name__, "out", self._where,
                                 f"output {k} has shape {tuple(ov[1])}, the result has shape {shape}")

    def _ranges(self, graph: Graph) -> list[tuple[int, int, int]]:
        """For each weak int argument converted to a narrower integer type somewhere: (index, lo, hi) of the values
        it may take (numpy refuses a Python int that does not fit)."""
        out: dict[int, tuple[int, int]] = {}
        for n in graph.needed():
            for o, cast in zip(n.operands, n.casts):
                if isinstance(o, Node) and o.kind == "scalar" and cast is not None and (cast.is_int or cast.is_bool):
                    bits = cast.bits
                    lo, hi = ((-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if cast.kind == "i" else
                              (0, (1 << bits) - 1) if cast.kind == "u" else (0, 1))
                    old = out.get(o.param, _I64)
                    out[o.param] = (max(old[0], lo), min(old[1], hi))
        return [(i, lo, hi) for i, (lo, hi) in sorted(out.items())]

    def _map_recipe(self, graph: Graph, values: list[_Arg], out_views: list[ArrayView] | None) -> _Recipe:
        used, shapes, full = self._shapes(graph, values)
        out_shapes = [_shape_of(o.deps, shapes) for o in graph.outputs]
        self._check_outs(out_views, out_shapes)
        count = math.prod(full)
        ranges = self._ranges(graph)
        if count == 0:
            return _Recipe(graph, out_shapes, [], [], ranges)
        own = [(shapes[i], tuple(values[i].view[2])) for i in used]  # type: ignore[index]
        if out_views is None:
            own += [(s, c_strides(s)) for s in out_shapes]
        else:
            own += [(tuple(ov[1]), tuple(ov[2])) for ov in out_views]
        space = coalesce(full, [aligned_strides(s, st, full) for s, st in own])
        accs = [access(space.shape, st) for st in space.strides]
        dtypes = [graph.specs[i].dtype for i in used] + [o.dtype for o in graph.outputs]  # type: ignore[union-attr]
        tile = _tile_for(dtypes)
        spans = [_extent(*o) for o, a in zip(own, accs) if not a.flat]
        n_in = len(used)
        plan = MapPlan(len(space.shape), tuple(zip(used, accs[:n_in])), tuple(accs[n_in:]),
                       needs_int64(count, tile, spans), tile)
        prog = self._program(graph, plan, map_source)
        operand = _operands(prog, used)
        fills: list[_Fill] = []
        for _, slot in prog.source.params:
            kind = slot.kind
            if kind in ("in", "out"):
                k = operand[slot.array]
                fills.append(_Fill(kind, slot.at, _reshaped(*own[k], slot.access, count)))
            elif kind == "scalar":
                fills.append(_Fill("scalar", slot.at))
            elif kind == "size":
                fills.append(_Fill("num", 0, space.shape[slot.at]))
            elif kind == "stride":
                fills.append(_Fill("num", 0, space.strides[operand[slot.array]][slot.at]))
            elif kind == "base":
                fills.append(_Fill("num", 0, -span(*own[operand[slot.array]])[0]))
            elif kind == "count":
                fills.append(_Fill("num", 0, count))
            else:
                raise AssertionError(slot)
        return _Recipe(graph, out_shapes, [_Launch(prog, -(-count // tile), tuple(fills))], [], ranges)

    # -------------------------------------------------------------- planning: reductions

    def _reduce_recipe(self, graph: Graph, values: list[_Arg], out_views: list[ArrayView] | None,
                       device: Any) -> _Recipe:
        used, shapes, full = self._shapes(graph, values)
        assert graph.reduction is not None
        _, _, axes, keepdims = graph.reduction.form
        reductions = [n for n in graph.needed() if n.kind == "reduce"]
        for n in reductions:
            own_shape = _shape_of(n.operands[0].deps, shapes)
            if own_shape != full:
                message = (f"{self.__name__}(): this reduction's value has shape {own_shape}, but the arguments "
                           f"broadcast to {full}: every reduction of a fused function must reduce values of the "
                           "arguments' broadcast shape")
                raise n.where.error(message) if n.where is not None else TileCompileError(message)
        rank = len(full)
        kept, red = reduction_order(rank, axes)
        kshape = tuple(full[d] for d in kept)
        rshape = tuple(full[d] for d in red)
        out_shape = tuple(1 if d in red else full[d] for d in range(rank)) if keepdims else kshape
        out_shapes = [out_shape] * len(graph.outputs)
        self._check_outs(out_views, out_shapes)
        nk, nr = math.prod(kshape), math.prod(rshape)
        ranges = self._ranges(graph)
        empty = next((n for n in reductions if n.form[1] in ("max", "min")), None) if nr == 0 else None
        if empty is not None and nk:
            message = f"{self.__name__}(): a {empty.form[1]} over zero elements has no value (numpy raises too)"
            raise empty.where.error(message) if empty.where is not None else ValueError(message)
        if nk == 0:
            return _Recipe(graph, out_shapes, [], [], ranges)
        in_own = [(shapes[i], tuple(values[i].view[2])) for i in used]  # type: ignore[index]
        in_st = [aligned_strides(s, st, full) for s, st in in_own]
        if out_views is None:
            out_own = [(out_shape, c_strides(out_shape))] * len(out_shapes)
        else:
            out_own = [(tuple(ov[1]), tuple(ov[2])) for ov in out_views]
        out_kst = [tuple(st[d] for d in kept) if keepdims else st for _, st in out_own]
        kspace = coalesce(kshape, [tuple(st[d] for d in kept) for st in in_st] + out_kst)
        rspace = coalesce(rshape, [tuple(st[d] for d in red) for st in in_st])
        # columns: the first array steps less along a kept axis than along any reduced one
        kst = [abs(st) for st in kspace.strides[0] if st] if used else []
        rst = [abs(st) for st in rspace.strides[0] if st] if used else []
        columns = bool(kst) and (not rst or min(kst) < min(rst))
        tk, tr = _reduce_tile(nk, nr, max(n.operands[0].dtype.itemsize for n in reductions), columns)
        ktiles, rtiles = -(-nk // tk), -(-nr // tr)
        sms = device.multiprocessor_count
        nsplit = min(rtiles, max(1, -(-4 * sms // ktiles)), _MAX_SPLIT) if ktiles < 2 * sms else 1
        n_in = len(used)
        inputs = tuple((used[k], tuple(d for d, st in enumerate(kspace.strides[k]) if st != 0),
                        tuple(d for d, st in enumerate(rspace.strides[k]) if st != 0),
                        any(st < 0 for st in in_st[k])) for k in range(n_in))
        out_accs = tuple(access(kspace.shape, st) for st in kspace.strides[n_in:])
        spans = [_extent(*o) for o in in_own] + ([_extent(*o) for o in out_own] if out_views is not None else [])
        big = needs_int64(max(nk * nsplit, nr), max(tk, tr), spans)
        plan = ReducePlan(len(kspace.shape), len(rspace.shape), inputs, () if nsplit > 1 else out_accs, big, (tk, tr),
                          nsplit > 1, columns)
        own = in_own + out_own
        numbers = {"ksize": kspace.shape, "rsize": rspace.shape, "count": (nk,), "rcount": (nr,),
                   "nsplit": (nsplit,), "ntiles": (-(-nsplit // _COMBINE_TILE[0]),)}

        def fills(prog: _Program) -> tuple[_Fill, ...]:
            operand = _operands(prog, used)
            out: list[_Fill] = []
            for _, slot in prog.source.params:
                kind = slot.kind
                if kind == "in":
                    out.append(_Fill("in", slot.at, _reshaped(*own[operand[slot.array]], None, 0)))
                elif kind == "out":
                    out.append(_Fill("out", slot.at, _reshaped(*own[operand[slot.array]], slot.access, nk)))
                elif kind in ("scalar", "work"):
                    out.append(_Fill(kind, slot.at))
                elif kind in numbers:
                    out.append(_Fill("num", 0, numbers[kind][slot.at if kind in ("ksize", "rsize") else 0]))
                elif kind in ("kstride", "stride", "rstride"):
                    sp = rspace if kind == "rstride" else kspace
                    out.append(_Fill("num", 0, sp.strides[operand[slot.array]][slot.at]))
                elif kind == "base":
                    out.append(_Fill("num", 0, -span(*own[operand[slot.array]])[0]))
                else:
                    raise AssertionError(slot)
            return tuple(out)

        prog = self._program(graph, plan, reduce_source)
        launches = [_Launch(prog, ktiles * nsplit, fills(prog))]
        works: list[tuple[tuple[int, ...], DType]] = []
        if nsplit > 1:
            tkc = _COMBINE_TILE[1]
            cprog = self._program(graph, CombinePlan(out_accs, needs_int64(nk, tkc, spans), _COMBINE_TILE),
                                  combine_source)
            launches.append(_Launch(cprog, -(-nk // tkc), fills(cprog)))
            works = [((nsplit, nk), accumulator_dtype(n.form[1], n.operands[0].dtype)) for n in reductions]
        return _Recipe(graph, out_shapes, launches, works, ranges)

    # -------------------------------------------------------------- running

    def _run(self, recipe: _Recipe, args: Sequence[Any], values: list[_Arg], out: Any, stream: Any) -> Any:
        for i, lo, hi in recipe.ranges:
            v = values[i].value
            if not lo <= v <= hi:
                raise _arg_error(self.__name__, self._names[i], self._where,
                                 f"the Python int {v} does not fit the integer type it meets ({lo}..{hi})")
        like = next((a for a, v in zip(args, values) if v.view is not None), None)
        if out is None:
            made = [_allocate(like, s, d) for s, d in zip(recipe.out_shapes, recipe.out_dtypes)]
            outs = [m[0] for m in made]
            out_views = [m[1] for m in made]
        else:
            outs = list(out if _several(out) else (out,))
            from tilejit.runtime.interop import as_view

            out_views = [as_view(o) for o in outs]
            self._check_overlap(recipe, values, out_views)
        works = [_allocate(like, s, d)[1] for s, d in recipe.works]
        for launch in recipe.launches:
            kargs = []
            for f in launch.fills:
                kind = f.kind
                if kind == "num":
                    kargs.append(f.data)
                elif kind == "in" or kind == "out":
                    v = values[f.at].view if kind == "in" else out_views[f.at]
                    assert v is not None
                    d = f.data
                    if d is not None:
                        item = BY_NAME[v[3]].itemsize
                        v = ArrayView(v[0] + d[0] * item, d[1], d[2], v[3], v[4])
                    kargs.append(v)
                elif kind == "scalar":
                    kargs.append(values[f.at].value)
                else:
                    kargs.append(works[f.at])
            kernel = launch.program.kernel
            fn = kernel[launch.grid] if stream is None else kernel[launch.grid, stream]
            try:
                fn(*kargs)
            except TileCompileError as exc:
                raise launch.program.relocated(exc) from None
        if out is not None:
            return out
        return outs[0] if recipe.single else tuple(outs)

    def _check_overlap(self, recipe: _Recipe, values: list[_Arg], out_views: list[ArrayView]) -> None:
        """Refuse outputs that share memory with an input unless each is the very same view (an in-place update of
        each element by itself); and for reductions, any sharing."""
        reducing = recipe.reduction
        for k, ov in enumerate(out_views):
            olo, ohi = _byte_span(ov)
            for name, v in zip(self._names, values):
                w = v.view
                if w is None:
                    continue
                lo, hi = _byte_span(w)
                if lo < ohi and olo < hi:
                    same = w[0] == ov[0] and tuple(w[1]) == tuple(ov[1]) and tuple(w[2]) == tuple(ov[2])
                    if reducing or not same:
                        raise _arg_error(self.__name__, "out", self._where,
                                         f"output {k} shares memory with argument '{name}' "
                                         + ("(a reduction reads every input before it writes)" if reducing else
                                            "laid out differently (an in-place update must pass the very same view)"))

    # -------------------------------------------------------------- ahead of time

    def specialize(self, *args: Any, out: Any = None, **kwargs: Any) -> Specialization:
        """What a call with these arguments would launch, without launching it (nor allocating): the kernels'
        sources, grids, output shapes and dtypes; ``.compile(target)`` compiles the kernels with no GPU."""
        if kwargs or len(args) != len(self._names):
            args = self._bind(args, kwargs)
        key, values = self._key(args, out)
        recipe = self._recipes.get(key) or self._recipe_for(key, values, out)
        return Specialization(self._graphs[tuple(v.spec for v in values)], recipe)

    def compile(self, signature: Any, *, target: Any = None, backend: str | None = None) -> Any:
        """The kernel a call with contiguous arrays of the ``signature``'s dtypes and ranks would take (every extent
        taken as more than 1, so broadcasting follows the ranks; a reduction not split over blocks), compiled for
        ``target`` with no GPU: an :class:`~tilejit.api.compile.Artifact`. ``signature``: one entry per parameter,
        ``tj.float32[:, :]`` for an array, ``int`` / ``float`` / ``bool`` for a Python number, a dtype
        (``tj.float32``) for a typed scalar; or the same as text (``"float32[:, :], float32[:], float"``)."""
        specs = self._specs_of(signature)
        graph = self._graph(specs)
        arrays = [i for i in graph.used_params() if isinstance(specs[i], ArraySpec)]
        rank = max((specs[i].ndim for i in arrays), default=0)  # type: ignore[union-attr]
        size = max(2, min(4099, int(2 ** (28 / max(rank, 1)))))  # extents above 1, 32-bit indices
        full = (size,) * rank
        values = []
        for i, spec in enumerate(specs):
            if isinstance(spec, ArraySpec) and i in arrays:
                shape = full[rank - spec.ndim:]
                values.append(_Arg(ArrayView(0, shape, c_strides(shape), spec.dtype.name, None), None, spec, None))
            else:
                values.append(_Arg(None, 0, spec, None))
        if graph.reduction is None:
            recipe = self._map_recipe(graph, values, None)
        else:
            recipe = self._reduce_recipe(graph, values, None, _StandInDevice())
        return Specialization(graph, recipe).compile(target, backend)[0]

    def _specs_of(self, signature: Any) -> tuple[Spec, ...]:
        """Parameter specs from a signature (types, or text as the command line writes it)."""
        from tilejit.api.signature import parse_signature

        entries = _split_signature(signature) if isinstance(signature, str) else list(signature)
        if len(entries) != len(self._names):
            raise TypeError(f"{self.__name__} takes {len(self._names)} parameters ({', '.join(self._names)}), the "
                            f"signature has {len(entries)}")
        words = {"int": int, "float": float, "bool": bool}
        specs: list[Spec] = []
        for name, e in zip(self._names, entries):
            if isinstance(e, str):
                e = words.get(e) or parse_signature(e, what=f"parameter '{name}'")[0]
            if e is int or e is float or e is bool:
                specs.append(WeakSpec({int: "int", float: "float", bool: "bool"}[e]))
            elif isinstance(e, ArrayType):
                specs.append(ArraySpec(e.dtype, e.ndim))
            elif isinstance(e, TileType) and e.is_scalar:
                specs.append(ScalarSpec(e.dtype))
            elif isinstance(e, DType):
                specs.append(ScalarSpec(e))
            else:
                raise TypeError(f"{self.__name__}: parameter '{name}': signature entries are array types like "
                                f"tj.float32[:, :], int / float / bool (Python numbers) or dtypes; got {e!r}")
        return tuple(specs)

    def signature_text(self, *args: Any) -> str:
        """The signature (as ``tj.compile`` and the command line take it) of a call with these arguments."""
        return ", ".join(spec_text(_classify(self.__name__, n, a, self._where).spec)
                         for n, a in zip(self._names, args))


class Specialization:
    """What one call of a fused function launches: ``sources`` (each kernel's Python source), ``grids``,
    ``out_shapes`` and ``out_dtypes``; ``compile(target)`` compiles each kernel for ``target``."""

    def __init__(self, graph: Graph, recipe: _Recipe) -> None:
        self._graph = graph
        self._recipe = recipe
        self.sources = [launch.program.source.text for launch in recipe.launches]
        self.grids = [launch.grid for launch in recipe.launches]
        self.out_shapes = list(recipe.out_shapes)
        self.out_dtypes = list(recipe.out_dtypes)

    def __repr__(self) -> str:
        return (f"<tj.fuse specialization of {self._graph.func.__qualname__}: {len(self.sources)} kernels, grids "
                f"{self.grids}, outputs {self.out_shapes}>")

    def compile(self, target: Any = None, backend: str | None = None) -> list[Any]:
        """Each kernel compiled for ``target`` (an :class:`~tilejit.api.compile.Artifact` each); flat arrays are
        promised contiguous and aligned, as a launch with aligned arrays finds them."""
        from tilejit.api.compile import compile as compile_kernel

        arts = []
        for launch in self._recipe.launches:
            prog = launch.program
            prog.register()
            types: list[Any] = []
            for pname, slot in prog.source.params:
                if slot.kind in ("in", "out", "work"):
                    flat = slot.kind == "work" or (slot.access is not None and slot.access.flat)
                    types.append(ArrayType(_param_dtype(self._graph, slot, self._recipe),
                                           2 if slot.kind == "work" else 1, flat))
                else:
                    types.append(TileType(_annotation_dtype(prog.kernel.func.__annotations__[pname]), ()))
            try:
                art = compile_kernel(prog.kernel, tuple(types), target=target, backend=backend)
                art.ir()
            except TileCompileError as exc:
                raise prog.relocated(exc) from None
            arts.append(art)
        return arts


class _StandInDevice:
    """The device an ahead-of-time plan assumes: no reduction is split over blocks."""

    multiprocessor_count = 0
    ordinal = 0


def _split_signature(text: str) -> list[str]:
    """Split signature text at the commas outside brackets."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]


def _param_dtype(graph: Graph, slot: Slot, recipe: _Recipe) -> DType:
    if slot.kind == "in":
        return graph.specs[slot.at].dtype  # type: ignore[union-attr]
    if slot.kind == "out":
        return recipe.out_dtypes[slot.at]
    return recipe.works[slot.at][1]


def _annotation_dtype(ann: Any) -> DType:
    from tilejit.language.frontend.calls import to_dtype

    return to_dtype(ann)


def _byte_span(v: ArrayView) -> tuple[int, int]:
    lo, hi = span(tuple(v[1]), tuple(v[2]))
    item = BY_NAME[v[3]].itemsize
    return v[0] + lo * item, v[0] + hi * item


@functools.cache
def _signature(func: Callable[..., Any]) -> Any:
    import inspect

    return inspect.signature(func)


def _allocate(like: Any, shape: tuple[int, ...], dtype: DType) -> tuple[Any, ArrayView]:
    """A new C-contiguous array of ``shape`` and ``dtype`` from the library of ``like`` (torch, CuPy), else a
    tilejit array, and its view."""
    module = type(like).__module__.split(".")[0] if like is not None else ""
    if module == "torch":
        import torch

        tdt = getattr(torch, dtype.name if not dtype.is_bool else "bool", None)
        if tdt is not None:
            t = torch.empty(shape, dtype=tdt, device=like.device)
            return t, ArrayView(t.data_ptr(), shape, c_strides(shape), dtype.name, t)
    if module == "cupy" and dtype.name != "bfloat16":
        import cupy

        with like.device:
            a = cupy.empty(shape, dtype=dtype.name)
        return a, ArrayView(a.data.ptr, shape, c_strides(shape), dtype.name, a)
    from tilejit.runtime.array import DeviceArray

    arr = DeviceArray(shape, dtype.name)
    return arr, arr._view


def fuse(func: Callable[..., Any] | None = None, *, backend: str | None = None) -> Any:
    """Fuse a Python function of arrays into one tile kernel per layout: ``@tj.fuse``, ``@tj.fuse(backend="cuda")``
    or ``tj.fuse(fn)``. ``backend``: as ``@tj.kernel``'s ("cuda", "tileir", "auto"; default ``TILEJIT_BACKEND``)."""
    if func is None:
        from tilejit.api.compile import check_backend

        check_backend(backend, "tj.fuse(backend=...)")
        return lambda f: Fused(f, backend=backend)
    return Fused(func, backend=backend)


__all__ = ["Fused", "Specialization", "fuse"]
