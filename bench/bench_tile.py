"""Tile-kernel speed side by side on one GPU: tilejit vs torch, Triton and cuBLAS, in one run.

Vector add bandwidth (2^28 f32), fused row softmax and layer norm (8192x8192, f32 and bf16), and
bf16 matmul (4096, 8192). Medians of device-event timings (triton.testing.do_bench), inputs drawn
at random, every result checked against torch before it is timed. Prints a markdown table and
writes JSON to $OUT when set.

    python bench/bench_tile.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import torch

import tilejit as tj

ROWS: list[dict[str, Any]] = []


def bench(fn: Callable[[], Any]) -> float:
    """Median milliseconds of ``fn`` with device events."""
    try:
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=50, rep=300, return_mode="median"))
    except ImportError:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(10):
            fn()
        for _ in range(50):
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return sorted(times)[len(times) // 2]


def record(case: str, impl: str, ms: float, work: float, unit: str) -> None:
    ROWS.append({"case": case, "impl": impl, "ms": ms, "rate": work / (ms * 1e-3) / 1e9, "unit": unit})


def close(a: torch.Tensor, b: torch.Tensor, tol: float) -> None:
    err = ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()
    if not err <= tol:
        raise AssertionError(f"result differs: relative error {err:.2e} > {tol}")


# ---------------------------------------------------------------- vector add


def vector_add_case(n: int) -> None:
    from vector_add import vector_add

    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.full_like(x, float("nan"))
    tile = 4096
    grid = tj.cdiv(n, tile)
    vector_add[grid](x, y, out, TILE=tile)
    torch.cuda.synchronize()
    close(out, x + y, 1e-6)
    nbytes = 3 * n * 4
    record("vector add f32 2^28", "tilejit", bench(lambda: vector_add[grid](x, y, out, TILE=tile)), nbytes, "GB/s")
    record("vector add f32 2^28", "torch", bench(lambda: torch.add(x, y, out=out)), nbytes, "GB/s")
    try:
        import triton
        import triton.language as tl

        @triton.jit
        def tadd(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = offs < n
            tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)

        tgrid = (triton.cdiv(n, 1024),)
        record("vector add f32 2^28", "triton", bench(lambda: tadd[tgrid](x, y, out, n, BLOCK=1024)), nbytes, "GB/s")
    except ImportError:
        pass


# ---------------------------------------------------------------- softmax / layer norm


def triton_row_kernels() -> tuple[Any, Any] | None:
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def tsoftmax(x_ptr, o_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + row * n + offs, mask=m, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, 0))
        tl.store(o_ptr + row * n + offs, (e / tl.sum(e, 0)).to(o_ptr.dtype.element_ty), mask=m)

    @triton.jit
    def tlayernorm(x_ptr, w_ptr, b_ptr, o_ptr, n, eps, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + row * n + offs, mask=m, other=0.0).to(tl.float32)
        mean = tl.sum(x, 0) / n
        d = tl.where(m, x - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(d * d, 0) / n + eps)
        w = tl.load(w_ptr + offs, mask=m).to(tl.float32)
        b = tl.load(b_ptr + offs, mask=m).to(tl.float32)
        tl.store(o_ptr + row * n + offs, (d * rstd * w + b).to(o_ptr.dtype.element_ty), mask=m)

    _ = triton
    return tsoftmax, tlayernorm


def row_cases(m: int, n: int) -> None:
    from layer_norm import layer_norm
    from softmax import softmax

    tri = triton_row_kernels()
    block = 1 << (n - 1).bit_length()
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 1e-2)):
        tag = "f32" if dtype == torch.float32 else "bf16"
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        out = torch.full_like(x, float("nan"))
        nbytes = 2 * m * n * x.element_size()

        softmax[m](x, out, ROWS=1, BLOCK=block)
        torch.cuda.synchronize()
        close(out, torch.softmax(x.float(), dim=1), tol)
        case = f"softmax {tag} {m}x{n}"
        record(case, "tilejit", bench(lambda: softmax[m](x, out, ROWS=1, BLOCK=block)), nbytes, "GB/s")
        record(case, "torch", bench(lambda: torch.softmax(x, dim=1)), nbytes, "GB/s")
        if tri:
            tri[0][(m,)](x, out, n, BLOCK=block)
            record(case, "triton", bench(lambda: tri[0][(m,)](x, out, n, BLOCK=block)), nbytes, "GB/s")

        w, b = torch.randn(n, device="cuda", dtype=dtype), torch.randn(n, device="cuda", dtype=dtype)
        eps = 1e-5
        out.fill_(float("nan"))
        layer_norm[m](x, w, b, out, eps, BLOCK=block)
        torch.cuda.synchronize()
        ref = torch.nn.functional.layer_norm(x.float(), (n,), w.float(), b.float(), eps)
        close(out, ref, tol)
        case = f"layer norm {tag} {m}x{n}"
        record(case, "tilejit", bench(lambda: layer_norm[m](x, w, b, out, eps, BLOCK=block)), nbytes, "GB/s")
        record(case, "torch", bench(lambda: torch.nn.functional.layer_norm(x, (n,), w, b, eps)), nbytes, "GB/s")
        if tri:
            record(case, "triton", bench(lambda: tri[1][(m,)](x, w, b, out, n, eps, BLOCK=block)), nbytes, "GB/s")


# ---------------------------------------------------------------- matmul


def matmul_case(size: int, tiles: list[tuple[int, int, int]]) -> None:
    from matmul import matmul

    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    want = a.float() @ b.float()
    flops = 2.0 * size**3
    case = f"matmul bf16 {size}"
    for bm, bn, bk in tiles:
        consts = {"BM": bm, "BN": bn, "BK": bk}
        c = torch.full((size, size), float("nan"), device="cuda", dtype=torch.bfloat16)
        grid = (tj.cdiv(size, bm), tj.cdiv(size, bn))
        matmul[grid](a, b, c, **consts)
        torch.cuda.synchronize()
        close(c, want, 1e-2)
        record(case, f"tilejit {bm}x{bn}x{bk}", bench(lambda: matmul[grid](a, b, c, **consts)), flops / 1e3, "TFLOP/s")
    c = torch.empty((size, size), device="cuda", dtype=torch.bfloat16)
    record(case, "cuBLAS (torch)", bench(lambda: torch.matmul(a, b)), flops / 1e3, "TFLOP/s")
    try:
        import triton
        import triton.language as tl

        @triton.jit
        def tmm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):  # type: ignore[no-untyped-def]
            pm, pn = tl.program_id(0), tl.program_id(1)
            rm = pm * BM + tl.arange(0, BM)
            rn = pn * BN + tl.arange(0, BN)
            rk = tl.arange(0, BK)
            acc = tl.zeros((BM, BN), dtype=tl.float32)
            for k in range(0, tl.cdiv(K, BK)):
                ta = tl.load(a_ptr + rm[:, None] * K + (k * BK + rk)[None, :])
                tb = tl.load(b_ptr + (k * BK + rk)[:, None] * N + rn[None, :])
                acc = tl.dot(ta, tb, acc)
            tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))

        tg = (size // 128, size // 256)
        fn = lambda: tmm[tg](a, b, c, size, size, size, BM=128, BN=256, BK=64, num_warps=8, num_stages=3)
        record(case, "triton 128x256x64", bench(fn), flops / 1e3, "TFLOP/s")
    except ImportError:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="", help="comma list of: vadd,rows,matmul")
    ap.add_argument("--tiles", default="256x128x64,128x256x64,128x128x32",
                    help="matmul tile shapes BMxBNxBK to measure, comma-separated")
    args = ap.parse_args()
    tiles = [tuple(int(v) for v in t.split("x")) for t in args.tiles.split(",")]
    only = set(args.only.split(",")) - {""}
    cases: list[tuple[str, Callable[[], None]]] = [
        ("vadd", lambda: vector_add_case(1 << (24 if args.quick else 28))),
        ("rows", lambda: row_cases(8192, 8192)),
        ("matmul", lambda: [matmul_case(s, tiles) for s in (4096, 8192)]),  # type: ignore[arg-type]
    ]
    for key, run in cases:
        if only and key not in only:
            continue
        try:
            run()
        except Exception as exc:
            print(f"{key}: FAILED: {type(exc).__name__}: {exc}")
    print(f"\nGPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| case | impl | ms (median) | rate | vs best peer |")
    print("| --- | --- | --- | --- | --- |")
    for case in dict.fromkeys(r["case"] for r in ROWS):
        rows = [r for r in ROWS if r["case"] == case]
        peers = [r["rate"] for r in rows if not r["impl"].startswith("tilejit")]
        best = max(peers) if peers else float("nan")
        for r in rows:
            print(f"| {case} | {r['impl']} | {r['ms']:.4f} | {r['rate']:.0f} {r['unit']} | {r['rate'] / best:.2f} |")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "bench_tile.json").write_text(json.dumps(ROWS, indent=1))


if __name__ == "__main__":
    main()
