"""The Tile IR backend behind the backend contract: tile IR → Tile IR bytecode (``backends.tileir``) →
``tileiras`` → CUBIN.

Outside the ``tileir`` package on purpose, and light to import: a launch asks the registered backend's
module for its cache identity and whether ``auto`` picks it (where a toolchain is found), and must not import
the bytecode writer for that, nor run the toolchain's programs: what they reported is kept in the disk cache
(:func:`find_toolchain`), so a warm process finds the toolchain in file lookups alone.

The launch ABI: the Tile IR entry's parameters (per array: base pointer, then each shape, then each
stride, all 8 bytes; scalars as themselves) are laid out as tilejit's array struct (``ParamKind.array``),
so the image's ``params`` are the CUDA backend's; :func:`check_param_offsets` checks that on each CUBIN.
The block size is not ours to choose: tileiras fixes it (the CUBIN's ``REQNTID``), and it is the image's.
"""

from __future__ import annotations

import struct
import time
from typing import TYPE_CHECKING, Any

from tilejit.backends.base import ARRAY_LIST_SPEC, NO_HINTS, Backend, KernelHints, KernelImage, ParamSpec
from tilejit.logs import logger_for, ms_since

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tilejit.bindings.tileiras import Pieces, Toolchain
    from tilejit.compiler.targets import Target
    from tilejit.language.ir.ops import Function
    from tilejit.language.ir.types import ArrayHint

#: The writer's output format: part of the cache identity; raise it when the writer's bytecode for the same
#: kernel changes (importing the writer to ask it would cost a warm launch its ``dataclasses``).
WRITER_FORMAT = "6"  # 2: the launch facts of the hints as assume ops (TMA); 3: the occupancy entry hint;
#                      4: int32 unit-step loop counters, 8 worker warps for wide matmul accumulators;
#                      5: 8 worker warps for long rows, view accesses without TMA for float32 rows of 4K-8K;
#                      6: atomics' memory order (acq_rel by default, was relaxed), device print
#: The format of the toolchain probe's memo in the disk cache (``find_toolchain``); raise it when what an entry
#: holds, or how the probe reads the programs' answers, changes.
PROBE_MEMO = "tilejit.tileiras-probe.1"

EIATTR_KPARAM_INFO = 0x17
EIATTR_KPARAM_INFO_V2 = 0x45  # u32 index, u16 ordinal, u16 offset, u16 size, u16 attributes (TMA kernels have it)
EIATTR_REQNTID = 0x10
#: The cluster a kernel must be launched with, 3 x u32 (tileiras writes (N, 1, 1) for ``num_cta_in_cga = N``, with
#: an attribute 0x5b of no payload beside it; no EIATTR_EXPLICIT_CLUSTER 0x3e, no EIATTR_MAX_CLUSTER_RANK 0x3f).
EIATTR_CTA_PER_CLUSTER = 0x3D
_EIFMT_SVAL = 4  # an attribute with a payload of its stated size; the other formats have none


def tileiras_target(target: Target) -> str:
    """The ``--gpu-name`` of ``target``: tileiras takes no a/f suffix (it compiles sm_90 as sm_90a itself)."""
    return f"sm_{target.number}"


def elf_sections(image: bytes) -> dict[str, bytes]:
    """The sections of a 64-bit little-endian ELF file (a CUBIN) by name; ``ValueError`` if it is not one."""
    if image[:4] != b"\x7fELF" or len(image) < 64 or image[4] != 2 or image[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    try:
        (shoff,) = struct.unpack_from("<Q", image, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 0x3A)
        headers = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * shentsize) for i in range(shnum)]
        names_at = headers[shstrndx][4]
        out: dict[str, bytes] = {}
        for h in headers:
            start = names_at + h[0]
            name = image[start:image.index(b"\0", start)].decode("utf-8", "replace")
            out[name] = image[h[4]:h[4] + h[5]] if h[1] != 8 else b""  # SHT_NOBITS holds no bytes in the file
    except (struct.error, IndexError, ValueError, OverflowError) as exc:
        raise ValueError(f"a damaged ELF file: {exc}") from None
    return out


def nv_info(image: bytes, symbol: str) -> list[tuple[int, bytes]]:
    """The EIATTR attributes of kernel ``symbol`` (its ``.nv.info.<symbol>`` section) as (attribute, payload).

    Each entry: format (1 byte), attribute (1 byte), then a 2-byte value, which for the format with a
    payload (``EIFMT_SVAL``) is the payload's size."""
    section = elf_sections(image).get(f".nv.info.{symbol}")
    if section is None:
        raise ValueError(f"no .nv.info.{symbol} section")
    out = []
    i = 0
    while i + 4 <= len(section):
        fmt, attr, size = struct.unpack_from("<BBH", section, i)
        i += 4
        payload = b""
        if fmt == _EIFMT_SVAL:
            payload = section[i:i + size]
            i += size
        out.append((attr, payload))
    return out


