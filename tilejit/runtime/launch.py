"""Kernel launches: the hot path.

A :class:`Launcher` is built once per kernel signature. It lays the parameters out as the kernel
sees them (each at its natural C alignment) and precomputes a ``struct`` format for the whole block.
Each thread's first ``CHECKED_LAUNCHES`` launches take the checked path (every argument converted and
checked, fresh buffers: the policy of :mod:`tilejit.runtime.dispatch`); then :mod:`tilejit.runtime.fastlaunch`
generates one small function specialized to the signature, with its own parameter buffer and launch
configuration (``launcher.source`` shows its text). It converts
the arguments (skipping immutable ones identical to the last launch's), packs them with ONE
``pack_into`` and makes ONE ctypes call::

    cuLaunchKernelEx(&config, f, NULL, {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE,
                                        &size, CU_LAUNCH_PARAM_END})

Argument checks on the fast path are the cheap ones (exact-type tests, ``struct``'s own range
checks); when anything fails, the checked path re-checks every argument and raises a ``LaunchError``
naming the parameter, what it expects and what it got.
"""
from __future__ import annotations

import ctypes
import functools
import operator
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

from tilejit.errors import CUDAError, LaunchError
from tilejit.runtime.dispatch import CHECKED_LAUNCHES, IMMUTABLE_ARGS, MAX_THREAD_LAUNCHERS, FirstLaunches
from tilejit.runtime.dtypes import ITEMSIZE, STRUCT_CHAR, float_to_bfloat16_bits
from tilejit.runtime.interop import ArrayView, as_view, is_contiguous, not_contiguous_error
from tilejit.runtime.stream import stream_handle

_INT_RANGE: dict[str, tuple[int, int]] = {
    f"{s}int{b}": ((0, (1 << b) - 1) if s else (-(1 << (b - 1)), (1 << (b - 1)) - 1))
    for s in ("", "u") for b in (8, 16, 32, 64)
}
_MAX_GRID = (2**31 - 1, 65535, 65535)
_INDEX32_END = 2**31  # shapes and strides of an ``index32`` array parameter are below this
_MAX_BLOCK = (1024, 1024, 64)
_CUDA_ERROR_INVALID_CONTEXT = 201
_CUDA_ERROR_INVALID_HANDLE = 400
_CUDA_ERROR_CONTEXT_IS_DESTROYED = 709
#: CUlaunchConfig: 7 x unsigned int (grid xyz, block xyz, shared bytes), pad, CUstream at 32; attrs at 40
#: and numAttrs at 48 stay NULL/0.
CONFIG = struct.Struct("=7I4xQ")
_CONFIG_SIZE = 56
_EXTRA = struct.Struct("=6Q")  # the driver's ``extra`` array (5 pointers) and the size_t its 4th points at


def _type_name(value: Any) -> str:
    cls = type(value)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


