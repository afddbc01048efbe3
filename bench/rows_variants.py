"""Row kernels under the backends' alternative choices, side by side in one process: the sweep behind the long-row
and TMA rules of session 15 (docs/tileir.md, "Worker warps for long rows; TMA for rows"; bench/RESULTS.md).

Each Tile IR variant swaps one of the lowering's choice functions (``occupancy.choose_occupancy``,
``choose_worker_warps``, ``memory.access_hints``) before compiling fresh kernels, and the CUDA variants swap
``plan.row_min_blocks``; the disk cache is off so that every variant is compiled. The examples' softmax and layer
norm run at each row length (rows x length = 2**26), float32 and bfloat16, beside torch and Triton's tutorial
kernels; every result is checked against torch first. GB/s counts the bytes read and written.

    python3 bench/rows_variants.py                # on a GPU, with TILEJIT_TILEIRAS set: JSON, table and plot
    python3 bench/rows_variants.py --plot X.json  # no GPU: the table and plot of a saved run
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ELEMENTS = 1 << 26
LENGTHS = (4096, 8192, 16384, 32768)
EPS = 1e-5
#: Columns of the table: (JSON key, heading); the CUDA backend's current choice ("cuda") is the reference.
COLUMNS = (("cuda_s14", "CUDA, session 14 cap"), ("cuda", "CUDA"), ("tileir", "Tile IR, TMA"),
           ("tileir_notma", "Tile IR, no TMA"), ("tileir_rules", "Tile IR (the rules)"), ("torch", "torch"),
           ("triton", "Triton"))


def variants() -> dict[str, Callable[[], None]]:
    """Each variant's name and the function that installs its choices (the current ones first restored)."""
    import tilejit.backends.cuda.plan as plan
    from tilejit.backends.tileir.lower import memory

    def none(lo: Any, op: Any) -> None:
        return None

    def no_tma(lo: Any, op: Any) -> dict[str, dict[str, bool]]:
        return {lo.target: {"allow_tma": False}}

    current = (plan.row_min_blocks, memory.access_hints)

    def install(rmb: Any = None, hints: Any = None) -> Callable[[], None]:
        def apply() -> None:
            plan.row_min_blocks = rmb or current[0]
            memory.access_hints = hints or current[1]
        return apply

    return {
        "cuda_s14": install(rmb=lambda largest, nt, big: 4 if big <= 1 else 3),
        "cuda": install(),
        "tileir": install(hints=none),
        "tileir_notma": install(hints=no_tma),
        "tileir_rules": install(),
    }


