"""RawKernel parameters come from what NVRTC compiled, not from the first declaration in the text.

The source is read without a preprocessor, so a ``#if 0`` around an older signature, an ``#ifdef``/``#else`` pair,
or a macro-named type could make ``.params`` the wrong declaration's, and launches pack the wrong sizes. Each
compile reads the kernel's ``.param`` list from its PTX and picks (or checks) the declaration that fits it; the
result rides in the same cache entry as the code, so a warm load checks nothing again.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from conftest import has_gpu

from tilejit.api.raw import RawKernel, ptx_entry_params
from tilejit.compiler.targets import Target
from tilejit.errors import TargetError
from tilejit.runtime.launch import ParamKind

P, S = ParamKind.pointer, ParamKind.scalar

IF0 = r"""
#if 0
extern "C" __global__ void fill(double* out, double a, long long n) {}  // the old signature
#endif
extern "C" __global__ void fill(float* out, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * i;
}
"""

IFDEF = r"""
#ifdef USE_DOUBLE
extern "C" __global__ void fill(double* out, double a, long long n)
#else
extern "C" __global__ void fill(float* out, float a, int n)
#endif
{
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * i;
}
"""

MACRO = r"""
#ifdef USE_DOUBLE
#define real_t double
#else
#define real_t float
#endif
__global__ void fill(real_t* out, real_t a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * i;
}
"""

FLOAT = [("out", P("float32")), ("a", S("float32")), ("n", S("int32"))]
DOUBLE = [("out", P("float64")), ("a", S("float64")), ("n", S("int64"))]


def test_if0_old_signature_is_not_the_kernels(nvrtc_here: Path) -> None:
    k = RawKernel(IF0, "fill")
    k.compile("sm_80")
    assert k.params == FLOAT


@pytest.mark.parametrize(("options", "params"), [((), FLOAT), (("-DUSE_DOUBLE",), DOUBLE)])
def test_ifdef_else_follows_the_options(nvrtc_here: Path, options: tuple[str, ...],
                                        params: list[tuple[str, ParamKind]]) -> None:
    k = RawKernel(IFDEF, "fill", options=options)
    k.compile("sm_80", output="ptx")
    assert k.params == params


@pytest.mark.parametrize(("options", "a"), [((), S("float32")), (("-DUSE_DOUBLE",), S("float64"))])
def test_macro_named_type_is_read_from_the_compiled_kernel(nvrtc_here: Path, options: tuple[str, ...],
                                                          a: ParamKind) -> None:
    """``real_t a`` with ``#define real_t ...``: the PTX says float or double; ``real_t*`` takes any array."""
    k = RawKernel(MACRO, "fill", options=options)
    assert repr(k) == "<tilejit.RawKernel fill(...)>"  # not known before a compile
    k.compile("sm_80")
    assert k.params == [("out", P(None)), ("a", a), ("n", S("int32"))]
    assert repr(k) == f"<tilejit.RawKernel fill(void* out, {a} a, int32 n)>"


