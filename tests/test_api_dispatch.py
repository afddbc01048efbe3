"""CPU tests of the tile-kernel launch front half: ``kernel[grid](...)`` classifies arguments, maps
them to a specialization and hands views to its launcher; bad calls raise ``LaunchError`` naming the
cause. ``_build`` is replaced by a recorder, so nothing compiles and no GPU is needed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import tilejit as tj
from tilejit.api.kernel import Kernel, _Compiled, _dispatch_source, _source_fingerprint
from tilejit.api.signature import scalar_type_of
from tilejit.errors import LaunchError
from tilejit.runtime.interop import ArrayView
from tilejit.runtime.stream import Stream


def use_build(kernel: Kernel, build: Any) -> None:
    """Make ``build`` stand in for ``kernel._build``, forgetting every specialization made so far."""
    kernel._build = build  # type: ignore[method-assign]
    kernel._specs.clear()
    kernel._fast.clear()
    kernel._bound.clear()


class Recorder:
    """Stands in for ``Kernel._build``: one fake launcher per specialization, every launch recorded."""

    def __init__(self, kernel: Kernel) -> None:
        self.builds: list[tuple[dict[str, Any], dict[str, Any], tuple[Any, ...]]] = []
        self.launches: list[tuple[int, tuple[Any, ...], list[Any], Any]] = []
        use_build(kernel, self.build)

    def build(self, arg_types: dict[str, Any], hints: dict[str, Any], consts: tuple[Any, ...],
              device: Any) -> _Compiled:
        assert device is FAKE_DEVICE
        index = len(self.builds)
        self.builds.append((dict(arg_types), dict(hints), consts))

        def launcher(grid: tuple[int, int, int], views: Any, stream: Any) -> None:
            self.launches.append((index, grid, list(views), stream))

        return _Compiled(launcher=launcher, artifact=None, module=None)


class FakeDevice:
    ordinal = 0
    arch = "sm_90"


FAKE_DEVICE = FakeDevice()


@pytest.fixture(autouse=True)
def current_device(use_device: Callable[[Any], Any]) -> Any:
    """A stand-in current device: the dispatch keys specializations by it, and no driver is needed."""
    return use_device(FAKE_DEVICE)


def view(dtype: str = "float32", shape: tuple[int, ...] = (16,), strides: tuple[int, ...] = (1,),
         ptr: int = 4096) -> ArrayView:
    return ArrayView(ptr, shape, strides, dtype, None)


class CAI:
    """A foreign device array through ``__cuda_array_interface__``."""

    def __init__(self, ptr: int = 8192, n: int = 16, typestr: str = "<f4") -> None:
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": typestr, "data": (ptr, False), "version": 3}


@tj.kernel
def scale(x, out, a, n):
    tj.store(out, index=(0,), tile=tj.load(x, index=(0,), shape=(16,)) * a)


@tj.kernel
def with_const(x, b: int, TILE: tj.Constant[int]):
    tj.store(x, index=(0,), tile=tj.load(x, index=(0,), shape=(TILE,)) + b)


def test_views_and_scalars_reach_the_launcher_and_specializations_are_reused() -> None:
    rec = Recorder(scale)
    x, out = view(), CAI()
    scale[4](x, out, 2.0, 7)
    scale[4](x, out, 3.0, 8)  # same facts: same specialization
    scale[(2, 3)](x, out, 2.0, 7)
    assert len(rec.builds) == 1
    arg_types, hints, consts = rec.builds[0]
    assert list(arg_types.values())[2:] == [scalar_type_of("a", 1.0), scalar_type_of("n", 1)]
    assert [t.ndim for t in list(arg_types.values())[:2]] == [1, 1]
    assert consts == () and set(hints) == {"x", "out"}
    (index0, grid0, views0, stream0), _, (_, grid2, _, _) = rec.launches
    assert index0 == 0 and grid0 == (4, 1, 1) and grid2 == (2, 3, 1) and stream0 is None
    assert views0[0] is x and views0[1] == ArrayView(8192, (16,), (1,), "float32", out) and views0[2:] == [2.0, 7]


def test_argument_facts_pick_distinct_specializations() -> None:
    rec = Recorder(scale)
    x = view()
    scale[1](x, x, 1.0, 1)
    scale[1](x, x, 1.0, 1 << 40)  # needs int64
    scale[1](view("float16"), x, 1.0, 1)  # another dtype
    scale[1](x, x, 1.0, True)  # bool, not int
    scale[1](view(strides=(2,)), x, 1.0, 1)  # not unit stride
    scale[1](view(ptr=4100), x, 1.0, 1)  # not 16-byte aligned
    scale[1](x, x, np.float32(1.0), 1)  # a numpy float32: another fast key, the same specialization as 1.0
    scale[1](x, x, np.float16(1.0), 1)  # a numpy float16: a new one
    assert len(rec.builds) == 7
    assert [b[0]["n"] for b in rec.builds[:4]] == [scalar_type_of("n", v) for v in (1, 1 << 40, 1, True)]
    assert str(rec.builds[1][0]["n"]) != str(rec.builds[0][0]["n"])
    assert rec.builds[6][0]["a"] == scalar_type_of("a", np.float16(1.0)) != rec.builds[0][0]["a"]
    assert [b[1]["x"].unit_stride for b in rec.builds[3:6]] == [True, False, True]
    assert [b[1]["x"].aligned16 for b in rec.builds[3:6]] == [True, True, False]
    assert [launch[0] for launch in rec.launches] == [0, 1, 2, 3, 4, 5, 0, 6]


def test_constants_by_keyword_and_annotated_scalars() -> None:
    rec = Recorder(with_const)
    x = view()
    with_const[1](x, 3, TILE=16)
    with_const[1](x, 1 << 40, TILE=16)  # annotated int: its value does not change the specialization
    with_const[1](x, 3, TILE=32)
    with_const[1](x=x, b=3, TILE=16)  # keywords for run-time arguments: the checked path, same result
    with_const[1](x, 3, TILE=True)  # equal to 1 but another type
    with_const[1](x, 3, TILE=1)
    assert [b[2] for b in rec.builds] == [(16,), (32,), (True,), (1,)]
    assert [type(b[2][0]) for b in rec.builds] == [int, int, bool, int]
    assert [launch[0] for launch in rec.launches] == [0, 0, 1, 0, 2, 3]


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda x: with_const[1](x, 3), r"missing arguments: TILE"),
        (lambda x: with_const[1](x, TILE=16), r"missing arguments: b"),
        (lambda x: with_const[1](x, 3, 16), r"takes 2 positional arguments \(x, b\); constants \(TILE\)"),
        (lambda x: with_const[1](x, 3, TILE=[16]), r"constant 'TILE' must be hashable, got list"),
        (lambda x: with_const[1](np.zeros(16, np.float32), 3, TILE=16), r"parameter 'x'.*host \(CPU\) array"),
        (lambda x: with_const[1](x, "3", TILE=16), r"parameter 'b'"),
        (lambda x: with_const[0](x, 3, TILE=16), r"grid must be a positive int"),
        (lambda x: with_const[2.0](x, 3, TILE=16), r"grid must be a positive int.*got 2.0"),
        (lambda x: with_const[True](x, 3, TILE=16), r"grid must be a positive int.*got True"),
        (lambda x: with_const[(1, 70000)](x, 3, TILE=16), r"grid must be a positive int.*65535"),
        (lambda x: scale[1](x, x, 1.0), r"missing arguments: n"),
        (lambda x: scale[1](x, x, object(), 1), r"parameter 'a'"),
    ],
)
def test_bad_calls_raise_launch_error(call: Any, pattern: str) -> None:
    rec = Recorder(with_const)
    Recorder(scale)
    with pytest.raises(LaunchError, match=pattern):
        call(view())
    assert rec.launches == []


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda x: with_const[1](x, 3, TILE=16, C=2), r"^with_const\(\) got an unexpected keyword argument 'C'$"),
        (lambda x: with_const[1](x, 3, TIL=16), r"^with_const\(\) got an unexpected keyword argument 'TIL'$"),
        (lambda x: with_const[1](x, 3, x=x, TILE=16), r"^with_const\(\) got multiple values for argument 'x'$"),
    ],
)
def test_unknown_keywords_get_pythons_own_error_naming_the_kernel(call: Any, pattern: str) -> None:
    """``kernel[grid]`` takes the kernel's own parameters, so Python itself rejects a wrong keyword."""
    rec = Recorder(with_const)
    with pytest.raises(TypeError, match=pattern):
        call(view())
    assert rec.launches == []


