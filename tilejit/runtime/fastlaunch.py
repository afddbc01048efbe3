"""The fast path of a :class:`~tilejit.runtime.launch.Launcher`: one small Python function generated
(``exec``, as ``dataclasses`` does) per signature, specialized to its parameters. Made after a kernel's
first launches, so this module is not imported on the way to a first launch."""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tilejit.runtime.array import DeviceArray
from tilejit.runtime.device import state_of
from tilejit.runtime.interop import ArrayView, as_view, pointer_of
from tilejit.runtime.launch import _CONFIG, IMMUTABLE_ARGS, _Buffers, _grid3
from tilejit.runtime.stream import Stream, stream_handle

if TYPE_CHECKING:
    from tilejit.runtime.launch import Launcher

_NO_MEMO = object()


class _Mismatch(Exception):
    """Raised by generated code when an array argument's dtype or rank differs (details: slow path)."""


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


@functools.lru_cache(maxsize=256)
def _compiled(src: str, filename: str, compile_code: Callable[[str, str], Any] | None) -> Any:
    """The code of ``src``, made once per process (another function of the same signature costs an
    ``exec``) by ``compile_code`` (e.g. through a disk cache) or by ``compile()``."""
    return compile(src, filename, "exec") if compile_code is None else compile_code(src, filename)


