"""One rule picks the compile target when none is given, for every entry point: the current GPU's architecture,
else ``TILEJIT_ARCH``, else one ``tj.TargetError`` saying what to do (``compiler.targets.default_target``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import tilejit as tj
from tilejit.api.raw import RawKernel
from tilejit.compiler import targets
from tilejit.compiler.nvrtc import compile_cuda
from tilejit.compiler.targets import Target
from tilejit.errors import TargetError

SOURCE = 'extern "C" __global__ void fill(float* a, int n) { int i = threadIdx.x; if (i < n) a[i] = 1.0f; }\n'


@tj.kernel
def scale(x, out, TILE: tj.Constant[int]):
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)) * 2)


SIG = (tj.float32[:], tj.float32[:])

#: Each compile entry point, called with no target; each returns something with ``.target``.
ENTRY_POINTS: dict[str, Callable[[], Any]] = {
    "tj.compile": lambda: tj.compile(scale, SIG, constants={"TILE": 64}),
    "RawKernel.compile": lambda: RawKernel(SOURCE, "fill").compile(),
    "compile_cuda": lambda: compile_cuda(SOURCE, cache=False),
}

NO_TARGET = ("no GPU is present to choose a compile target: pass target='sm_90', set TILEJIT_ARCH=sm_90, "
             "or run where a GPU is")


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a machine without a GPU (whatever this one has), and no ``TILEJIT_ARCH``."""
    monkeypatch.setattr(targets, "_has_gpu", lambda: False)
    monkeypatch.delenv("TILEJIT_ARCH", raising=False)


def test_every_entry_point_raises_the_same_target_error(no_gpu: None) -> None:
    """No GPU and no ``TILEJIT_ARCH``: one error type and one message, which says what to do."""
    messages = {}
    for name, entry in ENTRY_POINTS.items():
        with pytest.raises(TargetError) as info:
            entry()
        assert type(info.value) is TargetError, name
        messages[name] = str(info.value)
    assert set(messages.values()) == {NO_TARGET}, messages


def test_every_entry_point_uses_tilejit_arch(no_gpu: None, nvrtc_here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEJIT_ARCH", "sm_86")
    for name, entry in ENTRY_POINTS.items():
        assert entry().target == Target(8, 6), name


def test_every_entry_point_names_a_bad_tilejit_arch(no_gpu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEJIT_ARCH", "sm_9")
    for name, entry in ENTRY_POINTS.items():
        with pytest.raises(TargetError, match=r"^TILEJIT_ARCH='sm_9': invalid target 'sm_9'"):
            entry()
        assert name


def test_every_entry_point_prefers_the_gpu(nvrtc_here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a GPU (a stand-in here) its architecture wins over ``TILEJIT_ARCH``."""
    import tilejit.runtime.device

    monkeypatch.setattr(targets, "_has_gpu", lambda: True)
    monkeypatch.setattr(tilejit.runtime.device, "get_device", lambda: SimpleNamespace(arch="sm_80"))
    monkeypatch.setenv("TILEJIT_ARCH", "sm_86")
    for name, entry in ENTRY_POINTS.items():
        assert entry().target == Target(8, 0), name


def test_the_command_line_gives_its_own_way_to_name_a_target(no_gpu: None) -> None:
    """``tilejit compile FILE.cu`` without ``--arch`` follows the same rule; its advice names ``--arch``."""
    with pytest.raises(TargetError) as info:
        targets.default_target(how="--arch sm_90")
    assert str(info.value) == NO_TARGET.replace("target='sm_90'", "--arch sm_90")