def required_threads(image: bytes, symbol: str) -> tuple[int, int, int]:
    """The block size the CUBIN's kernel ``symbol`` must be launched with (EIATTR_REQNTID)."""
    for attr, payload in nv_info(image, symbol):
        if attr == EIATTR_REQNTID and len(payload) == 12:
            x, y, z = struct.unpack("<3I", payload)
            return x, y, z
    raise ValueError(f"kernel {symbol} states no required block size (EIATTR_REQNTID)")


def cluster_shape(image: bytes, symbol: str) -> tuple[int, int, int]:
    """The cluster of CTAs the CUBIN's kernel ``symbol`` must be launched with (EIATTR_CTA_PER_CLUSTER); (1, 1, 1)
    when it states none."""
    for attr, payload in nv_info(image, symbol):
        if attr == EIATTR_CTA_PER_CLUSTER and len(payload) == 12:
            x, y, z = struct.unpack("<3I", payload)
            return x, y, z
    return 1, 1, 1


def param_offsets(image: bytes, symbol: str) -> list[tuple[int, int]]:
    """(byte offset, size) of each parameter of kernel ``symbol``, in parameter order (EIATTR_KPARAM_INFO)."""
    found = []
    for attr, payload in nv_info(image, symbol):
        if attr == EIATTR_KPARAM_INFO and len(payload) >= 12:
            _, ordinal, offset, flags = struct.unpack_from("<IHHI", payload)
            found.append((ordinal, offset, (flags >> 18) & 0x3FFF))
        elif attr == EIATTR_KPARAM_INFO_V2 and len(payload) >= 12:
            _, ordinal, offset, size, _ = struct.unpack_from("<IHHHH", payload)
            found.append((ordinal, offset, size))
    return [(offset, size) for _, offset, size in sorted(found)]


def flat_params(params: tuple[tuple[str, ParamSpec], ...]) -> list[tuple[int, int]]:
    """(byte offset, size) of each Tile IR entry parameter for tilejit's launch ABI ``params``: an array's base
    pointer, shapes and strides are one struct of 8-byte fields."""
    from tilejit.runtime.launch import ParamKind, param_layout

    kinds = [ParamKind.from_spec(spec) for _, spec in params]
    _, offsets, _ = param_layout(kinds)
    out: list[tuple[int, int]] = []
    for kind, offset in zip(kinds, offsets):
        if kind.kind == "array":
            out += [(offset + 8 * i, 8) for i in range(1 + 2 * int(kind.ndim or 0))]
        else:
            out.append((offset, kind.size))
    return out


def launch_params(fn: Function, hints: Mapping[str, ArrayHint] | None = None) -> tuple[tuple[str, ParamSpec], ...]:
    """The launch ABI of ``fn``'s parameters, as the CUDA backend states it: arrays, array lists' tables
    (``ARRAY_LIST_SPEC``), scalars as themselves.
    An array whose ``hints`` entry has ``index32`` is marked ``index32``: the kernel assumes its shapes and strides
    are in [0, 2**31), and the launcher refuses a launch where they are not."""
    from tilejit.errors import CompileError
    from tilejit.language.ir.types import ArrayListType, ArrayType, TileType

    params: list[tuple[str, ParamSpec]] = []
    for name, v in zip(fn.param_names, fn.params):
        t = v.type
        hint = None if hints is None else hints.get(name)
        if isinstance(t, ArrayType) and hint is not None and hint.index32:
            params.append((name, ("array", t.dtype.name, t.ndim, "index32")))
        elif isinstance(t, ArrayType):
            params.append((name, ("array", t.dtype.name, t.ndim)))
        elif isinstance(t, ArrayListType):
            params.append((name, ARRAY_LIST_SPEC))
        elif isinstance(t, TileType) and t.is_scalar:
            params.append((name, ("scalar", t.dtype.name)))
        else:
            raise CompileError(f"kernel {fn.name}: parameter '{name}' has type {t}; only arrays, array lists and "
                               "scalars")
    return tuple(params)


