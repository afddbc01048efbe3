"""Row kernels at every row length (issue 19): softmax, layer norm and RMS norm, forward and backward, of
``examples/`` on tilejit's two backends, against torch and Triton's tutorial kernels, in one process.

Each family runs at row lengths 256..65536 (powers of two and 3000, 12288, 50000) in float32, bfloat16 and float16,
rows x length = 2**26 elements. tilejit runs the examples' host functions (``softmax_rows``, ``softmax_backward``,
``layer_norm_forward``, ``layer_norm_backward``, ``rms_norm_forward``, ``rms_norm_backward``: the whole row as one
tile while it fits in registers, chunks beyond) with ``backend="cuda"`` and, when ``TILEJIT_TILEIRAS`` (or PATH)
gives a Tile IR toolchain, ``backend="tileir"``. Triton runs its tutorial kernels with the tutorials' BLOCK and
num_warps (``_tileir_peers.py``); Triton has no tutorial for the RMS norm (forward and backward) or the softmax
backward, so those peers are ours, written in the structure of the layer-norm tutorial (05) and the fused-softmax
tutorial (02) with their BLOCK, num_warps and GROUP_SIZE_M rules. The norms' backward peers are "n/a" for rows over
64 KB (the tutorial refuses them); the softmax backward's peer holds whole rows at every length, as the tutorial's
forward does (from 50000 elements its registers spill). torch runs its own kernels: softmax, layer norm and RMS
norm, and the backward ops that their autograd calls (``_softmax_backward_data``, ``native_layer_norm_backward``,
``_fused_rms_norm_backward``, or autograd where this torch lacks it). Every contender's outputs are poisoned,
computed once and checked against torch in float32 before they are timed (``triton.testing.do_bench`` medians,
small warmup and rep); throughput is GB/s of the row traffic (``TRAFFIC``: x read and y written; a backward reads
two rows (x or y, and dy) and writes dx). Reported: the ratio per shape to Triton and geometric means per family,
as a table (stdout and bench_rows.md), JSON (bench_rows.json) and one PNG of GB/s against row length per family and
dtype (bench_rows.png), in ``--out`` or ``$OUT``, else bench/data and bench/plots.

    python bench/bench_rows.py [--quick] [--families softmax,layer_norm] [--dtypes float32] [--lengths 4096]
    python bench/bench_rows.py --plot bench/data/bench_rows.json     # no GPU: table and plot of a saved run
    python bench/bench_rows.py --ptxas [--arch sm_90]                # no GPU: registers and spills per kernel
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE), str(HERE.parent / "examples")]  # tilejit from this checkout

from bench_tileir import first_line, geomean

FAMILIES = ("softmax", "softmax_bwd", "layer_norm", "layer_norm_bwd", "rms_norm", "rms_norm_bwd")
DTYPES = ("float32", "bfloat16", "float16")
LENGTHS = (256, 512, 1024, 2048, 3000, 4096, 8192, 12288, 16384, 32768, 50000, 65536)
QUICK_LENGTHS = (1024, 12288, 65536)
ELEMENTS = 1 << 26
EPS = 1e-5
#: Relative error (2-norm) each dtype's outputs may have against torch's float32 results.
TOLERANCE = {"float32": 1e-5, "bfloat16": 1.6e-2, "float16": 2e-3}
#: Row traffic per element, in elements: the forward kernels read x and write y; the backward passes read x (the
#: softmax's: its output y) and dy and write dx (weights and their gradients are one row, not counted).
TRAFFIC = {"softmax": 2, "softmax_bwd": 3, "layer_norm": 2, "layer_norm_bwd": 3, "rms_norm": 2, "rms_norm_bwd": 3}
CONTENDERS = ("tilejit cuda", "tilejit tileir", "torch", "triton")
REFERENCE = "triton"


# ---------------------------------------------------------------- arguments


def _choices(ap: argparse.ArgumentParser, flag: str, text: str, allowed: Sequence[str]) -> tuple[str, ...]:
    """A comma list of ``allowed`` names (all of them when empty); a usage error otherwise."""
    got = tuple(t for t in text.split(",") if t)
    bad = [t for t in got if t not in allowed]
    if bad:
        ap.error(f"{flag}: unknown {', '.join(bad)}; choose from {', '.join(allowed)}")
    return got or tuple(allowed)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"row lengths {QUICK_LENGTHS} only")
    ap.add_argument("--families", default="", help=f"comma list of: {','.join(FAMILIES)} (default: all)")
    ap.add_argument("--dtypes", default="", help=f"comma list of: {','.join(DTYPES)} (default: all)")
    ap.add_argument("--lengths", default="", help="comma list of row lengths (default: 256..65536)")
    ap.add_argument("--warmup", type=float, default=5.0, help="do_bench warmup, ms")
    ap.add_argument("--rep", type=float, default=20.0, help="do_bench repetition time, ms")
    ap.add_argument("--jobs", type=int, default=8, help="threads compiling tilejit's kernels before the timing")
    ap.add_argument("--out", default=None, help="folder for JSON, table and plot (default: $OUT, else bench/)")
    ap.add_argument("--plot", type=Path, help="a saved run's JSON: print its table and draw its plot, no GPU")
    ap.add_argument("--ptxas", action="store_true",
                    help="no GPU: each example row kernel's registers and spills (ptxas -v) per dtype and BLOCK")
    ap.add_argument("--arch", default="sm_90", help="--ptxas: the GPU to compile for (its CUDA backend target)")
    args = ap.parse_args(argv)
    args.family_list = _choices(ap, "--families", args.families, FAMILIES)
    args.dtype_list = _choices(ap, "--dtypes", args.dtypes, DTYPES)
    try:
        lengths = tuple(int(t) for t in args.lengths.split(",") if t)
    except ValueError:
        ap.error(f"--lengths: {args.lengths!r} is not a comma list of integers")
    if any(n < 1 for n in lengths):
        ap.error("--lengths: row lengths must be positive")
    args.length_list = lengths or (QUICK_LENGTHS if args.quick else LENGTHS)
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")
    args.out = args.out or os.environ.get("OUT") or None
    return args


# ---------------------------------------------------------------- results, ratios, table, plot


def cell(family: str, dtype: str, n: int, contender: str, *, ms: float | None = None, status: str = "ok",
         itemsize: int = 4) -> dict[str, Any]:
    """One measurement: GB/s of the row traffic of ``ELEMENTS // n`` rows in ``ms``, or the status saying why none."""
    m = ELEMENTS // n
    gbs = TRAFFIC[family] * m * n * itemsize / (ms * 1e-3) / 1e9 if ms is not None and status == "ok" else None
    return {"family": family, "dtype": dtype, "n": n, "m": m, "contender": contender, "ms": ms, "gbs": gbs,
            "status": status}


