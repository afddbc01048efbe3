"""Loading compiled code (CUBIN, PTX or fatbin) into the current context, and its kernels.

PTX from a compiler newer than the driver fails deep in the driver with error 222; tilejit reads
the PTX ``.version`` first and says which versions clash and what to do instead.
"""

from __future__ import annotations

import ctypes
import re
import time
from typing import TYPE_CHECKING, Literal

from tilejit.errors import DriverVersionError
from tilejit.logs import logger_for, ms_since
from tilejit.runtime.device import Device, get_device, initialized_driver

if TYPE_CHECKING:
    from typing import TypeAlias

    Kind: TypeAlias = Literal["cubin", "ptx", "fatbin"]  # type-checking only: costs ~70 us at import

# CUjit_option values for the log buffers (cuda.h).
_JIT_INFO_LOG_BUFFER = 3
_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4
_JIT_ERROR_LOG_BUFFER = 5
_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
_JIT_LOG_VERBOSE = 12
_LOG_SIZE = 16384

_CUDA_ERROR_NO_BINARY_FOR_GPU = 209
_CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222

# CUfunction_attribute values (cuda.h).
FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0
FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
FUNC_ATTRIBUTE_CONST_SIZE_BYTES = 2
FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3
FUNC_ATTRIBUTE_NUM_REGS = 4
FUNC_ATTRIBUTE_PTX_VERSION = 5
FUNC_ATTRIBUTE_BINARY_VERSION = 6
FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

#: Highest PTX ISA each CUDA release's driver loads: NVIDIA's PTX ISA release history
#: (CUDA 11.x → 7.x, 12.0-12.5 → 8.0-8.5, 12.6 → 8.5, 12.7 → 8.6, 12.8 → 8.7, 12.9 → 8.8, 13.x → 9.x).
PTX_ISA_BY_CUDA: dict[tuple[int, int], tuple[int, int]] = {
    **{(11, m): (7, m) for m in range(9)},
    **{(12, m): (8, m) for m in range(6)},
    (12, 6): (8, 5),
    (12, 7): (8, 6),
    (12, 8): (8, 7),
    (12, 9): (8, 8),
    (13, 0): (9, 0),
    (13, 1): (9, 1),
}

_PTX_VERSION = rb"^\s*\.version\s+(\d+)\.(\d+)"  # compiled on first use (PTX loads only)