class ParamKind:
    """How one kernel parameter is passed: a scalar, a raw pointer, or a tile-kernel array struct.

    * ``ParamKind.scalar("float32")``: bool, int8..uint64, float16, bfloat16, float32, float64.
    * ``ParamKind.pointer("float32")`` (``T*``; dtype None for ``void*``): takes any device array
      (DeviceArray, ``__cuda_array_interface__``, DLPack, torch) or an int address.
    * ``ParamKind.array("float32", 2)``: ``struct {T* ptr; int64_t shape[2]; int64_t stride[2];}``
      with strides in elements, as the tile backend's ``tj::Array<T, N>``; ``index32``: the kernel assumes
      every shape and stride in [0, 2**31) (a Tile IR kernel, for TMA), so a launch must not pass others.
    * ``ParamKind.tensormap("bfloat16", 2, "a", (64, 64), 128)``: a ``CUtensorMap`` (128 bytes, 64-byte aligned,
      ``const __grid_constant__``) of the array parameter named ``source`` (this dtype and rank), read in boxes of
      ``box`` elements (outermost first) with a ``swizzle``-byte swizzle. Derived, not an argument: a launch
      encodes it from the source array (``runtime.tensormap.launch_tensor_map``); such parameters come last.
    """

    __slots__ = ("align", "box", "dtype", "fmt", "index32", "kind", "ndim", "size", "source", "swizzle")

    kind: str
    dtype: str | None
    ndim: int
    fmt: str
    size: int
    align: int
    index32: bool
    source: str
    box: tuple[int, ...]
    swizzle: int

    def __init__(self, kind: str, dtype: str | None, ndim: int = 0, index32: bool = False, source: str = "",
                 box: tuple[int, ...] = (), swizzle: int = 0) -> None:
        self.source, self.box, self.swizzle = "", (), 0
        if kind == "scalar":
            if dtype not in STRUCT_CHAR:
                raise ValueError(f"unsupported scalar dtype {dtype!r}; supported: {', '.join(STRUCT_CHAR)}")
            self.fmt, self.size, self.align = STRUCT_CHAR[dtype], ITEMSIZE[dtype], ITEMSIZE[dtype]
        elif kind == "pointer":
            if dtype is not None and dtype not in ITEMSIZE:
                raise ValueError(f"unsupported pointer element dtype {dtype!r}")
            self.fmt, self.size, self.align = "Q", 8, 8
        elif kind == "array":
            if dtype not in ITEMSIZE:
                raise ValueError(f"unsupported array dtype {dtype!r}")
            if isinstance(ndim, bool) or not isinstance(ndim, int) or ndim < 0:
                raise ValueError(f"array rank must be a non-negative int, got {ndim!r}")
            self.fmt, self.size, self.align = "Q" + "q" * (2 * ndim), 8 * (1 + 2 * ndim), 8
        elif kind == "tensormap":
            from tilejit.runtime.tensormap import TENSOR_MAP_ALIGN, TENSOR_MAP_BYTES

            if dtype not in ITEMSIZE or isinstance(ndim, bool) or not isinstance(ndim, int) or not 1 <= ndim <= 5:
                raise ValueError(f"a tensor map needs an array dtype and a rank of 1 to 5, got {dtype!r}, {ndim!r}")
            if not (isinstance(source, str) and source and len(box) == ndim
                    and all(isinstance(b, int) and 1 <= b <= 256 for b in box) and swizzle in (0, 32, 64, 128)):
                raise ValueError(f"a tensor map needs its source parameter, {ndim} box dims of 1 to 256 and a swizzle "
                                 f"of 0, 32, 64 or 128 bytes, got {source!r}, {box!r}, {swizzle!r}")
            self.fmt, self.size, self.align = f"{TENSOR_MAP_BYTES}s", TENSOR_MAP_BYTES, TENSOR_MAP_ALIGN
            self.source, self.box, self.swizzle = source, tuple(box), swizzle
        else:
            raise ValueError(f"parameter kind must be 'scalar', 'pointer', 'array' or 'tensormap', got {kind!r}")
        if index32 and kind != "array":
            raise ValueError(f"index32 is a fact of arrays only, not of a {kind}")
        self.kind, self.dtype, self.ndim, self.index32 = kind, dtype, ndim, bool(index32)

    @classmethod
    def scalar(cls, dtype: str) -> ParamKind:
        return cls("scalar", dtype)

    @classmethod
    def pointer(cls, dtype: str | None = None) -> ParamKind:
        return cls("pointer", dtype)

    @classmethod
    def array(cls, dtype: str, ndim: int, index32: bool = False) -> ParamKind:
        return cls("array", dtype, ndim, index32)

    @classmethod
    def tensormap(cls, dtype: str, ndim: int, source: str, box: Sequence[int], swizzle: int) -> ParamKind:
        return cls("tensormap", dtype, ndim, source=source, box=tuple(box), swizzle=swizzle)

    @classmethod
    def from_spec(cls, spec: Sequence[Any]) -> ParamKind:
        """From the backend's ABI entries: ``("array", dtype, ndim)``, ``("array", dtype, ndim, "index32")``,
        ``("scalar", dtype)``, ``("pointer", dtype)`` or ``("tensormap", dtype, ndim, source, swizzle, *box)``."""
        if spec and spec[0] == "tensormap" and len(spec) >= 6 and isinstance(spec[2], int) and len(spec) == 5 + spec[2]:
            return cls.tensormap(spec[1], spec[2], spec[3], tuple(spec[5:]), spec[4])
        if spec and spec[0] == "array" and len(spec) == 3:
            return cls.array(spec[1], spec[2])
        if spec and spec[0] == "array" and len(spec) == 4 and spec[3] == "index32":
            return cls.array(spec[1], spec[2], index32=True)
        if spec and spec[0] == "scalar" and len(spec) == 2:
            return cls.scalar(spec[1])
        if spec and spec[0] == "pointer" and len(spec) == 2:
            return cls.pointer(spec[1])
        raise ValueError(f"not a parameter spec: {spec!r}")

    def _identity(self) -> tuple[Any, ...]:
        return self.kind, self.dtype, self.ndim, self.index32, self.source, self.box, self.swizzle

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ParamKind) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def __str__(self) -> str:
        if self.kind == "scalar":
            return str(self.dtype)
        if self.kind == "pointer":
            return f"{self.dtype or 'void'}*"
        if self.kind == "tensormap":
            box = "x".join(map(str, self.box))
            return f"tensormap<{self.dtype}, {self.ndim}> of {self.source} (box {box}, swizzle {self.swizzle})"
        return f"array<{self.dtype}, {self.ndim}{', index32' if self.index32 else ''}>"

    def __repr__(self) -> str:
        return f"ParamKind({self})"

    # ------------------------------------------------------------------ checked conversion (slow path)

    def convert(self, value: Any, where: str) -> tuple[Any, ...]:
        """The struct values for ``value``, or a ``LaunchError`` starting with ``where``."""
        if self.kind == "scalar":
            return (self.check_scalar(value, where),)
        if self.kind == "pointer":
            if isinstance(value, int) and not isinstance(value, bool):
                if not 0 <= value < 1 << 64:
                    raise LaunchError(f"{where}: the address {value} is not a 64-bit pointer")
                return (value,)
            v = self._view(value, where)
            if self.dtype is not None and v.dtype != self.dtype:
                raise LaunchError(f"{where}: expected {self.dtype} data, got an array of {v.dtype}")
            if not is_contiguous(v.shape, v.strides):
                raise LaunchError(f"{where}: {not_contiguous_error(v.shape, v.strides)}")
            return (v.ptr,)
        v = self._view(value, where)
        if v.dtype != self.dtype or len(v.shape) != self.ndim:
            raise LaunchError(
                f"{where}: expected a {self.ndim}-d {self.dtype} array, got a {len(v.shape)}-d {v.dtype} array"
            )
        if self.index32:
            self._check_index32(v, where)
        return (v.ptr, *v.shape, *v.strides)

    @staticmethod
    def _check_index32(v: ArrayView, where: str) -> None:
        """Refuse an array with a shape or stride outside [0, 2**31): the kernel assumed none is (undefined
        behaviour, i.e. silently wrong results, if passed)."""
        for what, values in (("shape", v.shape), ("strides", v.strides)):
            for d, n in enumerate(values):
                if not 0 <= n < _INDEX32_END:
                    raise LaunchError(
                        f"{where}: {what}[{d}] is {n}, outside [0, 2**31): this Tile IR kernel was compiled assuming "
                        f"every shape and stride of the array is (so that tileiras may use TMA loads); launch it "
                        f"with backend='cuda' for arrays of {what} this large"
                    )

    @staticmethod
    def _view(value: Any, where: str) -> ArrayView:
        """The view of an array argument, its fields checked to fit the parameter block's C types."""
        try:
            v = as_view(value)
        except (TypeError, ValueError) as exc:
            raise LaunchError(f"{where}: {exc}") from None
        ptr, shape, strides = v.ptr, v.shape, v.strides
        if (
            not (isinstance(ptr, int) and 0 <= ptr < 1 << 64)
            or not all(isinstance(n, int) and 0 <= n < 1 << 63 for n in shape)
            or not (isinstance(strides, tuple) and len(strides) == len(shape))
            or not all(isinstance(s, int) and -(1 << 63) <= s < 1 << 63 for s in strides)
        ):
            raise LaunchError(
                f"{where}: the array's address {ptr!r}, shape {shape!r} or strides {strides!r} do not describe "
                "device memory (a 64-bit address, sizes >= 0 and one int64 stride per dimension)"
            )
        return v

    def check_scalar(self, value: Any, where: str) -> Any:
        """The struct value of scalar ``value`` for this scalar kind, or a ``LaunchError`` starting with ``where``."""
        dtype = self.dtype
        assert dtype is not None
        shape = getattr(value, "shape", None)
        if shape is not None and tuple(shape) != ():
            article = "an" if dtype[0] in "aeiou" else "a"
            raise LaunchError(f"{where}: expected {article} {dtype} scalar, got an array ({_type_name(value)})")
        if dtype == "bool":
            if isinstance(value, bool) or _type_name(value) in ("numpy.bool_", "numpy.bool"):
                return bool(value)
            if isinstance(value, int) and value in (0, 1):
                return bool(value)
            raise LaunchError(f"{where}: expected a bool, got {_type_name(value)} {value!r}")
        if dtype in _INT_RANGE:
            if isinstance(value, float) or (not isinstance(value, int) and not hasattr(value, "__index__")):
                raise LaunchError(f"{where}: expected an int for {dtype}, got {_type_name(value)} {value!r}")
            try:
                v = value.__index__()
            except TypeError:
                raise LaunchError(f"{where}: expected an int for {dtype}, got {_type_name(value)} {value!r}") from None
            lo, hi = _INT_RANGE[dtype]
            if not lo <= v <= hi:
                raise LaunchError(f"{where}: {v} is out of range for {dtype} [{lo}, {hi}]")
            return v
        # floating point
        if _is_complex(value):
            raise LaunchError(f"{where}: expected a real number for {dtype}, got {_type_name(value)} {value!r}")
        if not (isinstance(value, int | float) or hasattr(value, "__float__")):
            raise LaunchError(f"{where}: expected a number for {dtype}, got {_type_name(value)} {value!r}")
        try:
            f = float(value)
        except (TypeError, ValueError):
            raise LaunchError(f"{where}: expected a number for {dtype}, got {_type_name(value)} {value!r}") from None
        except OverflowError:
            text = repr(value)
            text = text if len(text) <= 40 else f"{text[:20]}...{text[-8:]} ({len(text)} digits)"
            raise LaunchError(f"{where}: {text} is out of range for {dtype}") from None
        try:
            if dtype == "bfloat16":
                return float_to_bfloat16_bits(f)
            struct.pack("=" + self.fmt, f)
        except OverflowError:
            raise LaunchError(f"{where}: {f!r} is out of range for {dtype}") from None
        return f