def ratios(results: list[dict[str, Any]]) -> dict[tuple[str, str, int], dict[str, float]]:
    """Per (family, dtype, n): each measured contender's GB/s over the reference's (Triton's), where both ran."""
    base = {(r["family"], r["dtype"], r["n"]): r["gbs"] for r in results if r["contender"] == REFERENCE and r["gbs"]}
    out: dict[tuple[str, str, int], dict[str, float]] = {}
    for r in results:
        key = (r["family"], r["dtype"], r["n"])
        if r["gbs"] and base.get(key):
            out.setdefault(key, {})[r["contender"]] = r["gbs"] / base[key]
    return out


def family_geomeans(results: list[dict[str, Any]]) -> dict[str, dict[str, tuple[float, int]]]:
    """Per family, per contender: the geometric mean of its ratios to Triton and how many shapes it covers."""
    got: dict[str, dict[str, list[float]]] = {}
    for (family, _dtype, _n), per in ratios(results).items():
        for contender, x in per.items():
            got.setdefault(family, {}).setdefault(contender, []).append(x)
    return {f: {c: (g, len(xs)) for c, xs in per.items() if (g := geomean(xs)) is not None} for f, per in got.items()}


def contenders_in(results: list[dict[str, Any]]) -> list[str]:
    """The contenders of ``results`` in the usual order."""
    seen = {r["contender"] for r in results}
    return [c for c in CONTENDERS if c in seen] + sorted(seen - set(CONTENDERS))