def test_parameters_named_like_the_generated_code_still_work() -> None:
    """A kernel whose parameters reuse the generated function's own names gets another prefix."""

    @tj.kernel
    def clash(_tj_m, grid, stream, _tj_memo: int):
        tj.store(grid, index=(0,), tile=tj.load(_tj_m, index=(0,), shape=(16,)))

    rec = Recorder(clash)
    a, b, c = view(), view(ptr=8192), view(ptr=12288)
    clash[3](a, b, stream=c, _tj_memo=5)
    clash[3](a, b, c, 5)
    assert [(grid, views) for _, grid, views, _ in rec.launches] == [((3, 1, 1), [a, b, c, 5])] * 2
    assert "def launch(_tj_m=__tj_MISSING, grid=__tj_MISSING," in _dispatch_source(clash._args, [], [])


def test_stream_in_the_subscript_is_passed_on() -> None:
    rec = Recorder(scale)
    stream = Stream._wrap(0x77)
    scale[2, stream](view(), view(), 1.0, 1)
    assert rec.launches[-1][3] is stream and rec.launches[-1][1] == (2, 1, 1)


def test_dispatch_source_is_unrolled_per_parameter() -> None:
    src = _dispatch_source(["x", "b"], ["TILE"], ["b"])
    assert "def launch(x=_tj_MISSING, b=_tj_MISSING, *_tj_more, TILE=_tj_MISSING):" in src
    assert "elif _tj_cl is int:\n                _tj_view_b = b; _tj_key_b = None\n" in src  # annotated: any int
    compile(src, "<test>", "exec")


