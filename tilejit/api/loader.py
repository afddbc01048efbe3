"""From a kernel specialization to a ready launcher, through the disk cache.

A kernel-level cache entry holds the CUBIN and the launch facts (symbol, threads, shared memory,
parameter ABI), keyed by the kernel's source fingerprint and everything else that changes the
code, so a warm first call in a new process skips the front end, the backend and NVRTC entirely.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from tilejit.api.compile import Artifact
from tilejit.config import CACHE, EMIT_PTX
from tilejit.runtime.launch import CHECKED_LAUNCHES

if TYPE_CHECKING:
    from collections.abc import Callable

    from tilejit.api.kernel import _Compiled
    from tilejit.runtime.launch import Launcher

_ENTRY_VERSION = "4"  # 4: user names in their own C++ namespace (entries of 3 may hold captured names)


@functools.cache
def _headers_identity() -> str:
    from tilejit.backends import headers_identity

    return headers_identity()


def _specialization_key(artifact: Artifact, fingerprint: str) -> str:
    from tilejit import __version__
    from tilejit.bindings.loader import NVRTC_LIBRARY, toolkit_identity
    from tilejit.compiler.cache import cache_key

    # The loader names NVRTC's file (the one loaded, else the one discovery finds) without this launch
    # importing the NVRTC driver module.
    nvrtc_id = toolkit_identity(NVRTC_LIBRARY)

    # repr of lists of str/int/bool tuples: deterministic, and no json import on a warm launch
    types = [(n, str(t)) for n, t in artifact.arg_types.items()]
    consts = [(n, type(v).__name__, repr(v)) for n, v in sorted(artifact.constants.items())]
    hints = sorted((n, h.unit_stride, h.aligned16) for n, h in artifact.hints.items())
    return cache_key(
        "tile-kernel", _ENTRY_VERSION, __version__, fingerprint, artifact.name, repr(types),
        repr(consts), repr(hints), artifact.target.sm, str(artifact.num_threads),
        nvrtc_id, _headers_identity(),
    )


def _compile_entry(artifact: Artifact, ptx: bool) -> dict[str, Any]:
    ck = artifact.cuda_kernel()
    return {
        "image": artifact.ptx().encode() if ptx else artifact.cubin(),
        "kind": "ptx" if ptx else "cubin",
        "symbol": ck.name,
        "num_threads": ck.num_threads,
        "shared_bytes": ck.shared_bytes,
        "params": [[name, *spec] for name, spec in ck.params],
    }


def load_artifact(artifact: Artifact, fingerprint: str, device: Any = None) -> _Compiled:
    """Compile (or fetch from the disk cache) and load one specialization on ``device`` (default: current)."""
    from tilejit.compiler.cache import cached_compile, default_cache
    from tilejit.runtime.launch import Launcher, ParamKind
    from tilejit.runtime.module import Module

    ptx = EMIT_PTX.get()
    entry: dict[str, Any] | None = None
    key = ""
    if CACHE.get():
        key = _specialization_key(artifact, fingerprint)
        entry = default_cache().get(key)
        if entry is not None and not {"image", "kind", "symbol", "num_threads", "shared_bytes", "params"} <= set(entry):
            entry = None
    if entry is None:
        entry = _compile_entry(artifact, ptx)
        if key:
            default_cache().put(key, entry)
    module = Module.load(entry["image"], entry["kind"], device=device)
    function = module.get_function(entry["symbol"])
    params = [(p[0], ParamKind.from_spec(p[1:])) for p in entry["params"]]
    launcher = Launcher(function, params, block=(int(entry["num_threads"]), 1, 1),
                        shared_bytes=int(entry["shared_bytes"]), compile_code=cached_compile)
    return loaded(launcher, artifact, module)


def loaded(launcher: Launcher, artifact: Artifact | None, module: Any) -> _Compiled:
    """A specialization launching through ``launcher``: checked at first, then generated."""
    from tilejit.api.kernel import _Compiled

    compiled = _Compiled(launcher=None, artifact=artifact, module=module, base=launcher)
    compiled.launcher = _checked_then_generated(compiled, launcher)
    return compiled


def _checked_then_generated(compiled: _Compiled, launcher: Launcher) -> Callable[..., None]:
    """The first launches of a specialization take the checked path; after ``CHECKED_LAUNCHES`` of them
    ``compiled.launcher`` (read on every launch) becomes the generated fast function, so a kernel
    launched only a few times never pays for compiling one."""
    remaining = CHECKED_LAUNCHES

    def launch(grid: Any, args: Any, stream: Any = None) -> None:
        nonlocal remaining
        remaining -= 1
        if remaining <= 0:
            compiled.launcher = launcher.launch
        launcher.launch_checked(grid, args, stream)

    return launch
