"""The launch code tilejit generates, as a reader sees it, and what it does with torch tensors.

Golden texts: a tile kernel's dispatch function (``kernel[grid]``) and its launcher's function, and a RawKernel's
entry, exactly as generated (each is the function's ``.source``, and is logged at debug level on the
``tilejit.runtime.dispatch`` logger when first compiled). Then the lines a torch tensor takes through them, and
launches with torch tensors (the stand-in of ``fake_torch``: torch's public tensor API) on the stand-in driver of
``test_threads``: each launch is checked for the parameter block the kernel would receive."""

from __future__ import annotations

import logging
import struct
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import fake_torch
import numpy as np
import pytest
from test_threads import PyDriver, StandInDevice

import tilejit as tj
from tilejit.api.loader import loaded
from tilejit.errors import LaunchError
from tilejit.runtime import device as device_state
from tilejit.runtime import dispatch
from tilejit.runtime.interop import ArrayView
from tilejit.runtime.launch import CHECKED_LAUNCHES, Launcher, ParamKind

SCALE_PARAMS = [("x", ParamKind.array("float32", 1)), ("n", ParamKind.scalar("int32"))]


@tj.kernel
def scale(x, n):
    tj.store(x, index=(0,), tile=tj.load(x, index=(0,), shape=(16,)) * n)


VADD = 'extern "C" __global__ void vadd(const float* x, float* out, int n) {}'

