"""NVRTC 11, 12 and 13 from their pip wheels: loading, versions, architectures, a raw compile."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tilejit.bindings import loader
from tilejit.bindings.nvrtc import NVRTC, SONAMES, load_nvrtc
from tilejit.errors import CompileError, LibraryNotFoundError

REPO = Path(__file__).resolve().parent.parent

KERNEL = b'extern "C" __global__ void scale(float* x, float a) { x[threadIdx.x] *= a; }'


def _compile(n: NVRTC, source: bytes, options: list[bytes]) -> tuple[int, ctypes.c_void_p, str]:
    prog = ctypes.c_void_p()
    n.check(n.nvrtcCreateProgram(ctypes.byref(prog), source, b"k.cu", 0, None, None), "nvrtcCreateProgram")
    opts = (ctypes.c_char_p * len(options))(*options)
    status = n.nvrtcCompileProgram(prog, len(options), opts)
    size = ctypes.c_size_t()
    n.check(n.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
    log = ctypes.create_string_buffer(size.value)
    n.check(n.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
    return status, prog, log.value.decode()


def _destroy(n: NVRTC, prog: ctypes.c_void_p) -> None:
    n.check(n.nvrtcDestroyProgram(ctypes.byref(prog)), "nvrtcDestroyProgram")
    assert not prog.value


def test_load_each_major(toolkit: object) -> None:
    n = load_nvrtc(str(toolkit.nvrtc))  # type: ignore[attr-defined]
    assert n.version[0] == toolkit.major  # type: ignore[attr-defined]
    assert n.path == str(toolkit.nvrtc)  # type: ignore[attr-defined]
    archs = n.supported_archs()
    assert archs == sorted(archs)
    assert {80, 90} <= set(archs)
    # CUDA 13 dropped sm_70/72 (Volta); 11 and 12 still compile for it.
    assert (70 in archs) == (toolkit.major < 13)  # type: ignore[attr-defined]
    assert 75 in archs
    if toolkit.major >= 12:  # type: ignore[attr-defined]
        assert n.has("nvrtcGetLTOIR") and 100 in archs and 120 in archs
    else:
        assert not n.has("nvrtcGetLTOIR") and n.nvrtcGetLTOIR is None


def test_raw_round_trip_cubin_and_ptx(toolkit: object) -> None:
    n = load_nvrtc(str(toolkit.nvrtc))  # type: ignore[attr-defined]
    status, prog, log = _compile(n, KERNEL, [b"--gpu-architecture=sm_90"])
    assert status == 0, log
    size = ctypes.c_size_t()
    n.check(n.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
    cubin = ctypes.create_string_buffer(size.value)
    n.check(n.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
    assert cubin.raw[:4] == b"\x7fELF" and size.value > 500
    _destroy(n, prog)

    status, prog, log = _compile(n, KERNEL, [b"--gpu-architecture=compute_90"])
    assert status == 0, log
    n.check(n.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
    ptx = ctypes.create_string_buffer(size.value)
    n.check(n.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
    text = ptx.value.decode()
    assert ".target sm_90" in text and ".entry scale" in text
    _destroy(n, prog)


def test_lowered_names(toolkit: object) -> None:
    n = load_nvrtc(str(toolkit.nvrtc))  # type: ignore[attr-defined]
    src = b"template <int N> __global__ void k(int* x) { x[0] = N; }"
    prog = ctypes.c_void_p()
    n.check(n.nvrtcCreateProgram(ctypes.byref(prog), src, b"t.cu", 0, None, None), "create")
    n.check(n.nvrtcAddNameExpression(prog, b"k<7>"), "nvrtcAddNameExpression")
    opts = (ctypes.c_char_p * 1)(b"--gpu-architecture=compute_80")
    n.check(n.nvrtcCompileProgram(prog, 1, opts), "compile")
    lowered = ctypes.c_char_p()
    n.check(n.nvrtcGetLoweredName(prog, b"k<7>", ctypes.byref(lowered)), "nvrtcGetLoweredName")
    assert lowered.value == b"_Z1kILi7EEvPi"
    _destroy(n, prog)


def test_compile_error_and_check(toolkit: object) -> None:
    n = load_nvrtc(str(toolkit.nvrtc))  # type: ignore[attr-defined]
    status, prog, log = _compile(n, b"__global__ void k() { undefined_name = 1; }", [b"--gpu-architecture=sm_80"])
    assert status == 6  # NVRTC_ERROR_COMPILATION
    assert "undefined_name" in log and "k.cu" in log
    with pytest.raises(CompileError) as info:
        n.check(status, "nvrtcCompileProgram")
    assert str(info.value) == "nvrtcCompileProgram: NVRTC_ERROR_COMPILATION (6)"
    _destroy(n, prog)
    status, prog, log = _compile(n, KERNEL, [b"--no-such-option"])
    assert "--no-such-option" in log
    with pytest.raises(CompileError, match=r"^nvrtcCompileProgram: NVRTC_ERROR_INVALID_OPTION \(5\)$"):
        n.check(status, "nvrtcCompileProgram")
    _destroy(n, prog)


def test_all_majors_in_one_process_with_their_builtins() -> None:
    from conftest import toolkits

    if len(toolkits()) < 2:
        pytest.skip("needs two CUDA toolkits")
    loaded = [load_nvrtc(str(tk.nvrtc)) for tk in toolkits()]
    for n, tk in zip(loaded, toolkits()):
        # Compiling forces NVRTC to dlopen its builtins: each must use the one next to it.
        status, prog, log = _compile(n, KERNEL, [b"--gpu-architecture=sm_80"])
        assert status == 0, (tk.major, log)
        _destroy(n, prog)
        assert n.version[0] == tk.major
    builtins = [p for p in loader.loaded_libraries() if "libnvrtc-builtins" in os.path.basename(p)]
    for tk in toolkits():
        folder = os.path.realpath(tk.nvrtc.parent)
        assert any(os.path.realpath(os.path.dirname(p)) == folder for p in builtins), (tk.major, builtins)


def test_wrong_version_file_name_is_rejected(tmp_path: Path) -> None:
    from conftest import toolkits

    tk = next((t for t in toolkits() if t.major == 12), None)
    if tk is None:
        pytest.skip("needs the CUDA 12 toolkit")
    fake = tmp_path / "libnvrtc.so.13"
    shutil.copy(tk.nvrtc, fake)
    with pytest.raises(LibraryNotFoundError) as info:
        load_nvrtc(str(fake))
    assert "wrong version: file name says CUDA 13 but nvrtcVersion reports 12." in str(info.value)


def test_not_nvrtc_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(LibraryNotFoundError, match="file does not exist"):
        load_nvrtc(str(tmp_path / "libnvrtc.so.12"))
    libm = loader.library_path(ctypes.CDLL("libm.so.6"))
    assert libm is not None
    with pytest.raises(LibraryNotFoundError, match="not NVRTC"):
        load_nvrtc(libm)


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=120
    )


def _scrubbed_env() -> dict[str, str]:
    drop = ("CUDA_HOME", "CUDA_PATH", "CONDA_PREFIX", "LD_LIBRARY_PATH", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEJIT_") and k not in drop}
    return env


def test_import_loads_no_cuda_library() -> None:
    code = """
        import tilejit, tilejit.bindings, tilejit.bindings.driver, tilejit.bindings.nvrtc, tilejit.bindings.nvjitlink
        maps = open("/proc/self/maps").read()
        bad = [n for n in ("libcuda", "libnvrtc", "libnvJitLink") if n in maps]
        print("LOADED", bad)
    """
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc/self/maps")
    out = _run(code, _scrubbed_env())
    assert out.returncode == 0, out.stderr
    assert "LOADED []" in out.stdout


def test_nvrtc_with_nothing_findable_lists_places() -> None:
    if any(loader.ldconfig_path_of(s) for s in SONAMES):
        pytest.skip("the system loader has an NVRTC on this machine")
    code = f"""
        import site, sys
        sys.path[:] = [{str(REPO)!r}] + [p for p in sys.path if "site-packages" not in p and p]
        site.getsitepackages = lambda: []
        site.getusersitepackages = lambda: ""
        from tilejit.bindings.nvrtc import nvrtc, find_nvrtc
        from tilejit.errors import LibraryNotFoundError
        for fn in (find_nvrtc, nvrtc):
            try:
                fn()
            except LibraryNotFoundError as e:
                print("ERROR", fn.__name__)
                print(e)
            else:
                print("FOUND", fn.__name__)
    """
    out = _run(code, _scrubbed_env())
    assert out.returncode == 0, out.stderr
    assert "FOUND" not in out.stdout
    assert out.stdout.count("could not load NVRTC; tried:") == 2
    for place in (
        "$TILEJIT_NVRTC: not set",
        "nvidia/cu13/lib",
        "nvidia/cuda_nvrtc/lib",
        "$CONDA_PREFIX: not set",
        "$CUDA_HOME: not set",
        "$CUDA_PATH: not set",
        "libnvrtc.so.13",
        "libnvrtc.so.12",
        "libnvrtc.so.11.2",
        'pip install "tilejit[cu13]"',
    ):
        assert place in out.stdout, place


def test_discovery_order_and_find_without_loading(tmp_path: Path) -> None:
    from conftest import toolkits

    if not toolkits():
        pytest.skip("no CUDA toolkits")
    tk = toolkits()[0]
    code = f"""
        import site, sys
        sys.path[:] = [{str(REPO)!r}] + [p for p in sys.path if "site-packages" not in p and p]
        site.getsitepackages = lambda: [{str(tk.root)!r}]
        site.getusersitepackages = lambda: ""
        from tilejit.bindings.nvrtc import nvrtc, find_nvrtc
        found = find_nvrtc()
        print("FOUND", found)
        print("MAPPED_BEFORE", "libnvrtc" in open("/proc/self/maps").read())
        n = nvrtc()
        print("LOADED", n.path, n.version[0], n is nvrtc())
    """
    out = _run(code, _scrubbed_env())
    assert out.returncode == 0, out.stderr
    assert f"FOUND {tk.nvrtc}" in out.stdout
    assert "MAPPED_BEFORE False" in out.stdout
    assert f"LOADED {tk.nvrtc} {tk.major} True" in out.stdout

    env = _scrubbed_env()
    env["TILEJIT_NVRTC"] = str(toolkits()[-1].nvrtc)
    out = _run(code, env)
    assert out.returncode == 0, out.stderr
    assert f"LOADED {toolkits()[-1].nvrtc} {toolkits()[-1].major} True" in out.stdout


def test_already_loaded_copy_is_preferred() -> None:
    from conftest import toolkits

    if len(toolkits()) < 2:
        pytest.skip("needs two CUDA toolkits")
    first, other = toolkits()[-1], toolkits()[0]
    code = f"""
        import ctypes, site, sys
        sys.path[:] = [{str(REPO)!r}] + [p for p in sys.path if "site-packages" not in p and p]
        site.getsitepackages = lambda: [{str(other.root)!r}]
        site.getusersitepackages = lambda: ""
        ctypes.CDLL({str(first.nvrtc)!r})
        from tilejit.bindings.nvrtc import nvrtc
        print("LOADED", nvrtc().path)
    """
    out = _run(code, _scrubbed_env())
    assert out.returncode == 0, out.stderr
    assert f"LOADED {os.path.realpath(first.nvrtc)}" in out.stdout  # /proc/self/maps names the real file


def test_already_loaded_nvrtc_of_any_cuda_11_release_is_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A toolkit's file is e.g. libnvrtc.so.11.8.89 (soname libnvrtc.so.11.2): an NVRTC loaded in the process
    under such a name is offered first, not passed over for a second NVRTC."""
    rx = re.compile(loader.NVRTC_LIBRARY.loaded_rx)
    names = ("libnvrtc.so.11.8.89", "libnvrtc.so.11.4", "libnvrtc.so.11.2", "libnvrtc.so.12.9.86", "libnvrtc.so.13")
    for name in names:
        assert rx.fullmatch(name), name
    for name in ("libnvrtc-builtins.so.11.8", "libnvrtc.alt.so.12", "libnvrtc.so.10.2", "libnvrtc.so"):
        assert not rx.fullmatch(name), name
    assert re.fullmatch(loader.NVJITLINK_LIBRARY.loaded_rx, "libnvJitLink.so.12.9.86")
    mapped = ["/opt/cuda-11.8/lib64/libnvrtc.so.11.8.89", "/opt/cuda-11.8/lib64/libnvrtc-builtins.so.11.8"]
    monkeypatch.setattr(loader, "loaded_libraries", lambda needle="": [p for p in mapped if needle in p])
    monkeypatch.delenv("TILEJIT_NVRTC", raising=False)
    cands = loader.toolkit_candidates(loader.NVRTC_LIBRARY)
    assert next(cands).kind == "none"  # $TILEJIT_NVRTC: not set
    assert next(cands) == loader.Candidate.file(mapped[0], "already loaded in this process")
