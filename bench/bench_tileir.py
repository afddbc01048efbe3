"""tilejit's two backends side by side on one GPU: CUDA C++ (NVRTC) and Tile IR (tileiras), with torch, Triton,
cuBLAS and cuTile Python on equivalent kernels, in one run (issue 17's "Speed").

Kernels: vector add (f32, several sizes), fused row softmax and layer norm (row lengths 1K..32K, f32 and bf16,
2^26 elements per case so every case fills the GPU), bf16 matmul (2048^3, 4096^3, 8192^3 and non-square shapes;
examples/matmul.py's ``matmul`` on a 2-D grid and ``matmul_grouped`` in Triton's grouped tile order).
tilejit runs ``examples/``'s kernels, compiled once with ``backend="cuda"`` and once with ``backend="tileir"``;
Triton runs its tutorial kernels (matmul: the tutorial's first config, 128x256x64 / 8 warps / 3 stages, or its
autotune configs with ``--triton-autotune``); cuTile Python runs ``_tileir_cutile.py`` (the same kernels written
with ``cuda.tile``). Every contender's output is checked against torch before it is timed (a wrong one is reported,
not timed); timings are medians of device-event timed repetitions with the L2 cache flushed before each
(``bench_tile.bench``: ``triton.testing.do_bench``). Ratios per shape are against the CUDA backend (bandwidth
kernels) or cuBLAS (matmul), with their geometric means. Cold compile time per kernel (a fresh cache folder per
compile): NVRTC vs tileiras, and cuTile's export to a CUBIN.

A peer that cannot run here is "n/a (why)"; a kernel the Tile IR backend refuses is "refused: <first line>".
Prints a markdown table; with ``--out DIR`` (or ``$OUT``) writes bench_tileir.md, bench_tileir.json and
one ratio plot per kernel (PNG, when matplotlib is installed).

    python bench/bench_tileir.py [--quick] [--only vadd,softmax,layernorm,matmul,compile] [--out DIR]
    python bench/bench_tileir.py --compile-only [--arch sm_90]     # no GPU: compile times and cuTile export
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "examples")]

KERNELS = ("vadd", "softmax", "layernorm", "matmul", "compile")
VADD_SIZES = (1 << 20, 1 << 24, 100_000_007, 1 << 28)
QUICK_VADD_SIZES = (1 << 24, 1 << 28)
ROW_LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768)
QUICK_ROW_LENGTHS = (1024, 8192, 32768)
ROW_ELEMENTS = 1 << 26  # rows x row length of every softmax / layer norm case: 65536 x 1K ... 2048 x 32K
MATMUL_SHAPES = ((2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096),
                 (3000, 5000, 4000), (8192, 1024, 8192))
QUICK_MATMUL_SHAPES = ((4096, 4096, 4096), (3000, 5000, 4000))
VADD_TILE = 4096
MATMUL_GROUP = 8  # tile rows per group of the grouped matmul order
TRITON_VADD_BLOCK = 1024
EPS = 1e-5
#: The contender each unit's ratios are taken against.
REFERENCE = {"GB/s": "tilejit cuda", "TFLOP/s": "cuBLAS"}
BACKENDS = ("cuda", "tileir")


# ---------------------------------------------------------------- arguments and plan


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer shapes and one compile per kernel")
    ap.add_argument("--only", default="", help=f"comma list of: {','.join(KERNELS)} (default: all)")
    ap.add_argument("--tiles", default="128x256x32,128x128x64",
                    help="matmul tiles BMxBNxBK for tilejit (both backends) and cuTile, comma-separated")
    ap.add_argument("--triton-autotune", action="store_true",
                    help="Triton matmul autotuned over the tutorial's configs instead of its fixed first config")
    ap.add_argument("--compile-reps", type=int, default=None,
                    help="cold compiles per kernel and backend, median reported (default 3, --quick 1)")
    ap.add_argument("--compile-only", action="store_true",
                    help="no GPU: only compile times (tilejit both backends for --arch) and cuTile's export")
    ap.add_argument("--arch", default=None, help="compile target (default: the GPU's, else sm_90)")
    ap.add_argument("--out", default=None, help="folder for the table, JSON and plots (default: $OUT)")
    args = ap.parse_args(argv)
    only = [k for k in args.only.split(",") if k]
    bad = [k for k in only if k not in KERNELS]
    if bad:
        ap.error(f"--only: unknown {', '.join(bad)}; choose from {', '.join(KERNELS)}")
    args.kernels = tuple(only) if only else KERNELS
    try:
        args.tile_list = parse_tiles(args.tiles)
    except ValueError as exc:
        ap.error(f"--tiles: {exc}")
    if args.compile_reps is None:
        args.compile_reps = 1 if args.quick else 3
    if args.compile_reps < 1:
        ap.error("--compile-reps must be at least 1")
    args.out = args.out or os.environ.get("OUT") or None
    return args


def parse_tiles(text: str) -> list[tuple[int, int, int]]:
    """``"128x256x64,128x128x64"`` as [(128, 256, 64), (128, 128, 64)]: powers of two only."""
    tiles = []
    for part in text.split(","):
        dims = part.strip().split("x")
        if len(dims) != 3 or not all(d.isdigit() and int(d) > 0 and int(d) & (int(d) - 1) == 0 for d in dims):
            raise ValueError(f"{part!r} is not BMxBNxBK with powers of two, e.g. 128x256x64")
        tiles.append((int(dims[0]), int(dims[1]), int(dims[2])))
    return tiles


def plan(quick: bool) -> dict[str, Any]:
    """The shapes a run measures: vector sizes, row lengths (rows = ROW_ELEMENTS / length) and matmul MxNxK."""
    return {
        "vadd": QUICK_VADD_SIZES if quick else VADD_SIZES,
        "rows": QUICK_ROW_LENGTHS if quick else ROW_LENGTHS,
        "matmul": QUICK_MATMUL_SHAPES if quick else MATMUL_SHAPES,
    }


# ---------------------------------------------------------------- results, ratios and tables


def result(group: str, shape: str, contender: str, unit: str, *, ms: float | None = None, work: float = 0.0,
           status: str = "ok") -> dict[str, Any]:
    """One cell: ``work`` bytes (GB/s) or flops (TFLOP/s) done in ``ms``; ``status`` "ok" or what went wrong."""
    rate = None
    if ms is not None and status == "ok":
        rate = work / (ms * 1e-3) / (1e9 if unit == "GB/s" else 1e12)
    return {"group": group, "shape": shape, "contender": contender, "unit": unit, "ms": ms, "rate": rate,
            "status": status}


def geomean(values: Iterable[float]) -> float | None:
    """The geometric mean of positive ``values``; None when there are none."""
    vals = [v for v in values if v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an error, its file path cut to the file name (``/x/y/softmax.py:15:9: ...``)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    line = lines[0] if lines else type(exc).__name__
    head, sep, rest = line.partition(": ")
    if sep and "/" in head and " " not in head:
        line = f"{head.rsplit('/', 1)[1]}: {rest}"
    return line


def failure(contender: str, exc: BaseException) -> str:
    """A cell's status for an error: "refused: ..." when the Tile IR backend refuses the kernel (its located
    TileCompileError), else "error: <type>: ..."."""
    if contender.startswith("tilejit tileir") and type(exc).__name__ == "TileCompileError":
        return f"refused: {first_line(exc)}"
    return f"error: {type(exc).__name__}: {first_line(exc)}"


def ratios(results: list[dict[str, Any]], group: str) -> dict[str, dict[str, float]]:
    """Per contender, per shape: its rate over the reference contender's rate (both measured) in ``group``."""
    rows = [r for r in results if r["group"] == group]
    if not rows:
        return {}
    ref = REFERENCE[rows[0]["unit"]]
    base = {r["shape"]: r["rate"] for r in rows if r["contender"] == ref and r["rate"]}
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        if r["rate"] and base.get(r["shape"]):
            out.setdefault(r["contender"], {})[r["shape"]] = r["rate"] / base[r["shape"]]
    return out


