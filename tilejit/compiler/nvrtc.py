"""Compile CUDA C++ with NVRTC to PTX, CUBIN or LTO-IR for a named target, with no GPU needed.

Headers are handed to NVRTC in memory (name → text), so device headers ship inside the package.
Results go through the disk cache; a cache hit does not load NVRTC: the key names the NVRTC file
by path, size and mtime, which the loader finds without a dlopen or importing the NVRTC bindings.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from tilejit import config
from tilejit.compiler.targets import Target, check_supported, default_target, resolve_target
from tilejit.errors import CompileError, refuse_lone_surrogates
from tilejit.records import Record

if TYPE_CHECKING:
    from typing import TypeAlias

    from tilejit.bindings.nvrtc import NVRTC

    # Type-checking only, as are the other Literal aliases on the way to a first launch: creating one
    # costs about 70 us at import.
    Output: TypeAlias = Literal["ptx", "cubin", "ltoir"]
OUTPUTS: tuple[str, ...] = ("ptx", "cubin", "ltoir")
DEFAULT_OPTIONS: tuple[str, ...] = ("-std=c++17", "-default-device")
_CACHE_TAG = "tilejit.compile_cuda.v1"


class CompiledProgram(Record):
    """NVRTC's output for one program: the code (PTX as utf-8 bytes, CUBIN or LTO-IR), lowered names and log."""

    _fields = ("code", "kind", "target", "lowered_names", "log", "nvrtc_version", "from_cache")
    __slots__ = _fields
    code: bytes
    kind: Output
    target: Target
    lowered_names: dict[str, str]
    log: str
    nvrtc_version: tuple[int, int]
    from_cache: bool

    def __init__(
        self,
        code: bytes,
        kind: Output,
        target: Target,
        lowered_names: dict[str, str] | None = None,
        log: str = "",
        nvrtc_version: tuple[int, int] = (0, 0),
        from_cache: bool = False,
    ) -> None:
        self._init(code, kind, target, {} if lowered_names is None else lowered_names, log, nvrtc_version, from_cache)

    __hash__ = None  # type: ignore[assignment]  # lowered_names is a dict

    @property
    def ptx(self) -> str:
        """The PTX text; only for ``kind == "ptx"``."""
        if self.kind != "ptx":
            raise ValueError(f"this program holds {self.kind}, not PTX; compile with output='ptx'")
        return self.code.decode("utf-8")


