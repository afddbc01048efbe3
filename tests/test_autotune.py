"""``tj.autotune``: Config and declaration checks, tuning keys, the choice made with a stand-in timer (no GPU), configs
that fail, ``reset_to_zero``/``restore_value``, choices kept in the disk cache across processes, ``tilejit cache
info/clear`` and ``TILEJIT_AUTOTUNE=0``; on a GPU, real tuning of matmul, atomic and in-place kernels and a config
too large to compile.

The CPU tests replace ``Kernel._build`` by a recorder (nothing compiles) and pass ``do_bench`` stand-ins that
return chosen times; the device is a stand-in too."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tilejit as tj
from tilejit.api import autotune as autotune_mod
from tilejit.api.autotune import Autotuner, Config
from tilejit.api.kernel import Kernel, _Compiled
from tilejit.compiler.cache import TUNED_FOLDER
from tilejit.errors import AutotuneError, CUDAError, LaunchError, TileCompileError
from tilejit.runtime import snapshot
from tilejit.runtime.interop import ArrayView

ROOT = Path(__file__).resolve().parent.parent


class FakeDevice:
    ordinal = 0
    arch = "sm_90"
    name = "Fake GPU"


FAKE_DEVICE = FakeDevice()


def view(n: int = 1000, dtype: str = "float32", ptr: int = 4096, strides: tuple[int, ...] = (1,)) -> ArrayView:
    return ArrayView(ptr, (n,), strides, dtype, None)


@tj.kernel
def add_one(x, out, n, BLOCK: tj.Constant[int]):  # type: ignore[no-untyped-def]
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(BLOCK,)) + n)


class Launch:
    """One launch the stand-in build's launcher saw."""

    def __init__(self, kernel: Kernel, consts: dict[str, Any], grid: tuple[int, int, int], views: list[Any],
                 stream: Any) -> None:
        self.kernel, self.consts, self.grid, self.views, self.stream = kernel, consts, grid, views, stream

    @property
    def threads(self) -> int | None:
        return self.kernel.num_threads


class Builds:
    """Stands in for ``Kernel._build`` of every kernel: records builds and launches; ``fail_build(consts)`` /
    ``fail_launch(consts)`` name the configs whose compile / launch raise, ``on_launch(launch)`` runs at each."""

    def __init__(self) -> None:
        self.launches: list[Launch] = []
        self.builds: list[dict[str, Any]] = []
        self.fail_build: Callable[[dict[str, Any]], bool] = lambda consts: False
        self.fail_launch: Callable[[dict[str, Any]], bool] = lambda consts: False
        self.on_launch: Callable[[Launch], None] = lambda launch: None

    def build(self, kernel: Kernel, arg_types: dict[str, Any], hints: dict[str, Any], consts: tuple[Any, ...],
              device: Any) -> _Compiled:
        named = dict(zip(kernel._constants, consts))
        self.builds.append(named)
        if self.fail_build(named):
            raise TileCompileError(f"a float32 tile of shape ({named.get('BLOCK')},) is too large\nsecond line")

        def launcher(grid: tuple[int, int, int], views: Any, stream: Any) -> None:
            if self.fail_launch(named):
                raise CUDAError("cuLaunchKernel", 701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources")
            launch = Launch(kernel, named, grid, list(views), stream)
            self.launches.append(launch)
            self.on_launch(launch)

        return _Compiled(launcher=launcher, artifact=None, module=None)


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch, use_device: Callable[[Any], Any], tmp_path: Path) -> Iterator[Builds]:
    """Every kernel builds through a recorder, on a stand-in device, caching in the test's own folder."""
    rec = Builds()
    use_device(FAKE_DEVICE)
    monkeypatch.setattr(Kernel, "_build", lambda self, *a: rec.build(self, *a))
    monkeypatch.setattr(autotune_mod, "_device_identity", lambda device: ("Fake GPU", "sm_90", "driver 13000"))
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILEJIT_CACHE", raising=False)
    monkeypatch.delenv("TILEJIT_AUTOTUNE", raising=False)
    forget_specializations()
    yield rec
    forget_specializations()  # no stand-in build outlives the test


def forget_specializations() -> None:
    add_one._specs.clear()
    add_one._fast.clear()
    add_one._bound.clear()


def timer(rec: Builds, times: dict[int, float],
          calls: list[int] | None = None) -> Callable[[Callable[[], None]], float]:
    """A ``do_bench`` that launches once and returns the time ``times`` gives the launched BLOCK."""

    def bench(fn: Callable[[], None]) -> float:
        fn()
        block = rec.launches[-1].consts["BLOCK"]
        if calls is not None:
            calls.append(block)
        return times[block]

    return bench


def no_timing(fn: Callable[[], None]) -> float:
    raise AssertionError("do_bench was called")


BLOCKS = [Config({"BLOCK": 128}), Config({"BLOCK": 256}, num_warps=8), Config({"BLOCK": 512}, num_warps=4)]


def tuned_add_one(rec: Builds, times: dict[int, float], calls: list[int] | None = None, **kw: Any) -> Autotuner:
    return tj.autotune(BLOCKS, key=["x"], do_bench=timer(rec, times, calls), **kw)(add_one)


def grid_of(meta: dict[str, Any]) -> tuple[int]:
    return (tj.cdiv(meta["x"].shape[0], meta["BLOCK"]),)


# ---------------------------------------------------------------- Config