def test_fingerprint_follows_the_file_and_the_globals(tmp_path: Any) -> None:
    path = tmp_path / "kmod.py"
    body = "import tilejit as tj\nSCALE = {s}\n\ndef k(x):\n    tj.store(x, index=(0,), tile=SCALE)\n"

    def fingerprint(scale_value: int, extra: str = "") -> str:
        namespace: dict[str, Any] = {}
        path.write_text(body.format(s=scale_value) + extra)
        exec(compile(path.read_text(), str(path), "exec"), namespace)
        return _source_fingerprint(namespace["k"])

    base = fingerprint(2)
    assert fingerprint(2) == base
    assert fingerprint(3) != base  # a global constant's value
    assert fingerprint(2, "\n# an edit elsewhere in the file\n") != base

    namespace: dict[str, Any] = {}
    exec(compile("def k(x):\n    return x\n", "<no file>", "exec"), namespace)
    assert len(_source_fingerprint(namespace["k"])) == 64  # no source file: falls back without failing


def test_repeated_arguments_reuse_the_last_specialization_and_views() -> None:
    """Identical immutable arguments skip classification; any other argument goes through it again."""
    rec = Recorder(with_const)
    x, y = view(), view(ptr=8192)
    launch = with_const[2]
    for args, tile in [((x, 3), 16), ((x, 3), 16), ((y, 3), 16), ((x, 3), 32), ((x, 3), 16), ((x, 4), 16)]:
        launch(*args, TILE=tile)
    assert [(i, views) for i, _, views, _ in rec.launches] == [
        (0, [x, 3]), (0, [x, 3]), (0, [y, 3]), (1, [x, 3]), (0, [x, 3]), (0, [x, 4])]


