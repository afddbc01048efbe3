"""What ``TILEJIT_DUMP_DIR`` holds for each kernel compiled: one folder per kernel, specialization, target and
backend, with every stage of its compile.

A kernel is dumped when this process compiles it (Triton's rule): when its image is made by the front end, the
passes and a backend, not when the disk cache serves it (set ``TILEJIT_CACHE=0`` as well to dump every kernel a
process launches). The folder ``<kernel>.<target>.<backend>.<12 hex digits of the specialization>`` holds:

- ``<kernel>.ir``: the optimized tile IR;
- CUDA C++ backend: ``<kernel>.cu`` as NVRTC compiled it, the device headers it includes under ``tilejit/`` (so
  ``nvcc -I<folder>``, or NVRTC with that include path, compiles it as written), ``<kernel>.ptx`` and the CUBIN;
- Tile IR backend: ``<kernel>.tileir`` (text), ``<kernel>.tileirbc`` (the bytecode tileiras read) and the CUBIN;
- ``info.json``: the specialization (parameter types, constants, array facts, hints), the launch facts (symbol,
  threads, shared memory, cluster) and the command that compiles the ``.cu``.

The same specialization compiled again replaces its folder whole (``compiler.dump.write_folder``). A stage that
cannot be produced (an NVRTC that fails on the PTX) is left out with a ``DumpWarning``; the kernel still runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tilejit.api.compile import Artifact
    from tilejit.backends.base import KernelImage


def folder_name(art: Artifact, image: KernelImage) -> str:
    """``<kernel>.<target>.<backend>.<digest>``: the digest tells specializations of one kernel apart."""
    from tilejit.compiler.cache import cache_key

    code = getattr(art.kernel_func, "__code__", None)
    where = f"{getattr(code, 'co_filename', '?')}:{getattr(art.kernel_func, '__qualname__', art.name)}"
    hints = sorted((n, repr(h)) for n, h in art.hints.items())
    digest = cache_key("tilejit-dump", where, art.describe(), repr(hints), repr(art.num_threads),
                       repr(tuple(art.kernel_hints)))
    return f"{art.name}.{art.target.sm}.{image.backend}.{digest[:12]}"


def _stage_makers(art: Artifact, image: KernelImage) -> dict[str, Callable[[], bytes]]:
    """File name -> how to make its contents, for ``image``'s backend."""
    name = art.name
    makers: dict[str, Callable[[], bytes]] = {f"{name}.ir": lambda: art.ir_text().encode()}
    if image.backend == "cuda":
        from tilejit.backends.base import get_backend
        from tilejit.backends.cuda_backend import CudaBackend

        backend = get_backend("cuda")
        assert isinstance(backend, CudaBackend)
        ck = backend.source(art.ir(), art.target, art.hints, num_threads=art.num_threads,
                            kernel_hints=art.kernel_hints, memo=art._stages)
        makers[f"{name}.cu"] = lambda: ck.source.encode()
        for header, text in ck.headers.items():
            makers[header] = lambda text=text: text.encode()  # type: ignore[misc]
        makers[f"{name}.ptx"] = lambda: backend.program(
            art.ir(), art.target, art.hints, name=art.ir().name, num_threads=art.num_threads,
            kernel_hints=art.kernel_hints, kind="ptx", memo=art._stages).code
        cubin = image.image if image.kind == "cubin" else getattr(art._stages.get("cubin"), "code", None)
        if cubin is not None:  # a PTX image (TILEJIT_EMIT_PTX) has a CUBIN only if one was made
            makers[f"{name}.cubin"] = lambda: cubin
    else:
        bytecode = [v for k, v in art._stages.items() if k.startswith("tileirbc-")]
        makers[f"{name}.tileir"] = lambda: art.tileir_text().encode()
        makers[f"{name}.tileirbc"] = lambda: bytecode[-1] if bytecode else art.tileir_bytecode()
        makers[f"{name}.{image.kind}"] = lambda: image.image
    return makers


def _info(art: Artifact, image: KernelImage, files: list[str]) -> bytes:
    """``info.json``: the specialization, the launch facts and how to compile the ``.cu`` again."""
    import json

    from tilejit import __version__

    code = getattr(art.kernel_func, "__code__", None)
    info: dict[str, object] = {
        "kernel": art.name,
        "source": getattr(code, "co_filename", None),
        "specialization": art.describe(),
        "parameters": {n: str(t) for n, t in art.arg_types.items()},
        "constants": {n: repr(v) for n, v in art.constants.items()},
        "array_facts": {n: {f: getattr(h, f) for f in h._fields} for n, h in art.hints.items()},
        "target": art.target.sm,
        "backend": image.backend,
        "hints": {"num_threads": art.num_threads, **art.kernel_hints._asdict()},
        "symbol": image.symbol,
        "num_threads": image.num_threads,
        "shared_bytes": image.shared_bytes,
        "cluster": image.cluster,
        "tilejit": __version__,
        "files": files,
    }
    if f"{art.name}.cu" in files:
        info["compile"] = f"nvcc -std=c++17 -arch={art.target.sm} -cubin -I . {art.name}.cu"
    return (json.dumps(info, indent=2) + "\n").encode()


def dump_artifact(art: Artifact, image: KernelImage) -> str | None:
    """Write the dump of ``art``'s compile into ``TILEJIT_DUMP_DIR``; the folder, or None when it was not written
    (a ``DumpWarning`` says why). A stage that fails is left out, with a warning naming it."""
    from tilejit import config
    from tilejit.compiler.dump import warn, write_folder
    from tilejit.logs import logger_for

    root = config.DUMP_DIR.get()
    if not root:
        return None
    name = folder_name(art, image)
    files: dict[str, bytes] = {}
    missing: list[str] = []
    try:
        makers = _stage_makers(art, image)
    except Exception as exc:  # a debugging aid never stops the kernel it describes
        makers = {}
        missing.append(f"the stages ({type(exc).__name__}: {exc})")
    for rel, make in makers.items():
        try:
            files[rel] = make()
        except Exception as exc:  # as above: the other files are still written
            missing.append(f"{rel} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
    files["info.json"] = _info(art, image, sorted(files))
    if missing:
        warn(f"{name}: left out {', '.join(missing)}")
    folder = write_folder(root, name, files)
    log = logger_for(__name__)
    if folder is not None and log is not None:
        log.debug("kernel %s: dumped %d files to %s", art.name, len(files), folder)
    return folder


__all__ = ["dump_artifact", "folder_name"]
