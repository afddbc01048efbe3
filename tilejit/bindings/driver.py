"""ctypes bindings of the CUDA driver API (libcuda / nvcuda): find, load and bind; no policy.

Entry points are resolved through ``cuGetProcAddress`` at an explicit CUDA version per symbol, so a
newer driver hands back exactly the ABI declared here (e.g. ``cuMemAlloc`` at 3020 is ``cuMemAlloc_v2``)
and never a later revision with another signature. Nothing calls ``cuInit`` here.
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import POINTER, c_char_p, c_float, c_int, c_size_t, c_ubyte, c_uint, c_ulonglong, c_void_p
from typing import Any

from tilejit import config
from tilejit.bindings import loader
from tilejit.bindings.loader import Candidate
from tilejit.errors import Attempt, CUDAError, DriverVersionError, LibraryNotFoundError
from tilejit.records import Record

# ----------------------------------------------------------------------------- types

CUresult = c_int
CUdevice = c_int
CUdeviceptr = ctypes.c_uint64
CUcontext = c_void_p
CUmodule = c_void_p
CUfunction = c_void_p
CUstream = c_void_p
CUevent = c_void_p
CUlibrary = c_void_p
CUkernel = c_void_p
CUenum = c_int  # every CUDA enum parameter is a 32-bit int


class _Dim3(ctypes.Structure):
    _fields_ = [("x", c_uint), ("y", c_uint), ("z", c_uint)]


class CUlaunchAttributeValue(ctypes.Union):
    """``CUlaunchAttributeValue``: 64 bytes; the members tilejit sets."""

    _fields_ = [
        ("pad", ctypes.c_char * 64),
        ("cooperative", c_int),
        ("clusterDim", _Dim3),
        ("priority", c_int),
        ("programmaticStreamSerializationAllowed", c_int),
        ("preferredClusterDim", _Dim3),
        ("sharedMemCarveout", c_uint),
    ]


class CUlaunchAttribute(ctypes.Structure):
    """``CUlaunchAttribute``: an attribute id padded to 8 bytes, then its value."""

    _fields_ = [("id", c_int), ("pad", ctypes.c_char * 4), ("value", CUlaunchAttributeValue)]


class CUlaunchConfig(ctypes.Structure):
    """``CUlaunchConfig`` for ``cuLaunchKernelEx`` (CUDA 11.8+)."""

    _fields_ = [
        ("gridDimX", c_uint),
        ("gridDimY", c_uint),
        ("gridDimZ", c_uint),
        ("blockDimX", c_uint),
        ("blockDimY", c_uint),
        ("blockDimZ", c_uint),
        ("sharedMemBytes", c_uint),
        ("hStream", CUstream),
        ("attrs", POINTER(CUlaunchAttribute)),
        ("numAttrs", c_uint),
    ]


# ----------------------------------------------------------------------------- constants

CU_LAUNCH_PARAM_END = c_void_p(0)
CU_LAUNCH_PARAM_BUFFER_POINTER = c_void_p(1)
CU_LAUNCH_PARAM_BUFFER_SIZE = c_void_p(2)

CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1
CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2
CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y = 3
CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z = 4
CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5
CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y = 6
CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = 7
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8
CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY = 9
CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10
CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK = 12
CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_INTEGRATED = 18
CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS = 31
CU_DEVICE_ATTRIBUTE_ECC_ENABLED = 32
CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33
CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34
CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36
CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37
CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38
CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39
CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41
CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81
CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR = 82
CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH = 95
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR = 106
CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115
CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH = 120

CU_JIT_MAX_REGISTERS = 0
CU_JIT_THREADS_PER_BLOCK = 1
CU_JIT_WALL_TIME = 2
CU_JIT_INFO_LOG_BUFFER = 3
CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4
CU_JIT_ERROR_LOG_BUFFER = 5
CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
CU_JIT_OPTIMIZATION_LEVEL = 7
CU_JIT_TARGET_FROM_CUCONTEXT = 8
CU_JIT_TARGET = 9
CU_JIT_FALLBACK_STRATEGY = 10
CU_JIT_GENERATE_DEBUG_INFO = 11
CU_JIT_LOG_VERBOSE = 12
CU_JIT_GENERATE_LINE_INFO = 13
CU_JIT_CACHE_MODE = 14

CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0
CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES = 2
CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3
CU_FUNC_ATTRIBUTE_NUM_REGS = 4
CU_FUNC_ATTRIBUTE_PTX_VERSION = 5
CU_FUNC_ATTRIBUTE_BINARY_VERSION = 6
CU_FUNC_ATTRIBUTE_CACHE_MODE_CA = 7
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9

CU_POINTER_ATTRIBUTE_CONTEXT = 1
CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3
CU_POINTER_ATTRIBUTE_HOST_POINTER = 4
CU_POINTER_ATTRIBUTE_IS_MANAGED = 8
CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11
CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12

CU_MEMORYTYPE_HOST = 1
CU_MEMORYTYPE_DEVICE = 2
CU_MEMORYTYPE_ARRAY = 3
CU_MEMORYTYPE_UNIFIED = 4

CU_STREAM_DEFAULT = 0
CU_STREAM_NON_BLOCKING = 1
CU_EVENT_DEFAULT = 0
CU_EVENT_BLOCKING_SYNC = 1
CU_EVENT_DISABLE_TIMING = 2
CU_CTX_SCHED_AUTO = 0
CU_CTX_SCHED_SPIN = 1
CU_CTX_SCHED_YIELD = 2
CU_CTX_SCHED_BLOCKING_SYNC = 4

CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
CU_LAUNCH_ATTRIBUTE_PRIORITY = 8

#: ``CUtensorMapDataType`` values (``cuTensorMapEncodeTiled``), by tilejit dtype name.
CU_TENSOR_MAP_DATA_TYPE: dict[str, int] = {
    "uint8": 0, "uint16": 1, "uint32": 2, "int32": 3, "uint64": 4, "int64": 5, "float16": 6, "float32": 7,
    "float64": 8, "bfloat16": 9,
}
CU_TENSOR_MAP_INTERLEAVE_NONE = 0
#: ``CUtensorMapSwizzle`` by the swizzle span in bytes (0: none).
CU_TENSOR_MAP_SWIZZLE: dict[int, int] = {0: 0, 32: 1, 64: 2, 128: 3}
CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2
CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0  # out-of-bounds elements read as zeros

CU_GET_PROC_ADDRESS_DEFAULT = 0
CU_GET_PROC_ADDRESS_SUCCESS = 0
CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1
CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_DEINITIALIZED = 4
CUDA_ERROR_STUB_LIBRARY = 34
CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER = 36
CUDA_ERROR_DEVICE_UNAVAILABLE = 46
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_INVALID_DEVICE = 101
CUDA_ERROR_INVALID_IMAGE = 200
CUDA_ERROR_INVALID_CONTEXT = 201
CUDA_ERROR_NO_BINARY_FOR_GPU = 209
CUDA_ERROR_INVALID_PTX = 218
CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222
CUDA_ERROR_JIT_COMPILER_NOT_FOUND = 221
CUDA_ERROR_INVALID_SOURCE = 300
CUDA_ERROR_FILE_NOT_FOUND = 301
CUDA_ERROR_SHARED_OBJECT_INIT_FAILED = 303
CUDA_ERROR_OPERATING_SYSTEM = 304
CUDA_ERROR_INVALID_HANDLE = 400
CUDA_ERROR_NOT_FOUND = 500
CUDA_ERROR_NOT_READY = 600
CUDA_ERROR_ILLEGAL_ADDRESS = 700
CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701
CUDA_ERROR_LAUNCH_TIMEOUT = 702
CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
CUDA_ERROR_CONTEXT_IS_DESTROYED = 709
CUDA_ERROR_ASSERT = 710
CUDA_ERROR_HARDWARE_STACK_ERROR = 714
CUDA_ERROR_ILLEGAL_INSTRUCTION = 715
CUDA_ERROR_MISALIGNED_ADDRESS = 716
CUDA_ERROR_INVALID_ADDRESS_SPACE = 717
CUDA_ERROR_INVALID_PC = 718
CUDA_ERROR_LAUNCH_FAILED = 719
CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE = 720
CUDA_ERROR_NOT_PERMITTED = 800
CUDA_ERROR_NOT_SUPPORTED = 801
CUDA_ERROR_SYSTEM_NOT_READY = 802
CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803
CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804
CUDA_ERROR_INVALID_CLUSTER_SIZE = 912
CUDA_ERROR_UNKNOWN = 999

_ERROR_NAMES: dict[int, str] = {
    value: name for name, value in globals().items() if name.startswith("CUDA_ERROR_") or name == "CUDA_SUCCESS"
}


def error_name(code: int) -> str:
    """Symbolic name of a CUresult, e.g. ``CUDA_ERROR_OUT_OF_MEMORY``; works without a driver."""
    return _ERROR_NAMES.get(code, f"CUDA_ERROR_{code}")


MIN_DRIVER_VERSION = 11000
"""Oldest driver tilejit binds: CUDA 11.0 (PTX from NVRTC 11.x needs at least that)."""

DRIVER_HINT = (
    "install an NVIDIA driver (it provides libcuda.so.1 / nvcuda.dll), or set "
    f"{config.CUDA_DRIVER.name} to the full path of that library"
)


def format_version(version: int) -> str:
    """13000 -> '13.0' (the driver's encoding: 1000*major + 10*minor)."""
    return f"{version // 1000}.{(version % 1000) // 10}"


# ----------------------------------------------------------------------------- the table


class Entry(Record):
    """One driver entry point: its base name, C signature as ctypes, and the ABI version to request.

    ``version`` is passed to cuGetProcAddress; ``symbols`` are the exported names with that same ABI,
    tried with dlsym when the driver has no cuGetProcAddress (before CUDA 11.3).
    """

    _fields = ("name", "argtypes", "version", "required", "symbols", "restype")
    __slots__ = _fields
    name: str
    argtypes: tuple[Any, ...]
    version: int
    required: bool
    symbols: tuple[str, ...]
    restype: Any

    def __init__(
        self, name: str, argtypes: tuple[Any, ...], version: int, required: bool = True,
        symbols: tuple[str, ...] = (), restype: Any = CUresult,
    ) -> None:
        self._init(name, argtypes, version, required, symbols, restype)

    @property
    def dlsym_names(self) -> tuple[str, ...]:
        return self.symbols or (self.name,)


_P = POINTER
_E = Entry
ENTRIES: tuple[Entry, ...] = (
    _E("cuGetErrorName", (CUresult, _P(c_char_p)), 6000),
    _E("cuGetErrorString", (CUresult, _P(c_char_p)), 6000),
    _E("cuInit", (c_uint,), 2000),
    _E("cuDriverGetVersion", (_P(c_int),), 2020),
    _E("cuDeviceGet", (_P(CUdevice), c_int), 2000),
    _E("cuDeviceGetCount", (_P(c_int),), 2000),
    _E("cuDeviceGetName", (c_char_p, c_int, CUdevice), 2000),
    _E("cuDeviceGetAttribute", (_P(c_int), CUenum, CUdevice), 2000),
    _E("cuDeviceGetPCIBusId", (c_char_p, c_int, CUdevice), 4010),
    _E("cuDeviceTotalMem", (_P(c_size_t), CUdevice), 3020, symbols=("cuDeviceTotalMem_v2",)),
    _E("cuDevicePrimaryCtxRetain", (_P(CUcontext), CUdevice), 7000),
    _E("cuDevicePrimaryCtxRelease", (CUdevice,), 11000, symbols=("cuDevicePrimaryCtxRelease_v2",)),
    _E("cuDevicePrimaryCtxGetState", (CUdevice, _P(c_uint), _P(c_int)), 7000),
    _E("cuCtxSetCurrent", (CUcontext,), 4000),
    _E("cuCtxGetCurrent", (_P(CUcontext),), 4000),
    _E("cuCtxPushCurrent", (CUcontext,), 4000, symbols=("cuCtxPushCurrent_v2",)),
    _E("cuCtxPopCurrent", (_P(CUcontext),), 4000, symbols=("cuCtxPopCurrent_v2",)),
    # 2000 on purpose: CUDA 13 added cuCtxGetDevice_v2/cuCtxSynchronize_v2 (13000) with an extra CUcontext argument.
    _E("cuCtxGetDevice", (_P(CUdevice),), 2000),
    _E("cuCtxSynchronize", (), 2000),
    _E("cuStreamCreate", (_P(CUstream), c_uint), 2000),
    _E("cuStreamDestroy", (CUstream,), 4000, symbols=("cuStreamDestroy_v2",)),
    _E("cuStreamSynchronize", (CUstream,), 2000),
    _E("cuStreamQuery", (CUstream,), 2000),
    _E("cuStreamWaitEvent", (CUstream, CUevent, c_uint), 3020),
    _E("cuStreamGetId", (CUstream, _P(c_ulonglong)), 12000, required=False),
    _E("cuEventCreate", (_P(CUevent), c_uint), 2000),
    _E("cuEventDestroy", (CUevent,), 4000, symbols=("cuEventDestroy_v2",)),
    _E("cuEventRecord", (CUevent, CUstream), 2000),
    _E("cuEventSynchronize", (CUevent,), 2000),
    _E("cuEventQuery", (CUevent,), 2000),
    # 12080 is cuEventElapsedTime_v2 (same signature); older drivers hand back the original.
    _E(
        "cuEventElapsedTime",
        (_P(c_float), CUevent, CUevent),
        12080,
        symbols=("cuEventElapsedTime_v2", "cuEventElapsedTime"),
    ),
    _E("cuMemAlloc", (_P(CUdeviceptr), c_size_t), 3020, symbols=("cuMemAlloc_v2",)),
    _E("cuMemFree", (CUdeviceptr,), 3020, symbols=("cuMemFree_v2",)),
    _E("cuMemGetInfo", (_P(c_size_t), _P(c_size_t)), 3020, symbols=("cuMemGetInfo_v2",)),
    _E("cuMemHostAlloc", (_P(c_void_p), c_size_t, c_uint), 2020),
    _E("cuMemFreeHost", (c_void_p,), 2000),
    _E("cuMemcpyHtoD", (CUdeviceptr, c_void_p, c_size_t), 3020, symbols=("cuMemcpyHtoD_v2",)),
    _E("cuMemcpyDtoH", (c_void_p, CUdeviceptr, c_size_t), 3020, symbols=("cuMemcpyDtoH_v2",)),
    _E("cuMemcpyDtoD", (CUdeviceptr, CUdeviceptr, c_size_t), 3020, symbols=("cuMemcpyDtoD_v2",)),
    _E("cuMemcpyHtoDAsync", (CUdeviceptr, c_void_p, c_size_t, CUstream), 3020, symbols=("cuMemcpyHtoDAsync_v2",)),
    _E("cuMemcpyDtoHAsync", (c_void_p, CUdeviceptr, c_size_t, CUstream), 3020, symbols=("cuMemcpyDtoHAsync_v2",)),
    _E("cuMemcpyDtoDAsync", (CUdeviceptr, CUdeviceptr, c_size_t, CUstream), 3020, symbols=("cuMemcpyDtoDAsync_v2",)),
    _E("cuMemsetD8", (CUdeviceptr, c_ubyte, c_size_t), 3020, symbols=("cuMemsetD8_v2",)),
    _E("cuMemsetD8Async", (CUdeviceptr, c_ubyte, c_size_t, CUstream), 3020),
    _E("cuMemsetD32", (CUdeviceptr, c_uint, c_size_t), 3020, symbols=("cuMemsetD32_v2",)),
    _E("cuMemsetD32Async", (CUdeviceptr, c_uint, c_size_t, CUstream), 3020),
    _E("cuMemAllocAsync", (_P(CUdeviceptr), c_size_t, CUstream), 11020, required=False),
    _E("cuMemFreeAsync", (CUdeviceptr, CUstream), 11020, required=False),
    _E("cuPointerGetAttribute", (c_void_p, CUenum, CUdeviceptr), 4000),
    _E("cuModuleLoadDataEx", (_P(CUmodule), c_void_p, c_uint, _P(CUenum), _P(c_void_p)), 2010),
    _E("cuModuleUnload", (CUmodule,), 2000),
    _E("cuModuleGetFunction", (_P(CUfunction), CUmodule, c_char_p), 2000),
    _E(
        "cuModuleGetGlobal",
        (_P(CUdeviceptr), _P(c_size_t), CUmodule, c_char_p),
        3020,
        symbols=("cuModuleGetGlobal_v2",),
    ),
    _E("cuFuncGetAttribute", (_P(c_int), CUenum, CUfunction), 2020),
    _E("cuFuncSetAttribute", (CUfunction, CUenum, c_int), 9000),
    _E("cuFuncGetName", (_P(c_char_p), CUfunction), 12030, required=False),
    _E(
        "cuLaunchKernel",
        (CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, _P(c_void_p), _P(c_void_p)),
        4000,
    ),
    _E("cuLaunchKernelEx", (_P(CUlaunchConfig), CUfunction, _P(c_void_p), _P(c_void_p)), 11060, required=False),
    _E(
        "cuLibraryLoadData",
        (_P(CUlibrary), c_void_p, _P(CUenum), _P(c_void_p), c_uint, _P(CUenum), _P(c_void_p), c_uint),
        12000,
        required=False,
    ),
    _E("cuLibraryUnload", (CUlibrary,), 12000, required=False),
    _E("cuLibraryGetKernel", (_P(CUkernel), CUlibrary, c_char_p), 12000, required=False),
    _E("cuKernelGetFunction", (_P(CUfunction), CUkernel), 12000, required=False),
    _E("cuOccupancyMaxActiveBlocksPerMultiprocessor", (_P(c_int), CUfunction, c_int, c_size_t), 6050),
    # CUDA 12.0+ (absent from 11.x drivers: tensor maps exist from Hopper's toolkit on); tensorMap is a 64-byte
    # aligned CUtensorMap of 128 opaque bytes, then data type, rank, address, dims, byte strides (rank - 1), box,
    # element strides, interleave, swizzle, L2 promotion and out-of-bounds fill.
    _E(
        "cuTensorMapEncodeTiled",
        (c_void_p, CUenum, c_uint, c_void_p, _P(c_ulonglong), _P(c_ulonglong), _P(c_uint), _P(c_uint), CUenum,
         CUenum, CUenum, CUenum),
        12000,
        required=False,
    ),
)
ENTRY_BY_NAME: dict[str, Entry] = {e.name: e for e in ENTRIES}


# ----------------------------------------------------------------------------- discovery


def _driver_candidates() -> list[Candidate]:
    explicit = loader.explicit_file(config.CUDA_DRIVER)
    if explicit.kind == "file":  # an explicit file is the only place looked at: no silent fallback
        return [explicit]
    cands: list[Candidate] = [explicit]  # says why there is none: unset, or set but empty
    if loader.IS_WINDOWS:
        cands += loader.system_sonames(["nvcuda.dll"])
        return cands
    cands += loader.already_loaded(r"libcuda\.so(\.\d+)+", needle="libcuda")
    cands += loader.system_sonames(["libcuda.so.1"])
    # Last, and only with the stub check: a bare libcuda.so is often the toolkit's link-time stub.
    cands += loader.system_sonames(["libcuda.so"])
    return cands


def _reject_non_driver(lib: ctypes.CDLL, path: str) -> str | None:
    """Why a loaded file is not a usable driver: not libcuda at all, or the toolkit's stub."""
    fn = getattr(lib, "cuDriverGetVersion", None)
    if fn is None:
        return "not a CUDA driver (no cuDriverGetVersion)"
    fn.argtypes = [POINTER(c_int)]
    fn.restype = c_int
    version = c_int(0)
    status = fn(ctypes.byref(version))
    if status == CUDA_ERROR_STUB_LIBRARY:
        return "this is the CUDA toolkit's stub libcuda (cuDriverGetVersion returned CUDA_ERROR_STUB_LIBRARY(34))"
    if status != 0:
        return f"cuDriverGetVersion failed with {error_name(status)} ({status})"
    return None


_GetProcV1 = ctypes.CFUNCTYPE(c_int, c_char_p, POINTER(c_void_p), c_int, ctypes.c_uint64)
_GetProcV2 = ctypes.CFUNCTYPE(c_int, c_char_p, POINTER(c_void_p), c_int, ctypes.c_uint64, POINTER(c_int))


class Driver:
    """The loaded CUDA driver: every entry point of ``ENTRIES`` as an attribute named by its base name.

    Each attribute is a ctypes function pointer (argtypes set, restype c_int), or None for an optional
    entry point this driver lacks (``missing`` says why).
    """

    path: str
    version: int
    missing: dict[str, str]

    cuGetErrorName: Any
    cuGetErrorString: Any
    cuInit: Any
    cuDriverGetVersion: Any
    cuDeviceGet: Any
    cuDeviceGetCount: Any
    cuDeviceGetName: Any
    cuDeviceGetAttribute: Any
    cuDeviceGetPCIBusId: Any
    cuDeviceTotalMem: Any
    cuDevicePrimaryCtxRetain: Any
    cuDevicePrimaryCtxRelease: Any
    cuDevicePrimaryCtxGetState: Any
    cuCtxSetCurrent: Any
    cuCtxGetCurrent: Any
    cuCtxPushCurrent: Any
    cuCtxPopCurrent: Any
    cuCtxGetDevice: Any
    cuCtxSynchronize: Any
    cuStreamCreate: Any
    cuStreamDestroy: Any
    cuStreamSynchronize: Any
    cuStreamQuery: Any
    cuStreamWaitEvent: Any
    cuStreamGetId: Any
    cuEventCreate: Any
    cuEventDestroy: Any
    cuEventRecord: Any
    cuEventSynchronize: Any
    cuEventQuery: Any
    cuEventElapsedTime: Any
    cuMemAlloc: Any
    cuMemFree: Any
    cuMemGetInfo: Any
    cuMemHostAlloc: Any
    cuMemFreeHost: Any
    cuMemcpyHtoD: Any
    cuMemcpyDtoH: Any
    cuMemcpyDtoD: Any
    cuMemcpyHtoDAsync: Any
    cuMemcpyDtoHAsync: Any
    cuMemcpyDtoDAsync: Any
    cuMemsetD8: Any
    cuMemsetD8Async: Any
    cuMemsetD32: Any
    cuMemsetD32Async: Any
    cuMemAllocAsync: Any
    cuMemFreeAsync: Any
    cuPointerGetAttribute: Any
    cuModuleLoadDataEx: Any
    cuModuleUnload: Any
    cuModuleGetFunction: Any
    cuModuleGetGlobal: Any
    cuFuncGetAttribute: Any
    cuFuncSetAttribute: Any
    cuFuncGetName: Any
    cuLaunchKernel: Any
    cuLaunchKernelEx: Any
    cuLibraryLoadData: Any
    cuLibraryUnload: Any
    cuLibraryGetKernel: Any
    cuKernelGetFunction: Any
    cuOccupancyMaxActiveBlocksPerMultiprocessor: Any
    cuTensorMapEncodeTiled: Any

    def __init__(self, lib: ctypes.CDLL, path: str) -> None:
        self._lib = lib
        self.path = path
        self.missing = {}
        get_version = lib.cuDriverGetVersion
        get_version.argtypes = [POINTER(c_int)]
        get_version.restype = c_int
        version = c_int(0)
        status = get_version(ctypes.byref(version))
        if status != 0:
            raise LibraryNotFoundError(
                "CUDA driver",
                [Attempt(path, f"cuDriverGetVersion failed with {error_name(status)} ({status})")],
                DRIVER_HINT,
            )
        self.version = version.value
        if self.version < MIN_DRIVER_VERSION:
            raise DriverVersionError(
                f"the CUDA driver at {path} supports CUDA {format_version(self.version)} ({self.version}); "
                f"tilejit needs a driver for CUDA {format_version(MIN_DRIVER_VERSION)} ({MIN_DRIVER_VERSION}) "
                "or newer: update the NVIDIA driver"
            )
        self._getproc_v2 = self._symbol_as(lib, "cuGetProcAddress_v2", _GetProcV2)
        self._getproc_v1 = None if self._getproc_v2 else self._symbol_as(lib, "cuGetProcAddress", _GetProcV1)
        for entry in ENTRIES:
            address, why = self._resolve(entry)
            if address is None:
                if entry.required:
                    self._raise_missing(entry, why)
                self.missing[entry.name] = why
                setattr(self, entry.name, None)
                continue
            fn = ctypes.CFUNCTYPE(entry.restype, *entry.argtypes)(address)
            setattr(self, entry.name, fn)

    @staticmethod
    def _symbol_as(lib: ctypes.CDLL, name: str, proto: Any) -> Any:
        address = loader.dlsym(lib, name)
        return proto(address) if address else None

    def _resolve(self, entry: Entry) -> tuple[int | None, str]:
        """Address of an entry point at its ABI version, or None and why not."""
        name = entry.name.encode()
        pfn = c_void_p(0)
        if self._getproc_v2 is not None:
            result = c_int(-1)
            status = self._getproc_v2(
                name, ctypes.byref(pfn), entry.version, CU_GET_PROC_ADDRESS_DEFAULT, ctypes.byref(result)
            )
            if status == 0 and result.value == CU_GET_PROC_ADDRESS_SUCCESS and pfn.value:
                return pfn.value, ""
            if result.value == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT:
                return None, f"the driver has {entry.name} only for versions newer than {entry.version}"
            return None, f"cuGetProcAddress_v2({entry.name}, {entry.version}) returned {error_name(status)}"
        if self._getproc_v1 is not None:
            status = self._getproc_v1(name, ctypes.byref(pfn), entry.version, CU_GET_PROC_ADDRESS_DEFAULT)
            if status == 0 and pfn.value:
                return pfn.value, ""
            return None, f"cuGetProcAddress({entry.name}, {entry.version}) returned {error_name(status)}"
        for symbol in entry.dlsym_names:
            address = loader.dlsym(self._lib, symbol)
            if address:
                return address, ""
        return None, f"no exported symbol {' or '.join(entry.dlsym_names)}"

    def _raise_missing(self, entry: Entry, why: str) -> None:
        if self.version < entry.version:
            raise DriverVersionError(
                f"the CUDA driver at {self.path} supports CUDA {format_version(self.version)} ({self.version}) "
                f"but {entry.name} needs CUDA {format_version(entry.version)} ({entry.version}): "
                "update the NVIDIA driver"
            )
        raise LibraryNotFoundError(
            "CUDA driver",
            [
                Attempt(
                    self.path, f"required entry point {entry.name} missing from driver version {self.version}: {why}"
                )
            ],
            DRIVER_HINT,
        )

    def has(self, name: str) -> bool:
        """Whether the entry point ``name`` (base name, e.g. ``cuLaunchKernelEx``) was found."""
        if name not in ENTRY_BY_NAME:
            raise AttributeError(f"{name!r} is not a CUDA driver entry point tilejit binds")
        return getattr(self, name) is not None

    def get_proc_address(self, name: str, version: int) -> int | None:
        """Address of any entry point ``name`` at ABI ``version`` (for callers binding extra functions)."""
        probe = Entry(name, (), version)
        return self._resolve(probe)[0]

    def error_name(self, status: int) -> str:
        """The driver's name for a CUresult, falling back to the built-in table."""
        text = c_char_p()
        if self.cuGetErrorName(status, ctypes.byref(text)) == 0 and text.value:
            return text.value.decode(errors="replace")
        return error_name(status)

    def error_string(self, status: int) -> str:
        """The driver's description of a CUresult."""
        text = c_char_p()
        if self.cuGetErrorString(status, ctypes.byref(text)) == 0 and text.value:
            return text.value.decode(errors="replace")
        return "no description from the driver"

    def check(self, status: int, function: str, detail: str = "") -> None:
        """Raise CUDAError when a driver call returned non-zero."""
        if status == 0:
            return
        raise CUDAError(function, status, self.error_name(status), self.error_string(status), detail)

    def __repr__(self) -> str:
        return f"<Driver CUDA {format_version(self.version)} at {self.path}>"


def load_driver(path: str | None = None) -> Driver:
    """Load the driver (from ``path`` only, if given) and bind it; uncached."""
    if path is not None:
        cands = [Candidate.file(path, "explicit path")]
    else:
        cands = _driver_candidates()
    lib, found = loader.find_and_load("CUDA driver (libcuda)", cands, DRIVER_HINT, reject=_reject_non_driver)
    return Driver(lib, found)


_lock = threading.Lock()
_driver: Driver | None = None


def driver() -> Driver:
    """The process-wide driver, loaded on first call (thread-safe). Failures are not cached."""
    global _driver
    if _driver is None:
        with _lock:
            if _driver is None:
                _driver = load_driver()
    return _driver
