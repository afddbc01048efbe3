"""compile_cuda with each CUDA major's NVRTC: outputs, targets, headers, name expressions and errors."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from conftest import Toolkit, has_gpu

from tilejit.bindings.nvrtc import NVRTC, load_nvrtc
from tilejit.compiler.nvrtc import MINIMAL, CompiledProgram, _known_to, compile_cuda
from tilejit.compiler.targets import Target, default_target
from tilejit.errors import CompileError, TargetError

ADD = """
template <typename T>
__global__ void add(const T* x, const T* y, T* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + y[i];
}
"""
SIMPLE = 'extern "C" __global__ void fill(float* out, float v) { out[threadIdx.x] = v; }\n'
EM_CUDA = 190


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def lib(toolkit: Toolkit) -> NVRTC:
    return load_nvrtc(str(toolkit.nvrtc))


def cubin_sm(code: bytes) -> int:
    """The SM number a CUDA ELF was built for, read from e_flags (its layout changed with ELF ABI version 8)."""
    assert code[:4] == b"\x7fELF", "not an ELF file"
    assert code[4] == 2, "not a 64-bit ELF"
    (machine,) = struct.unpack_from("<H", code, 18)
    assert machine == EM_CUDA
    (flags,) = struct.unpack_from("<I", code, 48)
    abi_version = code[8]
    return (flags >> 8) & 0xFF if abi_version >= 8 else flags & 0xFF


def ptx_target(ptx: str) -> str:
    lines = [ln.split()[1] for ln in ptx.splitlines() if ln.startswith(".target")]
    assert len(lines) == 1, ptx[:400]
    return lines[0].rstrip(",")


@pytest.mark.parametrize("arch", [70, 80, 90])
def test_cubin_and_ptx_for_each_toolkit(lib: NVRTC, arch: int) -> None:
    if arch not in lib.supported_archs():
        with pytest.raises(TargetError, match=f"sm_{arch} is not supported by NVRTC {lib.version[0]}"):
            compile_cuda(SIMPLE, target=arch, nvrtc=lib, cache=False)
        return
    cubin = compile_cuda(SIMPLE, target=f"sm_{arch}", nvrtc=lib, cache=False)
    assert isinstance(cubin, CompiledProgram)
    assert cubin.kind == "cubin"
    assert cubin.target == Target(arch // 10, arch % 10)
    assert cubin.nvrtc_version == lib.version
    assert cubin.from_cache is False
    assert cubin_sm(cubin.code) == arch
    assert b"fill" in cubin.code
    with pytest.raises(ValueError, match="holds cubin, not PTX"):
        _ = cubin.ptx

    ptx = compile_cuda(SIMPLE, target=f"compute_{arch}", output="ptx", nvrtc=lib, cache=False)
    assert ptx.kind == "ptx"
    assert ptx_target(ptx.ptx) == f"sm_{arch}"
    assert ".entry fill(" in ptx.ptx
    assert ptx.code == ptx.ptx.encode()
    assert not ptx.code.endswith(b"\0")


def test_arch_specific_target(lib: NVRTC) -> None:
    if lib.version < (12, 0):
        with pytest.raises(TargetError, match="needs NVRTC 12"):
            compile_cuda(SIMPLE, target="sm_90a", output="ptx", nvrtc=lib, cache=False)
        return
    ptx = compile_cuda(SIMPLE, target="sm_90a", output="ptx", nvrtc=lib, cache=False)
    assert ptx_target(ptx.ptx) == "sm_90a"
    assert cubin_sm(compile_cuda(SIMPLE, target="sm_90a", nvrtc=lib, cache=False).code) == 90


def test_ltoir(lib: NVRTC) -> None:
    if lib.nvrtcGetLTOIR is None:
        with pytest.raises(CompileError, match=r"output='ltoir' needs NVRTC 12\.0 or newer"):
            compile_cuda(SIMPLE, target="sm_80", output="ltoir", nvrtc=lib, cache=False)
        return
    lto = compile_cuda(SIMPLE, target="sm_80", output="ltoir", nvrtc=lib, cache=False)
    assert lto.kind == "ltoir"
    assert len(lto.code) > 64
    assert lto.code[:4] != b"\x7fELF"  # NVVM IR, not a linked CUBIN
    assert lto.code[:4] == b"\xedCN\x7f"  # the LTO-IR (NVVM bitcode wrapper) magic


def test_name_expressions_give_lowered_names(lib: NVRTC) -> None:
    prog = compile_cuda(ADD, target="sm_80", name_expressions=["add<float>", "add<int>"], nvrtc=lib, cache=False)
    assert prog.lowered_names == {"add<float>": "_Z3addIfEvPKT_S2_PS0_i", "add<int>": "_Z3addIiEvPKT_S2_PS0_i"}
    for mangled in prog.lowered_names.values():
        assert mangled.encode() in prog.code


def test_headers_in_memory(lib: NVRTC) -> None:
    headers = {
        "my/header.cuh": (
            '#pragma once\n#include "my/inner.cuh"\n__device__ float twice(float v) { return SCALE * v; }\n'
        ),
        "my/inner.cuh": "#pragma once\n#define SCALE 2.0f\n",
    }
    src = '#include "my/header.cuh"\nextern "C" __global__ void k(float* x) { x[0] = twice(x[0]); }\n'
    prog = compile_cuda(src, headers=headers, target="sm_80", output="ptx", nvrtc=lib, cache=False)
    assert ".entry k(" in prog.ptx
    with pytest.raises(CompileError, match=r"my/header\.cuh"):
        compile_cuda(src, target="sm_80", output="ptx", nvrtc=lib, cache=False)


def test_compile_error_shows_log_and_numbered_lines(lib: NVRTC) -> None:
    src = "\n".join(
        [
            "// line 1",
            'extern "C" __global__ void k(float* x) {',
            "    float a = x[0];",
            "    x[1] = a + not_declared;",
            "    x[2] = a;",
            "}",
            "",
        ]
    )
    with pytest.raises(CompileError) as info:
        compile_cuda(src, name="broken.cu", target="sm_80", nvrtc=lib, cache=False)
    msg = str(info.value)
    version = f"{lib.version[0]}.{lib.version[1]}"
    assert f"NVRTC {version} could not compile broken.cu for sm_80" in msg
    assert 'broken.cu(4): error: identifier "not_declared" is undefined' in msg
    assert info.value.log and info.value.log in msg
    assert "broken.cu:4:" in msg
    assert "> 4 |     x[1] = a + not_declared;" in msg
    assert "  3 |     float a = x[0];" in msg  # context before
    assert "  5 |     x[2] = a;" in msg  # and after
    assert "  1 | // line 1" not in msg  # only a couple of lines of context


def test_compile_error_in_a_header_shows_the_header_line(lib: NVRTC) -> None:
    headers = {"h/bad.cuh": "#pragma once\n__device__ int f() {\n    return oops;\n}\n"}
    src = '#include "h/bad.cuh"\nextern "C" __global__ void k(int* x) { x[0] = f(); }\n'
    with pytest.raises(CompileError) as info:
        compile_cuda(src, headers=headers, target="sm_80", nvrtc=lib, cache=False)
    msg = str(info.value)
    assert "h/bad.cuh:3:" in msg
    assert "> 3 |     return oops;" in msg


def test_bad_option_is_a_compile_error(lib: NVRTC) -> None:
    with pytest.raises(CompileError) as info:
        compile_cuda(SIMPLE, target="sm_80", options=["--no-such-option"], nvrtc=lib, cache=False)
    assert "NVRTC_ERROR_INVALID_OPTION" in str(info.value)
    assert "--no-such-option" in str(info.value)


def test_user_options_reach_nvrtc(lib: NVRTC) -> None:
    src = 'extern "C" __global__ void k(int* x) { x[0] = VALUE; }\n'
    prog = compile_cuda(src, target="sm_80", output="ptx", options=["-DVALUE=1234567"], nvrtc=lib, cache=False)
    assert "1234567" in prog.ptx
    std = 'extern "C" __global__ void k(int* x) {\n#if __cplusplus >= 201703L\n x[0] = 1;\n#endif\n}\n'
    assert "st.global" in compile_cuda(std, target="sm_80", output="ptx", nvrtc=lib, cache=False).ptx
    legacy = compile_cuda(std, target="sm_80", output="ptx", options=["-std=c++14"], nvrtc=lib, cache=False)
    assert "st.global" not in legacy.ptx


def test_minimal_makes_the_same_code_of_a_generated_kernel_and_is_left_out_where_unknown(lib: NVRTC) -> None:
    """``-minimal`` (what tile kernels compile with: faster to parse) gives the very CUBIN a compile without it gives
    for a generated kernel with the device headers (device printf too); an NVRTC older than 12.4 does not know the
    option, so it is left out there (the key keeps it: the same options asked for, the same NVRTC file)."""
    from tilejit.backends.cuda.abi import device_headers

    src = ('#include <tilejit/tilejit.cuh>\nextern "C" __global__ void k(float* x) {\n'
           '  printf("%d %f\\n", (int)threadIdx.x, (double)x[0]);\n'
           '  x[threadIdx.x] = tj::tanh(x[threadIdx.x]) + atomicAdd(x + 1, 1.0f);\n}\n')
    plain = compile_cuda(src, headers=device_headers(), target="sm_80", nvrtc=lib, cache=False)
    minimal = compile_cuda(src, headers=device_headers(), target="sm_80", options=[MINIMAL], nvrtc=lib, cache=False)
    assert minimal.code == plain.code
    assert _known_to(("-arch=sm_80", MINIMAL), lib) == (("-arch=sm_80",) if lib.version < (12, 4) else
                                                        ("-arch=sm_80", MINIMAL))
    if lib.version >= (12, 4):
        with pytest.raises(CompileError, match="identifier \"cudaStream_t\" is undefined"):
            compile_cuda("__device__ cudaStream_t s;\n", target="sm_80", options=[MINIMAL], nvrtc=lib, cache=False)


def test_unsupported_target_names_nvrtc_and_lists_targets(lib: NVRTC) -> None:
    with pytest.raises(TargetError) as info:
        compile_cuda(SIMPLE, target="sm_990", nvrtc=lib, cache=False)
    msg = str(info.value)
    assert f"NVRTC {lib.version[0]}.{lib.version[1]}" in msg
    assert "sm_80" in msg and "sm_90" in msg


@pytest.mark.parametrize(
    ("kwargs", "exc", "text"),
    [
        ({"output": "sass"}, ValueError, "output must be one of ptx, cubin, ltoir; got 'sass'"),
        ({"options": ["-arch=sm_80"]}, ValueError, "choose the architecture with target="),
        ({"options": ["-dlto"]}, ValueError, "LTO-IR with output='ltoir'"),
        ({"options": "-DX=1"}, TypeError, "options must be a sequence of str"),
        ({"headers": {"a.h": b"bytes"}}, TypeError, "headers must map non-empty str names to str text"),
        ({"headers": ["a.h"]}, TypeError, "headers must map include names"),
        ({"name_expressions": [1]}, TypeError, "name_expressions must be a sequence of str"),
        ({"target": "sm-80"}, TargetError, "invalid target 'sm-80'"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], exc: type[Exception], text: str) -> None:
    kwargs.setdefault("target", "sm_80")
    with pytest.raises(exc) as info:
        compile_cuda(SIMPLE, **kwargs)  # type: ignore[arg-type]
    assert text in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"source": SIMPLE + "\0\n__global__ void broken( {"}, "source 'kernel.cu' contains a NUL byte (line 2)"),
        ({"headers": {"a.h": "// a\n\0"}}, "header 'a.h' contains a NUL byte (line 2)"),
        ({"options": ["-DX=1\0"]}, "option '-DX=1\\x00' contains a NUL byte"),
        ({"name_expressions": ["fill\0"]}, "name expression 'fill\\x00' contains a NUL byte"),
    ],
)
def test_nul_bytes_are_refused(kwargs: dict[str, object], text: str) -> None:
    """NVRTC reads C strings: text after a NUL would be dropped without a word."""
    source = kwargs.pop("source", SIMPLE)
    with pytest.raises(ValueError) as info:
        compile_cuda(source, target="sm_80", **kwargs)  # type: ignore[arg-type]
    assert text in str(info.value)


def test_bad_tilejit_arch_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    if has_gpu():
        pytest.skip("with a GPU the default target is the GPU's")
    monkeypatch.setenv("TILEJIT_ARCH", "sm_9")
    with pytest.raises(TargetError, match="TILEJIT_ARCH='sm_9': invalid target 'sm_9'"):
        default_target()


def test_source_must_be_text() -> None:
    with pytest.raises(TypeError, match="source must be str"):
        compile_cuda(SIMPLE.encode(), target="sm_80")  # type: ignore[arg-type]


def test_default_target(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEJIT_ARCH", "sm_86")
    if has_gpu():
        from tilejit.runtime.device import get_device

        assert default_target().sm == get_device().arch
        return
    assert default_target() == Target(8, 6)
    monkeypatch.delenv("TILEJIT_ARCH")
    with pytest.raises(TargetError, match="pass target='sm_90'"):
        default_target()


def test_target_none_uses_tilejit_arch(lib: NVRTC, monkeypatch: pytest.MonkeyPatch) -> None:
    if has_gpu():
        pytest.skip("with a GPU the default target is the GPU's")
    monkeypatch.setenv("TILEJIT_ARCH", "sm_80")
    prog = compile_cuda(SIMPLE, nvrtc=lib, cache=False)
    assert prog.target == Target(8, 0)
    assert cubin_sm(prog.code) == 80


@pytest.mark.gpu
@pytest.mark.cuda_only(reason="NVRTC's default target and its code")
def test_default_target_is_the_gpu_and_the_code_loads() -> None:
    from tilejit.bindings.nvrtc import nvrtc
    from tilejit.errors import DriverVersionError
    from tilejit.runtime.device import get_device, initialized_driver
    from tilejit.runtime.module import Module

    dev = get_device()
    prog = compile_cuda(SIMPLE + ADD, name_expressions=["add<float>"], cache=False)
    assert prog.target.sm == dev.arch
    assert cubin_sm(prog.code) == prog.target.number
    with Module.load(prog.code, "cubin") as module:
        assert module.get_function("fill").binary_version == prog.target.number
        assert module.get_function(prog.lowered_names["add<float>"]).binary_version == prog.target.number
    ptx = compile_cuda(SIMPLE, output="ptx", cache=False)
    driver_version = initialized_driver().version
    try:
        with Module.load(ptx.code, "ptx") as module:
            assert module.get_function("fill").ptx_version == prog.target.number
    except DriverVersionError:
        # PTX from an NVRTC newer than the driver cannot be JIT-compiled; CUBIN (the default) still loads.
        assert nvrtc().version > (driver_version // 1000, driver_version % 1000 // 10)


def test_compiling_keeps_the_thread_locale(lib: NVRTC) -> None:
    """NVRTC 11.x switches the calling thread to the "C" locale; compile_cuda must put it back."""
    import locale

    before = locale.getpreferredencoding(False)
    compile_cuda(SIMPLE, target="sm_80", nvrtc=lib, cache=False)
    with pytest.raises(CompileError):
        compile_cuda("__global__ void k() { oops }", target="sm_80", nvrtc=lib, cache=False)
    assert locale.getpreferredencoding(False) == before


# ---------------------------------------------------------------- which sources may be cached

# (source text, whether it may read a header from disk, whether only trigraphs make it so). "disk.h" is
# on disk only; "mem.h" and "a/*b" are in the header map. Each verdict was checked against NVRTC 11-13
# (test_include_scan_never_misses_what_nvrtc_reads checks it again).
INCLUDE_CASES: dict[str, tuple[str, bool, bool]] = {
    "plain": ('#include "disk.h"\n', True, False),
    "splice_after_hash": ('#\\\ninclude "disk.h"\n', True, False),
    "splice_in_word": ('#inc\\\nlude "disk.h"\n', True, False),
    "splice_crlf": ('#inc\\\r\nlude "disk.h"\r\n', True, False),
    "backslash_space_is_no_splice": ('#inc\\  \nlude "disk.h"\n', False, False),
    "digraph": ('%:include "disk.h"\n', True, False),
    "comment_between": ('#/**/include "disk.h"\n', True, False),
    "comment_before": ('/* x */ #include "disk.h"\n', True, False),
    "comment_over_lines_before": ('/* x \n */ #include "disk.h"\n', True, False),
    "comment_over_lines_between": ('# /*\n */ include "disk.h"\n', True, False),
    "comment_in_operand": ('#include /* c */ "disk.h"\n', True, False),
    "trigraph": ('??=include "disk.h"\n', True, True),
    "trigraph_splice": ('#inc??/\nlude "disk.h"\n', True, True),
    "carriage_return_ends_no_line": ('// c\r#include "disk.h"\n', False, False),
    "carriage_return_is_blank": ('#\rinclude "disk.h"\n', True, False),
    "form_feed_and_vertical_tab": ('\f#\vinclude "disk.h"\n', True, False),
    "include_next": ('#include_next "disk.h"\n', True, False),
    "macro": ('#define H "disk.h"\n#include H\n', True, False),
    "has_include": ('#if __has_include("disk.h")\n#endif\n', True, False),
    "angle": ("#include <disk.h>\n", False, False),
    "in_memory": ('#include /* c */ "mem.h" // x\n', False, False),
    "in_memory_angle_with_comment_inside": ('#include <a/*b>\n#include "disk.h"\n//*/\n', True, False),
    "line_comment": ('// #include "disk.h"\n', False, False),
    "line_comment_continued": ('// comment \\\n#include "disk.h"\n', False, False),
    "block_comment": ('/*\n#include "disk.h"\n*/\n', False, False),
    "string": ('const char* s = "#include \\"disk.h\\"";\n', False, False),
    "comment_opener_in_string": ('const char* s = "/*";\n#include "disk.h"\nconst char* t = "*/";\n', True, False),
    "comment_opener_in_chars": ("char c = '/', d = '*'; /* real\n*/\n#include \"disk.h\"\n", True, False),
    "quote_in_char": ("const char c = '\"'; /*\n#include \"disk.h\"\n*/\n", False, False),
    "escaped_quote": ('const char* s = "\\"/*";\n#include "disk.h"\n', True, False),
    "escaped_backslash": ('const char* s = "\\\\"; /*\n#include "disk.h"\n*/\n', False, False),
    "digit_separator": ("const int z = 1'000; /* \n#include \"disk.h\"\n */\n", False, False),
    "raw_string": ('const char* s = R"(\n#include "disk.h"\n)";\n', False, False),
    "raw_string_delimited": ('const char* s = u8R"x(\n)"\n#include "disk.h"\n)x";\n', False, False),
    "has_include_in_comment_string_raw": ('// __has_include\nconst char* s = "__has_include", *r = R"(\n'
                                          '__has_include\n)";\n', False, False),
    "other_identifiers": ("int my_include = 1; // include\n#define INCLUDE_DIR include\n", False, False),
}


@pytest.mark.parametrize("case", list(INCLUDE_CASES))
def test_include_scan_reads_like_the_preprocessor(case: str) -> None:
    """A disk header spelled `#\\`+newline+`include`, `%:include` or `#/**/include` slipped past the scan and
    a changed header was served stale from the cache; an include in a comment or literal reads nothing."""
    from tilejit.compiler.nvrtc import _reads_disk_headers

    text, reads, only_with_trigraphs = INCLUDE_CASES[case]
    headers = {"mem.h": "", "a/*b": ""}
    assert _reads_disk_headers(text, headers, ["-std=c++14"]) is reads
    assert _reads_disk_headers(text, headers, ()) is (reads and not only_with_trigraphs)
    assert _reads_disk_headers(SIMPLE, {"mem.h": "", "h.h": text}, ["-std=c++14"]) is reads  # headers too


def test_include_scan_never_misses_what_nvrtc_reads(
    lib: NVRTC, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tilejit.compiler.nvrtc import _reads_disk_headers

    monkeypatch.chdir(tmp_path)
    (tmp_path / "disk.h").write_text("#error READ_FROM_DISK\n")
    headers = {"mem.h": "\n", "a/*b": "\n"}
    for case, (text, reads, only_with_trigraphs) in INCLUDE_CASES.items():
        for options in ((), ("-std=c++14",)):
            try:
                compile_cuda(text + SIMPLE, target="sm_80", output="ptx", headers=headers, options=options, nvrtc=lib,
                             cache=False)
                read = False
            except CompileError as exc:
                read = "READ_FROM_DISK" in str(exc)
            if read:
                assert _reads_disk_headers(text, headers, options), (case, options)
            if not reads:
                assert not read, (case, options)
            if only_with_trigraphs:
                assert read == bool(options), (case, options)


def test_include_scan_is_plain_string_search_for_common_sources() -> None:
    """A warm launch pays no regular expression compile for the scan (common sources end at plain search)."""
    import re

    from tilejit.compiler.nvrtc import _reads_disk_headers

    common = ["#include <cuda_fp16.h>\n" + SIMPLE, '#include "mem.h"\n#define M(a) \\\n  (a)\n' + ADD, ADD]
    re.purge()
    compile_calls = []
    real_compile = re._compile

    def spy(*args: object) -> object:
        compile_calls.append(args)
        return real_compile(*args)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(re, "_compile", spy)
        assert [_reads_disk_headers(s, {"mem.h": ""}, ()) for s in common] == [False, False, False]
    assert compile_calls == []


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"source": SIMPLE + "// caf\udce9\n"},
         "source 'kernel.cu' contains a lone surrogate '\\udce9' at index 85 (line 2)"),
        ({"headers": {"a.h": "\n\n\ud800"}}, "header 'a.h' contains a lone surrogate '\\ud800' at index 2 (line 3)"),
        ({"options": ["-DX=\udc80"]}, "option '-DX=\\udc80' contains a lone surrogate '\\udc80' at index 4 (line 1)"),
        ({"name_expressions": ["f\udc80"]}, "name expression 'f\\udc80' contains a lone surrogate"),
        ({"name": "k\udc80.cu"}, "name contains a lone surrogate '\\udc80'"),
    ],
)
def test_lone_surrogates_are_refused(kwargs: dict[str, object], text: str) -> None:
    """A lone surrogate (text decoded with surrogateescape) crashed with UnicodeEncodeError in the cache key."""
    source = kwargs.pop("source", SIMPLE)
    with pytest.raises(ValueError) as info:
        compile_cuda(source, target="sm_80", **kwargs)  # type: ignore[arg-type]
    assert text in str(info.value)
    assert "UTF-8" in str(info.value)


def test_raw_kernel_with_a_lone_surrogate_is_refused() -> None:
    import tilejit as tj

    with pytest.raises(ValueError, match=r"source contains a lone surrogate '\\udcff' at index 44 \(line 1\)"):
        tj.RawKernel('extern "C" __global__ void k(float* x) { /* \udcff */ }\n', "k")