def test_params_compiles_for_the_default_target_when_the_source_cannot_tell(
        nvrtc_here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if has_gpu():
        pytest.skip("with a GPU the default target is the GPU's")
    monkeypatch.setenv("TILEJIT_ARCH", "sm_86")
    k = RawKernel(IFDEF, "fill", options=["-DUSE_DOUBLE"])
    assert k.params == DOUBLE
    assert list(k._programs) == [("sm_86", "cubin")]


def test_a_plain_source_knows_its_params_without_compiling() -> None:
    k = RawKernel('extern "C" __global__ void f(float* x, int n);\nextern "C" __global__ void f(float* x, int n) {}',
                  "f")
    assert k.params == [("x", P("float32")), ("n", S("int32"))] and k._programs == {}


def test_warm_load_reads_the_checked_params_from_the_cache(nvrtc_here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second process (a new RawKernel) gets code and checked parameters from one cache entry: NVRTC never runs."""
    from tilejit.compiler import nvrtc

    first = RawKernel(IFDEF, "fill", options=["-DUSE_DOUBLE"]).compile("sm_80")
    assert not first.from_cache and len(list(nvrtc_here.glob("*.tjc"))) == 1  # one entry: not code + PTX + params

    def no_nvrtc(*args: object, **kwargs: object) -> None:
        raise AssertionError("compiled again instead of loading the cache entry")

    monkeypatch.setattr(nvrtc, "compile_cuda", no_nvrtc)
    k = RawKernel(IFDEF, "fill", options=["-DUSE_DOUBLE"])
    prog = k.compile("sm_80")
    assert prog.from_cache and prog.code == first.code and prog.target == Target(8, 0)
    assert k.params == DOUBLE
    assert len(list(nvrtc_here.glob("*.tjc"))) == 1


def test_param_types_are_checked_against_the_compiled_kernel(nvrtc_here: Path) -> None:
    src = 'extern "C" __global__ void f(float* x, int n) {}'
    ok = RawKernel(src, "f", param_types=["void*", "unsigned"])
    ok.compile("sm_80")
    assert ok.params == [("arg0", P(None)), ("arg1", S("uint32"))]
    wrong = RawKernel(src, "f", param_types=["float*", "long long"])
    assert wrong.params == [("arg0", P("float32")), ("arg1", S("int64"))]  # as given, until a compile says
    wrong.compile("sm_80")
    with pytest.raises(ValueError, match=r"param_types\[1\] is int64 \(8 bytes\), the compiled parameter 1 is \.u32"):
        wrong.params  # noqa: B018
    short = RawKernel(src, "f", param_types=["float*"])
    short.compile("sm_80")
    with pytest.raises(ValueError, match=r"param_types names 1 parameter\(s\), the compiled kernel has 2"):
        short.params  # noqa: B018


def test_a_mismatch_still_compiles_but_never_launches(nvrtc_here: Path, use_device: Any) -> None:
    """compile() hands back the code (e.g. to load it with a Launcher of one's own); a launch through the RawKernel
    raises before anything is loaded, and so does one in a new process (the check rides in the cache entry)."""
    src = "#define float double\n" + 'extern "C" __global__ void f(float* x, float a) {}'
    assert RawKernel(src, "f").compile("sm_80").code[:4] == b"\x7fELF"
    use_device(SimpleNamespace(ordinal=0, arch="sm_80"))
    for k in (RawKernel(src, "f"), RawKernel(src, "f")):  # the second one's check comes from the cache
        with pytest.raises(ValueError, match=r"compiled for sm_80: the parameters NVRTC compiled \(\.u64, \.f64\)"):
            k.function()
        assert k._functions == {}


def test_a_kernel_the_preprocessor_removed_is_a_clear_error(nvrtc_here: Path) -> None:
    k = RawKernel('#ifdef X\nextern "C" __global__ void f(float* x) {}\n#endif\n', "f")
    k.compile("sm_80")
    with pytest.raises(ValueError, match=r"NVRTC's output has no kernel 'f'; .*#ifdef X without -DX"):
        k.params  # noqa: B018
    assert RawKernel('#ifdef X\nextern "C" __global__ void f(float* x) {}\n#endif\n', "f",
                     options=["-DX"]).compile("sm_80")


def test_a_macro_redefining_a_type_is_caught(nvrtc_here: Path) -> None:
    k = RawKernel('#define float double\nextern "C" __global__ void f(float v) {}', "f")
    assert k.params == [("v", S("float32"))]  # what the text says...
    k.compile("sm_80")
    with pytest.raises(ValueError, match=r"parameters NVRTC compiled \(\.f64\) are not those the source declares "
                                         r"\(line 2: \(float32 v\)\)"):
        k.params  # noqa: B018  # ...is not what NVRTC compiled


def test_a_struct_through_a_macro_is_refused(nvrtc_here: Path) -> None:
    k = RawKernel('#define VEC float4\nextern "C" __global__ void f(VEC v) {}', "f")
    k.compile("sm_80")
    with pytest.raises(ValueError, match=r"not structs by value \(\.param \.align 16 \.b8 \[16\]\)"):
        k.params  # noqa: B018


def test_declarations_that_fit_but_disagree_are_refused(nvrtc_here: Path) -> None:
    src = ("#if A\n__global__ void f(float* x, unsigned n) {}\n#else\n__global__ void f(int* x, int n) {}\n#endif\n"
           "#if 0\n__global__ void f(int* x, int n);\n#endif\n")
    k = RawKernel(src, "f", options=["-DA=1"])
    k.compile("sm_80")
    with pytest.raises(ValueError, match=r"disagree on parameter 1 \(int32 / uint32\)"):
        k.params  # noqa: B018
    same = RawKernel(src.replace("unsigned n", "int n"), "f", options=["-DA=1"])
    same.compile("sm_80")
    assert same.params == [("x", P(None)), ("n", S("int32"))]  # only the element types differ: any array


def test_directives_inside_the_parameter_list_are_refused() -> None:
    src = 'extern "C" __global__ void f(float* x,\n#ifdef X\n int n\n#else\n long n\n#endif\n) {}'
    with pytest.raises(ValueError, match=r"preprocessor directives inside the parameter list.*param_types"):
        RawKernel(src, "f")
    assert RawKernel(src, "f", param_types=["float*", "int"]).params == [("arg0", P("float32")), ("arg1", S("int32"))]


def test_template_kernel_is_checked_through_its_lowered_name(nvrtc_here: Path) -> None:
    src = "#if 0\ntemplate <typename T> __global__ void s(T* x, int n) {}\n#else\n" \
          "template <typename T> __global__ void s(T* x, long long n) {}\n#endif\n"
    k = RawKernel(src, "s<double>")
    k.compile("sm_80")
    assert k.params == [("x", P("float64")), ("n", S("int64"))]


def test_ptx_entry_params() -> None:
    ptx = """
.visible .entry k(
\t.param .align 2 .b8 k_param_0[2],
\t.param .u64 .ptr .global .align 4 k_param_1,
\t.param .f32 k_param_2,
\t.param .u8 k_param_3,
\t.param .align 16 .b8 k_param_4[16]
)
.weak .entry _Z1tIdEvPT_(
)
"""
    params = ptx_entry_params(ptx, "k")
    assert params is not None
    assert [(p.cls, p.size) for p in params] == [("b", 2), ("i", 8), ("f", 4), ("i", 1), ("b", 16)]
    assert ptx_entry_params(ptx, "_Z1tIdEvPT_") == []
    assert ptx_entry_params(ptx, "t") is None


# --------------------------------------------------------------------------- default target


def test_compile_without_a_target_follows_tilejit_arch(nvrtc_here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RawKernel.compile() picks its target by the rule compile_cuda and tj.compile follow (it asked the driver)."""
    if has_gpu():
        pytest.skip("with a GPU the default target is the GPU's")
    monkeypatch.setenv("TILEJIT_ARCH", "sm_86")
    k = RawKernel(IF0, "fill")
    assert k.compile().target == Target(8, 6)
    monkeypatch.delenv("TILEJIT_ARCH")
    with pytest.raises(TargetError, match=r"no GPU is present to choose a compile target: pass target='sm_90'"
                                          r", set TILEJIT_ARCH=sm_90, or run where a GPU is"):
        RawKernel(IF0, "fill").compile()


# --------------------------------------------------------------------------- on a GPU


@pytest.mark.gpu
@pytest.mark.parametrize("source", [IF0, IFDEF, MACRO], ids=["if0", "ifdef", "macro"])
@pytest.mark.parametrize("double", [False, True], ids=["float", "double"])
@pytest.mark.cuda_only(reason="RawKernel: CUDA C++ source compiled by NVRTC, packed as it compiled")
def test_launch_packs_what_the_kernel_compiled(source: str, double: bool) -> None:
    """The arguments are packed as the compiled kernel takes them: ``a`` and ``n`` arrive intact either way."""
    from tilejit.runtime.array import empty

    if source is IF0 and double:
        pytest.skip("IF0 has no double variant")
    n, a = 1000, 0.5
    dtype = "float64" if double else "float32"
    k = RawKernel(source, "fill", options=["-DUSE_DOUBLE"] if double else [])
    out = empty(n, dtype).poison()
    k((n + 127) // 128, 128, (out, a, n))
    np.testing.assert_array_equal(out.numpy(), (a * np.arange(n)).astype(dtype))


@pytest.mark.parametrize("params", [None, [["out", "pointer", "float128"]], [["out", "array", "float32"]]])
def test_a_cache_entry_without_usable_params_is_compiled_again(nvrtc_here: Path, monkeypatch: pytest.MonkeyPatch,
                                                               params: object) -> None:
    """An entry whose parameters this version cannot read (missing, unknown dtype or kind) is a miss, not an error."""
    from tilejit.compiler.cache import DiskCache

    RawKernel(IF0, "fill").compile("sm_80")
    real_get = DiskCache.get

    def get(self: DiskCache, key: str) -> dict[str, object] | None:
        entry = real_get(self, key)
        if entry is not None:
            entry = {**entry, "params": params}
        return entry

    monkeypatch.setattr(DiskCache, "get", get)
    k = RawKernel(IF0, "fill")
    assert not k.compile("sm_80").from_cache
    assert k.params == FLOAT