def table(results: list[dict[str, Any]]) -> str:
    """Markdown: geometric means per family, then a row per family, dtype and length with each contender's GB/s and
    ratio to Triton (or its status: n/a, wrong, error)."""
    names = contenders_in(results)
    means = family_geomeans(results)
    lines = ["| family | " + " | ".join(f"{c} / triton" for c in names) + " |",
             "| --- |" + " --- |" * len(names)]
    for family in dict.fromkeys(r["family"] for r in results):
        per = means.get(family, {})
        lines.append(f"| {family} | " + " | ".join(
            f"{per[c][0]:.2f}x ({per[c][1]})" if c in per else "" for c in names) + " |")
    rat = ratios(results)
    cells = {(r["family"], r["dtype"], r["n"], r["contender"]): r for r in results}
    lines += ["", "| family | dtype | rows x length | " + " | ".join(names) + " |",
              "| --- | --- | --- |" + " --- |" * len(names)]
    for key in dict.fromkeys((r["family"], r["dtype"], r["n"]) for r in results):
        row = []
        for c in names:
            r = cells.get((*key, c))
            if r is None:
                row.append("")
            elif r["gbs"] is None:
                row.append(r["status"].replace("|", "\\|"))
            else:
                x = rat.get(key, {}).get(c)
                row.append(f"{r['gbs']:.0f}" + (f" ({x:.2f}x)" if x is not None else ""))
        lines.append(f"| {key[0]} | {key[1]} | {ELEMENTS // key[2]}x{key[2]} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], path: Path) -> str:
    """One panel per family (rows) and dtype (columns): GB/s against row length (log2 axis), a line per contender.
    Returns the file written, or "plot: n/a (why)"."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"plot: n/a (matplotlib: {exc})"
    families = list(dict.fromkeys(r["family"] for r in results))
    dtypes = list(dict.fromkeys(r["dtype"] for r in results))
    fig, axes = plt.subplots(len(families), len(dtypes), figsize=(4.2 * len(dtypes), 3.2 * len(families)),
                             squeeze=False, sharex=True)
    for i, family in enumerate(families):
        for j, dtype in enumerate(dtypes):
            ax = axes[i][j]
            for c in contenders_in(results):
                pts = sorted((r["n"], r["gbs"]) for r in results
                             if (r["family"], r["dtype"], r["contender"]) == (family, dtype, c) and r["gbs"])
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=c)
            ax.set_xscale("log", base=2)
            ax.set_title(f"{family} {dtype}", fontsize=9)
            ax.grid(True, alpha=0.3)
            if j == 0:
                ax.set_ylabel("GB/s")
            if i == len(families) - 1:
                ax.set_xlabel("row length (elements)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)


# ---------------------------------------------------------------- cases (GPU)


def _then(fn: Callable[[], object], outs: tuple[Any, ...]) -> Callable[[], tuple[Any, ...]]:
    """A function that runs ``fn`` (a contender writing into buffers) and returns the buffers ``outs``."""
    def run() -> tuple[Any, ...]:
        fn()
        return outs
    return run


class Case:
    """One family, dtype and row length: torch inputs, float32 torch references, and each contender as a function
    returning its outputs (or a string saying why it cannot run); ``outs``: the buffers to poison first; ``names``:
    the outputs' names."""

    def __init__(self, family: str, dtype: str, n: int, rows: int, triton: Any) -> None:
        import torch

        self.family, self.dtype, self.n = family, dtype, n
        self.itemsize = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
        builder = getattr(self, f"_{family}")
        self.want: tuple[Any, ...] = ()
        self.outs: tuple[Any, ...] = ()
        self.names: tuple[str, ...] = ("y",)
        self.runs: dict[str, Callable[[], Any] | str] = {}
        gen = torch.Generator(device="cuda").manual_seed(n)
        dt = getattr(torch, dtype)
        self.x = torch.randn(rows, n, device="cuda", dtype=dt, generator=gen)
        self.w = torch.randn(n, device="cuda", dtype=dt, generator=gen)
        self.b = torch.randn(n, device="cuda", dtype=dt, generator=gen)
        builder(torch, triton)

    def tilejit(self, fn: Callable[[str], object], outs: tuple[Any, ...]) -> None:
        """The tilejit contenders: ``fn(backend)`` runs the example's host function on that backend into ``outs``."""
        for be in ("cuda", "tileir"):
            self.runs[f"tilejit {be}"] = _then(functools.partial(fn, be), outs)

    def triton(self, tri: Any, fn: Callable[[], object], outs: tuple[Any, ...]) -> None:
        """The Triton contender: ``fn`` writes into ``outs``; ``tri``: the kernels, or why there are none."""
        self.runs["triton"] = tri if isinstance(tri, str) else _then(fn, outs)

    def _softmax(self, torch: Any, tri: Any) -> None:
        from _tileir_peers import triton_softmax_warps
        from softmax import softmax_rows

        x, n = self.x, self.n
        out = torch.empty_like(x)
        self.want, self.outs = (torch.softmax(x.float(), 1),), (out,)
        self.tilejit(lambda be: softmax_rows(x, out, backend=be), (out,))
        self.runs["torch"] = lambda: (torch.softmax(x, 1),)
        block = 1 << (n - 1).bit_length()
        self.triton(tri, lambda: tri.softmax[(x.shape[0],)](out, x, x.stride(0), out.stride(0), n, BLOCK=block,
                                                            num_warps=triton_softmax_warps(block)), (out,))

    def _softmax_bwd(self, torch: Any, tri: Any) -> None:
        from _tileir_peers import triton_softmax_bwd_launch
        from softmax import softmax_backward

        y = torch.softmax(self.x.float(), 1).to(self.x.dtype)  # the forward's output, as the backward gets it
        dy = torch.randn_like(y)
        dx = torch.empty_like(y)
        self.names, self.outs = ("dx",), (dx,)
        self.want = (torch.ops.aten._softmax_backward_data(dy.float(), y.float(), 1, torch.float32),)
        self.tilejit(lambda be: softmax_backward(y, dy, dx, backend=be), (dx,))
        self.runs["torch"] = lambda: (torch.ops.aten._softmax_backward_data(dy, y, 1, y.dtype),)
        self.runs["triton"] = tri if isinstance(tri, str) else triton_softmax_bwd_launch(tri, y, dy, dx)

    def _layer_norm(self, torch: Any, tri: Any) -> None:
        from _tileir_peers import triton_layer_norm_block
        from layer_norm import layer_norm_forward

        x, w, b, n = self.x, self.w, self.b, self.n
        m = x.shape[0]
        out = torch.empty_like(x)
        mean, rstd = torch.empty(m, device="cuda"), torch.empty(m, device="cuda")
        self.want = (torch.nn.functional.layer_norm(x.float(), (n,), w.float(), b.float(), EPS),)
        self.outs = (out, mean, rstd)
        self.tilejit(lambda be: layer_norm_forward(x, w, b, out, mean, rstd, EPS, backend=be), (out,))
        self.runs["torch"] = lambda: (torch.nn.functional.layer_norm(x, (n,), w, b, EPS),)
        block, warps = triton_layer_norm_block(n, self.itemsize)
        self.triton(tri, lambda: tri.layer_norm[(m,)](x, out, w, b, mean, rstd, x.stride(0), n, EPS, BLOCK=block,
                                                      num_warps=warps), (out,))

    def _layer_norm_bwd(self, torch: Any, tri: Any) -> None:
        import layer_norm as ln
        from _tileir_peers import triton_layer_norm_bwd_launch

        x, w, b, n = self.x, self.w, self.b, self.n
        m = x.shape[0]
        dy = torch.randn_like(x)
        f = [t.float() for t in (x, w, b, dy)]
        _, mean_t, rstd_t = torch.native_layer_norm(f[0], (n,), f[1], f[2], EPS)
        self.want = torch.ops.aten.native_layer_norm_backward(f[3], f[0], (n,), mean_t, rstd_t, f[1], f[2],
                                                              [True, True, True])
        mean, rstd = mean_t.reshape(m).contiguous(), rstd_t.reshape(m).contiguous()
        dx, dw, db = torch.empty_like(x), torch.empty_like(w), torch.empty_like(b)
        self.names, self.outs = ("dx", "dw", "db"), (dx, dw, db)
        plans = backward_plans(torch, x, ln.backward_scratch)
        self.tilejit(lambda be: ln.layer_norm_backward(x, dy, w, mean, rstd, dx, dw, db, plans[be][1], plans[be][0],
                                                       be), (dx, dw, db))
        _, tmean, trstd = torch.native_layer_norm(x, (n,), w, b, EPS)
        self.runs["torch"] = lambda: torch.ops.aten.native_layer_norm_backward(dy, x, (n,), tmean, trstd, w, b,
                                                                               [True, True, True])
        self.runs["triton"] = tri if isinstance(tri, str) else triton_layer_norm_bwd_launch(
            tri, x, dy, w, mean, rstd, dx, dw, db)

    def _rms_norm(self, torch: Any, tri: Any) -> None:
        from _tileir_peers import triton_layer_norm_block
        from rms_norm import rms_norm_forward

        x, w, n = self.x, self.w, self.n
        m = x.shape[0]
        out, rstd = torch.empty_like(x), torch.empty(m, device="cuda")
        xf = x.float()
        self.want = (xf * torch.rsqrt((xf * xf).mean(1, keepdim=True) + EPS) * w.float(),)
        self.outs = (out, rstd)
        self.tilejit(lambda be: rms_norm_forward(x, w, out, rstd, EPS, backend=be), (out,))
        if hasattr(torch.nn.functional, "rms_norm"):
            self.runs["torch"] = lambda: (torch.nn.functional.rms_norm(x, (n,), w, EPS),)
        else:
            self.runs["torch"] = "n/a (this torch has no rms_norm)"
        block, warps = triton_layer_norm_block(n, self.itemsize)
        self.triton(tri, lambda: tri.rms_norm[(m,)](x, out, w, rstd, x.stride(0), n, EPS, BLOCK=block,
                                                    num_warps=warps), (out,))

    def _rms_norm_bwd(self, torch: Any, tri: Any) -> None:
        import rms_norm as rn
        from _tileir_peers import triton_rms_norm_bwd_launch

        x, w = self.x, self.w
        dy = torch.randn_like(x)
        xf, wf = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()  # not x, w themselves
        rstd = torch.rsqrt((xf.detach() ** 2).mean(1) + EPS)
        self.want = torch.autograd.grad(xf * torch.rsqrt((xf * xf).mean(1, keepdim=True) + EPS) * wf, (xf, wf),
                                        dy.float())
        dx, dw = torch.empty_like(x), torch.empty_like(w)
        self.names, self.outs = ("dx", "dw"), (dx, dw)
        plans = backward_plans(torch, x, rn.backward_scratch)
        self.tilejit(lambda be: rn.rms_norm_backward(x, dy, w, rstd, dx, dw, plans[be][1], plans[be][0], be), (dx, dw))
        self.runs["torch"] = torch_rms_norm_backward(torch, x, dy, w)
        self.runs["triton"] = tri if isinstance(tri, str) else triton_rms_norm_bwd_launch(tri, x, dy, w, rstd, dx, dw)


def backward_plans(torch: Any, x: Any, scratch_of: Callable[..., tuple[Any, ...]]) -> dict[str, tuple[Any, Any]]:
    """Per tilejit backend, the norms' backward plan for the rows of torch tensor ``x`` (``layer_norm.backward_plan``:
    its chunks depend on the backend) and the float32 scratch buffers ``scratch_of`` makes for it."""
    import layer_norm as ln

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    m, n = x.shape
    plans = {be: ln.backward_plan(x, sms, backend=be) for be in ("cuda", "tileir")}
    return {be: (plan, scratch_of(m, n, plan, lambda shape: torch.empty(shape, device="cuda")))
            for be, plan in plans.items()}


def torch_rms_norm_backward(torch: Any, x: Any, dy: Any, w: Any) -> Callable[[], Any]:
    """torch's RMS norm backward of ``x`` for ``dy`` as a no-argument function returning (dx, dw): the fused op
    its autograd calls (``_fused_rms_norm_backward``, on the forward's own rstd) where torch has it, else autograd
    through the forward written out (a graph kept for each call)."""
    n = x.shape[1]
    aten = torch.ops.aten
    if hasattr(aten, "_fused_rms_norm_backward"):
        _, rstd = aten._fused_rms_norm(x, [n], w, EPS)
        return lambda: aten._fused_rms_norm_backward(dy, x, [n], rstd, w, [True, True])
    xr, wr = x.detach().requires_grad_(), w.detach().requires_grad_()
    y = xr * torch.rsqrt((xr.float() ** 2).mean(1, keepdim=True) + EPS).to(x.dtype) * wr
    return lambda: torch.autograd.grad(y, (xr, wr), dy, retain_graph=True)


def check(case: Case, contender: str) -> str:
    """Run ``contender`` once on poisoned outputs and compare with torch: "ok" or what went wrong."""
    import torch

    fn = case.runs[contender]
    if isinstance(fn, str):
        return fn
    try:
        for t in case.outs:
            t.fill_(float("nan"))
        got = fn()
        torch.cuda.synchronize()
    except Exception as exc:
        return f"error: {type(exc).__name__}: {first_line(exc)}"
    for name, g, want in zip(case.names, got, case.want):
        err = ((g.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30)).item()
        if not err <= TOLERANCE[case.dtype]:
            return f"wrong: {name} relative error {err:.1e} > {TOLERANCE[case.dtype]:g}"
    return "ok"


def tileir_na() -> str | None:
    """None when the Tile IR backend can compile for this GPU, else "n/a (why)"."""
    import torch

    from tilejit.backends.base import get_backend
    from tilejit.compiler.targets import parse_target

    major, minor = torch.cuda.get_device_capability()
    target = get_backend("tileir").launch_targets(parse_target(f"sm_{major}{minor}"))[0]
    why = get_backend("tileir").available(target)
    return None if why is None else f"n/a ({why.splitlines()[0]})"  # the first line: it goes in a table cell


def load_triton() -> Any:
    """Triton's tutorial kernels, or "n/a (why)"."""
    try:
        from _tileir_peers import triton_kernels

        return triton_kernels()
    except Exception as exc:
        return f"n/a (triton: {first_line(exc)})"


def warm_up(args: argparse.Namespace, triton: Any, tileir: str | None) -> None:
    """Compile every tilejit kernel the sweep launches, ``--jobs`` at a time, by running each tilejit contender on two
    rows of each shape (the same specializations as the full size); Triton compiles meanwhile in this thread."""
    tasks = []
    for family in args.family_list:
        for dtype in args.dtype_list:
            for n in args.length_list:
                tasks.append(Case(family, dtype, n, 2, triton))
    backends = [be for be in ("cuda", "tileir") if be == "cuda" or tileir is None]
    with ThreadPoolExecutor(args.jobs) as pool:
        jobs = [pool.submit(check, c, f"tilejit {be}") for c in tasks for be in backends]
        for c in tasks:
            check(c, "triton")
        for j in jobs:
            j.result()


def timer(args: argparse.Namespace) -> Callable[[Callable[[], Any]], float]:
    """Median milliseconds of a function: ``triton.testing.do_bench`` with ``--warmup`` and ``--rep``, or without
    Triton, CUDA events (``bench_tile.bench``)."""
    try:
        from triton.testing import do_bench
    except ImportError:
        from bench_tile import bench

        return bench
    return lambda fn: float(do_bench(fn, warmup=args.warmup, rep=args.rep, return_mode="median"))


def sweep(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every family, dtype and length of the arguments: each contender checked, then timed."""
    import torch

    time_of = timer(args)
    triton = load_triton()
    tileir = tileir_na()
    t0 = time.perf_counter()
    warm_up(args, triton, tileir)
    print(f"[compiles: {time.perf_counter() - t0:.0f} s]", flush=True)
    results: list[dict[str, Any]] = []
    for family in args.family_list:
        t0 = time.perf_counter()
        for dtype in args.dtype_list:
            for n in args.length_list:
                case = Case(family, dtype, n, ELEMENTS // n, triton)
                if tileir is not None:
                    case.runs["tilejit tileir"] = tileir
                for contender, fn in case.runs.items():
                    status = check(case, contender)
                    ms = None
                    if status == "ok" and not isinstance(fn, str):
                        ms = time_of(fn)
                    results.append(cell(family, dtype, n, contender, ms=ms, status=status, itemsize=case.itemsize))
                del case
                torch.cuda.empty_cache()
        print(f"[{family}: {time.perf_counter() - t0:.0f} s]", flush=True)
    return results


# ---------------------------------------------------------------- --ptxas (no GPU)


def ptxas_specs(dtype: str, lengths: Sequence[int]) -> list[tuple[str, Any, tuple[Any, ...], dict[str, int], bool]]:
    """(label, kernel, signature, constants, used) of every example row kernel for ``dtype``: whole-row kernels at
    each BLOCK of ``lengths`` (``used``: the example holds rows that long whole), chunked ones at the chunk size."""
    import layer_norm as ln
    import rms_norm as rn
    import softmax as sm
    from _common import CHUNK_BYTES, DEFAULT_CHUNK_BYTES, block_of

    import tilejit as tj

    dt, f32 = getattr(tj, dtype), tj.float32
    chunk = {"BLOCK": CHUNK_BYTES["cuda"] // dt.itemsize}  # the CUDA backend's chunks (forward, softmax backward)
    chunk_bwd = {"BLOCK": DEFAULT_CHUNK_BYTES // dt.itemsize}  # the backward plans' chunks (every backend)
    x, v, p, s = dt[:, ::1], dt[::1], f32[:, ::1], f32[::1]
    fwd_ln, fwd_rms = (x, v, v, x, s, s, f32), (x, v, x, s, f32)
    specs: list[tuple[str, Any, tuple[Any, ...], dict[str, int], bool]] = []
    for block in sorted({block_of(n) for n in lengths}):
        rows = max(1, ln.STEP_ELEMENTS // block)
        bwd = {"ROWS": rows, "BLOCK": block}
        specs += [
            ("softmax", sm.softmax, (x, x), {"ROWS": 1, "BLOCK": block}, block <= sm.WHOLE_ROW),
            ("softmax_bwd", sm.softmax_bwd, (x, x, x), {"ROWS": 1, "BLOCK": block}, block <= sm.WHOLE_ROW_BWD),
            ("layer_norm", ln.layer_norm, (x, v, v, x, f32), {"BLOCK": block}, block <= ln.WHOLE_ROW),
            ("layer_norm_fwd", ln.layer_norm_fwd, fwd_ln, {"ROWS": 1, "BLOCK": block}, block <= ln.WHOLE_ROW),
            ("layer_norm_bwd", ln.layer_norm_bwd, (x, x, v, s, s, x, p, p), bwd, block <= ln.WHOLE_ROW_BWD),
            ("rms_norm", rn.rms_norm, fwd_rms, {"ROWS": 1, "BLOCK": block}, block <= ln.WHOLE_ROW),
            ("rms_norm_bwd", rn.rms_norm_bwd, (x, x, v, s, x, p), bwd, block <= ln.WHOLE_ROW_BWD),
        ]
    specs += [
        ("softmax_chunked", sm.softmax_chunked, (x, x), chunk, True),
        ("softmax_bwd_chunked", sm.softmax_bwd_chunked, (x, x, x), chunk, True),
        ("layer_norm_fwd_chunked", ln.layer_norm_fwd_chunked, fwd_ln, chunk, True),
        *(("layer_norm_fwd_chunked", ln.layer_norm_fwd_chunked, fwd_ln, {"BLOCK": c, "num_warps": 8}, True)
          for c in ln.CUDA_CHUNKS),  # forward_plan's chunks of long 16-bit rows
        # the CUDA plans' two-chunk rows (session 19): 16-bit softmax and float32 layer norm of 32768, padded RMS rows
        ("softmax_chunked", sm.softmax_chunked, (x, x), {"BLOCK": sm.WHOLE_ROW // 2, "num_warps": 8}, True),
        ("layer_norm_fwd_chunked", ln.layer_norm_fwd_chunked, fwd_ln, {"BLOCK": ln.WHOLE_ROW, "num_warps": 8}, True),
        ("rms_norm_chunked", rn.rms_norm_chunked, fwd_rms, {"BLOCK": ln.CUDA_WHOLE_ROW, "num_warps": 8}, True),
        ("layer_norm_bwd_sums", ln.layer_norm_bwd_sums, (x, x, v, s, s, s, s), chunk_bwd, True),
        ("layer_norm_bwd_chunked", ln.layer_norm_bwd_chunked, (x, x, v, s, s, s, s, x, p, p), chunk_bwd, True),
        ("rms_norm_chunked", rn.rms_norm_chunked, fwd_rms, chunk, True),
        ("rms_norm_bwd_sums", rn.rms_norm_bwd_sums, (x, x, v, s, s), chunk_bwd, True),
        ("rms_norm_bwd_chunked", rn.rms_norm_bwd_chunked, (x, x, v, s, s, x, p), chunk_bwd, True),
        ("sum_partials", ln.sum_partials, (p, v), dict(zip(("BG", "BN"), ln.SUM_TILE)), True),
    ]
    return specs


def ptxas_info(kernel: Any, signature: tuple[Any, ...], constants: dict[str, int], arch: str) -> dict[str, Any]:
    """The CUDA backend's block size and launch bounds for one kernel, and what ptxas reports for the target a
    launch on ``arch`` uses (sm_90a for sm_90): registers, spill stores and loads; or the refusal."""
    import tilejit as tj
    from tilejit.backends.cuda_backend import BACKEND
    from tilejit.compiler.nvrtc import compile_cuda
    from tilejit.compiler.targets import parse_target

    target = BACKEND.launch_targets(parse_target(arch))[0]
    try:
        consts = {k: v for k, v in constants.items() if k != "num_warps"}  # num_warps: a launch option
        ck = tj.compile(kernel, signature, constants=consts, target=target, backend="cuda",
                        num_warps=constants.get("num_warps")).cuda_kernel()
    except tj.TileCompileError as exc:
        return {"status": f"refused: {first_line(exc)}"}
    log = compile_cuda(ck.source, name=f"{ck.name}.cu", headers=ck.headers, target=target, output="cubin",
                       options=("-Xptxas=-v",)).log
    regs = re.search(r"Used (\d+) registers", log)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    bounds = re.search(r"__launch_bounds__\(([^)]*)\)", ck.source)
    if regs is None or spill is None:
        return {"status": f"no ptxas info in NVRTC's log: {log[:200]!r}"}
    return {"status": "ok", "target": target.sm, "threads": ck.num_threads,
            "bounds": bounds.group(1) if bounds else "", "registers": int(regs.group(1)),
            "spill_stores": int(spill.group(1)), "spill_loads": int(spill.group(2))}


def ptxas_table(args: argparse.Namespace) -> tuple[str, list[dict[str, Any]]]:
    """The ``--ptxas`` report: a markdown row per kernel, dtype and BLOCK (compiled ``--jobs`` at a time)."""
    jobs = [(dtype, spec) for dtype in args.dtype_list for spec in ptxas_specs(dtype, args.length_list)]
    with ThreadPoolExecutor(args.jobs) as pool:
        infos = list(pool.map(lambda j: ptxas_info(j[1][1], j[1][2], j[1][3], args.arch), jobs))
    rows = []
    lines = [f"ptxas -v of the CUDA backend's example row kernels for {args.arch} (\"used\": the example holds rows "
             "this long whole; chunked kernels run at the chunk size)", "",
             "| kernel | dtype | constants | used | threads | launch bounds | registers | spill stores / loads |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (dtype, (label, _k, _sig, consts, used)), info in zip(jobs, infos):
        rows.append({"kernel": label, "dtype": dtype, "constants": consts, "used": used, **info})
        what = " ".join(f"{k}={v}" for k, v in consts.items())
        if info["status"] != "ok":
            lines.append(f"| {label} | {dtype} | {what} | {'yes' if used else 'no'} | {info['status']} | | | |")
            continue
        spilled = info["spill_stores"] or info["spill_loads"]
        lines.append(f"| {label} | {dtype} | {what} | {'yes' if used else 'no'} | {info['threads']} | "
                     f"({info['bounds']}) | {info['registers']} | "
                     f"{'**' if spilled else ''}{info['spill_stores']} / {info['spill_loads']}"
                     f"{'**' if spilled else ''} |")
    return "\n".join(lines), rows


# ---------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    """Run what the arguments ask for and write its outputs."""
    args = parse_args(argv)
    out = Path(args.out) if args.out else None
    if args.ptxas:
        text, rows = ptxas_table(args)
        print(text)
        if out:
            out.mkdir(parents=True, exist_ok=True)
            (out / "bench_rows_ptxas.json").write_text(json.dumps(rows, indent=1))
        used_spills = [r for r in rows if r["used"] and r.get("spill_stores", 0) + r.get("spill_loads", 0)]
        print(f"\n{len(used_spills)} kernel(s) the examples use spill" + "".join(
            f"\n  {r['kernel']} {r['dtype']} {r['constants']}" for r in used_spills))
        return 0
    started = time.perf_counter()
    if args.plot:
        results = json.loads(args.plot.read_text())["results"]
    else:
        results = sweep(args)
    report = table(results)
    print(report)
    data, plots = (out, out) if out else (HERE / "data", HERE / "plots")
    data.mkdir(parents=True, exist_ok=True)
    if not args.plot:
        wall = time.perf_counter() - started
        (data / "bench_rows.json").write_text(json.dumps({"wall_s": wall, "results": results}, indent=1))
        print(f"wall time: {wall:.0f} s")
        (data / "bench_rows.md").write_text(report + "\n")
    print(plot(results, plots / "bench_rows.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
