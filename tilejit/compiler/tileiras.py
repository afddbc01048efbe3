"""Run tileiras (Tile IR bytecode -> CUBIN) and tileirdisasm, and check a driver can load what they make.

The toolchain comes from ``tilejit.bindings.tileiras`` (found and checked once). tileiras runs in a
temporary folder of its own (also its ``TMPDIR``), with its own ``bin`` first on ``PATH`` and
``$CUDA_HOME``/``$CUDA_PATH`` unset, so it uses exactly the libnvvm and ptxas that discovery checked.
A Tile IR launch imports this module for :func:`check_driver` on every warm process: what running the tools
needs (``subprocess``, ``tempfile``: milliseconds) is imported when they run.
"""

from __future__ import annotations

import os
import re
import time

from tilejit.bindings.tileiras import Toolchain, find_toolchain
from tilejit.errors import CompileError, DriverVersionError, TileCompileError, TileirasError
from tilejit.logs import logger_for, ms_since

BYTECODE_MAGIC = b"\x7fTileIR\x00"
"""The first 8 bytes of every Tile IR bytecode module; the version follows as major (u8), minor (u8)."""

TILEIR_MIN_DRIVER = 13000
"""``cuDriverGetVersion`` of the oldest driver that runs tileiras's CUBINs: r580 (CUDA 13.0)."""

DEFAULT_TIMEOUT = 300.0

_FAILED = "failed to compile Tile IR program"
# loc("file":line:col): error: ...   and the debug form   loc(fused<...>["file":line:col]): error: ...
_LOC = r'loc\((?:[^)\[]*?\[)?"([^"]+)":(\d+):(\d+)\]?\):\s*error:\s*(.*)'


def bytecode_version(bytecode: bytes) -> tuple[int, int]:
    """The (major, minor) version in a bytecode module's header; ``ValueError`` if it is not Tile IR bytecode."""
    if bytes(bytecode[:8]) != BYTECODE_MAGIC or len(bytecode) < 10:
        raise ValueError(f"bytecode is not Tile IR bytecode: it must start with {BYTECODE_MAGIC!r} and a version, "
                         f"got {bytes(bytecode[:10])!r}")
    return bytecode[8], bytecode[9]


def _as_bytes(bytecode: object) -> bytes:
    if not isinstance(bytecode, (bytes, bytearray, memoryview)):
        raise TypeError(f"bytecode must be bytes, got {type(bytecode).__name__}")
    return bytes(bytecode)


def _check_version(bytecode: bytes, toolchain: Toolchain) -> None:
    version = bytecode_version(bytecode)
    accepted = toolchain.bytecode_versions
    if accepted and version not in accepted:
        listed = ", ".join(f"{a}.{b}" for a, b in accepted)
        raise CompileError(f"the bytecode is version {version[0]}.{version[1]}, which tileiras "
                           f"{toolchain.tileiras_version} does not read (it reads {listed})")


def tool_env(toolchain: Toolchain, tmp: str) -> dict[str, str]:
    """The environment tileiras runs in: its ``bin`` (then ptxas's folder) first on ``PATH``, ``TMPDIR`` in
    ``tmp``, and no ``$CUDA_HOME``/``$CUDA_PATH`` (which would make it look for libnvvm and ptxas there)."""
    env = dict(os.environ)
    env.pop("CUDA_HOME", None)
    env.pop("CUDA_PATH", None)
    first = list(dict.fromkeys([toolchain.bin_dir, os.path.dirname(toolchain.ptxas)]))
    env["PATH"] = os.pathsep.join(first + [p for p in env.get("PATH", "").split(os.pathsep) if p])
    env["TMPDIR"] = env["TEMP"] = env["TMP"] = tmp
    return env


