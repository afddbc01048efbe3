"""Where a launch's Python time goes, on the CPU alone (no GPU needed): each tilejit launch path with the
driver's launch replaced by a C function that does nothing and returns 0.

The launch paths run exactly as on a GPU, down to the ctypes call of the driver's entry point, which here
is libc's ``geteuid`` (no arguments read; it returns 0 when run as root, and the script checks that it
does). Differences between rows are tilejit's own Python overhead per launch; the ``geteuid()`` row is the
floor of one ctypes call. Medians of interleaved repeats. Rows marked "torch-like" pass a stand-in for a torch
tensor (``tests/fake_torch.py``: the same public API, written in Python, so its attribute reads cost about what
torch's do, not exactly that); with torch installed the real one is not used here (no GPU). The ``tj.fuse`` rows
(issue 21: within 1.2x of a hand-written tile kernel's launch) call a fused chain of 4 operations over 4096 float32
with ``out=`` beside the hand-written kernel of the chain, ``hand[1](x, y,
out, TILE=4096)``; the ratio column compares each with the hand-written row of the same kind of arrays.

    python bench/bench_launch_cpu.py [--number 100000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import textwrap
import timeit
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tilejit as tj

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import fake_torch

from tilejit.api.loader import loaded
from tilejit.api.raw import RawKernel
from tilejit.language.ir.types import ArrayType
from tilejit.runtime import device as device_state
from tilejit.runtime.interop import ArrayView
from tilejit.runtime.launch import CHECKED_LAUNCHES, Launcher, ParamKind


class _StandInDevice(device_state.Device):
    """The current device as the tile dispatch sees it (it keys specializations by device; made without
    ``__init__``, which would ask the driver)."""

    ordinal = 0
    arch = "sm_90"  # type: ignore[assignment]


def tile_kernel(driver: Any, function: Any) -> Callable[[], Any]:
    """``empty_tile[1](x)``: a tile kernel whose specialization launches through the stand-in driver
    (its ``_build`` skips compiling; everything after it runs as on a GPU)."""

    @tj.kernel
    def empty_tile(x):  # type: ignore[no-untyped-def]
        pass

    def build(arg_types: Any, hints: Any, consts: Any, device: Any) -> Any:
        return loaded(Launcher(function, [("x", ParamKind.array("float32", 1))], 32, driver=driver), None, None)

    empty_tile._build = build
    x = ArrayView(0x1000, (16,), (1,), "float32", None)
    launch = empty_tile[1]
    for _ in range(CHECKED_LAUNCHES + 2):
        launch(x)
    return lambda: launch(x)


def tile_kernel_torch(driver: Any, function: Any, backend: str) -> Callable[[], Any]:
    """``empty_tile[1](t)`` with a torch-like tensor ``t`` (read on every launch: its address may change), with
    ``backend``'s launch key."""

    @tj.kernel(backend=backend)
    def empty_torch(x):  # type: ignore[no-untyped-def]
        pass

    def build(arg_types: Any, hints: Any, consts: Any, device: Any) -> Any:
        return loaded(Launcher(function, [("x", ParamKind.array("float32", 1))], 32, driver=driver), None, None)

    empty_torch._build = build
    t = fake_torch.Tensor(0x1000, (16,), sys.modules["torch"].float32)
    launch = empty_torch[1]
    for _ in range(CHECKED_LAUNCHES + 2):
        launch(t)
    return lambda: launch(t)


def three_arrays(driver: Any, function: Any, backend: str, torch_like: bool = False) -> Callable[[], Any]:
    """``copy3[1](a, b, c)`` with ``backend``'s launch key, alternating between two sets of arrays (torch-like
    tensors with ``torch_like``) so that every call classifies its arguments (no repeat of the last call): the
    Tile IR key adds ``launch_facts``."""

    @tj.kernel(backend=backend)
    def copy3(a, b, c):  # type: ignore[no-untyped-def]
        pass

    params = [(n, ParamKind.array("bfloat16", 2)) for n in "abc"]

    def build(arg_types: Any, hints: Any, consts: Any, device: Any) -> Any:
        return loaded(Launcher(function, params, 32, driver=driver), None, None)

    def array(ptr: int) -> Any:
        if torch_like:
            return fake_torch.Tensor(ptr, (4096, 4096), sys.modules["torch"].bfloat16)
        return ArrayView(ptr, (4096, 4096), (4096, 1), "bfloat16", None)

    copy3._build = build
    sets = [[array(base + i * 0x100_0000) for i in range(3)] for base in (0x1000_0000, 0x2000_0000)]
    launch = copy3[1]
    for _ in range(CHECKED_LAUNCHES + 2):
        launch(*sets[0])
        launch(*sets[1])
    state = [0]

    def call() -> None:
        state[0] ^= 1
        launch(*sets[state[0]])

    return call


def _stand_in_build(driver: Any, function: Any) -> Callable[..., Any]:
    """A ``Kernel._build`` that skips compiling: a launcher of the specialization's parameters through the
    stand-in driver (everything after it runs as on a GPU)."""

    def build(self: Any, arg_types: Any, hints: Any, consts: Any, device: Any, options: Any = None) -> Any:
        params = [(n, ParamKind.array(t.dtype.name, t.ndim) if isinstance(t, ArrayType) else
                   ParamKind.scalar(t.dtype.name)) for n, t in arg_types.items()]
        return loaded(Launcher(function, params, 256, driver=driver), None, None)

    return build


CHAIN = "v = x * y\nv = v + 0.5\nv = tj.tanh(v)\nv = v - y\n"  # bench_fuse.py's chain of 4


