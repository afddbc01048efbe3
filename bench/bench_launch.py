"""Per-launch overhead on one GPU: tilejit against cuda.core, CuPy, Triton and torch, in one run.

Every implementation launches the same empty kernel (one pointer parameter, grid 1, block 32) in
the same Python loop: N launches after a warm-up, one synchronize at the end, many repeats
interleaved across the implementations; the figure is the median microseconds per launch. N stays
below the driver's queue of pending launches (about 1024), so the loop measures the CPU side of a
launch rather than the GPU draining a full queue. A peer
that is missing or fails is reported and skipped. Prints a markdown table with ratios against the
best peer; writes JSON to $OUT if set.

    python bench/bench_launch.py [--n 500] [--repeats 301] [--pin CPU]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tilejit as tj

EMPTY = 'extern "C" __global__ void empty(float* x) {}\n'


def measure(
    cases: dict[str, Callable[[], Any]], sync: Callable[[], Any], n: int, repeats: int, failed: dict[str, str]
) -> dict[str, list[float]]:
    """Microseconds per launch of each repeat (N launches, then one sync) for every case.

    Repeats are interleaved across the cases (each round runs every case once, in a shuffled order) so
    slow drifts of the machine affect all of them alike and no case always follows the same one; the
    garbage collector is off while timing.
    """
    for name, launch in list(cases.items()):
        try:
            for _ in range(min(n, 2000)):
                launch()
            sync()
        except Exception as exc:
            failed[name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            del cases[name]
    out: dict[str, list[float]] = {name: [] for name in cases}
    gc.collect()
    gc.disable()
    try:
        order = list(cases.items())
        shuffle = random.Random(0).shuffle
        for _ in range(repeats):
            shuffle(order)
            for name, launch in order:
                t0 = time.perf_counter()
                for _ in range(n):
                    launch()
                sync()
                out[name].append((time.perf_counter() - t0) / n * 1e6)
    finally:
        gc.enable()
    return out


def tilejit_cases(x: Any) -> dict[str, Callable[[], Any]]:
    from tilejit.api.raw import RawKernel
    from tilejit.runtime.launch import Launcher

    k = RawKernel(EMPTY, "empty")
    args = (x,)
    k(1, 32, args)
    launch = k.launcher(32).launch
    by_pointers = Launcher(k.function(), k.params, 32, param_passing="pointers").launch
    cases: dict[str, Callable[[], Any]] = {
        "tilejit RawKernel": lambda: k(1, 32, args),
        "tilejit Launcher.launch": lambda: launch(1, args),
        "tilejit Launcher.launch (kernelParams)": lambda: by_pointers(1, args),
    }
    try:
        import torch

        targs = (torch.zeros(1, device="cuda"),)
        k(1, 32, targs)
        cases["tilejit RawKernel (torch tensor arg)"] = lambda: k(1, 32, targs)
    except ImportError:
        pass
    return cases


def tile_kernel_case(x: Any) -> dict[str, Callable[[], Any]]:
    @tj.kernel
    def empty_tile(x):  # type: ignore[no-untyped-def]
        pass

    try:
        empty_tile[1](x)
    except Exception:
        # Some front ends want a body that touches its argument: a 1-element load/store.
        @tj.kernel
        def empty_tile(x):  # type: ignore[no-untyped-def]
            tj.store(x, index=(0,), tile=tj.load(x, index=(0,), shape=(1,)))

        empty_tile[1](x)
    launch = empty_tile[1]
    cases: dict[str, Callable[[], Any]] = {"tilejit tile kernel empty[1](x)": lambda: launch(x)}
    try:
        import torch

        t = torch.zeros(1, device="cuda")
        launch(t)
        cases["tilejit tile kernel (torch tensor arg)"] = lambda: launch(t)
    except ImportError:
        pass
    try:
        cases.update(same_cubin_case(empty_tile, x))
    except Exception as exc:  # no cuda.core, or an older one
        print(f"no cuda.core launch of the tile kernel's own CUBIN: {type(exc).__name__}: {exc}")
    return cases


#: The peer that launches the tile kernel's own Tile IR CUBIN (three parameters, tileiras's metadata): a tile
#: kernel's ratio to it is what tilejit's launch adds, apart from what the driver does with that CUBIN.
SAME_CUBIN = "cuda.core (the tile kernel's Tile IR CUBIN)"


def same_cubin_case(kernel: Any, x: Any) -> dict[str, Callable[[], Any]]:
    """cuda.core launching the CUBIN that ``kernel`` (one float32 vector parameter) launches with, when the Tile IR
    backend built it: its parameters are the pointer, extent and stride (cuda.core passes scalars, not the CUDA
    backend's one 24-byte parameter, so that backend has no such case)."""
    import numpy as np

    try:
        from cuda.core import Device, LaunchConfig, ObjectCode, launch
    except ImportError:
        from cuda.core.experimental import Device, LaunchConfig, ObjectCode, launch
    dev = tj.get_device()
    image = tj.compile(kernel, "float32[:]", target=dev.arch).image()
    if image.backend != "tileir":
        return {}
    cc_dev = Device()
    cc_dev.set_current()
    entry = ObjectCode.from_cubin(image.image).get_kernel(image.symbol)
    stream = cc_dev.default_stream
    config = LaunchConfig(grid=1, block=image.num_threads)
    args = (np.uint64(x.ptr), np.int64(1), np.int64(1))
    launch(stream, config, entry, *args)
    return {SAME_CUBIN: lambda: launch(stream, config, entry, *args)}


def cuda_core_case() -> Callable[[], Any]:
    try:
        from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
    except ImportError:
        from cuda.core.experimental import Device, LaunchConfig, Program, ProgramOptions, launch
    dev = Device()
    dev.set_current()
    arch = "".join(str(v) for v in dev.compute_capability)
    prog = Program(EMPTY, code_type="c++", options=ProgramOptions(arch=f"sm_{arch}"))
    kernel = prog.compile("cubin").get_kernel("empty")
    stream = dev.default_stream
    try:
        buf = dev.allocate(4, stream=stream)
    except TypeError:  # older cuda.core: no stream argument
        buf = dev.allocate(4)
    config = LaunchConfig(grid=1, block=32)
    try:
        launch(stream, config, kernel, buf)
        return lambda: launch(stream, config, kernel, buf)
    except TypeError:  # cuda.core < 0.3: launch(kernel, config, *args), stream in the config
        config = LaunchConfig(grid=1, block=32, stream=stream)
        launch(kernel, config, buf)
        return lambda: launch(kernel, config, buf)


def cupy_case() -> Callable[[], Any]:
    import cupy

    k = cupy.RawKernel(EMPTY, "empty")
    x = cupy.zeros(1, dtype=cupy.float32)
    args = (x,)
    k((1,), (32,), args)
    return lambda: k((1,), (32,), args)


def triton_case() -> Callable[[], Any]:
    import torch
    import triton

    @triton.jit
    def empty(x_ptr):  # type: ignore[no-untyped-def]
        pass

    x = torch.zeros(1, device="cuda")
    grid = (1,)
    empty[grid](x)
    _ = triton
    return lambda: empty[grid](x)


def torch_case() -> Callable[[], Any]:
    import torch

    x = torch.zeros(1, device="cuda")
    x.add_(1)
    return lambda: x.add_(1)


def ctypes_case(x: Any) -> Callable[[], Any]:
    """The plain ctypes way: cuLaunchKernel with argtypes and a kernelParams array built per call."""
    import ctypes

    from tilejit.api.raw import RawKernel
    from tilejit.runtime.device import initialized_driver

    d = initialized_driver()
    fn = RawKernel(EMPTY, "empty").function()
    f = ctypes.c_void_p(fn.handle)
    ptr = x.ptr

    def launch() -> None:
        p = ctypes.c_uint64(ptr)
        params = (ctypes.c_void_p * 1)(ctypes.addressof(p))
        d.check(d.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, None, params, None), "cuLaunchKernel")

    launch()
    return launch


