"""The backend contract: what turns optimized tile IR into a loadable kernel image, and which backend a
compile uses.

A backend (``cuda``: CUDA C++ through NVRTC; ``tileir``: Tile IR bytecode through ``tileiras``) is a
:class:`Backend` registered here by name and module path (the module's ``BACKEND``), imported only when
first asked for; a registered module that is not there is a stand-in that says why it is not available.
Every compile entry point (``@tj.kernel``, ``tj.compile``, ``tilejit compile``) picks one by the one rule
of :func:`choose_backend`, and under ``auto`` falls back to CUDA C++ for a kernel the Tile IR backend refuses
(:data:`FALLBACK_ERRORS`). Light to import, as must be each backend's registered module: a warm launch
chooses its backend (``auto`` asks whether a Tile IR toolchain is found) and names its cache entry through them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from tilejit.config import BACKEND
from tilejit.errors import TileirasError, TileIRUnsupportedError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tilejit.compiler.targets import Target
    from tilejit.language.ir.ops import Function
    from tilejit.language.ir.types import ArrayHint

#: Backend names a compile may ask for, and ``auto`` (see :func:`choose_backend`).
CHOICES: tuple[str, ...] = BACKEND.choices

#: Where each backend lives: its module holds ``BACKEND``, the :class:`Backend` instance.
_MODULES = {"cuda": "tilejit.backends.cuda_backend", "tileir": "tilejit.backends.tileir_backend"}
_TITLES = {"cuda": "CUDA C++ through NVRTC", "tileir": "Tile IR through tileiras"}
_LOADED: dict[str, Backend] = {}
#: What makes a compile that left the backend to ``auto`` go on with CUDA C++ after picking Tile IR: the lowering's
#: located refusal of what Tile IR cannot express, and tileiras failing on the bytecode written. Never an error in
#: the kernel itself (the front end's errors come before any backend), so installing a toolchain turns no kernel
#: that compiles with CUDA C++ into an error.
FALLBACK_ERRORS: tuple[type[Exception], ...] = (TileIRUnsupportedError, TileirasError)

#: A kernel parameter's ABI (``runtime.launch.ParamKind.from_spec``): ("array", dtype, ndim[, "index32"]),
#: ("scalar", dtype), ("pointer", dtype) or ("tensormap", dtype, ndim, array parameter, swizzle, *box).
ParamSpec = tuple[str, str, int, str] | tuple[str, str, int] | tuple[str, str] | tuple[str | int, ...]
#: The parameter ABI of an array-list parameter in both backends: its launch table (``runtime.array_table``) as a
#: rank-2 int64 array, one row of pointer, shape and strides per array.
ARRAY_LIST_SPEC: ParamSpec = ("array", "int64", 2)


class KernelHints(NamedTuple):
    """A kernel's performance hints (``@tj.kernel(num_ctas=..., occupancy=..., num_stages=...)``), None where not
    given: hints only, never a change of what the kernel computes. ``num_ctas``: CTAs per cluster (Tile IR's
    ``num_cta_in_cga``; a power of two 1..16); ``occupancy``: CTAs per SM the compiler should aim for (1..32);
    ``num_stages``: the depth of software pipelines (the CUDA backend's cp.async K loops; 1: none).
    A NamedTuple, not a dataclass: a warm launch builds one."""

    num_ctas: int | None = None
    occupancy: int | None = None
    num_stages: int | None = None


NO_HINTS = KernelHints()


class KernelImage:
    """One compiled kernel as the loader needs it: the image (``kind`` "cubin" or "ptx"), its entry symbol,
    threads per block, dynamic shared memory, parameter ABI, and the backend and identity it was built by.

    A plain class, not a dataclass: a warm launch may meet it, and ``dataclasses`` costs it milliseconds."""

    __slots__ = ("backend", "cache_identity", "cluster", "image", "kind", "num_threads", "params", "shared_bytes",
                 "symbol")

    def __init__(self, *, backend: str, image: bytes, kind: str, symbol: str, num_threads: int, shared_bytes: int,
                 params: tuple[tuple[str, ParamSpec], ...], cache_identity: str, cluster: int = 1) -> None:
        if kind not in ("cubin", "ptx"):
            raise ValueError(f"KernelImage kind must be 'cubin' or 'ptx', got {kind!r}")
        self.backend = backend
        self.image = image
        self.kind = kind
        self.symbol = symbol
        self.num_threads = num_threads
        self.shared_bytes = shared_bytes
        self.params = params
        self.cache_identity = cache_identity
        self.cluster = cluster  # CTAs per cluster along x the image must be launched with (1: no cluster)

    def __repr__(self) -> str:
        return (f"KernelImage(backend={self.backend!r}, kind={self.kind!r}, symbol={self.symbol!r}, "
                f"num_threads={self.num_threads}, shared_bytes={self.shared_bytes}, params={self.params!r}, "
                f"cluster={self.cluster}, {len(self.image)} bytes)")

    def entry(self) -> dict[str, Any]:
        """The kernel-level disk cache entry's launch fields (``tilejit.api.loader``)."""
        return {"image": self.image, "kind": self.kind, "symbol": self.symbol, "num_threads": self.num_threads,
                "shared_bytes": self.shared_bytes, "params": [[name, *spec] for name, spec in self.params],
                "cluster": self.cluster}


class Backend:
    """A way from optimized tile IR to a :class:`KernelImage`. Subclasses set ``name`` and ``title``
    and implement every method; ``available`` and ``cache_identity`` must stay cheap (a warm launch calls them)."""

    name = ""
    title = ""

    def available(self, target: Target) -> str | None:
        """None when this backend can compile for ``target`` here, else why not (one clause)."""
        raise NotImplementedError

    def missing(self) -> str | None:
        """None when this backend's toolchain is found here (whatever the target), else why not; cheap
        (``wants_launch_facts`` asks it). The default looks for nothing: a backend with a toolchain to find says."""
        return None

    def cache_identity(self) -> str:
        """What, besides the kernel and its specialization, decides the image: toolchain file and version,
        shipped headers... Part of the kernel-level cache key; must not import the backend's code generator."""
        raise NotImplementedError

    def launch_targets(self, target: Target) -> tuple[Target, ...]:
        """The targets a launch on a GPU of ``target`` tries, in order: a ``TargetError`` from all but the last
        goes on to the next (the CUDA backend's sm_90a, which an older NVRTC lacks)."""
        return (target,)

    def generate(self, fn: Function, target: Target, hints: Mapping[str, ArrayHint], *, num_threads: int | None = None,
                 kernel_hints: KernelHints = NO_HINTS, kind: str = "cubin",
                 memo: dict[str, Any] | None = None) -> KernelImage:
        """Compile ``fn`` for ``target`` into an image of ``kind``, following the user's ``kernel_hints`` where the
        target can (a hint it cannot use is dropped, logged at debug level); ``memo`` (kept by the caller per
        specialization) holds intermediate stages so each is computed at most once."""
        raise NotImplementedError


class _Missing(Backend):
    """A registered backend whose module cannot be imported: never available, says why."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.title = _TITLES[name]
        self.reason = reason

    def available(self, target: Target) -> str | None:
        return self.reason

    def missing(self) -> str | None:
        return self.reason

    def cache_identity(self) -> str:
        return f"{self.name}:missing"

    def generate(self, fn: Function, target: Target, hints: Mapping[str, ArrayHint], *, num_threads: int | None = None,
                 kernel_hints: KernelHints = NO_HINTS, kind: str = "cubin",
                 memo: dict[str, Any] | None = None) -> KernelImage:
        raise unavailable_error(self.name, self.reason, f"backend={self.name!r}")


def get_backend(name: str) -> Backend:
    """The backend registered as ``name`` ("cuda", "tileir"); one whose module cannot be imported is a stand-in
    that is never available and says why."""
    backend = _LOADED.get(name)
    if backend is not None:
        return backend
    module = _MODULES.get(name)
    if module is None:
        raise ValueError(f"backend must be one of {', '.join(CHOICES)}, got {name!r}")
    try:
        found = __import__(module, fromlist=["BACKEND"]).BACKEND  # no importlib on a warm launch
    except (ImportError, AttributeError) as exc:
        reason = f"its module {module} cannot be imported: {exc}"
        found = _Missing(name, reason)
    _LOADED[name] = found
    return found


def unavailable_error(name: str, reason: str, given: str) -> Exception:
    """The error for asking (``given``: where, e.g. ``backend='tileir'``) for a backend that is not available."""
    from tilejit.errors import TargetError

    return TargetError(f"{given}: {name} backend not available here: {reason}; use backend='cuda' "
                       f"(CUDA C++ through NVRTC), or 'auto' to use the best backend available")


def requested_backend(requested: str | None) -> str:
    """What a compile asks for: ``requested`` ("cuda", "tileir", "auto") when given, else ``TILEJIT_BACKEND``."""
    return BACKEND.get() if requested is None else requested


def choose_backend(requested: str | None, target: Target, *, num_threads: int | None = None) -> tuple[Backend, str]:
    """The backend a compile for ``target`` uses, and why: ``requested`` ("cuda", "tileir", "auto") when given,
    else ``TILEJIT_BACKEND`` (default "auto"). ``auto`` is Tile IR where a consistent Tile IR toolchain is found
    whose tileiras compiles for ``target`` (``Backend.available``), unless the kernel sets ``num_threads`` (tileiras
    chooses a Tile IR kernel's block size itself); else CUDA C++. A compile under ``auto`` then falls back to
    CUDA C++ for a kernel the Tile IR backend refuses (``FALLBACK_ERRORS``). An explicit backend that is not
    available is an error saying why."""
    given = f"backend={requested!r}"
    if requested is None:
        requested = BACKEND.get()
        given = f"{BACKEND.name}={requested}"
    if requested not in CHOICES:
        raise ValueError(f"backend must be one of {', '.join(repr(c) for c in CHOICES)}, got {requested!r}")
    if requested != "auto":
        backend = get_backend(requested)
        reason = backend.available(target)
        if reason is not None:
            raise unavailable_error(backend.name, reason, given)
        return backend, f"asked for by {given}"
    if num_threads is not None:
        return get_backend("cuda"), (f"auto picks it: the kernel sets num_threads={num_threads}, and tileiras "
                                     "chooses a Tile IR kernel's block size itself")
    tileir = get_backend("tileir")
    reason = tileir.available(target)
    if reason is None:
        return tileir, f"auto picks it: a Tile IR toolchain is found and {target.sm} supports it"
    return get_backend("cuda"), f"auto picks it since Tile IR cannot be used: {reason}"


def log_fallback(kernel: str, error: Exception) -> None:
    """Say, in one INFO line on the ``tilejit`` logger, that ``auto`` compiles ``kernel`` with CUDA C++ because of
    the Tile IR backend's ``error`` (one of ``FALLBACK_ERRORS``, or a launch's ``DriverVersionError``)."""
    import logging

    logging.getLogger("tilejit").info("kernel %s: backend auto compiles it with CUDA C++, since the Tile IR "
                                      "backend cannot: %s", kernel, fallback_reason(error))


def fallback_reason(error: Exception) -> str:
    """``error``'s message in one line: its first line, with the next when the first ends in a colon (tileiras's
    exit code, then the first line it printed)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
    return " ".join(lines[:2]) if lines[0].endswith(":") and len(lines) > 1 else lines[0]


def wants_launch_facts(requested: str | None, *, num_threads: int | None = None) -> bool:
    """Whether kernels compiled for ``requested`` (as ``choose_backend`` reads it) may use the launch facts
    ``ArrayHint.disjoint`` and ``extent16``, which cost a look at every launch's array spans and extents: only
    the Tile IR backend does (token-free read-only loops, TMA stores), so ``tileir``, and ``auto`` where a Tile IR
    toolchain is found (for a kernel that sets no ``num_threads``). Cheap: the toolchain found is memoized."""
    requested = requested_backend(requested)
    if requested != "auto":
        return requested == "tileir"
    return num_threads is None and get_backend("tileir").missing() is None


__all__ = ["ARRAY_LIST_SPEC", "CHOICES", "FALLBACK_ERRORS", "NO_HINTS", "Backend", "KernelHints", "KernelImage",
           "choose_backend",
           "fallback_reason", "get_backend", "log_fallback", "requested_backend", "unavailable_error",
           "wants_launch_facts"]