def test_config_fields_text_and_equality() -> None:
    c = tj.Config({"BM": 128, "BN": 64}, num_warps=8, num_stages=3)
    assert (c.kwargs, c.num_warps, c.num_stages, c.num_ctas, c.occupancy) == ({"BM": 128, "BN": 64}, 8, 3, None, None)
    assert str(c) == "BM: 128, BN: 64, num_warps: 8, num_stages: 3"
    assert repr(c) == "tj.Config({'BM': 128, 'BN': 64}, num_warps=8, num_stages=3)"
    assert c.all_kwargs() == {"BM": 128, "BN": 64, "num_warps": 8, "num_stages": 3}
    assert c == tj.Config({"BN": 64, "BM": 128}, num_warps=8, num_stages=3) and len({c, tj.Config(dict(c.kwargs),
                                                                                                  num_warps=8,
                                                                                                  num_stages=3)}) == 1
    assert c != tj.Config({"BM": 128, "BN": 64}, num_warps=4, num_stages=3)
    assert tj.Config({"B": 1}) != tj.Config({"B": True}) and tj.Config({"B": 1}) != tj.Config({"B": 1.0})
    assert c.text() == tj.Config({"BN": 64, "BM": 128}, num_warps=8, num_stages=3).text()
    assert tj.Config({"B": 1}).text() != tj.Config({"B": True}).text()
    assert tj.Config({"D": tj.float16}, occupancy=2, num_ctas=4).text() == "D=dtype:float16:f:16,num_ctas=4,occupancy=2"
    assert tj.Config({"F": frozenset([object()])}).text() is None  # no stable text: not kept on disk


@pytest.mark.parametrize(("make", "error", "text"), [
    (lambda: Config([("BM", 1)]), TypeError, "kwargs must be a dict of constant names to values"),  # type: ignore[arg-type]
    (lambda: Config({1: 2}), TypeError, "kwargs must be named by the kernel's constant parameters, got 1"),  # type: ignore[dict-item]
    (lambda: Config({"BM": [1]}), TypeError, "the value of 'BM' must be hashable"),
    (lambda: Config({}, num_warps=3), ValueError, "num_warps must be a power of two from 1 to 32 (32 to 1024 threads), "
                                                  "got 3"),
    (lambda: Config({}, num_warps=64), ValueError, "got 64"),
    (lambda: Config({}, num_warps=True), TypeError, "tj.Config(num_warps=...): num_warps must be an int, got True"),
    (lambda: Config({}, num_stages=0), ValueError, "tj.Config(num_stages=...): num_stages must be an int >= 1, got 0"),
    (lambda: Config({}, num_ctas=3), ValueError, "tj.Config(num_ctas=...): num_ctas must be a power of two from 1"),
    (lambda: Config({}, occupancy=0), ValueError, "tj.Config(occupancy=...): occupancy must be an int from 1 to 32"),
    (lambda: Config({}, occupancy=2.0), TypeError, "occupancy must be an int, got 2.0"),  # type: ignore[arg-type]
])
def test_config_checks_its_values(make: Callable[[], Any], error: type[Exception], text: str) -> None:
    with pytest.raises(error) as info:
        make()
    assert text in str(info.value)


# ---------------------------------------------------------------- declaring


@pytest.mark.parametrize(("configs", "kwargs", "error", "text"), [
    ([], {"key": ["x"]}, ValueError, "configs is empty; give at least one tj.Config"),
    ([{"BLOCK": 1}], {"key": ["x"]}, TypeError, "configs[0] is dict, not a tj.Config"),
    ([Config({"BLOCK": 1}), Config({"BLOK": 2})], {"key": ["x"]}, ValueError,
     "configs[1] (BLOK: 2) sets 'BLOK', not a parameter of add_one; configs set constants (its tj.Constant "
     "parameters: BLOCK)"),
    ([Config({"n": 2})], {"key": ["x"]}, ValueError, "sets 'n', a run-time parameter of add_one"),
    ([Config({"BLOCK": 1})], {"key": "x"}, TypeError, "key must be a list of parameter names, e.g. key=['x']"),
    ([Config({"BLOCK": 1})], {"key": ["M"]}, ValueError, "key names 'M', which is not one of its parameters"),
    ([Config({"BLOCK": 1})], {"key": ["BLOCK"]}, ValueError, "key 'BLOCK' is a constant the configs set"),
    ([Config({"BLOCK": 1})], {"key": ["x"], "reset_to_zero": ["BLOCK"]}, ValueError,
     "reset_to_zero names 'BLOCK', which is not one of its parameters that reset_to_zero takes (x, out, n)"),
    ([Config({"BLOCK": 1})], {"key": ["x"], "restore_value": ["y"]}, ValueError, "restore_value names 'y'"),
    ([Config({"BLOCK": 1})], {"key": ["x"], "warmup": 0}, ValueError, "warmup must be a number of milliseconds > 0"),
    ([Config({"BLOCK": 1})], {"key": ["x"], "rep": "100"}, ValueError, "rep must be a number of milliseconds > 0"),
    ([Config({"BLOCK": 1})], {"key": ["x"], "prune_configs_by": {"top": 1}}, ValueError,
     "prune_configs_by takes early_config_prune, perf_model, top_k; got top"),
    ([Config({"BLOCK": 1})], {"key": ["x"], "prune_configs_by": {"top_k": 0}}, ValueError,
     "prune_configs_by['top_k'] must be an int >= 1 (configs kept) or a float in (0, 1]"),
    ([Config({"BLOCK": 1})], {"key": ["x"], "do_bench": 5}, TypeError, "do_bench must be a function"),
])
def test_declaration_mistakes_are_named(configs: list[Any], kwargs: dict[str, Any], error: type[Exception],
                                        text: str) -> None:
    with pytest.raises(error) as info:
        tj.autotune(configs, **kwargs)(add_one)
    assert str(info.value).startswith("tj.autotune(...) of add_one: ") and text in str(info.value), str(info.value)


