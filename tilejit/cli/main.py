"""The ``tilejit`` command: ``doctor`` (what was found where), ``compile`` (CUDA C++ → PTX/CUBIN/LTO-IR), ``cache``.

Each subcommand is a ``(configure, run)`` pair in ``COMMANDS``, so new ones plug in without touching ``main``.
Expected failures (compile errors, bad targets, missing libraries) print a message and exit 1; no traceback.
``compile`` builds several targets at once in spawned worker processes, each failure reported with its target.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from tilejit.errors import TilejitError

if TYPE_CHECKING:
    from tilejit.bindings.nvrtc import NVRTC
    from tilejit.compiler.cache import DiskCache
    from tilejit.compiler.targets import Suffix, Target

Configure = Callable[[argparse.ArgumentParser], None]
Run = Callable[[argparse.Namespace], int]


def _bytes(n: int) -> str:
    """1536 → '1.5 KiB'."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _ellipsis(stream: TextIO) -> str:
    """"…" where the stream can print it, else "..." (a C/ASCII locale)."""
    try:
        "…".encode(getattr(stream, "encoding", None) or "ascii")
        return "…"
    except (UnicodeEncodeError, LookupError):
        return "..."


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in str(text).splitlines())


# ---------------------------------------------------------------- doctor


def _configure_doctor(p: argparse.ArgumentParser) -> None:
    p.description = "Show which CUDA libraries and GPUs tilejit finds, where, and what it can do here."


def _run_doctor(args: argparse.Namespace) -> int:
    out: TextIO = sys.stdout
    import platform

    import tilejit
    from tilejit import config

    print(f"tilejit {tilejit.__version__} (Python {platform.python_version()}, {sys.platform})", file=out)
    settings = [(s.name, os.environ[s.name]) for s in config.ALL if s.name in os.environ]
    if settings:
        print("settings: " + ", ".join(f"{k}={v}" for k, v in settings), file=out)

    def probe_nvrtc() -> dict[str, Any]:
        from tilejit.bindings.nvrtc import nvrtc
        from tilejit.compiler.targets import format_targets

        lib = nvrtc()
        archs = lib.supported_archs()
        return {"path": lib.path, "version": ".".join(map(str, lib.version)), "archs": archs,
                "targets": format_targets(archs), "specific": _feature_targets(lib, archs, "a"),
                "family": _feature_targets(lib, archs, "f")}

    def probe_nvjitlink() -> dict[str, Any]:
        from tilejit.bindings.nvjitlink import nvjitlink

        jl = nvjitlink()
        return {"path": jl.path, "version": ".".join(map(str, jl.version))}

    def probe_driver() -> dict[str, Any]:
        from tilejit.bindings.driver import driver, format_version

        drv = driver()
        return {"path": drv.path, "version": f"CUDA {format_version(drv.version)}", "number": drv.version}

    def probe_gpus() -> dict[str, Any]:
        from tilejit.runtime.device import Device, device_count, initialized_driver

        initialized_driver()
        gpus = []
        for i in range(device_count()):
            dev = Device(i)
            major, minor = dev.compute_capability
            gpus.append({"line": f"{i}: {dev.name}, compute capability {major}.{minor} ({dev.arch}), "
                                 f"{dev.multiprocessor_count} SMs, {_bytes(dev.total_memory)}", "arch": dev.arch})
        return {"gpus": gpus}

    archs: list[int] = []
    nvrtc_version = ""
    print("\nNVRTC (compiler)", file=out)
    found = _probe("NVRTC", probe_nvrtc)
    if "error" in found:
        print("  not found:", file=out)
        print(_indent(str(found["error"])), file=out)
    else:
        archs = list(found["archs"])
        nvrtc_version = str(found["version"])
        print(f"  found: {found['path']}", file=out)
        print(f"  version: {nvrtc_version}", file=out)
        print(f"  targets: {found['targets']}", file=out)
        print(f"  arch-specific targets: {found['specific']}", file=out)
        print(f"  family targets: {found['family']}", file=out)

    found = _probe("nvJitLink", probe_nvjitlink)
    linker = "not found" if "error" in found else f"{found['version']} at {found['path']}"
    print(f"\nnvJitLink (LTO linker): {linker} (optional: nothing in tilejit uses it yet)", file=out)
    print(f"\nDevice headers (what generated CUDA C++ includes): {_headers_line()}", file=out)

    print("\nCUDA driver", file=out)
    found = _probe("the CUDA driver", probe_driver)
    driver_ok = "error" not in found
    driver_version = int(found["number"]) if driver_ok else None
    if driver_ok:
        print(f"  found: {found['path']}", file=out)
        print(f"  version: {found['version']}", file=out)
    else:
        print("  not found:", file=out)
        print(_indent(str(found["error"])), file=out)

    gpus: list[str] = []
    print("\nGPUs", file=out)
    if driver_ok:
        found = _probe("the GPUs", probe_gpus)
        if "error" in found:
            print("  none: the driver could not be initialized:", file=out)
            print(_indent(str(found["error"])), file=out)
        else:
            for gpu in found["gpus"]:
                gpus.append(gpu["arch"])
                print(f"  {gpu['line']}", file=out)
            if not gpus:
                print("  none: the driver reports no CUDA device", file=out)
    else:
        print("  none: no CUDA driver", file=out)

    print("\nBackends", file=out)
    for line in _backend_lines(archs, gpus, driver_version):
        print(f"  {line}", file=out)

    print("\nDisk cache", file=out)
    try:
        from tilejit.compiler.cache import default_cache

        cache = default_cache()
        info = cache.info()
        print(f"  {info['dir']}: {_plural(info['entries'], 'entry', 'entries')}, {_bytes(info['bytes'])} of "
              f"{_bytes(info['max_bytes'])}; caching {_cache_state(cache)}", file=out)
    except (TilejitError, OSError, ValueError) as exc:
        print(f"  unavailable: {exc}", file=out)

    print("", file=out)
    if not archs:
        print("Summary: no NVRTC, so nothing can be compiled here; install it with pip install \"tilejit[cu13]\" "
              "(or [cu12] / [cu11]).", file=out)
        return 1
    span = f"sm_{archs[0]}{_ellipsis(out)}sm_{archs[-1]}"
    if not gpus:
        print(f"Summary: No GPU: you can compile for any of {span} here (NVRTC {nvrtc_version}); "
              "running kernels needs a GPU.", file=out)
        return 0
    unsupported = sorted({g for g in gpus if int(g[3:]) not in archs})
    if unsupported:
        print(f"Summary: NVRTC {nvrtc_version} cannot compile for {', '.join(unsupported)} "
              f"(it targets {span}); install an NVRTC that supports your GPU.", file=out)
        return 1
    print(f"Summary: ready: {_plural(len(gpus), 'GPU')} ({', '.join(sorted(set(gpus)))}); kernels compile and run "
          f"here, and you can compile for any of {span}.", file=out)
    return 0


