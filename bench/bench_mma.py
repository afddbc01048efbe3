"""Tensor-core kernels side by side on one GPU (issue 18's "Measure"): tilejit on both backends against cuBLAS (torch),
torch SDPA and Triton's tutorial kernels, in one process.

Families: matmul bf16 and f16 (examples/matmul.py's kernel and a grouped-order variant as in Triton's tutorial 03;
square, LLM shapes and their transposes, shapes off the tile, small M: there also examples/matmul.py's split-K
launches where ``splitk_slices`` cuts K, labelled "split-K S"), transposed operands (A stored (K, M), B
stored (N, K), through ``tj.transpose``), batched (3-D arrays, batch on ``bid(2)``) and grouped GEMM (the language
has no arrays of arrays: one tilejit launch per problem), a bias + ReLU epilogue, attention forward and backward
(``examples/attention.py`` vs SDPA's flash backend and tutorial 06's forward), and the registers / local memory
(spills) / shared memory of every tilejit kernel, read with cuFuncGetAttribute from the loaded CUBIN (tilejit's NVRTC
log carries no ptxas statistics: it runs without ``-Xptxas -v``).

Each contender's output is checked against a float32 torch reference before it is timed (a wrong result is reported,
not timed); times are medians of ``triton.testing.do_bench``. Where a contender has several configs (tiles), the
fastest correct one is reported with its config. Ratios per shape are each contender's TFLOP/s over the best peer's
(cuBLAS/SDPA/Triton; > 1 is faster than every peer), with geometric means per family. Prints markdown and progress
lines; writes bench_mma.md, bench_mma.json and bench_mma.png (ratios per shape, one panel per family) to --out.

    python bench/bench_mma.py [--quick] [--families matmul,attention,...] [--backends cuda,tileir] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "examples")]

from bench_tileir import _md, failure, first_line, ratio_table, result
from bench_tileir import summary as tileir_summary

import tilejit as tj

FAMILIES = ("matmul", "transposed", "batched", "grouped", "epilogue", "attention", "registers")
BACKENDS = ("cuda", "tileir")
#: Contenders whose name starts so are tilejit's; every other one is a peer.
TILEJIT = "tilejit"

SQUARE = ((2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192))
LLM = ((4096, 14336, 4096), (8192, 4096, 14336), (14336, 4096, 4096), (4096, 8192, 14336))
ODD = ((3000, 5000, 4000), (1000, 1000, 1000))
SMALL_M = ((16, 4096, 4096), (64, 4096, 4096), (128, 4096, 4096))
MATMUL_SHAPES = SQUARE + LLM + ODD + SMALL_M
QUICK_MATMUL_SHAPES = ((4096, 4096, 4096), (4096, 14336, 4096), (3000, 5000, 4000), (16, 4096, 4096))
TRANSPOSED_SHAPES = ((4096, 4096, 4096), (4096, 14336, 4096), (3000, 5000, 4000))
QUICK_TRANSPOSED_SHAPES = ((4096, 4096, 4096),)
#: (batch, M, N, K)
BATCHED_SHAPES = ((32, 1024, 1024, 1024), (8, 2048, 2048, 2048), (64, 512, 512, 512), (16, 1000, 1000, 1000))
QUICK_BATCHED_SHAPES = ((32, 1024, 1024, 1024),)
#: Each grouped GEMM: its problems' (M, N, K).
GROUPED = (((1024, 1024, 1024), (2048, 512, 1024), (512, 2048, 2048), (4096, 1024, 512)),
           ((4096, 4096, 4096), (2048, 4096, 4096), (1024, 4096, 4096), (512, 4096, 4096)))
QUICK_GROUPED = GROUPED[:1]
EPILOGUE_SHAPES = ((4096, 4096, 4096), (4096, 14336, 4096), (3000, 5000, 4000))
QUICK_EPILOGUE_SHAPES = ((4096, 4096, 4096),)
#: Attention: (Z, H, N_CTX, HEAD_DIM, causal)
ATTENTION_CASES = tuple((4, 32, n, d, c) for n in (1024, 4096) for d in (64, 128) for c in (False, True))
QUICK_ATTENTION_CASES = ((4, 32, 4096, 64, False), (4, 32, 4096, 128, True))
#: tilejit matmul tiles (BM, BN, BK); the fastest correct one per shape is reported.
TILES = ((128, 256, 32), (128, 256, 64), (128, 128, 64))
QUICK_TILES = ((128, 256, 32), (128, 128, 64))
#: Also tried on transposed operands in a quick run: a tile stored K-major (B^T's B, and A) has 128-byte rows (TMA
#: boxes, the 128-byte swizzle) only with BK=64; with BK=32 both of B^T's operands come in 64-byte rows
QUICK_K_MAJOR_TILE = (128, 256, 64)
GROUP = 8  # tile rows per group of the grouped order (examples/matmul.py matmul_grouped)


# ---------------------------------------------------------------- arguments and plan


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a few shapes per family, one tile (about 2 minutes)")
    ap.add_argument("--families", default="", help=f"comma list of: {','.join(FAMILIES)} (default: all)")
    ap.add_argument("--backends", default=",".join(BACKENDS), help="tilejit backends to run (default: cuda,tileir)")
    ap.add_argument("--dtypes", default="bfloat16,float16", help="matmul family dtypes (default: bfloat16,float16)")
    ap.add_argument("--out", default=None, help="folder for the table, JSON and plot (default: $OUT)")
    args = ap.parse_args(argv)
    args.family_list = _choose(ap, "--families", args.families, FAMILIES)
    args.backend_list = _choose(ap, "--backends", args.backends, BACKENDS)
    args.dtype_list = _choose(ap, "--dtypes", args.dtypes, ("bfloat16", "float16"))
    args.out = args.out or os.environ.get("OUT") or None
    return args


def _choose(ap: argparse.ArgumentParser, option: str, text: str, allowed: Sequence[str]) -> tuple[str, ...]:
    """The comma list ``text`` of ``allowed`` names (all of them when empty); a usage error names what is unknown."""
    chosen = [x for x in text.split(",") if x]
    bad = [x for x in chosen if x not in allowed]
    if bad:
        ap.error(f"{option}: unknown {', '.join(bad)}; choose from {', '.join(allowed)}")
    return tuple(dict.fromkeys(chosen)) if chosen else tuple(allowed)


def plan(quick: bool) -> dict[str, Any]:
    """The shapes each family measures."""
    if quick:
        return {"matmul": QUICK_MATMUL_SHAPES, "transposed": QUICK_TRANSPOSED_SHAPES, "batched": QUICK_BATCHED_SHAPES,
                "grouped": QUICK_GROUPED, "epilogue": QUICK_EPILOGUE_SHAPES, "attention": QUICK_ATTENTION_CASES,
                "tiles": QUICK_TILES}
    return {"matmul": MATMUL_SHAPES, "transposed": TRANSPOSED_SHAPES, "batched": BATCHED_SHAPES, "grouped": GROUPED,
            "epilogue": EPILOGUE_SHAPES, "attention": ATTENTION_CASES, "tiles": TILES}


def matmul_flops(m: int, n: int, k: int, batch: int = 1) -> float:
    """Multiply-adds of an (M, K) @ (K, N) product, counted as 2 flops each."""
    return 2.0 * batch * m * n * k


def attention_flops(z: int, h: int, n: int, d: int, causal: bool, backward: bool = False) -> float:
    """Tutorial 06's count: 2 matmuls of 2*N*N*D flops per head forward (half when causal), 2.5x that backward."""
    flops = 4.0 * z * h * n * n * d * (0.5 if causal else 1.0)
    return flops * 2.5 if backward else flops


