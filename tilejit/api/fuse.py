"""``@tj.fuse``: a Python function of arrays, written with numpy-style operators and the tile language's elementwise
functions, runs as one generated tile kernel: one read of each input, one write of each output.

The function is traced once per argument signature (dtypes, ranks, kinds of numbers: ``fuse_trace``), with the
tile language's promotion rules. Each call then works out where its arrays are (numpy broadcasting, merged axes:
``fuse_layout``) and takes the kernel for that layout (``fuse_source`` writes it as Python tile-kernel source,
compiled by ``@tj.kernel`` and kept in the disk cache like every kernel). A kernel depends on the dtypes, ranks,
broadcast pattern and contiguity, never on the sizes: sizes and strides are run-time scalars, so one kernel serves
every size (a trailing reduction's kernel also depends on a class of the reduced extent and on whether it splits
the reduction over several blocks). Kernels launch through ``kernel[grid](...)``; a call with the same immutable
arguments (tilejit arrays and views, numbers) and ``out=`` as the thread's last one passes the kernel the very same
arguments, so its launch relaunches with one driver call.
"""

from __future__ import annotations

import functools
import hashlib
import linecache
import math
import operator
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from tilejit.api.fuse_layout import (
    Access,
    Space,
    access,
    aligned_strides,
    broadcast_shapes,
    c_strides,
    coalesce,
    magic,
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
)
from tilejit.api.fuse_trace import (
    ArraySpec,
    Graph,
    Node,
    ScalarSpec,
    Spec,
    WeakSpec,
    Where,
    def_where,
    keepdims_of,
    trace,
)
from tilejit.errors import LaunchError, TileCompileError
from tilejit.language.ir.types import BY_NAME, ArrayType, DType, TileType
from tilejit.runtime.array import DeviceArray as _DA
from tilejit.runtime.dispatch import remembered_strides, torch_reads_same
from tilejit.runtime.interop import ArrayView, new_view, torch_tensor_type
from tilejit.runtime.interop import converters as _CONVERTERS

_I32 = (-(1 << 31), (1 << 31) - 1)
_I64 = (-(1 << 63), (1 << 63) - 1)
_MEMO_LIMIT = 4096
#: Bytes of each array a thread of an elementwise tile handles (256 threads a block): 64 B is four 16-byte vector
#: accesses in flight per array, which streams at full bandwidth on an H100 (the vector add of bench_tile.py).
_THREAD_BYTES = 64
_THREADS = 256
_LONG_OPS, _LONG_TILE = 8, 4096
#: Tiles of a reduction: (outputs, reduced elements) per block by the reduced extent's class, for 4-byte values.
_REDUCE_TILES = ((4, (1024, 4)), (32, (128, 32)), (256, (16, 256)))
_COMBINE_TILE = (32, 128)  # (partials, outputs) of the kernel finishing a split reduction
_MAX_SPLIT = 1024
_RESERVED = ("out", "stream")
#: Arguments a call may be remembered by (identity): immutable ones (as a tile kernel's launch remembers them).
_IMMUTABLE = frozenset({_DA, ArrayView, int, float, bool})
_WEAK_FLOAT = WeakSpec("float")
_MISSING: Any = type("_Missing", (), {"__repr__": lambda self: "<missing>"})()  # a parameter the call left out


# ------------------------------------------------------------------------------------------ arguments


def _device_ordinal(a: Any) -> int | None:
    """The device a library says its array is on (None when it does not say)."""
    cls = type(a)
    getter = _DEVICE_OF.get(cls)
    if getter is None and cls not in _DEVICE_OF:
        module = cls.__module__.split(".")[0]
        getter = _DEVICE_OF[cls] = _DEVICE_GETTERS.get(module)
    try:
        if getter is not None:
            return int(getter(a))
        owner = getattr(a, "owner", None) if cls is ArrayView else None
        if owner is not None and type(owner).__name__ == "DLPackOwner":
            return int(owner.device_id)
    except (AttributeError, TypeError, ValueError):
        pass
    return None