def _headers_line() -> str:
    """Doctor's line on the CUDA backend's device headers: their include path, or why there is none."""
    folder = _include_dir()
    if folder is None:
        return ("not plain files in this install (a zipped package?); `tilejit include-dir --copy-to DIR` writes "
                "them to DIR/tilejit/")
    return f"{folder} (nvcc -I this folder; `tilejit include-dir` prints it)"


def _backend_lines(archs: list[int], gpus: list[str], driver_version: int | None = None) -> list[str]:
    """Doctor's Backends section: each backend and whether it can compile here, and which one a compile with
    no ``backend=`` uses (``TILEJIT_BACKEND``, default auto) and why, for this GPU's target (else
    ``TILEJIT_ARCH``, else the newest target NVRTC knows); for Tile IR, which kernels still go to CUDA C++ (all of
    a launch's, under auto, where the driver is too old for Tile IR CUBINs)."""
    from tilejit import config
    from tilejit.backends.base import choose_backend, get_backend, requested_backend
    from tilejit.compiler.targets import parse_target

    where, arch = "this GPU's target", gpus[0] if gpus else None
    if arch is None:
        arch, where = config.DEFAULT_ARCH.get(), config.DEFAULT_ARCH.name
    if arch is None and archs:
        arch, where = f"sm_{archs[-1]}", "the newest NVRTC target; no GPU here"
    target: Target | None = None
    problem = "no target to choose for (no GPU, no NVRTC, TILEJIT_ARCH unset)"
    if arch is not None:
        try:
            target = parse_target(arch)
        except TilejitError as exc:
            problem = f"{where}={arch!r}: {exc}"
    lines = []
    for name in ("cuda", "tileir"):
        backend = get_backend(name)
        if name == "cuda":
            reason = None if archs else "no NVRTC (see above)"
        else:
            reason = backend.available(target) if target is not None else problem
        status = "available" if reason is None else f"not available: {reason}"
        lines.append(f"{name} ({backend.title}): {status}".replace("\n", "\n    "))  # a reason's lines indented
    if target is None:
        lines.append(f"used: none: {problem}")
        return lines
    try:
        chosen, why = choose_backend(None, target)
    except TilejitError as exc:  # a bad TILEJIT_BACKEND, or one it names that is not available
        lines.append(f"used: none: {exc}")
        return lines
    if "\n" in why:  # Tile IR's reason for not being used, which its line above gives in full
        why = why.split(": ", 1)[0] + ": see the tileir line above"
    lines.append(f"used for {target.sm} ({where}): {chosen.name} ({why})")
    if chosen.name == "tileir" and gpus and driver_version is not None:
        from tilejit.compiler.tileiras import check_driver
        from tilejit.errors import DriverVersionError

        try:
            check_driver(driver_version)
        except DriverVersionError as exc:
            auto = requested_backend(None) == "auto"
            lines.append(f"launches: {'CUDA C++ (auto falls back)' if auto else 'refused'}: {exc}")
    if chosen.name == "tileir" and requested_backend(None) == "auto":
        lines.append("fallback: auto compiles a kernel with CUDA C++ where the Tile IR backend refuses it (what Tile "
                     "IR cannot express, such as a return inside a loop; tileiras failing on it), saying so in an "
                     f"INFO line of the tilejit logger; {config.BACKEND.name}=cuda uses CUDA C++ for every kernel")
    elif chosen.name == "tileir":
        lines.append("fallback: none, as Tile IR is asked for by name: a kernel it refuses is an error that suggests "
                     "backend='cuda'")
    return lines


def _probe(label: str, probe: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``probe()`` (which loads CUDA libraries) run in a forked child process where there is fork, so that a
    library that crashes its loader (a damaged file: SIGBUS) is reported, not the end of doctor. Returns
    probe's plain-data dict, or ``{"error": why}`` for an expected failure or a crash."""

    def run() -> dict[str, Any]:
        try:
            return probe()
        except (TilejitError, OSError, ImportError) as exc:
            return {"error": str(exc)}
        except Exception as exc:  # doctor reports, never dies of, what it probes
            return {"error": f"probing {label} failed: {type(exc).__name__}: {exc}"}

    if not hasattr(os, "fork"):
        return run()
    import json
    import signal

    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, then leave without running the parent's exit code
        try:
            os.close(read_end)
            with os.fdopen(write_end, "w", encoding="utf-8") as pipe:
                json.dump(run(), pipe)
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, encoding="utf-8") as pipe:
        reply = pipe.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        name = signal.Signals(number).name if number in signal.valid_signals() else "unknown"
        return {"error": f"probing {label} crashed (signal {number}, {name})"}
    try:
        result = json.loads(reply)
    except ValueError:
        return {"error": f"probing {label} failed (exit status {os.waitstatus_to_exitcode(status)})"}
    return result if isinstance(result, dict) else {"error": f"probing {label} failed"}


