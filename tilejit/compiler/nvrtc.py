"""Compile CUDA C++ with NVRTC to PTX, CUBIN or LTO-IR for a named target, with no GPU needed.

Headers are handed to NVRTC in memory (name → text), so device headers ship inside the package.
Results go through the disk cache; a cache hit does not load NVRTC: the key names the NVRTC file
by path, size and mtime, which the loader finds without a dlopen or importing the NVRTC bindings.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from tilejit import config
from tilejit.compiler.targets import Target, check_supported, resolve_target
from tilejit.errors import CompileError, refuse_lone_surrogates
from tilejit.logs import logger_for, ms_since
from tilejit.records import Record

if TYPE_CHECKING:
    from typing import TypeAlias

    from tilejit.bindings.nvrtc import NVRTC

    # Type-checking only, as are the other Literal aliases on the way to a first launch: creating one
    # costs about 70 us at import.
    Output: TypeAlias = Literal["ptx", "cubin", "ltoir"]
OUTPUTS: tuple[str, ...] = ("ptx", "cubin", "ltoir")
DEFAULT_OPTIONS: tuple[str, ...] = ("-std=c++17", "-default-device")
#: The option that leaves out of a program what tilejit's generated kernels never use (texture and surface functions,
#: the device runtime library's functions, launches from the device, the runtime API's types): NVRTC parses less and
#: makes the same code. NVRTC older than 12.4 does not know it, so a compile with one leaves it out.
MINIMAL = "-minimal"
_MINIMAL_SINCE = (12, 4)
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
    if output not in OUTPUTS:
        raise ValueError(f"output must be one of {', '.join(OUTPUTS)}; got {output!r}")
    header_map, user_options, exprs, tgt = _checked_inputs(source, name, headers, options, name_expressions, target)
    if cache is not None and not isinstance(cache, bool):
        raise TypeError(f"cache must be True, False or None (follow TILEJIT_CACHE), got {cache!r}")
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
            log = logger_for(__name__)
            if log is not None:
                log.debug("NVRTC output from the disk cache: %s for %s (%s, key %s)", name, tgt.sm, output, key[:16])
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

    log = logger_for(__name__)
    start = time.perf_counter() if log is not None else 0.0
    with thread_locale_kept():
        prog = run_nvrtc(lib, source, name, header_map, _known_to(opts, lib), tgt, output, exprs)
    if log is not None:
        log.debug("NVRTC %s compiled %s for %s to %s in %.1f ms", _version(lib), name, tgt.sm, output,
                  ms_since(start))
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


def compile_cuda_ptx_and_cubin(
    source: str,
    *,
    name: str = "kernel.cu",
    headers: Mapping[str, str] | None = None,
    options: Sequence[str] = (),
    target: str | int | Target | None = None,
    name_expressions: Sequence[str] = (),
    nvrtc: NVRTC | None = None,
) -> tuple[CompiledProgram, CompiledProgram]:
    """PTX and CUBIN of ``source`` for ``target`` from one NVRTC run, where ``compile_cuda`` takes a run for each.

    Not cached: for callers that want both and do not cache (``tilejit compile --emit ptx,cubin``). The compile
    for the real architecture gives both; NVRTC 11-13 give it the PTX a compile for the virtual one gives."""
    header_map, user_options, exprs, tgt = _checked_inputs(source, name, headers, options, name_expressions, target)
    lib = nvrtc if nvrtc is not None else _default_nvrtc()
    _check_supported(tgt, lib)
    from tilejit.compiler.nvrtc_run import run_nvrtc_outputs, thread_locale_kept

    opts = _known_to(_options(user_options, tgt, "cubin"), lib)
    log = logger_for(__name__)
    start = time.perf_counter() if log is not None else 0.0
    with thread_locale_kept():
        progs = run_nvrtc_outputs(lib, source, name, header_map, opts, tgt, ("ptx", "cubin"), exprs)
    if log is not None:
        log.debug("NVRTC %s compiled %s for %s to ptx and cubin in %.1f ms", _version(lib), name, tgt.sm,
                  ms_since(start))
    return progs["ptx"], progs["cubin"]


def _checked_inputs(
    source: str,
    name: str,
    headers: Mapping[str, str] | None,
    options: Sequence[str],
    name_expressions: Sequence[str],
    target: str | int | Target | None,
) -> tuple[dict[str, str], tuple[str, ...], tuple[str, ...], Target]:
    """Check ``compile_cuda``'s inputs: (headers, options, name expressions, target), or TypeError/ValueError."""
    if not isinstance(source, str):
        raise TypeError(f"source must be str (CUDA C++ text), got {type(source).__name__}")
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    header_map = _check_headers(headers)
    user_options = _check_strings("options", options)
    exprs = _check_strings("name_expressions", name_expressions)
    _check_text(name, source, header_map, user_options, exprs)
    for opt in user_options:
        if re.match(r"^(-arch|--gpu-architecture|-dlto|--dlink-time-opt)\b", opt):
            raise ValueError(f"option {opt!r}: choose the architecture with target= and LTO-IR with output='ltoir'")
    tgt = resolve_target(target)
    return header_map, user_options, exprs, tgt


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