def _is_complex(value: Any) -> bool:
    """Python and numpy complex numbers: ``float()`` of a numpy one drops the imaginary part with only a warning."""
    return isinstance(value, complex) or getattr(getattr(value, "dtype", None), "kind", "") == "c"


def param_layout(kinds: Sequence[ParamKind]) -> tuple[str, tuple[int, ...], int]:
    """(struct format, byte offset of each parameter, total size) of the kernel parameter block.

    Each parameter starts at a multiple of its alignment, as a C compiler lays out a struct of
    them; the size is the end of the last parameter.
    """
    fmt = "="
    offsets: list[int] = []
    off = 0
    for k in kinds:
        pad = -off % k.align
        if pad:
            fmt += f"{pad}x"
        off += pad
        offsets.append(off)
        fmt += k.fmt
        off += k.size
    return fmt, tuple(offsets), off


def derived_params(params: Sequence[tuple[str, ParamKind]]) -> tuple[tuple[str, ParamKind, int], ...]:
    """The tensor-map parameters of a kernel's ``params`` (name, kind, index of their source among the others),
    checked: after every other parameter (the backend puts them last), each naming an array parameter of its dtype
    and rank (``ValueError`` otherwise)."""
    plain = [n for n, k in params if k.kind != "tensormap"]
    out: list[tuple[str, ParamKind, int]] = []
    for name, kind in params:
        if kind.kind != "tensormap":
            if out:
                raise ValueError(f"parameter {name!r} follows the tensor map {out[-1][0]!r}; tensor maps come last")
            continue
        src = plain.index(kind.source) if kind.source in plain else -1
        sk = params[src][1] if src >= 0 else None
        if sk is None or sk.kind != "array" or (sk.dtype, sk.ndim) != (kind.dtype, kind.ndim):
            raise ValueError(f"tensor map {name!r}: its source {kind.source!r} is not a {kind.ndim}-d {kind.dtype} "
                             "array parameter")
        out.append((name, kind, src))
    return tuple(out)