def paired_ratio(case: list[float], peer: list[float], resamples: int = 2000) -> tuple[float, float, float, float]:
    """(median, 95% interval low, high, share of rounds faster) of the per-round ratio case/peer.

    Each round times every case once, back to back, so a round's ratio cancels what the machine did
    in that round; the interval is a bootstrap of the median over rounds.
    """
    ratios = [c / p for c, p in zip(case, peer)]
    rng = random.Random(1)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples))
    faster = sum(r < 1.0 for r in ratios) / len(ratios)
    return statistics.median(ratios), meds[int(0.025 * resamples)], meds[int(0.975 * resamples) - 1], faster


def print_paired(per_case: dict[str, list[float]], peer: str) -> None:
    """The tilejit cases against ``peer``, round by round."""
    print(f"\nPer-round ratio against {peer} (median over rounds, bootstrap 95% interval, rounds faster):\n")
    print(f"| implementation | ratio to {peer} | 95% interval | rounds faster |")
    print("| --- | ---: | --- | ---: |")
    for name in sorted(per_case, key=lambda n: statistics.median(per_case[n])):
        if name.startswith("tilejit"):
            med, low, high, faster = paired_ratio(per_case[name], per_case[peer])
            print(f"| {name} | {med:.3f}x | {low:.3f}-{high:.3f} | {faster:.0%} |")