class TileIRBackend(Backend):
    """Tile IR bytecode from tile IR, compiled to a CUBIN by tileiras; available where a consistent CUDA Tile
    IR toolchain is found that compiles for the target."""

    name = "tileir"
    title = "Tile IR through tileiras"

    def __init__(self) -> None:
        self._found: dict[tuple[str | None, ...], Toolchain | str] = {}

    def toolchain(self) -> Toolchain | str:
        """The toolchain found (once per process for the settings discovery reads; :func:`find_toolchain`), or
        why there is none."""
        import os

        from tilejit import config

        key = tuple(os.environ.get(v) for v in (config.TILEIRAS.name, "CUDA_HOME", "CUDA_PATH", "PATH"))
        found = self._found.get(key)
        if found is None:
            found = self._found[key] = find_toolchain()
        return found

    def missing(self) -> str | None:
        tc = self.toolchain()
        return tc if isinstance(tc, str) else None

    def available(self, target: Target) -> str | None:
        tc = self.toolchain()
        if isinstance(tc, str):
            return tc
        from tilejit.errors import TargetError

        try:
            tc.check_target(tileiras_target(target))
        except TargetError as exc:
            return str(exc)
        return None

    @staticmethod
    def bytecode_version(tc: Toolchain) -> tuple[int, int]:
        """The newest bytecode version both the writer emits and ``tc``'s tileiras reads."""
        from tilejit.backends.tileir import newest_accepted

        return newest_accepted("\n".join(f"{a}.{b}" for a, b in tc.bytecode_versions))

    def cache_identity(self) -> str:
        tc = self.toolchain()
        if isinstance(tc, str):
            return f"tileir:{WRITER_FORMAT}:no toolchain"
        # The bytecode version chosen is the newest of these that the writer emits: these name it without
        # importing the writer.
        reads = ",".join(f"{a}.{b}" for a, b in tc.bytecode_versions)
        return f"tileir:{WRITER_FORMAT}|tileiras {tc.tileiras_version} at {tc.tileiras}|reads bytecode {reads}"

    def launch_targets(self, target: Target) -> tuple[Target, ...]:
        """The plain target of the GPU (sm_90 for sm_90a): tileiras takes no a/f suffix."""
        if target.suffix:
            from tilejit.compiler.targets import Target

            return (Target(target.major, target.minor),)
        return (target,)

    def generate(self, fn: Function, target: Target, hints: Mapping[str, ArrayHint], *, num_threads: int | None = None,
                 kernel_hints: KernelHints = NO_HINTS, kind: str = "cubin",
                 memo: dict[str, Any] | None = None) -> KernelImage:
        from tilejit.errors import TargetError, TileirasError

        if kind != "cubin":
            raise ValueError(f"kind={kind!r}: the Tile IR backend makes CUBINs only (tileiras writes no PTX); "
                             "use kind='cubin', or backend='cuda' for PTX")
        if num_threads is not None:
            raise ValueError(f"kernel {fn.name}: num_threads={num_threads}: the Tile IR backend cannot choose the "
                             "block size (tileiras fixes it); leave num_threads unset, or use backend='cuda'")
        memo = {} if memo is None else memo
        tc = self.toolchain()
        if isinstance(tc, str):
            from tilejit.backends.base import unavailable_error

            raise unavailable_error(self.name, tc, "backend='tileir'")
        gpu = tileiras_target(target)
        tc.check_target(gpu)
        params = launch_params(fn, hints)
        log = logger_for(__name__)
        if log is not None and kernel_hints.num_stages is not None:
            log.debug("kernel %s: num_stages=%d ignored: tileiras chooses the Tile IR backend's pipelines", fn.name,
                      kernel_hints.num_stages)
        cubin: bytes | None = memo.get("tileir_cubin")
        if cubin is None:
            from tilejit.compiler.tileiras import run_tileiras

            try:
                version = self.bytecode_version(tc)
            except ValueError as exc:
                raise TargetError(f"backend='tileir': {exc}") from None
            bytecode = self.bytecode(fn, target, version, memo, hints, kernel_hints)
            cubin = memo["tileir_cubin"] = run_tileiras(bytecode, gpu, toolchain=tc)
        symbol = fn.name
        try:
            threads = required_threads(cubin, symbol)
            offsets = param_offsets(cubin, symbol)
            cluster = cluster_shape(cubin, symbol)
        except ValueError as exc:
            raise TileirasError(f"kernel {fn.name}: the CUBIN tileiras {tc.tileiras_version} made for {gpu} cannot "
                                f"be launched: {exc}") from None
        if threads[1:] != (1, 1) or not 1 <= threads[0] <= 1024:
            raise TileirasError(f"kernel {fn.name}: tileiras {tc.tileiras_version} asks for a block of {threads} "
                                "threads; tilejit launches blocks of (n, 1, 1) threads only")
        if offsets != flat_params(params):
            raise TileirasError(f"kernel {fn.name}: the CUBIN tileiras {tc.tileiras_version} made for {gpu} lays out "
                                f"its parameters as {offsets} (offset, size), not as tilejit passes them "
                                f"({flat_params(params)}); use backend='cuda'")
        if cluster[1:] != (1, 1):
            raise TileirasError(f"kernel {fn.name}: tileiras {tc.tileiras_version} asks for clusters of {cluster} "
                                "CTAs; tilejit launches clusters of (n, 1, 1) CTAs only")
        return KernelImage(backend=self.name, image=cubin, kind="cubin", symbol=symbol, num_threads=threads[0],
                           shared_bytes=0, params=params, cache_identity=self.cache_identity(), cluster=cluster[0])

    @staticmethod
    def bytecode(fn: Function, target: Target, version: str | tuple[int, int] | None = None,
                 memo: dict[str, Any] | None = None, hints: Mapping[str, ArrayHint] | None = None,
                 kernel_hints: KernelHints = NO_HINTS) -> bytes:
        """The Tile IR bytecode of ``fn`` at ``version`` (default: the newest the writer emits), assuming the
        launch-checked facts of ``hints``, with the user's ``kernel_hints``, kept in ``memo`` (one
        specialization's: its hints are fixed)."""
        from tilejit.backends.tileir import generate_bytecode, parse_version

        v = parse_version(version)
        memo = {} if memo is None else memo
        key = f"tileirbc-{v[0]}.{v[1]}"
        data: bytes | None = memo.get(key)
        if data is None:
            log = logger_for(__name__)
            start = time.perf_counter() if log is not None else 0.0
            data = memo[key] = generate_bytecode(fn, tileiras_target(target), v, hints, kernel_hints)
            if log is not None:
                log.debug("kernel %s: Tile IR bytecode %d.%d for %s written in %.1f ms (%d bytes)", fn.name, v[0], v[1],
                          tileiras_target(target), ms_since(start), len(data))
        return data


