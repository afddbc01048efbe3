"""From a kernel specialization to a ready launcher, through the disk cache.

A kernel-level cache entry holds the backend's ``KernelImage`` (image, symbol, threads, shared memory,
parameter ABI), keyed by the kernel's source fingerprint, the backend's name and cache identity, tilejit's own
compiler code (:func:`compiler_identity`) and everything else that changes the code, so a warm first call in a new
process skips the front end, the backend and its compiler (NVRTC, tileiras) entirely.

The entry also holds every value the translation read from outside the kernel (globals, closure
variables, attributes and items of them, helpers' names and defaults: ``scope.Reads``), each as the
path that reaches it and the text of the value. A lookup takes those paths again (plain
``getattr``/``getitem``, no front end) and uses the entry only when every text is the same; else it
goes on to the entry keyed by the texts it found, so a few variants (a config value that differs between
runs) each keep an entry. A kernel that read something with no path or no text is not cached.

A kernel the Tile IR backend refuses (``backends.base.FALLBACK_ERRORS``: what Tile IR cannot express, a tileiras
failure) leaves a refusal under its Tile IR key instead: its one-line reason, the error's class and the values
read, never an image. A launch under ``auto`` that meets it raises that error at once (and so goes on with the CUDA
backend, whose image has its own key) instead of running the front end and tileiras again in every process; a
launch that asked for ``tileir`` by name compiles again, to raise the error with its source line.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

from tilejit.api.compile import Artifact
from tilejit.config import CACHE, EMIT_PTX

if TYPE_CHECKING:
    from tilejit.api.kernel import _Compiled
    from tilejit.runtime.launch import Launcher

# 4: user names in their own C++ namespace (entries of 3 may hold captured names); 5: the values read from outside;
# 6: the image's cluster size (``KernelImage.cluster``)
_ENTRY_VERSION = "6"
_FIELDS = frozenset({"image", "kind", "symbol", "num_threads", "shared_bytes", "params", "cluster", "reads"})
_REFUSAL_FIELDS = frozenset({"refused", "error", "reads"})
_CHAIN = 8  # entries a lookup tries for one specialization (variants of the values read from outside)


#: The package folders whose code turns a kernel's source into its image (the front end and IR, the backends, the
#: NVRTC and tileiras drivers): an image made by other code under the same version number (a fix to a lowering, a
#: pass or the front end, in a checkout or a reinstall) is not used.
_COMPILER_FOLDERS = ("language", "backends", "compiler")


def code_identity(root: str, folders: tuple[str, ...]) -> str:
    """A digest of the path (from ``root``), size and modification time of each Python file under ``folders`` of
    ``root``, "" when there is none."""
    from tilejit.compiler.cache import sha256

    h = sha256()
    found = 0
    for folder in folders:
        for here, dirs, files in os.walk(os.path.join(root, folder)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(here, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                h.update(f"{os.path.relpath(path, root)}:{st.st_size}:{st.st_mtime_ns}\0".encode())
                found += 1
    return h.hexdigest()[:16] if found else ""


@functools.cache
def compiler_identity() -> str:
    """Which of tilejit's own code compiles tile kernels (:func:`code_identity` of :data:`_COMPILER_FOLDERS`, as
    the device headers and NVRTC are keyed), once a process (under a millisecond); "" where the package is not
    plain files (its version number alone keys it then)."""
    return code_identity(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), _COMPILER_FOLDERS)


def _specialization_key(artifact: Artifact, fingerprint: str) -> str:
    from tilejit import __version__
    from tilejit.backends.base import get_backend
    from tilejit.compiler.cache import cache_key

    # The backend's name and identity (for CUDA C++: NVRTC's file and the device headers), asked of its light
    # module: a warm launch imports no code generator and no compiler bindings.
    backend = get_backend(artifact.backend)

    # repr of lists of str/int/bool tuples: deterministic, and no json import on a warm launch
    types = [(n, str(t)) for n, t in artifact.arg_types.items()]
    consts = [(n, type(v).__name__, repr(v)) for n, v in sorted(artifact.constants.items())]
    hints = sorted((n, h.unit_stride, h.aligned16, h.index32, h.disjoint, h.extent16)
                   for n, h in artifact.hints.items())
    return cache_key(
        "tile-kernel", _ENTRY_VERSION, __version__, fingerprint, artifact.name, repr(types),
        repr(consts), repr(hints), artifact.target.sm, str(artifact.num_threads),
        f"num_ctas={artifact.num_ctas},occupancy={artifact.occupancy},num_stages={artifact.num_stages}",
        backend.name, backend.cache_identity(), compiler_identity(),
    )


def _compile_entry(artifact: Artifact, ptx: bool) -> dict[str, Any]:
    return artifact.generate("ptx" if ptx else "cubin").entry()


def _compile_recorded(artifact: Artifact, ptx: bool) -> tuple[dict[str, Any], list[tuple[Any, str]] | None]:
    """Compile an entry, recording what the translation read from outside the kernel: (entry, its reads as
    (path, text) pairs), the reads None when the kernel must not be cached (``Reads.opaque``, a value
    without text, or no translation seen). A kernel the backend refuses (``FALLBACK_ERRORS``) gives its refusal
    entry, with the error itself under ``"raise"`` (not stored)."""
    from tilejit.api.kernel import _read_texts
    from tilejit.backends.base import FALLBACK_ERRORS, fallback_reason
    from tilejit.language.frontend.scope import RECORDING, Reads

    reads = Reads()
    token = RECORDING.set(reads)
    try:
        entry = _compile_entry(artifact, ptx)
    except FALLBACK_ERRORS as exc:
        entry = {"refused": fallback_reason(exc), "error": type(exc).__name__, "raise": exc}
    finally:
        RECORDING.reset(token)
    if reads.opaque is not None or not reads.translated:
        return entry, None
    texts = _read_texts(list(reads.values.values()))
    if any(t is None for t in texts):
        return entry, None
    return entry, [(path, text) for path, text in zip(reads.values, texts) if text is not None]


def _refusal(entry: dict[str, Any]) -> Exception | None:
    """The error a stored refusal entry stands for: its class (one of ``FALLBACK_ERRORS``) with its reason; None
    for a class not among them (a malformed entry)."""
    from tilejit.backends.base import FALLBACK_ERRORS

    for cls in FALLBACK_ERRORS:
        if cls.__name__ == entry["error"]:
            return cls(str(entry["refused"]))
    return None


def _entry(artifact: Artifact, fingerprint: str, ptx: bool) -> dict[str, Any]:
    """The compiled entry of one specialization: from the disk cache when one there was compiled with the
    same values read from outside the kernel as this process has, else compiled (and stored if it can be)."""
    if not CACHE.get():
        return _compile_entry(artifact, ptx)
    from tilejit.api.kernel import _texts_now
    from tilejit.compiler.cache import cache_key, default_cache

    cache = default_cache()
    key: str | None = _specialization_key(artifact, fingerprint)
    func = artifact.kernel_func
    if not hasattr(func, "__code__"):
        func = func.func  # a Kernel or @tj.function object: translate() unwraps it the same way
    for _ in range(_CHAIN):
        assert key is not None
        entry = cache.get(key)
        if (entry is None or not (set(entry) >= _FIELDS or set(entry) >= _REFUSAL_FIELDS)
                or not isinstance(entry["reads"], list | tuple)):
            break
        try:
            paths, texts = [p for p, _ in entry["reads"]], [t for _, t in entry["reads"]]
        except (TypeError, ValueError):  # a malformed entry: compiled again and replaced
            break
        now = _texts_now(func, paths)
        if now == texts:
            if "refused" not in entry:
                return entry
            refusal = _refusal(entry)
            if refusal is not None and artifact.auto:
                raise refusal
            break  # asked for by name (or malformed): compiled again, so the error says where
        # the entry of the variant whose compile found these values on this entry's paths, if any
        key = cache_key(key, *("\0" if t is None else t for t in now))
    else:
        key = None  # as many variants as the chain holds: this one is compiled every time
    entry, reads = _compile_recorded(artifact, ptx)
    refused = entry.pop("raise", None)
    if key is not None and reads is not None and getattr(refused, "lasting", True):
        cache.put(key, {**entry, "reads": reads})
    if refused is not None:
        raise refused
    return entry


def load_artifact(artifact: Artifact, fingerprint: str, device: Any = None) -> _Compiled:
    """Compile (or fetch from the disk cache) and load one specialization on ``device`` (default: current)."""
    from tilejit.compiler.cache import cached_compile
    from tilejit.runtime.launch import Launcher, ParamKind
    from tilejit.runtime.module import Module

    if artifact.backend == "tileir":  # tileiras's CUBINs need an r580 driver: checked before compiling one
        from tilejit.compiler.tileiras import check_driver
        from tilejit.runtime.device import initialized_driver

        check_driver(initialized_driver().version)
    entry = _entry(artifact, fingerprint, EMIT_PTX.get() and artifact.backend != "tileir")  # Tile IR: CUBINs only
    module = Module.load(entry["image"], entry["kind"], device=device)
    function = module.get_function(entry["symbol"])
    params = [(p[0], ParamKind.from_spec(p[1:])) for p in entry["params"]]
    launcher = Launcher(function, params, block=(int(entry["num_threads"]), 1, 1),
                        shared_bytes=int(entry["shared_bytes"]), compile_code=cached_compile,
                        cluster=int(entry["cluster"]), kernel_name=artifact.name)
    return loaded(launcher, artifact, module)


def loaded(launcher: Launcher, artifact: Artifact | None, module: Any) -> _Compiled:
    """A specialization launching through ``launcher`` (each thread: checked at first, then generated; the policy of
    ``tilejit.runtime.dispatch``)."""
    from tilejit.api.kernel import _Compiled

    return _Compiled(launcher=launcher.launch_any_thread, artifact=artifact, module=module, base=launcher)
