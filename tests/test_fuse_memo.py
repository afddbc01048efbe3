"""``tj.fuse``'s repeated calls without a GPU: a call with the very same arguments and ``out=`` as the thread's last
one relaunches its launches (no planning), and anything that could make those launches wrong takes the planning
path again and gets the kernel of its own layout: another array object, a torch tensor changed in place (address,
shape, strides, dtype, moved to the host), another device, stream or ``out=``. Launches are recorded, not run (each
``kernel[grid]`` is replaced by a recorder); torch is the stand-in of ``fake_torch``. Also: the generated
``__call__`` binds arguments as Python binds the function's own parameters."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

import fake_torch
import pytest

import tilejit as tj
from tilejit.api import fuse as fuse_mod
from tilejit.api.fuse_layout import c_strides
from tilejit.runtime.interop import ArrayView

T = fake_torch.TORCH


class StandInDevice:
    """A current device as a fused call sees it."""

    arch = "sm_90"
    multiprocessor_count = 4

    def __init__(self, ordinal: int = 0) -> None:
        self.ordinal = ordinal


class Recorded:
    """Every launch the calls made: (the kernel's source, grid, stream, its arguments), and how many calls planned."""

    def __init__(self) -> None:
        self.launches: list[tuple[str, int, Any, tuple[Any, ...]]] = []
        self.planned = 0
        self.quiet = False  # planning by ``specialize`` (the test's own) is not counted

    def sources(self, f: Any, *args: Any, **kwargs: Any) -> Any:
        """``f.specialize(...)``, not counted as a call that planned."""
        self.quiet = True
        try:
            return f.specialize(*args, **kwargs)
        finally:
            self.quiet = False

    def take(self) -> list[tuple[str, int, Any, tuple[Any, ...]]]:
        out, self.launches = self.launches, []
        return out


@pytest.fixture
def rec(monkeypatch: pytest.MonkeyPatch, use_device: Callable[[Any], Any]) -> Recorded:
    """Launches recorded instead of run; calls that plan (``Fused._key``) counted; the stand-in torch imported."""
    use_device(StandInDevice())
    monkeypatch.setitem(sys.modules, "torch", T)
    r = Recorded()

    def bound(launch: Any, stream: Any) -> Callable[..., None]:
        text, grid = launch.program.source.text, launch.grid
        return lambda *args: r.launches.append((text, grid, stream, args))

    key = fuse_mod.Fused._key

    def counted(self: Any, *args: Any) -> Any:
        r.planned += not r.quiet
        return key(self, *args)

    monkeypatch.setattr(fuse_mod._Launch, "bound", bound)
    monkeypatch.setattr(fuse_mod.Fused, "_key", counted)
    return r


def axpy(a, x, y):  # type: ignore[no-untyped-def]
    return a * x + y


def tensor(ptr: int, shape: tuple[int, ...], dtype: Any = None, strides: tuple[int, ...] | None = None) -> Any:
    return fake_torch.Tensor(ptr, shape, T.float32 if dtype is None else dtype, strides)


def view(ptr: int, shape: tuple[int, ...], dtype: str = "float32",
         strides: tuple[int, ...] | None = None) -> ArrayView:
    return ArrayView(ptr, shape, c_strides(shape) if strides is None else strides, dtype, None)


def signature_of(launch: tuple[str, int, Any, tuple[Any, ...]]) -> list[Any]:
    """What a recorded launch passed: each array's (address, shape, strides, dtype), each number as it is."""
    return [tuple(a[:4]) if isinstance(a, ArrayView) else a for a in launch[3]]


def test_the_same_call_relaunches_without_planning(rec: Recorded) -> None:
    f = tj.fuse(axpy)
    x, y, out = view(0x10000, (64, 64)), view(0x20000, (64, 64)), view(0x30000, (64, 64))
    assert f(2.0, x, y, out=out) is out
    assert rec.planned == 1
    first = rec.take()
    for _ in range(3):
        assert f(2.0, x, y, out=out) is out
    assert rec.planned == 1  # relaunched: nothing planned
    again = rec.take()
    assert [signature_of(la) for la in again] == [signature_of(first[0])] * 3
    assert all(a is b for la in again for a, b in zip(la[3], first[0][3], strict=True))  # the very same arguments
    f(2.0, y=y, x=x, out=out)  # by keyword: bound, then the memo holds
    assert rec.planned == 1 and len(rec.take()) == 1


@pytest.mark.parametrize("change", ["transpose", "broadcast shape", "dtype", "address", "host"])
def test_a_tensor_changed_in_place_is_planned_again(rec: Recorded, change: str) -> None:
    """After a memoized call, a tensor changed in place (as ``transpose_``, ``as_strided_``, ``.data =``, ``set_``
    or ``.cpu()`` through ``.data`` do) is read afresh: the call plans again and launches the kernel of the new
    layout and dtype with the tensor's new address, shape and strides."""
    f = tj.fuse(axpy)
    x, y, out = tensor(0x10000, (64, 64)), tensor(0x20000, (64, 64)), tensor(0x30000, (64, 64))
    f(2.0, x, y, out=out)
    f(2.0, x, y, out=out)
    assert rec.planned == 1
    (before, _) = rec.take()
    if change == "transpose":
        x.restride((64, 64), (1, 64))
    elif change == "broadcast shape":
        x.restride((64, 1), (1, 1))
    elif change == "dtype":
        x.retype(T.float16)
    elif change == "address":
        x.move(0x40000)
    else:
        x.is_cuda = False  # moved to the host through ``.data``: a host address (dispatch.torch_reads_same)
        x.move(0x7F00_0000_1000)
        with pytest.raises((TypeError, ValueError, tj.LaunchError)):
            f(2.0, x, y, out=out)
        assert rec.planned == 2 and rec.take() == []
        return
    f(2.0, x, y, out=out)
    assert rec.planned == 2
    (after,) = rec.take()
    want = rec.sources(tj.fuse(axpy), 2.0, x, y, out=out)
    assert after[0] == want.sources[0] and after[1] == want.grids[0]
    views = [a for a in after[3] if isinstance(a, ArrayView)]
    if change == "address":
        assert after[0] == before[0]  # the same kernel, with the new address
        assert views[0][0] == 0x40000
    else:
        assert after[0] != before[0]  # another kernel: strided, broadcast or half-precision x
    if change == "dtype":
        assert "float16" in after[0] and views[0][3] == "float16"
    f(2.0, x, y, out=out)  # and the changed tensor is remembered in turn
    assert rec.planned == 2 and [signature_of(la) for la in rec.take()] == [signature_of(after)]


def test_other_arrays_devices_streams_and_outputs_are_planned_again(rec: Recorded, use_device: Any) -> None:
    """Another array object of another layout (tilejit views are immutable: another layout is another object),
    another ``out=``, stream or current device: never the last call's launches."""
    f = tj.fuse(axpy)
    x, y, out = view(0x10000, (64, 64)), view(0x20000, (64, 64)), view(0x30000, (64, 64))
    f(2.0, x, y, out=out)
    rec.take()
    xt = view(0x10000, (64, 64), strides=(1, 64))
    f(2.0, xt, y, out=out)
    assert rec.planned == 2 and rec.take()[0][0] == rec.sources(f, 2.0, xt, y, out=out).sources[0]
    x16 = view(0x10000, (64, 64), "float16")
    f(2.0, x16, y, out=out)
    assert rec.planned == 3 and "float16" in rec.take()[0][0]
    f(2, x16, y, out=out)  # an int where a float was: another kind of number
    assert rec.planned == 4
    out2 = view(0x40000, (64, 64))
    f(2, x16, y, out=out2)
    assert rec.planned == 5 and signature_of(rec.take()[-1])[2][0] == 0x40000
    f(2, x16, y, out=out2, stream=7)
    assert rec.planned == 6 and rec.take()[-1][2] == 7
    use_device(StandInDevice(0))  # another device object: the thread's current device changed
    f(2, x16, y, out=out2, stream=7)
    assert rec.planned == 7
    f(2, x16, y, out=out2, stream=7)
    assert rec.planned == 7


def test_several_outputs_and_calls_without_out(rec: Recorded) -> None:
    """A tuple ``out=`` is remembered by the tuple's identity and checks each output tensor; a call without
    ``out=`` is never remembered (its outputs are new arrays)."""

    @tj.fuse
    def two(x, y):  # type: ignore[no-untyped-def]
        return x + y, x * y

    x, y = tensor(0x10000, (256,)), tensor(0x20000, (256,))
    outs = (tensor(0x30000, (256,)), tensor(0x40000, (256,)))
    two(x, y, out=outs)
    two(x, y, out=outs)
    assert rec.planned == 1
    outs[1].restride((256,), (2,))
    two(x, y, out=outs)
    assert rec.planned == 2
    two(x, y, out=list(outs))  # another object: planned
    assert rec.planned == 3


@pytest.mark.parametrize("form", ["positional", "keyword", "positional-only", "keyword-only", "defaults"])
def test_the_generated_call_binds_as_python_does(rec: Recorded, form: str) -> None:
    """Calls of every parameter kind bind as Python binds the function itself: the same errors for calls the
    function refuses, defaults filled in, and a repeated call of any form relaunches only what it means."""
    x, y, out = view(0x10000, (64,)), view(0x20000, (64,)), view(0x30000, (64,))

    def plain(x, y):  # type: ignore[no-untyped-def]
        return x - y

    def pos_only(x, /, y):  # type: ignore[no-untyped-def]
        return x - y

    def kw_only(x, *, y):  # type: ignore[no-untyped-def]
        return x - y

    def defaults(x, y=1.5):  # type: ignore[no-untyped-def]
        return x - y

    func = {"positional": plain, "keyword": plain, "positional-only": pos_only, "keyword-only": kw_only,
            "defaults": defaults}[form]
    f = tj.fuse(func)
    assert type(f) is not tj.Fused and isinstance(f, tj.Fused) and type(f).__name__ == "Fused"
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [((x, y), {}), ((x,), {"y": y}), ((), {"x": x, "y": y}),
                                                           ((x, y, y), {}), ((x,), {"y": y, "z": 1}), ((), {})]
    if form == "defaults":
        calls.append(((x,), {}))
    for args, kwargs in calls:
        try:
            inspect.signature(func).bind(*args, **kwargs)
            python_error = None
        except TypeError as exc:
            python_error = exc
        for _ in range(2):
            if python_error is not None:
                with pytest.raises(TypeError, match=f"^{func.__name__}\\(\\): "):
                    f(*args, out=out, **kwargs)
                continue
            f(*args, out=out, **kwargs)
            (la,) = rec.take()
            got = signature_of(la)
            assert got[0] == tuple(x[:4])
            assert (1.5 in got) if len(args) + len(kwargs) == 1 else (tuple(y[:4]) in got)  # y's default, or y
    assert rec.planned == 1 + (form == "defaults")  # any form of the same arguments: relaunched


def test_a_parameter_named_like_the_generated_code_keeps_the_generic_call(rec: Recorded) -> None:
    def odd(_tj_m, x):  # type: ignore[no-untyped-def]
        return _tj_m + x

    f = tj.fuse(odd)
    assert type(f) is tj.Fused
    x, out = view(0x10000, (64,)), view(0x30000, (64,))
    f(1.0, x, out=out)
    f(1.0, x, out=out)
    assert rec.planned == 1 and len(rec.take()) == 2