#: What the generated launch functions read of a torch tensor argument (runtime/dispatch.torch_reads_same): a
#: launch with the same tensor again reads data_ptr(), dtype, shape and is_contiguous() (tile kernel; stride() for a
#: strided tensor) or data_ptr(), dtype and is_contiguous() (RawKernel pointer); is_cuda is read by a new tensor's.
TORCH_READS = ("t.is_cuda", "t.data_ptr()", "t.dtype", "t.shape", "t.stride()", "t.is_contiguous()")


def print_torch_reads(number: int = 200_000) -> None:
    """Nanoseconds per read of a CUDA tensor's attributes that the launch paths make (best of 5, less the cost of
    reading the variable), for telling a torch-argument launch's gap to the tilejit-array one apart."""
    try:
        import torch
    except ImportError:
        return
    import timeit

    env = {"t": torch.zeros(16, device="cuda")}
    floor = min(timeit.repeat("t", globals=env, number=number, repeat=5))
    print("\nReads of a CUDA torch tensor, ns each:\n\n| read | ns |\n| --- | ---: |")
    for read in TORCH_READS:
        best = min(timeit.repeat(read, globals=env, number=number, repeat=5))
        print(f"| `{read}` | {(best - floor) / number * 1e9:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=500, help="launches per repeat")
    ap.add_argument("--repeats", type=int, default=301)
    ap.add_argument("--pin", type=int, default=None, metavar="CPU",
                    help="pin the timing thread to this CPU once every library is initialized (Linux)")
    args = ap.parse_args()

    dev = tj.get_device()
    from tilejit.runtime.array import zeros

    x = zeros(1, "float32")
    sync = dev.synchronize

    cases: dict[str, Callable[[], Any]] = {}
    skipped: dict[str, str] = {}
    peers = {
        "cuda.core": cuda_core_case,
        "CuPy RawKernel": cupy_case,
        "Triton (empty @triton.jit)": triton_case,
        "torch x.add_(1)": torch_case,
        "ctypes cuLaunchKernel (kernelParams)": lambda: ctypes_case(x),
    }
    builders: list[tuple[str, Callable[[], Any]]] = [("tilejit", lambda: tilejit_cases(x))]
    try:
        has_tile_kernels = hasattr(tj, "kernel")
    except ImportError:
        has_tile_kernels = False
    if has_tile_kernels:
        builders.append(("tilejit tile kernel empty[1](x)", lambda: tile_kernel_case(x)))
    builders += list(peers.items())
    for name, build in builders:
        try:
            made = build()
            if isinstance(made, dict):
                cases.update(made)
            else:
                cases[name] = made
        except Exception as exc:
            skipped[name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            if os.environ.get("BENCH_VERBOSE"):
                traceback.print_exc()

    if args.pin is not None:
        # Only this thread: the driver's own threads, started during initialization, keep their CPUs.
        os.sched_setaffinity(0, {args.pin})
    per_case = measure(cases, sync, args.n, args.repeats, skipped)
    results: dict[str, dict[str, Any]] = {
        name: {"median_us": statistics.median(per), "min_us": min(per), "repeats_us": per}
        for name, per in per_case.items()
    }

    peer_names = [n for n in results if not n.startswith("tilejit")]
    best_peer = min(peer_names, key=lambda n: results[n]["median_us"]) if peer_names else None
    best = results[best_peer]["median_us"] if best_peer else None
    print(
        f"\nLaunch overhead on {dev.name} ({dev.arch}), Python {platform.python_version()}, "
        f"N={args.n} launches x {args.repeats} repeats, empty kernel, grid 1 x block 32"
        + (f", timing thread pinned to CPU {args.pin}" if args.pin is not None else "") + "\n"
    )
    print("| implementation | median µs/launch | min µs/launch | vs best peer |")
    print("| --- | ---: | ---: | ---: |")
    for name, r in sorted(results.items(), key=lambda kv: kv[1]["median_us"]):
        ratio = f"{r['median_us'] / best:.2f}x" if best else "-"
        print(f"| {name} | {r['median_us']:.2f} | {r['min_us']:.2f} | {ratio} |")
    if best_peer:
        print(f"\nbest peer: {best_peer} ({best:.2f} µs)")
        print_paired(per_case, best_peer)
    if SAME_CUBIN in per_case:
        print_paired({n: v for n, v in per_case.items() if n.startswith("tilejit tile kernel")} | {
            SAME_CUBIN: per_case[SAME_CUBIN]}, SAME_CUBIN)
    for name, why in skipped.items():
        print(f"skipped {name}: {why}")
    print_torch_reads()

    out_dir = os.environ.get("OUT")
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        payload = {
            "device": dev.name,
            "arch": dev.arch,
            "python": platform.python_version(),
            "n": args.n,
            "repeats": args.repeats,
            "pinned_cpu": args.pin,
            "results": results,
            "best_peer": best_peer,
            "skipped": skipped,
        }
        (Path(out_dir) / "bench_launch.json").write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