def test_a_plain_function_is_made_a_kernel_and_an_autotuner_is_not_tuned_twice() -> None:
    def double(x, out, BLOCK: tj.Constant[int]):  # type: ignore[no-untyped-def]
        tj.store(out, index=(0,), tile=tj.load(x, index=(0,), shape=(BLOCK,)) * 2)

    tuned = tj.autotune([Config({"BLOCK": 64})], key=["x"])(double)
    assert isinstance(tuned.kernel, Kernel) and tuned.kernel.func is double and tuned.__name__ == "double"
    with pytest.raises(TypeError, match="double is autotuned already"):
        tj.autotune([Config({"BLOCK": 64})], key=["x"])(tuned)
    with pytest.raises(TypeError, match=r"launch an autotuned tile kernel with a grid: double\[grid\]"):
        tuned(1, 2)
    assert "autotune" in tj.__all__ and "Config" in tj.__all__ and tj.autotune is autotune_mod.autotune


# ---------------------------------------------------------------- choosing


def test_the_fastest_config_is_chosen_launched_and_kept(builds: Builds) -> None:
    tuned = tuned_add_one(builds, {128: 3.0, 256: 1.0, 512: 2.0})
    x, out = view(), view(ptr=8192)
    tuned[grid_of](x, out, 5)
    assert tuned.best_config == BLOCKS[1]
    assert tuned.configs_timings == {BLOCKS[0]: 3.0, BLOCKS[1]: 1.0, BLOCKS[2]: 2.0}
    assert tuned.bench_time is not None and tuned.bench_time >= 0
    final = builds.launches[-1]
    assert final.consts == {"BLOCK": 256} and final.threads == 256 and final.grid == (4, 1, 1)
    assert final.views[:2] == [x, out] and final.views[2] == 5
    assert [launch.threads for launch in builds.launches[:3]] == [None, 256, 128]  # num_warps -> 32 * num_warps
    count = len(builds.launches)
    tuned[grid_of](x, out, 6)  # same key: no timing, one launch
    tuned[(2,)](x, out, n=7)
    assert len(builds.launches) == count + 2 and builds.launches[-1].grid == (2, 1, 1)
    assert list(tuned.cache.values()) == [BLOCKS[1]]
    key = next(iter(tuned.cache))
    assert key == (FAKE_DEVICE, "x=float32[1000]", "out=float32")


def test_the_key_is_the_key_parameters_and_every_arrays_dtype(builds: Builds) -> None:
    calls: list[int] = []
    tuned = tj.autotune(BLOCKS, key=["x", "n"], do_bench=timer(builds, {128: 1.0, 256: 2.0, 512: 3.0}, calls))(add_one)
    x, out = view(), view(ptr=8192)
    tuned[1](x, out, 5)
    tuned[1](x, out, np.int32(5))  # the same value
    assert len(calls) == 3
    tuned[1](x, out, 6)  # another n
    tuned[1](view(2000), out, 6)  # another shape
    tuned[1](x, view(ptr=8192, dtype="float16"), 6)  # another dtype of an array not in the key
    assert len(calls) == 12
    assert sorted(k[1:] for k in tuned.cache) == [
        ("x=float32[1000]", "n=int:5", "out=float32"), ("x=float32[1000]", "n=int:6", "out=float16"),
        ("x=float32[1000]", "n=int:6", "out=float32"), ("x=float32[2000]", "n=int:6", "out=float32")]
    with pytest.raises(LaunchError, match="the autotuner's key 'n' is a object, which has no stable value"):
        tuned[1](x, out, object())


def test_calls_that_no_config_could_launch_raise_the_launch_error(builds: Builds) -> None:
    tuned = tj.autotune(BLOCKS, key=["n"], do_bench=no_timing)(add_one)
    x = view()
    with pytest.raises(LaunchError, match=r"add_one\(\): BLOCK set by the autotuner's configs; do not pass them"):
        tuned[1](x, x, 1, BLOCK=64)
    with pytest.raises(LaunchError, match=r"missing argument 'n' \(the autotuner's key\)"):
        tuned[1](x, x)
    with pytest.raises(LaunchError, match=r"takes 3 positional arguments"):
        tuned[1](x, x, 1, 2)
    with pytest.raises(LaunchError, match=r"parameter 'x'.*host \(CPU\) array"):
        tuned[1](np.zeros(4, np.float32), x, 1)
    with pytest.raises(KeyError, match="BM"):  # a mistake in the grid function is not a config's failure
        tj.autotune(BLOCKS, key=["n"], do_bench=lambda fn: 1.0)(add_one)[lambda m: (m["BM"],)](x, x, 1)
    assert builds.launches == []


