"""Shared by the examples: run on the GPU when there is one, otherwise compile for a named target."""

from __future__ import annotations

import argparse
import functools
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

import tilejit as tj


def parse_args(
    description: str, extra: Callable[[argparse.ArgumentParser], object] | None = None
) -> argparse.Namespace:
    """The options every example takes, plus those ``extra`` adds."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--arch", default="sm_90", help="target to compile for when no GPU is present")
    p.add_argument("--compile-only", action="store_true", help="compile for --arch even if a GPU is present")
    p.add_argument("--show", choices=["ir", "cuda", "ptx"], help="print one compiled form")
    p.add_argument("--backend", choices=["cuda", "tileir", "auto"], help="with --compile-only: the backend to compile "
                   "with (default: TILEJIT_BACKEND, else auto)")
    if extra is not None:
        extra(p)
    return p.parse_args()


def compile_only(args: argparse.Namespace, kernel: object, signature: tuple, constants: dict) -> None:
    """Compile for ``args.arch`` with no GPU and report what came out."""
    try:
        art = tj.compile(kernel, signature, constants=constants, target=args.arch, backend=args.backend)
        if args.show == "ir":
            print(art.ir_text())
        elif args.show == "cuda":
            print(art.cuda_source())
        elif args.show == "ptx":
            print(art.ptx())
        cubin = art.cubin()
    except tj.TilejitError as exc:
        sys.exit(f"error: {exc}")
    print(f"compiled {art.name} for {args.arch} ({art.backend}): {len(cubin)} bytes of CUBIN (no GPU needed)")


#: The bytes of a row chunk that kernels of too-long rows work on, by backend: with backend="cuda" 32 KB (8192
#: float32 or 16384 16-bit elements, 32 a thread of its 256 or 512 threads; 16 KB chunks were 2-20% slower on an H100),
#: else 16 KB (Tile IR's 32 KB chunks of 16-bit layer norm rows ran at a third of the speed; see bench/RESULTS.md).
CHUNK_BYTES = {"cuda": 32768}
DEFAULT_CHUNK_BYTES = 16384


def itemsize_of(x: Any) -> int:
    """Bytes per element of array ``x`` (tilejit arrays and numpy say ``itemsize``, torch ``element_size()``)."""
    itemsize = getattr(x, "itemsize", None)
    return itemsize if isinstance(itemsize, int) else int(x.element_size())


def chunk_of(x: Any, backend: str | None = None) -> int:
    """The chunk, in elements, for rows of array ``x`` (tilejit or torch) on ``backend``: ``CHUNK_BYTES`` of its
    dtype."""
    return CHUNK_BYTES.get(backend or "", DEFAULT_CHUNK_BYTES) // itemsize_of(x)


def backend_of(backend: str | None) -> str:
    """The backend the examples' kernels build with: ``backend`` when it names one, else the one "auto" (or
    ``TILEJIT_BACKEND``, read at each call: a process may change it between launches) picks for this process's
    GPU, so that host code can pick tile shapes and launch options for it."""
    if backend in ("cuda", "tileir"):
        return backend
    return _chosen_backend(backend, os.environ.get("TILEJIT_BACKEND"))


@functools.cache
def _chosen_backend(backend: str | None, setting: str | None) -> str:
    """``tj.backend_for(backend)``, remembered per ``TILEJIT_BACKEND`` value (``setting``, the cache key only)."""
    return tj.backend_for(backend)


#: The most rows a block of a row kernel takes at once on Tile IR (``row_tiles``).
MAX_ROWS = 16


def row_tiles(m: int, block: int, backend: str | None, elements: int) -> tuple[int, dict[str, int]]:
    """The grid and the ``ROWS``/``BLOCK`` constants of a kernel holding whole rows of ``block`` elements of an
    ``m``-row array as (ROWS, BLOCK) tiles: one row a block on the CUDA backend (its plan already packs short rows'
    threads); on Tile IR as many rows as make about ``elements`` elements, at most ``MAX_ROWS``: tileiras gives a
    block of one short row too little to do (rows of 256 bf16 elements ran at 0.4-0.6x of Triton one per block and
    1.3-1.6x eight to sixteen per block; bench/RESULTS.md, session 18)."""
    rows = max(1, min(MAX_ROWS, elements // block)) if backend_of(backend) == "tileir" else 1
    return -(-m // rows), {"ROWS": rows, "BLOCK": block}


def block_of(n: int) -> int:
    """The smallest power of two holding ``n`` (a tile shape for a row of ``n`` elements)."""
    return 1 << max(n - 1, 0).bit_length()


_COPIES: dict[tuple[int, str | None, int | None], Any] = {}
_COPIES_LOCK = threading.Lock()


def on_backend(kernel: Any, backend: str | None, occupancy: int | None = None) -> Any:
    """``kernel`` itself, or (``backend`` given: "cuda", "tileir", "auto"; or an ``occupancy`` hint, CTAs per SM)
    one copy of it built with that backend and hint."""
    if backend is None and occupancy is None:
        return kernel
    with _COPIES_LOCK:
        key = (id(kernel), backend, occupancy)
        if key not in _COPIES:
            _COPIES[key] = tj.kernel(kernel.func, backend=backend, occupancy=occupancy)
        return _COPIES[key]


def run_plan(plan: tuple[Any, Any, dict[str, int]], backend: str | None, *args: Any) -> None:
    """Launch a row plan ``(kernel, grid, options)`` on ``args``: the options are the kernel's constants and launch
    options, and ``occupancy`` (a Tile IR plan's hint to tileiras, which a kernel takes when it is built)."""
    kernel, grid, options = plan
    options = dict(options)
    occupancy = options.pop("occupancy", None)
    on_backend(kernel, backend, occupancy)[grid](*args, **options)


def should_run(args: argparse.Namespace) -> bool:
    return not args.compile_only and tj.device_count() > 0


def check(name: str, got: np.ndarray, want: np.ndarray, rtol: float) -> None:
    """Relative error in the 2-norm; exits non-zero when over ``rtol``."""
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    err = np.linalg.norm(got64 - want64) / max(np.linalg.norm(want64), 1e-30)
    ok = bool(np.isfinite(err) and err <= rtol)
    print(f"{name}: relative error {err:.2e} ({'ok' if ok else 'FAILED'}, tolerance {rtol:g})")
    if not ok:
        sys.exit(1)