def shape_label(shape: Sequence[int]) -> str:
    """``4096x14336x4096``."""
    return "x".join(str(s) for s in shape)


def attention_label(z: int, h: int, n: int, d: int, causal: bool) -> str:
    """``4x32x4096 d64 causal``."""
    return f"{z}x{h}x{n} d{d}{' causal' if causal else ''}"


# ---------------------------------------------------------------- ratios, tables, plot


def is_peer(contender: str) -> bool:
    """Whether ``contender`` is a peer (not one of tilejit's)."""
    return not contender.startswith(TILEJIT)


def ratios(results: list[dict[str, Any]], group: str) -> dict[str, dict[str, float]]:
    """Per contender, per shape of ``group``: its rate over the best peer's rate at that shape (both measured)."""
    rows = [r for r in results if r["group"] == group and r["rate"]]
    best: dict[str, float] = {}
    for r in rows:
        if is_peer(r["contender"]):
            best[r["shape"]] = max(best.get(r["shape"], 0.0), r["rate"])
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        if best.get(r["shape"]):
            out.setdefault(r["contender"], {})[r["shape"]] = r["rate"] / best[r["shape"]]
    return out


def group_table(results: list[dict[str, Any]], group: str) -> list[str]:
    """The markdown table of one group: a row per shape, a column per contender (TFLOP/s, ratio to the best peer and
    the config that ran, or why there is none), and a last row of geometric-mean ratios."""
    rows = [r for r in results if r["group"] == group]
    return ratio_table(rows, ratios(results, group), f"### {group} (TFLOP/s; ratio to the best peer)", "best peer")


def summary(results: list[dict[str, Any]]) -> list[str]:
    """One line per group and contender: the geometric mean of its ratios to the best peer."""
    return tileir_summary(results, ratios, ("family", "geomean ratio to best peer"))


def epilogue_cost(results: list[dict[str, Any]]) -> list[str]:
    """Per shape and backend: how much longer the fused bias + ReLU kernel takes than the plain tilejit matmul."""
    lines = []
    cells = {(r["shape"], r["contender"]): r for r in results
             if r["group"].startswith("epilogue") and r["ms"] is not None and r["status"] == "ok"}
    for (shape, contender), r in cells.items():
        if not contender.startswith(TILEJIT) or contender.endswith(" plain"):
            continue
        plain = cells.get((shape, f"{contender} plain"))
        if plain is not None:
            lines.append(f"- {shape}, {contender}: bias + ReLU costs {100.0 * (r['ms'] / plain['ms'] - 1):+.1f}% "
                         "over the same kernel without it")
    return lines


