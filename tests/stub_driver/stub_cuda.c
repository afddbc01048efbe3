/* A stand-in CUDA driver for tests of tilejit.bindings.driver on machines without a GPU.
 *
 * Behaviour is chosen by environment variables read at call time:
 *   STUB_DRIVER_VERSION   value cuDriverGetVersion reports (default 13000)
 *   STUB_MISSING          comma-separated base names cuGetProcAddress reports as not found
 *   STUB_IS_TOOLKIT_STUB  when set, cuDriverGetVersion/cuInit return CUDA_ERROR_STUB_LIBRARY like the toolkit's stub
 *   STUB_TENSOR_MAP_FAIL  when set, cuTensorMapEncodeTiled returns CUDA_ERROR_INVALID_VALUE
 * Build flags: -DSTUB_NO_GETPROC_V2 (no cuGetProcAddress_v2, like a CUDA 11 driver), -DSTUB_NO_GETPROC (no
 * cuGetProcAddress at all, like a driver older than 11.3: entry points are found by versioned symbol name).
 *
 * "Device memory" is host memory, so memcpy/memset calls really move bytes and argument passing is checked.
 * stub_requested_version(name) tells tests which ABI version tilejit asked cuGetProcAddress for.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_STUB_LIBRARY 34
#define CUDA_ERROR_NOT_FOUND 500
#define WRONG_ABI 999 /* returned by unversioned legacy symbols that must never be bound */

static int stub_version(void) {
    const char *v = getenv("STUB_DRIVER_VERSION");
    return v ? atoi(v) : 13000;
}

#ifndef STUB_NO_GETPROC
static int is_missing(const char *name) {
    const char *list = getenv("STUB_MISSING");
    size_t n = strlen(name);
    while (list && *list) {
        const char *end = strchr(list, ',');
        size_t len = end ? (size_t)(end - list) : strlen(list);
        if (len == n && strncmp(list, name, n) == 0) return 1;
        list = end ? end + 1 : NULL;
    }
    return 0;
}
#endif

CUresult cuDriverGetVersion(int *version) {
    if (getenv("STUB_IS_TOOLKIT_STUB")) return CUDA_ERROR_STUB_LIBRARY;
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = stub_version();
    return CUDA_SUCCESS;
}

CUresult cuInit(unsigned int flags) {
    (void)flags;
    return getenv("STUB_IS_TOOLKIT_STUB") ? CUDA_ERROR_STUB_LIBRARY : CUDA_SUCCESS;
}

static const char *err_name(CUresult e) {
    switch (e) {
        case 0: return "CUDA_SUCCESS";
        case 1: return "CUDA_ERROR_INVALID_VALUE";
        case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
        case 500: return "CUDA_ERROR_NOT_FOUND";
        default: return NULL;
    }
}

static const char *err_string(CUresult e) {
    switch (e) {
        case 0: return "no error";
        case 1: return "invalid argument";
        case 2: return "out of memory";
        case 500: return "named symbol not found";
        default: return NULL;
    }
}