def max_ptx_isa(driver_version: int) -> tuple[int, int]:
    """The newest PTX ISA a driver of ``cuDriverGetVersion`` value ``driver_version`` loads.

    Releases newer than the table follow the CUDA 13 pattern (PTX major = CUDA major - 4).
    """
    cuda = (driver_version // 1000, driver_version % 1000 // 10)
    known = PTX_ISA_BY_CUDA.get(cuda)
    if known is not None:
        return known
    older = [v for k, v in PTX_ISA_BY_CUDA.items() if k <= cuda]
    newest_known = max(PTX_ISA_BY_CUDA)
    if cuda > newest_known:
        return (cuda[0] - 4, cuda[1])
    return max(older) if older else (0, 0)


def ptx_isa_version(ptx: bytes | str) -> tuple[int, int] | None:
    """The ``.version X.Y`` of a PTX text, None if it has none."""
    data = ptx.encode() if isinstance(ptx, str) else ptx
    m = re.search(_PTX_VERSION, data, re.MULTILINE)
    return (int(m.group(1)), int(m.group(2))) if m else None


def check_ptx_version(ptx: bytes | str, driver_version: int) -> None:
    """Raise ``DriverVersionError`` if the driver is too old for this PTX's ISA version."""
    have = ptx_isa_version(ptx)
    if have is None:
        return
    limit = max_ptx_isa(driver_version)
    if have > limit:
        drv = f"{driver_version // 1000}.{driver_version % 1000 // 10}"
        need = min((k for k, v in PTX_ISA_BY_CUDA.items() if v >= have), default=None)
        need_text = f"CUDA {need[0]}.{need[1]}" if need else "newer CUDA"
        raise DriverVersionError(
            f"the PTX is ISA version {have[0]}.{have[1]} (from a {need_text} compiler), but the installed driver "
            f"supports CUDA {drv}, which loads PTX ISA up to {limit[0]}.{limit[1]}. Load a CUBIN instead "
            f"(tilejit's default; unset TILEJIT_EMIT_PTX), compile with an NVRTC no newer than CUDA {drv}, "
            "or update the NVIDIA driver"
        )


def detect_kind(image: bytes | str) -> Kind:
    """'cubin' (ELF), 'fatbin' (fatbin magic) or 'ptx' (text)."""
    if isinstance(image, str):
        return "ptx"
    if image[:4] == b"\x7fELF":
        return "cubin"
    if image[:4] == b"\x50\xed\x55\xba":
        return "fatbin"
    return "ptx"


class Module:
    """A loaded CUDA module; ``close()`` unloads it (functions keep it alive while referenced)."""

    def __init__(self, handle: int, device: Device, kind: Kind, log: str = "") -> None:
        self.handle = handle
        self.device = device
        self.kind = kind
        self.log = log
        self._functions: dict[str, Function] = {}

    @classmethod
    def load(cls, image: bytes | str, kind: Kind | None = None, *, device: Device | int | None = None) -> Module:
        """Load a CUBIN, PTX (str or bytes) or fatbin into ``device``'s context (default: current).

        Failures raise ``CUDAError`` carrying the driver's JIT error log; PTX newer than the driver
        raises ``DriverVersionError``.
        """
        if kind is None:
            kind = detect_kind(image)
        if kind not in ("cubin", "ptx", "fatbin"):
            raise ValueError(f"kind must be 'cubin', 'ptx' or 'fatbin', got {kind!r}")
        data = image.encode() if isinstance(image, str) else bytes(image)
        if not data:
            raise ValueError("cannot load an empty module image")
        d = initialized_driver()
        if kind == "ptx":
            check_ptx_version(data, d.version)
            if not data.endswith(b"\0"):
                data += b"\0"
        dev = get_device() if device is None else Device(device)
        dev.context.ensure_current()
        logger = logger_for(__name__)
        start = time.perf_counter() if logger is not None else 0.0

        out = ctypes.c_void_p(None)
        if kind == "cubin":
            # Nothing is JIT-compiled, so there is no log to collect; asking for one made a first load
            # about 150 us slower (measured on an H100, driver 580).
            info = err = None
            status = d.cuModuleLoadDataEx(ctypes.byref(out), data, 0, None, None)
        else:
            info = ctypes.create_string_buffer(_LOG_SIZE)
            err = ctypes.create_string_buffer(_LOG_SIZE)
            opts = (ctypes.c_int * 5)(
                _JIT_INFO_LOG_BUFFER, _JIT_INFO_LOG_BUFFER_SIZE_BYTES, _JIT_ERROR_LOG_BUFFER,
                _JIT_ERROR_LOG_BUFFER_SIZE_BYTES, _JIT_LOG_VERBOSE,
            )
            vals = (ctypes.c_void_p * 5)(
                ctypes.addressof(info), _LOG_SIZE, ctypes.addressof(err), _LOG_SIZE, 0,
            )
            status = d.cuModuleLoadDataEx(ctypes.byref(out), data, 5, opts, vals)
        if status != 0:
            log = "" if err is None else err.value.decode(errors="replace").strip()
            if status == _CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
                raise DriverVersionError(
                    f"the driver (CUDA {d.version // 1000}.{d.version % 1000 // 10}) cannot load this PTX: it "
                    "was made by a newer compiler. Load a CUBIN instead (tilejit's default) or compile with an "
                    f"older NVRTC.\n{log}".rstrip()
                )
            detail = f"JIT error log:\n{log}" if log else ""
            if status == _CUDA_ERROR_NO_BINARY_FOR_GPU:
                detail = (f"the {kind} has no code for this device ({dev.name}, {dev.arch}); compile for "
                          f"target {dev.arch}\n" + detail).rstrip()
            d.check(status, "cuModuleLoadDataEx", detail)
        log = "" if info is None else info.value.decode(errors="replace").strip()
        if logger is not None:
            logger.debug("loaded a %d-byte %s module on device %d (%s) in %.2f ms", len(data), kind, dev.ordinal,
                         dev.arch, ms_since(start))
        return cls(int(out.value or 0), dev, kind, log)

    def __repr__(self) -> str:
        return f"<tilejit.Module {self.kind} at {self.handle:#x}>"

    def get_function(self, name: str) -> Function:
        """The kernel ``name`` (its extern "C" or mangled symbol)."""
        fn = self._functions.get(name)
        if fn is not None:
            return fn
        if not self.handle:
            raise ValueError("the module was closed")
        d = initialized_driver()
        out = ctypes.c_void_p(None)
        status = d.cuModuleGetFunction(ctypes.byref(out), ctypes.c_void_p(self.handle), name.encode())
        if status != 0:
            d.check(status, "cuModuleGetFunction", f"no kernel named {name!r} in the module (is it extern \"C\"?)")
        fn = self._functions[name] = Function(int(out.value or 0), name, self)
        return fn

    def close(self) -> None:
        handle, self.handle = self.handle, 0
        if handle:
            self._functions.clear()
            d = initialized_driver()
            self.device.context.ensure_current()
            d.check(d.cuModuleUnload(ctypes.c_void_p(handle)), "cuModuleUnload")

    def __enter__(self) -> Module:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Function:
    """One kernel of a loaded module. Holds the module (so it stays loaded) and the context."""

    def __init__(self, handle: int, name: str, module: Module) -> None:
        self.handle = handle
        self.name = name
        self.module = module
        self.device = module.device
        self.context = module.device.context

    def __repr__(self) -> str:
        return f"<tilejit.Function {self.name}>"

    def attribute(self, attr: int) -> int:
        """A raw ``CUfunction_attribute`` value (see cuda.h)."""
        d = initialized_driver()
        out = ctypes.c_int(0)
        d.check(d.cuFuncGetAttribute(ctypes.byref(out), attr, ctypes.c_void_p(self.handle)), "cuFuncGetAttribute")
        return int(out.value)

    @property
    def num_regs(self) -> int:
        return self.attribute(FUNC_ATTRIBUTE_NUM_REGS)

    @property
    def max_threads(self) -> int:
        """Most threads per block this kernel can launch with (registers and launch bounds permitting)."""
        return self.attribute(FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)

    @property
    def shared_size_bytes(self) -> int:
        """Static shared memory per block."""
        return self.attribute(FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)

    @property
    def local_size_bytes(self) -> int:
        return self.attribute(FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)

    @property
    def const_size_bytes(self) -> int:
        return self.attribute(FUNC_ATTRIBUTE_CONST_SIZE_BYTES)

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self.attribute(FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)

    @property
    def ptx_version(self) -> int:
        return self.attribute(FUNC_ATTRIBUTE_PTX_VERSION)

    @property
    def binary_version(self) -> int:
        return self.attribute(FUNC_ATTRIBUTE_BINARY_VERSION)

    def set_max_dynamic_shared(self, nbytes: int) -> None:
        """Allow launches with up to ``nbytes`` of dynamic shared memory (needed above 48 KiB)."""
        limit = self.device.max_shared_memory_per_block_optin - self.shared_size_bytes
        if nbytes < 0 or nbytes > limit:
            raise ValueError(
                f"kernel {self.name!r} can use at most {limit} bytes of dynamic shared memory on {self.device.arch} "
                f"({self.device.max_shared_memory_per_block_optin} per block minus {self.shared_size_bytes} static); "
                f"{nbytes} were asked for"
            )
        d = initialized_driver()
        d.check(
            d.cuFuncSetAttribute(ctypes.c_void_p(self.handle), FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes),
            "cuFuncSetAttribute",
        )


__all__ = ["Function", "Module", "check_ptx_version", "detect_kind", "max_ptx_isa", "ptx_isa_version"]