def grid3(grid: Any) -> tuple[int, int, int]:
    """A grid as three ints (any integer type, e.g. numpy's, but not bool), checked against the hardware limits."""
    if isinstance(grid, tuple | list):
        if not 1 <= len(grid) <= 3:
            raise LaunchError(f"grid must be a positive int or a tuple of 1 to 3 positive ints, got {grid!r}")
        dims: tuple[Any, ...] = (*grid, *(1,) * (3 - len(grid)))
    else:
        dims = (grid, 1, 1)
    out = []
    for d, limit in zip(dims, _MAX_GRID):
        try:
            n = -1 if isinstance(d, bool) or _is_bool(d) else operator.index(d)
        except TypeError:
            n = -1
        if not 1 <= n <= limit:
            raise LaunchError(
                f"grid must be a positive int or a tuple of 1 to 3 positive ints within {_MAX_GRID}, got {grid!r}"
            )
        out.append(n)
    return out[0], out[1], out[2]


def check_cluster_grid(kernel: str, grid: tuple[int, int, int], cluster: int) -> None:
    """Refuse a grid the driver refuses for a kernel built for clusters of ``cluster`` CTAs along x (Tile IR's
    ``num_cta_in_cga``, from ``num_ctas=``): its x extent must be a multiple of the cluster."""
    if cluster > 1 and grid[0] % cluster:
        raise LaunchError(
            f"kernel {kernel}: grid {grid} is not a multiple of the cluster of num_ctas={cluster} CTAs along x; "
            f"launch a grid whose x extent is a multiple of {cluster} or drop num_ctas"
        )


