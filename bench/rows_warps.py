"""The examples' row kernels on the CUDA backend under other warp counts, chunk sizes and whole-row limits, beside
Triton's tutorial kernels in one process: the sweep behind the session 17 row rules (bench/RESULTS.md; the 16-bit
whole-row warps in ``backends/cuda/plan.py``, the examples' ``CHUNK_BYTES``).

Each variant builds fresh copies of the examples' kernels with ``num_warps=W`` (or the plan's own choice) and, for
rows the examples split into chunks, ``CHUNK_BYTES`` of each size; ``--whole-softmax``/``--whole-norm`` move the
examples' whole-row limits. Every variant is checked against torch before it is timed (``bench_rows.check``);
printed per shape: each variant's speed over Triton's; JSON into ``--out`` (default ``$OUT``, else bench/data).

    python3 bench/rows_warps.py --families softmax,layer_norm --dtypes bfloat16 --lengths 1024,12288
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE), str(HERE.parent / "examples")]  # tilejit from this checkout

import bench_rows as br

WARPS = (None, 2, 4, 8, 16, 32)
CHUNKS = (32768, 16384)


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default="softmax,layer_norm,rms_norm")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--lengths", default="512,1024,3000,4096,12288,16384,32768,50000,65536")
    ap.add_argument("--warps", default=",".join("plan" if w is None else str(w) for w in WARPS),
                    help="comma list of warp counts; 'plan' is the backend's own choice")
    ap.add_argument("--whole-softmax", type=int, default=None, help="softmax's whole-row limit (elements)")
    ap.add_argument("--whole-norm", type=int, default=None, help="layer/RMS norm's whole-row limit (elements)")
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--rep", type=float, default=20.0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    args.warp_list = [None if w == "plan" else int(w) for w in args.warps.split(",") if w]
    return args


def main() -> None:
    args = parse()
    import _common
    import layer_norm
    import rms_norm
    import softmax
    import torch

    import tilejit as tj

    warps: dict[str, int | None] = {"now": None}
    copies: dict[tuple[int, int | None], Any] = {}

    def on_backend(kernel: Any, backend: str | None) -> Any:
        """The example's kernel, built for the CUDA backend with the variant's warps."""
        key = (id(kernel), warps["now"])
        if key not in copies:
            w = warps["now"]
            copies[key] = tj.kernel(kernel.func, backend="cuda", **({} if w is None else {"num_warps": w}))
        return copies[key]

    for mod in (softmax, layer_norm, rms_norm):
        mod.on_backend = on_backend  # type: ignore[attr-defined]
    if args.whole_softmax:
        softmax.WHOLE_ROW = args.whole_softmax
    if args.whole_norm:
        layer_norm.WHOLE_ROW = rms_norm.WHOLE_ROW = args.whole_norm
    chunk_default = dict(_common.CHUNK_BYTES)
    time_of = br.timer(args)
    triton = br.load_triton()
    results = []
    for family, dtype, n in itertools.product(args.families.split(","), args.dtypes.split(","),
                                              [int(v) for v in args.lengths.split(",")]):
        case = br.Case(family, dtype, n, br.ELEMENTS // n, triton)
        tri = time_of(case.runs["triton"]) if br.check(case, "triton") == "ok" else None
        whole = softmax.WHOLE_ROW if family == "softmax" else layer_norm.WHOLE_ROW
        chunks = CHUNKS if _common.block_of(n) > whole else (None,)
        row: dict[str, Any] = {"family": family, "dtype": dtype, "n": n, "triton_ms": tri, "ms": {}}
        for w, chunk in itertools.product(args.warp_list, chunks):
            warps["now"] = w
            _common.CHUNK_BYTES = {"cuda": chunk or chunk_default["cuda"]}
            status = br.check(case, "tilejit cuda")
            name = f"warps={w or 'plan'}" + (f" chunk={chunk}" if chunk else "")
            row["ms"][name] = time_of(case.runs["tilejit cuda"]) if status == "ok" else status
        _common.CHUNK_BYTES = chunk_default
        del case
        torch.cuda.empty_cache()
        timed = {k: v for k, v in row["ms"].items() if isinstance(v, float)}
        shown = " ".join(f"{k}:{tri / v:.2f}" for k, v in timed.items()) if tri else "(Triton did not run)"
        print(f"{family:10s} {dtype:8s} {n:6d}  {shown}", flush=True)
        results.append(row)
    out = Path(args.out or os.environ.get("OUT") or HERE / "data")
    out.mkdir(parents=True, exist_ok=True)
    (out / "rows_warps.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