TILE_DISPATCH = '''\
# The globals, bound by tilejit.api.kernel for this kernel:
#     _tj_fast, _tj_specialize, _tj_slow, _tj_classify, _tj_own_of, _tj_for_thread, _tj_DeviceArray,
#     _tj_ArrayView, _tj_VIEW, _tj_MISSING, _tj_NOKEEP, _tj_KEEP, _tj_KEEP_CONST, _tj_get_device,
#     _tj_thread_id, _tj_stream_handle, _tj_NAME, _tj_facts, _tj_torch_view, _tj_torch_dtype_of,
#     _tj_tensor_methods
def make(_tj_owner, _tj_current_device, _tj_current_stream_handle, _tj_grid, _tj_stream):
    _tj_last_x = _tj_last_n = _tj_NOKEEP
    _tj_ptr_x = _tj_ptr_n = None
    _tj_dtype_x = _tj_dtype_n = None
    _tj_shape_x = _tj_shape_n = None
    _tj_stride_x = _tj_stride_n = None
    _tj_getptr_x = _tj_getptr_n = None
    _tj_iscontig_x = _tj_iscontig_n = None
    _tj_no_state = True
    _tj_memo_device = _tj_NOKEEP
    _tj_memo_compiled = _tj_memo_views = _tj_memo_relaunch = None
    _tj_memo_handle = 0
    _tj_owns = {}  # specialization -> its launcher private to this function, and that one's now()
    _tj_threads = {}  # other threads' functions of this kernel[grid]

    def launch(x=_tj_MISSING, n=_tj_MISSING, *_tj_more, num_warps=None, num_stages=None):
        """Launch tile kernel 'scale' (x, n) on this function's grid and stream, for one thread.

        Made by tilejit.api.kernel (``_dispatch_source``). The last call's arguments again (the same objects,
        immutable or reading the same) on the same device and stream relaunch what its private launcher holds;
        other calls classify each argument, find the specialization by the fast key and launch through it.
        """
        nonlocal _tj_last_x, _tj_last_n, _tj_ptr_x, _tj_ptr_n, _tj_dtype_x, _tj_dtype_n, _tj_shape_x, _tj_shape_n
        nonlocal _tj_stride_x, _tj_stride_n, _tj_getptr_x, _tj_getptr_n, _tj_iscontig_x, _tj_iscontig_n, _tj_no_state
        nonlocal _tj_memo_device, _tj_memo_compiled, _tj_memo_views, _tj_memo_relaunch, _tj_memo_handle
        _tj_thread = _tj_thread_id()
        if _tj_thread != _tj_owner:  # another thread: its own function, with its own cells and memo
            _tj_f = _tj_threads.get(_tj_thread)
            if _tj_f is None: _tj_f = _tj_for_thread(_tj_threads, _tj_thread, _tj_grid, _tj_stream)
            return _tj_f(x, n, *_tj_more, num_warps=num_warps, num_stages=num_stages)
        if (x is _tj_last_x and n is _tj_last_n and _tj_current_device[0] is _tj_memo_device and not _tj_more
                and num_warps is None and num_stages is None
                and (_tj_no_state
                     or (_tj_ptr_x is None or _tj_getptr_x(x) == _tj_ptr_x and x.dtype is _tj_dtype_x
                             and x.shape == _tj_shape_x
                             and (_tj_stride_x is None and _tj_iscontig_x(x) or x.stride() == _tj_stride_x))
                     and (_tj_ptr_n is None or _tj_getptr_n(n) == _tj_ptr_n and n.dtype is _tj_dtype_n
                             and n.shape == _tj_shape_n
                             and (_tj_stride_n is None and _tj_iscontig_n(n) or n.stride() == _tj_stride_n)))):
            # the last call again: relaunch what its private launcher's buffers hold, when on the same stream
            if _tj_memo_relaunch is not None:
                if _tj_stream is None: _tj_h = _tj_current_stream_handle[0]
                else:
                    try: _tj_h = _tj_stream_handle(_tj_stream)
                    except (TypeError, ValueError): _tj_h = None  # not a stream (now): the launch below says why
                if _tj_h == _tj_memo_handle:
                    _tj_status = _tj_memo_relaunch()
                    if _tj_status:
                        _tj_memo_device = _tj_NOKEEP  # forget the failed launch
                        _tj_memo_compiled.base.failed(_tj_status, _tj_grid, _tj_memo_views, _tj_memo_handle)
                    return
            _tj_c = _tj_memo_compiled; _tj_views = _tj_memo_views; _tj_dev = _tj_memo_device
            _tj_foreign = not _tj_no_state
        else:
            _tj_memo_device = _tj_NOKEEP  # the private launcher's buffers may be rewritten below
            if _tj_more or x is _tj_MISSING or n is _tj_MISSING or num_warps is not None or num_stages is not None:
                return _tj_slow(_tj_grid, _tj_stream, _tj_more, (x, n, ), num_warps=num_warps, num_stages=num_stages)
            _tj_dev = _tj_current_device[0]
            if _tj_dev is None: _tj_dev = _tj_get_device()  # the thread's first device: chosen now
            _tj_foreign = False  # whether an argument is another library's array
            _tj_cl = x.__class__
            if _tj_cl is _tj_DeviceArray:
                _tj_view_x = x._view; _tj_key_x = (_tj_view_x[3], _tj_view_x[2], _tj_view_x[0] & 15)
            elif _tj_cl is _tj_ArrayView:
                _tj_view_x = x; _tj_key_x = (x[3], x[2], x[0] & 15)
            elif _tj_cl is int:
                _tj_view_x = x; _tj_key_x = ('int32' if -2147483648 <= x <= 2147483647 else 'int64')
            elif _tj_cl is float or _tj_cl is bool:
                _tj_view_x = x; _tj_key_x = _tj_cl
            else:
                _tj_foreign = True
                try:
                    _tj_view_x = _tj_VIEW[_tj_cl](x); _tj_key_x = (_tj_view_x[3], _tj_view_x[2], _tj_view_x[0] & 15)
                except Exception:  # a type seen for the first time, a numpy scalar, or an error
                    _tj_view_x, _tj_key_x = _tj_classify('x', x, False)
            _tj_cl = n.__class__
            if _tj_cl is _tj_DeviceArray:
                _tj_view_n = n._view; _tj_key_n = (_tj_view_n[3], _tj_view_n[2], _tj_view_n[0] & 15)
            elif _tj_cl is _tj_ArrayView:
                _tj_view_n = n; _tj_key_n = (n[3], n[2], n[0] & 15)
            elif _tj_cl is int:
                _tj_view_n = n; _tj_key_n = ('int32' if -2147483648 <= n <= 2147483647 else 'int64')
            elif _tj_cl is float or _tj_cl is bool:
                _tj_view_n = n; _tj_key_n = _tj_cl
            else:
                _tj_foreign = True
                try:
                    _tj_view_n = _tj_VIEW[_tj_cl](n); _tj_key_n = (_tj_view_n[3], _tj_view_n[2], _tj_view_n[0] & 15)
                except Exception:  # a type seen for the first time, a numpy scalar, or an error
                    _tj_view_n, _tj_key_n = _tj_classify('n', n, False)
            _tj_key = (_tj_dev, (), _tj_key_x, _tj_key_n, )
            try:
                _tj_c = _tj_fast[_tj_key]
            except KeyError:
                _tj_c = _tj_specialize(_tj_key, [x, n], list((_tj_view_x, _tj_view_n, )), ())
            except TypeError:  # an unhashable constant: the checked path says which
                return _tj_slow(_tj_grid, _tj_stream, _tj_more, (x, n, ))
            _tj_views = (_tj_view_x, _tj_view_n, )
        _tj_o = _tj_owns.get(_tj_c)
        if _tj_o is None: _tj_o = _tj_own_of(_tj_c, _tj_owns, _tj_owner)
        if _tj_o is None:  # the specialization's shared launcher (checked first, then generated)
            _tj_c.launcher(_tj_grid, _tj_views, _tj_stream)
            _tj_relaunch = None; _tj_h = 0  # nothing of it to relaunch
        else:
            if _tj_stream is None: _tj_h = _tj_current_stream_handle[0]
            else:
                try: _tj_h = _tj_stream_handle(_tj_stream)
                except (TypeError, ValueError): return _tj_c.launcher(_tj_grid, _tj_views, _tj_stream)  # it explains
            try: _tj_o[0](_tj_grid, _tj_views, _tj_h)
            except BaseException:
                _tj_memo_device = _tj_NOKEEP
                raise
            _tj_relaunch = _tj_o[1]
        if _tj_foreign:  # remember torch tensors too, with what they read now
            if _tj_VIEW.get(x.__class__) is _tj_torch_view and _tj_views[0][0]:
                _tj_ptr_x, _tj_shape_x = _tj_views[0][:2]
                _tj_stride_x = None if x.is_contiguous() else _tj_views[0][2]
                _tj_dtype_x = _tj_torch_dtype_of[_tj_views[0][3]]  # its dtype, not read again
                _tj_getptr_x, _tj_iscontig_x = _tj_tensor_methods(x)
            else: _tj_ptr_x = None  # not a torch tensor, or one of address 0: not remembered
            if _tj_VIEW.get(n.__class__) is _tj_torch_view and _tj_views[1][0]:
                _tj_ptr_n, _tj_shape_n = _tj_views[1][:2]
                _tj_stride_n = None if n.is_contiguous() else _tj_views[1][2]
                _tj_dtype_n = _tj_torch_dtype_of[_tj_views[1][3]]  # its dtype, not read again
                _tj_getptr_n, _tj_iscontig_n = _tj_tensor_methods(n)
            else: _tj_ptr_n = None  # not a torch tensor, or one of address 0: not remembered
            _tj_no_state = _tj_ptr_x is None and _tj_ptr_n is None
            _tj_last_x = x if x.__class__ in _tj_KEEP or _tj_ptr_x is not None else _tj_NOKEEP
            _tj_last_n = n if n.__class__ in _tj_KEEP or _tj_ptr_n is not None else _tj_NOKEEP
        else:
            _tj_no_state = True
            _tj_last_x = x if x.__class__ in _tj_KEEP else _tj_NOKEEP
            _tj_last_n = n if n.__class__ in _tj_KEEP else _tj_NOKEEP
        _tj_memo_compiled, _tj_memo_views = _tj_c, _tj_views
        _tj_memo_relaunch, _tj_memo_handle = _tj_relaunch, _tj_h
        _tj_memo_device = _tj_dev

    launch.__name__ = launch.__qualname__ = _tj_NAME
    return launch
'''