#: How each library says which device its array is on, by the array's module; and the getter of each class met.
_DEVICE_GETTERS: dict[str, Callable[[Any], int]] = {
    "tilejit": lambda a: a.device.ordinal, "torch": lambda t: t.get_device(), "cupy": lambda a: a.device.id,
}
_DEVICE_OF: dict[type, Callable[[Any], int] | None] = {}


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
        if dt.is_float8:
            raise _arg_error(func_name, name, where, f"a numpy {a.dtype} scalar: 8-bit floats are arrays only")
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
        line = f": {exc.source_line.strip()}" if exc.source_line else ""
        message = f"{exc.message} (in the kernel tj.fuse generated for it, {self.filename}:{exc.line}{line})"
        if node is None or node.where is None:
            return TileCompileError(message)
        return node.where.error(message)


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


def _reshaped(shape: tuple[int, ...], strides: tuple[int, ...], acc: Access | None, n: int, itemsize: int) -> Any:
    """The view a kernel parameter takes of an array: flat, (n,) from element 0; gathered, its whole span from its
    lowest element; None when the array's own view is already that. (byte offset, shape, strides) otherwise."""
    if acc is not None and acc.flat:
        if tuple(shape) == (n,) and tuple(strides) == (1,):
            return None
        return (0, (n,), (1,))
    lo, hi = span(tuple(shape), tuple(strides))
    if lo == 0 and tuple(shape) == (hi,) and tuple(strides) == (1,):
        return None
    return (lo * itemsize, (hi - lo,), (1,))


class _Launch:
    """One kernel launch of a call: the program, its grid, how each parameter is filled, and ``kernel[grid]``
    once asked for (the kernel's own launch function)."""

    __slots__ = ("fills", "grid", "program", "run")

    def __init__(self, program: _Program, grid: int, fills: tuple[_Fill, ...]) -> None:
        self.program = program
        self.grid = grid
        self.fills = fills
        self.run: Callable[..., None] | None = None

    def bound(self, stream: Any) -> Callable[..., None]:
        """``kernel[grid]`` (``kernel[grid, stream]`` with a stream)."""
        if stream is not None:
            return self.program.kernel[self.grid, stream]  # type: ignore[no-any-return]
        fn = self.run
        if fn is None:
            fn = self.run = self.program.kernel[self.grid]
        return fn

    def __call__(self, kargs: Sequence[Any], stream: Any) -> Callable[..., None]:
        """Launch with ``kargs`` (a located error at the user's line when the kernel does not compile); returns the
        launch function used."""
        fn = self.bound(stream)
        try:
            fn(*kargs)
        except TileCompileError as exc:
            raise self.program.relocated(exc) from None
        return fn


class _Recipe:
    """Everything one call needs besides its arrays' addresses: output shapes and dtypes, workspaces, launches."""

    __slots__ = ("launches", "out_dtypes", "out_shapes", "overlaps", "ranges", "reduction", "single", "works")

    def __init__(self, graph: Graph, out_shapes: list[tuple[int, ...]], launches: list[_Launch],
                 works: list[tuple[tuple[int, ...], DType]], ranges: list[tuple[int, int, int]]) -> None:
        self.out_shapes = out_shapes
        self.out_dtypes = [o.dtype for o in graph.outputs]
        self.single = graph.single
        self.reduction = graph.reduction is not None
        self.launches = launches  # none when there is nothing to compute (an empty result)
        self.works = works  # (shape, dtype) of each workspace of a split reduction
        self.ranges = ranges  # (argument index, lo, hi) of weak ints that meet a narrower integer type
        # (output, argument, the argument's byte span from its pointer, the output's, the same layout): for out=
        self.overlaps: list[tuple[int, int, int, int, int, int, bool]] = []