def test_repeated_arguments_follow_a_replaced_launcher() -> None:
    """A specialization swaps its launcher (checked path -> generated one); the remembered last call
    must launch through the new one, not the function it remembered."""
    calls: list[str] = []

    def build(arg_types: dict[str, Any], hints: dict[str, Any], consts: tuple[Any, ...], device: Any) -> _Compiled:
        def checked(grid: Any, views: Any, stream: Any) -> None:
            calls.append("checked")
            compiled.launcher = generated

        def generated(grid: Any, views: Any, stream: Any) -> None:
            calls.append("generated")

        compiled = _Compiled(launcher=checked, artifact=None, module=None)
        return compiled

    Recorder(scale)
    scale._build = build  # type: ignore[method-assign]
    x, y = view(), view()
    for _ in range(3):
        scale[1](x, y, 2.0, 5)
    assert calls == ["checked", "generated", "generated"]


def test_mutable_foreign_arrays_are_read_on_every_call() -> None:
    """A foreign array object is never remembered: its address can change between launches."""
    rec = Recorder(scale)
    x, out = view(), CAI(ptr=8192)
    launch = scale[1]
    launch(x, out, 2.0, 7)
    out.__cuda_array_interface__ = dict(out.__cuda_array_interface__, data=(12288, False))
    launch(x, out, 2.0, 7)
    assert [views[1].ptr for _, _, views, _ in rec.launches] == [8192, 12288]


def test_threads_never_mix_remembered_arguments() -> None:
    """Launches from several threads at once each reach the launcher with their own views."""

    rec = Recorder(scale)
    launch = scale[1]
    arrays = [view(ptr=4096 * (i + 1)) for i in range(4)]
    errors: list[str] = []

    scales = [float(i) for i in range(4)]

    def worker(i: int) -> None:
        args = (arrays[i], arrays[(i + 1) % 4], scales[i], i)
        for _ in range(2000):
            launch(*args)

    from test_threads import run_threads

    run_threads(worker, 4)
    for _, _, views, _ in rec.launches:
        i = views[3]
        if views[:3] != [arrays[i], arrays[(i + 1) % 4], scales[i]]:
            errors.append(repr(views))
    assert len(rec.launches) == 8000 and errors == []


def test_a_known_array_type_that_fails_to_convert_names_the_parameter() -> None:
    """The dispatch reads a known array type through its converter directly; when that fails for one
    object (here an unsupported dtype), the checked classification raises the error naming the parameter."""
    rec = Recorder(scale)
    launch = scale[1]
    launch(view(), CAI(), 1.0, 1)
    launch(view(), CAI(ptr=12288), 1.0, 1)  # the type's converter, straight from the dispatch
    bad = CAI()
    bad.__cuda_array_interface__ = dict(bad.__cuda_array_interface__, typestr="<c8")
    with pytest.raises(LaunchError, match=r"parameter 'out'.*c8"):
        launch(view(), bad, 1.0, 1)
    assert [views[1].ptr for _, _, views, _ in rec.launches] == [8192, 12288]


@tj.kernel
def no_args(TILE: tj.Constant[int]):
    pass


@tj.kernel
def nothing():
    pass


def test_kernels_without_run_time_arguments() -> None:
    """No run-time parameters: the remembered call is just the constants and the device."""
    rec_c, rec_n = Recorder(no_args), Recorder(nothing)
    for tile in (16, 16, 32, 16):
        no_args[2](TILE=tile)
    nothing[3]()
    nothing[3]()
    assert [(i, grid) for i, grid, _, _ in rec_c.launches] == [(0, (2, 1, 1)), (0, (2, 1, 1)), (1, (2, 1, 1)),
                                                               (0, (2, 1, 1))]
    assert [b[2] for b in rec_c.builds] == [(16,), (32,)]
    assert len(rec_n.launches) == 2 and len(rec_n.builds) == 1
    with pytest.raises(LaunchError, match="missing arguments: TILE"):
        no_args[2]()
    with pytest.raises(LaunchError, match="takes 0 positional arguments"):
        nothing[3](1)


def test_numpy_ints_are_grid_dimensions() -> None:
    """The tile kernel's grid follows the launcher's rule: any integer type but bool (a tuple whose second
    item is an integer is a 2-d grid, not a grid and a stream)."""
    rec = Recorder(with_const)
    with_const[np.int64(3)](view(), 3, TILE=16)
    with_const[(2, np.int32(5))](view(), 3, TILE=16)
    assert [(launch[1], launch[3]) for launch in rec.launches] == [((3, 1, 1), None), ((2, 5, 1), None)]