TILE_LAUNCHER = '''\
# The globals, bound by tilejit.runtime.fastlaunch:
#     pack_params, pack_config, call_driver, function_handle, thread_id, Stream, stream_handle, grid3,
#     Mismatch, NOT_PACKED, IMMUTABLE, DeviceArray, ArrayView, as_view, pointer_of, Tensor, torch_dtypes,
#     explain, failed, other_thread, n_check, params, config, relaunch, owner, current_stream_handle,
#     kernel_params, extra
def make():
    x_last = n_last = NOT_PACKED
    last_grid, last_stream_handle = None, -1

    def launch(grid, args, stream=None):
        """Launch kernel 'scale': x (array<float32, 1>), n (int32).

        Block (128, 1, 1), 0 bytes of dynamic shared memory; launched through cuLaunchKernelEx
        with the parameter block in extra.
        Made by tilejit.runtime.fastlaunch for one thread (``owner``), whose buffers and current stream it uses;
        calls from another thread go to ``other_thread``.
        Arguments identical to the last call's and immutable are not packed again, a grid and stream equal to
        the last call's not configured again. An argument it does not take gets the checked path's error.
        """
        nonlocal x_last, n_last, last_grid, last_stream_handle
        if thread_id() != owner:
            return other_thread(grid, args, stream)
        try:
            if args.__class__ is not tuple and args.__class__ is not list: raise Mismatch()
            x, n = args
            if not (x is x_last and n is n_last):
                x_last = NOT_PACKED  # the block is rewritten below: nothing matches until it is whole
                if x.__class__ is DeviceArray: x_view = x._view
                elif x.__class__ is ArrayView: x_view = x
                elif x.__class__ is Tensor and x.is_cuda:
                    x_view = (x.data_ptr(), x.shape, x.stride(), torch_dtypes[x.dtype], x)
                else: x_view = as_view(x)
                x_ptr, (x_shape0,), (x_stride0,), x_dtype, _ = x_view
                if x_dtype != 'float32': raise Mismatch()
                pack_params(params, 0, x_ptr, x_shape0, x_stride0, (n if n.__class__ is int else n_check(n)))
                x_last = x if x.__class__ in IMMUTABLE else NOT_PACKED
                n_last = n if n.__class__ in IMMUTABLE else NOT_PACKED
            if stream is None: handle = current_stream_handle[0]
            elif stream.__class__ is int and 0 <= stream < 18446744073709551616: handle = stream
            elif stream.__class__ is Stream and not stream._closed: handle = stream.handle
            else: handle = stream_handle(stream)
            if ((grid is not last_grid and (grid.__class__ is not last_grid.__class__ or grid != last_grid))
                    or handle != last_stream_handle):
                last_grid = None
                gx, gy, gz = grid3(grid)
                pack_config(config, 0, gx, gy, gz, 128, 1, 1, 0, handle)
                last_grid = grid if grid.__class__ is int or grid.__class__ is tuple else None
                last_stream_handle = handle
        except Exception as exc:
            raise explain(grid, args, stream, exc) from None
        status = relaunch()
        if status:
            failed(status, grid, args, stream)

    return launch
'''