def _tile_for(dtypes: Sequence[DType], ops: int) -> int:
    """Elements per block of an elementwise kernel: ``_THREAD_BYTES`` of its widest array per thread; at most
    ``_LONG_TILE`` for a computation of more than ``_LONG_OPS`` operations (the CUDA backend runs 8192 16-bit
    elements as 512 threads of 16, which spill at 16 operations: ptxas -v, sm_90a)."""
    widest = max((d.itemsize for d in dtypes), default=4)
    tile = _THREADS * max(1, _THREAD_BYTES // widest)
    return min(tile, _LONG_TILE) if ops > _LONG_OPS else tile


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


def kernel_args(launch: _Launch, views: Sequence[Any], nums: Sequence[Any], out_views: Sequence[ArrayView],
                works: Sequence[ArrayView]) -> list[Any]:
    """The arguments of one of a call's launches: views of its arrays (reshaped as the kernel reads them: ``data``
    is (element offset, shape, strides, itemsize)), the numbers of its layout, its scalar arguments' values."""
    kargs: list[Any] = []
    for f in launch.fills:
        kind = f.kind
        if kind == "num":
            kargs.append(f.data)
        elif kind == "in" or kind == "out":
            v = views[f.at] if kind == "in" else out_views[f.at]
            d = f.data
            kargs.append(v if d is None else new_view((v[0] + d[0], d[1], d[2], v[3], v[4])))
        elif kind == "scalar":
            kargs.append(nums[f.at])
        else:
            kargs.append(works[f.at])
    return kargs


def _overlaps(values: Sequence[_Arg], out_views: Sequence[ArrayView],
              reduction: bool) -> list[tuple[int, int, int, int, int, int, bool]]:
    """For each output and array argument: the byte spans each covers from its pointer, and whether their layouts
    are the same (a call then checks the pointers: an output may share memory with an argument only where it is
    the very same view, and a reduction's not at all)."""
    out = []
    for k, ov in enumerate(out_views):
        olo, ohi = _byte_extent(ov)
        for i, v in enumerate(values):
            if v.view is not None:
                lo, hi = _byte_extent(v.view)
                same = not reduction and tuple(v.view[1]) == tuple(ov[1]) and tuple(v.view[2]) == tuple(ov[2]) \
                    and v.view[3] == ov[3]
                out.append((k, i, lo, hi, olo, ohi, same))
    return out


class _Local(threading.local):
    """A fused function's state in each thread: its last call (``memo``: remembered when ``out=`` was given and
    every argument is immutable or a torch tensor, whose state it keeps) and the thread's current-device cell.

    The memo is one flat tuple, read by index (by the generated ``__call__`` too): the arguments in parameter order,
    then ``out``, ``stream``, the device cell and the device it held, the torch tensors' states (``_states``, None
    when there are none), the launch function and its arguments (of the one launch made, or ``_launch_all`` of
    them all) and whether ``out`` was a tuple or list of arrays."""

    def __init__(self) -> None:
        from tilejit.runtime.device import thread_state

        self.memo: Any = None
        self.cell = thread_state().device


def _states(items: Sequence[Any]) -> tuple[Any, ...] | None:
    """What a repeated call checks of its arguments and outputs before it relaunches the kernels of the last one:
    for each torch tensor its address, shape, strides and dtype (what its view was made of; it must still be on the
    GPU), four Nones for an immutable one, one flat tuple of all; None when another kind of argument is met (no
    relaunch)."""
    tensor = torch_tensor_type()
    out: list[Any] = []
    for a in items:
        if a.__class__ in _IMMUTABLE:
            out += (None, None, None, None)
        elif isinstance(a, tensor):
            t: Any = a
            ptr = t.data_ptr()
            if not t.is_cuda or not ptr:
                return None
            out += (ptr, t.shape, remembered_strides(t), t.dtype)
        else:
            return None
    return tuple(out)


#: The test that a memoized call's item ``{a}`` reads as ``_states`` found it in ``{s}`` at ``{i}`` (the launch
#: policy's ``torch_reads_same``): Python source, inlined per parameter by the generated ``__call__`` and looped over
#: by ``_unchanged``.
_READS_AS = "({s}[{i}] is None or " + " and ".join(
    torch_reads_same("{a}", "{s}[{i}]", "{s}[{i} + 3]", "{s}[{i} + 1]", "{s}[{i} + 2]")) + ")"
#: Whether each torch tensor of ``items`` reads as ``_states`` found it in ``states`` (address, dtype, shape,
#: strides); a tensor changed in place (``set_``, ``resize_``, ``transpose_``, ``.data =``) does not.
_unchanged: Callable[[tuple[Any, ...], Sequence[Any]], bool] = eval(
    "lambda states, items: all(" + _READS_AS.format(a="a", s="states", i="i") +
    " for i, a in zip(range(0, 4 * len(items), 4), items))")


def _launch_all(done: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]]) -> None:
    """Launch each (launch function, its arguments) of ``done`` in turn (a memoized call of several launches)."""
    for fn, kargs in done:
        fn(*kargs)


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