def _feature_targets(lib: NVRTC, archs: list[int], suffix: Suffix) -> str:
    """The ``sm_90a``-style targets (``suffix`` 'a': arch-specific, 'f': family) that ``lib`` compiles for, by the
    rules ``compile_cuda`` checks a target with, or 'none' and why."""
    from tilejit.compiler.targets import Target, check_supported

    found = []
    for number in archs:
        try:
            target = Target(number // 10, number % 10, suffix)
            check_supported(target, lib)
        except TilejitError:
            continue
        found.append(target.sm)
    if found:
        return ", ".join(found)
    need = (12, 0) if suffix == "a" else (12, 9)
    return f"none (they need NVRTC {need[0]}.{need[1]} or newer)" if tuple(lib.version) < need else "none"


# ---------------------------------------------------------------- compile

EMITS = ("ptx", "cubin", "ltoir")
TILE_EMITS = ("ir", "cuda", "ptx", "cubin", "tileir", "tileirbc")
_TILE_SUFFIX = {"ir": "ir", "cuda": "cu", "ptx": "ptx", "cubin": "cubin", "tileir": "tileir", "tileirbc": "tileirbc"}
# What the CUDA C++ backend alone makes, and so a compile with another backend refuses to emit.
_CUDA_EMITS = ("cuda", "ptx")
# Options that only one kind of input file takes, and why the other kind refuses them instead of ignoring them.
_CUDA_ONLY_FLAGS = (
    ("include", "-I", "a tile kernel's CUDA C++ is generated, with tilejit's headers built in"),
    ("define", "-D", "a tile kernel takes compile-time values as tj.Constant parameters (-C NAME=VALUE)"),
    ("name_expr", "--name-expr", "a tile kernel is named by --kernel and has no C++ template to instantiate"),
    ("nvrtc_option", "-X/--nvrtc-option", "tile kernels compile with the NVRTC options tilejit chooses for them"),
)
_PYTHON_ONLY_FLAGS = (
    ("kernel", "--kernel", "NVRTC compiles every kernel of a CUDA C++ file (--name-expr names template instances)"),
    ("signature", "--signature", "a CUDA C++ kernel's parameter types are in its source"),
    ("constant", "-C", "define CUDA C++ macros with -D NAME=VALUE"),
    ("backend", "--backend", "a CUDA C++ file compiles with NVRTC"),
    ("num_ctas", "--num-ctas", "set a CUDA C++ kernel's cluster with __cluster_dims__ in its source"),
    ("occupancy", "--occupancy", "set a CUDA C++ kernel's blocks per SM with __launch_bounds__ in its source"),
    ("num_warps", "--num-warps", "a CUDA C++ kernel's block size is its launch's"),
    ("num_stages", "--num-stages", "a CUDA C++ kernel's pipelines are in its source"),
)
_PROGRESS_MIN_BUILDS = 3  # the fewest builds that get a progress bar by default
# A tile kernel's performance hints: (tj.compile's keyword, what --<keyword> takes); api.compile's check_<keyword>
# checks each value.
_HINTS = (
    ("num_ctas", "CTAs per cluster, a power of two 1..16 (a performance hint: Tile IR on sm_90+ only; default: the "
                 "kernel's own @tj.kernel(num_ctas=...))"),
    ("occupancy", "CTAs per SM the compiler should aim for, 1..32 (a performance hint; default: the kernel's own "
                  "@tj.kernel(occupancy=...), else the compiler's choice)"),
    ("num_warps", "the block size in warps of 32 threads, a power of two 1..32 (the CUDA backend's; default: the "
                  "kernel's own num_threads / num_warps, else the compiler's choice)"),
    ("num_stages", "the depth of the CUDA backend's cp.async pipelines (1: none; a performance hint; default: the "
                   "kernel's own @tj.kernel(num_stages=...), else the compiler's choice)"),
)


def _job_count(text: str) -> int:
    """``-j N``: a positive number of builds at once."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of builds at once, got {text!r}")
    return n


def _configure_compile(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Compile a CUDA C++ file with NVRTC, writing FILE.<arch>.ptx / .cubin / .ltoir; or a tile kernel of a "
        "Python file (--kernel, --signature, -C), writing FILE.<kernel>.<arch>.ir / .cu / .ptx / .cubin / .tileir / "
        ".tileirbc. "
        "Several targets build at once, each in a process of its own. Needs no GPU."
    )
    p.add_argument("file", type=Path, help="a CUDA C++ source file (.cu) or a Python file with @tj.kernel functions")
    p.add_argument("--kernel", default=None, help="Python files: the @tj.kernel function to compile")
    p.add_argument(
        "--signature", default=None,
        help="Python files: parameter types, comma-separated, e.g. 'float32[:,:],float32[:],int32,float'",
    )
    p.add_argument(
        "-C", dest="constant", action="append", default=[], metavar="NAME=VALUE",
        help="Python files: a tj.Constant parameter's value (a Python literal)",
    )
    p.add_argument(
        "--arch", default=None,
        help="target(s), comma-separated, e.g. sm_90 or sm_80,sm_90a (default: this GPU, else $TILEJIT_ARCH)",
    )
    p.add_argument(
        "--emit", default="cubin",
        help="outputs, comma-separated: for CUDA C++ from ptx, cubin, ltoir; for Python files from ir, cuda, ptx, "
             "cubin, tileir (Tile IR text), tileirbc (Tile IR bytecode) (default: cubin)",
    )
    p.add_argument(
        "--backend", default=None, choices=("auto", "cuda", "tileir"),
        help="Python files: the backend, cuda (C++ through NVRTC), tileir (Tile IR through tileiras) or auto "
             "(default: $TILEJIT_BACKEND, else auto; auto with --emit cuda or ptx is cuda)",
    )
    for name, text in _HINTS:
        p.add_argument(_flag(name), type=int, default=None, metavar="N", help=f"Python files: {text}")
    p.add_argument("-o", "--output-dir", type=Path, default=None, help="folder for outputs (default: next to FILE)")
    p.add_argument("-I", dest="include", action="append", default=[], metavar="DIR",
                   help="CUDA C++ files: add an include folder")
    p.add_argument("-D", dest="define", action="append", default=[], metavar="NAME[=VALUE]",
                   help="CUDA C++ files: define a macro")
    p.add_argument(
        "--name-expr", action="append", default=[], metavar="EXPR",
        help="CUDA C++ files: a kernel name expression (e.g. 'add<float>') whose mangled name to print",
    )
    p.add_argument(
        "-X", "--nvrtc-option", action="append", default=[], metavar="OPT",
        help="CUDA C++ files: pass an option to NVRTC as is, e.g. --nvrtc-option=--use_fast_math",
    )
    p.add_argument(
        "-j", "--jobs", type=_job_count, default=None, metavar="N",
        help="build at most N targets at once, each in a process of its own (default: one per CPU)",
    )
    p.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None,
        help=f"show a progress bar of the builds on stderr (default: when stderr is a terminal and there are "
             f"at least {_PROGRESS_MIN_BUILDS} builds)",
    )


def _flag(name: str) -> str:
    """The option of a hint: ``num_ctas`` -> ``--num-ctas``."""
    return "--" + name.replace("_", "-")


def _run_compile(args: argparse.Namespace) -> int:
    compilers: dict[str, Run] = {
        ".cu": _compile_cuda_file, ".cuh": _compile_cuda_file, ".cpp": _compile_cuda_file, ".py": _compile_python_file,
    }
    suffix = args.file.suffix.lower()
    run = compilers.get(suffix)
    if run is None:
        raise _UsageError(f"{args.file}: don't know how to compile '{suffix or 'no suffix'}' files; "
                          f"expected one of {', '.join(sorted(compilers))}")
    _refuse_other_kinds_flags(args, python=run is _compile_python_file)
    return run(args)


def _refuse_other_kinds_flags(args: argparse.Namespace, python: bool) -> None:
    """Options of the other kind of input file (``-I`` for a Python file, ``--kernel`` for CUDA C++) are a usage
    error: ignoring them would build something other than what was asked for."""
    flags, kind = (_CUDA_ONLY_FLAGS, "CUDA C++ files") if python else (_PYTHON_ONLY_FLAGS, "Python files")
    for dest, flag, why in flags:
        if getattr(args, dest) not in (None, []):
            raise _UsageError(f"{flag} applies to {kind} only, and {args.file} is not one: {why}")


class _UsageError(Exception):
    """Bad command-line input: printed as ``tilejit: error: ...``, exit status 2."""


class _Failure(Exception):
    """A command that could not do its job (e.g. write an output): printed as an error, exit status 1."""


def _plural(n: int, one: str, many: str | None = None) -> str:
    """``_plural(1, "entry", "entries")`` → '1 entry'; 3 → '3 entries' (``many`` defaults to ``one`` + 's')."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _arch_list(text: str) -> list[str]:
    """``--arch sm_80,sm_90`` → ["sm_80", "sm_90"]; an option naming no target is a usage error."""
    archs = [a.strip() for a in text.split(",") if a.strip()]
    if not archs:
        raise _UsageError(f"--arch {text!r} names no target; e.g. --arch sm_90 or --arch sm_80,sm_90")
    return archs


def _targets(text: str) -> list[Target]:
    """``--arch`` parsed, each target once (``sm_90,90`` is one build)."""
    from tilejit.compiler.targets import parse_target

    return list(dict.fromkeys(parse_target(a) for a in _arch_list(text)))


def _emit_list(text: str, choices: tuple[str, ...], what: str) -> tuple[str, ...]:
    """``--emit ptx,cubin`` → ("ptx", "cubin"), each once; anything outside ``choices`` is a usage error."""
    emits = tuple(dict.fromkeys(e.strip() for e in text.split(",") if e.strip()))
    if not emits or set(emits) - set(choices):
        raise _UsageError(f"--emit {text!r}: {what} {', '.join(choices)}")
    return emits


def _output_dir(args: argparse.Namespace) -> Path:
    """The folder outputs go to (``-o``, else next to the input), created if missing."""
    out_dir: Path = args.output_dir or args.file.parent
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _Failure(f"cannot create the output folder {out_dir}: {exc.strerror or exc}") from None
    return out_dir


Echo = Callable[[str, TextIO], None]


def _print(text: str, file: TextIO) -> None:
    print(text, file=file)


def _write_output(path: Path, data: bytes, echo: Echo = _print) -> None:
    """Write one output file whole (temp file + rename, so a failed write leaves no partial file)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise _Failure(f"cannot write {path}: {exc.strerror or exc}") from None
    echo(f"wrote {path} ({_bytes(len(data))})", sys.stdout)


# Python files already run in this process, by resolved path: a build in this process does not run one again.
_LOADED: dict[str, dict[str, Any]] = {}


def _load_python_file(path: Path) -> dict[str, Any]:
    """The globals of a Python file run as ``python FILE`` would run it (its folder first on ``sys.path``), but
    not as ``__main__``. Any failure there, ``sys.exit()`` included, is a ``_Failure`` that says where."""
    import runpy

    key = str(path.resolve())
    if key in _LOADED:
        return _LOADED[key]
    if not path.is_file():
        raise _UsageError(f"cannot read {path}: no such file")
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)  # as `python FILE` does, so the file's sibling modules import
    try:
        namespace = runpy.run_path(str(path), run_name="__tilejit_compile__")
    except SystemExit as exc:
        raise _Failure(
            f"{path} called sys.exit({exc.code!r}) while being imported, so nothing was compiled; a script "
            f"that compiles must keep its own work under `if __name__ == \"__main__\":`{_where(exc, key)}"
        ) from None
    except SyntaxError as exc:
        where = f"\n  at {exc.filename}:{exc.lineno}" if exc.lineno else ""
        if exc.text and exc.offset:
            where += f"\n    {exc.text.rstrip()}\n    {' ' * (exc.offset - 1)}^"
        raise _Failure(f"cannot import {path}: SyntaxError: {exc.msg}{where}") from None
    except Exception as exc:
        raise _Failure(f"cannot import {path}: {type(exc).__name__}: {exc}{_where(exc, key)}") from None
    finally:
        with contextlib.suppress(ValueError):  # the file may have taken it off itself
            sys.path.remove(folder)
    _LOADED[key] = namespace
    return namespace


def _where(exc: BaseException, path: str) -> str:
    """Lines naming the innermost frame of ``exc``'s traceback and, if that is elsewhere, the innermost one in
    the file at ``path``; '' when the traceback has no frame."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    ours = [f for f in frames if os.path.abspath(f.filename) == path]

    def show(word: str, f: traceback.FrameSummary) -> str:
        return f"\n  {word} {f.filename}:{f.lineno} in {f.name}" + (f": {f.line.strip()}" if f.line else "")

    last = frames[-1]
    text = show("at", last)
    if ours and ours[-1] is not last:
        text += show("called from", ours[-1])
    return text


def _constants(items: list[str]) -> dict[str, Any]:
    """``-C NAME=VALUE`` options: VALUE as a Python literal, else as the string itself."""
    import ast

    constants: dict[str, Any] = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise _UsageError(f"-C {item!r}: write NAME=VALUE")
        try:
            constants[name.strip()] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            constants[name.strip()] = value
    return constants


def _compile_python_file(args: argparse.Namespace) -> int:
    import tilejit as tj
    from tilejit.api.signature import parse_signature

    emits = _emit_list(args.emit, TILE_EMITS, "for tile kernels choose from")
    if not args.kernel or args.signature is None:
        raise _UsageError("Python files need --kernel NAME and --signature TYPES (e.g. 'float32[:],float32[:]')")
    if not args.arch:
        raise _UsageError("pass --arch (e.g. --arch sm_90): tile kernels compile for a named target")
    try:
        signature = parse_signature(args.signature)
    except ValueError as exc:
        raise _UsageError(f"--signature: {exc}") from None
    constants = _constants(args.constant)
    from tilejit.api import compile as api

    hints = tuple((name, getattr(args, name)) for name, _ in _HINTS)
    try:
        for name, value in hints:
            if value is not None:
                getattr(api, f"check_{name}")(value, _flag(name))
    except ValueError as exc:
        raise _UsageError(str(exc)) from None
    targets = _targets(args.arch)
    namespace = _load_python_file(args.file)
    kernel = namespace.get(args.kernel)
    if not isinstance(kernel, tj.Kernel | tj.Fused):
        found = sorted(k for k, v in namespace.items() if isinstance(v, tj.Kernel | tj.Fused))
        raise _UsageError(f"{args.file} has no @tj.kernel named {args.kernel!r} (nor a @tj.fuse function); kernels "
                          f"there: {found or 'none'}")
    if isinstance(kernel, tj.Fused):
        if constants or args.num_ctas is not None or args.occupancy is not None:
            raise _UsageError(f"{args.kernel} is a @tj.fuse function: it takes --signature (its parameters' dtypes "
                              "and ranks), not -C, --num-ctas or --occupancy")
        signature = args.signature  # type: ignore[assignment]  # its own parser: int, float, bool are Python numbers
    from tilejit.backends.base import requested_backend

    backend = args.backend
    if any(e in _CUDA_EMITS for e in emits) and requested_backend(backend or kernel.backend) == "auto":
        backend = "cuda"  # every output of one compile, so that the CUBIN is the one of the PTX asked for
    try:
        # the signature fits and the backend is available: checked once
        art = tj.compile(kernel, signature, constants=constants, target=targets[0], backend=backend, **dict(hints))
    except TypeError as exc:
        raise _UsageError(str(exc)) from None
    _check_backend_emits(art.backend, emits, args.kernel)
    out_dir = _output_dir(args)
    if "cuda" in emits:  # so that the .cu compiles as written: `tilejit compile X.cu` or nvcc -I OUTDIR
        count = _write_headers(out_dir)
        print(f"wrote the {count} device headers the .cu files include to {out_dir / 'tilejit'}")
    path = str(args.file.resolve())
    jobs = [_TileBuild(path, args.file.stem, args.kernel, args.signature, constants, t.sm, emits, backend, hints)
            for t in targets]
    return _run_builds(jobs, args, out_dir)


def _compile_cuda_file(args: argparse.Namespace) -> int:
    from tilejit import config
    from tilejit.compiler.targets import default_target
    from tilejit.errors import TargetError

    emits = _emit_list(args.emit, EMITS, "choose from")
    try:
        source = args.file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _UsageError(f"cannot read {args.file}: {exc}") from None
    if args.arch:
        targets = _targets(args.arch)
    else:
        try:
            targets = [default_target(how="--arch sm_90")]
        except TargetError as exc:
            if config.DEFAULT_ARCH.get():
                raise  # TILEJIT_ARCH is set but not a target: its own error says why
            raise _UsageError(str(exc)) from None  # nothing to compile for: a usage error (exit 2)
    for opt in args.nvrtc_option:
        if opt.startswith(("-arch", "--gpu-architecture", "-dlto", "--dlink-time-opt")):
            raise _UsageError(f"--nvrtc-option={opt}: choose targets with --arch and LTO-IR with --emit ltoir")
    out_dir = _output_dir(args)
    options = [f"-I{args.file.parent.resolve()}"] + [f"-I{d}" for d in args.include]
    options += [f"-D{d}" for d in args.define] + list(args.nvrtc_option)
    jobs = [
        _CudaBuild(args.file.name, args.file.stem, source, tuple(options), t.sm, emits, tuple(args.name_expr))
        for t in targets
    ]
    return _run_builds(jobs, args, out_dir)


# ---------------------------------------------------------------- builds (one per target, maybe in processes)


@dataclass(frozen=True)
class _Built:
    """What one build made: output file names and contents, NVRTC's logs and lowered names; or why it failed
    (``usage``: the input was wrong, not the build)."""

    target: str
    files: list[tuple[str, bytes]] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    lowered: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    usage: bool = False


@dataclass(frozen=True)
class _CudaBuild:
    """A CUDA C++ file's outputs for one target; picklable, to run in a worker process."""

    name: str
    stem: str
    source: str
    options: tuple[str, ...]
    target: str
    emits: tuple[str, ...]
    name_expressions: tuple[str, ...]

    def build(self) -> _Built:
        from tilejit.compiler.nvrtc import CompiledProgram, compile_cuda, compile_cuda_ptx_and_cubin

        kw: dict[str, Any] = {"name": self.name, "options": self.options, "target": self.target,
                              "name_expressions": self.name_expressions}
        progs: dict[str, CompiledProgram] = {}
        if "ptx" in self.emits and "cubin" in self.emits:  # one NVRTC run gives both
            progs["ptx"], progs["cubin"] = compile_cuda_ptx_and_cubin(self.source, **kw)
        for emit in self.emits:
            if emit not in progs:
                progs[emit] = compile_cuda(self.source, output=emit, cache=False, **kw)  # type: ignore[arg-type]
        first = progs[self.emits[0]]
        return _Built(
            target=first.target.sm,
            files=[(f"{self.stem}.{first.target.sm}.{emit}", progs[emit].code) for emit in self.emits],
            logs=list(dict.fromkeys(p.log for p in progs.values() if p.log)),
            lowered=first.lowered_names,
        )


@dataclass(frozen=True)
class _TileBuild:
    """A tile kernel's outputs for one target; picklable, to run in a worker process (which runs the file)."""

    path: str
    stem: str
    kernel: str
    signature: str
    constants: dict[str, Any]
    target: str
    emits: tuple[str, ...]
    backend: str | None = None  # None: TILEJIT_BACKEND
    hints: tuple[tuple[str, int | None], ...] = ()  # (_HINTS name, value); None: the kernel's own

    def build(self) -> _Built:
        import tilejit as tj
        from tilejit.api.signature import parse_signature
        from tilejit.compiler.nvrtc import compile_cuda_ptx_and_cubin

        kernel = _load_python_file(Path(self.path)).get(self.kernel)
        if not isinstance(kernel, tj.Kernel | tj.Fused):  # the file made it in this process, but not in a worker
            raise _Failure(f"{self.path}, run again to build {self.target}, has no @tj.kernel named {self.kernel!r}")
        if isinstance(kernel, tj.Fused):
            art = kernel.compile(self.signature, target=self.target, backend=self.backend)
        else:
            art = tj.compile(kernel, parse_signature(self.signature), constants=self.constants, target=self.target,
                             backend=self.backend, **dict(self.hints))
        _check_backend_emits(art.backend, self.emits, self.kernel)
        data: dict[str, bytes] = {}
        if art.backend == "cuda" and "ptx" in self.emits and "cubin" in self.emits:  # one NVRTC run gives both
            ck = art.cuda_kernel()
            ptx, cubin = compile_cuda_ptx_and_cubin(ck.source, name=f"{art.name}.cu", headers=ck.headers,
                                                    target=art.target)
            data = {"ptx": ptx.code, "cubin": cubin.code}
        producers: dict[str, Callable[[], bytes]] = {
            "ir": lambda: art.ir_text().encode(), "cuda": lambda: art.cuda_source().encode(),
            "ptx": lambda: art.ptx().encode(), "cubin": art.cubin,
            "tileir": lambda: art.tileir_text().encode(), "tileirbc": art.tileir_bytecode,
        }
        files = [
            (f"{self.stem}.{self.kernel}.{art.target.sm}.{_TILE_SUFFIX[e]}", data[e] if e in data else producers[e]())
            for e in self.emits
        ]
        return _Built(target=art.target.sm, files=files)


def _check_backend_emits(backend: str, emits: tuple[str, ...], kernel: str) -> None:
    """Outputs only the CUDA C++ backend makes (CUDA C++, PTX) are a usage error for a kernel compiled by another."""
    wrong = [e for e in emits if e in _CUDA_EMITS and backend != "cuda"]
    if wrong:
        raise _UsageError(f"--emit {','.join(wrong)}: {kernel} compiles with the {backend} backend, which makes "
                          "CUBINs only (no CUDA C++, no PTX); pass --backend cuda for them, or --emit tileir,tileirbc "
                          "for the Tile IR it compiles")


def _build(job: _CudaBuild | _TileBuild) -> _Built:
    """Run one build, turning the errors a build may meet into its result (so a worker process reports them)."""
    try:
        return job.build()
    except (TilejitError, _Failure) as exc:
        return _Built(job.target, error=str(exc))
    except (ValueError, _UsageError) as exc:  # e.g. an NVRTC option with a NUL byte
        return _Built(job.target, error=str(exc), usage=True)


def _end_on_interrupt() -> None:
    """A worker process ends at once on Ctrl-C (which a terminal sends to the parent and every worker), even
    inside an NVRTC call and with no traceback; the parent drops the builds not yet run and exits 130. A Ctrl-C
    that came while the worker started (SIGINT held, see ``_interrupts_held``) ends it here."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C back in this block, and so in the processes it starts: a Python interpreter interrupted while
    it starts prints a traceback. SIGINT is blocked (a blocked signal stays blocked through exec, and
    ``_end_on_interrupt`` unblocks it), so one that comes meanwhile is delivered at the block's end: this
    process then stops (KeyboardInterrupt), where ignoring it lost it. Without signal masks (Windows) it is
    ignored in the block instead."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    if hasattr(signal, "pthread_sigmask"):
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if before is None else before)


def _cpu_count() -> int:
    """CPUs this process may run on."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


def _run_builds(jobs: Sequence[_CudaBuild | _TileBuild], args: argparse.Namespace, out_dir: Path) -> int:
    """Build every job (at most ``-j`` at once, each in a worker process when more than one runs) and write what
    each made as it finishes; a failed build is reported with its target and the others are still written."""
    workers = min(len(jobs), args.jobs or _cpu_count())
    show = args.progress if args.progress is not None else (
        len(jobs) >= _PROGRESS_MIN_BUILDS and sys.stderr.isatty()
    )
    if len(jobs) == 1 and not show:
        built = _build(jobs[0])
        if built.error is not None:
            raise (_UsageError if built.usage else _Failure)(built.error)
        _save(built, out_dir, _print)
        return 0

    bar: Any = None
    echo: Echo = _print
    if show:
        from tqdm import tqdm  # only here: a progress bar is all the CLI wants of it

        bar = tqdm(total=len(jobs), desc=f"compiling {args.file.name}", unit="target", file=sys.stderr)

        def echo(text: str, file: TextIO) -> None:
            bar.write(text, file=file)  # above the bar, which then redraws
    failed: list[_Built] = []
    try:
        for built in _results(jobs, workers):
            if built.error is None:
                try:
                    _save(built, out_dir, echo)
                except _Failure as exc:
                    built = _Built(built.target, error=str(exc))
            if built.error is not None:
                failed.append(built)
                echo(f"tilejit {args.command}: error: {built.target}: {built.error}", sys.stderr)
            if bar is not None:
                bar.set_postfix_str(built.target, refresh=False)
                bar.update()
    finally:
        if bar is not None:
            bar.close()
    if not failed:
        return 0
    names = ", ".join(b.target for b in failed)
    print(f"tilejit {args.command}: error: {len(failed)} of {_plural(len(jobs), 'build')} failed ({names})"
          + ("" if len(failed) == len(jobs) else "; the others' outputs were written"), file=sys.stderr)
    return 2 if all(b.usage for b in failed) else 1


def _save(built: _Built, out_dir: Path, echo: Echo) -> None:
    """Write one build's files into ``out_dir``, then NVRTC's warnings and the lowered names."""
    for name, data in built.files:
        _write_output(out_dir / name, data, echo)
    for log in built.logs:
        echo(_indent(log), sys.stderr)
    for expr, lowered in built.lowered.items():
        echo(f"  {expr} -> {lowered}", sys.stdout)


def _results(jobs: Sequence[_CudaBuild | _TileBuild], workers: int) -> Iterator[_Built]:
    """Each job's result as it finishes: in this process one after another, or in ``workers`` spawned processes
    (spawned, not forked: a fork of a process that has used the CUDA driver or NVRTC is not safe)."""
    if workers <= 1:
        yield from (_build(job) for job in jobs)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_end_on_interrupt)
    try:
        with _interrupts_held():  # the workers start now (at submit), holding Ctrl-C back until they are ready
            futures = {pool.submit(_build, job): job for job in jobs}
        for future in as_completed(futures):
            try:
                yield future.result()
            except BrokenProcessPool as exc:
                yield _Built(futures[future].target, error=f"its build process died ({exc})")
    except BaseException:  # Ctrl-C, or the caller stopped: builds not started are dropped
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