def _md(text: str) -> str:
    """``text`` safe inside a markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def group_table(results: list[dict[str, Any]], group: str) -> list[str]:
    """The markdown table of one kernel group: a row per shape, a column per contender (rate and ratio to the
    reference, or why there is none), and a last row of geometric-mean ratios."""
    rows = [r for r in results if r["group"] == group]
    unit = rows[0]["unit"]
    ref = REFERENCE[unit]
    what = "; shape MxNxK" if unit == "TFLOP/s" else "; shape rows x length" if "x" in rows[0]["shape"] else ""
    return ratio_table(rows, ratios(results, group), f"### {group} ({unit}; ratio to {ref}{what})", ref)


def ratio_table(rows: list[dict[str, Any]], rat: dict[str, dict[str, float]], heading: str, ref: str) -> list[str]:
    """A markdown table of ``rows`` (one group): a row per shape, a column per contender (rate, ratio from
    ``rat``, the config that ran when a row names one, or why there is none), and geometric means vs ``ref``."""
    contenders = list(dict.fromkeys(r["contender"] for r in rows))
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    cells = {(r["shape"], r["contender"]): r for r in rows}
    lines = [heading, "", "| shape | " + " | ".join(contenders) + " |", "| --- |" + " --- |" * len(contenders)]
    for shape in shapes:
        out = []
        for c in contenders:
            r = cells.get((shape, c))
            if r is None:
                out.append("")
            elif r["rate"] is None:
                out.append(_md(r["status"]))
            else:
                x = rat.get(c, {}).get(shape)
                cfg = f" [{r['config']}]" if r.get("config") else ""
                out.append((f"{r['rate']:.0f} ({x:.2f}x)" if x is not None else f"{r['rate']:.0f}") + _md(cfg))
        lines.append(f"| {shape} | " + " | ".join(out) + " |")
    gm = []
    for c in contenders:
        got = rat.get(c, {})
        g = geomean(got.values())
        part = "" if len(got) == len(shapes) else f" ({len(got)}/{len(shapes)})"
        gm.append("" if g is None else f"{g:.2f}x{part}")
    lines.append(f"| geomean vs {ref} | " + " | ".join(gm) + " |")
    return lines


def compile_table(rows: list[dict[str, Any]]) -> list[str]:
    """The markdown table of cold compile times: per kernel, each backend's front end (tile IR) and backend
    (NVRTC / tileiras) milliseconds, tileiras over NVRTC, and cuTile's export to a CUBIN."""
    lines = ["### cold compile, ms (median; a fresh cache folder per compile)", "",
             "| kernel | tilejit front end | NVRTC | tileiras | tileiras / NVRTC | tilejit cuda total | "
             "tilejit tileir total | cuTile export (cubin) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        cuda, tileir = r.get("cuda", {}), r.get("tileir", {})

        def ms(d: dict[str, Any], key: str, status: bool = True) -> str:
            """A time, or (when ``status``) the entry's status when it has none."""
            v = d.get(key)
            if isinstance(v, float):
                return f"{v:.0f}"
            return _md(str(d.get("status", ""))) if status else ""

        ratio = ""
        if isinstance(cuda.get("backend_ms"), float) and isinstance(tileir.get("backend_ms"), float):
            ratio = f"{tileir['backend_ms'] / cuda['backend_ms']:.2f}x"
        lines.append(f"| {r['kernel']} | {ms(cuda, 'front_ms')} | {ms(cuda, 'backend_ms')} | "
                     f"{ms(tileir, 'backend_ms')} | {ratio} | {ms(cuda, 'total_ms', False)} | "
                     f"{ms(tileir, 'total_ms', False)} | "
                     f"{ms(r.get('cutile', {}), 'total_ms')} |")
    return lines


def summary(results: list[dict[str, Any]],
            ratios_of: Callable[[list[dict[str, Any]], str], dict[str, dict[str, float]]] | None = None,
            columns: tuple[str, str] = ("kernel", "geomean ratio")) -> list[str]:
    """One line per group and contender: the geometric mean of its ratios (``ratios_of``, default ``ratios``:
    to the group's reference); ``columns`` names the group and ratio columns."""
    ratios_of = ratios_of or ratios
    lines = [f"| {columns[0]} | contender | {columns[1]} | shapes |", "| --- | --- | --- | --- |"]
    for group in dict.fromkeys(r["group"] for r in results):
        n = len({r["shape"] for r in results if r["group"] == group})
        for c, got in ratios_of(results, group).items():
            g = geomean(got.values())
            if g is not None:
                lines.append(f"| {group} | {c} | {g:.2f}x | {len(got)}/{n} |")
    return lines


def render(results: list[dict[str, Any]], compile_rows: list[dict[str, Any]], header: Sequence[str]) -> str:
    """The whole report as markdown: header lines, the summary, one table per kernel group, compile times."""
    parts = [*header, ""]
    if results:
        parts += ["### geometric means", "", *summary(results), ""]
        for group in dict.fromkeys(r["group"] for r in results):
            parts += [*group_table(results, group), ""]
    if compile_rows:
        parts += [*compile_table(compile_rows), ""]
    return "\n".join(parts)


def plot(results: list[dict[str, Any]], out: Path) -> list[str]:
    """One PNG per kernel group: bars of each contender's ratio to the reference, per shape. Returns the files
    written, or one "n/a (why)" line when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return [f"plots: n/a (matplotlib: {exc})"]
    written = []
    for group in dict.fromkeys(r["group"] for r in results):
        rat = ratios(results, group)
        shapes = list(dict.fromkeys(r["shape"] for r in results if r["group"] == group))
        if not rat:
            continue
        unit = next(r["unit"] for r in results if r["group"] == group)
        fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(shapes) + 2), 4))
        width = 0.8 / len(rat)
        for i, (c, got) in enumerate(rat.items()):
            xs = [j + (i - (len(rat) - 1) / 2) * width for j, s in enumerate(shapes) if s in got]
            ax.bar(xs, [got[s] for s in shapes if s in got], width, label=c)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(shapes, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel(f"ratio to {REFERENCE[unit]} ({unit})")
        ax.set_title(group)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        path = out / f"bench_tileir_{group.replace(' ', '_')}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(str(path))
    return written


# ---------------------------------------------------------------- peers


def prepare_tileiras_path() -> None:
    """Put ``TILEJIT_TILEIRAS``'s bin folder first on PATH when no tileiras is on it, so that cuTile (which looks
    on PATH and in its pip wheels) finds the same toolchain; and keep cuTile's disk cache off for the run (every
    compile cold, nothing written to the home folder) unless CUDA_TILE_CACHE_DIR is set."""
    given = os.environ.get("TILEJIT_TILEIRAS")
    if given and shutil.which("tileiras") is None:
        folder = given if os.path.isdir(given) else os.path.dirname(given)
        os.environ["PATH"] = folder + os.pathsep + os.environ.get("PATH", "")
    os.environ.setdefault("CUDA_TILE_CACHE_DIR", "off")


def load_cutile() -> Any:
    """The cuTile kernels module, or the text "n/a (why)"."""
    try:
        import _tileir_cutile
    except Exception as exc:  # ImportError, or cuda.tile failing to load its extension
        return f"n/a (cuda.tile: {first_line(exc)})"
    return _tileir_cutile


def load_triton(autotune: bool) -> Any:
    """Triton's tutorial kernels (``_tileir_peers.triton_kernels``), or the text "n/a (why)"."""
    try:
        from _tileir_peers import triton_kernels

        return triton_kernels(autotune)
    except Exception as exc:
        return f"n/a (triton: {first_line(exc)})"