def generate(
    launcher: Launcher, raw: tuple[Any, int, Any, Callable[..., None]] | None = None, owner: int | None = None
) -> Callable[..., None]:
    """The launch function of ``launcher``: ``(grid, args, stream=None)``, or with ``raw`` = (block, shared,
    device, fallback) RawKernel's ``(grid, block, args, stream=None, shared_mem=0)``. A ``stream`` may be a
    raw ``CUstream`` handle (an int), for callers that read the handle themselves. ``owner`` is the thread
    whose calls use its buffers (default: the launcher's creator), and whose current stream (and device,
    for ``raw``) it reads: calls from others go to ``launcher.launch_other_thread`` (with ``raw``, to its
    fallback).

    Functions of the same signature share one compiled code object; each has buffers of its own. Its
    ``now`` attribute launches exactly what its buffers hold (``cuLaunchKernelEx`` only, else None): the
    same arguments, grid and stream as its last successful call on the launcher's thread.
    """
    # Each generated function has buffers of its own: what it remembers (the last arguments, grid
    # and stream) describes exactly what its buffers hold.
    bufs = _Buffers(launcher.size, launcher.offsets, launcher.block, launcher.shared_bytes)
    kparams, extra = bufs.kernel_params_and_extra(launcher.param_passing)
    if owner is None:
        owner = launcher._owner_thread
    # The owner's own cells: only its calls get past the owner check, so no launch reads the thread's state.
    state = state_of(owner)
    env: dict[str, Any] = {
        "pack": launcher._struct.pack_into, "buf": bufs.params, "cfgpack": _CONFIG.pack_into,
        "cfg": bufs.config, "call": launcher._call, "fh": launcher._handle, "cur": state.handle,
        "kparams": kparams, "extra": extra,
        "launch_now": _ex_now(launcher._address, bufs.config_addr, launcher._handle, kparams, extra)
        if launcher._uses_ex else None,
        "Stream": Stream, "stream_handle": stream_handle, "grid3": _grid3, "ident": threading.get_ident,
        "owner": owner, "slow": launcher.launch_other_thread,
        "explain": launcher._explain,
        "failed": launcher._failed, "AV": ArrayView, "DA": DeviceArray, "as_view": as_view, "Mismatch": _Mismatch,
    }
    n = len(launcher.params)
    # Only a tuple or list of the arguments, as the checked path accepts (a set would unpack in any order).
    unpack = ", ".join(f"a{i}" for i in range(n)) + (", = args" if n == 1 else " = args")
    lines: list[str] = [
        "if args.__class__ is not tuple and args.__class__ is not list: raise Mismatch()",
        unpack if n else "if args: raise Mismatch()",
    ]
    values: list[str] = []
    bx, by, bz = launcher.block
    for i, (_, k) in enumerate(launcher.params):
        a = f"a{i}"
        if k.kind == "scalar":
            conv = f"conv{i}"
            env[conv] = launcher._scalar_converter(i)
            exact = {"bool": "bool", "float16": "float", "float32": "float", "float64": "float"}.get(
                str(k.dtype), "int")
            if k.dtype == "bfloat16":
                values.append(f"{conv}({a})")
            else:
                values.append(f"({a} if {a}.__class__ is {exact} else {conv}({a}))")
            continue
        # Arrays and pointers: take the ArrayView (own arrays and views inline, others through
        # the per-type converters), then unpack it; nested unpacking checks the rank for free.
        dims = [f"s{i}_{d}" for d in range(k.ndim)]
        strides = [f"t{i}_{d}" for d in range(k.ndim)]
        if k.kind == "array":
            lines += [
                f"if {a}.__class__ is DA: v{i} = {a}._view",
                f"elif {a}.__class__ is AV: v{i} = {a}",
                f"else: v{i} = as_view({a})",
                f"p{i}, ({''.join(x + ', ' for x in dims)}), ({''.join(x + ', ' for x in strides)}), "
                f"d{i}, _ = v{i}",
                f"if d{i} != {k.dtype!r}: raise Mismatch()",
            ]
            if k.index32 and k.ndim:  # the kernel assumed these in [0, 2**31): the checked path says which is not
                lines.append(f"if not ({' and '.join(f'{x} < 2147483648' for x in dims + strides)}"
                             f"{''.join(f' and {t} >= 0' for t in strides)}): raise Mismatch()")
        else:
            # A pointer needs only the address and dtype: read just those (ints are addresses). A strided
            # view is refused by pointer_of, as by the checked path.
            env[f"conv{i}"] = pointer_of
            lines += [
                f"if {a}.__class__ is DA and {a}._contiguous: p{i} = {a}.ptr; d{i} = {a}._dtname",
                f"elif {a}.__class__ is int: p{i} = {a}; d{i} = None",
                f"else: p{i}, d{i} = conv{i}({a})",
            ]
            if k.dtype is not None:
                lines.append(f"if d{i} != {k.dtype!r} and d{i} is not None: raise Mismatch()")
        values.append(", ".join([f"p{i}", *dims, *strides]))
    if values:
        lines.append(f"pack(buf, 0, {', '.join(values)})")
    if n:
        # Arguments identical (``is``) to the last launch's, and immutable, are already in the
        # parameter block: skip converting and packing them again. The memo is cleared before
        # the block is rewritten, so a failed pack never leaves a stale match.
        convert = lines[2:]
        lines = [
            *lines[:2],
            f"if not ({' and '.join(f'a{i} is m{i}' for i in range(n))}):",
            "    m0 = NO",
            *("    " + line for line in convert),
            *(f"    m{i} = a{i} if a{i}.__class__ in KEEP else NO" for i in range(n)),
        ]
        env["NO"] = _NO_MEMO
        env["KEEP"] = IMMUTABLE_ARGS
    lines += [
        "if stream is None: h = cur[0]",
        "elif stream.__class__ is int and 0 <= stream < 18446744073709551616: h = stream",
        "elif stream.__class__ is Stream and not stream._closed: h = stream.handle",
        "else: h = stream_handle(stream)",
    ]
    if launcher._uses_ex:
        lines += [
            # Equal to the last grid and of its exact type (an int or a tuple): the config holds it already.
            "if (grid is not lg and (grid.__class__ is not lg.__class__ or grid != lg)) or h != lh:",
            "    lg = None",
            "    gx, gy, gz = grid3(grid)",
            *([f"    if gx % {launcher.cluster}: raise Mismatch()"] if launcher.cluster > 1 else []),
            f"    cfgpack(cfg, 0, gx, gy, gz, {bx}, {by}, {bz}, {launcher.shared_bytes}, h)",
            "    lg = grid if grid.__class__ is int or grid.__class__ is tuple else None",
            "    lh = h",
        ]
        call = "status = launch_now()"
    else:
        lines.append("gx, gy, gz = grid3(grid)")
        if launcher.cluster > 1:
            lines.append(f"if gx % {launcher.cluster}: raise Mismatch()")
        call = (f"status = call(fh, gx, gy, gz, {bx}, {by}, {bz}, {launcher.shared_bytes}, h, kparams or None, "
                "extra or None)")
    body = "\n".join("            " + line for line in lines)
    if raw is None:
        head = (
            "    def launch(grid, args, stream=None):\n"
            "        if ident() != owner:\n"
            "            return slow(grid, args, stream)\n"
        )
    else:
        # Another thread's call, or one for another block, shared size or device, goes to the fallback:
        # the device it compares is the owner's, so the owner check comes with it.
        env.update(B=raw[0], S=raw[1], D=raw[2], fallback=raw[3], dev=state.device)
        head = (
            "    def launch(grid, block, args, stream=None, shared_mem=0):\n"
            "        if ((block is not B and (block.__class__ is not B.__class__ or block != B))\n"
            "                or (shared_mem is not S and (shared_mem.__class__ is not int or shared_mem != S))\n"
            "                or dev[0] is not D or ident() != owner):\n"
            "            return fallback(grid, block, args, stream, shared_mem)\n"
        )
    memo = [f"m{i}" for i in range(n)] + (["lg", "lh"] if launcher._uses_ex else [])
    memo_init = "".join(f"    m{i} = NO\n" for i in range(n)) + ("    lg, lh = None, -1\n" if launcher._uses_ex else "")
    nonlocal_line = f"        nonlocal {', '.join(memo)}\n" if memo else ""
    src = (
        f"def make({', '.join(env)}):\n"
        f"{memo_init}"
        f"{head}"
        f"{nonlocal_line}"
        "        try:\n"
        f"{body}\n"
        "        except Exception as exc:\n"
        "            raise explain(grid, args, stream, exc) from None\n"
        f"        {call}\n"
        "        if status:\n"
        "            failed(status, grid, args, stream)\n"
        "    return launch\n"
    )
    if raw is None:
        launcher.source = src
    namespace: dict[str, Any] = {}
    exec(_compiled(src, f"<tilejit launcher {launcher.name}>", launcher.compile_code), namespace)
    launch: Callable[..., None] = namespace["make"](**env)
    launch.buffers = bufs  # type: ignore[attr-defined]  # the driver reads them by address: keep them alive
    launch.owner = owner  # type: ignore[attr-defined]  # the thread whose calls it takes
    launch.now = now = env["launch_now"]  # type: ignore[attr-defined]
    if now is not None:
        # ``now`` holds only the buffers' addresses, and callers keep it apart from ``launch`` (the tile
        # dispatch remembers it after another thread may have dropped this function): it keeps them alive too.
        now.buffers = bufs
    return launch


__all__ = ["generate"]