# ---------------------------------------------------------------- include-dir


def _include_dir() -> str | None:
    """The include path of the device headers as plain files (``-I`` for generated CUDA C++), or None when the
    package's files are not plain files (a zipped install)."""
    from tilejit.backends.cuda_backend import HEADER_NAMES, header_folder, include_folder

    if all(os.path.isfile(os.path.join(header_folder(), f"{n}.cuh")) for n in HEADER_NAMES):
        return include_folder()
    return None


def _configure_include_dir(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Print the include path of the CUDA backend's device headers: CUDA C++ that tilejit generates (tilejit "
        "compile --emit cuda, TILEJIT_DUMP_DIR, art.cuda_source()) includes <tilejit/tilejit.cuh>, so "
        'nvcc -I "$(tilejit include-dir)" compiles it.'
    )
    p.add_argument("--copy-to", type=Path, default=None, metavar="DIR",
                   help="write the headers to DIR/tilejit/ (e.g. beside generated .cu files) and print DIR")


def _run_include_dir(args: argparse.Namespace) -> int:
    if args.copy_to is not None:
        _write_headers(args.copy_to)
        print(args.copy_to)
        return 0
    folder = _include_dir()
    if folder is None:
        raise _Failure("the device headers are not plain files in this install (a zipped package?); "
                       "`tilejit include-dir --copy-to DIR` writes them to DIR/tilejit/")
    print(folder)
    return 0


