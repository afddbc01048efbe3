"""The launch policy that every launch follows (tile kernels, ``RawKernel``, ``Launcher``), in one place.

* **Arguments.** :func:`classify` reads one tile-kernel argument: a device array of any kind (DeviceArray,
  ArrayView, torch, CuPy, JAX, ``__cuda_array_interface__``, DLPack) becomes an ``ArrayView``; a Python int is
  int32 or int64 by :func:`int_dtype` (the one rule, also as text: :func:`int_dtype_text`); floats, bools and
  numpy scalars go as they are. :func:`stream_lines` is the stream rule (``stream_handle``'s) inline in generated
  code.
  :data:`IMMUTABLE_ARGS` are the argument types a launch may remember by identity; a torch tensor (one that
  :func:`tilejit.runtime.interop.torch_view` reads) is remembered with its address, dtype, shape and strides, which
  must read the same at the next launch (:func:`torch_reads_same`, the one test of it).
* **Checked, then generated.** :class:`FirstLaunches`: each thread's first :data:`CHECKED_LAUNCHES` launches of
  a kernel take the checked path (generating a launch function costs about a millisecond, a ``compile()``); then
  the thread gets a generated function of its own (its own buffers, its own current device and stream).
* **Generated code.** :func:`function_maker` compiles generated source once per text and logs it at debug level
  on this module's logger (``logging.getLogger("tilejit.runtime.dispatch")``); every generated launch function
  carries its text as ``.source``.

After a failed launch the generated functions forget what they remembered (the arguments packed, the grid and
stream configured), so the next launch packs everything again: a launch that failed part-way may have left its
buffers half-written.
"""

from __future__ import annotations

import functools
import keyword
import logging
from collections.abc import Callable, Collection, Sequence
from typing import Any

from tilejit.errors import LaunchError
from tilejit.runtime.array import DeviceArray
from tilejit.runtime.interop import ArrayView, as_view

log = logging.getLogger(__name__)

#: Launches of a kernel that take the checked path, per thread, before that thread gets a generated function:
#: generating costs about a millisecond (a compile()); the checked path costs some microseconds a launch more.
CHECKED_LAUNCHES = 16
#: Threads that get generated launch functions of a launcher; launches from more threads stay checked.
MAX_THREAD_LAUNCHERS = 64
#: Argument types whose conversion depends on identity alone (immutable; DeviceArray by contract).
IMMUTABLE_ARGS = frozenset({DeviceArray, ArrayView, int, float, bool})

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def int_dtype(value: int) -> str:
    """The dtype a Python int argument of a tile kernel is passed as: int32, unless it needs 64 bits."""
    return "int32" if INT32_MIN <= value <= INT32_MAX else "int64"


def int_dtype_text(name: str) -> str:
    """:func:`int_dtype` of the variable ``name``, as an expression for generated code."""
    return f"('int32' if {INT32_MIN} <= {name} <= {INT32_MAX} else 'int64')"


def array_key(view: ArrayView) -> tuple[str, tuple[int, ...], int]:
    """The fast-key entry of an array argument: (dtype, strides, address mod 16); ``signature.array_key`` reads the
    specialization's layout facts from exactly these."""
    return view[3], view[2], view[0] & 15


def classify(name: str, value: Any, annotated: bool = False) -> tuple[Any, Any]:
    """(what the launcher receives, the fast-key entry) of the tile-kernel argument ``value`` of parameter ``name``:
    a device array of any kind gives its ``ArrayView`` and :func:`array_key`; a Python int itself and its
    :func:`int_dtype`, a float or bool itself and its type (both None when ``annotated``: the annotation fixes
    the type); a numpy scalar or 0-d array itself and ``("scalar", dtype)``; a tuple or list of device arrays (an
    array list) the view of its table (``runtime.array_table``) and ``("arrays", dtype, rank)``. Anything else: a
    ``LaunchError`` naming the parameter."""
    cls = value.__class__
    if cls is int:
        return value, None if annotated else int_dtype(value)
    if cls is float or cls is bool:
        return value, None if annotated else cls
    if cls is DeviceArray:
        view = value._view
    elif cls is tuple or cls is list:
        from tilejit.runtime.array_table import table_view

        view = table_view(name, value)
        table = view.owner
        return view, ("arrays", table.dtype, table.ndim)  # type: ignore[attr-defined]
    else:
        try:
            view = as_view(value)
        except (TypeError, ValueError) as exc:
            if getattr(value, "shape", None) == () and getattr(value, "dtype", None) is not None:
                return value, ("scalar", str(value.dtype))
            raise LaunchError(f"parameter '{name}': {exc}") from None
    return view, array_key(view)