def register_table(rows: list[dict[str, Any]]) -> list[str]:
    """The markdown table of each tilejit kernel's registers per thread, local memory (spills), shared memory and
    threads per block."""
    lines = ["### tilejit kernels: registers and spills (cuFuncGetAttribute on the loaded CUBIN)", "",
             "| kernel | backend | config | threads | registers | local bytes (spills) | static shared bytes | "
             "dynamic shared bytes |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if r.get("status", "ok") != "ok":
            lines.append(f"| {r['kernel']} | {r['backend']} | {_md(r['config'])} | {_md(r['status'])} | | | | |")
            continue
        lines.append(f"| {r['kernel']} | {r['backend']} | {_md(r['config'])} | {r['threads']} | {r['registers']} | "
                     f"{r['local_bytes']} | {r['static_shared']} | {r['dynamic_shared']} |")
    return lines


def render(results: list[dict[str, Any]], registers: list[dict[str, Any]], header: Sequence[str],
           notes: Sequence[str] = ()) -> str:
    """The whole report as markdown: header, notes, the summary, one table per group, epilogue cost, registers."""
    parts = [*header, ""]
    if notes:
        parts += [f"- {n}" for n in notes] + [""]
    if results:
        parts += ["### geometric means", "", *summary(results), ""]
        for group in dict.fromkeys(r["group"] for r in results):
            parts += [*group_table(results, group), ""]
        cost = epilogue_cost(results)
        if cost:
            parts += ["### epilogue cost", "", *cost, ""]
    if registers:
        parts += [*register_table(registers), ""]
    return "\n".join(parts)


def plot(results: list[dict[str, Any]], path: Path) -> str:
    """One PNG, one panel per group: bars of each contender's ratio to the best peer, per shape. Returns the file
    written, or "plot: n/a (why)"."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"plot: n/a (matplotlib: {exc})"
    groups = [g for g in dict.fromkeys(r["group"] for r in results) if ratios(results, g)]
    if not groups:
        return "plot: n/a (no ratios measured)"
    fig, axes = plt.subplots(len(groups), 1, figsize=(12, 3.6 * len(groups)), squeeze=False)
    for ax, group in zip(axes[:, 0], groups, strict=True):
        rat = ratios(results, group)
        shapes = list(dict.fromkeys(r["shape"] for r in results if r["group"] == group))
        width = 0.8 / len(rat)
        for i, (c, got) in enumerate(rat.items()):
            xs = [j + (i - (len(rat) - 1) / 2) * width for j, s in enumerate(shapes) if s in got]
            ax.bar(xs, [got[s] for s in shapes if s in got], width, label=c)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(shapes, rotation=20, ha="right", fontsize=7)
        ax.set_ylabel("ratio to best peer")
        ax.set_title(group, fontsize=9)
        ax.legend(fontsize=6, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)


# ---------------------------------------------------------------- tilejit kernels written for the bench


@tj.kernel
def matmul_t(a, b, c, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int],
             TRANS_A: tj.Constant[bool], TRANS_B: tj.Constant[bool]):
    """c = op(a) @ op(b): a stored (K, M) when TRANS_A, b stored (N, K) when TRANS_B."""
    pid_m, pid_n = tj.bid(0), tj.bid(1)
    acc = tj.zeros((BM, BN), tj.float32)
    k_dim = a.shape[1]
    if TRANS_A:
        k_dim = a.shape[0]
    for k in range(tj.cdiv(k_dim, BK)):
        if TRANS_A:
            ta = tj.transpose(tj.load(a, index=(k, pid_m), shape=(BK, BM)))
        else:
            ta = tj.load(a, index=(pid_m, k), shape=(BM, BK))
        if TRANS_B:
            tb = tj.transpose(tj.load(b, index=(pid_n, k), shape=(BN, BK)))
        else:
            tb = tj.load(b, index=(k, pid_n), shape=(BK, BN))
        acc = tj.mma(ta, tb, acc)
    tj.store(c, index=(pid_m, pid_n), tile=acc.astype(c.dtype))


@tj.kernel
def matmul_batched(a, b, c, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    pid_m, pid_n, z = tj.bid(0), tj.bid(1), tj.bid(2)
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(tj.cdiv(a.shape[2], BK)):
        ta = tj.load(a, index=(z, pid_m, k), shape=(1, BM, BK)).reshape((BM, BK))
        tb = tj.load(b, index=(z, k, pid_n), shape=(1, BK, BN)).reshape((BK, BN))
        acc = tj.mma(ta, tb, acc)
    tj.store(c, index=(z, pid_m, pid_n), tile=acc.reshape((1, BM, BN)).astype(c.dtype))


@tj.kernel
def matmul_bias_relu(a, b, bias, c, BM: tj.Constant[int], BN: tj.Constant[int], BK: tj.Constant[int]):
    pid_m, pid_n = tj.bid(0), tj.bid(1)
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(tj.num_tiles(a, 1, (BM, BK))):
        acc = tj.mma(tj.load(a, index=(pid_m, k), shape=(BM, BK)), tj.load(b, index=(k, pid_n), shape=(BK, BN)), acc)
    acc = tj.maximum(acc + tj.load(bias, index=(pid_n,), shape=(BN,)).astype(tj.float32), 0.0)
    tj.store(c, index=(pid_m, pid_n), tile=acc.astype(c.dtype))


def bench_kernels() -> dict[str, Any]:
    """The tilejit kernels this script launches, by name (examples' and its own)."""
    from attention import KERNELS as ATTENTION
    from matmul import matmul, matmul_grouped, matmul_splitk, splitk_sum

    return {"matmul": matmul, "matmul_grouped": matmul_grouped, "matmul_t": matmul_t,
            "matmul_batched": matmul_batched, "matmul_bias_relu": matmul_bias_relu, "matmul_splitk": matmul_splitk,
            "splitk_sum": splitk_sum, **ATTENTION}


# ---------------------------------------------------------------- timed runs (GPU)


def bench(fn: Callable[[], Any], quick: bool) -> float:
    """Median milliseconds of ``fn`` (triton.testing.do_bench: device events, L2 flushed before each)."""
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=10 if quick else 25, rep=60 if quick else 120, return_mode="median"))