def test_configs_that_fail_are_skipped_and_logged(builds: Builds, caplog: pytest.LogCaptureFixture) -> None:
    builds.fail_build = lambda consts: consts["BLOCK"] == 128
    builds.fail_launch = lambda consts: consts["BLOCK"] == 256
    tuned = tuned_add_one(builds, {128: 1.0, 256: 2.0, 512: 3.0})
    with caplog.at_level(logging.DEBUG, logger="tilejit"):
        tuned[1](view(), view(), 1)
    assert tuned.best_config == BLOCKS[2] and builds.launches[-1].consts == {"BLOCK": 512}
    skipped = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert skipped == [
        "autotune add_one: config 0 (BLOCK: 128) skipped: TileCompileError: a float32 tile of shape (128,) is too "
        "large",
        "autotune add_one: config 1 (BLOCK: 256, num_warps: 8) skipped: CUDAError: cuLaunchKernel failed with "
        "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (701): too many resources"]
    chose = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG and "chose" in r.getMessage()]
    assert len(chose) == 1 and chose[0].startswith("autotune add_one: key x=float32[1000], out=float32: chose "
                                                   "BLOCK: 512, num_warps: 4 in ")
    assert chose[0].endswith("BLOCK: 128: failed; BLOCK: 256, num_warps: 8: failed; BLOCK: 512, num_warps: 4: "
                             "3.0000 ms")
    assert tuned.configs_timings == {BLOCKS[0]: None, BLOCKS[1]: None, BLOCKS[2]: 3.0}


def test_when_every_config_fails_the_error_names_each_and_why(builds: Builds) -> None:
    builds.fail_build = lambda consts: consts["BLOCK"] != 256
    builds.fail_launch = lambda consts: consts["BLOCK"] == 256
    tuned = tuned_add_one(builds, {})
    with pytest.raises(tj.AutotuneError) as info:
        tuned[1](view(), view(), 1)
    assert str(info.value) == (
        "tj.autotune of add_one: every config failed to compile or launch (key x=float32[1000], out=float32):\n"
        "  config 0 (BLOCK: 128): TileCompileError: a float32 tile of shape (128,) is too large\n"
        "  config 1 (BLOCK: 256, num_warps: 8): CUDAError: cuLaunchKernel failed with "
        "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (701): too many resources\n"
        "  config 2 (BLOCK: 512, num_warps: 4): TileCompileError: a float32 tile of shape (512,) is too large")
    assert [(c, type(e)) for c, e in info.value.failures] == [
        (BLOCKS[0], TileCompileError), (BLOCKS[1], CUDAError), (BLOCKS[2], TileCompileError)]
    assert isinstance(info.value, AutotuneError) and tuned.cache == {}


def test_pruning_and_a_single_config_left(builds: Builds) -> None:
    calls: list[int] = []
    seen: list[dict[str, Any]] = []

    def early(configs: list[Config], named: dict[str, Any], **kwargs: Any) -> list[Config]:
        seen.append(named)
        return [c for c in configs if c.kwargs["BLOCK"] <= named["x"].shape[0]]

    def model(**meta: Any) -> float:
        return float(-meta["BLOCK"])  # bigger is "faster"

    tuned = tuned_add_one(builds, {128: 1.0, 256: 2.0, 512: 3.0}, calls,
                          prune_configs_by={"early_config_prune": early, "perf_model": model, "top_k": 2})
    tuned[1](view(600), view(), 1)
    assert calls == [512, 256] and tuned.best_config == BLOCKS[1]  # 128 pruned by the model
    assert set(seen[0]) == {"x", "out", "n"}
    calls.clear()
    tuned[1](view(200), view(), 1)  # only BLOCK=128 is left: launched, untimed
    assert calls == [] and tuned.best_config == BLOCKS[0] and builds.launches[-1].consts == {"BLOCK": 128}
    fraction = tuned_add_one(builds, {128: 1.0, 256: 2.0, 512: 3.0}, calls, prune_configs_by={"perf_model": model,
                                                                                              "top_k": 0.5})
    assert fraction.prune_configs({"x": view()}) == [BLOCKS[2]]
    with pytest.raises(AutotuneError, match="early_config_prune kept no config"):
        tuned_add_one(builds, {}, prune_configs_by={"early_config_prune": lambda c, n: []})[1](view(), view(), 1)