def compile_cuda(
    source: str,
    *,
    name: str = "kernel.cu",
    headers: Mapping[str, str] | None = None,
    options: Sequence[str] = (),
    target: str | int | Target | None = None,
    output: Output = "cubin",
    name_expressions: Sequence[str] = (),
    cache: bool | None = None,
    nvrtc: NVRTC | None = None,
) -> CompiledProgram:
    """Compile CUDA C++ ``source`` for ``target`` into ``output``.

    ``target`` None means the current GPU's architecture, else ``TILEJIT_ARCH``. ``headers`` maps
    include names to their text. ``name_expressions`` (e.g. ``"add<float>"``) come back mangled in
    ``lowered_names``. ``cache`` None follows ``TILEJIT_CACHE``, except that headers NVRTC would read from
    disk (``-I`` options, a quoted ``#include`` that ``headers`` does not provide), which the cache key
    cannot see, turn it off. A compile error raises ``CompileError`` with
    NVRTC's log and the offending source lines.
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be str (CUDA C++ text), got {type(source).__name__}")
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    if output not in OUTPUTS:
        raise ValueError(f"output must be one of {', '.join(OUTPUTS)}; got {output!r}")
    header_map = _check_headers(headers)
    user_options = _check_strings("options", options)
    exprs = _check_strings("name_expressions", name_expressions)
    _check_no_nul(name, source, header_map, user_options, exprs)
    texts = [("source", source), ("name", name), *((f"header name {h!r}", h) for h in header_map),
             *((f"header {h!r}", t) for h, t in header_map.items()), *((f"options[{i}]", o) for i, o in
             enumerate(user_options)), *((f"name_expressions[{i}]", e) for i, e in enumerate(exprs))]
    for what, text in texts:
        refuse_lone_surrogates(what, text)
    if cache is not None and not isinstance(cache, bool):
        raise TypeError(f"cache must be True, False or None (follow TILEJIT_CACHE), got {cache!r}")
    for opt in user_options:
        if re.match(r"^(-arch|--gpu-architecture|-dlto|--dlink-time-opt)\b", opt):
            raise ValueError(f"option {opt!r}: choose the architecture with target= and LTO-IR with output='ltoir'")
    tgt = resolve_target(target)
    opts = _options(user_options, tgt, output)

    if cache is None:
        # Headers NVRTC reads from disk are not part of the key, so only an explicit cache=True caches them.
        cache = config.CACHE.get() and not _reads_disk_headers(source, header_map, user_options)
    use_cache = bool(cache)
    key: str | None = None
    if use_cache:
        from tilejit.compiler.cache import default_cache

        key = _key(source, name, header_map, opts, tgt, output, exprs, nvrtc)
        entry = default_cache().get(key)
        if entry is not None and _entry_ok(entry, output):
            return CompiledProgram(
                code=entry["code"],
                kind=output,
                target=tgt,
                lowered_names=dict(entry["lowered_names"]),
                log=entry["log"],
                nvrtc_version=tuple(entry["nvrtc_version"]),  # type: ignore[arg-type]
                from_cache=True,
            )

    lib = nvrtc if nvrtc is not None else _default_nvrtc()
    _check_supported(tgt, lib)
    if output == "ltoir" and getattr(lib, "nvrtcGetLTOIR", None) is None:
        raise CompileError(
            f"output='ltoir' needs NVRTC 12.0 or newer (nvrtcGetLTOIR); NVRTC {_version(lib)} at {lib.path} has none"
        )
    from tilejit.compiler.nvrtc_run import run_nvrtc, thread_locale_kept  # only on a cache miss

    with thread_locale_kept():
        prog = run_nvrtc(lib, source, name, header_map, opts, tgt, output, exprs)
    if key is not None:
        from tilejit.compiler.cache import default_cache

        default_cache().put(
            key,
            {
                "code": prog.code,
                "kind": output,
                "lowered_names": prog.lowered_names,
                "log": prog.log,
                "nvrtc_version": list(prog.nvrtc_version),
                "target": tgt.sm,
            },
        )
    return prog


def _check_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise TypeError(f"headers must map include names to header text, got {type(headers).__name__}")
    out: dict[str, str] = {}
    for hname, text in headers.items():
        if not isinstance(hname, str) or not hname or not isinstance(text, str):
            raise TypeError(f"headers must map non-empty str names to str text; got {hname!r}: {type(text).__name__}")
        out[hname] = text
    return out


def _check_no_nul(name: str, source: str, headers: Mapping[str, str], options: Sequence[str],
                  exprs: Sequence[str]) -> None:
    """NVRTC takes C strings: a NUL byte would silently end the text there."""
    texts = [(f"source {name!r}", source), *((f"header {h!r}", t) for h, t in headers.items())]
    for what, text in texts:
        at = text.find("\0")
        if at >= 0:
            line = text.count("\n", 0, at) + 1
            raise ValueError(f"{what} contains a NUL byte (line {line}); NVRTC would stop reading there")
    for what, values in (("header name", headers), ("option", options), ("name expression", exprs)):
        for v in values:
            if "\0" in v:
                raise ValueError(f"{what} {v!r} contains a NUL byte")


_DISK_OPTIONS = ("-I", "--include-path", "-include", "--pre-include")


def _reads_disk_headers(source: str, headers: Mapping[str, str], options: Sequence[str]) -> bool:
    """Whether NVRTC may read a header from disk: through ``-I``/``-include`` options, or a quoted
    ``#include "x"`` (or one spelled by a macro) that ``headers`` does not provide, which NVRTC
    looks up in the current folder. ``<x>`` names come from ``headers`` or NVRTC's built-ins."""
    if any(o.startswith(_DISK_OPTIONS) for o in options):
        return True
    return any(_includes_from_disk(text, headers) for text in (source, *headers.values()))