def tileir_unavailable(target: str) -> str | None:
    """None when tilejit's Tile IR backend can compile for ``target`` here, else "n/a (why)"."""
    from tilejit.backends.base import get_backend
    from tilejit.compiler.targets import parse_target

    why = get_backend("tileir").available(parse_target(target))
    return None if why is None else f"n/a ({why})"


# ---------------------------------------------------------------- cold compile times


def compile_specs(tiles: Sequence[tuple[int, int, int]]) -> list[tuple[str, str, str, dict[str, int]]]:
    """(label, example kernel, dtype, constants) of each kernel whose cold compile is timed."""
    specs = [("vector_add f32", "vector_add", "float32", {"TILE": VADD_TILE})]
    for name in ("softmax", "layer_norm"):
        for dt in ("float32", "bfloat16"):
            consts = {"ROWS": 1, "BLOCK": 8192} if name == "softmax" else {"BLOCK": 8192}
            specs.append((f"{name} {short_dtype(dt)} BLOCK=8192", name, dt, consts))
    for bm, bn, bk in tiles:
        specs.append((f"matmul bf16 {bm}x{bn}x{bk}", "matmul", "bfloat16", {"BM": bm, "BN": bn, "BK": bk}))
    return specs


def short_dtype(name: str) -> str:
    """float32 -> f32, bfloat16 -> bf16."""
    return {"float32": "f32", "bfloat16": "bf16"}[name]