RAW_ENTRY = '''\
# The globals, bound by tilejit.runtime.fastlaunch:
#     pack_params, pack_config, call_driver, function_handle, thread_id, Stream, stream_handle, grid3,
#     Mismatch, NOT_PACKED, IMMUTABLE, DeviceArray, ArrayView, as_view, pointer_of, Tensor, torch_dtypes,
#     explain, failed, other_thread, n_check, params, config, relaunch, owner, current_stream_handle,
#     kernel_params, extra, expected_block, expected_shared, expected_device, fallback, current_device
def make():
    x_last = out_last = n_last = NOT_PACKED
    last_grid, last_stream_handle = None, -1
    x_tensor = out_tensor = NOT_PACKED  # the torch tensor packed last
    x_tensor_ptr = out_tensor_ptr = 0  # its address and torch dtype then
    x_tensor_dtype = out_tensor_dtype = None

    def launch(grid, block, args, stream=None, shared_mem=0):
        """Launch kernel 'vadd': x (float32*), out (float32*), n (int32).

        Block (256, 1, 1), 0 bytes of dynamic shared memory; launched through cuLaunchKernelEx
        with the parameter block in extra.
        Made by tilejit.runtime.fastlaunch for one thread (``owner``), whose buffers and current stream it uses;
        calls for another block, shared size or device, or from another thread, go to ``fallback``.
        Arguments identical to the last call's and immutable are not packed again, a grid and stream equal to
        the last call's not configured again. An argument it does not take gets the checked path's error.
        """
        nonlocal x_last, out_last, n_last, last_grid, last_stream_handle, x_tensor, x_tensor_ptr, x_tensor_dtype
        nonlocal out_tensor, out_tensor_ptr, out_tensor_dtype
        if ((block is not expected_block
                    and (block.__class__ is not expected_block.__class__ or block != expected_block))
                or (shared_mem is not expected_shared
                    and (shared_mem.__class__ is not int or shared_mem != expected_shared))
                or current_device[0] is not expected_device or thread_id() != owner):
            return fallback(grid, block, args, stream, shared_mem)
        try:
            if args.__class__ is not tuple and args.__class__ is not list: raise Mismatch()
            x, out, n = args
            if not (
                    (x is x_last
                        or x is x_tensor and x.data_ptr() == x_tensor_ptr and x.dtype is x_tensor_dtype
                            and x.is_contiguous())
                    and (out is out_last
                        or out is out_tensor and out.data_ptr() == out_tensor_ptr and out.dtype is out_tensor_dtype
                            and out.is_contiguous())
                    and n is n_last):
                x_last = NOT_PACKED  # the block is rewritten below: nothing matches until it is whole
                x_tensor = out_tensor = NOT_PACKED
                if x.__class__ is DeviceArray and x._contiguous:
                    x_ptr = x.ptr; x_dtype = x._dtname
                elif x.__class__ is int: x_ptr = x; x_dtype = None
                elif x.__class__ is Tensor and x.is_cuda and x.is_contiguous():
                    x_ptr = x.data_ptr()
                    x_torch_dtype = x.dtype; x_dtype = torch_dtypes[x_torch_dtype]
                else: x_ptr, x_dtype = pointer_of(x)
                if x_dtype != 'float32' and x_dtype is not None: raise Mismatch()
                if out.__class__ is DeviceArray and out._contiguous:
                    out_ptr = out.ptr; out_dtype = out._dtname
                elif out.__class__ is int: out_ptr = out; out_dtype = None
                elif out.__class__ is Tensor and out.is_cuda and out.is_contiguous():
                    out_ptr = out.data_ptr()
                    out_torch_dtype = out.dtype; out_dtype = torch_dtypes[out_torch_dtype]
                else: out_ptr, out_dtype = pointer_of(out)
                if out_dtype != 'float32' and out_dtype is not None: raise Mismatch()
                pack_params(params, 0, x_ptr, out_ptr, (n if n.__class__ is int else n_check(n)))
                x_last = x if x.__class__ in IMMUTABLE else NOT_PACKED
                out_last = out if out.__class__ in IMMUTABLE else NOT_PACKED
                n_last = n if n.__class__ in IMMUTABLE else NOT_PACKED
                if x.__class__ is Tensor and x_ptr:
                    x_tensor, x_tensor_ptr, x_tensor_dtype = x, x_ptr, x_torch_dtype
                if out.__class__ is Tensor and out_ptr:
                    out_tensor, out_tensor_ptr, out_tensor_dtype = out, out_ptr, out_torch_dtype
            if stream is None: handle = current_stream_handle[0]
            elif stream.__class__ is int and 0 <= stream < 18446744073709551616: handle = stream
            elif stream.__class__ is Stream and not stream._closed: handle = stream.handle
            else: handle = stream_handle(stream)
            if ((grid is not last_grid and (grid.__class__ is not last_grid.__class__ or grid != last_grid))
                    or handle != last_stream_handle):
                last_grid = None
                gx, gy, gz = grid3(grid)
                pack_config(config, 0, gx, gy, gz, 256, 1, 1, 0, handle)
                last_grid = grid if grid.__class__ is int or grid.__class__ is tuple else None
                last_stream_handle = handle
        except Exception as exc:
            raise explain(grid, args, stream, exc) from None
        status = relaunch()
        if status:
            failed(status, grid, args, stream)

    return launch
'''

T = fake_torch.TORCH


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch, use_device: Callable[[Any], Any]) -> Iterator[PyDriver]:
    """The stand-in driver; the stand-in torch imported; ``scale``'s specializations launch through real
    Launchers on the driver (function handle 1)."""
    drv = PyDriver()
    use_device(object.__new__(StandInDevice))
    monkeypatch.setattr(device_state, "initialized_driver", lambda: drv.ns)
    monkeypatch.setitem(sys.modules, "torch", T)
    scale._build = lambda *a: loaded(  # type: ignore[method-assign]
        Launcher(SimpleNamespace(name="scale", handle=1), SCALE_PARAMS, block=128, driver=drv.ns), None, None)
    for memo in (scale._specs, scale._fast, scale._bound):
        memo.clear()
    yield drv
    del scale._build


def compiled_owns(launch: Any) -> list[Any]:
    """The private launchers (function, its ``now``) of a ``kernel[grid]`` function, from its closure."""
    cells = dict(zip(launch.__code__.co_freevars, launch.__closure__))
    return list(cells["_tj_owns"].cell_contents.values())


def vadd(drv: PyDriver) -> tj.RawKernel:
    kernel = tj.RawKernel(VADD, "vadd")
    kernel._functions[0] = SimpleNamespace(name="vadd", handle=2)
    return kernel


def block_of(params: Any, args: list[Any]) -> bytes:
    """The parameter block a kernel of ``params`` receives for ``args`` (the checked path's packing)."""
    return Launcher(SimpleNamespace(name="k", handle=9), params, driver=PyDriver().ns).pack(args)


# --------------------------------------------------------------------------------------------- the texts


def test_a_tile_kernels_dispatch_function_is_this_text(driver: PyDriver) -> None:
    assert scale[1].source == TILE_DISPATCH  # type: ignore[attr-defined]
    assert scale[(2, 3)].source == TILE_DISPATCH  # type: ignore[attr-defined]  # one text per kernel


def test_a_tile_kernels_launch_function_is_this_text(driver: PyDriver) -> None:
    x = ArrayView(0x1000, (16,), (1,), "float32", None)
    launch = scale[1]
    for _ in range(CHECKED_LAUNCHES + 2):
        launch(x, 3)
    (compiled,) = set(scale._fast.values())
    (private, _), = (own for own in compiled_owns(launch) if own is not None)
    assert private.source == compiled.base.launch.source == compiled.base.source == TILE_LAUNCHER


