"""The fast path of a :class:`~tilejit.runtime.launch.Launcher`: one small Python function generated
(``exec``, as ``dataclasses`` does) per signature, specialized to its parameters, from the launcher's public
fields alone. Made after a thread's first launches (:class:`~tilejit.runtime.dispatch.FirstLaunches`), so this
module is not imported on the way to a first launch. The text of each function is its ``.source`` (and is
logged at debug level on the ``tilejit.runtime.dispatch`` logger when first compiled): ``tests/
test_generated_launch.py`` shows it for a tile kernel's and a RawKernel's signature."""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tilejit.runtime.array import DeviceArray
from tilejit.runtime.device import state_of
from tilejit.runtime.dispatch import (
    IMMUTABLE_ARGS,
    PYTHON_NAMES,
    bound_comment,
    function_maker,
    local_names,
    nonlocal_lines,
    stream_lines,
    torch_reads_same,
)
from tilejit.runtime.interop import ArrayView, as_view, pointer_of, torch_dtypes, torch_tensor_type
from tilejit.runtime.launch import CONFIG, LaunchBuffers, grid3
from tilejit.runtime.stream import Stream, stream_handle

if TYPE_CHECKING:
    from tilejit.runtime.launch import Launcher


class _NotPacked:
    """What a parameter's ``_last`` holds while no argument is known to be in the parameter block."""

    def __repr__(self) -> str:
        return "NOT_PACKED"


_NOT_PACKED = _NotPacked()


class _Mismatch(Exception):
    """Raised by generated code when an argument is not what the fast path takes (details: the checked path)."""


def _ex_now(address: int, config: int, handle: int, kernel_params: int, extra: int) -> Callable[[], int]:
    """``cuLaunchKernelEx(config, handle, kernel_params, extra)`` as a no-argument call.

    The four pointers are bound as ready ctypes argument objects to a function pointer without
    ``argtypes``, so each call hands them straight to libffi instead of converting four ints.
    """
    fn = ctypes.CFUNCTYPE(ctypes.c_int)(address)
    fn.argtypes = None  # type: ignore[assignment]
    # c_void_p.from_param(int) gives ctypes' own argument objects, which a call uses as they are
    # (a c_void_p instance would be converted into a fresh one on every call).
    arg = ctypes.c_void_p.from_param
    return functools.partial(fn, arg(config), arg(handle), arg(kernel_params) if kernel_params else None,
                             arg(extra) if extra else None)


#: The names generated code binds or assigns besides the parameters' own (a parameter named so gets another).
_FIXED_NAMES = frozenset({
    "make", "launch", "grid", "args", "stream", "block", "shared_mem", "handle", "gx", "gy", "gz", "status",
    "last_grid", "last_stream_handle", "_",
    "pack_params", "params", "pack_config", "config", "relaunch", "call_driver", "function_handle", "kernel_params",
    "extra", "thread_id", "owner", "current_stream_handle", "Stream", "stream_handle", "grid3", "Mismatch",
    "NOT_PACKED", "IMMUTABLE", "DeviceArray", "ArrayView", "as_view", "pointer_of", "Tensor",
    "torch_dtypes", "other_thread", "explain", "failed", "expected_block", "expected_shared", "expected_device",
    "current_device", "fallback",
}) | PYTHON_NAMES
_SUFFIXES = ("_view", "_ptr", "_dtype", "_last", "_check", "_torch_dtype", "_tensor", "_tensor_ptr", "_tensor_dtype")


def _docstring(launcher: Launcher, raw: bool) -> list[str]:
    """The generated function's docstring, as lines: what it launches, and how."""
    params = ", ".join(f"{name} ({kind})" for name, kind in launcher.params) or "no parameters"
    passing = "kernelParams" if launcher.param_passing == "pointers" else "extra"
    return [
        f'"""Launch kernel {launcher.name!r}: {params}.',
        "",
        f"Block {launcher.block}, {launcher.shared_bytes} bytes of dynamic shared memory; launched through "
        f"{'cuLaunchKernelEx' if launcher.uses_ex else 'cuLaunchKernel'}",
        f"with the parameter block in {passing}.",
        "Made by tilejit.runtime.fastlaunch for one thread (``owner``), whose buffers and current stream it uses;",
        ("calls for another block, shared size or device, or from another thread, go to ``fallback``." if raw
         else "calls from another thread go to ``other_thread``."),
        "Arguments identical to the last call's and immutable are not packed again, a grid and stream equal to",
        "the last call's not configured again. An argument it does not take gets the checked path's error.",
        '"""',
    ]