def example_kernel(name: str, module: str | None = None) -> Any:
    """The ``@tj.kernel`` ``name`` of ``examples/<module>.py`` (default: the module of the same name)."""
    return getattr(__import__(module or name), name)


def signature(name: str, dtype: str) -> tuple[Any, ...]:
    """The tilejit signature of an example kernel for contiguous arrays of ``dtype``, as a torch launch gives."""
    import tilejit as tj

    dt = getattr(tj, dtype)
    return {
        "vector_add": (dt[::1], dt[::1], dt[::1]),
        "softmax": (dt[:, ::1], dt[:, ::1]),
        "layer_norm": (dt[:, ::1], dt[::1], dt[::1], dt[:, ::1], tj.float32),
        "matmul": (dt[:, ::1], dt[:, ::1], dt[:, ::1]),
    }[name]


class FreshCache:
    """A context in which tilejit's disk cache is a new empty folder (removed on exit)."""

    def __enter__(self) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="bench-tileir-cache-")
        self.old = os.environ.get("TILEJIT_CACHE_DIR")
        os.environ["TILEJIT_CACHE_DIR"] = self.tmp.name

    def __exit__(self, *exc: object) -> None:
        if self.old is None:
            os.environ.pop("TILEJIT_CACHE_DIR", None)
        else:
            os.environ["TILEJIT_CACHE_DIR"] = self.old
        self.tmp.cleanup()