def _check_text(name: str, source: str, headers: Mapping[str, str], options: Sequence[str],
                exprs: Sequence[str]) -> None:
    """NVRTC takes C strings of UTF-8: a NUL byte would silently end the text there, and a lone surrogate
    (text decoded with errors="surrogateescape") has no UTF-8 encoding."""
    texts = [(f"source {name!r}", source), *((f"header {h!r}", t) for h, t in headers.items())]
    for what, text in texts:
        at = text.find("\0")
        if at >= 0:
            line = text.count("\n", 0, at) + 1
            raise ValueError(f"{what} contains a NUL byte (line {line}); NVRTC would stop reading there")
        refuse_lone_surrogates(what, text)
    for what, values in (("header name", headers), ("option", options), ("name expression", exprs)):
        for v in values:
            if "\0" in v:
                raise ValueError(f"{what} {v!r} contains a NUL byte")
            refuse_lone_surrogates(f"{what} {v!r}", v)
    refuse_lone_surrogates("name", name)


_DISK_OPTIONS = ("-I", "--include-path", "-include", "--pre-include")


def _reads_disk_headers(source: str, headers: Mapping[str, str], options: Sequence[str]) -> bool:
    """Whether NVRTC may read a header from disk: through ``-I``/``-include`` options, or a quoted
    ``#include "x"`` (or one spelled by a macro) that ``headers`` does not provide, which NVRTC
    looks up in the current folder. ``<x>`` names come from ``headers`` or NVRTC's built-ins."""
    if any(o.startswith(_DISK_OPTIONS) for o in options):
        return True
    trigraphs = _trigraphs_possible(options)
    return any(_includes_from_disk(text, headers, trigraphs) for text in (source, *headers.values()))


# Directives that read a file; searching for "include" finds them and __has_include. NVRTC 11-13 know
# no #import or #embed (an unrecognized directive fails the compile, so nothing is cached).
_FILE_DIRECTIVES = frozenset({"include", "include_next"})
_HAS_INCLUDE = frozenset({"__has_include", "__has_include_next"})
_WS = " \t\f\v\r"  # whitespace within a line, as NVRTC reads it ("\r" alone ends no line)
_IDENT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_RAW_PREFIXES = frozenset({"R", "u8R", "uR", "UR", "LR"})
_RAW_DELIM_BAD = frozenset(' ()\\\t\v\f\r\n"')
_TRIGRAPHS = (("??=", "#"), ("??/", "\\"), ("??'", "^"), ("??(", "["), ("??)", "]"), ("??!", "|"), ("??<", "{"),
              ("??>", "}"), ("??-", "~"))
_NO_TRIGRAPH_STDS = frozenset({"c++17", "c++20"})


def _trigraphs_possible(options: Sequence[str]) -> bool:
    """Whether ``options`` may turn trigraphs on: NVRTC reads them under ``-std=c++14`` and older, not
    under the ``-std=c++17`` tilejit passes unless told otherwise."""
    for i, opt in enumerate(options):
        if opt.startswith(("-std", "--std")):
            value = opt.partition("=")[2] or (options[i + 1] if i + 1 < len(options) else "")
            if value not in _NO_TRIGRAPH_STDS:
                return True
    return False