def _is_bool(value: Any) -> bool:
    return _type_name(value) in ("numpy.bool_", "numpy.bool")


def block3(block: Any) -> tuple[int, int, int]:
    """A block as three ints, checked against the hardware limits (``ValueError``)."""
    if isinstance(block, int) and not isinstance(block, bool):
        dims: tuple[Any, ...] = (block, 1, 1)
    elif isinstance(block, tuple | list) and 1 <= len(block) <= 3:
        dims = (*block, *(1,) * (3 - len(block)))
    else:
        raise ValueError(f"block must be a positive int or a tuple of 1 to 3 positive ints, got {block!r}")
    for d, limit in zip(dims, _MAX_BLOCK):
        if isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= limit:
            raise ValueError(f"block {block!r}: each dimension must be an int in 1..{limit} (x, y ≤ 1024, z ≤ 64)")
    if dims[0] * dims[1] * dims[2] > 1024:
        raise ValueError(f"block {block!r} has {dims[0] * dims[1] * dims[2]} threads; at most 1024 are allowed")
    return dims  # type: ignore[return-value]


def _address(fn: Any) -> int:
    addr = ctypes.cast(fn, ctypes.c_void_p).value
    if not addr:
        raise ValueError("the launch entry point has no address")
    return int(addr)


@functools.cache
def launch_proto(ex: bool) -> Any:
    """The ctypes prototype of ``cuLaunchKernelEx`` (ex) or ``cuLaunchKernel``, all pointers as ``void*``;
    made when first needed (each costs tens of microseconds at import)."""
    if ex:
        return ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
    return ctypes.CFUNCTYPE(
        ctypes.c_int, ctypes.c_void_p, *(ctypes.c_uint,) * 7, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
    )


def _raw(n: int) -> tuple[bytearray, int]:
    """``n`` zero bytes the driver reads by address, and that address (16-byte aligned by Python's
    allocator; a bytearray's bytes move only when it is resized, which nothing here does)."""
    buf = bytearray(n)
    return buf, ctypes.addressof(ctypes.c_char.from_buffer(buf))


_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_shared_lock = threading.Lock()


def _allow_shared(function: Any, nbytes: int) -> None:
    """Let ``function`` launch with ``nbytes`` of dynamic shared memory. The limit is the function's, shared
    by its launchers of every size (other threads' too): raise it, never lower it under a larger one."""
    with _shared_lock:
        attribute = getattr(function, "attribute", None)
        if attribute is not None and attribute(_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) >= nbytes:
            return
        function.set_max_dynamic_shared(nbytes)


class LaunchBuffers:
    """One set of launch buffers: the parameter block, the two ways of handing it to the driver
    (``extra`` = {BUFFER_POINTER, buf, BUFFER_SIZE, &size, END}, or ``kernelParams`` = one pointer
    per parameter into the block), and the launch configuration."""

    def __init__(self, size: int, offsets: Sequence[int], block: tuple[int, int, int], shared: int) -> None:
        # bytearrays filled with struct, not ctypes buffers: create_string_buffer makes a ctypes array type
        # per new size (~15 us each), which a process's first launch would pay four times over.
        self.params, base = _raw(max(size, 1))
        # extra = {BUFFER_POINTER, base, BUFFER_SIZE, &size, END}, then the size_t it points at.
        self.extra, extra = _raw(_EXTRA.size)
        self.extra_addr = extra if size else 0
        _EXTRA.pack_into(self.extra, 0, 1, base, 2, extra + 40, 0, size)
        self.pointers, pointers = _raw(8 * max(len(offsets), 1))
        self.pointers_addr = pointers if offsets else 0
        struct.pack_into(f"={len(offsets)}Q", self.pointers, 0, *(base + off for off in offsets))
        self.config, self.config_addr = _raw(_CONFIG_SIZE)
        CONFIG.pack_into(self.config, 0, 1, 1, 1, *block, shared, 0)

    def kernel_params_and_extra(self, mode: str) -> tuple[int, int]:
        """The (kernelParams, extra) arguments of a launch for ``mode`` "pointers" or "buffer"."""
        return (self.pointers_addr, 0) if mode == "pointers" else (0, self.extra_addr)