def _median(xs: list[float]) -> float:
    """The median of a non-empty list."""
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def time_tilejit_compile(kernel: Any, sig: tuple[Any, ...], consts: dict[str, int], target: Any, backend: str,
                         reps: int) -> dict[str, Any]:
    """Median front-end, backend and total ms of ``reps`` cold compiles of one kernel (a fresh artifact and cache
    folder each), or {"status": why not}."""
    import tilejit as tj

    fronts, backs = [], []
    try:
        for _ in range(reps):
            with FreshCache():
                t0 = time.perf_counter()
                art = tj.compile(kernel, sig, constants=consts, target=target, backend=backend)
                art.ir()
                t1 = time.perf_counter()
                art.image()
                t2 = time.perf_counter()
            fronts.append((t1 - t0) * 1e3)
            backs.append((t2 - t1) * 1e3)
    except Exception as exc:
        return {"status": failure(f"tilejit {backend}", exc)}
    return {"front_ms": _median(fronts), "backend_ms": _median(backs),
            "total_ms": _median([f + b for f, b in zip(fronts, backs)]), "status": "ok"}


def time_cutile_compile(cutile: Any, which: str, dtype: str, consts: tuple[int, ...], gpu: str,
                        reps: int) -> dict[str, Any]:
    """Median ms of ``reps`` cuTile exports of one kernel to a CUBIN for ``gpu`` (its front end and tileiras), or
    {"status": why not}."""
    if isinstance(cutile, str):
        return {"status": cutile}
    times = []
    try:
        for _ in range(reps):
            t0 = time.perf_counter()
            image = cutile.export(which, dtype, consts, gpu, "cubin")
            times.append((time.perf_counter() - t0) * 1e3)
            if image[:4] != b"\x7fELF":
                return {"status": "error: cuTile's export wrote no CUBIN"}
    except Exception as exc:
        return {"status": f"error: {type(exc).__name__}: {first_line(exc)}"}
    return {"total_ms": _median(times), "status": "ok"}


def compile_times(arch: str, tiles: Sequence[tuple[int, int, int]], reps: int, cutile: Any) -> list[dict[str, Any]]:
    """Cold compile times of every kernel of ``compile_specs`` for ``arch``: tilejit with each backend (for the
    target that backend launches on such a GPU: sm_90a for CUDA C++ on an H100) and cuTile's export."""
    from tilejit.backends.base import get_backend
    from tilejit.compiler.targets import parse_target

    targets = {be: get_backend(be).launch_targets(parse_target(arch))[0] for be in BACKENDS}
    na = {"tileir": tileir_unavailable(targets["tileir"].sm)}
    plain = f"sm_{parse_target(arch).number}"
    warm = example_kernel("vector_add")
    # One untimed compile each: loading NVRTC, finding tileiras and importing cuTile's compiler are no kernel's cost.
    for be in BACKENDS:
        if na.get(be) is None:
            time_tilejit_compile(warm, signature("vector_add", "float32"), {"TILE": 256}, targets[be], be, 1)
    time_cutile_compile(cutile, "vector_add", "float32", (256,), plain, 1)
    rows = []
    for label, name, dtype, consts in compile_specs(tiles):
        row: dict[str, Any] = {"kernel": label}
        for be in BACKENDS:
            why = na.get(be)
            row[be] = {"status": why} if why else time_tilejit_compile(
                example_kernel(name), signature(name, dtype), consts, targets[be], be, reps)
        row["cutile"] = time_cutile_compile(cutile, name, dtype, tuple(consts.values()), plain, reps)
        rows.append(row)
    return rows


# ---------------------------------------------------------------- timed runs (GPU)