def _write_headers(folder: Path) -> int:
    """Write the device headers generated CUDA C++ includes into ``folder/tilejit/``, each file whole; how many."""
    from tilejit.backends.cuda.abi import read_headers

    headers = read_headers()
    for name, text in headers:
        path = folder / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _Failure(f"cannot create {path.parent}: {exc.strerror or exc}") from None
        _write_output(path, text.encode(), lambda line, file: None)
    return len(headers)


# ---------------------------------------------------------------- cache


def _configure_cache(p: argparse.ArgumentParser) -> None:
    p.description = "Inspect or empty the disk cache of compiled kernels and autotuned choices."
    p.add_argument("action", choices=("info", "clear"),
                   help="info: location, size and autotuned choices; clear: remove every entry")


def _cache_state(cache: DiskCache) -> str:
    """'on', or why new entries are not stored ('off (TILEJIT_CACHE=0)', 'off: cannot write to ...')."""
    from tilejit import config

    if not config.CACHE.get():
        return f"off ({config.CACHE.name}=0)"
    reason = cache.unwritable_reason()
    return "on" if reason is None else f"off: {reason}"


def _run_cache(args: argparse.Namespace) -> int:
    from tilejit import config
    from tilejit.compiler.cache import TUNED_FOLDER, default_cache

    cache, tuned = default_cache(), default_cache(TUNED_FOLDER)
    if args.action == "clear":
        try:
            n = cache.clear()
            t = tuned.clear()
        except OSError as exc:
            raise _Failure(exc.strerror or str(exc)) from None
        with contextlib.suppress(OSError):
            os.rmdir(tuned.directory)  # the folder only when nothing else is left in it
        also = f" and {_plural(t, 'autotuned choice', 'autotuned choices')}" if t else ""
        print(f"removed {_plural(n, 'entry', 'entries')}{also} from {cache.directory}")
        return 0
    info = cache.info()
    print(f"directory: {info['dir']}")
    print(f"entries:   {info['entries']}")
    print(f"size:      {_bytes(info['bytes'])} ({info['bytes']} bytes)")
    print(f"max size:  {_bytes(info['max_bytes'])} ({config.CACHE_MAX_BYTES.name})")
    print(f"caching:   {_cache_state(cache)}")
    choices = _tuned_choices(tuned)
    print(f"autotuned: {len(choices)}" + (" (kernel, key -> config, when, GPU)" if choices else ""))
    for line in choices:
        print(f"  {line}")
    return 0