def _includes_from_disk(text: str, headers: Mapping[str, str]) -> bool:
    """Whether ``text`` has an ``#include`` that is not ``<name>`` or a ``"name"`` in ``headers``
    (plain string scanning: a regular expression would cost a warm launch its compile)."""
    if "__has_include" in text:
        return True
    at = text.find("include")
    while at >= 0:
        line_start = text.rfind("\n", 0, at) + 1
        if text[line_start:at].replace(" ", "").replace("\t", "") == "#":  # a directive, not a word
            end = text.find("\n", at)
            rest = text[at + 7 : len(text) if end < 0 else end].lstrip(" \t")
            if not rest.startswith("<"):
                name = rest[1:].partition('"')[0] if rest.startswith('"') else None
                if name is None or name not in headers:
                    return True
        at = text.find("include", at + 7)
    return False


def _entry_ok(entry: dict[str, object], output: str) -> bool:
    """Whether a cache entry (checksummed, but maybe written by another tilejit version) has the fields a hit needs."""
    names, version = entry.get("lowered_names"), entry.get("nvrtc_version")
    return (
        entry.get("kind") == output
        and isinstance(entry.get("code"), bytes)
        and isinstance(entry.get("log"), str)
        and isinstance(names, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in names.items())
        and isinstance(version, list | tuple)
        and len(version) == 2
        and all(isinstance(v, int) for v in version)
    )


def _check_strings(what: str, values: Sequence[str]) -> tuple[str, ...]:
    if isinstance(values, str | bytes) or not all(isinstance(v, str) for v in values):
        raise TypeError(f"{what} must be a sequence of str, got {values!r}")
    return tuple(values)


def _options(user: tuple[str, ...], target: Target, output: str) -> tuple[str, ...]:
    user_std = any(u.startswith(("-std", "--std")) for u in user)
    opts = [o for o in DEFAULT_OPTIONS if not (user_std and o.startswith("-std="))]
    if output == "cubin":
        opts.append(f"-arch={target.sm}")
    else:
        opts.append(f"-arch={target.compute}")
    if output == "ltoir":
        opts.append("-dlto")
    return (*opts, *user)


@functools.cache
def _default_nvrtc() -> NVRTC:
    from tilejit.bindings.nvrtc import nvrtc

    return nvrtc()


_supported_ok: set[tuple[str, Target]] = set()


def _check_supported(target: Target, lib: NVRTC) -> None:
    memo = (lib.path, target)
    if memo not in _supported_ok:
        check_supported(target, lib)
        _supported_ok.add(memo)


def _version(lib: NVRTC) -> str:
    return ".".join(str(v) for v in lib.version)


# ---------------------------------------------------------------- cache key


def nvrtc_identity(lib: NVRTC | None = None) -> str:
    """Which NVRTC compiles, for cache keys: the identity of ``lib``'s file, else of the NVRTC this process
    loaded, else of the file discovery would load (found without loading it)."""
    from tilejit.bindings.loader import NVRTC_LIBRARY, file_identity, toolkit_identity

    return toolkit_identity(NVRTC_LIBRARY) if lib is None else file_identity(lib.path)


def _key(
    source: str,
    name: str,
    headers: dict[str, str],
    opts: tuple[str, ...],
    target: Target,
    output: str,
    exprs: tuple[str, ...],
    lib: NVRTC | None,
) -> str:
    import tilejit
    from tilejit.compiler.cache import cache_key

    parts: list[str] = [_CACHE_TAG, tilejit.__version__, nvrtc_identity(lib), source, name, target.sm, output]
    parts.append(str(len(headers)))
    for hname in sorted(headers):
        parts += [hname, headers[hname]]
    parts.append(str(len(opts)))
    parts += opts
    parts.append(str(len(exprs)))
    parts += exprs
    return cache_key(*parts)


__all__ = ["DEFAULT_OPTIONS", "CompiledProgram", "compile_cuda", "default_target", "nvrtc_identity"]