class Runner:
    """Runs, checks and times contenders on the GPU, collecting ``results``."""

    def __init__(self, args: argparse.Namespace, cutile: Any, triton: Any, tileir_na: str | None) -> None:
        import torch
        from bench_tile import bench, close

        self.torch = torch
        self.bench = bench
        self.close = close
        self.args = args
        self.cutile = cutile
        self.triton = triton
        self.tileir_na = tileir_na
        self.results: list[dict[str, Any]] = []
        self.tj_kernels: dict[tuple[str, str], Any] = {}

    def tj(self, name: str, backend: str, module: str | None = None) -> Any:
        """The example kernel ``name`` (of ``examples/<module>.py``, default ``<name>.py``) as a ``@tj.kernel``
        of ``backend`` (one object per backend)."""
        key = (name, backend)
        if key not in self.tj_kernels:
            import tilejit as tj

            self.tj_kernels[key] = tj.kernel(example_kernel(name, module).func, backend=backend)
        return self.tj_kernels[key]

    def run(self, group: str, shape: str, contender: str, unit: str, work: float, fn: Callable[[], Any] | str,
            out: Any, want: Any, tol: float) -> None:
        """Launch ``fn`` once (``out`` poisoned first), check its output (what it returns when a tensor, else
        ``out``) against ``want``, then time it; a string ``fn`` is the cell's status (a peer not available)."""
        torch = self.torch
        if isinstance(fn, str):
            self.results.append(result(group, shape, contender, unit, status=fn))
            return
        try:
            if out is not None:
                out.fill_(float("nan"))
            got = fn()
            torch.cuda.synchronize()
        except Exception as exc:
            self.results.append(result(group, shape, contender, unit, status=failure(contender, exc)))
            return
        got = got if isinstance(got, torch.Tensor) else out
        try:
            self.close(got, want, tol)
        except AssertionError as exc:
            self.results.append(result(group, shape, contender, unit, status=f"wrong: {first_line(exc)}"))
            return
        try:
            ms = self.bench(fn)
        except Exception as exc:  # it ran once and was right, then failed while timed
            self.results.append(result(group, shape, contender, unit, status=f"{failure(contender, exc)} (timing)"))
            return
        self.results.append(result(group, shape, contender, unit, ms=ms, work=work))

    def peer(self, what: Any, make: Callable[[Any], Callable[[], Any]]) -> Callable[[], Any] | str:
        """``make(what)``, or ``what`` itself when it is the text of why the peer is not available."""
        return what if isinstance(what, str) else make(what)

    def cutile_launch(self, which: str, grid: tuple[int, ...], *args: Any) -> Callable[[], Any] | str:
        """A launch of a cuTile kernel on torch's current stream, or why not."""
        def make(m: Any) -> Callable[[], Any]:
            """The launch function."""
            stream = self.torch.cuda.current_stream()
            kernel = getattr(m.KERNELS, which)
            return lambda: m.ct.launch(stream, grid, kernel, args)
        return self.peer(self.cutile, make)

    def on(self, backend: str, fn: Callable[[], Any]) -> Callable[[], Any] | str:
        """``fn``, a tilejit launch with ``backend``, or why that backend is not available here."""
        return self.tileir_na if backend == "tileir" and self.tileir_na else fn

    def vector_add(self, sizes: Sequence[int]) -> None:
        """Vector add, float32, at each size."""
        torch = self.torch
        group = "vector add f32"
        for n in sizes:
            x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
            out = torch.empty_like(x)
            want = x + y
            work = 3.0 * n * 4
            grid = -(-n // VADD_TILE)
            shape = f"{n:,}".replace(",", "_")
            for be in BACKENDS:
                k = self.tj("vector_add", be)
                fn = (lambda k=k: k[grid](x, y, out, TILE=VADD_TILE))
                self.run(group, shape, f"tilejit {be}", "GB/s", work, self.on(be, fn),
                         out, want, 1e-6)
            self.run(group, shape, "torch", "GB/s", work, lambda: torch.add(x, y, out=out), out, want, 1e-6)
            tg = (-(-n // TRITON_VADD_BLOCK),)
            self.run(group, shape, "triton", "GB/s", work,
                     self.peer(self.triton, lambda t: lambda: t.add[tg](x, y, out, n, BLOCK=TRITON_VADD_BLOCK)),
                     out, want, 1e-6)
            self.run(group, shape, "cuTile", "GB/s", work,
                     self.cutile_launch("vector_add", (grid,), x, y, out, VADD_TILE), out, want, 1e-6)

    def softmax(self, lengths: Sequence[int]) -> None:
        """Fused row softmax at each row length, float32 and bfloat16."""
        from _tileir_peers import triton_softmax_warps
        from softmax import softmax_rows

        torch = self.torch
        for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 1e-2)):
            group = f"softmax {'f32' if dtype == torch.float32 else 'bf16'}"
            for n in lengths:
                m = ROW_ELEMENTS // n
                x = torch.randn(m, n, device="cuda", dtype=dtype)
                out = torch.empty_like(x)
                want = torch.softmax(x.float(), dim=1)
                work = 2.0 * m * n * x.element_size()
                shape = f"{m}x{n}"
                for be in BACKENDS:
                    fn = (lambda be=be: softmax_rows(x, out, backend=be))  # the example's plan for this backend
                    self.run(group, shape, f"tilejit {be}", "GB/s", work,
                             self.on(be, fn), out, want, tol)
                self.run(group, shape, "torch", "GB/s", work, lambda: torch.softmax(x, dim=1), out, want, tol)
                warps = triton_softmax_warps(n)
                tri = self.peer(self.triton, lambda t: lambda: t.softmax[(m,)](
                    out, x, x.stride(0), out.stride(0), n, BLOCK=n, num_warps=warps))
                self.run(group, shape, "triton", "GB/s", work, tri, out, want, tol)
                self.run(group, shape, "cuTile", "GB/s", work, self.cutile_launch("softmax", (m,), x, out, n),
                         out, want, tol)

    def layer_norm(self, lengths: Sequence[int]) -> None:
        """Layer norm forward at each row length, float32 and bfloat16 (weights and bias of the same dtype)."""
        from _tileir_peers import triton_layer_norm_block

        torch = self.torch
        for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 1e-2)):
            group = f"layer norm {'f32' if dtype == torch.float32 else 'bf16'}"
            for n in lengths:
                m = ROW_ELEMENTS // n
                x = torch.randn(m, n, device="cuda", dtype=dtype)
                w, b = torch.randn(n, device="cuda", dtype=dtype), torch.randn(n, device="cuda", dtype=dtype)
                out = torch.empty_like(x)
                want = torch.nn.functional.layer_norm(x.float(), (n,), w.float(), b.float(), EPS)
                work = 2.0 * m * n * x.element_size()
                shape = f"{m}x{n}"
                for be in BACKENDS:
                    k = self.tj("layer_norm", be)
                    fn = (lambda k=k: k[m](x, w, b, out, EPS, BLOCK=n))
                    self.run(group, shape, f"tilejit {be}", "GB/s", work,
                             self.on(be, fn), out, want, tol)
                self.run(group, shape, "torch", "GB/s", work,
                         lambda: torch.nn.functional.layer_norm(x, (n,), w, b, EPS), out, want, tol)
                block, warps = triton_layer_norm_block(n, x.element_size())
                mean = torch.empty(m, device="cuda", dtype=torch.float32)
                rstd = torch.empty(m, device="cuda", dtype=torch.float32)
                tri = self.peer(self.triton, lambda t: lambda: t.layer_norm[(m,)](
                    x, out, w, b, mean, rstd, x.stride(0), n, EPS, BLOCK=block, num_warps=warps))
                self.run(group, shape, "triton", "GB/s", work, tri, out, want, tol)
                self.run(group, shape, "cuTile", "GB/s", work,
                         self.cutile_launch("layer_norm", (m,), x, w, b, out, EPS, n), out, want, tol)

    def matmul(self, shapes: Sequence[tuple[int, int, int]]) -> None:
        """bf16 matmul with float32 accumulation at each MxNxK: cuBLAS, tilejit's two backends and cuTile at each
        tile of ``--tiles`` in both tile orders (examples/matmul.py: ``matmul`` on a 2-D grid, ``matmul_grouped``
        in groups of ``MATMUL_GROUP`` tile rows), and Triton's tutorial kernel."""
        from _tileir_peers import triton_matmul_launch

        torch = self.torch
        group = "matmul bf16"
        for m, n, kk in shapes:
            a = torch.randn(m, kk, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(kk, n, device="cuda", dtype=torch.bfloat16)
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            want = a.float() @ b.float()
            work = 2.0 * m * n * kk
            shape = f"{m}x{n}x{kk}"
            self.run(group, shape, "cuBLAS", "TFLOP/s", work, lambda: torch.matmul(a, b, out=c), c, want, 1e-2)
            for bm, bn, bk in self.args.tile_list:
                grid = (-(-m // bm), -(-n // bn))
                tile = f"{bm}x{bn}x{bk}"
                for order, name, launch_grid, extra in (
                    ("", "matmul", grid, {}),
                    ("grouped ", "matmul_grouped", (grid[0] * grid[1],), {"GROUP": MATMUL_GROUP}),
                ):
                    for be in BACKENDS:
                        k = self.tj(name, be, "matmul")
                        fn = (lambda k=k, g=launch_grid, bm=bm, bn=bn, bk=bk, extra=extra:
                              k[g](a, b, c, BM=bm, BN=bn, BK=bk, **extra))
                        self.run(group, shape, f"tilejit {be} {order}{tile}", "TFLOP/s", work,
                                 self.on(be, fn), c, want, 1e-2)
                    self.run(group, shape, f"cuTile {order}{tile}", "TFLOP/s", work,
                             self.cutile_launch(name, (*launch_grid, 1, 1)[:3], a, b, c, bm, bn, bk,
                                                *extra.values()), c, want, 1e-2)
            label = "triton (autotuned)" if self.args.triton_autotune else "triton 128x256x64"
            self.run(group, shape, label, "TFLOP/s", work,
                     self.peer(self.triton, lambda t: triton_matmul_launch(t, a, b, c)), c, want, 1e-2)


# ---------------------------------------------------------------- main


def versions(cutile: Any, triton: Any) -> list[str]:
    """Header lines: the machine and every peer's version (or why it is absent)."""
    import platform

    import tilejit as tj

    lines = [f"Python {platform.python_version()}, tilejit {getattr(tj, '__version__', '?')}"]
    try:
        import torch

        if torch.cuda.is_available():
            lines.append(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
        else:
            lines.append(f"torch {torch.__version__} (no GPU)")
    except ImportError:
        lines.append("torch: n/a (not installed)")
    lines.append(f"Triton {triton.triton.__version__}" if not isinstance(triton, str) else f"Triton: {triton}")
    if isinstance(cutile, str):
        lines.append(f"cuTile Python: {cutile}")
    else:
        lines.append(f"cuTile Python {getattr(cutile.ct, '__version__', '?')}")
    from tilejit.backends.base import get_backend

    backend = get_backend("tileir")
    find = getattr(backend, "toolchain", None)  # a stand-in for a backend that cannot be imported has none
    tc = find() if find else f"n/a ({getattr(backend, 'reason', 'the Tile IR backend is not there')})"
    lines.append(f"tileiras: {tc}" if isinstance(tc, str) else f"tileiras {tc.tileiras_version} at {tc.tileiras}")
    return lines


def default_arch() -> str:
    """The current GPU's target (through torch), else sm_90."""
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}"
    except ImportError:
        pass
    return "sm_90"


def main(argv: Sequence[str] | None = None) -> int:
    """Run what the arguments ask for, print the report and write it to the output folder."""
    args = parse_args(argv)
    started = time.perf_counter()
    prepare_tileiras_path()
    arch = args.arch or ("sm_90" if args.compile_only else default_arch())
    cutile = load_cutile()
    triton = "n/a (--compile-only)" if args.compile_only else load_triton(args.triton_autotune)
    header = [f"## bench_tileir ({'compile only' if args.compile_only else 'quick' if args.quick else 'full'} run, "
              f"{arch})", "", *versions(cutile, triton)]
    compile_rows: list[dict[str, Any]] = []
    if "compile" in args.kernels or args.compile_only:
        t0 = time.perf_counter()
        compile_rows = compile_times(arch, args.tile_list, args.compile_reps, cutile)
        print(f"[compile times: {time.perf_counter() - t0:.0f} s]", flush=True)
    results: list[dict[str, Any]] = []
    if not args.compile_only:
        from tilejit.backends.base import get_backend
        from tilejit.compiler.targets import parse_target

        tileir_target = get_backend("tileir").launch_targets(parse_target(arch))[0]
        runner = Runner(args, cutile, triton, tileir_unavailable(tileir_target.sm))
        shapes = plan(args.quick)
        steps: list[tuple[str, Callable[[], None]]] = [
            ("vadd", lambda: runner.vector_add(shapes["vadd"])),
            ("softmax", lambda: runner.softmax(shapes["rows"])),
            ("layernorm", lambda: runner.layer_norm(shapes["rows"])),
            ("matmul", lambda: runner.matmul(shapes["matmul"])),
        ]
        for key, step in steps:
            if key not in args.kernels:
                continue
            t0 = time.perf_counter()
            try:
                step()
            except Exception as exc:  # a failure outside one contender (inputs, references): report, go on
                print(f"{key}: FAILED: {type(exc).__name__}: {first_line(exc)}", flush=True)
            print(f"[{key}: {time.perf_counter() - t0:.0f} s]", flush=True)
            runner.torch.cuda.empty_cache()
        results = runner.results
    header.append(f"Wall time: {time.perf_counter() - started:.0f} s")
    report = render(results, compile_rows, header)
    print(report)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench_tileir.md").write_text(report)
        (out / "bench_tileir.json").write_text(json.dumps({"header": header, "results": results,
                                                           "compile": compile_rows}, indent=1))
        if results:
            for line in plot(results, out):
                print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
