"""The ``tilejit`` command: ``doctor`` (what was found where), ``compile`` (CUDA C++ → PTX/CUBIN/LTO-IR), ``cache``.

Each subcommand is a ``(configure, run)`` pair in ``COMMANDS``, so new ones plug in without touching ``main``.
Expected failures (compile errors, bad targets, missing libraries) print a message and exit 1; no traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from tilejit.errors import TilejitError

if TYPE_CHECKING:
    from tilejit.compiler.cache import DiskCache

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
                "targets": format_targets(archs)}

    def probe_nvjitlink() -> dict[str, Any]:
        from tilejit.bindings.nvjitlink import nvjitlink

        jl = nvjitlink()
        return {"path": jl.path, "version": ".".join(map(str, jl.version))}

    def probe_driver() -> dict[str, Any]:
        from tilejit.bindings.driver import driver, format_version

        drv = driver()
        return {"path": drv.path, "version": f"CUDA {format_version(drv.version)}"}

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

    print("\nnvJitLink (LTO linker, optional)", file=out)
    found = _probe("nvJitLink", probe_nvjitlink)
    if "error" in found:
        print("  not found:", file=out)
        print(_indent(str(found["error"])), file=out)
    else:
        print(f"  found: {found['path']}", file=out)
        print(f"  version: {found['version']}", file=out)

    print("\nCUDA driver", file=out)
    found = _probe("the CUDA driver", probe_driver)
    driver_ok = "error" not in found
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

    print("\nDisk cache", file=out)
    try:
        from tilejit.compiler.cache import default_cache

        cache = default_cache()
        info = cache.info()
        print(f"  {info['dir']}: {info['entries']} entries, {_bytes(info['bytes'])} of "
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
    print(f"Summary: ready: {len(gpus)} GPU(s) ({', '.join(sorted(set(gpus)))}); kernels compile and run here, "
          f"and you can compile for any of {span}.", file=out)
    return 0


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


# ---------------------------------------------------------------- compile

EMITS = ("ptx", "cubin", "ltoir")


def _configure_compile(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Compile a CUDA C++ file with NVRTC, writing FILE.<arch>.ptx / .cubin / .ltoir; or a tile kernel of a "
        "Python file (--kernel, --signature, -C), writing FILE.<kernel>.<arch>.ir / .cu / .ptx / .cubin. "
        "Needs no GPU."
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
    p.add_argument("--emit", default="cubin", help="outputs, comma-separated from ptx, cubin, ltoir (default: cubin)")
    p.add_argument("-o", "--output-dir", type=Path, default=None, help="folder for outputs (default: next to FILE)")
    p.add_argument("-I", dest="include", action="append", default=[], metavar="DIR", help="add an include folder")
    p.add_argument("-D", dest="define", action="append", default=[], metavar="NAME[=VALUE]", help="define a macro")
    p.add_argument(
        "--name-expr", action="append", default=[], metavar="EXPR",
        help="a kernel name expression (e.g. 'add<float>') whose mangled name to print",
    )
    p.add_argument(
        "-X", "--nvrtc-option", action="append", default=[], metavar="OPT",
        help="pass an option to NVRTC as is, e.g. --nvrtc-option=--use_fast_math",
    )


def _run_compile(args: argparse.Namespace) -> int:
    compilers: dict[str, Run] = {
        ".cu": _compile_cuda_file, ".cuh": _compile_cuda_file, ".cpp": _compile_cuda_file, ".py": _compile_python_file,
    }
    suffix = args.file.suffix.lower()
    run = compilers.get(suffix)
    if run is None:
        raise _UsageError(f"{args.file}: don't know how to compile '{suffix or 'no suffix'}' files; "
                          f"expected one of {', '.join(sorted(compilers))}")
    return run(args)


class _UsageError(Exception):
    """Bad command-line input: printed as ``tilejit: error: ...``, exit status 2."""


class _Failure(Exception):
    """A command that could not do its job (e.g. write an output): printed as an error, exit status 1."""


TILE_EMITS = ("ir", "cuda", "ptx", "cubin")


def _arch_list(text: str) -> list[str]:
    """``--arch sm_80,sm_90`` → ["sm_80", "sm_90"]; an option naming no target is a usage error."""
    archs = [a.strip() for a in text.split(",") if a.strip()]
    if not archs:
        raise _UsageError(f"--arch {text!r} names no target; e.g. --arch sm_90 or --arch sm_80,sm_90")
    return archs


def _output_dir(args: argparse.Namespace) -> Path:
    """The folder outputs go to (``-o``, else next to the input), created if missing."""
    out_dir: Path = args.output_dir or args.file.parent
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _Failure(f"cannot create the output folder {out_dir}: {exc.strerror or exc}") from None
    return out_dir


def _write_output(path: Path, data: bytes) -> None:
    """Write one output file whole (temp file + rename, so a failed write leaves no partial file)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise _Failure(f"cannot write {path}: {exc.strerror or exc}") from None
    print(f"wrote {path} ({_bytes(len(data))})")