def _includes_from_disk(text: str, headers: Mapping[str, str], trigraphs: bool = False) -> bool:
    """Whether ``text`` has a directive that may read a file NVRTC finds on disk: an ``#include`` that is
    not ``<name>`` or a ``"name"`` in ``headers`` (one spelled by a macro included), ``#include_next``,
    or ``__has_include``.

    Read after the preprocessor's own rules: line splices, ``%:`` for ``#``, comments (a block comment
    may join lines; ``#/**/include`` is a directive), string and raw string literals (no directive
    inside), and, if ``trigraphs`` may be on, trigraphs. Most texts are settled by plain substring
    search (no regular expression: a warm launch would pay its compile); a full scan runs only when a
    possible directive is not plainly harmless."""
    if trigraphs and "??" in text and _reads_disk(_splice(_trigraphs(text)), headers):
        return True  # the reading without trigraphs must be safe as well
    if "\\\n" in text or ("\r" in text and "\\\r" in text):
        text = _splice(text)
    return _reads_disk(text, headers)


def _reads_disk(text: str, headers: Mapping[str, str]) -> bool:
    """``_includes_from_disk`` of spliced ``text``: a quick look at each "include", then, if one may be a
    directive that reads from disk, the same look at the text without comments and raw strings."""
    return _any_unsafe(text, headers, exact=False) and _any_unsafe(_without_comments(text), headers, exact=True)


def _any_unsafe(text: str, headers: Mapping[str, str], *, exact: bool) -> bool:
    """Whether an "include" of ``text`` may be a directive (or ``__has_include``) that reads from disk.

    Not ``exact``: comments may still be in ``text``, so one with a comment before it on its line
    counts as unsafe (the full scan decides). ``exact``: comments are gone; literals may remain."""
    at = text.find("include")
    while at >= 0:
        if not _safe_at(text, at, headers, exact):
            return True
        at = text.find("include", at + 7)
    return False


def _safe_at(text: str, at: int, headers: Mapping[str, str], exact: bool) -> bool:
    """Whether the "include" at ``at`` plainly reads nothing from disk (see ``_any_unsafe``)."""
    start = at
    while start > 0 and text[start - 1] in _IDENT:
        start -= 1
    end = at
    while end < len(text) and text[end] in _IDENT:
        end += 1
    word = text[start:end]
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    if line_end < 0:
        line_end = len(text)
    if word in _HAS_INCLUDE:  # unsafe unless inside a literal (known only once comments are gone)
        return exact and not any(h in _without_comments(text[line_start:line_end], True) for h in _HAS_INCLUDE)
    if start != at or word not in _FILE_DIRECTIVES:
        return True  # part of another identifier
    prefix = text[line_start:start]
    if not exact and ("/*" in prefix or "*/" in prefix):
        return False  # a comment before it (or one joining lines) may make it a directive
    lead = prefix.lstrip(_WS)
    if lead.startswith("#"):
        between = lead[1:]
    elif lead.startswith("%:"):
        between = lead[2:]
    else:
        return True  # not the first token after # of a line: no directive
    if between.strip(_WS):
        return True  # in another directive (#define X include)
    if word != "include":
        return False  # include_next
    rest = text[end:line_end].lstrip(_WS)
    if rest.startswith("<"):
        return True
    if rest.startswith('"'):
        name, closed, _ = rest[1:].partition('"')
        return bool(closed) and name in headers
    return False  # a macro names the header


def _trigraphs(text: str) -> str:
    """``text`` with trigraphs replaced (none of the replacements makes a new one)."""
    for tri, char in _TRIGRAPHS:
        text = text.replace(tri, char)
    return text


def _splice(text: str) -> str:
    """``text`` with line splices (a backslash ending a line) removed, in one pass as the preprocessor does."""
    if "\r" not in text:
        return "".join(text.split("\\\n"))  # faster than str.replace
    lines = text.split("\n")
    out = []
    for line in lines[:-1]:
        if line.endswith("\\"):
            out.append(line[:-1])
        elif line.endswith("\\\r"):
            out.append(line[:-2])
        else:
            out.append(line + "\n")
    out.append(lines[-1])
    return "".join(out)