def test_a_raw_kernels_entry_is_this_text(driver: PyDriver) -> None:
    kernel = vadd(driver)
    for _ in range(CHECKED_LAUNCHES + 1):
        kernel(1, 256, (0x1000, 0x2000, 5))
    assert kernel.func.source == RAW_ENTRY  # the entry that ``kernel(...)`` runs now


def test_the_lines_a_torch_tensor_takes() -> None:
    """In the dispatch: the other-library branch (the view through its type's converter), then it is remembered
    with its address, shape, strides and dtype (the dtype from the view's dtype name, not read again), each read
    inline at the next call; in the launch functions, its attributes read inline, each once."""
    assert "        _tj_view_x = _tj_VIEW[_tj_cl](x); _tj_key_x = " in TILE_DISPATCH
    assert ("if _tj_VIEW.get(x.__class__) is _tj_torch_view and _tj_views[0][0]:\n"
            "                _tj_ptr_x, _tj_shape_x = _tj_views[0][:2]\n"
            "                _tj_stride_x = None if x.is_contiguous() else _tj_views[0][2]\n"
            "                _tj_dtype_x = _tj_torch_dtype_of[_tj_views[0][3]]  # its dtype, not read again\n"
            "                _tj_getptr_x, _tj_iscontig_x = _tj_tensor_methods(x)\n") in TILE_DISPATCH
    # data_ptr and is_contiguous of the tensor's class, remembered and called unbound: 14 ns less each.
    assert ("(_tj_ptr_x is None or _tj_getptr_x(x) == _tj_ptr_x and x.dtype is _tj_dtype_x\n"
            "                             and x.shape == _tj_shape_x\n"
            "                             and (_tj_stride_x is None and _tj_iscontig_x(x)"
            " or x.stride() == _tj_stride_x))") in TILE_DISPATCH
    assert ("elif x.__class__ is Tensor and x.is_cuda:\n                    "
            "x_view = (x.data_ptr(), x.shape, x.stride(), torch_dtypes[x.dtype], x)\n") in TILE_LAUNCHER
    assert ("elif x.__class__ is Tensor and x.is_cuda and x.is_contiguous():\n"
            "                    x_ptr = x.data_ptr()\n"
            "                    x_torch_dtype = x.dtype; x_dtype = torch_dtypes[x_torch_dtype]\n") in RAW_ENTRY
    assert ("(x is x_last\n"
            "                        or x is x_tensor and x.data_ptr() == x_tensor_ptr and x.dtype is x_tensor_dtype\n"
            "                            and x.is_contiguous())\n") in RAW_ENTRY
    assert ("if x.__class__ is Tensor and x_ptr:\n"
            "                    x_tensor, x_tensor_ptr, x_tensor_dtype = x, x_ptr, x_torch_dtype\n") in RAW_ENTRY


