"""Bad arguments to the public API are refused up front, with a TypeError/ValueError naming the argument.

They used to reach internal code: ``num_threads="a"`` a comparison in the backend's planner, ``constants="T=16"``
and ``headers="ab"`` a ``dict()`` of letters, ``options="-O3"`` and ``param_types="float*"`` were split into
characters, and a lone surrogate in a source failed while encoding it for NVRTC or the cache.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from conftest import toolkits

import tilejit as tj
from tilejit.api.raw import RawKernel
from tilejit.compiler.nvrtc import compile_cuda
from tilejit.compiler.targets import check_supported, parse_target
from tilejit.errors import TargetError

SRC = 'extern "C" __global__ void k(float* x, int n) {}'


@tj.kernel
def copy(x, out, TILE: tj.Constant[int]):
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)))


SIG = (tj.float32[:], tj.float32[:])

# --------------------------------------------------------------------------- RawKernel


@pytest.mark.parametrize(("kwargs", "exc", "text"), [
    ({"options": "-O3"}, TypeError, "options must be a list of str such as ['-O3', '-DN=4'], got str '-O3'"),
    ({"options": ["-O3", 3]}, TypeError, "options[1] must be a str, got int 3"),
    ({"options": None}, TypeError, "options must be a list of str"),
    ({"headers": "ab"}, TypeError, "headers must map include names to header text, e.g. {'util.h': '...'}; got str"),
    ({"headers": {"a.h": b"x"}}, TypeError, "headers must map non-empty str names to str text; got 'a.h': bytes"),
    ({"param_types": "float*"}, TypeError, "param_types must be a list of str such as ['float*', 'int'], got str"),
    ({"param_types": [float]}, TypeError, "param_types[0] must be a str, got type"),
    ({"options": ["-DX=\udcff"]}, ValueError, "options[0] contains a lone surrogate '\\udcff' at index 4"),
    ({"headers": {"a.h": "// \ud800"}}, ValueError, "header 'a.h' contains a lone surrogate '\\ud800' at index 3"),
])
def test_raw_kernel_arguments(kwargs: dict[str, object], exc: type[Exception], text: str) -> None:
    with pytest.raises(exc) as info:
        RawKernel(SRC, "k", **kwargs)  # type: ignore[arg-type]
    assert str(info.value).startswith(text)


@pytest.mark.parametrize(("args", "exc", "text"), [
    ((SRC.encode(), "k"), TypeError, "RawKernel(source, name): source must be a str of CUDA C++, got bytes"),
    ((SRC, ""), TypeError, "RawKernel(source, name): name must be the kernel's name as a non-empty str, got ''"),
    ((SRC, b"k"), TypeError, "RawKernel(source, name): name must be the kernel's name as a non-empty str, got b'k'"),
    (("// caf\udce9\n" + SRC, "k"), ValueError, "source contains a lone surrogate '\\udce9' at index 6 (line 1)"),
])
def test_raw_kernel_source_and_name(args: tuple[object, object], exc: type[Exception], text: str) -> None:
    with pytest.raises(exc) as info:
        RawKernel(*args)  # type: ignore[arg-type]
    assert str(info.value).startswith(text)


def test_raw_kernel_compile_output_is_checked() -> None:
    with pytest.raises(ValueError, match=r"RawKernel\.compile: output must be one of ptx, cubin, ltoir; got 'sass'"):
        RawKernel(SRC, "k").compile("sm_80", output="sass")
    with pytest.raises(TargetError, match="invalid target"):
        RawKernel(SRC, "k").compile(["sm_80"])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- compile_cuda


def test_compile_cuda_cache_flag_is_checked() -> None:
    with pytest.raises(TypeError, match=r"cache must be True, False or None \(follow TILEJIT_CACHE\), got 'no'"):
        compile_cuda(SRC, target="sm_80", cache="no")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- tj.kernel and tj.compile


@pytest.mark.parametrize("func", [42, "abc", None.__class__, b"def"])
def test_kernel_needs_a_function(func: object) -> None:
    with pytest.raises(TypeError, match=r"tj\.kernel: expected a Python function to compile as a tile kernel, got"):
        tj.Kernel(func)  # type: ignore[arg-type]


def test_kernel_num_threads_is_checked_before_decorating() -> None:
    with pytest.raises(TypeError, match=r"^@tj\.kernel\(num_threads=\.\.\.\): num_threads must be an int, got 'a'$"):
        tj.kernel(num_threads="a")  # type: ignore[arg-type]


@pytest.mark.parametrize(("kwargs", "exc", "text"), [
    ({"num_threads": "a"}, TypeError, "tj.compile(copy): num_threads must be an int, got 'a'"),
    ({"num_threads": 100}, ValueError, "tj.compile(copy): num_threads must be a power of two from 32 to 1024, got 100"),
    ({"constants": "T=16"}, TypeError,
     "tj.compile(copy): constants must be a dict of constant parameter name → value, e.g. {'TILE': 1024}; got str"),
    ({"constants": {1: 16}}, TypeError, "tj.compile(copy): constants keys must be parameter names (str), got 1"),
    ({"target": ["sm_80"]}, TargetError, "invalid target ['sm_80'] of type list"),
    ({"signature": b"float32[:], float32[:]"}, TypeError, "copy: the signature must be a tuple or list"),
])
def test_compile_arguments(kwargs: dict[str, object], exc: type[Exception], text: str) -> None:
    args: dict[str, object] = {"signature": SIG, "constants": {"TILE": 64}, "target": "sm_80", **kwargs}
    signature = args.pop("signature")
    with pytest.raises(exc) as info:
        tj.compile(copy, signature, **args)  # type: ignore[arg-type]
    assert str(info.value).startswith(text)


def test_compile_needs_a_tile_kernel() -> None:
    with pytest.raises(TypeError, match=r"tj.compile: kernel must be a @tj.kernel or a Python function, got "
                                        r"RawKernel .*; a RawKernel compiles with its own \.compile\(target\)"):
        tj.compile(RawKernel(SRC, "k"), ("float32[:]", int), target="sm_80")
    with pytest.raises(TypeError, match=r"tj\.compile: kernel must be a @tj\.kernel or a Python function, got str"):
        tj.compile("copy", SIG, target="sm_80")


# --------------------------------------------------------------------------- targets the NVRTC found cannot compile


def _fake_nvrtc(major: int, archs: list[int]) -> SimpleNamespace:
    return SimpleNamespace(supported_archs=lambda: archs, version=(major, 0), path=f"/x/libnvrtc.so.{major}")


@pytest.mark.parametrize(("major", "archs", "target", "hint"), [
    (13, [75, 80, 90, 100], "sm_70", 'NVRTC 12 still compiles for sm_70: pip install "tilejit[cu12]"'),
    (13, [75, 80, 90, 100], "sm_37", 'NVRTC 11 still compiles for sm_37: pip install "tilejit[cu11]"'),
    (12, [50, 60, 70, 80, 90], "sm_35", 'NVRTC 11 still compiles for sm_35: pip install "tilejit[cu11]"'),
    (12, [50, 60, 70, 80, 90], "sm_30", "no NVRTC that tilejit supports (CUDA 11 to 13) compiles for sm_30"),
    (11, [35, 50, 80, 90], "sm_100", 'a newer NVRTC may: pip install "tilejit[cu13]"'),
    (13, [75, 80, 90, 100], "sm_110", "install an NVRTC that supports sm_110"),
])
def test_unsupported_target_names_the_extra_to_install(major: int, archs: list[int], target: str, hint: str) -> None:
    with pytest.raises(TargetError) as info:
        check_supported(parse_target(target), _fake_nvrtc(major, archs))  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith(f"{target} is not supported by NVRTC {major}.0 (/x/libnvrtc.so.{major})")
    assert hint in message


def test_sm70_on_the_real_nvrtc13_names_cu12() -> None:
    from tilejit.bindings.nvrtc import load_nvrtc

    cu13 = [tk for tk in toolkits() if tk.major == 13]
    if not cu13:
        pytest.skip("no CUDA 13 NVRTC in .ci-cache/")
    with pytest.raises(TargetError, match=r'sm_70 is not supported by NVRTC 13\.\d+ .*pip install "tilejit\[cu12\]"'):
        compile_cuda(SRC, target="sm_70", nvrtc=load_nvrtc(str(cu13[0].nvrtc)), cache=False)


@pytest.mark.parametrize(("block", "shared_mem", "text"), [
    (0, 0, "block 0: each dimension must be an int in 1..1024 (x, y ≤ 1024, z ≤ 64)"),
    ("32", 0, "block must be a positive int or a tuple of 1 to 3 positive ints, got '32'"),
    ((32, 32, 2), 0, "block (32, 32, 2) has 2048 threads; at most 1024 are allowed"),
    (32, -1, "shared_mem must be a non-negative int (bytes of dynamic shared memory), got -1"),
    (32, "0", "shared_mem must be a non-negative int (bytes of dynamic shared memory), got '0'"),
])
def test_raw_kernel_launch_shape_is_checked_before_compiling(use_device: Any, block: object, shared_mem: object,
                                                             text: str) -> None:
    """A bad block or shared size is refused before the kernel is compiled and loaded for the device."""
    use_device(SimpleNamespace(ordinal=0, arch="sm_80"))
    k = RawKernel(SRC, "k")
    with pytest.raises(ValueError) as info:
        k.launcher(block, shared_mem)  # type: ignore[arg-type]
    assert str(info.value) == text
    assert k._programs == {}


def test_raw_kernel_unhashable_block_is_named(use_device: Any) -> None:
    use_device(SimpleNamespace(ordinal=0, arch="sm_80"))
    with pytest.raises(ValueError, match=r"^block must be a positive int or a tuple of 1 to 3 positive ints, got \{"):
        RawKernel(SRC, "k").launcher({"x": 32})  # type: ignore[arg-type]