def stream_lines(stream: str, handle: str) -> list[str]:
    """Generated statements setting ``handle`` to the raw ``CUstream`` handle a launch on ``stream`` uses, the rule
    of ``stream_handle`` with its common cases inline: None is the launching thread's current stream (the cell
    ``current_stream_handle``), an int in [0, 2**64) a raw handle, an open ``Stream`` its handle; anything else
    goes to ``stream_handle`` (which raises for what is not a stream). The generated function binds
    ``current_stream_handle``, ``Stream`` and ``stream_handle``."""
    return [
        f"if {stream} is None: {handle} = current_stream_handle[0]",
        f"elif {stream}.__class__ is int and 0 <= {stream} < {1 << 64}: {handle} = {stream}",
        f"elif {stream}.__class__ is Stream and not {stream}._closed: {handle} = {stream}.handle",
        f"else: {handle} = stream_handle({stream})",
    ]


def torch_reads_same(a: str, ptr: str, dtype: str, shape: str | None = None, strides: str | None = None,
                     methods: tuple[str, str] | None = None) -> list[str]:
    """Generated test, as terms to join with ``and``, that torch tensor ``a`` reads as a launch remembered it (torch
    tensors change in place: ``set_``, ``resize_``, ``transpose_``, ``.data =``): its address ``ptr``, its dtype
    (one object per dtype) and, for a tile-kernel array, its ``shape`` and ``strides``, where None stands for
    strides it had contiguous (:func:`remembered_strides_text`; ``is_contiguous()`` reads in about 100 ns,
    ``stride()`` 160, on an H100 host); a pointer argument (no ``shape``) must be contiguous. ``methods`` names
    the ``data_ptr`` and ``is_contiguous`` of ``a``'s class as remembered (:func:`tensor_methods`), called
    unbound: 14 ns less each than looking them up on the tensor. The test does not read ``is_cuda``: a launch
    remembers no tensor of address 0, and a tensor moved to the host in place has a host address, which CUDA's
    unified address space never shares with the device memory the remembered address was in while the launch
    used it."""
    data_ptr, is_contiguous = (f"{m}({a})" for m in methods) if methods else (f"{a}.data_ptr()", f"{a}.is_contiguous()")
    terms = [f"{data_ptr} == {ptr}", f"{a}.dtype is {dtype}"]
    if shape is None:
        return [*terms, is_contiguous]
    same_strides = f"({strides} is None and {is_contiguous} or {a}.stride() == {strides})"
    return [*terms, f"{a}.shape == {shape}", same_strides]


def tensor_methods(tensor: Any) -> tuple[Callable[[Any], int], Callable[[Any], bool]]:
    """The ``data_ptr`` and ``is_contiguous`` of torch tensor ``tensor``'s class (a subclass's own where it has
    them), for :func:`torch_reads_same` to call unbound on the same tensor later."""
    cls = tensor.__class__
    return cls.data_ptr, cls.is_contiguous


def remembered_strides_text(a: str, strides: str) -> str:
    """Generated expression of what a launch remembers of torch tensor ``a``'s ``strides`` for
    :func:`torch_reads_same`: None when it is contiguous (its strides may then differ only on length-1 axes,
    which address nothing but their one element), else the strides (``strides``, read already); the same outside
    generated code: :func:`remembered_strides`."""
    return f"None if {a}.is_contiguous() else {strides}"


def remembered_strides(tensor: Any) -> tuple[int, ...] | None:
    """:func:`remembered_strides_text` of torch tensor ``tensor``'s own strides, as a function."""
    return None if tensor.is_contiguous() else tensor.stride()


class FirstLaunches:
    """The checked-then-generated policy of one launcher, per thread: a thread's first :data:`CHECKED_LAUNCHES`
    launches take the checked path (:meth:`function` says None); then ``make(thread)`` makes the thread's
    generated function, kept for its later launches, for up to :data:`MAX_THREAD_LAUNCHERS` threads (launches
    from more stay checked). A thread id reused after its thread ended reuses that function, which no live thread
    shares. A kernel launched only a few times never pays for generating one."""

    __slots__ = ("_checked", "_functions", "_make")

    def __init__(self, make: Callable[[int], Callable[..., None]]) -> None:
        self._make = make
        self._checked: dict[int, int] = {}  # thread -> checked launches so far
        self._functions: dict[int, Callable[..., None]] = {}  # thread -> its generated function

    def function(self, thread: int) -> Callable[..., None] | None:
        """The generated function for a launch from ``thread``, or None: take the checked path (counted)."""
        made = self._functions.get(thread)
        if made is not None:
            return made
        done = self._checked.get(thread, 0)
        if done < CHECKED_LAUNCHES:
            if len(self._checked) >= 4 * MAX_THREAD_LAUNCHERS:  # threads that came and went: start counting again
                self._checked.clear()
            self._checked[thread] = done + 1
            return None
        if len(self._functions) >= MAX_THREAD_LAUNCHERS:
            return None
        made = self._functions[thread] = self._make(thread)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("thread %d: the generated launch function after %d checked launches", thread, CHECKED_LAUNCHES)
        return made

    def ready(self, thread: int) -> bool:
        """Whether ``thread`` is past its checked launches, so a caller may make a generated function for it."""
        return thread in self._functions or self._checked.get(thread, 0) >= CHECKED_LAUNCHES

    def threads(self) -> frozenset[int]:
        """The threads that have generated functions."""
        return frozenset(self._functions)