def located_message(stderr: str) -> str | None:
    """The first ``loc("file":line:col): error: ...`` of tileiras's stderr as ``file:line:col: error: ...``
    with the source line and a caret when the file is readable; None when the stderr has no location."""
    for line in stderr.splitlines():
        m = re.search(_LOC, line)
        if m:
            filename, row, col, message = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4).strip()
            import linecache

            source = linecache.getline(filename, row) or None
            return str(TileCompileError(message, filename, row, max(col - 1, 0), source))
    return None


def explain_failure(code: int, stderr: str, toolchain: Toolchain, target: str) -> str:
    """The text of the TileirasError for a tileiras run that exited with ``code``."""
    text = stderr.strip()
    head = located_message(text)
    if head is not None:
        return f"{head}\ntileiras {toolchain.tileiras_version} ({target}) said:\n{text}"
    if code == 5 and all(_FAILED in line for line in text.splitlines() if line.strip()):
        if _compiles_an_empty_module(toolchain, target):
            return (
                f"tileiras {toolchain.tileiras_version} failed on this kernel for {target} with exit code 5 and "
                f"only '{_FAILED}', while it compiles an empty module: tileiras itself fails on something in the "
                "kernel; compile this kernel with backend='cuda'"
            )
        return (
            f"tileiras failed for {target} with exit code 5 and only '{_FAILED}': it says this when a piece "
            "of its toolchain fails (libnvvm or ptxas missing, of another CUDA version, or crashing). "
            f"The pieces found:\n{toolchain.describe()}"
        )
    if code < 0:
        try:
            import signal

            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return (f"tileiras {toolchain.tileiras_version} crashed ({name}) on this kernel for {target}"
                + (f":\n{text}\n" if text else "; ")
                + "that is a tileiras bug; compile this kernel with backend='cuda'")
    return f"tileiras {toolchain.tileiras_version} failed for {target} with exit code {code}:\n{text}"


#: An empty Tile IR module at bytecode 13.1 (every tileiras reads it): what ``explain_failure`` compiles to tell a
#: broken toolchain from a kernel tileiras fails on.
EMPTY_MODULE = bytes.fromhex(
    "7f54696c654952000d010000820108cb00840808cbcbcbcb00cbcbcbcbcbcbcb831108cbcbcbcbcb00cbcbcb00cbcbcb01cbcbcb"
    "0000000000850e0402cbcbcb00000000010000000003810404cbcbcb00cbcbcb00"
)
_EMPTY_COMPILES: dict[tuple[str, str], bool] = {}


def _compiles_an_empty_module(toolchain: Toolchain, target: str) -> bool:
    """Whether ``toolchain`` turns an empty module into a CUBIN for ``target`` (asked once per toolchain and
    target)."""
    key = (toolchain.tileiras, target)
    if key not in _EMPTY_COMPILES:
        _EMPTY_COMPILES[key] = False  # (the probe's own failure is explained without probing again)
        try:
            run_tileiras(EMPTY_MODULE, target, toolchain=toolchain, timeout=60.0)
            _EMPTY_COMPILES[key] = True
        except CompileError:
            pass
    return _EMPTY_COMPILES[key]