def _unpacked(names: list[str]) -> str:
    """A tuple target of ``names`` (``(x_shape0,)``, ``()``) for unpacking."""
    return "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"


def _argument_lines(launcher: Launcher, names: list[str]) -> tuple[list[str], list[str]]:
    """(lines reading every argument into the values to pack, those values), parameter by parameter."""
    lines: list[str] = []
    values: list[str] = []
    for name, (_, kind) in zip(names, launcher.params):
        if kind.kind == "scalar":
            exact = {"bool": "bool", "float16": "float", "float32": "float", "float64": "float"}.get(
                str(kind.dtype), "int")
            # struct checks the range of an exact int or float; anything else (numpy scalars, bfloat16's bits)
            # goes through the parameter's own check.
            values.append(f"{name}_check({name})" if kind.dtype == "bfloat16"
                          else f"({name} if {name}.__class__ is {exact} else {name}_check({name}))")
            continue
        dims = [f"{name}_shape{d}" for d in range(kind.ndim)]
        strides = [f"{name}_stride{d}" for d in range(kind.ndim)]
        if kind.kind == "array":
            # The view's fields, by unpacking: a wrong rank fails the unpacking.
            lines += [
                f"if {name}.__class__ is DeviceArray: {name}_view = {name}._view",
                f"elif {name}.__class__ is ArrayView: {name}_view = {name}",
                f"elif {name}.__class__ is Tensor and {name}.is_cuda:",
                f"    {name}_view = ({name}.data_ptr(), {name}.shape, {name}.stride(), torch_dtypes[{name}.dtype], "
                f"{name})",
                f"else: {name}_view = as_view({name})",
                f"{name}_ptr, {_unpacked(dims)}, {_unpacked(strides)}, {name}_dtype, _ = {name}_view",
                f"if {name}_dtype != {kind.dtype!r}: raise Mismatch()",
            ]
            if kind.index32 and kind.ndim:  # the kernel assumed these in [0, 2**31): the checked path says which not
                lines.append(f"if not ({' and '.join(f'{x} < 2147483648' for x in dims + strides)}"
                             f"{''.join(f' and {t} >= 0' for t in strides)}): raise Mismatch()")
        else:
            # A pointer needs only the address and dtype (an int is an address); a strided view is refused.
            lines += [
                f"if {name}.__class__ is DeviceArray and {name}._contiguous:",
                f"    {name}_ptr = {name}.ptr; {name}_dtype = {name}._dtname",
                f"elif {name}.__class__ is int: {name}_ptr = {name}; {name}_dtype = None",
                f"elif {name}.__class__ is Tensor and {name}.is_cuda and {name}.is_contiguous():",
                f"    {name}_ptr = {name}.data_ptr()",
                f"    {name}_torch_dtype = {name}.dtype; {name}_dtype = torch_dtypes[{name}_torch_dtype]",
                f"else: {name}_ptr, {name}_dtype = pointer_of({name})",
            ]
            if kind.dtype is not None:
                lines.append(f"if {name}_dtype != {kind.dtype!r} and {name}_dtype is not None: raise Mismatch()")
        values.append(", ".join([f"{name}_ptr", *dims, *strides]))
    return lines, values