def _parse_param_type(text: str) -> object:
    """'float32[:,:]' / 'f16[:]' → an array type; 'int32' / 'float' → a scalar type."""
    from tilejit.language.ir.types import BY_NAME

    text = text.strip()
    name, _, rest = text.partition("[")
    if name in ("int", "float", "bool") and not rest:
        return {"int": int, "float": float, "bool": bool}[name]
    dtype = BY_NAME.get(name)
    if dtype is None:
        raise _UsageError(f"--signature: unknown type {text!r}; use e.g. float32[:,:], f16[:], int32, float")
    if not rest:
        return dtype
    dims = rest[:-1].replace(" ", "").split(",") if rest.endswith("]") else []
    last = dims[-1] if dims else ""
    if not dims or last not in (":", "::1") or any(d != ":" for d in dims[:-1]):
        raise _UsageError(
            f"--signature: {text!r}: write arrays as dtype[:] (rank 1) or dtype[:,:] (rank 2), "
            "with ::1 last for unit inner stride and 16-byte-aligned rows (e.g. f16[:,::1])"
        )
    return dtype[(slice(None),) * (len(dims) - 1) + (slice(None, None, 1) if last == "::1" else slice(None),)]


def _split_signature(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [*parts, cur] if cur.strip() else parts


def _compile_python_file(args: argparse.Namespace) -> int:
    import ast
    import runpy

    import tilejit as tj

    emits = [e.strip() for e in args.emit.split(",") if e.strip()]
    if not emits or set(emits) - set(TILE_EMITS):
        raise _UsageError(f"--emit {args.emit!r}: for tile kernels choose from {', '.join(TILE_EMITS)}")
    if not args.kernel or args.signature is None:
        raise _UsageError("Python files need --kernel NAME and --signature TYPES (e.g. 'float32[:],float32[:]')")
    if not args.arch:
        raise _UsageError("pass --arch (e.g. --arch sm_90): tile kernels compile for a named target")
    folder = str(args.file.resolve().parent)
    sys.path.insert(0, folder)  # as `python FILE` does, so the file's sibling modules import
    try:
        namespace = runpy.run_path(str(args.file), run_name="__tilejit_compile__")
    except Exception as exc:
        raise _UsageError(f"cannot load {args.file}: {type(exc).__name__}: {exc}") from None
    finally:
        sys.path.remove(folder)
    kernel = namespace.get(args.kernel)
    if not isinstance(kernel, tj.Kernel):
        found = sorted(k for k, v in namespace.items() if isinstance(v, tj.Kernel))
        raise _UsageError(f"{args.file} has no @tj.kernel named {args.kernel!r}; kernels there: {found or 'none'}")
    signature = [_parse_param_type(t) for t in _split_signature(args.signature)]
    constants: dict[str, object] = {}
    for item in args.constant:
        name, eq, value = item.partition("=")
        if not eq:
            raise _UsageError(f"-C {item!r}: write NAME=VALUE")
        try:
            constants[name.strip()] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            constants[name.strip()] = value
    archs = _arch_list(args.arch)
    out_dir = _output_dir(args)
    suffix = {"ir": "ir", "cuda": "cu", "ptx": "ptx", "cubin": "cubin"}
    for arch in archs:
        try:
            art = tj.compile(kernel, signature, constants=constants, target=arch)
        except TypeError as exc:
            raise _UsageError(str(exc)) from None
        for emit in emits:
            producers: dict[str, Callable[[], bytes | str]] = {
                "ir": art.ir_text, "cuda": art.cuda_source, "ptx": art.ptx, "cubin": art.cubin,
            }
            data = producers[emit]()
            _write_output(out_dir / f"{args.file.stem}.{args.kernel}.{art.target.sm}.{suffix[emit]}",
                          data if isinstance(data, bytes) else data.encode("utf-8"))
    return 0


def _compile_cuda_file(args: argparse.Namespace) -> int:
    from tilejit import config
    from tilejit.compiler.nvrtc import compile_cuda, default_target
    from tilejit.compiler.targets import parse_target
    from tilejit.errors import TargetError

    emits = [e.strip() for e in args.emit.split(",") if e.strip()]
    bad = [e for e in emits if e not in EMITS]
    if bad or not emits:
        raise _UsageError(f"--emit {args.emit!r}: choose from {', '.join(EMITS)}")
    try:
        source = args.file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _UsageError(f"cannot read {args.file}: {exc}") from None
    if args.arch:
        targets = [parse_target(a) for a in _arch_list(args.arch)]
    else:
        try:
            targets = [default_target()]
        except TargetError:
            if config.DEFAULT_ARCH.get():
                raise  # TILEJIT_ARCH is set but not a target: its own error says why
            raise _UsageError("no GPU here to choose a target from: pass --arch (e.g. --arch sm_90) "
                              "or set TILEJIT_ARCH") from None
    for opt in args.nvrtc_option:
        if opt.startswith(("-arch", "--gpu-architecture", "-dlto", "--dlink-time-opt")):
            raise _UsageError(f"--nvrtc-option={opt}: choose targets with --arch and LTO-IR with --emit ltoir")
    out_dir = _output_dir(args)
    options = [f"-I{args.file.parent.resolve()}"] + [f"-I{d}" for d in args.include]
    options += [f"-D{d}" for d in args.define] + list(args.nvrtc_option)
    for target in targets:
        for emit in emits:
            try:
                prog = compile_cuda(
                    source, name=args.file.name, options=options, target=target, output=emit,  # type: ignore[arg-type]
                    name_expressions=args.name_expr, cache=False,
                )
            except TilejitError:
                raise
            except ValueError as exc:
                raise _UsageError(str(exc)) from None
            _write_output(out_dir / f"{args.file.stem}.{target.sm}.{emit}", prog.code)
            if prog.log:
                print(_indent(prog.log), file=sys.stderr)
        for expr, lowered in prog.lowered_names.items():
            print(f"  {expr} -> {lowered}")
    return 0


# ---------------------------------------------------------------- cache


def _configure_cache(p: argparse.ArgumentParser) -> None:
    p.description = "Inspect or empty the disk cache of compiled kernels."
    p.add_argument("action", choices=("info", "clear"), help="info: location and size; clear: remove every entry")


def _cache_state(cache: DiskCache) -> str:
    """'on', or why new entries are not stored ('off (TILEJIT_CACHE=0)', 'off: cannot write to ...')."""
    from tilejit import config

    if not config.CACHE.get():
        return f"off ({config.CACHE.name}=0)"
    reason = cache.unwritable_reason()
    return "on" if reason is None else f"off: {reason}"


def _run_cache(args: argparse.Namespace) -> int:
    from tilejit import config
    from tilejit.compiler.cache import default_cache

    cache = default_cache()
    if args.action == "clear":
        try:
            n = cache.clear()
        except OSError as exc:
            raise _Failure(exc.strerror or str(exc)) from None
        print(f"removed {n} entries from {cache.directory}")
        return 0
    info = cache.info()
    print(f"directory: {info['dir']}")
    print(f"entries:   {info['entries']}")
    print(f"size:      {_bytes(info['bytes'])} ({info['bytes']} bytes)")
    print(f"max size:  {_bytes(info['max_bytes'])} ({config.CACHE_MAX_BYTES.name})")
    print(f"caching:   {_cache_state(cache)}")
    return 0


COMMANDS: dict[str, tuple[str, Configure, Run]] = {
    "doctor": ("show what tilejit finds on this machine", _configure_doctor, _run_doctor),
    "compile": ("compile a CUDA C++ file to PTX / CUBIN / LTO-IR", _configure_compile, _run_compile),
    "cache": ("inspect or clear the disk cache", _configure_cache, _run_cache),
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