def run_tileiras(
    bytecode: bytes, target: str, *, toolchain: Toolchain | None = None, opt_level: int = 3,
    lineinfo: bool = False, timeout: float = DEFAULT_TIMEOUT,
) -> bytes:
    """Compile a Tile IR bytecode module to a CUBIN for ``target`` (e.g. ``"sm_90"``) with tileiras.

    Raises ``TargetError`` for a target the toolchain cannot compile for, ``CompileError`` for bytecode of a
    version it does not read, ``TileirasError`` (a ``CompileError`` carrying tileiras's stderr as ``log``) when
    tileiras cannot run, fails, crashes, writes no CUBIN or runs past ``timeout`` seconds."""
    data = _as_bytes(bytecode)
    tc = find_toolchain() if toolchain is None else toolchain
    tc.check_target(target)
    if opt_level not in (0, 1, 2, 3):
        raise ValueError(f"opt_level must be 0, 1, 2 or 3, got {opt_level!r}")
    _check_version(data, tc)
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tilejit-tileiras-") as tmp:
        source = os.path.join(tmp, "module.tileirbc")
        output = os.path.join(tmp, "module.cubin")
        with open(source, "wb") as f:
            f.write(data)
        args = [tc.tileiras, "--gpu-name", target, f"-O{opt_level}", "-o", output, source]
        if lineinfo:
            args.insert(-1, "--lineinfo")
        start = time.perf_counter()
        try:
            done = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
                                  env=tool_env(tc, tmp), cwd=tmp, check=False)
        except subprocess.TimeoutExpired as exc:
            log = (exc.stderr or b"").decode(errors="replace")
            raise TileirasError(f"tileiras did not finish compiling for {target} within {timeout:g} s "
                                "(it was stopped); a smaller kernel or tile size compiles faster", log,
                                lasting=False) from None
        except OSError as exc:
            raise TileirasError(f"cannot run tileiras at {tc.tileiras}: {exc.strerror or exc}", lasting=False) from None
        stderr = done.stderr.decode(errors="replace")
        if done.returncode != 0:  # killed (the out-of-memory killer's SIGKILL): it may well work next time
            raise TileirasError(explain_failure(done.returncode, stderr, tc, target), stderr,
                                lasting=done.returncode != -9)
        try:
            with open(output, "rb") as f:
                cubin = f.read()
        except OSError:
            cubin = b""
    if cubin[:4] != b"\x7fELF":
        raise TileirasError(f"tileiras exited with code 0 for {target} but wrote no CUBIN (ELF) file:\n"
                            f"{stderr.strip()}", stderr)
    logger = logger_for(__name__)
    if logger is not None:
        logger.debug("tileiras %s compiled %d bytes of bytecode for %s in %.1f ms (%d-byte CUBIN)",
                     tc.tileiras_version, len(data), target, ms_since(start), len(cubin))
    return cubin


def disassemble(bytecode: bytes, *, toolchain: Toolchain | None = None, timeout: float = 60.0) -> str:
    """The text form of a Tile IR bytecode module, printed by tileirdisasm (its functions: ``entry @name...``)."""
    data = _as_bytes(bytecode)
    bytecode_version(data)
    tc = find_toolchain() if toolchain is None else toolchain
    if tc.tileirdisasm is None:
        raise CompileError(f"no tileirdisasm beside tileiras in {tc.bin_dir} (it ships with CUDA 13.4 and newer)")
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tilejit-tileirdisasm-") as tmp:
        source = os.path.join(tmp, "module.tileirbc")
        with open(source, "wb") as f:
            f.write(data)
        try:
            done = subprocess.run([tc.tileirdisasm, source], stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=timeout, env=tool_env(tc, tmp), cwd=tmp, check=False)
        except subprocess.TimeoutExpired:
            raise CompileError(f"tileirdisasm did not finish within {timeout:g} s") from None
        except OSError as exc:
            raise CompileError(f"cannot run tileirdisasm at {tc.tileirdisasm}: {exc.strerror or exc}") from None
    stderr = done.stderr.decode(errors="replace")
    if done.returncode != 0:
        raise CompileError(f"tileirdisasm failed with exit code {done.returncode}:\n{stderr.strip()}", stderr)
    return done.stdout.decode(errors="replace")


def check_driver(driver_version: int) -> None:
    """Raise ``DriverVersionError`` unless a driver of ``cuDriverGetVersion`` value ``driver_version`` runs
    Tile IR CUBINs (r580, CUDA 13.0, or newer)."""
    if driver_version >= TILEIR_MIN_DRIVER:
        return
    from tilejit.bindings.driver import format_version

    raise DriverVersionError(
        f"Tile IR kernels are built for CUDA {format_version(TILEIR_MIN_DRIVER)} ({TILEIR_MIN_DRIVER}, driver r580) "
        f"or newer; the driver supports CUDA {format_version(driver_version)} ({driver_version}): update the "
        "NVIDIA driver to r580 or newer, or use the CUDA C++ backend"
    )
