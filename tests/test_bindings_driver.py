"""The driver binding against a stand-in libcuda (tests/stub_driver/stub_cuda.c) built with cc."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tilejit.bindings import driver as drv
from tilejit.bindings import loader
from tilejit.bindings.driver import Driver, load_driver
from tilejit.errors import CUDAError, DriverVersionError, LibraryNotFoundError

STUB_SOURCE = Path(__file__).parent / "stub_driver" / "stub_cuda.c"


@pytest.fixture(scope="session")
def stubs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The stand-in driver built three ways: full (cuGetProcAddress_v2), CUDA 11 style, pre-11.3 (dlsym only)."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in driver")
    out = tmp_path_factory.mktemp("stub_driver")
    built: dict[str, str] = {}
    for variant, flags in {"v2": [], "v1": ["-DSTUB_NO_GETPROC_V2"], "dlsym": ["-DSTUB_NO_GETPROC"]}.items():
        # A distinct file name per variant: the system loader shares libraries by path.
        path = out / f"libcuda_stub_{variant}.so.1"
        subprocess.run(
            [cc, "-shared", "-fPIC", "-O1", *flags, str(STUB_SOURCE), "-o", str(path)],
            check=True,
            capture_output=True,
        )
        built[variant] = str(path)
    return built


@pytest.fixture(autouse=True)
def _clean_stub_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("STUB_DRIVER_VERSION", "STUB_MISSING", "STUB_IS_TOOLKIT_STUB", "STUB_DEVICE_COUNT"):
        monkeypatch.delenv(var, raising=False)


def _requested(path: str, name: str) -> int:
    fn = ctypes.CDLL(path).stub_requested_version
    fn.argtypes = [ctypes.c_char_p]
    fn.restype = ctypes.c_int
    return int(fn(name.encode()))


@pytest.mark.parametrize("variant", ["v2", "v1", "dlsym"])
def test_stub_loads_and_calls_work(stubs: dict[str, str], variant: str) -> None:
    d = load_driver(stubs[variant])
    assert isinstance(d, Driver)
    assert d.path == stubs[variant] and d.version == 13000
    count = ctypes.c_int(-1)
    d.check(d.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
    assert count.value == 1
    value = ctypes.c_int()
    d.check(d.cuDeviceGetAttribute(ctypes.byref(value), drv.CU_DEVICE_ATTRIBUTE_WARP_SIZE, 3), "attr")
    assert value.value == 10 * 100 + 3
    name = ctypes.create_string_buffer(64)
    d.check(d.cuDeviceGetName(name, 64, 0), "cuDeviceGetName")
    assert name.value == b"Stub GPU"
    # cuMemAlloc through the _v2 ABI: 64-bit pointer and size survive the round trip.
    ptr = drv.CUdeviceptr()
    d.check(d.cuMemAlloc(ctypes.byref(ptr), 1 << 20), "cuMemAlloc")
    src = (ctypes.c_ubyte * 256)(*range(256))
    back = (ctypes.c_ubyte * 256)()
    d.check(d.cuMemcpyHtoD(ptr, src, 256), "cuMemcpyHtoD")
    d.check(d.cuMemcpyDtoH(back, ptr, 256), "cuMemcpyDtoH")
    assert bytes(back) == bytes(src)
    d.check(d.cuMemsetD8(ptr, 0xAB, 16), "cuMemsetD8")
    d.check(d.cuMemcpyDtoH(back, ptr, 16), "cuMemcpyDtoH")
    assert bytes(back[:16]) == b"\xab" * 16
    d.check(d.cuMemFree(ptr), "cuMemFree")


def test_function_pointers_carry_their_signature(stubs: dict[str, str]) -> None:
    d = load_driver(stubs["v2"])
    for entry in drv.ENTRIES:
        fn = getattr(d, entry.name)
        assert fn is not None, entry.name
        assert tuple(fn.argtypes) == entry.argtypes and fn.restype is ctypes.c_int
        assert d.has(entry.name)
    assert d.missing == {}


def test_requested_versions_reach_cu_get_proc_address(stubs: dict[str, str]) -> None:
    for variant in ("v2", "v1"):
        load_driver(stubs[variant])
        for entry in drv.ENTRIES:
            assert _requested(stubs[variant], entry.name) == entry.version, (variant, entry.name)
    assert drv.ENTRY_BY_NAME["cuMemAlloc"].version == 3020  # cuMemAlloc_v2
    assert drv.ENTRY_BY_NAME["cuCtxSynchronize"].version < 13000  # not cuCtxSynchronize_v2(ctx)


def test_dlsym_fallback_binds_versioned_symbols(stubs: dict[str, str]) -> None:
    d = load_driver(stubs["dlsym"])
    # The stub's unversioned cuMemAlloc returns 999: the binding must have picked cuMemAlloc_v2.
    ptr = drv.CUdeviceptr()
    assert d.cuMemAlloc(ctypes.byref(ptr), 8) == 0 and ptr.value != 0
    assert d.cuMemFree(ptr) == 0
    assert d.cuLaunchKernelEx is None and not d.has("cuLaunchKernelEx")
    assert "no exported symbol cuLaunchKernelEx" in d.missing["cuLaunchKernelEx"]


def test_too_old_driver_names_both_versions(stubs: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUB_DRIVER_VERSION", "10020")
    with pytest.raises(DriverVersionError) as info:
        load_driver(stubs["v2"])
    text = str(info.value)
    assert "10.2 (10020)" in text and "11.0 (11000)" in text and stubs["v2"] in text


@pytest.mark.parametrize("variant", ["v2", "v1"])
def test_missing_optional_symbol_is_none(stubs: dict[str, str], variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUB_MISSING", "cuLaunchKernelEx,cuLibraryLoadData")
    d = load_driver(stubs[variant])
    assert d.cuLaunchKernelEx is None and d.cuLibraryLoadData is None
    assert not d.has("cuLaunchKernelEx") and not d.has("cuLibraryLoadData")
    assert set(d.missing) == {"cuLaunchKernelEx", "cuLibraryLoadData"}
    assert d.has("cuLaunchKernel") and d.has("cuLibraryGetKernel")
    ptr = drv.CUdeviceptr()
    d.check(d.cuMemAlloc(ctypes.byref(ptr), 4), "cuMemAlloc")
    d.check(d.cuMemFree(ptr), "cuMemFree")


@pytest.mark.parametrize("variant", ["v2", "v1"])
def test_missing_required_symbol_is_named(stubs: dict[str, str], variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUB_MISSING", "cuLaunchKernelEx,cuMemAlloc")
    with pytest.raises(LibraryNotFoundError) as info:
        load_driver(stubs[variant])
    text = str(info.value)
    assert "required entry point cuMemAlloc" in text and "driver version 13000" in text
    assert "cuLaunchKernelEx" not in text  # optional: not an error


def test_missing_required_symbol_on_old_driver_is_version_error(
    stubs: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Requested at 11000 (its _v2), which an 11.0 driver should have: missing, not too old.
    monkeypatch.setenv("STUB_DRIVER_VERSION", "11000")
    monkeypatch.setenv("STUB_MISSING", "cuDevicePrimaryCtxRelease")
    with pytest.raises(LibraryNotFoundError, match="cuDevicePrimaryCtxRelease"):
        load_driver(stubs["v1"])
    # cuEventElapsedTime is requested at 12080; on an 11.0 driver its absence is a too-old driver.
    monkeypatch.setenv("STUB_MISSING", "cuEventElapsedTime")
    with pytest.raises(DriverVersionError) as info:
        load_driver(stubs["v1"])
    assert "cuEventElapsedTime" in str(info.value) and "11.0 (11000)" in str(info.value)
    assert "12.8 (12080)" in str(info.value)


def test_check_raises_cuda_error_with_names(stubs: dict[str, str]) -> None:
    d = load_driver(stubs["v2"])
    d.check(0, "cuInit")
    with pytest.raises(CUDAError) as info:
        d.check(2, "cuMemAlloc", "while allocating 1 GiB")
    err = info.value
    assert (err.function, err.code, err.name) == ("cuMemAlloc", 2, "CUDA_ERROR_OUT_OF_MEMORY")
    assert str(err) == "cuMemAlloc failed with CUDA_ERROR_OUT_OF_MEMORY (2): out of memory\nwhile allocating 1 GiB"
    # The stub has no name for 700: the built-in table supplies it.
    with pytest.raises(CUDAError, match=r"CUDA_ERROR_ILLEGAL_ADDRESS \(700\)"):
        d.check(700, "cuCtxSynchronize")


def test_has_rejects_unknown_names(stubs: dict[str, str]) -> None:
    d = load_driver(stubs["v2"])
    with pytest.raises(AttributeError, match="cuNoSuchThing"):
        d.has("cuNoSuchThing")


def test_get_proc_address_for_extra_functions(stubs: dict[str, str]) -> None:
    d = load_driver(stubs["v2"])
    assert d.get_proc_address("cuMemsetD8", 3020) is not None
    assert d.get_proc_address("cuNotAFunction", 12000) is None


def test_toolkit_stub_library_is_rejected(stubs: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUB_IS_TOOLKIT_STUB", "1")
    with pytest.raises(LibraryNotFoundError) as info:
        load_driver(stubs["v2"])
    assert "stub libcuda" in str(info.value) and "CUDA_ERROR_STUB_LIBRARY(34)" in str(info.value)


def test_nonexistent_path() -> None:
    with pytest.raises(LibraryNotFoundError) as info:
        load_driver("/nonexistent/libcuda.so.1")
    text = str(info.value)
    assert "/nonexistent/libcuda.so.1 (explicit path): file does not exist" in text
    assert "install an NVIDIA driver" in text and "TILEJIT_CUDA_DRIVER" in text


def test_not_a_driver(tmp_path: Path) -> None:
    bogus = tmp_path / "libcuda.so.1"
    bogus.write_bytes(b"not an ELF file")
    with pytest.raises(LibraryNotFoundError, match="dlopen failed"):
        load_driver(str(bogus))
    libm = loader.library_path(ctypes.CDLL("libm.so.6"))
    assert libm is not None
    with pytest.raises(LibraryNotFoundError, match="not a CUDA driver"):
        load_driver(libm)


def test_explicit_driver_path_is_the_only_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEJIT_CUDA_DRIVER", "/nonexistent/custom/libcuda.so.1")
    with pytest.raises(LibraryNotFoundError) as info:
        load_driver()
    text = str(info.value)
    assert "/nonexistent/custom/libcuda.so.1 ($TILEJIT_CUDA_DRIVER): file does not exist" in text
    assert "libcuda.so.1 (" not in text.replace("/nonexistent/custom/libcuda.so.1 (", "")


def _no_driver_anywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the system loader find nothing and no driver count as loaded, even on a machine with a driver."""
    monkeypatch.setattr(
        loader, "system_sonames", lambda names: [loader.Candidate.soname(f"tilejit-absent-{n}") for n in names]
    )
    monkeypatch.setattr(loader, "already_loaded", lambda pattern, origin="", needle="": [])