def test_autotune_off_takes_the_first_config_untimed(builds: Builds, monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    monkeypatch.setenv("TILEJIT_AUTOTUNE", "0")
    tuned = tj.autotune(BLOCKS, key=["x"], do_bench=no_timing)(add_one)
    tuned[1](view(), view(), 1)
    assert tuned.best_config == BLOCKS[0] and [launch.consts for launch in builds.launches] == [{"BLOCK": 128}]
    assert not (tmp_path / "cache" / TUNED_FOLDER).exists()
    monkeypatch.setenv("TILEJIT_AUTOTUNE", "maybe")
    with pytest.raises(tj.ConfigError, match="TILEJIT_AUTOTUNE='maybe'"):
        tj.autotune(BLOCKS, key=["x"], do_bench=no_timing)(add_one)[1](view(), view(), 1)


def test_grid_functions_see_every_argument_and_the_config(builds: Builds) -> None:
    metas: list[dict[str, Any]] = []

    def grid(meta: dict[str, Any]) -> list[int]:
        metas.append(dict(meta))
        return [meta["n"], 2]

    tuned = tj.autotune([Config({"BLOCK": 64}, num_warps=2, num_stages=4)], key=["x"], do_bench=no_timing)(add_one)
    x = view()
    tuned[grid](x, x, 3)
    assert metas == [{"x": x, "out": x, "n": 3, "BLOCK": 64, "num_warps": 2, "num_stages": 4}]
    assert builds.launches[-1].grid == (3, 2, 1) and builds.launches[-1].threads == 64


def test_the_tile_ir_backend_ignores_num_warps(builds: Builds, monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
    """tileiras fixes the block size (a Tile IR kernel with num_threads is an error): num_warps is dropped."""
    monkeypatch.setattr(autotune_mod, "_backend_name", lambda kernel, device: "tileir")
    tuned = tuned_add_one(builds, {128: 3.0, 256: 2.0, 512: 1.0})
    with caplog.at_level(logging.DEBUG, logger="tilejit"):
        tuned[1](view(), view(), 1)
    assert {launch.threads for launch in builds.launches} == {None}
    assert any("num_warps=8 of BLOCK: 256, num_warps: 8 ignored: the Tile IR backend" in r.getMessage()
               for r in caplog.records)


def test_hints_make_kernels_sharing_the_function(builds: Builds) -> None:
    configs = [Config({"BLOCK": 64}, num_ctas=2, occupancy=3), Config({"BLOCK": 64}, num_warps=1)]
    tuned = tj.autotune(configs, key=["x"], do_bench=lambda fn: (fn(), 1.0)[1])(add_one)
    tuned[2](view(), view(), 1)
    kernels = [launch.kernel for launch in builds.launches]
    assert [(k.num_threads, k.num_ctas, k.occupancy) for k in kernels[:2]] == [(None, 2, 3), (32, None, None)]
    assert all(k.func is add_one.func and k is not add_one for k in kernels)


# ---------------------------------------------------------------- restore_value / reset_to_zero


class HostMemory:
    """Host arrays standing in for device memory (by address) and for ``runtime.snapshot``'s copies."""

    def __init__(self) -> None:
        self.arrays: dict[int, np.ndarray] = {}
        self.closed = 0

    def view(self, ptr: int, values: np.ndarray) -> ArrayView:
        self.arrays[ptr] = values
        return ArrayView(ptr, values.shape, (1,), "float32", None)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        memory = self

        class HostSnapshot:
            def __init__(self, view: ArrayView, device: Any, stream: Any = None) -> None:
                assert device is FAKE_DEVICE
                self.view, self.saved = view, memory.arrays[view.ptr].copy()

            def restore(self) -> None:
                memory.arrays[self.view.ptr][...] = self.saved

            def close(self) -> None:
                memory.closed += 1

        def zero(view: ArrayView, device: Any, stream: Any = None) -> None:
            memory.arrays[view.ptr][...] = 0

        monkeypatch.setattr(snapshot, "Snapshot", HostSnapshot)
        monkeypatch.setattr(snapshot, "zero", zero)


def test_outputs_are_restored_and_zeroed_between_trials(builds: Builds, monkeypatch: pytest.MonkeyPatch) -> None:
    """As Triton: before each timed launch ``reset_to_zero`` arrays are zeroed and ``restore_value`` arrays get their
    contents from before tuning; the launch after tuning sees them so too: an accumulating kernel adds once."""
    memory = HostMemory()
    memory.install(monkeypatch)
    x = view()
    acc = memory.view(1 << 20, np.zeros(4, np.float32))
    inplace = memory.view(2 << 20, np.arange(4, dtype=np.float32))
    seen: list[tuple[list[float], list[float]]] = []

    def accumulate(launch: Launch) -> None:  # the kernel: acc += 1, inplace += 1
        seen.append((memory.arrays[acc.ptr].tolist(), memory.arrays[inplace.ptr].tolist()))
        for ptr in (acc.ptr, inplace.ptr):
            memory.arrays[ptr] += 1

    builds.on_launch = accumulate

    def bench(fn: Callable[[], None]) -> float:
        for _ in range(3):
            fn()
        return float(builds.launches[-1].consts["BLOCK"])

    @tj.kernel
    def two_outputs(x, acc, inplace, BLOCK: tj.Constant[int]):  # type: ignore[no-untyped-def]
        tj.store(acc, index=(0,), tile=tj.load(x, index=(0,), shape=(BLOCK,)))

    tuned = tj.autotune(BLOCKS, key=["x"], do_bench=bench, reset_to_zero=["acc"],
                        restore_value=["inplace"])(two_outputs)
    memory.arrays[acc.ptr][...] = 7  # what the caller left there: zeroed before every launch
    tuned[1](x, acc, inplace)
    assert seen == [([0.0] * 4, [0.0, 1.0, 2.0, 3.0])] * 10  # 9 timed launches and the caller's
    assert memory.arrays[acc.ptr].tolist() == [1.0] * 4 and memory.arrays[inplace.ptr].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert memory.closed == 1
    with pytest.raises(LaunchError, match=r"argument 'acc' .* must be a device array, got int"):
        tj.autotune(BLOCKS, key=["x"], do_bench=bench, reset_to_zero=["acc"])(two_outputs)[1](x, 5, inplace)


def test_restore_and_zero_of_strided_views_keep_the_gaps(monkeypatch: pytest.MonkeyPatch) -> None:
    """``runtime.snapshot`` on host memory standing in for device memory (its copies and memsets as memmoves)."""
    import ctypes

    from tilejit.runtime import array as array_mod

    def memmove(dst: int, src: int, n: int) -> None:
        ctypes.memmove(dst, src, n)

    class HostBuffer:
        def __init__(self, nbytes: int, device: Any) -> None:
            self.mem = np.zeros(nbytes, np.uint8)
            self.ptr, self.nbytes = int(self.mem.ctypes.data), nbytes

        def copy_from_device(self, src: int, nbytes: int, stream: Any = None) -> None:
            memmove(self.ptr, src, nbytes)

        def close(self) -> None:
            self.ptr = 0

    monkeypatch.setattr(snapshot, "DeviceBuffer", HostBuffer)
    monkeypatch.setattr(snapshot, "copy_dtod", lambda device, dst, src, n, stream=None: memmove(dst, src, n))
    monkeypatch.setattr(snapshot, "memset_d8", lambda device, ptr, v, n, stream=None: ctypes.memset(ptr, v, n))
    monkeypatch.setattr(snapshot, "stream_handle", lambda stream: 0)
    monkeypatch.setattr(array_mod, "_copy_dtoh", lambda device, host, src, n, stream: memmove(host.ctypes.data, src, n))
    monkeypatch.setattr(array_mod, "_copy_htod", lambda device, dst, host, stream: memmove(dst, host.ctypes.data,
                                                                                            host.nbytes))
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    columns = base[::-1, 1::2]  # negative row stride, gaps between columns
    v = ArrayView(int(columns.ctypes.data), columns.shape, (-6, 2), "float64", base)
    before = base.copy()
    snapshot.zero(v, FAKE_DEVICE)
    want = before.copy()
    want[:, 1::2] = 0
    np.testing.assert_array_equal(base, want)
    saved = snapshot.Snapshot(v, FAKE_DEVICE)
    base[...] = -1
    saved.restore()
    np.testing.assert_array_equal(base[:, 1::2], 0)
    gaps = before.copy()
    gaps[0, 0] = -1  # before the first element: outside the span, neither copied nor restored
    np.testing.assert_array_equal(base[:, ::2], gaps[:, ::2])  # the gaps inside as they were at the snapshot
    whole = ArrayView(int(base.ctypes.data), (4, 6), (6, 1), "float64", base)
    snapshot.zero(whole, FAKE_DEVICE)  # contiguous: one memset
    assert not base.any()


# ---------------------------------------------------------------- the disk cache


SCRIPT = textwrap.dedent('''
    """A process that launches an autotuned kernel on a stand-in device and build, and reports what it did."""
    import json, sys
    import tilejit as tj
    from tilejit.api import autotune as autotune_mod
    from tilejit.api.kernel import Kernel, _Compiled
    from tilejit.runtime import device as device_state
    from tilejit.runtime.interop import ArrayView

    class FakeDevice:
        ordinal, arch, name = 0, "sm_90", "Fake GPU"

    device = FakeDevice()
    device_state.thread_state().device[0] = device
    device_state._device_of_this_thread = lambda: device
    autotune_mod._device_identity = lambda d: ("Fake GPU", "sm_90", "driver " + sys.argv[2])
    launches = []

    def build(self, arg_types, hints, consts, dev):
        named = dict(zip(self._constants, consts))
        return _Compiled(launcher=lambda grid, views, stream: launches.append(named), artifact=None, module=None)

    Kernel._build = build
    timed = []
    times = json.loads(sys.argv[1])

    def bench(fn):
        if times is None:
            raise AssertionError("timed in a process that should find the choice on disk")
        fn()
        timed.append(launches[-1]["BLOCK"])
        return times[str(launches[-1]["BLOCK"])]

    @tj.autotune([tj.Config({"BLOCK": 128}), tj.Config({"BLOCK": 256}, num_warps=8), tj.Config({"BLOCK": 512})],
                 key=["x"], do_bench=bench)
    @tj.kernel
    def add_one(x, out, n, BLOCK: tj.Constant[int]):
        tj.store(out, index=(tj.bid(0),), tile=tj.load(x, index=(tj.bid(0),), shape=(BLOCK,)) + n)

    x = ArrayView(4096, (1000,), (1,), "float32", None)
    add_one[1](x, x, 1)
    print(json.dumps({"timed": timed, "launches": launches, "best": str(add_one.best_config)}))
''')


def run_script(tmp_path: Path, times: dict[str, float] | None, driver: str = "13000",
               **env: str) -> dict[str, Any]:
    tmp_path.mkdir(exist_ok=True)
    script = tmp_path / "tuned.py"
    script.write_text(SCRIPT)
    full = {**os.environ, "TILEJIT_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT), **env}
    full.pop("TILEJIT_AUTOTUNE", None)
    proc = subprocess.run([sys.executable, str(script), json.dumps(times), driver], env=full, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def records(tmp_path: Path) -> list[Path]:
    folder = tmp_path / "cache" / TUNED_FOLDER
    return sorted(folder.glob("*.tjc")) if folder.is_dir() else []


def test_a_new_process_launches_the_stored_choice_without_timing(tmp_path: Path) -> None:
    first = run_script(tmp_path, {"128": 2.0, "256": 1.0, "512": 3.0})
    assert first["timed"] == [128, 256, 512] and first["best"] == "BLOCK: 256, num_warps: 8"
    assert len(records(tmp_path)) == 1
    second = run_script(tmp_path, None)  # its do_bench raises
    assert second == {"timed": [], "launches": [{"BLOCK": 256}], "best": "BLOCK: 256, num_warps: 8"}
    other_driver = run_script(tmp_path, {"128": 1.0, "256": 2.0, "512": 3.0}, driver="13010")
    assert other_driver["timed"] == [128, 256, 512] and other_driver["best"] == "BLOCK: 128"
    assert len(records(tmp_path)) == 2
    off = run_script(tmp_path / "off", {"128": 1.0, "256": 2.0, "512": 3.0}, TILEJIT_CACHE="0")
    assert off["timed"] == [128, 256, 512] and records(tmp_path / "off") == []


def test_a_damaged_or_foreign_record_is_ignored_and_tuned_again(builds: Builds, tmp_path: Path) -> None:
    calls: list[int] = []
    times = {128: 2.0, 256: 1.0, 512: 3.0}
    tuned_add_one(builds, times, calls)[1](view(), view(), 1)
    (path,) = records(tmp_path)
    data = bytearray(path.read_bytes())
    data[40] ^= 0xFF
    path.write_bytes(bytes(data))
    tuned_add_one(builds, times, calls)[1](view(), view(), 1)
    assert calls == [128, 256, 512] * 2
    from tilejit.compiler.cache import default_cache

    cache = default_cache(TUNED_FOLDER)
    (key, entry), = cache.entries()
    assert entry["config"] == "BLOCK: 256, num_warps: 8"
    cache.put(key, {**entry, "config_text": "BLOCK=int:999"})  # a config no longer offered
    tuned_add_one(builds, times, calls)[1](view(), view(), 1)
    cache.put(key, {**entry, "record": "something else"})
    tuned_add_one(builds, times, calls)[1](view(), view(), 1)
    assert calls == [128, 256, 512] * 4
    tuned_add_one(builds, times, calls)[1](view(), view(), 1)  # the good record written last
    assert len(calls) == 12
    more = tj.autotune([*BLOCKS, Config({"BLOCK": 1024})], key=["x"], do_bench=timer(builds, {**times, 1024: 9.0},
                                                                                      calls))(add_one)
    more[1](view(), view(), 1)  # another list of configs: tuned again
    assert calls[12:] == [128, 256, 512, 1024] and len(records(tmp_path)) == 2
    tj.autotune(BLOCKS, key=["x"], do_bench=timer(builds, times, calls), cache_results=False)(add_one)[1](
        view(), view(), 1)
    assert len(calls) == 19


def test_cache_info_lists_tuned_choices_and_clear_removes_them(builds: Builds, tmp_path: Path) -> None:
    tuned_add_one(builds, {128: 2.0, 256: 1.0, 512: 3.0})[1](view(), view(), 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEJIT_")}
    env.update(TILEJIT_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))

    def tilejit(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "tilejit", *args], env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    lines = tilejit("cache", "info").splitlines()
    at = lines.index("autotuned: 1 (kernel, key -> config, when, GPU)")
    assert lines[at + 1].startswith("  test_autotune.add_one, x=float32[1000], out=float32 -> BLOCK: 256, "
                                    "num_warps: 8, 20")
    assert lines[at + 1].endswith(", Fake GPU")
    cleared = tilejit("cache", "clear").strip()
    assert re.fullmatch(rf"removed \d+ entr(y|ies) and 1 autotuned choice from {re.escape(str(tmp_path / 'cache'))}",
                        cleared), cleared
    assert "autotuned: 0" in tilejit("cache", "info").splitlines()
    assert list((tmp_path / "cache").iterdir()) == []


# ---------------------------------------------------------------- the examples


def test_the_examples_declare_autotuned_kernels() -> None:
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import layer_norm
        import matmul
        import softmax
    finally:
        sys.path.remove(str(ROOT / "examples"))
    for tuned, kernel in ((matmul.matmul_tuned, matmul.matmul), (layer_norm.layer_norm_tuned, layer_norm.layer_norm),
                          (softmax.softmax_tuned, softmax.softmax)):
        assert isinstance(tuned, Autotuner) and tuned.kernel is kernel and len(tuned.configs) > 1


# ---------------------------------------------------------------- on a GPU


@pytest.fixture
def gpu_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILEJIT_AUTOTUNE", raising=False)
    return tmp_path / "cache"


@pytest.mark.gpu
def test_autotuned_matmul_on_ragged_sizes(gpu_cache: Path) -> None:
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from matmul import matmul, random_input
    finally:
        sys.path.remove(str(ROOT / "examples"))
    configs = [Config({"BM": 64, "BN": 64, "BK": 32}), Config({"BM": 128, "BN": 128, "BK": 32}),
               Config({"BM": 128, "BN": 64, "BK": 64}, num_warps=4)]
    tuned = tj.autotune(configs, key=["a", "b"], warmup=5, rep=20)(matmul)
    generator = np.random.default_rng()
    for m, n, k in ((1000, 1100, 700), (33, 200, 70)):
        (a, da), (b, db) = random_input(generator, (m, k), "float16"), random_input(generator, (k, n), "float16")
        dc = tj.asarray(np.full((m, n), np.nan, np.float32))
        tuned[matmul_grid(m, n)](da, db, dc)
        assert tuned.best_config in configs and tuned.configs_timings[tuned.best_config] is not None
        np.testing.assert_allclose(dc.numpy(), a @ b, rtol=2e-3, atol=2e-3)
    assert len(tuned.cache) == 2 and len(records_in(gpu_cache)) == 2
    again = tj.autotune(configs, key=["a", "b"], do_bench=no_timing)(matmul)  # a fresh tuner reads the disk
    dc = tj.asarray(np.full((m, n), np.nan, np.float32))
    again[matmul_grid(m, n)](da, db, dc)
    assert again.best_config == tuned.best_config
    np.testing.assert_allclose(dc.numpy(), a @ b, rtol=2e-3, atol=2e-3)


def matmul_grid(m: int, n: int) -> Callable[[dict[str, Any]], tuple[int, int]]:
    return lambda meta: (tj.cdiv(m, meta["BM"]), tj.cdiv(n, meta["BN"]))


def records_in(cache: Path) -> list[Path]:
    folder = cache / TUNED_FOLDER
    return sorted(folder.glob("*.tjc")) if folder.is_dir() else []


@tj.kernel
def histogram(x, bins, TILE: tj.Constant[int]):  # type: ignore[no-untyped-def]
    v = tj.load(x, index=(tj.bid(0),), shape=(TILE,), padding=-1)
    tj.atomic_add(bins, v, tj.ones((TILE,), bins.dtype))


@tj.kernel
def add_into(x, out, TILE: tj.Constant[int]):  # type: ignore[no-untyped-def]
    i = tj.bid(0)
    tj.atomic_add(out, i * TILE + tj.arange(TILE), tj.load(x, index=(i,), shape=(TILE,)))


TILES = [Config({"TILE": 128}), Config({"TILE": 256}), Config({"TILE": 512})]


def tiles_grid(n: int) -> Callable[[dict[str, Any]], tuple[int]]:
    return lambda meta: (tj.cdiv(n, meta["TILE"]),)


@pytest.mark.gpu
def test_an_atomic_kernel_tuned_with_reset_to_zero_counts_once(gpu_cache: Path) -> None:
    n, nbins = 5000, 17
    x = np.random.default_rng().integers(0, nbins, n).astype(np.int32)
    bins = tj.asarray(np.full(nbins, 5, np.int32))  # zeroed before every launch, the caller's one included
    tuned = tj.autotune(TILES, key=["x"], warmup=2, rep=5, reset_to_zero=["bins"])(histogram)
    tuned[tiles_grid(n)](tj.asarray(x), bins)
    np.testing.assert_array_equal(bins.numpy(), np.bincount(x, minlength=nbins))


@pytest.mark.gpu
def test_an_accumulating_kernel_tuned_with_restore_value_adds_once(gpu_cache: Path) -> None:
    n = 3000
    generator = np.random.default_rng()
    x, start = generator.standard_normal(n).astype(np.float32), generator.standard_normal(n).astype(np.float32)
    base = tj.asarray(np.concatenate([start, np.full(n, 9, np.float32)]))
    out = base[:n]  # a view: the rest of the buffer must stay as it was
    tuned = tj.autotune(TILES, key=["x"], warmup=2, rep=5, restore_value=["out"])(add_into)
    tuned[tiles_grid(n)](tj.asarray(x), out)
    np.testing.assert_allclose(out.numpy(), start + x, rtol=1e-6)
    np.testing.assert_array_equal(base.numpy()[n:], 9)
    strided = tj.asarray(np.concatenate([start, start]).reshape(2, n).T.copy())[:, 0]  # every other element
    tj.autotune(TILES, key=["x"], warmup=2, rep=5, restore_value=["out"])(add_into)[tiles_grid(n)](tj.asarray(x),
                                                                                                   strided)
    np.testing.assert_allclose(strided.numpy(), start + x, rtol=1e-6)


@pytest.mark.gpu
@pytest.mark.own_backend(reason="device copies and memsets; no tile kernel")
def test_snapshots_and_zeroing_of_device_arrays_keep_what_is_outside() -> None:
    values = np.arange(24, dtype=np.float64).reshape(4, 6)
    base = tj.asarray(values)
    columns = base[::-1, 1::2]
    from tilejit.runtime.interop import as_view

    snapshot.zero(as_view(columns), base.device)
    want = values.copy()
    want[:, 1::2] = 0
    np.testing.assert_array_equal(base.numpy(), want)
    saved = snapshot.Snapshot(as_view(base[1:3]), base.device)
    base.fill(-1)
    saved.restore()
    saved.close()
    want[0], want[3] = -1, -1
    np.testing.assert_array_equal(base.numpy(), want)
    snapshot.zero(as_view(base), base.device)
    assert not base.numpy().any()


@tj.kernel
def plus_one(x, out, N: tj.Constant[int]):  # type: ignore[no-untyped-def]
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(N,)) + 1)


@pytest.mark.gpu
@pytest.mark.cuda_only(reason="the CUDA backend's located error for a tile too large for the registers")
def test_a_config_too_large_to_compile_is_skipped(gpu_cache: Path, caplog: pytest.LogCaptureFixture) -> None:
    n = 4096
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    out = tj.empty(n, "float32")
    tuned = tj.autotune([Config({"N": 1 << 20}), Config({"N": 256})], key=["x"], warmup=2, rep=5)(plus_one)
    with caplog.at_level(logging.INFO, logger="tilejit"):
        tuned[lambda meta: (tj.cdiv(n, meta["N"]),)](tj.asarray(x), out)
    assert tuned.best_config == Config({"N": 256})
    np.testing.assert_allclose(out.numpy(), x + 1)
    assert any("config 0 (N: 1048576) skipped: TileCompileError:" in r.getMessage() and "too large" in r.getMessage()
               for r in caplog.records)


@pytest.mark.gpu
@pytest.mark.own_backend(reason="times a launch; no tile kernel")
def test_do_bench_times_a_launch_and_keeps_before_untimed() -> None:
    from tilejit.runtime.bench import MAX_RUNS, do_bench

    a = tj.empty(1 << 24, "uint8")
    calls = {"fn": 0, "before": 0}

    def fn() -> None:
        calls["fn"] += 1
        a.fill(1)

    ms = do_bench(fn, warmup=1, rep=5, before=lambda: calls.__setitem__("before", calls["before"] + 1))
    assert 0 < ms < 100 and calls["fn"] == calls["before"] and 7 <= calls["fn"] <= 2 * MAX_RUNS + 6