# ---------------------------------------------------------------------------------------------- generated code

#: Names generated code uses besides its own bindings: a parameter of that name is given another.
PYTHON_NAMES = frozenset({"tuple", "list", "int", "float", "bool", "Exception", "None", "True", "False", "exc"})


def local_names(params: Sequence[tuple[str, int]], suffixes: Sequence[str], taken: Collection[str]) -> list[str]:
    """A name in generated code for each parameter (name, rank): its own where it is a Python identifier and not a
    keyword, and no name made from it (itself plus each of ``suffixes``, ``_shape{d}`` and ``_stride{d}``)
    is ``taken`` or made from an earlier parameter; ``arg{i}`` (then ``arg{i}_{n}``) otherwise."""
    used = set(taken)
    out: list[str] = []
    for i, (name, ndim) in enumerate(params):
        base = name if name.isidentifier() and not keyword.iskeyword(name) else f"arg{i}"
        tries = 0
        while True:
            made = {base + s for s in ("", *suffixes)}
            made |= {f"{base}_shape{d}" for d in range(ndim)} | {f"{base}_stride{d}" for d in range(ndim)}
            if not made & used:
                break
            tries += 1
            base = f"arg{i}" if tries == 1 else f"arg{i}_{tries}"
        used |= made
        out.append(base)
    return out


def _wrapped(names: Sequence[str], width: int = 100) -> list[list[str]]:
    """``names`` in runs that fit on a line of ``width`` characters."""
    runs: list[list[str]] = [[]]
    length = 0
    for name in names:
        if runs[-1] and length + len(name) > width:
            runs.append([])
            length = 0
        runs[-1].append(name)
        length += len(name) + 2
    return runs


def make_header(params: Sequence[str]) -> list[str]:
    """The lines of ``def make(<params>):``, the one function a generated source defines, wrapped to read."""
    runs = _wrapped(params)
    lines = [("def make(" if i == 0 else "        ") + ", ".join(run) + ("):" if i == len(runs) - 1 else ",")
             for i, run in enumerate(runs)]
    return lines


def bound_comment(names: Sequence[str], by: str) -> list[str]:
    """Comment lines naming the globals a generated source reads (bound by ``by``), wrapped to read."""
    runs = _wrapped(names, 100)
    return [f"# The globals, bound by {by}:", *(f"#     {', '.join(run)}{',' if i < len(runs) - 1 else ''}"
                                                for i, run in enumerate(runs))]


def nonlocal_lines(names: Sequence[str]) -> list[str]:
    """``nonlocal`` statements for ``names``, wrapped to read (one statement per line)."""
    return [f"nonlocal {', '.join(run)}" for run in _wrapped(names) if run]


@functools.lru_cache(maxsize=256)
def compiled_code(src: str, filename: str, compile_code: Callable[[str, str], Any] | None = None) -> Any:
    """The code of generated ``src``, made once per process (another function of the same text costs an
    ``exec``) by ``compile_code`` (e.g. through the disk cache) or ``compile()``; logged at debug level."""
    if log.isEnabledFor(logging.DEBUG):
        log.debug("generated %s:\n%s", filename, src)
    return compile(src, filename, "exec") if compile_code is None else compile_code(src, filename)


def function_maker(src: str, filename: str, compile_code: Callable[[str, str], Any] | None = None,
                   bound: dict[str, Any] | None = None) -> Callable[..., Any]:
    """``make(**env)``, the one function generated ``src`` defines (which returns a launch function), wrapped so
    that what it returns carries ``src`` as ``.source``; ``bound`` are the names ``src`` reads as globals (a global
    costs a call nothing, while each cell of a closure is copied into every call's frame). Lines of ``src`` lose
    their trailing spaces first."""
    src = "\n".join(line.rstrip() for line in src.split("\n"))
    namespace: dict[str, Any] = dict(bound or {})
    exec(compiled_code(src, filename, compile_code), namespace)
    make = namespace["make"]

    def made(**env: Any) -> Any:
        function = make(**env)
        function.source = src
        return function

    return made


__all__ = ["CHECKED_LAUNCHES", "IMMUTABLE_ARGS", "INT32_MAX", "INT32_MIN", "MAX_THREAD_LAUNCHERS", "FirstLaunches",
           "array_key", "classify", "compiled_code", "function_maker", "int_dtype", "int_dtype_text", "local_names",
           "bound_comment", "make_header", "nonlocal_lines", "stream_lines"]