def test_discovery_lists_every_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TILEJIT_CUDA_DRIVER", raising=False)
    _no_driver_anywhere(monkeypatch)
    with pytest.raises(LibraryNotFoundError) as info:
        load_driver()
    text = str(info.value)
    assert "$TILEJIT_CUDA_DRIVER: not set" in text
    assert "tilejit-absent-libcuda.so.1" in text and "tilejit-absent-libcuda.so (" in text
    assert text.index("libcuda.so.1") < text.index("tilejit-absent-libcuda.so (")


def test_bare_libcuda_so_comes_after_so_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TILEJIT_CUDA_DRIVER", raising=False)
    names = [c.path for c in drv._driver_candidates() if c.kind == "soname"]
    assert names == ["libcuda.so.1", "libcuda.so"]


def test_explicit_driver_setting_is_used(stubs: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEJIT_CUDA_DRIVER", stubs["v1"])
    assert load_driver().path == stubs["v1"]


def test_error_name_without_driver() -> None:
    assert drv.error_name(0) == "CUDA_SUCCESS"
    assert drv.error_name(2) == "CUDA_ERROR_OUT_OF_MEMORY"
    assert drv.error_name(34) == "CUDA_ERROR_STUB_LIBRARY"
    assert drv.error_name(719) == "CUDA_ERROR_LAUNCH_FAILED"
    assert drv.error_name(12345) == "CUDA_ERROR_12345"


def test_launch_param_markers() -> None:
    assert (drv.CU_LAUNCH_PARAM_END.value, drv.CU_LAUNCH_PARAM_BUFFER_POINTER.value) == (None, 1)
    assert drv.CU_LAUNCH_PARAM_BUFFER_SIZE.value == 2
    assert ctypes.sizeof(drv.CUlaunchAttribute) == 72


@pytest.mark.gpu
@pytest.mark.own_backend(reason="compiles no tile kernel: the backend plays no part")
def test_real_driver_singleton() -> None:
    d = drv.driver()
    assert d is drv.driver()
    assert d.version >= drv.MIN_DRIVER_VERSION
    d.check(d.cuInit(0), "cuInit")
    count = ctypes.c_int()
    d.check(d.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
    assert count.value >= 1
    dev = drv.CUdevice()
    d.check(d.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    major = ctypes.c_int()
    d.check(d.cuDeviceGetAttribute(ctypes.byref(major), drv.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "attr")
    assert major.value >= 5
    assert d.error_name(1) == "CUDA_ERROR_INVALID_VALUE"
    with pytest.raises(CUDAError, match=r"CUDA_ERROR_INVALID_VALUE \(1\)"):
        d.check(1, "cuDeviceGetCount")
    if d.version >= 12040:  # every optional entry point exists from CUDA 12.4 on
        assert d.missing == {}, d.missing


def test_bare_file_name_setting_loads_the_file_in_the_current_folder(
    stubs: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dlopen of a name without a slash searches the loader path; the setting names a file, so it is made absolute."""
    shutil.copy(stubs["v2"], tmp_path / "libcuda_bare_stub.so.1")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TILEJIT_CUDA_DRIVER", "libcuda_bare_stub.so.1")
    assert load_driver().path == str(tmp_path / "libcuda_bare_stub.so.1")
    monkeypatch.setenv("TILEJIT_CUDA_DRIVER", "libcuda.so.1")  # not here: missing, not the system's driver
    with pytest.raises(LibraryNotFoundError) as info:
        load_driver()
    assert f"{tmp_path / 'libcuda.so.1'} ($TILEJIT_CUDA_DRIVER): file does not exist" in str(info.value)


@pytest.mark.parametrize(
    ("value", "why"),
    [("folder", "is a folder, not a file"), ("/dev/null", "not a regular file")],
    ids=["dir", "devnull"],
)
def test_setting_naming_no_regular_file_says_so(
    value: str, why: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path) if value == "folder" else value
    if not os.path.exists(path):
        pytest.skip(f"no {path} here")
    monkeypatch.setenv("TILEJIT_CUDA_DRIVER", path)
    with pytest.raises(LibraryNotFoundError) as info:
        load_driver()
    text = str(info.value)
    assert f"{path} ($TILEJIT_CUDA_DRIVER): {why}: $TILEJIT_CUDA_DRIVER must name the library file itself" in text
    assert "file does not exist" not in text


@pytest.mark.parametrize("value", ["", "   "], ids=["empty", "blank"])
def test_empty_driver_setting_is_listed_as_ignored(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEJIT_CUDA_DRIVER", value)
    _no_driver_anywhere(monkeypatch)
    with pytest.raises(LibraryNotFoundError) as info:
        load_driver()
    text = str(info.value)
    assert "$TILEJIT_CUDA_DRIVER: set but empty: ignored" in text and "not set" not in text
    assert "tilejit-absent-libcuda.so.1" in text  # ignored: discovery went on