def test_generated_code_is_logged_at_debug_level_when_first_compiled(driver: PyDriver,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    dispatch.compiled_code.cache_clear()
    with caplog.at_level(logging.DEBUG, logger="tilejit.runtime.dispatch"):
        Launcher(SimpleNamespace(name="scale", handle=1), SCALE_PARAMS, block=128, driver=driver.ns).launch  # noqa: B018
        Launcher(SimpleNamespace(name="scale", handle=1), SCALE_PARAMS, block=128, driver=driver.ns).launch  # noqa: B018
    logged = [r.getMessage() for r in caplog.records if r.name == "tilejit.runtime.dispatch"]
    assert logged == [f"generated <tilejit launcher scale>:\n{TILE_LAUNCHER}"]  # once: the code is reused


def test_parameters_named_like_python_keywords_or_generated_names_launch_right(driver: PyDriver) -> None:
    """C names that are Python keywords (``in``, ``lambda``), that the code generates from another parameter
    (``x_ptr`` beside ``x``) or binds itself (``params``, ``grid``): each gets a name of its own."""
    params = [("in", ParamKind.pointer("float32")), ("x", ParamKind.array("float32", 1)),
              ("x_ptr", ParamKind.scalar("int64")), ("params", ParamKind.scalar("float32")),
              ("grid", ParamKind.scalar("int32")), ("lambda", ParamKind.scalar("bool"))]
    launcher = Launcher(SimpleNamespace(name="clash", handle=3), params, driver=driver.ns)
    args = [0x1000, ArrayView(0x2000, (7,), (1,), "float32", None), -5, 2.5, 9, True]
    launcher(4, args)
    assert driver.records[-1][5] == block_of(params, args) and driver.records[-1][1] == (4, 1, 1)
    source = launcher.source
    assert "    arg0, x, x_ptr_1, arg3, arg4, arg5 = args" not in source  # (the form of the names is below)
    assert "arg0, x, arg2, arg3, arg4, arg5 = args" in source
    assert dispatch.local_names([("a", 0), ("a_ptr", 0), ("in", 1)], ("_ptr",), {"grid"}) == ["a", "arg1", "arg2"]


# --------------------------------------------------------------------------------------------- torch tensors


def tensor(ptr: int, n: int = 16, dtype: Any = None, strides: tuple[int, ...] | None = None) -> fake_torch.Tensor:
    return fake_torch.Tensor(ptr, (n,), T.float32 if dtype is None else dtype, strides)


def test_a_torch_tensor_passed_again_relaunches_until_it_changes_in_place(driver: PyDriver) -> None:
    """The same tensor again relaunches the private launcher's buffers (no Python packing); a tensor changed in
    place (another address, shape, strides or dtype, moved to the host) is read afresh, and every launch carries
    exactly what it holds then."""
    t = tensor(0x1000)
    launch = scale[1]
    for _ in range(CHECKED_LAUNCHES + 2):
        launch(t, 3)
    (compiled,) = set(scale._fast.values())
    private = compiled.base.private_launch
    packed = [0]

    def counted(thread: int) -> Any:
        inner = private(thread)

        def launch_private(*args: Any) -> None:
            packed[0] += 1
            inner(*args)

        launch_private.now = inner.now  # type: ignore[attr-defined]
        return launch_private

    compiled.base.private_launch = counted
    scale._bound.clear()
    launch = scale[1]
    launch(t, 3)
    launch(t, 3)  # a private launcher of its own from here
    calls, packs = len(driver.records), packed[0]
    for _ in range(5):
        launch(t, 3)
    assert len(driver.records) == calls + 5 and packed[0] == packs  # relaunched: no Python launcher ran
    assert driver.records[-1][5] == block_of(SCALE_PARAMS, [ArrayView(0x1000, (16,), (1,), "float32", None), 3])

    steps: list[tuple[Callable[[], None], Any]] = [
        (lambda: t.move(0x2000), ArrayView(0x2000, (16,), (1,), "float32", None)),
        (lambda: t.restride((8,), (2,)), ArrayView(0x2000, (8,), (2,), "float32", None)),
        (lambda: None, ArrayView(0x2000, (8,), (2,), "float32", None)),
    ]
    for change, want in steps:
        change()
        launch(t, 3)
        assert driver.records[-1][5] == block_of(SCALE_PARAMS, [want, 3])
    t.is_cuda = False  # what ``t.data = cpu_tensor`` does, right after a launch the memo would repeat: a host
    t.move(0x7F00_0000_1000)  # tensor has a host address (not read: ``is_cuda``, see dispatch.torch_reads_same)
    with pytest.raises(LaunchError, match=r"parameter 'x'.*host \(CPU\) array"):
        launch(t, 3)
    t.is_cuda = True
    t.move(0x2000)
    launch(t, 3)
    t.restride((8,), (1,))  # contiguous now, remembered strided: read afresh
    launch(t, 3)
    assert driver.records[-1][5] == block_of(SCALE_PARAMS, [ArrayView(0x2000, (8,), (1,), "float32", None), 3])
    t.restride((8,), (2,))  # strided now, remembered contiguous: read afresh
    launch(t, 3)
    assert driver.records[-1][5] == block_of(SCALE_PARAMS, [ArrayView(0x2000, (8,), (2,), "float32", None), 3])
    t.retype(T.int32)  # the same address read as int32: another specialization (here: a launcher of float32)
    with pytest.raises(LaunchError, match=r"parameter 'x'.*expected a 1-d float32 array, got a 1-d int32"):
        launch(t, 3)
    t.retype(T.float32)
    launch(t, 4)
    assert driver.records[-1][5] == block_of(SCALE_PARAMS, [ArrayView(0x2000, (8,), (2,), "float32", None), 4])


def test_a_torch_tensor_subclass_is_remembered_like_a_tensor(driver: PyDriver) -> None:
    """A subclass of torch's tensor (``nn.Parameter``) is read through torch's converter, so the dispatch remembers
    it with its state as it does a tensor, and follows it when it changes in place."""

    class Parameter(fake_torch.Tensor):
        __slots__ = ()

    Parameter.__module__ = "torch.nn.parameter"
    w = Parameter(0x1000, (16,), T.float32)
    launch = scale[1]
    for _ in range(CHECKED_LAUNCHES + 2):
        launch(w, 3)
    cells = dict(zip(launch.__code__.co_freevars, launch.__closure__))  # type: ignore[attr-defined]
    assert cells["_tj_last_x"].cell_contents is w and cells["_tj_ptr_x"].cell_contents == 0x1000
    w.move(0x3000)
    launch(w, 3)
    assert driver.records[-1][5] == block_of(SCALE_PARAMS, [ArrayView(0x3000, (16,), (1,), "float32", None), 3])
    assert cells["_tj_ptr_x"].cell_contents == 0x3000


def counted_reads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every read of a stand-in tensor's methods and properties from now on (``is_cuda`` is a plain slot: not
    counted), by name."""
    reads: Counter[str] = Counter()
    for name in ("data_ptr", "stride", "is_contiguous"):
        method = getattr(fake_torch.Tensor, name)
        monkeypatch.setattr(fake_torch.Tensor, name,
                            lambda self, _name=name, _method=method: (reads.update([_name]), _method(self))[1])
    for name in ("shape", "dtype", "device"):
        getter = fake_torch.Tensor.__dict__[name].fget
        monkeypatch.setattr(fake_torch.Tensor, name,
                            property(lambda self, _name=name, _get=getter: (reads.update([_name]), _get(self))[1]))
    return reads


def test_each_launch_reads_each_fact_of_a_torch_tensor_once(driver: PyDriver, monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """What a launch past the checked ones reads of a torch tensor: the same tensor again, the tile dispatch its
    address, dtype, shape and strides (to relaunch the remembered call) and a RawKernel entry its address, dtype
    and contiguity; a new tensor the same facts, none twice (the dtype remembered is the one read)."""
    reads = counted_reads(monkeypatch)  # first: the dispatch remembers a tensor's class's methods
    t = tensor(0x1000)
    launch = scale[1]
    for _ in range(CHECKED_LAUNCHES + 2):
        launch(t, 3)
    reads.clear()
    launch(t, 3)
    assert reads == {"data_ptr": 1, "dtype": 1, "shape": 1, "is_contiguous": 1}  # contiguous: not its strides
    reads.clear()
    launch(tensor(0x2000), 3)
    assert reads == {"data_ptr": 1, "dtype": 1, "shape": 1, "stride": 1, "is_contiguous": 1}
    strided = tensor(0x2000, strides=(2,))
    launch(strided, 3)
    reads.clear()
    launch(strided, 3)
    assert reads == {"data_ptr": 1, "dtype": 1, "shape": 1, "is_contiguous": 1, "stride": 1}
    cells = dict(zip(launch.__code__.co_freevars, launch.__closure__))  # type: ignore[attr-defined]
    assert cells["_tj_dtype_x"].cell_contents is T.float32 and cells["_tj_ptr_x"].cell_contents == 0x2000

    kernel = vadd(driver)
    x, out = tensor(0x1000), tensor(0x2000)
    for _ in range(CHECKED_LAUNCHES + 2):
        kernel(2, 256, (x, out, 5))
    reads.clear()
    kernel(2, 256, (x, out, 5))
    assert reads == {"data_ptr": 2, "dtype": 2, "is_contiguous": 2}
    reads.clear()
    kernel(2, 256, (tensor(0x3000), out, 6))
    assert reads == {"data_ptr": 2, "dtype": 2, "is_contiguous": 2}
    assert driver.records[-1][5] == struct.pack("=QQi", 0x3000, 0x2000, 6)


TOUCH2_PARAMS = [("x", ParamKind.array("float32", 2))]


@tj.kernel
def touch2(x):
    tj.store(x, index=(0, 0), tile=tj.load(x, index=(0, 0), shape=(4, 4)))


def test_a_torch_tensor_transposed_or_resized_in_place_is_launched_as_it_is_then(driver: PyDriver) -> None:
    """``t.transpose_(0, 1)`` of a square tensor keeps its address, shape and dtype and swaps its strides; a resize
    (or ``as_strided_``) in place keeps address and dtype: the launch after each, past the checked launches (where
    the same tensor again relaunches the remembered call), carries what the tensor holds then."""
    touch2._build = lambda *a: loaded(  # type: ignore[method-assign]
        Launcher(SimpleNamespace(name="touch2", handle=5), TOUCH2_PARAMS, block=128, driver=driver.ns), None, None)
    try:
        t = fake_torch.Tensor(0x1000, (4, 4), T.float32)
        launch = touch2[1]
        for shape, strides in [((4, 4), (4, 1))] * (CHECKED_LAUNCHES + 2) + [
                ((4, 4), (1, 4)), ((4, 4), (1, 4)), ((4, 4), (4, 1)), ((2, 8), (8, 1)), ((2, 8), (8, 1)),
                ((8, 2), (1, 8))]:
            t.restride(shape, strides)
            launch(t)
            want = ArrayView(0x1000, shape, strides, "float32", None)
            assert driver.records[-1][5] == block_of(TOUCH2_PARAMS, [want]), (shape, strides)
    finally:
        del touch2._build
        for memo in (touch2._specs, touch2._fast, touch2._bound):
            memo.clear()


def test_a_torch_tensor_of_an_unsupported_dtype_names_the_parameter(driver: PyDriver) -> None:
    launch = scale[1]
    with pytest.raises(LaunchError, match=r"parameter 'x'.*unsupported torch dtype torch.complex64"):
        launch(tensor(0x1000, dtype=T.complex64), 3)


def test_raw_kernels_read_torch_tensors_inline_with_every_check(driver: PyDriver) -> None:
    """Past the checked launches a RawKernel's entry reads a tensor's address and dtype inline; a strided, host,
    or wrongly typed tensor still gets the checked path's error, and an address change is seen."""
    kernel = vadd(driver)
    x, out = tensor(0x1000), tensor(0x2000)
    for i in range(CHECKED_LAUNCHES + 3):
        kernel(2, 256, (x, out, i))
        assert driver.records[-1][5] == struct.pack("=QQi", 0x1000, 0x2000, i)
    assert kernel.func.source == RAW_ENTRY
    out.move(0x3000)
    kernel(2, 256, (x, out, 7))
    assert driver.records[-1][5] == struct.pack("=QQi", 0x1000, 0x3000, 7)
    calls = len(driver.records)
    for bad, pattern in [(tensor(0x4000, strides=(2,)), r"parameter 'out' \(float32\*\).*not contiguous"),
                         (tensor(0x4000, dtype=T.int32), r"parameter 'out'.*expected float32 data, got .* int32"),
                         (tensor(0x4000, dtype=T.complex64), r"parameter 'out'.*unsupported torch dtype"),
                         (fake_torch.Tensor(0x4000, (16,), T.float32, is_cuda=False), r"parameter 'out'.*host")]:
        with pytest.raises(LaunchError, match=pattern):
            kernel(2, 256, (x, bad, 7))
    assert len(driver.records) == calls
    # The same tensor again is taken as packed while it reads the same; changed in place, it is read again.
    kernel(2, 256, (x, out, 7))
    for change, pattern in [(lambda: out.restride((8,), (2,)), r"parameter 'out'.*not contiguous"),
                            (lambda: out.retype(T.int32), r"parameter 'out'.*expected float32 data, got .* int32"),
                            (lambda: (setattr(out, "is_cuda", False), out.move(0x7F00_0000_1000)),
                             r"parameter 'out'.*host")]:  # moved to the host: a host address
        out.restride((16,), (1,))
        out.retype(T.float32)
        out.is_cuda = True
        out.move(0x3000)
        kernel(2, 256, (x, out, 7))
        assert driver.records[-1][5] == struct.pack("=QQi", 0x1000, 0x3000, 7)
        change()
        with pytest.raises(LaunchError, match=pattern):
            kernel(2, 256, (x, out, 7))
    out.is_cuda = True
    out.move(0x5000)
    kernel(2, 256, (x, out, 7))
    assert driver.records[-1][5] == struct.pack("=QQi", 0x1000, 0x5000, 7)