class Launcher:
    """Launches one kernel with one parameter signature, fast.

    ``function`` is a loaded kernel (:class:`tilejit.runtime.module.Function`, or anything with
    ``.handle`` and ``.name``); ``params`` its parameters in order as (name, ParamKind). Call
    ``launcher(grid, args, stream=None)`` (or ``launcher.launch``, the same function); ``stream``
    None means the calling thread's current stream. ``param_passing`` "buffer" hands the driver the
    packed block through ``extra``, "pointers" through ``kernelParams`` (same speed; both kept for
    drivers that differ). ``driver`` is for tests (default: the CUDA driver). ``compile_code(src,
    filename)`` makes the code of the generated functions (default ``compile()``; callers above the
    runtime pass one that keeps it in the disk cache). The generated functions' buffers, and the current
    stream they read, are the creating thread's; another thread's launches follow :attr:`first_launches` (the
    checked path a few times, then a generated function of its own), so concurrent launches never share
    buffers and each reads its own thread's current stream. ``cluster``: CTAs per cluster along x the kernel
    was built for (``KernelImage.cluster``; 1: none): every path refuses a grid whose x extent is not a
    multiple of it before the driver sees it (the generated functions when their grid changes), with a
    message naming ``kernel_name`` (default: the function's name), and a driver error for such a grid is
    turned into the same message.

    ``params`` may end in tensor maps (``ParamKind.tensormap``): they take no argument; each launch packs the map of
    its source array argument (``derived``), encoded once per array layout (``runtime.tensormap``).

    What the generated functions read of it (:mod:`tilejit.runtime.fastlaunch`) is public: the layout
    (``params``, ``derived``, ``struct``, ``offsets``, ``size``), the launch (``block``, ``shared_bytes``, ``cluster``,
    ``param_passing``, ``handle``, ``uses_ex``, ``entry_point``, ``call_driver``) and the paths it hands calls to
    (:meth:`launch_any_thread`, :meth:`explain`, :meth:`failed`).
    """

    def __init__(
        self,
        function: Any,
        params: Sequence[tuple[str, ParamKind]],
        block: int | Sequence[int] = (128, 1, 1),
        shared_bytes: int = 0,
        *,
        driver: Any = None,
        param_passing: str = "buffer",
        compile_code: Callable[[str, str], Any] | None = None,
        cluster: int = 1,
        kernel_name: str | None = None,
    ) -> None:
        if param_passing not in ("buffer", "pointers"):
            raise ValueError(f"param_passing must be 'buffer' or 'pointers', got {param_passing!r}")
        self.param_passing = param_passing
        self.compile_code = compile_code
        self.function = function
        self.name: str = getattr(function, "name", "kernel")
        self.kernel_name = self.name if kernel_name is None else kernel_name
        if isinstance(cluster, bool) or not isinstance(cluster, int) or cluster < 1:
            raise ValueError(f"cluster must be a positive int, got {cluster!r}")
        self.cluster = cluster
        given = tuple((str(n), k) for n, k in params)
        for n, k in given:
            if not isinstance(k, ParamKind):
                raise TypeError(f"parameter {n!r}: expected a ParamKind, got {type(k).__name__}")
        #: The parameters a launch takes an argument for, in order, and ``derived``: the tensor maps after them, each
        #: (name, kind, index of its source array in ``params``), which a launch encodes from that argument.
        self.params = tuple(p for p in given if p[1].kind != "tensormap")
        self.derived = derived_params(given)
        if any(k.align > 16 for _, k in given):
            # A parameter aligned beyond 16 bytes (a tensor map: 64) sits where ptxas aligned its address in the
            # constant bank, whose parameters start at a 16-byte boundary only (sm_90: c[0x0][0x210]), so its
            # offset from the first parameter differs from the packed block's (a map packed at 128 was read at
            # 176: an illegal instruction). Through kernelParams the driver places each parameter itself.
            self.param_passing = "pointers"
        self.block = block3(tuple(block) if isinstance(block, list) else block)
        if isinstance(shared_bytes, bool) or not isinstance(shared_bytes, int) or shared_bytes < 0:
            raise ValueError(f"shared_bytes must be a non-negative int, got {shared_bytes!r}")
        self.shared_bytes = shared_bytes
        if shared_bytes > 48 * 1024 and hasattr(function, "set_max_dynamic_shared"):
            _allow_shared(function, shared_bytes)
        self.format, self.offsets, self.size = param_layout([k for _, k in given])
        #: The parameter block's layout as a ``struct.Struct`` (``pack_into`` fills a block).
        self.struct = struct.Struct(self.format)
        if driver is None:
            from tilejit.runtime.device import initialized_driver

            driver = initialized_driver()
        self.driver = driver
        ex = getattr(driver, "cuLaunchKernelEx", None)
        #: Whether launches go through ``cuLaunchKernelEx`` (else the legacy ``cuLaunchKernel``).
        self.uses_ex = ex is not None
        #: The address of that driver entry point, and a ctypes function calling it (all pointers ``void*``).
        self.entry_point = _address(ex) if ex is not None else _address(driver.cuLaunchKernel)
        self.call_driver = launch_proto(ex is not None)(self.entry_point)
        #: The kernel's ``CUfunction`` handle.
        self.handle = int(function.handle)
        self._owner_thread = threading.get_ident()
        #: Each thread's checked launches and generated functions (:class:`~tilejit.runtime.dispatch.FirstLaunches`);
        #: the creating thread's is ``launch``.
        self.first_launches = FirstLaunches(self._function_for)
        self.source = ""  # the generated ``launch`` function's source, once it is made

    @functools.cached_property
    def launch(self) -> Callable[..., None]:
        """The generated launch function of the creating thread, made on first use: each generated function costs
        a compile() on the way to a first launch (per signature and process; then an exec)."""
        from tilejit.runtime.fastlaunch import generate  # not needed until a kernel's fast path is made

        launch = generate(self, self._owner_thread)
        self.source = launch.source  # type: ignore[attr-defined]
        return launch

    def __repr__(self) -> str:
        sig = ", ".join(f"{k} {n}" for n, k in self.params)
        return f"<tilejit.Launcher {self.name}({sig}) block={self.block} shared={self.shared_bytes}>"

    # ``launcher(grid, args, stream=None)`` resolves straight to the generated ``launch`` function
    # (a C-level property lookup, no extra Python frame).
    __call__ = property(operator.attrgetter("launch"))

    # ------------------------------------------------------------------ code generation

    def entry(self, block_key: Any, shared_key: int, device: Any, fallback: Callable[..., None],
              thread: int | None = None) -> Callable[..., None]:
        """A launch function with RawKernel's signature ``(grid, block, args, stream=None, shared_mem=0)``
        that launches directly while ``block``, ``shared_mem`` and the current device are ``block_key``,
        ``shared_key`` and ``device`` and the caller is ``thread`` (default: the launcher's), and otherwise
        hands the call to ``fallback``. It reads that thread's current device and stream."""
        from tilejit.runtime.fastlaunch import generate

        owner = self._owner_thread if thread is None else thread
        return generate(self, owner, (block_key, shared_key, device, fallback))

    def private_launch(self, thread: int) -> Callable[..., None]:
        """Another launch function like ``launch`` for calls from ``thread`` (the same code, no compile), with
        buffers of its own. Its ``now()`` relaunches exactly its last launch (None without ``cuLaunchKernelEx``),
        for a caller that knows the arguments, grid and stream (pass it as a raw handle) are unchanged."""
        from tilejit.runtime.fastlaunch import generate

        return generate(self, thread)

    def _function_for(self, thread: int) -> Callable[..., None]:
        """``first_launches``' generated function for ``thread``: ``launch`` for the creating thread."""
        return self.launch if thread == self._owner_thread else self.private_launch(thread)

    @property
    def generated(self) -> bool:
        """Whether ``launch`` has been generated (made on first use)."""
        return "launch" in self.__dict__

    @property
    def owner_thread(self) -> int:
        """The thread whose launches use ``launch``'s buffers; others take functions of their own."""
        return self._owner_thread

    def launch_any_thread(self, grid: Any, args: Sequence[Any], stream: Any = None) -> None:
        """A launch from any thread, by :attr:`first_launches`: the thread's first ``CHECKED_LAUNCHES`` take the
        checked path, later ones its generated function (``launch`` for the creating thread)."""
        launch = self.first_launches.function(threading.get_ident())
        if launch is None:
            self.launch_checked(grid, args, stream)
        else:
            launch(grid, args, stream)

    def where(self, i: int) -> str:
        """Parameter ``i`` as error messages name it."""
        name, kind = self.params[i]
        return f"parameter '{name}' ({kind}) of kernel '{self.name}'"

    # ------------------------------------------------------------------ slow path and errors

    def convert_args(self, args: Sequence[Any]) -> list[Any]:
        """Checked conversion of all arguments to the flat struct values (raises ``LaunchError``)."""
        names = ", ".join(n for n, _ in self.params)
        if not isinstance(args, tuple | list) or isinstance(args, ArrayView):
            raise LaunchError(
                f"kernel '{self.name}': args must be a tuple or list of its {len(self.params)} arguments "
                f"({names}), got {_type_name(args)}"
            )
        if len(args) != len(self.params):
            raise LaunchError(
                f"kernel '{self.name}' takes {len(self.params)} argument(s) ({names}), got {len(args)}"
            )
        values: list[Any] = []
        converted: list[tuple[Any, ...]] = []
        for i, ((_, kind), value) in enumerate(zip(self.params, args)):
            converted.append(kind.convert(value, self.where(i)))
            values += converted[-1]
        if self.derived:
            from tilejit.runtime.tensormap import launch_tensor_map

            for _, kind, src in self.derived:
                ptr, n = converted[src][0], kind.ndim
                assert kind.dtype is not None
                values.append(launch_tensor_map(kind.dtype, ptr, converted[src][1:1 + n], converted[src][1 + n:],
                                                kind.box, kind.swizzle, self.driver))
        return values

    def pack(self, args: Sequence[Any]) -> bytes:
        """The parameter block for ``args``, as the kernel will receive it (checked path)."""
        return self.struct.pack(*self.convert_args(args))

    def explain(self, grid: Any, args: Any, stream: Any, exc: BaseException) -> BaseException:
        """The precise error behind a failed fast path (``exc`` itself if none is found)."""
        try:
            values = self.convert_args(args)
            self.struct.pack(*values)
            check_cluster_grid(self.kernel_name, grid3(grid), self.cluster)
            stream_handle(stream)
        except LaunchError as err:
            return err
        except (TypeError, ValueError) as err:
            return LaunchError(f"kernel '{self.name}': stream: {err}")
        except (struct.error, OverflowError) as err:
            return LaunchError(f"kernel '{self.name}': {err}")
        return exc

    def launch_checked(self, grid: Any, args: Sequence[Any], stream: Any = None, retry: bool = True) -> None:
        """The same launch with fresh buffers and full checks, no generated code: for each thread's first few
        launches (generating the fast path costs a compile()), and threads past ``MAX_THREAD_LAUNCHERS``."""
        values = self.convert_args(args)
        gx, gy, gz = grid3(grid)
        if self.cluster > 1:
            check_cluster_grid(self.kernel_name, (gx, gy, gz), self.cluster)
        try:
            h = stream_handle(stream)
        except (TypeError, ValueError) as err:
            raise LaunchError(f"kernel '{self.name}': stream: {err}") from None
        bufs = LaunchBuffers(self.size, self.offsets, self.block, self.shared_bytes)
        if values:
            self.struct.pack_into(bufs.params, 0, *values)
        kparams, extra = bufs.kernel_params_and_extra(self.param_passing)
        if self.uses_ex:
            CONFIG.pack_into(bufs.config, 0, gx, gy, gz, *self.block, self.shared_bytes, h)
            status = self.call_driver(bufs.config_addr, self.handle, kparams or None, extra or None)
        else:
            status = self.call_driver(self.handle, gx, gy, gz, *self.block, self.shared_bytes, h, kparams or None,
                                      extra or None)
        if status:
            self.failed(status, grid, args, stream, retry)

    def failed(self, status: int, grid: Any, args: Any, stream: Any, retry: bool = True) -> None:
        """A launch returned ``status``: fix a missing/wrong current context and retry once, else raise. A grid
        that does not hold whole clusters (the driver refuses it) is refused with its own message."""
        if self.cluster > 1:
            try:
                dims = grid3(grid)
            except LaunchError:
                dims = None
            if dims is not None:
                check_cluster_grid(self.kernel_name, dims, self.cluster)
        ctx = getattr(self.function, "context", None)
        if retry and ctx is not None and status in (
            _CUDA_ERROR_INVALID_CONTEXT, _CUDA_ERROR_INVALID_HANDLE, _CUDA_ERROR_CONTEXT_IS_DESTROYED
        ) and not ctx.is_current():
            ctx.make_current()
            self.launch_checked(grid, args, stream, retry=False)
            return
        detail = (
            f"launching kernel '{self.name}' with grid={grid!r} block={self.block} "
            f"shared_bytes={self.shared_bytes} on stream {stream_handle(stream):#x}"
        )
        check = getattr(self.driver, "check", None)
        if check is not None:
            check(status, "cuLaunchKernelEx" if self.uses_ex else "cuLaunchKernel", detail)
        raise CUDAError("cuLaunchKernel", status, f"error {status}", "launch failed", detail)


__all__ = ["CHECKED_LAUNCHES", "CONFIG", "IMMUTABLE_ARGS", "MAX_THREAD_LAUNCHERS", "LaunchBuffers", "Launcher",
           "ParamKind", "block3", "check_cluster_grid", "derived_params", "grid3", "launch_proto", "param_layout"]
