"""The warp-specialized wgmma K loop (TILEJIT_CUDA_WARP_SPECIALIZE) against the plain pipeline and cuBLAS, on one
H100/H200: examples/matmul.py's ``matmul`` and ``matmul_grouped`` with the switch off and on, per tile config, dtype
and shape. Each result is checked against a float32 torch reference (relative 2-norm error <= 1e-2) before it is
timed; a wrong or failing one is reported, not timed. Times are medians of ``triton.testing.do_bench`` (torch CUDA
events when Triton is missing). Prints one markdown row per (dtype, shape, kernel, tiles): TFLOP/s off, on, the
on/off speedup and each over cuBLAS, then the best of each per shape. ``--tma 0`` runs the warp-specialized
kernels with TILEJIT_CUDA_TMA=0 (cp.async producer; default 1: TMA); ``--compare tma`` compares the producers
instead: "off" is warp-specialized with cp.async, "on" warp-specialized with TMA.

    python bench/ws_sweep.py [--dtypes bfloat16,float16] [--quick] [--tma 0|1] [--compare ws|tma]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "examples")]

import tilejit as tj

SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (3000, 5000, 4000))
TILES = ((128, 256, 32), (128, 256, 64), (256, 128, 64), (128, 128, 64))
GROUP = 8
SWITCH = "TILEJIT_CUDA_WARP_SPECIALIZE"
TMA = "TILEJIT_CUDA_TMA"


def settings(compare: str, tma: str, on: bool) -> dict[str, str]:
    """The environment of the "off" or "on" column: warp specialization off/on (TMA as ``tma`` says), or with
    ``compare`` "tma" warp-specialized with the cp.async/TMA producer."""
    if compare == "tma":
        return {SWITCH: "1", TMA: "1" if on else "0"}
    return {SWITCH: "1" if on else "0", TMA: tma}


def median_ms(fn: Callable[[], Any]) -> float:
    """Median milliseconds of ``fn``: triton.testing.do_bench (L2 flushed between runs), else CUDA events."""
    try:
        from triton.testing import do_bench
    except ImportError:
        import torch

        for _ in range(5):
            fn()
        times = []
        for _ in range(30):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return sorted(times)[len(times) // 2]
    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def fresh_kernels() -> dict[str, Any]:
    """Fresh kernel objects of the example kernels (a kernel keeps the code it first built for a specialization;
    the switch is read then, so each set is first launched with its own setting)."""
    from matmul import matmul, matmul_grouped

    return {"matmul": tj.kernel(matmul.func), "matmul_grouped": tj.kernel(matmul_grouped.func)}


def check(c: Any, want: Any) -> float:
    g = c.double()
    return float(((g - want.double()).norm() / want.double().norm().clamp_min(1e-30)).item())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", default="bfloat16,float16")
    ap.add_argument("--quick", action="store_true", help="4096^3 and 128x256x64 / 128x128x64 only")
    ap.add_argument("--tma", choices=("0", "1"), default="1", help="TILEJIT_CUDA_TMA of the warp-specialized kernels")
    ap.add_argument("--compare", choices=("ws", "tma"), default="ws",
                    help="ws: plain pipeline vs warp-specialized; tma: cp.async vs TMA producer")
    args = ap.parse_args()
    import torch

    shapes = SHAPES[:1] if args.quick else SHAPES
    tiles = TILES[1::2] if args.quick else TILES
    kernels = {False: fresh_kernels(), True: fresh_kernels()}
    print(f"GPU: {torch.cuda.get_device_name()}; off = {settings(args.compare, args.tma, False)}, "
          f"on = {settings(args.compare, args.tma, True)}")
    print("| dtype | M x N x K | kernel | tiles | off TFLOP/s | on TFLOP/s | on/off | off/cuBLAS | on/cuBLAS |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    best: list[tuple[str, str, float, float, float]] = []
    for dname in args.dtypes.split(","):
        dt = getattr(torch, dname)
        for m, n, k in shapes:
            a, b = torch.randn(m, k, device="cuda", dtype=dt), torch.randn(k, n, device="cuda", dtype=dt)
            c = torch.empty(m, n, device="cuda", dtype=dt)
            want = a.float() @ b.float()
            flops = 2.0 * m * n * k
            ref = flops / median_ms(lambda: torch.matmul(a, b, out=c)) / 1e9
            top = {False: 0.0, True: 0.0}
            for name in ("matmul", "matmul_grouped"):
                for bm, bn, bk in tiles:
                    tf: dict[bool, float] = {}
                    for ws in (False, True):
                        kern = kernels[ws][name]
                        tm, tn = -(-m // bm), -(-n // bn)
                        extra = {"GROUP": GROUP} if name == "matmul_grouped" else {}
                        grid = (tm * tn,) if extra else (tm, tn)

                        def launch(kern: Any = kern, grid: Any = grid, extra: dict[str, int] = extra,
                                   bm: int = bm, bn: int = bn, bk: int = bk) -> None:
                            kern[grid](a, b, c, BM=bm, BN=bn, BK=bk, **extra)

                        try:
                            os.environ.update(settings(args.compare, args.tma, ws))  # read when this launch builds
                            c.fill_(float("nan"))
                            launch()
                            torch.cuda.synchronize()
                            err = check(c, want)
                            if not err <= 1e-2:
                                print(f"<!-- {dname} {m}x{n}x{k} {name} {bm}x{bn}x{bk} ws={int(ws)}: WRONG, "
                                      f"relative error {err:.2e} -->")
                                continue
                            tf[ws] = flops / median_ms(launch) / 1e9
                            top[ws] = max(top[ws], tf[ws])
                        except Exception as exc:
                            print(f"<!-- {dname} {m}x{n}x{k} {name} {bm}x{bn}x{bk} ws={int(ws)}: "
                                  f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]} -->")
                    off, on = tf.get(False, 0.0), tf.get(True, 0.0)
                    print(f"| {dname} | {m}x{n}x{k} | {name} | {bm}x{bn}x{bk} | {off:.0f} | {on:.0f} | "
                          f"{on / off if off else 0:.2f} | {off / ref:.2f} | {on / ref:.2f} |", flush=True)
            best.append((dname, f"{m}x{n}x{k}", ref, top[False], top[True]))
    print("\nBest per shape (TFLOP/s; ratio to cuBLAS):\n")
    print("| dtype | M x N x K | cuBLAS | best off | best on | off/cuBLAS | on/cuBLAS |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for dname, shape, ref, off, on in best:
        print(f"| {dname} | {shape} | {ref:.0f} | {off:.0f} | {on:.0f} | {off / ref:.2f} | {on / ref:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
