"""The CUDA C++ backend behind the backend contract: tile IR → CUDA C++ (``cuda.codegen``) → NVRTC → CUBIN or PTX.

Outside the ``cuda`` package on purpose, and light to import: a launch that hits the disk cache asks it
for its cache identity (NVRTC's file and the shipped device headers) and which targets to try, and must
not import the backend's package (code generator, device headers) to learn them.
"""

from __future__ import annotations

import functools
import os
import time
from typing import TYPE_CHECKING, Any

from tilejit.backends.base import NO_HINTS, Backend, KernelHints, KernelImage
from tilejit.logs import logger_for, ms_since

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tilejit.backends.cuda.codegen import CudaKernel
    from tilejit.compiler.nvrtc import CompiledProgram
    from tilejit.compiler.targets import Target
    from tilejit.language.ir.ops import Function
    from tilejit.language.ir.types import ArrayHint

#: The device headers of the CUDA backend (``cuda/include/tilejit/<name>.cuh``), in include order.
HEADER_NAMES = ("types", "tile", "math", "memory", "layout", "reduce", "mma", "tilejit")


def include_folder() -> str:
    """The include path of the CUDA backend's device headers (generated CUDA C++ includes
    ``<tilejit/tilejit.cuh>``): what ``tilejit include-dir`` prints, for ``nvcc -I``."""
    return os.path.join(os.path.dirname(__file__), "cuda", "include")


def header_folder() -> str:
    """Where the CUDA backend's device headers are, as plain files in a usual install."""
    return os.path.join(include_folder(), "tilejit")


def headers_identity() -> str:
    """Which device headers a build uses, cheaply: each shipped header's name, size and modification
    time (as NVRTC is keyed by its file), or a hash of their text where they are not plain files."""
    parts = []
    try:
        for n in HEADER_NAMES:
            st = os.stat(os.path.join(header_folder(), f"{n}.cuh"))
            parts.append(f"{n}:{st.st_size}:{st.st_mtime_ns}")
    except OSError:
        from tilejit.backends.cuda.abi import read_headers
        from tilejit.compiler.cache import sha256

        h = sha256()
        for name, text in read_headers():
            h.update(name.encode() + b"\0" + text.encode() + b"\0")
        return h.hexdigest()
    return "|".join(parts)


@functools.cache
def _headers_identity() -> str:
    """``headers_identity`` once per process (the headers of an installed package do not change under it)."""
    return headers_identity()


class CudaBackend(Backend):
    """CUDA C++ generated from tile IR, compiled by NVRTC; available wherever NVRTC is (it says so itself)."""

    name = "cuda"
    title = "CUDA C++ through NVRTC"

    def available(self, target: Target) -> str | None:
        return None  # NVRTC's own errors say what is missing, when it compiles

    def cache_identity(self) -> str:
        from tilejit.bindings.loader import NVRTC_LIBRARY, toolkit_identity
        from tilejit.config import CUDA_TMA, CUDA_WARP_SPECIALIZE

        # The loader names NVRTC's file (the one loaded, else the one discovery finds) without importing
        # NVRTC's bindings module. TILEJIT_CUDA_WARP_SPECIALIZE and TILEJIT_CUDA_TMA change the code generated, not
        # its inputs.
        ws = ("|warp-specialized" + ("|tma" if CUDA_TMA.get() else "")) if CUDA_WARP_SPECIALIZE.get() else ""
        return f"{toolkit_identity(NVRTC_LIBRARY)}|{_headers_identity()}{ws}"

    def launch_targets(self, target: Target) -> tuple[Target, ...]:
        """On Hopper the arch-specific sm_90a first (it unlocks wgmma; an NVRTC older than 12.0 lacks it),
        unless ``TILEJIT_ARCH_SPECIFIC=0``."""
        from tilejit.config import ARCH_SPECIFIC

        if target.number == 90 and target.suffix == "" and ARCH_SPECIFIC.get():
            from tilejit.compiler.targets import Target

            return Target(9, 0, "a"), target
        return (target,)

    def source(self, fn: Function, target: Target, hints: Mapping[str, ArrayHint], *,
               num_threads: int | None = None, kernel_hints: KernelHints = NO_HINTS,
               memo: dict[str, Any] | None = None) -> CudaKernel:
        """The generated CUDA C++ with its launch facts, kept in ``memo``. Of ``kernel_hints`` it follows
        ``occupancy`` (``__launch_bounds__(threads, occupancy)``) and ``num_stages`` (the cp.async pipelines'
        depth); ``num_ctas`` is ignored: these kernels use no cluster features, so a cluster would only constrain
        the grid (logged at debug level)."""
        memo = {} if memo is None else memo
        ck: CudaKernel | None = memo.get("cuda")
        if ck is None:
            from tilejit.backends.cuda.codegen import generate

            if kernel_hints.num_ctas is not None and kernel_hints.num_ctas > 1:
                import logging

                logging.getLogger(__name__).debug(
                    "kernel %s: num_ctas=%d ignored: the CUDA C++ backend's kernels use no clusters",
                    fn.name, kernel_hints.num_ctas)
            log = logger_for(__name__)
            start = time.perf_counter() if log is not None else 0.0
            ck = memo["cuda"] = generate(fn, target=target, num_threads=num_threads, hints=hints,
                                         occupancy=kernel_hints.occupancy, num_stages=kernel_hints.num_stages)
            if log is not None:
                log.debug("kernel %s: CUDA C++ for %s generated in %.1f ms (%d threads, %d bytes of shared memory)",
                          fn.name, target.sm, ms_since(start), ck.num_threads, ck.shared_bytes)
        return ck

    def program(self, fn: Function, target: Target, hints: Mapping[str, ArrayHint], *, name: str,
                num_threads: int | None = None, kernel_hints: KernelHints = NO_HINTS, kind: str = "cubin",
                memo: dict[str, Any] | None = None) -> CompiledProgram:
        """NVRTC's output of ``kind`` ("cubin" or "ptx") for the generated source, kept in ``memo``; compiled with
        ``-minimal`` (the same code, parsed faster: the generated kernels use nothing it leaves out)."""
        memo = {} if memo is None else memo
        prog: CompiledProgram | None = memo.get(kind)
        if prog is None:
            from tilejit.compiler.nvrtc import MINIMAL, compile_cuda

            ck = self.source(fn, target, hints, num_threads=num_threads, kernel_hints=kernel_hints, memo=memo)
            prog = memo[kind] = compile_cuda(ck.source, name=f"{name}.cu", headers=ck.headers, target=target,
                                             output=kind, options=(MINIMAL,))  # type: ignore[arg-type]
        return prog

    def generate(self, fn: Function, target: Target, hints: Mapping[str, ArrayHint], *, num_threads: int | None = None,
                 kernel_hints: KernelHints = NO_HINTS, kind: str = "cubin",
                 memo: dict[str, Any] | None = None) -> KernelImage:
        memo = {} if memo is None else memo
        ck = self.source(fn, target, hints, num_threads=num_threads, kernel_hints=kernel_hints, memo=memo)
        prog = self.program(fn, target, hints, name=fn.name, num_threads=num_threads, kernel_hints=kernel_hints,
                            kind=kind, memo=memo)
        return KernelImage(backend=self.name, image=prog.code, kind=kind, symbol=ck.name, num_threads=ck.num_threads,
                           shared_bytes=ck.shared_bytes, params=ck.params, cache_identity=self.cache_identity())


BACKEND = CudaBackend()

__all__ = ["BACKEND", "HEADER_NAMES", "CudaBackend", "header_folder", "headers_identity", "include_folder"]