CUresult cuGetErrorName(CUresult e, const char **s) {
    *s = err_name(e);
    return *s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult e, const char **s) {
    *s = err_string(e);
    return *s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuDeviceGetCount(int *count) {
    const char *v = getenv("STUB_DEVICE_COUNT");
    *count = v ? atoi(v) : 1;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(int *dev, int ordinal) {
    *dev = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, int dev) {
    (void)dev;
    if (len <= 0) return CUDA_ERROR_INVALID_VALUE;
    strncpy(name, "Stub GPU", (size_t)len - 1);
    name[len - 1] = 0;
    return CUDA_SUCCESS;
}

/* Reports attribute * 100 + device so tests can check both arguments arrived. */
CUresult cuDeviceGetAttribute(int *value, int attribute, int dev) {
    *value = attribute * 100 + dev;
    return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t size) {
    void *p = malloc(size ? size : 1);
    if (!p) return 2;
    *ptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr ptr) {
    free((void *)(uintptr_t)ptr);
    return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    memcpy((void *)(uintptr_t)dst, src, n);
    return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
}

CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n) {
    memset((void *)(uintptr_t)dst, value, n);
    return CUDA_SUCCESS;
}

/* The CUDA 2.0 ABI (32-bit sizes): exported under the base names like a real driver, never to be bound. */
CUresult cuMemAlloc(unsigned int *ptr, unsigned int size) { (void)ptr; (void)size; return WRONG_ABI; }
CUresult cuMemFree(unsigned int ptr) { (void)ptr; return WRONG_ABI; }

/* cuTensorMapEncodeTiled writes its arguments into the 16 words of the map, for tests to read back: [0] the
 * address, [1] rank | type << 8 | interleave << 16 | swizzle << 24 | l2 << 32 | oob << 40, [2 + i] dim i,
 * [7 + i] byte stride i (rank - 1 of them), [11 + i] box i | element stride i << 32 (innermost first).
 * CUDA_ERROR_INVALID_VALUE for a map that is not 64-byte aligned, a rank outside 1..5 or STUB_TENSOR_MAP_FAIL. */
CUresult cuTensorMapEncodeTiled(void *map, int type, unsigned rank, void *addr, const uint64_t *dims,
                                const uint64_t *strides, const unsigned *box, const unsigned *elem, int interleave,
                                int swizzle, int l2, int oob) {
    if (!map || ((uintptr_t)map & 63) || rank < 1 || rank > 5 || getenv("STUB_TENSOR_MAP_FAIL"))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t *w = (uint64_t *)map;
    memset(w, 0, 128);
    w[0] = (uint64_t)(uintptr_t)addr;
    w[1] = rank | (uint64_t)type << 8 | (uint64_t)interleave << 16 | (uint64_t)swizzle << 24 | (uint64_t)l2 << 32 |
           (uint64_t)oob << 40;
    for (unsigned i = 0; i < rank; ++i) {
        w[2 + i] = dims[i];
        w[11 + i] = box[i] | (uint64_t)elem[i] << 32;
        if (i + 1 < rank) w[7 + i] = strides[i];
    }
    return CUDA_SUCCESS;
}

/* Every other entry point: succeeds and does nothing. */
static CUresult stub_ok(void) { return CUDA_SUCCESS; }

struct entry { const char *name; void *fn; int requested; };

#define OK(name) { #name, (void *)stub_ok, 0 }
static struct entry table[] = {
    { "cuGetErrorName", (void *)cuGetErrorName, 0 },
    { "cuGetErrorString", (void *)cuGetErrorString, 0 },
    { "cuInit", (void *)cuInit, 0 },
    { "cuDriverGetVersion", (void *)cuDriverGetVersion, 0 },
    { "cuDeviceGet", (void *)cuDeviceGet, 0 },
    { "cuDeviceGetCount", (void *)cuDeviceGetCount, 0 },
    { "cuDeviceGetName", (void *)cuDeviceGetName, 0 },
    { "cuDeviceGetAttribute", (void *)cuDeviceGetAttribute, 0 },
    { "cuMemAlloc", (void *)cuMemAlloc_v2, 0 },
    { "cuMemFree", (void *)cuMemFree_v2, 0 },
    { "cuMemcpyHtoD", (void *)cuMemcpyHtoD_v2, 0 },
    { "cuMemcpyDtoH", (void *)cuMemcpyDtoH_v2, 0 },
    { "cuMemsetD8", (void *)cuMemsetD8_v2, 0 },
    OK(cuDeviceGetPCIBusId), OK(cuDeviceTotalMem), OK(cuDevicePrimaryCtxRetain), OK(cuDevicePrimaryCtxRelease),
    OK(cuDevicePrimaryCtxGetState), OK(cuCtxSetCurrent), OK(cuCtxGetCurrent), OK(cuCtxPushCurrent),
    OK(cuCtxPopCurrent), OK(cuCtxGetDevice), OK(cuCtxSynchronize), OK(cuStreamCreate), OK(cuStreamDestroy),
    OK(cuStreamSynchronize), OK(cuStreamQuery), OK(cuStreamWaitEvent), OK(cuStreamGetId), OK(cuEventCreate),
    OK(cuEventDestroy), OK(cuEventRecord), OK(cuEventSynchronize), OK(cuEventQuery), OK(cuEventElapsedTime),
    OK(cuMemGetInfo), OK(cuMemHostAlloc), OK(cuMemFreeHost), OK(cuMemcpyDtoD), OK(cuMemcpyHtoDAsync),
    OK(cuMemcpyDtoHAsync), OK(cuMemcpyDtoDAsync), OK(cuMemsetD8Async), OK(cuMemsetD32), OK(cuMemsetD32Async),
    OK(cuMemAllocAsync), OK(cuMemFreeAsync), OK(cuPointerGetAttribute), OK(cuModuleLoadDataEx), OK(cuModuleUnload),
    OK(cuModuleGetFunction), OK(cuModuleGetGlobal), OK(cuFuncGetAttribute), OK(cuFuncSetAttribute),
    OK(cuFuncGetName), OK(cuLaunchKernel), OK(cuLaunchKernelEx), OK(cuLibraryLoadData), OK(cuLibraryUnload),
    OK(cuLibraryGetKernel), OK(cuKernelGetFunction), OK(cuOccupancyMaxActiveBlocksPerMultiprocessor),
    { "cuTensorMapEncodeTiled", (void *)cuTensorMapEncodeTiled, 0 },
    { NULL, NULL, 0 },
};

static struct entry *lookup(const char *name) {
    for (struct entry *e = table; e->name; ++e)
        if (strcmp(e->name, name) == 0) return e;
    return NULL;
}

/* The version tilejit last requested for `name`, or -1 when it never asked. */
int stub_requested_version(const char *name) {
    struct entry *e = lookup(name);
    return e && e->requested ? e->requested : -1;
}

#ifndef STUB_NO_GETPROC
static CUresult get_proc(const char *symbol, void **pfn, int version, int *status) {
    struct entry *e = lookup(symbol);
    if (e) e->requested = version;
    if (!e || is_missing(symbol)) {
        *pfn = NULL;
        if (status) *status = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = e->fn;
    if (status) *status = 0;
    return CUDA_SUCCESS;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags) {
    (void)flags;
    return get_proc(symbol, pfn, version, NULL);
}
#ifndef STUB_NO_GETPROC_V2
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags, int *status) {
    (void)flags;
    return get_proc(symbol, pfn, version, status);
}
#endif
#else
/* Without cuGetProcAddress every entry point must be exported under its versioned name. */
#define ALIAS(name, target) CUresult name() __attribute__((alias(#target)));
ALIAS(cuDeviceGetPCIBusId, stub_ok) ALIAS(cuDeviceTotalMem_v2, stub_ok) ALIAS(cuDevicePrimaryCtxRetain, stub_ok)
ALIAS(cuDevicePrimaryCtxRelease_v2, stub_ok) ALIAS(cuDevicePrimaryCtxGetState, stub_ok)
ALIAS(cuCtxSetCurrent, stub_ok) ALIAS(cuCtxGetCurrent, stub_ok) ALIAS(cuCtxPushCurrent_v2, stub_ok)
ALIAS(cuCtxPopCurrent_v2, stub_ok) ALIAS(cuCtxGetDevice, stub_ok) ALIAS(cuCtxSynchronize, stub_ok)
ALIAS(cuStreamCreate, stub_ok) ALIAS(cuStreamDestroy_v2, stub_ok) ALIAS(cuStreamSynchronize, stub_ok)
ALIAS(cuStreamQuery, stub_ok) ALIAS(cuStreamWaitEvent, stub_ok) ALIAS(cuEventCreate, stub_ok)
ALIAS(cuEventDestroy_v2, stub_ok) ALIAS(cuEventRecord, stub_ok) ALIAS(cuEventSynchronize, stub_ok)
ALIAS(cuEventQuery, stub_ok) ALIAS(cuEventElapsedTime, stub_ok) ALIAS(cuMemGetInfo_v2, stub_ok)
ALIAS(cuMemHostAlloc, stub_ok) ALIAS(cuMemFreeHost, stub_ok) ALIAS(cuMemcpyDtoD_v2, stub_ok)
ALIAS(cuMemcpyHtoDAsync_v2, stub_ok) ALIAS(cuMemcpyDtoHAsync_v2, stub_ok) ALIAS(cuMemcpyDtoDAsync_v2, stub_ok)
ALIAS(cuMemsetD8Async, stub_ok) ALIAS(cuMemsetD32_v2, stub_ok) ALIAS(cuMemsetD32Async, stub_ok)
ALIAS(cuPointerGetAttribute, stub_ok) ALIAS(cuModuleLoadDataEx, stub_ok) ALIAS(cuModuleUnload, stub_ok)
ALIAS(cuModuleGetFunction, stub_ok) ALIAS(cuModuleGetGlobal_v2, stub_ok) ALIAS(cuFuncGetAttribute, stub_ok)
ALIAS(cuFuncSetAttribute, stub_ok) ALIAS(cuLaunchKernel, stub_ok)
ALIAS(cuOccupancyMaxActiveBlocksPerMultiprocessor, stub_ok)
#endif