def find_toolchain() -> Toolchain | str:
    """The toolchain ``bindings.tileiras.find_toolchain`` finds, checked the same way, or why there is none; what
    its programs report (versions, bytecode versions, targets) is kept in the disk cache under each piece's real
    path, size and mtime (:func:`probe_memo_key`), so a new process runs none of them, while a changed or replaced
    piece is asked again. With caching off (``TILEJIT_CACHE=0``) the programs run in every process."""
    from tilejit.bindings import tileiras
    from tilejit.errors import LibraryNotFoundError

    try:
        path, origin = tileiras.find_tileiras()
        found = _reported(tileiras.locate(path), origin)
        tileiras.check_consistent(found)
    except LibraryNotFoundError as exc:
        return str(exc)
    return found


def _reported(pieces: Pieces, origin: str) -> Toolchain:
    """``bindings.tileiras.ask(pieces, origin)``, from the disk cache when asked before of the same files; a memo
    entry that is damaged or of another form is asked again and replaced."""
    from tilejit import config
    from tilejit.bindings import tileiras

    key = probe_memo_key(pieces) if config.CACHE.get() else None
    if key is None:
        return tileiras.ask(pieces, origin)
    from tilejit.compiler.cache import default_cache

    cache = default_cache()
    entry = cache.get(key)
    if entry is not None:
        try:
            return tileiras.Toolchain.from_fields({**{n: entry.get(n) for n in tileiras.REPORTED},
                                                   **pieces.as_fields(), "origin": origin})
        except ValueError:
            pass
    found = tileiras.ask(pieces, origin)
    cache.put(key, {name: getattr(found, name) for name in tileiras.REPORTED})
    return found


def probe_memo_key(pieces: Pieces) -> str | None:
    """The disk cache key of what ``pieces`` report: tilejit's version and each piece's real path, size and
    mtime (ns); None when one cannot be looked at (then it is asked, not memoized)."""
    import os

    from tilejit import __version__
    from tilejit.compiler.cache import cache_key

    parts = [PROBE_MEMO, __version__]
    for path in (pieces.tileiras, pieces.ptxas, pieces.libnvvm, pieces.tileirdisasm):
        if path is None:
            parts.append("none")
            continue
        real = os.path.realpath(path)
        try:
            st = os.stat(real)
        except OSError:
            return None
        parts += [real, str(st.st_size), str(st.st_mtime_ns)]
    return cache_key(*parts)


BACKEND = TileIRBackend()

__all__ = ["BACKEND", "PROBE_MEMO", "WRITER_FORMAT", "TileIRBackend", "cluster_shape", "elf_sections",
           "find_toolchain", "nv_info", "param_offsets", "probe_memo_key", "required_threads", "tileiras_target"]