def fused(driver: Any, function: Any) -> dict[str, Callable[[], Any]]:
    """The ``tj.fuse`` rows and their hand-written tile kernel rows: 4096 float32, tilejit arrays (immutable
    views) and torch-like tensors, ``out=`` given (the stand-in torch has no allocator)."""
    from tilejit.api.kernel import Kernel

    ns: dict[str, Any] = {"tj": tj}
    exec("def chain(x, y):\n" + textwrap.indent(CHAIN + "return v\n", "    "), ns)
    exec("def hand(x, y, out, TILE: tj.Constant[int]):\n    i = tj.bid(0)\n"
         "    x = tj.load(x, index=(i,), shape=(TILE,))\n    y = tj.load(y, index=(i,), shape=(TILE,))\n"
         + textwrap.indent(CHAIN, "    ") + "    tj.store(out, index=(i,), tile=v)\n", ns)
    fn, hand = tj.fuse(ns["chain"]), tj.kernel(ns["hand"])
    torch = sys.modules["torch"]
    views = [ArrayView(0x1000_0000 + k * 0x10_0000, (4096,), (1,), "float32", None) for k in range(3)]
    tensors = [fake_torch.Tensor(0x2000_0000 + k * 0x10_0000, (4096,), torch.float32) for k in range(3)]
    rows: dict[str, Callable[[], Any]] = {}
    for kind, (x, y, out) in (("tilejit arrays", views), ("torch-like tensors", tensors)):
        rows[f"hand-written tile kernel hand[1](x, y, out, TILE=4096), {kind}"] = \
            lambda x=x, y=y, out=out: hand[1](x, y, out, TILE=4096)
        rows[f"tj.fuse chain(x, y, out=out), {kind}"] = lambda x=x, y=y, out=out: fn(x, y, out=out)
    saved = Kernel._build
    Kernel._build = _stand_in_build(driver, function)  # type: ignore[method-assign]
    try:
        for call in rows.values():
            for _ in range(CHECKED_LAUNCHES + 2):
                call()
    finally:
        Kernel._build = saved  # type: ignore[method-assign]
    return rows


def cases() -> dict[str, Callable[[], Any]]:
    libc = ctypes.CDLL(None)
    if libc.geteuid() != 0:
        sys.exit("run as root: the stand-in driver call (geteuid) must return 0, the CUDA success status")
    driver = SimpleNamespace(cuLaunchKernelEx=libc.geteuid, check=None)
    device = device_state.thread_state().device[0] = object.__new__(_StandInDevice)  # type: ignore[assignment]
    device_state.initialized_driver = lambda: driver  # type: ignore[assignment]  # for RawKernel's own launchers
    function = SimpleNamespace(name="empty", handle=0xF00D)
    launcher = Launcher(function, [("x", ParamKind.pointer("float32"))], 32, driver=driver)
    launch = launcher.launch
    entry = launcher.entry(32, 0, device, lambda *a: sys.exit("entry fell back"))
    kernel = RawKernel('extern "C" __global__ void empty(float* x) {}', "empty")
    kernel._use(entry)
    args = (0x1000,)
    tile = tile_kernel(driver, function)
    fake_torch.install()
    targs = (fake_torch.Tensor(0x1000, (1,), sys.modules["torch"].float32),)
    raw = RawKernel('extern "C" __global__ void empty(float* x) {}', "empty")
    raw._functions[0] = function
    for _ in range(CHECKED_LAUNCHES + 2):
        raw(1, 32, targs)
    return {
        "ctypes call alone: geteuid()": lambda: libc.geteuid(),
        "Launcher.launch(1, args)": lambda: launch(1, args),
        "RawKernel's launch function, called directly": lambda: entry(1, 32, args),
        "RawKernel kernel(1, 32, args)": lambda: kernel(1, 32, args),
        "RawKernel kernel(1, 32, (t,)), t torch-like": lambda: raw(1, 32, targs),
        "tile kernel empty_tile[1](x)": tile,
        "tile kernel empty_tile[1](t), t torch-like, backend='cuda'": tile_kernel_torch(driver, function, "cuda"),
        "the same, backend='tileir'": tile_kernel_torch(driver, function, "tileir"),
        "tile kernel copy3[1](a, b, c), new arrays each call, backend='cuda'": three_arrays(driver, function, "cuda"),
        "the same, backend='tileir' (launch facts in the key)": three_arrays(driver, function, "tileir"),
        "tile kernel copy3[1](a, b, c), new torch-like tensors each call, backend='cuda'":
            three_arrays(driver, function, "cuda", torch_like=True),
        **fused(driver, function),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--number", type=int, default=100_000, help="calls per timing")
    parser.add_argument("--repeats", type=int, default=7, help="interleaved repeats (median reported)")
    opts = parser.parse_args()
    todo = cases()
    ns: dict[str, list[float]] = {name: [] for name in todo}
    for _ in range(opts.repeats):
        for name, call in todo.items():
            best = min(timeit.repeat(call, number=opts.number, repeat=3))
            ns[name].append(best / opts.number * 1e9)
    print(f"Python-side launch cost, Python {sys.version.split()[0]}, no GPU (driver call = geteuid)\n")
    print("| path | ns per launch | over Launcher.launch | over the hand-written kernel |")
    print("| --- | ---: | ---: | ---: |")
    base = statistics.median(ns["Launcher.launch(1, args)"])
    hand = {kind: statistics.median(v) for name, v in ns.items() if name.startswith("hand-written")
            for kind in (name.rpartition(", ")[2],)}
    for name, values in ns.items():
        med = statistics.median(values)
        ratio = f"{med / hand[name.rpartition(', ')[2]]:.2f}x" if name.startswith("tj.fuse") else ""
        print(f"| {name} | {med:.0f} | {med - base:+.0f} | {ratio} |")


if __name__ == "__main__":
    main()