def test_a_launcher_reads_torch_tensors_for_array_parameters(driver: PyDriver) -> None:
    launcher = Launcher(SimpleNamespace(name="scale", handle=1), SCALE_PARAMS, block=128, driver=driver.ns)
    t = fake_torch.Tensor(0x1000, (6,), T.float32, (3,))
    launcher(1, (t, 2))
    assert driver.records[-1][5] == block_of(SCALE_PARAMS, [ArrayView(0x1000, (6,), (3,), "float32", None), 2])
    with pytest.raises(LaunchError, match=r"parameter 'x'.*expected a 1-d float32 array, got a 2-d float32"):
        launcher(1, (fake_torch.Tensor(0x1000, (2, 3), T.float32), 2))


def test_threads_launching_one_torch_tensor_each_get_their_own(driver: PyDriver) -> None:
    """Two threads launch ``scale[1]`` with tensors of their own past the checked launches, one of them moving
    its tensor between launches: each launch carries its own thread's tensor as it is then."""
    launch = scale[1]
    errors: list[BaseException] = []
    expected: dict[int, list[bytes]] = {}

    def worker(i: int) -> None:
        t = tensor(0x10000 * (i + 1))
        mine = expected.setdefault(threading.get_ident(), [])
        try:
            for it in range(CHECKED_LAUNCHES + 30):
                if i and it % 5 == 0:
                    t.move(0x10000 * (i + 1) + 64 * it)
                launch(t, it)
                mine.append(block_of(SCALE_PARAMS, [ArrayView(t.data_ptr(), (16,), (1,), "float32", None), it]))
        except BaseException as exc:  # reported below
            errors.append(exc)

    from test_threads import run_threads

    run_threads(worker, 2)
    assert not errors, errors
    for tid, blocks in expected.items():
        assert [r[5] for r in driver.records if r[0] == tid] == blocks


