"""One NVRTC program run: create it, compile, fetch the output and lowered names, and turn a failure
into an error showing NVRTC's log and the offending source lines. Imported on a cache miss only."""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from tilejit.compiler.nvrtc import CompiledProgram, _version
from tilejit.errors import CompileError

if TYPE_CHECKING:
    import ctypes

    from tilejit.bindings.nvrtc import NVRTC
    from tilejit.compiler.nvrtc import Output
    from tilejit.compiler.targets import Target

_CONTEXT_LINES = 2
_MAX_SHOWN_ERRORS = 8
_LOG_LOCATION = r"^(?P<file>.+?)\((?P<line>\d+)\): (?:catastrophic )?error\b"


@functools.cache
def _uselocale() -> Callable[[int | None], int | None] | None:
    """libc's ``uselocale``, or None where there is none (Windows)."""
    import ctypes

    try:
        fn = ctypes.CDLL(None).uselocale
    except (OSError, AttributeError, TypeError):
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_void_p]
    return fn  # type: ignore[no-any-return]


@contextlib.contextmanager
def thread_locale_kept() -> Iterator[None]:
    """Put back the calling thread's locale after NVRTC: NVRTC 11.x leaves the thread in the "C" locale,
    which turns Python's default text encoding (open(), subprocess) into ASCII for the rest of the thread."""
    fn = _uselocale()
    before = fn(None) if fn is not None else None
    try:
        yield
    finally:
        if fn is not None and before is not None and fn(None) != before:
            fn(before)


def run_nvrtc(
    lib: NVRTC,
    source: str,
    name: str,
    headers: dict[str, str],
    opts: tuple[str, ...],
    target: Target,
    output: Output,
    exprs: tuple[str, ...],
) -> CompiledProgram:
    """Compile one NVRTC program and fetch its ``output``."""
    return run_nvrtc_outputs(lib, source, name, headers, opts, target, (output,), exprs)[output]


def run_nvrtc_outputs(
    lib: NVRTC,
    source: str,
    name: str,
    headers: dict[str, str],
    opts: tuple[str, ...],
    target: Target,
    outputs: tuple[Output, ...],
    exprs: tuple[str, ...],
) -> dict[str, CompiledProgram]:
    """One NVRTC program compiled once, each of ``outputs`` fetched from it: ("ptx", "cubin") both come from
    a compile for a real architecture (``-arch=sm_XX``), whose PTX is the one ``compute_XX`` gives."""
    import ctypes

    prog = ctypes.c_void_p()
    n = len(headers)
    texts = (ctypes.c_char_p * n)(*(t.encode() for t in headers.values())) if n else None
    names = (ctypes.c_char_p * n)(*(h.encode() for h in headers)) if n else None
    lib.check(
        lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), n, texts, names),
        "nvrtcCreateProgram",
    )
    try:
        for expr in exprs:
            lib.check(lib.nvrtcAddNameExpression(prog, expr.encode()), "nvrtcAddNameExpression")
        c_opts = (ctypes.c_char_p * len(opts))(*(o.encode() for o in opts))
        status = lib.nvrtcCompileProgram(prog, len(opts), c_opts)
        log = _get_log(lib, prog)
        if status != 0:
            raise CompileError(_error_message(lib, status, log, source, name, headers, target, opts), log=log)
        codes: dict[str, bytes] = {}
        for output in outputs:
            if output == "ptx":
                codes[output] = _get_blob(lib, prog, lib.nvrtcGetPTXSize, lib.nvrtcGetPTX, "nvrtcGetPTX").rstrip(b"\0")
            elif output == "cubin":
                codes[output] = _get_blob(lib, prog, lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN, "nvrtcGetCUBIN")
            else:
                codes[output] = _get_blob(lib, prog, lib.nvrtcGetLTOIRSize, lib.nvrtcGetLTOIR, "nvrtcGetLTOIR")
        lowered: dict[str, str] = {}
        for expr in exprs:
            out = ctypes.c_char_p()
            lib.check(lib.nvrtcGetLoweredName(prog, expr.encode(), ctypes.byref(out)), "nvrtcGetLoweredName")
            lowered[expr] = (out.value or b"").decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
    version = tuple(lib.version)[:2]
    return {
        output: CompiledProgram(code, output, target, dict(lowered), log, version, False)  # type: ignore[arg-type]
        for output, code in codes.items()
    }


def _get_log(lib: NVRTC, prog: ctypes.c_void_p) -> str:
    import ctypes

    size = ctypes.c_size_t()
    lib.check(lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
    buf = ctypes.create_string_buffer(max(size.value, 1))
    lib.check(lib.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
    return buf.value.decode("utf-8", errors="replace").strip()


def _get_blob(lib: NVRTC, prog: ctypes.c_void_p, size_fn: object, get_fn: object, what: str) -> bytes:
    import ctypes

    size = ctypes.c_size_t()
    lib.check(size_fn(prog, ctypes.byref(size)), f"{what}Size")  # type: ignore[operator]
    buf = ctypes.create_string_buffer(size.value)
    lib.check(get_fn(prog, buf), what)  # type: ignore[operator]
    return buf.raw


def _error_message(
    lib: NVRTC,
    status: int,
    log: str,
    source: str,
    name: str,
    headers: dict[str, str],
    target: Target,
    opts: tuple[str, ...],
) -> str:
    why = _status_text(lib, status)
    lines = [f"NVRTC {_version(lib)} could not compile {name} for {target.sm} ({why}); options: {' '.join(opts)}"]
    lines.append(log if log else "(NVRTC gave no log)")
    excerpts = format_error_lines(log, source, name, headers)
    if excerpts:
        lines += ["", excerpts]
    return "\n".join(lines)


def _status_text(lib: NVRTC, status: int) -> str:
    try:
        return f"{lib.error_string(status)} ({status})"
    except Exception:
        return f"status {status}"


def format_error_lines(log: str, source: str, name: str, headers: Mapping[str, str]) -> str:
    """The source lines that ``log``'s ``file(LINE): error`` entries point at, numbered, with context."""
    files = {name: source, **headers}
    shown: list[str] = []
    seen: set[tuple[str, int]] = set()
    for match in re.finditer(_LOG_LOCATION, log, re.MULTILINE):
        fname, line = match.group("file"), int(match.group("line"))
        text = files.get(fname)
        if text is None:
            base = os.path.basename(fname)
            text = next((t for h, t in files.items() if h == base or h.endswith("/" + base)), None)
        if text is None or (fname, line) in seen:
            continue
        seen.add((fname, line))
        if len(seen) > _MAX_SHOWN_ERRORS:
            shown.append("(more errors; see the log above)")
            break
        src_lines = text.splitlines()
        if not 1 <= line <= len(src_lines):
            continue
        lo, hi = max(1, line - _CONTEXT_LINES), min(len(src_lines), line + _CONTEXT_LINES)
        width = len(str(hi))
        block = [f"{fname}:{line}:"]
        for i in range(lo, hi + 1):
            mark = ">" if i == line else " "
            block.append(f"{mark} {i:>{width}} | {src_lines[i - 1]}")
        shown.append("\n".join(block))
    return "\n\n".join(shown)


__all__ = ["format_error_lines", "run_nvrtc", "run_nvrtc_outputs", "thread_locale_kept"]