def _closure_kernel(scale: float, dt: Any) -> Kernel:
    @tj.kernel
    def k(x, out):
        tj.store(out, index=(0,), tile=(tj.load(x, index=(0,), shape=(16,)) * scale).astype(dt))

    return k


def test_fingerprint_follows_closure_values_and_module_attributes(tmp_path: Any) -> None:
    """Kernels from one factory share their source: the values they capture must still tell their
    disk-cache entries apart (else the second kernel silently runs the first one's code)."""
    import sys
    import types

    a, b = _closure_kernel(2.0, tj.float32), _closure_kernel(3.0, tj.float32)
    assert _source_fingerprint(a.func) != _source_fingerprint(b.func)
    assert _source_fingerprint(a.func) == _source_fingerprint(_closure_kernel(2.0, tj.float32).func)
    assert _source_fingerprint(a.func) != _source_fingerprint(_closure_kernel(2.0, tj.float16).func)
    assert _source_fingerprint(a.func) != _source_fingerprint(_closure_kernel(np.float32(2.5), tj.float32).func)

    # a constant read through a module attribute (cfg.SCALE), and one inside a generator expression
    cfg = types.ModuleType("tj_test_cfg")
    cfg.SCALE = 2  # type: ignore[attr-defined]
    path = tmp_path / "kmod2.py"
    path.write_text("import tilejit as tj\nimport tj_test_cfg as cfg\nOFF = (1, 2)\n\n"
                    "def k(x):\n    s = sum(o * 2 for o in OFF)\n    tj.store(x, index=(0,), tile=cfg.SCALE + s)\n")
    sys.modules["tj_test_cfg"] = cfg
    try:
        namespace: dict[str, Any] = {}
        exec(compile(path.read_text(), str(path), "exec"), namespace)
        base = _source_fingerprint(namespace["k"])
        cfg.SCALE = 3  # type: ignore[attr-defined]
        assert _source_fingerprint(namespace["k"]) != base
        cfg.SCALE = 2  # type: ignore[attr-defined]
        namespace["OFF"] = (1, 3)
        assert _source_fingerprint(namespace["k"]) != base
    finally:
        del sys.modules["tj_test_cfg"]


def test_fingerprinting_a_kernel_loads_no_front_end(tmp_path: Any) -> None:
    """A warm launch fingerprints the kernel: that must not import the front end (a few ms per process)."""
    import json
    import subprocess
    import sys

    (tmp_path / "fp_kernel.py").write_text(
        "import numpy as np\nimport tilejit as tj\nK = (np.int32(3), 2.5)\n\n\n@tj.kernel\n"
        "def k(x, TILE: tj.Constant[int]):\n    tj.store(x, index=(0,), tile=tj.full((TILE,), K[0], tj.float32))\n"
    )
    child = (
        "import json, sys\nsys.path.insert(0, sys.argv[1])\nimport fp_kernel\nbefore = set(sys.modules)\n"
        "from tilejit.api.kernel import _source_fingerprint\n_source_fingerprint(fp_kernel.k.func)\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    done = subprocess.run([sys.executable, "-c", child, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    front_end = {m for m in loaded if m.startswith("tilejit.language.frontend.")} - {"tilejit.language.frontend.params"}
    assert not front_end
    assert not loaded & {"tilejit.language.ir.core", "dataclasses"}


def test_an_address_not_aligned_to_the_element_size_is_refused_before_any_launch() -> None:
    """A float32 view at an odd address would stop the kernel with a misaligned-address fault (and a broken
    context); the key holds the address's low bits, so the refusal also holds after an aligned launch."""
    rec = Recorder(with_const)
    launch = with_const[1]
    launch(view(ptr=4096), 3, TILE=16)
    for ptr in (4097, 4098, 4096 + 2):
        with pytest.raises(LaunchError, match=r"argument 'x' starts at 0x100[12], which is not a multiple of 4"):
            launch(view(ptr=ptr), 3, TILE=16)
    launch(view("int8", ptr=4097), 3, TILE=16)  # one-byte elements are aligned anywhere
    assert len(rec.launches) == 2