def sweep() -> list[dict[str, Any]]:
    """Time every variant and peer at every shape (one GPU, this process)."""
    os.environ["TILEJIT_CACHE"] = "0"
    sys.path[:0] = [str(HERE.parent / "examples"), str(HERE)]
    import torch
    from _tileir_peers import triton_kernels, triton_layer_norm_block, triton_softmax_warps
    from layer_norm import layer_norm
    from softmax import softmax
    from triton.testing import do_bench

    import tilejit as tj

    tri = triton_kernels()
    rows: list[dict[str, Any]] = []
    for name in ("softmax", "layer_norm"):
        for dtype in (torch.float32, torch.bfloat16):
            for n in LENGTHS:
                m = ELEMENTS // n
                x = torch.randn(m, n, device="cuda", dtype=dtype)
                w, b = torch.randn(n, device="cuda", dtype=dtype), torch.randn(n, device="cuda", dtype=dtype)
                out = torch.empty_like(x)
                if name == "softmax":
                    want = torch.softmax(x.float(), 1)
                    base, args = softmax.func, (x, out)
                    warps = triton_softmax_warps(n)
                    peers = {"torch": lambda: torch.softmax(x, 1),
                             "triton": lambda: tri.softmax[(m,)](out, x, x.stride(0), out.stride(0), n, BLOCK=n,
                                                                 num_warps=warps)}
                else:
                    want = torch.nn.functional.layer_norm(x.float(), (n,), w.float(), b.float(), EPS)
                    base, args = layer_norm.func, (x, w, b, out, EPS)
                    block, warps = triton_layer_norm_block(n, x.element_size())
                    mean = torch.empty(m, device="cuda")
                    rstd = torch.empty(m, device="cuda")
                    peers = {"torch": lambda: torch.nn.functional.layer_norm(x, (n,), w, b, EPS),
                             "triton": lambda: tri.layer_norm[(m,)](x, out, w, b, mean, rstd, x.stride(0), n, EPS,
                                                                    BLOCK=block, num_warps=warps)}
                gb = 2.0 * m * n * x.element_size() / 1e6
                row: dict[str, Any] = {"kernel": name, "dtype": str(dtype).split(".")[1], "n": n}
                consts = {"ROWS": 1, "BLOCK": n} if name == "softmax" else {"BLOCK": n}  # one row a block
                for key, apply in variants().items():
                    apply()
                    k = tj.kernel(base, backend="cuda" if key.startswith("cuda") else "tileir")
                    out.fill_(float("nan"))
                    k[m](*args, **consts)
                    torch.cuda.synchronize()
                    row[key + "_err"] = float((out.float() - want).abs().max())
                    row[key] = gb / do_bench(lambda k=k: k[m](*args, **consts), return_mode="median")
                variants()["cuda"]()
                for key, fn in peers.items():
                    row[key] = gb / do_bench(fn, return_mode="median")
                print(json.dumps(row), flush=True)
                rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: GB/s and the ratio to the CUDA backend per shape, then geometric means per column."""
    keys = [k for k, _ in COLUMNS if any(k in r for r in rows)]
    heads = [h for k, h in COLUMNS if k in keys]
    lines = ["| kernel | dtype | rows x length | " + " | ".join(heads) + " |",
             "| --- | --- | --- | " + " | ".join("---" for _ in keys) + " |"]
    for r in rows:
        cells = [f"{r[k]:.0f} ({r[k] / r['cuda']:.2f}x)" if k in r else "" for k in keys]
        lines.append(f"| {r['kernel'].replace('_', ' ')} | {r['dtype']} | {ELEMENTS // r['n']}x{r['n']} | "
                     + " | ".join(cells) + " |")
    means = [math.exp(sum(math.log(r[k] / r["cuda"]) for r in rows) / len(rows)) for k in keys]
    lines.append("| geomean | | | " + " | ".join(f"{g:.2f}x" for g in means) + " |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Bars of each column's ratio to the CUDA backend, one panel per kernel and dtype."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys((r["kernel"], r["dtype"]) for r in rows))
    keys = [k for k, _ in COLUMNS if k != "cuda" and any(k in r for r in rows)]
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.6), sharey=True)
    for ax, (kernel, dtype) in zip(axes, groups):
        sel = [r for r in rows if (r["kernel"], r["dtype"]) == (kernel, dtype)]
        width = 0.8 / len(keys)
        for i, k in enumerate(keys):
            xs = [j + (i - (len(keys) - 1) / 2) * width for j in range(len(sel))]
            ax.bar(xs, [r[k] / r["cuda"] for r in sel], width, label=dict(COLUMNS)[k])
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(sel)))
        ax.set_xticklabels([str(r["n"]) for r in sel], fontsize=8)
        ax.set_title(f"{kernel.replace('_', ' ')} {dtype}", fontsize=9)
        ax.set_xlabel("row length")
    axes[0].set_ylabel("ratio to tilejit CUDA backend (GB/s)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plot", type=Path, help="a saved run's JSON: print its table and draw its plot, no GPU")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")), help="folder for the outputs")
    args = ap.parse_args(argv)
    if args.plot:
        rows = json.loads(args.plot.read_text())
        png = args.out / (args.plot.stem + ".png")
    else:
        rows = sweep()
        (args.out / "rows_variants.json").write_text(json.dumps(rows, indent=1))
        png = args.out / "rows_variants.png"
    print(table(rows))
    plot(rows, png)
    print(f"plot: {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