def _without_comments(text: str, blank_literals: bool = False) -> str:
    """Spliced ``text`` with each comment replaced by a space, as the preprocessor does (so a block comment
    over several lines joins them), and each raw string literal emptied (its lines are no directives).
    ``blank_literals`` empties ordinary string and character literals as well."""
    out: list[str] = []
    n = len(text)
    start = i = 0
    next_at = [text.find("/"), text.find('"'), text.find("'")]
    while True:
        for k, ch in enumerate('/"\''):
            if 0 <= next_at[k] < i:
                next_at[k] = text.find(ch, i)
        live = [at for at in next_at if at >= 0]
        if not live:
            break
        j = min(live)
        c = text[j]
        if c == "/":
            two = text[j : j + 2]
            if two not in ("/*", "//"):
                i = j + 1
            elif _in_header_name(out, text[start:j]):  # #include <a/*b.h> names a header, starts no comment
                close = text.find(">", j, _line_end(text, j))
                i = _line_end(text, j) if close < 0 else close + 1
            else:
                out += [text[start:j], " "]
                if two == "/*":
                    close = text.find("*/", j + 2)
                    i = n if close < 0 else close + 2
                else:
                    i = _line_end(text, j)
                start = i
        elif c == '"' and (raw_end := _raw_string_end(text, j)) is not None:
            out += [text[start:j], '"()"']
            start = i = raw_end
        elif c == "'" and _digit_separator(text, j):
            i = j + 1
        else:
            i = _literal_end(text, j)
            if blank_literals:
                out += [text[start : j + 1], c]
                start = i
    out.append(text[start:])
    return "".join(out)


def _line_end(text: str, at: int) -> int:
    end = text.find("\n", at)
    return len(text) if end < 0 else end


def _literal_end(text: str, at: int) -> int:
    """Index after the string or character literal opening at ``at`` (its line's end if unterminated)."""
    quote = text[at]
    eol = _line_end(text, at)
    k = at + 1
    while True:
        close = text.find(quote, k, eol)
        if close < 0:
            return eol
        b = close - 1
        while text[b] == "\\":
            b -= 1
        if (close - 1 - b) % 2 == 0:  # not escaped
            return close + 1
        k = close + 1


def _raw_string_end(text: str, at: int) -> int | None:
    """Index after the raw string literal whose ``"`` is at ``at`` (None if it opens none)."""
    start = at
    while start > 0 and text[start - 1] in _IDENT:
        start -= 1
    if text[start:at] not in _RAW_PREFIXES:
        return None
    paren = text.find("(", at + 1, at + 18)
    if paren < 0 or not _RAW_DELIM_BAD.isdisjoint(text[at + 1 : paren]):
        return None
    closing = ")" + text[at + 1 : paren] + '"'
    end = text.find(closing, paren + 1)
    return len(text) if end < 0 else end + len(closing)


def _digit_separator(text: str, at: int) -> bool:
    """Whether the ``'`` at ``at`` separates digits of a number (``1'000``) rather than opening a literal."""
    start = at
    while start > 0 and (text[start - 1] in _IDENT or text[start - 1] in ".'"):
        start -= 1
    first = text[start : start + 2]
    return at > start and (first[:1] in "0123456789" or (first[:1] == "." and first[1:] in "0123456789"))


def _in_header_name(out: list[str], pending: str) -> bool:
    """Whether the text so far (``out`` and then ``pending``) ends inside the ``<...>`` of an include line."""
    parts = [pending]
    for chunk in reversed(out):
        if "\n" in parts[-1]:
            break
        parts.append(chunk)
    line = "".join(reversed(parts))
    lead = line[line.rfind("\n") + 1 :].lstrip(_WS)
    if lead.startswith("#"):
        lead = lead[1:].lstrip(_WS)
    elif lead.startswith("%:"):
        lead = lead[2:].lstrip(_WS)
    else:
        return False
    word = lead
    for k, ch in enumerate(lead):
        if ch not in _IDENT:
            word = lead[:k]
            break
    rest = lead[len(word) :].lstrip(_WS)
    return word in _FILE_DIRECTIVES and rest.startswith("<") and ">" not in rest


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


def _known_to(opts: tuple[str, ...], lib: NVRTC) -> tuple[str, ...]:
    """``opts`` without ``MINIMAL`` for an NVRTC that does not know it (the cache key keeps the options asked for:
    which NVRTC compiles is in it too)."""
    if MINIMAL in opts and tuple(lib.version)[:2] < _MINIMAL_SINCE:
        return tuple(o for o in opts if o != MINIMAL)
    return opts


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


__all__ = [
    "DEFAULT_OPTIONS",
    "MINIMAL",
    "CompiledProgram",
    "compile_cuda",
    "compile_cuda_ptx_and_cubin",
    "nvrtc_identity",
]
