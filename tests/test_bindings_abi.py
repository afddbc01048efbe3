"""The binding tables against the C headers of CUDA 11, 12 and 13: argument counts and types,
requested entry-point versions, struct layouts and enum values."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from ctypes import POINTER, c_int, c_size_t, c_uint, c_void_p
from pathlib import Path

import pytest

from tilejit.bindings import abicheck, driver, nvrtc
from tilejit.bindings.abicheck import Header, check_constants, check_driver_versions, check_functions, parse_headers


def _cuda_header(toolkit: object) -> Header:
    cuda_h: Path = toolkit.cuda_h  # type: ignore[attr-defined]
    return parse_headers(cuda_h, cuda_h.parent / "cudaTypedefs.h")


# ----------------------------------------------------------------------------- the real tables


def test_driver_signatures_match_header(toolkit: object) -> None:
    header = _cuda_header(toolkit)
    assert len(header.functions) > 300  # the parser really read cuda.h
    assert check_functions(header, driver.ENTRIES) == []


def test_driver_requested_versions_match_header(toolkit: object) -> None:
    header = _cuda_header(toolkit)
    assert header.pfn_versions("cuMemAlloc") == [2000, 3020]
    assert check_driver_versions(header, driver.ENTRIES) == []


def test_every_required_driver_entry_is_in_every_header(toolkit: object) -> None:
    header = _cuda_header(toolkit)
    missing = [e.name for e in driver.ENTRIES if e.required and header.signature(e.name) is None]
    assert missing == []


def test_driver_constants_match_header(toolkit: object) -> None:
    header = _cuda_header(toolkit)
    problems, compared = check_constants(header, vars(driver), ("CU_", "CUDA_"))
    assert problems == []
    assert compared >= 100


def test_every_driver_constant_is_in_the_newest_header() -> None:
    from conftest import toolkits

    if not toolkits():
        pytest.skip("no CUDA toolkits")
    header = _cuda_header(toolkits()[0])
    names = [n for n, v in vars(driver).items() if n.startswith(("CU_", "CUDA_")) and isinstance(v, (int, c_void_p))]
    unknown = [n for n in names if n not in header.enumerators and n not in header.defines]
    assert unknown == []


def test_nvrtc_signatures_and_constants_match_header(toolkit: object) -> None:
    header = parse_headers(toolkit.nvrtc_h)  # type: ignore[attr-defined]
    assert check_functions(header, nvrtc.ENTRIES) == []
    problems, compared = check_constants(header, vars(nvrtc), ("NVRTC_",))
    assert problems == [] and compared == 12


def test_versioned_names_per_major(toolkit: object) -> None:
    header = _cuda_header(toolkit)
    assert header.mapped_symbol("cuMemAlloc") == "cuMemAlloc_v2"
    assert header.mapped_symbol("cuMemcpyHtoDAsync") == "cuMemcpyHtoDAsync_v2"  # through __CUDA_API_PTSZ
    assert header.mapped_symbol("cuLaunchKernel") == "cuLaunchKernel"
    major = toolkit.major  # type: ignore[attr-defined]
    assert header.mapped_symbol("cuCtxCreate") == ("cuCtxCreate_v4" if major >= 13 else "cuCtxCreate_v2")
    assert abicheck.symbol_for_version(header, "cuMemAlloc", 3020) == "cuMemAlloc_v2"
    assert abicheck.symbol_for_version(header, "cuMemAlloc", 2000) == "cuMemAlloc"


# ----------------------------------------------------------------------------- the checker catches mistakes


def _with(name: str, **changes: object) -> list[driver.Entry]:
    return [driver.ENTRY_BY_NAME[name].replace(**changes)]


def test_checker_rejects_uint_for_size_t(toolkit: object) -> None:
    header = _cuda_header(toolkit)
    wrong = _with("cuMemAlloc", argtypes=(POINTER(driver.CUdeviceptr), c_uint))
    problems = check_functions(header, wrong)
    assert len(problems) == 1 and "cuMemAlloc: argument 2" in problems[0] and "64-bit" in problems[0]
    assert check_driver_versions(header, wrong)  # the PFN typedef disagrees too


def test_checker_rejects_wrong_pointee_width(toolkit: object) -> None:
    header = _cuda_header(toolkit)
    wrong = _with("cuMemGetInfo", argtypes=(POINTER(c_uint), POINTER(c_size_t)))
    problems = check_functions(header, wrong)
    assert len(problems) == 1 and "argument 1" in problems[0] and "pointee" in problems[0]


def test_checker_rejects_integer_for_handle_and_wrong_count(toolkit: object) -> None:
    header = _cuda_header(toolkit)
    as_int = _with("cuStreamDestroy", argtypes=(c_int,))
    assert any("pointer" in p for p in check_functions(header, as_int))
    short = _with("cuLaunchKernel", argtypes=driver.ENTRY_BY_NAME["cuLaunchKernel"].argtypes[:-1])
    assert check_functions(header, short) == ["cuLaunchKernel: header has 11 arguments, table has 10"]


def test_checker_rejects_signedness_and_return_type(toolkit: object) -> None:
    header = _cuda_header(toolkit)
    assert check_functions(header, _with("cuInit", argtypes=(ctypes.c_int64,)))
    assert check_functions(header, _with("cuInit", restype=ctypes.c_int64))
    nv = parse_headers(toolkit.nvrtc_h)  # type: ignore[attr-defined]
    wrong = [nvrtc.ENTRY_BY_NAME["nvrtcGetPTXSize"].replace(argtypes=(c_void_p, POINTER(c_uint)))]
    assert check_functions(nv, wrong)


def test_checker_rejects_too_old_requested_version(toolkit: object) -> None:
    header = _cuda_header(toolkit)
    problems = check_driver_versions(header, _with("cuMemAlloc", version=2000, symbols=("cuMemAlloc",)))
    assert problems and "resolves to cuMemAlloc (2000)" in problems[0] and "cuMemAlloc_v2" in problems[0]


def test_checker_rejects_new_abi_with_other_signature(toolkit: object) -> None:
    header = _cuda_header(toolkit)
    if 13000 not in header.pfn_versions("cuCtxSynchronize"):
        pytest.skip("this toolkit has no cuCtxSynchronize_v2")
    problems = check_driver_versions(header, _with("cuCtxSynchronize", version=13000))
    assert problems and "cuCtxSynchronize_v2" in problems[0]


def test_checker_rejects_wrong_dlsym_fallback(toolkit: object) -> None:
    header = _cuda_header(toolkit)
    problems = check_driver_versions(header, _with("cuMemFree", symbols=("cuMemFree",)))
    assert any("dlsym fallback" in p for p in problems)


def test_checker_rejects_wrong_constant(toolkit: object) -> None:
    header = _cuda_header(toolkit)
    problems, _ = check_constants(header, {"CU_DEVICE_ATTRIBUTE_WARP_SIZE": 11, "CUDA_ERROR_NOT_READY": 600}, ("CU",))
    assert problems == ["CU_DEVICE_ATTRIBUTE_WARP_SIZE = 11, header says 10"]


def test_abicheck_main_passes_on_toolkit(toolkit: object, capsys: pytest.CaptureFixture[str]) -> None:
    inc = toolkit.cuda_h.parent  # type: ignore[attr-defined]
    assert abicheck.main([str(inc)]) == 0
    assert capsys.readouterr().out == ""


# ----------------------------------------------------------------------------- the parser itself


def test_parser_handles_declaration_forms() -> None:
    src = """
    #define CUDAAPI
    #define cuThing cuThing_v2
    #define cuOther __CUDA_API_PTSZ(cuOther_v3)
    #if defined(_WIN64) || defined(__LP64__)
    typedef unsigned long long CUdeviceptr_v2;
    #else
    typedef unsigned int CUdeviceptr_v2;
    #endif
    typedef CUdeviceptr_v2 CUdeviceptr;
    typedef struct CUctx_st *CUcontext; /* handle */
    typedef enum cudaError_enum { CUDA_SUCCESS = 0, CUDA_ERROR_X = 1 << 3, CUDA_ERROR_Y } CUresult;
    typedef void (CUDA_CB *CUhostFn)(void *userData);
    typedef CUresult (CUDAAPI *PFN_cuThing_v3020)(CUdeviceptr *dptr, size_t bytesize);
    #ifdef __cplusplus
    extern "C" {
    #endif
    CUresult CUDAAPI cuThing(CUdeviceptr *dptr, size_t bytesize);
    __CUDA_DEPRECATED CUresult CUDAAPI cuOld(CUcontext ctx, unsigned int flags, CUhostFn fn, const char * const *names);
    static inline int helper(int x) { return x + 1; }
    const char *errstr(CUresult r);
    #ifdef __cplusplus
    }
    #endif
    """
    h = Header().parse(src)
    assert h.enumerators == {"CUDA_SUCCESS": 0, "CUDA_ERROR_X": 8, "CUDA_ERROR_Y": 9}
    assert h.mapped_symbol("cuThing") == "cuThing_v2" and h.mapped_symbol("cuOther") == "cuOther_v3"
    ret, args = h.signature("cuThing")  # type: ignore[misc]
    assert (str(ret), [str(a) for a in args]) == ("int32", ["uint64*", "uint64"])
    ret, args = h.signature("cuOld")  # type: ignore[misc]
    assert [a.kind for a in args] == ["ptr", "int", "ptr", "ptr"] and str(args[3]) == "int8**"
    assert h.signature("helper") is not None
    assert str(h.signature("errstr")[0]) == "int8*"  # type: ignore[index]
    assert h.pfn_versions("cuThing") == [3020]


# ----------------------------------------------------------------------------- struct layouts, compiled


_LAYOUT_C = r"""
#include <stdio.h>
#include <stddef.h>
#include <cuda.h>
int main(void) {
    printf("%zu %zu %zu %zu\n", sizeof(CUlaunchConfig), offsetof(CUlaunchConfig, hStream),
           offsetof(CUlaunchConfig, attrs), offsetof(CUlaunchConfig, numAttrs));
    printf("%zu %zu %zu\n", sizeof(CUlaunchAttribute), offsetof(CUlaunchAttribute, value),
           sizeof(CUlaunchAttributeValue));
    return 0;
}
"""


def test_launch_structs_match_compiled_layout(toolkit: object, tmp_path: Path) -> None:
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "layout.c"
    src.write_text(_LAYOUT_C)
    exe = tmp_path / "layout"
    inc = toolkit.cuda_h.parent  # type: ignore[attr-defined]
    subprocess.run([cc, "-I", str(inc), str(src), "-o", str(exe)], check=True, capture_output=True)
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    config = [int(x) for x in lines[0].split()]
    attr = [int(x) for x in lines[1].split()]
    cfg = driver.CUlaunchConfig
    assert config == [ctypes.sizeof(cfg), cfg.hStream.offset, cfg.attrs.offset, cfg.numAttrs.offset]
    la = driver.CUlaunchAttribute
    assert attr == [ctypes.sizeof(la), la.value.offset, ctypes.sizeof(driver.CUlaunchAttributeValue)]