def generate(launcher: Launcher, owner: int, raw: tuple[Any, int, Any, Callable[..., None]] | None = None
             ) -> Callable[..., None]:
    """A launch function of ``launcher``: ``(grid, args, stream=None)``, or with ``raw`` = (block, shared,
    device, fallback) RawKernel's ``(grid, block, args, stream=None, shared_mem=0)``. A ``stream`` may be a raw
    ``CUstream`` handle (an int), for callers that read the handle themselves. ``owner`` is the thread whose calls
    use its buffers, and whose current stream (and device, for ``raw``) it reads: calls from others go to
    ``launcher.launch_any_thread`` (with ``raw``, to its fallback).

    Functions of the same signature share one compiled code object; each has buffers of its own. Its ``now``
    attribute launches exactly what its buffers hold (``cuLaunchKernelEx`` only, else None): the same arguments,
    grid and stream as its last successful call; ``source`` is its text.
    """
    bufs = LaunchBuffers(launcher.size, launcher.offsets, launcher.block, launcher.shared_bytes)
    kernel_params, extra = bufs.kernel_params_and_extra(launcher.param_passing)
    # The owner's own cells: only its calls get past the owner check, so no launch reads another thread's state.
    state = state_of(owner)
    maps = [f"tensor_map{k}" for k in range(len(launcher.derived))]  # encoders of the derived tensor maps
    names = local_names([(n, k.ndim) for n, k in launcher.params], _SUFFIXES, _FIXED_NAMES | set(maps))
    relaunch = (_ex_now(launcher.entry_point, bufs.config_addr, launcher.handle, kernel_params, extra)
                if launcher.uses_ex else None)
    # The generated module's globals (each function has a module of its own): a global costs a call nothing, while
    # each of a closure's cells is copied into every call's frame; the closure holds what the function remembers.
    bound: dict[str, Any] = {
        "pack_params": launcher.struct.pack_into, "pack_config": CONFIG.pack_into, "call_driver": launcher.call_driver,
        "function_handle": launcher.handle, "thread_id": threading.get_ident, "Stream": Stream,
        "stream_handle": stream_handle, "grid3": grid3, "Mismatch": _Mismatch, "NOT_PACKED": _NOT_PACKED,
        "IMMUTABLE": IMMUTABLE_ARGS, "DeviceArray": DeviceArray, "ArrayView": ArrayView, "as_view": as_view,
        "pointer_of": pointer_of, "Tensor": torch_tensor_type(), "torch_dtypes": {},
        "explain": launcher.explain,
        "failed": launcher.failed, "other_thread": launcher.launch_any_thread,
    }
    if bound["Tensor"].__module__ == "torch":
        bound["torch_dtypes"] = torch_dtypes()
    for i, (name, (_, kind)) in enumerate(zip(names, launcher.params)):
        if kind.kind == "scalar":
            bound[f"{name}_check"] = functools.partial(kind.check_scalar, where=launcher.where(i))
    bound.update(params=bufs.params, config=bufs.config, relaunch=relaunch, owner=owner,
                  current_stream_handle=state.handle, kernel_params=kernel_params, extra=extra)
    n = len(names)
    lines = [
        # Only a tuple or list of the arguments, as the checked path takes (a set would unpack in any order).
        "if args.__class__ is not tuple and args.__class__ is not list: raise Mismatch()",
        (", ".join(names) + (", = args" if n == 1 else " = args")) if n else "if args: raise Mismatch()",
    ]
    convert, values = _argument_lines(launcher, names)
    if launcher.derived:
        from tilejit.runtime.tensormap import launch_tensor_map

    for m, (_, kind, source) in zip(maps, launcher.derived):
        # a tensor map is encoded (a dict lookup once made) whenever its source array's fields are packed
        a = names[source]
        dims, strides = ([f"{a}_{what}{d}" for d in range(kind.ndim)] for what in ("shape", "stride"))
        values.append(f"{m}({a}_ptr, {_unpacked(dims)}, {_unpacked(strides)})")
        bound[m] = functools.partial(launch_tensor_map, str(kind.dtype), box=kind.box, swizzle=kind.swizzle,
                                     driver=launcher.driver)
    # A torch tensor for a pointer parameter is remembered apart (``x_tensor``, with the address and torch dtype it
    # had, ``x_tensor_ptr`` and ``x_tensor_dtype``): the same tensor again is taken as packed while it still has
    # them, is contiguous and on the device (four reads of the tensor, none repeated).
    pointers = [a for a, (_, kind) in zip(names, launcher.params) if kind.kind == "pointer"]
    if n:
        # Arguments identical (``is``) to the last call's, and immutable, are in the parameter block already.
        # What is remembered is forgotten before the block is rewritten, so a failed pack leaves no stale match.
        rewrite = [
            f"{names[0]}_last = NOT_PACKED  # the block is rewritten below: nothing matches until it is whole",
            *([f"{' = '.join(f'{a}_tensor' for a in pointers)} = NOT_PACKED"] if pointers else []),
            *convert,
            f"pack_params(params, 0, {', '.join(values)})",
            *(f"{a}_last = {a} if {a}.__class__ in IMMUTABLE else NOT_PACKED" for a in names),
        ]
        # A tensor of exactly torch's class got here through the inline branch (anything else it would be refused),
        # which read its torch dtype into ``x_torch_dtype``.
        for a in pointers:
            rewrite += [f"if {a}.__class__ is Tensor and {a}_ptr:",
                        f"    {a}_tensor, {a}_tensor_ptr, {a}_tensor_dtype = {a}, {a}_ptr, {a}_torch_dtype"]
        if pointers:
            test = ["if not ("]
            for i, a in enumerate(names):
                lead = "        " if i == 0 else "        and "
                same = torch_reads_same(a, f"{a}_tensor_ptr", f"{a}_tensor_dtype")
                test += [f"{lead}({a} is {a}_last",
                         f"            or {a} is {a}_tensor and {same[0]} and {same[1]}",
                         f"                and {same[2]})",
                         ] if a in pointers else [f"{lead}{a} is {a}_last"]
            test[-1] += "):"
        else:
            test = [f"if not ({' and '.join(f'{a} is {a}_last' for a in names)}):"]
        lines += [*test, *("    " + line for line in rewrite)]
    lines += stream_lines("stream", "handle")
    bx, by, bz = launcher.block
    shared = launcher.shared_bytes
    cluster = [f"if gx % {launcher.cluster}: raise Mismatch()  # not whole clusters"] if launcher.cluster > 1 else []
    if launcher.uses_ex:
        lines += [
            # A grid equal to the last one and of its exact type (an int or a tuple): the config holds it already.
            "if ((grid is not last_grid and (grid.__class__ is not last_grid.__class__ or grid != last_grid))",
            "        or handle != last_stream_handle):",
            "    last_grid = None",
            "    gx, gy, gz = grid3(grid)",
            *("    " + line for line in cluster),
            f"    pack_config(config, 0, gx, gy, gz, {bx}, {by}, {bz}, {shared}, handle)",
            "    last_grid = grid if grid.__class__ is int or grid.__class__ is tuple else None",
            "    last_stream_handle = handle",
        ]
        call = "status = relaunch()"
    else:
        lines += ["gx, gy, gz = grid3(grid)", *cluster]
        call = (f"status = call_driver(function_handle, gx, gy, gz, {bx}, {by}, {bz}, {shared}, handle, "
                "kernel_params or None, extra or None)")
    memo = [f"{a}_last" for a in names] + (["last_grid", "last_stream_handle"] if launcher.uses_ex else [])
    memo += [f"{a}_{what}" for a in pointers for what in ("tensor", "tensor_ptr", "tensor_dtype")]
    nonlocal_line = ["    " + line for line in nonlocal_lines(memo)]
    if raw is None:
        head = [
            "def launch(grid, args, stream=None):",
            *("    " + line if line else "" for line in _docstring(launcher, False)),
            *nonlocal_line,
            "    if thread_id() != owner:",
            "        return other_thread(grid, args, stream)",
        ]
    else:
        # Another thread's call, or one for another block, shared size or device, goes to the fallback: the
        # device it compares is the owner's, so the owner check comes with it.
        bound.update(expected_block=raw[0], expected_shared=raw[1], expected_device=raw[2], fallback=raw[3],
                   current_device=state.device)
        head = [
            "def launch(grid, block, args, stream=None, shared_mem=0):",
            *("    " + line if line else "" for line in _docstring(launcher, True)),
            *nonlocal_line,
            "    if ((block is not expected_block",
            "                and (block.__class__ is not expected_block.__class__ or block != expected_block))",
            "            or (shared_mem is not expected_shared",
            "                and (shared_mem.__class__ is not int or shared_mem != expected_shared))",
            "            or current_device[0] is not expected_device or thread_id() != owner):",
            "        return fallback(grid, block, args, stream, shared_mem)",
        ]
    src = "\n".join([
        *bound_comment(list(bound), "tilejit.runtime.fastlaunch"),
        "def make():",
        *([f"    {' = '.join(memo[:n])} = NOT_PACKED"] if n else []),
        *(["    last_grid, last_stream_handle = None, -1"] if launcher.uses_ex else []),
        *([f"    {' = '.join(f'{a}_tensor' for a in pointers)} = NOT_PACKED  # the torch tensor packed last",
           f"    {' = '.join(f'{a}_tensor_ptr' for a in pointers)} = 0  # its address and torch dtype then",
           f"    {' = '.join(f'{a}_tensor_dtype' for a in pointers)} = None"] if pointers else []),
        "",
        *("    " + line for line in head),
        "        try:",
        *("            " + line for line in lines),
        "        except Exception as exc:",
        "            raise explain(grid, args, stream, exc) from None",
        f"        {call}",
        "        if status:",
        "            failed(status, grid, args, stream)",
        "",
        "    return launch",
        "",
    ])
    make = function_maker(src, f"<tilejit launcher {launcher.name}>", launcher.compile_code, bound)
    launch: Callable[..., None] = make()
    launch.buffers = bufs  # type: ignore[attr-defined]  # the driver reads them by address: keep them alive
    launch.owner = owner  # type: ignore[attr-defined]  # the thread whose calls it takes
    launch.now = relaunch  # type: ignore[attr-defined]
    if relaunch is not None:
        # ``now`` holds only the buffers' addresses, and callers keep it apart from ``launch`` (the tile
        # dispatch remembers it after another thread may have dropped this function): it keeps them alive too.
        relaunch.buffers = bufs  # type: ignore[attr-defined]
    return launch


__all__ = ["generate"]