def close(got: Any, want: Any, tol: float) -> None:
    """Relative 2-norm error of ``got`` against ``want`` at most ``tol`` (NaN fails), else AssertionError."""
    g, w = got.double(), want.double()
    err = ((g - w).norm() / w.norm().clamp_min(1e-30)).item()
    if not err <= tol:
        raise AssertionError(f"result differs: relative error {err:.2e} > {tol}")


class Runner:
    """Runs, checks and times contenders on the GPU, collecting ``results`` and the tilejit kernels launched."""

    def __init__(self, args: argparse.Namespace, triton_na: str | None, tileir_na: str | None) -> None:
        import torch

        self.torch = torch
        self.args = args
        self.triton_na = triton_na
        self.tileir_na = tileir_na
        self.results: list[dict[str, Any]] = []
        self.kernels = bench_kernels()
        self.by_backend: dict[tuple[str, str], Any] = {}
        #: (kernel name, backend, constants) of each tilejit specialization launched: for the register table.
        self.launched: dict[tuple[str, str, str], tuple[Any, dict[str, Any]]] = {}

    def tj(self, name: str, backend: str, consts: dict[str, Any]) -> Any:
        """The kernel ``name`` compiled with ``backend`` (one ``@tj.kernel`` per backend), remembered as launched."""
        key = (name, backend)
        if key not in self.by_backend:
            self.by_backend[key] = tj.kernel(self.kernels[name].func, backend=backend)
        self.launched.setdefault((name, backend, config_text(consts)), (self.by_backend[key], consts))
        return self.by_backend[key]

    def check(self, contender: str, fn: Callable[[], Any], out: Any, want: Any, tol: float) -> str | None:
        """Run ``fn`` once (``out`` poisoned first; what it returns when a tensor, else ``out``, is checked against
        ``want``): None when right, else the cell's status."""
        torch = self.torch
        outs = out if isinstance(out, tuple) else (out,)
        wants = want if isinstance(want, tuple) else (want,)
        try:
            for o in outs:
                if o is not None:
                    o.fill_(float("nan"))
            got = fn()
            torch.cuda.synchronize()
        except Exception as exc:
            return failure(contender, exc)
        gots = got if isinstance(got, tuple) else (got,) if isinstance(got, torch.Tensor) else outs
        try:
            for g, w in zip(gots, wants, strict=True):
                close(g, w, tol)
        except AssertionError as exc:
            return f"wrong: {first_line(exc)}"
        return None

    def run(self, group: str, shape: str, contender: str, work: float,
            configs: Sequence[tuple[str, Callable[[], Any]]] | str, out: Any, want: Any, tol: float) -> None:
        """Check and time each (config label, launch) of ``configs`` and record the fastest correct one; a string is
        the cell's status (not available). A config that fails makes the cell's status only if none succeeds."""
        if isinstance(configs, str):
            self.results.append(result(group, shape, contender, "TFLOP/s", status=configs))
            return
        best: tuple[float, str] | None = None
        status = "n/a (no config)"
        for label, fn in configs:
            why = self.check(contender, fn, out, want, tol)
            if why is not None:
                status = why if not label else f"{why} [{label}]"
                continue
            try:
                ms = bench(fn, self.args.quick)
            except Exception as exc:
                status = f"{failure(contender, exc)} (timing)"
                continue
            if best is None or ms < best[0]:
                best = (ms, label)
        if best is None:
            self.results.append(result(group, shape, contender, "TFLOP/s", status=status))
        else:
            cell = result(group, shape, contender, "TFLOP/s", ms=best[0], work=work)
            cell["config"] = best[1]
            self.results.append(cell)
        last = self.results[-1]
        rate = f"{last['rate']:.0f} TFLOP/s" if last["rate"] else last["status"]
        print(f"  {group} | {shape} | {contender}: {rate}", flush=True)

    def backends(self) -> list[tuple[str, str | None]]:
        """(backend, why it cannot run here or None) for each backend asked for."""
        return [(be, self.tileir_na if be == "tileir" else None) for be in self.args.backend_list]

    def triton(self, make: Callable[[], list[tuple[str, Callable[[], Any]]]]) -> Any:
        """``make()`` (Triton's configs), or the text of why Triton is not available."""
        if self.triton_na:
            return self.triton_na
        try:
            return make()
        except Exception as exc:
            return f"error: {type(exc).__name__}: {first_line(exc)}"

    # ------------------------------------------------------------ families

    def dtypes(self) -> list[tuple[str, Any]]:
        """(short name, torch dtype) of each dtype asked for."""
        names = {"bfloat16": "bf16", "float16": "f16"}
        return [(names[d], getattr(self.torch, d)) for d in self.args.dtype_list]

    def tile_configs(self, name: str, backend: str, grid_of: Callable[[int, int], Any],
                     launch: Callable[[Any, Any, dict[str, Any]], Any], extra: dict[str, Any] | None = None,
                     more: Sequence[tuple[int, int, int]] = ()) -> list[tuple[str, Callable[[], Any]]]:
        """One (label, launch) per tile of the plan (and of ``more`` not in it) for tilejit kernel ``name`` on
        ``backend``."""
        configs = []
        tiles = plan(self.args.quick)["tiles"]
        for bm, bn, bk in (*tiles, *(t for t in more if t not in tiles)):
            consts = {"BM": bm, "BN": bn, "BK": bk, **(extra or {})}
            k = self.tj(name, backend, consts)
            grid = grid_of(bm, bn)
            configs.append((f"{bm}x{bn}x{bk}", (lambda k=k, grid=grid, consts=consts: launch(k, grid, consts))))
        return configs

    def matmul(self) -> None:
        """Plain and grouped-order tilejit matmul on each backend vs cuBLAS and Triton's tutorial 03, per dtype."""
        from _mma_peers import MATMUL_CONFIGS, matmul_config_label, triton_matmul

        torch = self.torch
        for short, dt in self.dtypes():
            group = f"matmul {short}"
            for m, n, kk in plan(self.args.quick)["matmul"]:
                a, b = torch.randn(m, kk, device="cuda", dtype=dt), torch.randn(kk, n, device="cuda", dtype=dt)
                c = torch.empty(m, n, device="cuda", dtype=dt)
                want = a.float() @ b.float()
                shape, work = shape_label((m, n, kk)), matmul_flops(m, n, kk)
                self.run(group, shape, "cuBLAS", work, [("", lambda: torch.matmul(a, b, out=c))], c, want, 1e-2)
                self.run(group, shape, "triton", work, self.triton(lambda: [
                    (matmul_config_label(cfg), triton_matmul(a, b, c, cfg)) for cfg in MATMUL_CONFIGS]),
                    c, want, 1e-2)
                for be, na in self.backends():
                    plain = na or self.tile_configs(
                        "matmul", be, lambda bm, bn: (-(-m // bm), -(-n // bn)),
                        lambda k, grid, cs: k[grid](a, b, c, **cs)) + self.splitk_configs(be, a, b, c)
                    self.run(group, shape, f"{TILEJIT} {be}", work, plain, c, want, 1e-2)
                    grouped = na or self.tile_configs(
                        "matmul_grouped", be, lambda bm, bn: (-(-m // bm) * -(-n // bn),),
                        lambda k, grid, cs: k[grid](a, b, c, **cs), {"GROUP": GROUP})
                    self.run(group, shape, f"{TILEJIT} {be} grouped", work, grouped, c, want, 1e-2)

    def splitk_configs(self, backend: str, a: Any, b: Any, c: Any) -> list[tuple[str, Callable[[], Any]]]:
        """examples/matmul.py's split-K launches (labelled "BMxBNxBK split-K S") for each tile of the plan where
        ``splitk_slices`` cuts K (few output tiles: small M); none elsewhere."""
        from matmul import SUM_TILE, matmul_splitk_into, splitk_slices

        (m, kk), n = a.shape, b.shape[1]
        sms = self.torch.cuda.get_device_properties(c.device).multi_processor_count
        configs = []
        for bm, bn, bk in plan(self.args.quick)["tiles"]:
            split = splitk_slices(m, n, kk, sms, bm, bn, bk)
            if split == 1:
                continue
            consts = {"BM": bm, "BN": bn, "BK": bk}
            self.launched.setdefault(("matmul_splitk", backend, config_text(consts)), (None, consts))
            self.launched.setdefault(("splitk_sum", backend, config_text(SUM_TILE)), (None, SUM_TILE))
            partial = self.torch.empty(split, m, n, device="cuda", dtype=self.torch.float32)
            configs.append((f"{bm}x{bn}x{bk} split-K {split}", (
                lambda consts=consts, partial=partial: matmul_splitk_into(a, b, c, partial, consts, backend))))
        return configs

    def transposed(self) -> None:
        """A stored (K, M) and B stored (N, K) (tutorial 09's case), bf16: tilejit's transpose vs cuBLAS and Triton
        on the transposed views."""
        from _mma_peers import MATMUL_CONFIGS, matmul_config_label, triton_matmul

        torch = self.torch
        for m, n, kk in plan(self.args.quick)["transposed"]:
            for which, ta_, tb_ in (("A^T", True, False), ("B^T", False, True)):
                group = f"transposed {which} bf16"
                a = torch.randn(kk, m, device="cuda", dtype=torch.bfloat16) if ta_ else \
                    torch.randn(m, kk, device="cuda", dtype=torch.bfloat16)
                b = torch.randn(n, kk, device="cuda", dtype=torch.bfloat16) if tb_ else \
                    torch.randn(kk, n, device="cuda", dtype=torch.bfloat16)
                av, bv = (a.T if ta_ else a), (b.T if tb_ else b)
                c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                want = av.float() @ bv.float()
                shape, work = shape_label((m, n, kk)), matmul_flops(m, n, kk)
                self.run(group, shape, "cuBLAS", work, [("", lambda: torch.matmul(av, bv, out=c))], c, want, 1e-2)
                self.run(group, shape, "triton", work, self.triton(lambda: [
                    (matmul_config_label(cfg), triton_matmul(av, bv, c, cfg)) for cfg in MATMUL_CONFIGS]),
                    c, want, 1e-2)
                for be, na in self.backends():
                    cfgs = na or self.tile_configs(
                        "matmul_t", be, lambda bm, bn: (-(-m // bm), -(-n // bn)),
                        lambda k, grid, cs: k[grid](a, b, c, **cs), {"TRANS_A": ta_, "TRANS_B": tb_},
                        (QUICK_K_MAJOR_TILE,))
                    self.run(group, shape, f"{TILEJIT} {be}", work, cfgs, c, want, 1e-2)

    def batched(self) -> None:
        """3-D batched matmul, bf16: tilejit with the batch on bid(2) vs torch.bmm."""
        torch = self.torch
        group = "batched bf16"
        for z, m, n, kk in plan(self.args.quick)["batched"]:
            a = torch.randn(z, m, kk, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(z, kk, n, device="cuda", dtype=torch.bfloat16)
            c = torch.empty(z, m, n, device="cuda", dtype=torch.bfloat16)
            want = torch.bmm(a.float(), b.float())
            shape, work = f"{z}x" + shape_label((m, n, kk)), matmul_flops(m, n, kk, z)
            self.run(group, shape, "cuBLAS bmm", work, [("", lambda: torch.bmm(a, b, out=c))], c, want, 1e-2)
            for be, na in self.backends():
                cfgs = na or self.tile_configs("matmul_batched", be, lambda bm, bn: (-(-m // bm), -(-n // bn), z),
                                               lambda k, grid, cs: k[grid](a, b, c, **cs))
                self.run(group, shape, f"{TILEJIT} {be}", work, cfgs, c, want, 1e-2)

    def grouped(self) -> None:
        """Grouped GEMM, bf16: one tilejit launch per problem (no arrays of arrays in the language) vs one torch
        matmul per problem; the time is the whole group's."""
        torch = self.torch
        group = "grouped GEMM bf16 (tilejit: one launch per problem)"
        for problems in plan(self.args.quick)["grouped"]:
            ab = [(torch.randn(m, kk, device="cuda", dtype=torch.bfloat16),
                   torch.randn(kk, n, device="cuda", dtype=torch.bfloat16)) for m, n, kk in problems]
            cs_ = [torch.empty(a.shape[0], b.shape[1], device="cuda", dtype=torch.bfloat16) for a, b in ab]
            want = torch.cat([(a.float() @ b.float()).flatten() for a, b in ab])
            shape = "+".join(shape_label(p) for p in problems)
            work = sum(matmul_flops(*p) for p in problems)

            def flat(fn: Callable[[Any, Any, Any], Any]) -> Callable[[], Any]:
                """All problems through ``fn(a, b, c)``, the outputs flattened into one tensor."""
                def go() -> Any:
                    """Run every problem."""
                    for (a, b), c in zip(ab, cs_, strict=True):
                        fn(a, b, c)
                    return torch.cat([c.flatten() for c in cs_])
                return go

            def timed(fn: Callable[[Any, Any, Any], Any]) -> Callable[[], Any]:
                """All problems through ``fn``: checked once by ``flat``, then timed without the concatenation."""
                checked = flat(fn)
                state = {"first": True}

                def go() -> Any:
                    """The first call returns the flattened outputs (the check), later ones only launch."""
                    if state.pop("first", False):
                        return checked()
                    for (a, b), c in zip(ab, cs_, strict=True):
                        fn(a, b, c)
                    return None
                return go

            self.run(group, shape, "torch per problem", work,
                     [("", timed(lambda a, b, c: torch.matmul(a, b, out=c)))], tuple(cs_), want, 1e-2)
            for be, na in self.backends():
                if na:
                    self.run(group, shape, f"{TILEJIT} {be}", work, na, None, want, 1e-2)
                    continue
                cfgs = []
                for bm, bn, bk in plan(self.args.quick)["tiles"]:
                    consts = {"BM": bm, "BN": bn, "BK": bk}
                    k = self.tj("matmul", be, consts)
                    cfgs.append((f"{bm}x{bn}x{bk}", timed(
                        lambda a, b, c, k=k, consts=consts: k[(-(-a.shape[0] // consts["BM"]),
                                                              -(-b.shape[1] // consts["BN"]))](a, b, c, **consts))))
                self.run(group, shape, f"{TILEJIT} {be}", work, cfgs, tuple(cs_), want, 1e-2)

    def epilogue(self) -> None:
        """matmul + bias + ReLU, bf16: fused in tilejit (and the same tilejit matmul without it, for the epilogue's
        cost) vs cuBLAS addmm + torch ReLU."""
        torch = self.torch
        group = "epilogue bias+ReLU bf16"
        for m, n, kk in plan(self.args.quick)["epilogue"]:
            a, b = (torch.randn(m, kk, device="cuda", dtype=torch.bfloat16),
                    torch.randn(kk, n, device="cuda", dtype=torch.bfloat16))
            bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            want = torch.relu(a.float() @ b.float() + bias.float())
            plain_want = a.float() @ b.float()
            shape, work = shape_label((m, n, kk)), matmul_flops(m, n, kk)
            self.run(group, shape, "cuBLAS addmm + torch relu", work,
                     [("", lambda: torch.relu_(torch.addmm(bias, a, b, out=c)))], c, want, 1e-2)
            for be, na in self.backends():
                grid_of = (lambda bm, bn: (-(-m // bm), -(-n // bn)))
                fused = na or self.tile_configs("matmul_bias_relu", be, grid_of,
                                                lambda k, grid, cs: k[grid](a, b, bias, c, **cs))
                self.run(group, shape, f"{TILEJIT} {be}", work, fused, c, want, 1e-2)
                plain = na or self.tile_configs("matmul", be, grid_of, lambda k, grid, cs: k[grid](a, b, c, **cs))
                self.run(group, shape, f"{TILEJIT} {be} plain", work, plain, c, plain_want, 1e-2)

    def attention(self) -> None:
        """Attention forward (tilejit, SDPA flash, Triton tutorial 06) and backward (tilejit, SDPA flash), f16/bf16."""
        import attention as attn
        from _mma_peers import ATTENTION_CONFIGS, triton_attention_forward

        torch = self.torch
        from torch.nn.attention import SDPBackend, sdpa_kernel

        sdpa = torch.nn.functional.scaled_dot_product_attention
        for short, dt in (("f16", torch.float16), ("bf16", torch.bfloat16)):
            for z, h, n, d, causal in plan(self.args.quick)["attention"]:
                shape = attention_label(z, h, n, d, causal)
                scale = 1.0 / math.sqrt(d)
                q, k, v, do = (torch.randn(z, h, n, d, device="cuda", dtype=dt) for _ in range(4))
                qf, kf, vf = (x.float().requires_grad_() for x in (q, k, v))
                want = sdpa(qf, kf, vf, is_causal=causal, scale=scale)
                want.backward(do.float())
                grads = (qf.grad, kf.grad, vf.grad)
                want = want.detach()
                del qf, kf, vf
                tol = 1e-2 if dt == torch.float16 else 2.5e-2
                fwd, bwd = f"attention fwd {short}", f"attention bwd {short}"
                work_f, work_b = attention_flops(z, h, n, d, causal), attention_flops(z, h, n, d, causal, True)

                def flash_fwd() -> Any:
                    """SDPA with its flash backend only."""
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        return sdpa(q, k, v, is_causal=causal, scale=scale)

                self.run(fwd, shape, "SDPA flash", work_f, [("", flash_fwd)], None, want, tol)
                o_t = torch.empty_like(q)
                m_t = torch.empty(z, h, n, device="cuda", dtype=torch.float32)
                self.run(fwd, shape, "triton tutorial 06", work_f, self.triton(lambda: [
                    ("{}x{} s{} w{}".format(*cfg), triton_attention_forward(q, k, v, o_t, m_t, causal, scale, cfg))
                    for cfg in ATTENTION_CONFIGS]), o_t, want, tol)
                qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    og = sdpa(qg, kg, vg, is_causal=causal, scale=scale)
                self.run(bwd, shape, "SDPA flash", work_b, [("", lambda: torch.autograd.grad(
                    og, (qg, kg, vg), do, retain_graph=True))], None, grads, tol)
                for be, na in self.backends():
                    if na:
                        self.run(fwd, shape, f"{TILEJIT} {be}", work_f, na, None, want, tol)
                        self.run(bwd, shape, f"{TILEJIT} {be}", work_b, na, None, grads, tol)
                        continue
                    for name in attn.KERNELS:
                        self.launched.setdefault((name, be, config_text(attn.constants(name, d, causal))),
                                                 (None, {"__dtype": dt, **attn.constants(name, d, causal)}))
                    self.run(fwd, shape, f"{TILEJIT} {be}", work_f, [("", lambda be=be: attn.attention_forward(
                        q, k, v, causal, scale, backend=be)[0])], None, want, tol)
                    try:
                        o, m = attn.attention_forward(q, k, v, causal, scale, backend=be)
                    except Exception as exc:
                        self.run(bwd, shape, f"{TILEJIT} {be}", work_b, f"{failure(f'{TILEJIT} {be}', exc)} "
                                 "(forward)", None, grads, tol)
                        continue
                    backward = (lambda be=be, o=o, m=m: attn.attention_backward(
                        q, k, v, o, do, m, causal, scale, backend=be))
                    self.run(bwd, shape, f"{TILEJIT} {be}", work_b, [("", backward)], None, grads, tol)
                torch.cuda.empty_cache()


def config_text(consts: dict[str, Any]) -> str:
    """``BM=128 BN=256 BK=64`` (constants that start with ``__`` are the bench's own notes, left out)."""
    return " ".join(f"{k}={v}" for k, v in consts.items() if not k.startswith("__"))


# ---------------------------------------------------------------- registers and spills


def kernel_signature(name: str, dtype: Any) -> tuple[Any, ...]:
    """The signature a torch launch of bench kernel ``name`` with contiguous arrays of ``dtype`` gets."""
    import attention as attn

    a2, a3 = dtype[:, ::1], dtype[:, :, ::1]
    if name in attn.KERNELS:
        return attn.signatures(dtype)[name]
    return {"matmul": (a2, a2, a2), "matmul_grouped": (a2, a2, a2), "matmul_t": (a2, a2, a2),
            "matmul_batched": (a3, a3, a3), "matmul_bias_relu": (a2, a2, dtype[::1], a2),
            "matmul_splitk": (a2, a2, tj.float32[:, :, ::1]), "splitk_sum": (tj.float32[:, :, ::1], a2)}[name]


def registers(launched: Iterable[tuple[str, str, dict[str, Any]]], arch: str) -> list[dict[str, Any]]:
    """Registers per thread, local memory (spills), shared memory and threads per block of each (kernel, backend,
    constants), from the CUBIN loaded in this process (bf16 signatures for the matmuls; attention's own dtype)."""
    from tilejit.backends.base import get_backend
    from tilejit.compiler.targets import parse_target
    from tilejit.runtime.module import Module

    kernels = bench_kernels()
    rows = []
    for name, backend, consts in launched:
        dtype = {"float16": tj.float16}.get(str(consts.get("__dtype", "")).replace("torch.", ""), tj.bfloat16)
        plain = {k: v for k, v in consts.items() if not k.startswith("__")}
        row: dict[str, Any] = {"kernel": name, "backend": backend, "config": config_text(consts)}
        try:
            target = get_backend(backend).launch_targets(parse_target(arch))[0]
            art = tj.compile(kernels[name], kernel_signature(name, dtype), constants=plain, target=target,
                             backend=backend)
            image = art.image()
            fn = Module.load(image.image, image.kind).get_function(image.symbol)
            row.update(threads=image.num_threads, registers=fn.num_regs, local_bytes=fn.local_size_bytes,
                       static_shared=fn.shared_size_bytes, dynamic_shared=image.shared_bytes, status="ok")
        except Exception as exc:
            row["status"] = failure(f"{TILEJIT} {backend}", exc)
        rows.append(row)
    return rows


# ---------------------------------------------------------------- main


def load_triton() -> str | None:
    """None when Triton imports, else "n/a (why)"."""
    try:
        import triton  # noqa: F401
    except Exception as exc:
        return f"n/a (triton: {first_line(exc)})"
    return None


def versions() -> list[str]:
    """Header lines: the GPU, torch, Triton and tileiras versions."""
    import platform

    lines = [f"Python {platform.python_version()}, tilejit {getattr(tj, '__version__', '?')}"]
    try:
        import torch

        lines.append(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    except Exception as exc:
        lines.append(f"torch: n/a ({first_line(exc)})")
    try:
        import triton

        lines.append(f"Triton {triton.__version__}")
    except Exception as exc:
        lines.append(f"Triton: n/a ({first_line(exc)})")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Run the families asked for, print the report and write it to the output folder."""
    args = parse_args(argv)
    started = time.perf_counter()
    import torch
    from bench_tileir import default_arch, tileir_unavailable

    from tilejit.backends.base import get_backend
    from tilejit.compiler.targets import parse_target

    arch = default_arch()
    tileir_na = tileir_unavailable(get_backend("tileir").launch_targets(parse_target(arch))[0].sm)
    runner = Runner(args, load_triton(), tileir_na)
    header = [f"## bench_mma ({'quick' if args.quick else 'full'} run, {arch})", "", *versions()]
    notes = ["grouped GEMM: the language has no arrays of arrays (pointer tables), so tilejit runs one launch per "
             "problem; torch runs one matmul per problem",
             "ratios: a contender's TFLOP/s over the best peer's at that shape (> 1: faster than every peer); "
             "[config]: the fastest correct config of those tried"]
    steps: dict[str, Callable[[], None]] = {"matmul": runner.matmul, "transposed": runner.transposed,
                                            "batched": runner.batched, "grouped": runner.grouped,
                                            "epilogue": runner.epilogue, "attention": runner.attention}
    for family in args.family_list:
        if family not in steps:
            continue
        t0 = time.perf_counter()
        print(f"[{family} ...]", flush=True)
        try:
            steps[family]()
        except Exception as exc:  # a failure outside one contender (inputs, references): report, go on
            print(f"{family}: FAILED: {type(exc).__name__}: {first_line(exc)}", flush=True)
            notes.append(f"{family}: FAILED outside any contender: {type(exc).__name__}: {first_line(exc)}")
        print(f"[{family}: {time.perf_counter() - t0:.0f} s]", flush=True)
        torch.cuda.empty_cache()
    reg_rows: list[dict[str, Any]] = []
    if "registers" in args.family_list:
        t0 = time.perf_counter()
        launched = [(name, be, consts) for (name, be, _), (_, consts) in runner.launched.items()]
        reg_rows = registers(launched, arch)
        print(f"[registers: {time.perf_counter() - t0:.0f} s]", flush=True)
    header.append(f"Wall time: {time.perf_counter() - started:.0f} s")
    report = render(runner.results, reg_rows, header, notes)
    print(report)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench_mma.md").write_text(report)
        (out / "bench_mma.json").write_text(json.dumps(
            {"header": header, "notes": notes, "results": runner.results, "registers": reg_rows}, indent=1,
            default=str))
        if runner.results:
            print(plot(runner.results, out / "bench_mma.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