# --------------------------------------------------------------------------------------------- GPU, real torch


GPU_VADD = r"""
extern "C" __global__ void vadd(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + y[i];
}
"""


@tj.kernel
def gpu_axpy(x, y, out, a: float, TILE: tj.Constant[int]):
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)) * a + tj.load(y, index=(i,), shape=(TILE,)))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_tile_kernel_launches_on_torch_tensors_follow_in_place_changes(dtype: str) -> None:
    """``kernel[grid](x, y, out, ...)`` with the same torch tensors again and again (past the checked launches, so
    through the relaunch of the remembered call), while their contents, addresses (``.data =``) and strides change
    in place: every launch computes from what the tensors hold then (checked against torch, on sizes that are not
    multiples of the tile, outputs poisoned first)."""
    torch = pytest.importorskip("torch")
    tdtype = getattr(torch, dtype)
    tol = {"float32": 1e-6, "float16": 2e-3, "bfloat16": 2e-2}[dtype]
    n, tile = 10_007, 256
    gen = torch.Generator(device="cuda").manual_seed(int(np.random.default_rng().integers(1 << 31)))

    def rand(m: int) -> Any:
        return torch.randn(m, device="cuda", generator=gen).to(tdtype)

    x, y, out = rand(n), rand(n), torch.empty(n, device="cuda", dtype=tdtype)
    launch = gpu_axpy[-(-n // tile)]
    for i in range(2 * CHECKED_LAUNCHES + 12):
        if i % 5 == 0:
            x.copy_(rand(n))  # new contents, same address
        if i == CHECKED_LAUNCHES + 3:
            x.data = rand(n)  # another address
        if i == CHECKED_LAUNCHES + 6:
            out.data = torch.empty(n, device="cuda", dtype=tdtype)
        if i == CHECKED_LAUNCHES + 9:
            y.data = rand(2 * n)[::2]  # strided: another specialization
        out.fill_(float("nan"))
        launch(x, y, out, 1.5, TILE=tile)
        want = x.float() * 1.5 + y.float()
        torch.cuda.synchronize()
        torch.testing.assert_close(out.float(), want, rtol=tol, atol=tol)


@pytest.mark.gpu
@pytest.mark.own_backend(reason="RawKernel: CUDA C++ source compiled by NVRTC")
def test_raw_kernel_launches_on_torch_tensors_follow_in_place_changes() -> None:
    """A RawKernel past its checked launches reads torch tensors inline: addresses changed in place are followed,
    and a strided or wrongly typed tensor is refused as on the checked path."""
    torch = pytest.importorskip("torch")
    kernel = tj.RawKernel(GPU_VADD, "vadd")
    n = 40_009
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty(n, device="cuda")
    for i in range(CHECKED_LAUNCHES + 8):
        if i == CHECKED_LAUNCHES + 2:
            x.data = torch.randn(n, device="cuda")
        if i == CHECKED_LAUNCHES + 4:
            out.data = torch.empty(n, device="cuda")
        out.fill_(float("nan"))
        kernel((n + 255) // 256, 256, (x, y, out, n))
        torch.cuda.synchronize()
        assert torch.equal(out, x + y)
    assert "\ndef make():\n" in kernel.func.source  # the generated entry by now
    with pytest.raises(LaunchError, match=r"parameter 'x'.*not contiguous"):
        kernel((n + 255) // 256, 256, (torch.randn(2 * n, device="cuda")[::2], y, out, n))
    with pytest.raises(LaunchError, match=r"parameter 'out'.*expected float32 data, got an array of float16"):
        kernel((n + 255) // 256, 256, (x, y, out.half(), n))
    with pytest.raises(LaunchError, match=r"parameter 'y'.*host"):
        kernel((n + 255) // 256, 256, (x, y.cpu(), out, n))