@functools.cache
def _caller(names: tuple[str, ...], posonly: int, kwonly: int) -> type[Fused]:
    """A subclass of ``Fused`` (named the same) whose ``__call__`` takes the parameters ``names`` as the function
    does (``posonly`` positional-only first, ``kwonly`` keyword-only last) and relaunches the memo's launches after
    comparing each argument by identity inline: no binding and no ``*args`` / ``**kwargs`` on a repeated call."""
    n = len(names)
    params = [f"{p}=_tj_M" for p in names]
    if posonly:
        params.insert(posonly, "/")
    params.insert(n - kwonly + (1 if posonly else 0), "*_tj_more")
    same = " and ".join(f"{p} is _tj_m[{k}]" for k, p in enumerate(names))
    items = ", ".join(names)
    reads = " and ".join(_READS_AS.format(a=p, s="_tj_s", i=4 * k) for k, p in enumerate((*names, "out")))
    text = f"""def __call__(_tj_self, {", ".join(params)}, out=None, stream=None, **_tj_kw):
    _tj_m = _tj_self._local.memo
    if (_tj_m is not None and {same} and out is _tj_m[{n}] and stream is _tj_m[{n + 1}]
            and _tj_m[{n + 2}][0] is _tj_m[{n + 3}] and not _tj_more and not _tj_kw):
        _tj_s = _tj_m[{n + 4}]
        if _tj_s is None or (_tj_unchanged(_tj_s, ({items}, *out)) if _tj_m[{n + 7}] else {reads}):
            _tj_m[{n + 5}](*_tj_m[{n + 6}])
            return out
    return _tj_self._slow(({items},), _tj_more, _tj_kw, out, stream)
"""
    namespace: dict[str, Any] = {"_tj_M": _MISSING, "_tj_unchanged": _unchanged}
    exec(compile(text, f"<tj.fuse call of {n} parameters>", "exec"), namespace)
    call = namespace["__call__"]
    call.__qualname__ = "Fused.__call__"
    call.__doc__ = Fused.__call__.__doc__
    return type("Fused", (Fused,), {"__call__": call, "__module__": __name__, "__qualname__": "Fused",
                                    "__doc__": Fused.__doc__})



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
        self._count = len(self._names)
        self._local = _Local()  # each thread's last call and current-device cell (``__call__``)
        self._graphs: dict[tuple[Spec, ...], Graph] = {}
        self._programs: dict[Any, _Program] = {}
        self._by_text: dict[str, _Program] = {}
        self._recipes: dict[Any, _Recipe] = {}
        self._lock = threading.Lock()
        code = func.__code__  # the parameters' kinds, where they are its own (not a wrapped function's)
        if type(self) is Fused and self._names and code.co_varnames[:self._count] == self._names and \
                code.co_argcount + code.co_kwonlyargcount == self._count and \
                not any(n.startswith("_tj_") for n in self._names):
            self.__class__ = _caller(self._names, code.co_posonlyargcount, code.co_kwonlyargcount)

    def __repr__(self) -> str:
        return f"<tilejit.Fused {self.func.__module__}.{self.func.__qualname__}>"

    @property
    def kernels(self) -> list[str]:
        """The source of every kernel generated so far, in the order they were made."""
        return list(self._by_text)

    # -------------------------------------------------------------- calling

    def __call__(self, *args: Any, out: Any = None, stream: Any = None, **kwargs: Any) -> Any:
        # A fused function of usual parameters takes the generated ``__call__`` of its class (``_caller``) instead.
        if kwargs or len(args) != self._count:
            args = self._bind(args, kwargs)
        return self._call(args, out, stream)

    def _slow(self, named: tuple[Any, ...], more: tuple[Any, ...], kwargs: dict[str, Any], out: Any,
              stream: Any) -> Any:
        """A call the generated ``__call__`` did not relaunch: its arguments (``named``: each parameter's, ``_MISSING``
        where not given) bound as Python binds them, then called."""
        if more or kwargs or any(a is _MISSING for a in named):
            if more:
                args = self._bind((*named, *more), kwargs)
            else:
                given = {n: a for n, a in zip(self._names, named) if a is not _MISSING}
                args = self._bind((), {**given, **kwargs})
        else:
            args = named
        return self._call(args, out, stream)

    def _call(self, args: tuple[Any, ...], out: Any, stream: Any) -> Any:
        """Call with the arguments in parameter order: the last call's launches again when the memo says they hold
        (see ``_memo``), else plan (or find the plan of) the call and launch it."""
        local = self._local
        memo = local.memo
        n = self._count
        if memo is not None and out is memo[n] and stream is memo[n + 1] and memo[n + 2][0] is memo[n + 3] and \
                all(map(operator.is_, args, memo)) and \
                (memo[n + 4] is None or _unchanged(memo[n + 4], (*args, *(out if memo[n + 7] else (out,))))):
            memo[n + 5](*memo[n + 6])  # the same arguments, reading the same as then: the same kernel arguments
            return out
        local.memo = None
        key, views, nums, out_views, kept = self._key(args, out, local.cell)
        recipe = self._recipes.get(key)
        if recipe is None:
            recipe = self._recipe_for(key, args, out)
        for i, lo, hi in recipe.ranges:
            if not lo <= nums[i] <= hi:
                raise _arg_error(self.__name__, self._names[i], self._where,
                                 f"the Python int {nums[i]} does not fit the integer type it meets ({lo}..{hi})")
        like = next((a for a, v in zip(args, views) if v is not None), None)  # new arrays: of its library
        if out_views is None:
            made = [_allocate(like, s, d) for s, d in zip(recipe.out_shapes, recipe.out_dtypes)]
            out_views = [m[1] for m in made]
        elif recipe.overlaps:
            self._check_overlaps(recipe, views, out_views)
        works = [_allocate(like, s, d)[1] for s, d in recipe.works] if recipe.works else ()
        done = tuple((launch(kargs, stream), kargs) for launch in recipe.launches
                     for kargs in (tuple(kernel_args(launch, views, nums, out_views, works)),))
        if out is not None:
            if not works:
                several = _several(out)
                states = None if kept else _states((*args, *(out if several else (out,))))
                if kept or states is not None:
                    fn, kargs = done[0] if len(done) == 1 else (_launch_all, (done,))
                    local.memo = (*args, out, stream, local.cell, local.cell[0], states, fn, kargs, several)
            return out
        outs = [m[0] for m in made]
        return outs[0] if recipe.single else tuple(outs)

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """The arguments in parameter order (Python's own errors for wrong ones)."""
        sig = _signature(self.func)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.__name__}(): {exc}") from None
        bound.apply_defaults()
        return tuple(bound.arguments[n] for n in self._names)

    def _key(self, args: Sequence[Any], out: Any, cell: Any) -> tuple[Any, list[Any], list[Any], list[Any] | None,
                                                                      bool]:
        """(the call's key: what its recipe depends on, each argument's view (None for numbers), each number
        argument's value, the outputs' views, whether every argument is immutable (a repeated call may be
        remembered)); arrays' dtypes, shapes, strides, alignment and devices, numbers' kinds, the outputs' and the
        current device make the key."""
        parts: list[Any] = []
        views: list[Any] = []
        nums: list[Any] = []
        kept = True
        n = len(args)
        many = out is not None and _several(out)
        outs = () if out is None else out if many else (out,)
        for k, a in enumerate((*args, *outs)):
            cls = a.__class__
            if cls is _DA:
                v = a._view
                parts.append((v[3], v[1], v[2], v[0] & 15, a.device.ordinal))
            elif cls is ArrayView:
                v = a
                parts.append((v[3], v[1], v[2], v[0] & 15, None))
            elif cls is float and k < n:
                parts.append(_WEAK_FLOAT)
                views.append(None)
                nums.append(a)
                continue
            else:
                kept = kept and cls in _IMMUTABLE
                conv = _CONVERTERS.get(cls)
                try:  # an array type met before (a host array's converter raises: classified below)
                    v = conv(a) if conv is not None and cls is not int and cls is not bool else None
                except (TypeError, ValueError):
                    v = None
                if v is not None:
                    parts.append((v[3], v[1], v[2], v[0] & 15, _device_ordinal(a)))
                else:
                    name = self._names[k] if k < n else f"out[{k - n}]" if many else "out"
                    arg = _classify(self.__name__, name, a, self._where)
                    v = arg.view
                    if v is None and k >= n:
                        raise _arg_error(self.__name__, "out", self._where,
                                         f"expected a device array, got {type(a).__name__}")
                    if v is None:
                        parts.append(arg.spec)
                        views.append(None)
                        nums.append(arg.value)
                        continue
                    parts.append((v[3], v[1], v[2], v[0] & 15, arg.device))
            views.append(v)
            nums.append(None)
        out_views = None
        if out is not None:
            parts.append(("out", len(outs), many))
            out_views = views[n:]
            del views[n:], nums[n:]
        dev = cell[0]
        if dev is None:
            from tilejit.runtime.device import get_device

            dev = get_device()
        parts.append(dev)
        return tuple(parts), views, nums, out_views, kept

    def _check_overlaps(self, recipe: _Recipe, views: Sequence[Any], out_views: Sequence[ArrayView]) -> None:
        """Refuse an output that shares memory with an array argument, unless it is the very same view (each element
        updated in place by itself; never for a reduction)."""
        for k, i, lo, hi, olo, ohi, same in recipe.overlaps:
            p, q = views[i][0], out_views[k][0]
            if p + lo < q + ohi and q + olo < p + hi and not (same and p == q):
                why = ("a reduction reads every input before it writes" if recipe.reduction else
                       "laid out differently: an in-place update must pass the very same view")
                raise _arg_error(self.__name__, "out", self._where,
                                 f"output {k} shares memory with argument '{self._names[i]}' ({why})")

    def _graph(self, specs: tuple[Spec, ...]) -> Graph:
        graph = self._graphs.get(specs)
        if graph is None:
            graph = self._graphs[specs] = trace(self.func, self._names, specs)
        return graph

    def _program(self, graph: Graph, plan: Any, make: Callable[[Graph, Any], Source]) -> _Program:
        """The kernel of ``plan`` for ``graph`` (one program per distinct source: ranks that merge alike share)."""
        key = (graph.specs, plan)
        prog = self._programs.get(key)
        if prog is None:
            source = make(graph, plan)
            prog = self._by_text.get(source.text)
            if prog is None:
                prog = self._by_text[source.text] = _make_program(source, self.backend)
            self._programs[key] = prog
        return prog

    def _recipe_for(self, key: Any, args: Sequence[Any], out: Any) -> _Recipe:
        """Plan a call whose key is new (and remember the plan)."""
        device = key[-1]
        values = [_classify(self.__name__, n, a, self._where) for n, a in zip(self._names, args)]
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
            if out_views is not None:
                recipe.overlaps = _overlaps(values, out_views, recipe.reduction)
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
        if count == 0:  # an empty argument: only outputs that do not read it have elements to compute
            keep = [k for k, shape in enumerate(out_shapes) if math.prod(shape)]
            recipe = _Recipe(graph, out_shapes, [], [], ranges)
            if keep:
                sub = self._map_recipe(graph.subset(keep), values, None if out_views is None else
                                       [out_views[k] for k in keep])
                recipe.launches = [_Launch(la.program, la.grid, tuple(
                    f._replace(at=keep[f.at]) if f.kind == "out" else f for f in la.fills)) for la in sub.launches]
            return recipe
        own = [(shapes[i], tuple(values[i].view[2])) for i in used]  # type: ignore[index]
        if out_views is None:
            own += [(s, c_strides(s)) for s in out_shapes]
        else:
            own += [(tuple(ov[1]), tuple(ov[2])) for ov in out_views]
        space = coalesce(full, [aligned_strides(s, st, full) for s, st in own])
        if not space.shape:  # one element: every array is flat, as in any contiguous call
            space = Space((1,), tuple((1,) for _ in own))
        dtypes = [graph.specs[i].dtype for i in used] + [o.dtype for o in graph.outputs]  # type: ignore[union-attr]
        tile = _tile_for(dtypes, sum(n.kind == "op" for n in graph.needed()))
        n_in = len(used)
        items = [BY_NAME[values[i].view[3]].itemsize for i in used]  # type: ignore[index]
        items += [d.itemsize for d in dtypes[n_in:]] if out_views is None else \
            [BY_NAME[ov[3]].itemsize for ov in out_views]
        # inputs may come in runs a vector gather reads (outputs: scattered element by element)
        accs = [access(space.shape, st, items[k] if k < n_in else 0) for k, st in enumerate(space.strides)]
        spans = [_extent(*o) for o, a in zip(own, accs) if not a.flat]
        plan = MapPlan(len(space.shape), tuple(zip(used, accs[:n_in])), tuple(accs[n_in:]),
                       needs_int64(count, tile, spans), tile)
        prog = self._program(graph, plan, map_source)
        operand = _operands(prog, used)
        fills: list[_Fill] = []
        for _, slot in prog.source.params:
            kind = slot.kind
            if kind in ("in", "out"):
                k = operand[slot.array]
                fills.append(_Fill(kind, slot.at, _reshaped(*own[k], slot.access, count, items[k])))
            elif kind == "scalar":
                fills.append(_Fill("scalar", slot.at))
            elif kind == "size":
                fills.append(_Fill("num", 0, space.shape[slot.at]))
            elif kind in ("size_magic", "size_shift"):
                fills.append(_Fill("num", 0, magic(space.shape[slot.at])[kind == "size_shift"]))
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
        axes = graph.reduction.form[2]
        keeps = [keepdims_of(o) for o in graph.outputs]
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
        out_shapes = [tuple(1 if d in red else full[d] for d in range(rank)) if keep else kshape for keep in keeps]
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
            out_own = [(s, c_strides(s)) for s in out_shapes]
        else:
            out_own = [(tuple(ov[1]), tuple(ov[2])) for ov in out_views]
        out_kst = [tuple(st[d] for d in kept) if keep else st for (_, st), keep in zip(out_own, keeps)]
        kspace = coalesce(kshape, [tuple(st[d] for d in kept) for st in in_st] + out_kst)
        rspace = coalesce(rshape, [tuple(st[d] for d in red) for st in in_st])
        # columns: the first array steps less along a kept axis than along any reduced one
        kst = [abs(st) for st in kspace.strides[0] if st] if used else []
        rst = [abs(st) for st in rspace.strides[0] if st] if used else []
        columns = bool(kst) and (not rst or min(kst) < min(rst))
        tk, tr = _reduce_tile(nk, nr, max(n.operands[0].dtype.itemsize for n in reductions), columns)
        ktiles, rtiles = -(-nk // tk), -(-nr // tr)
        sms = device.multiprocessor_count
        # (a reduction over zero elements still runs one block per kept tile: it writes the identity, or NaN)
        nsplit = max(1, min(rtiles, max(1, -(-4 * sms // ktiles)), _MAX_SPLIT)) if ktiles < 2 * sms else 1
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
        items = [BY_NAME[values[i].view[3]].itemsize for i in used]  # type: ignore[index]
        items += [o.dtype.itemsize for o in graph.outputs] if out_views is None else \
            [BY_NAME[ov[3]].itemsize for ov in out_views]
        numbers = {"ksize": kspace.shape, "rsize": rspace.shape, "count": (nk,), "rcount": (nr,),
                   "nsplit": (nsplit,), "ntiles": (-(-nsplit // _COMBINE_TILE[0]),)}

        def fills(prog: _Program) -> tuple[_Fill, ...]:
            operand = _operands(prog, used)
            out: list[_Fill] = []
            for _, slot in prog.source.params:
                kind = slot.kind
                if kind == "in":
                    k = operand[slot.array]
                    out.append(_Fill("in", slot.at, _reshaped(*own[k], None, 0, items[k])))
                elif kind == "out":
                    k = operand[slot.array]
                    out.append(_Fill("out", slot.at, _reshaped(*own[k], slot.access, nk, items[k])))
                elif kind in ("scalar", "work"):
                    out.append(_Fill(kind, slot.at))
                elif kind in numbers:
                    out.append(_Fill("num", 0, numbers[kind][slot.at if kind in ("ksize", "rsize") else 0]))
                elif kind[1:] in ("size_magic", "size_shift"):
                    size = numbers[kind[:5]][slot.at]
                    out.append(_Fill("num", 0, magic(size)[kind.endswith("shift")]))
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

    # -------------------------------------------------------------- ahead of time

    def specialize(self, *args: Any, out: Any = None, **kwargs: Any) -> Specialization:
        """What a call with these arguments would launch, without launching it (nor allocating): the kernels'
        sources, grids, output shapes and dtypes; ``.compile(target)`` compiles the kernels with no GPU."""
        if kwargs or len(args) != len(self._names):
            args = self._bind(args, kwargs)
        key = self._key(args, out, self._local.cell)[0]
        recipe = self._recipes.get(key) or self._recipe_for(key, args, out)
        specs = tuple(_classify(self.__name__, n, a, self._where).spec for n, a in zip(self._names, args))
        return Specialization(self._graphs[specs], recipe)

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
        """Each kernel compiled for ``target`` (an :class:`~tilejit.api.compile.Artifact` each); flat arrays (and
        gathered ones read in runs) are promised contiguous and aligned, as a launch with aligned arrays finds them."""
        from tilejit.api.compile import compile as compile_kernel

        arts = []
        for launch in self._recipe.launches:
            prog = launch.program
            prog.register()
            types: list[Any] = []
            for pname, slot in prog.source.params:
                if slot.kind in ("in", "out", "work"):
                    flat = slot.kind == "work" or (slot.access is not None and (slot.access.flat or
                                                                              bool(slot.access.runs)))
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


def _byte_extent(v: ArrayView) -> tuple[int, int]:
    """The bytes an array's elements cover, from its pointer: (lowest, highest + 1)."""
    lo, hi = span(tuple(v[1]), tuple(v[2]))
    item = BY_NAME[v[3]].itemsize
    return lo * item, hi * item


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
    if module == "cupy" and dtype.name != "bfloat16" and not dtype.is_float8:  # CuPy has neither
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