def _tuned_choices(tuned: DiskCache) -> list[str]:
    """One line for each autotuned choice in ``tuned``'s folder, oldest first."""
    import time

    from tilejit.api.autotune import RECORD

    found = []
    for _, entry in tuned.entries():
        if entry.get("record") != RECORD:
            continue
        when = entry.get("when")
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when)) if isinstance(when, int | float) else "?"
        key = entry.get("key")
        key_text = ", ".join(map(str, key)) if isinstance(key, list) and key else "()"
        found.append((stamp, f"{entry.get('kernel')}, {key_text} -> {entry.get('config')}, {stamp}, "
                             f"{entry.get('device')}"))
    return [line for _, line in sorted(found)]


COMMANDS: dict[str, tuple[str, Configure, Run]] = {
    "doctor": ("show what tilejit finds on this machine", _configure_doctor, _run_doctor),
    "compile": ("compile a CUDA C++ file to PTX / CUBIN / LTO-IR", _configure_compile, _run_compile),
    "cache": ("inspect or clear the disk cache", _configure_cache, _run_cache),
    "include-dir": ("print the include path of the device headers generated CUDA C++ needs", _configure_include_dir,
                    _run_include_dir),
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand of ``COMMANDS``."""
    import tilejit

    parser = argparse.ArgumentParser(prog="tilejit", description="GPU tile kernels in Python, compiled anywhere.")
    parser.add_argument("--version", action="version", version=f"tilejit {tilejit.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (help_text, configure, run) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        configure(p)
        p.set_defaults(_run=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tilejit`` console script and ``python -m tilejit``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Run = args._run
    try:
        return run(args)
    except _UsageError as exc:
        parser.exit(2, f"tilejit {args.command}: error: {exc}\n")
    except (TilejitError, _Failure) as exc:
        print(f"tilejit {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `tilejit doctor | head -3`: the reader is gone, so stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the flush at exit would fail again, with a traceback
        return 141  # 128 + SIGPIPE, as a shell reports a process that a closed pipe ended
    return 0


if __name__ == "__main__":
    sys.exit(main())
