"""Every exception and warning tilejit raises on purpose, in one place so users can catch them by type
(each is also a name of ``tilejit``: ``tj.TargetError``)."""

from __future__ import annotations

from tilejit.records import Record


class TilejitError(Exception):
    """Base class of all tilejit errors."""


class Attempt(Record):
    """One place a library was looked for, and why it was not used."""

    _fields = ("where", "why")
    __slots__ = _fields
    where: str
    why: str

    def __init__(self, where: str, why: str) -> None:
        self._init(where, why)


class LibraryNotFoundError(TilejitError, OSError):
    """A CUDA library (driver, NVRTC, nvJitLink, tileiras) could not be loaded.

    The message lists every place tried and why each failed, then what to install.
    """

    def __init__(self, library: str, attempts: list[Attempt], hint: str) -> None:
        self.library = library
        self.attempts = list(attempts)
        self.hint = hint
        lines = [f"could not load {library}; tried:"]
        lines += [f"  - {a.where}: {a.why}" for a in self.attempts] or ["  (nowhere)"]
        lines.append(hint)
        super().__init__("\n".join(lines))

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle through ``__init__``'s own arguments (the default passes only the message, which ``__init__``
        cannot take), so the error crosses a process boundary, e.g. out of a ProcessPoolExecutor worker."""
        return type(self), (self.library, self.attempts, self.hint), self.__dict__


class CUDAError(TilejitError, RuntimeError):
    """A CUDA driver call returned an error code."""

    def __init__(self, function: str, code: int, name: str, message: str, detail: str = "") -> None:
        self.function = function
        self.code = code
        self.name = name
        self.message = message
        self.detail = detail
        text = f"{function} failed with {name} ({code}): {message}"
        if detail:
            text += "\n" + detail
        super().__init__(text)

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle through ``__init__``'s own arguments, as ``LibraryNotFoundError`` does."""
        return type(self), (self.function, self.code, self.name, self.message, self.detail), self.__dict__


class DriverVersionError(TilejitError, RuntimeError):
    """The installed driver is too old for what is being loaded (e.g. PTX from a newer NVRTC)."""


class CompileError(TilejitError, RuntimeError):
    """NVRTC, nvJitLink or tileiras rejected a program; the message carries the log and source lines."""

    def __init__(self, message: str, log: str = "") -> None:
        self.log = log
        super().__init__(message)


class ConfigError(TilejitError, ValueError):
    """A ``TILEJIT_*`` environment variable has a value that cannot be used; the message names it."""


class TargetError(TilejitError, ValueError):
    """A compile target (e.g. ``sm_90``) is malformed or not supported by the compiler found."""


class TileCompileError(TilejitError):
    """An error in user kernel code, located at file:line with the source line and a caret.

    Raised for unsupported syntax, shape or dtype mismatches, non-constants where a constant is
    required, and every other problem the front end finds in a kernel.
    """

    def __init__(
        self,
        message: str,
        filename: str | None = None,
        line: int | None = None,
        col: int | None = None,
        source_line: str | None = None,
    ) -> None:
        self.message = message
        self.filename = filename
        self.line = line
        self.col = col
        self.source_line = source_line
        super().__init__(self._format())

    def _format(self) -> str:
        if self.filename is None or self.line is None:
            return self.message
        text = f"{self.filename}:{self.line}:{(self.col or 0) + 1}: error: {self.message}"
        if self.source_line is not None:
            stripped = self.source_line.rstrip("\n")
            text += f"\n    {stripped}"
            if self.col is not None:
                # the caret's indent copies the line's tabs, so it lines up at any tab width
                pad = "".join(c if c == "\t" else " " for c in stripped[:self.col])
                text += "\n    " + pad + " " * (self.col - len(pad)) + "^"
        return text


class TileIRUnsupportedError(TileCompileError):
    """The Tile IR backend cannot express something in a kernel (a located error suggesting ``backend="cuda"``):
    ``backend="auto"`` compiles such a kernel with CUDA C++ instead."""


class TileirasError(CompileError):
    """tileiras failed, crashed or made an unusable CUBIN on the bytecode tilejit wrote for a kernel: a toolchain
    failure, not a mistake in the kernel, so ``backend="auto"`` compiles such a kernel with CUDA C++ instead.
    ``lasting`` is False for a failure that may not recur (a timeout, a kill, a tileiras that could not start):
    such a refusal is not remembered in the disk cache."""

    def __init__(self, message: str, log: str = "", *, lasting: bool = True) -> None:
        self.lasting = lasting
        super().__init__(message, log)


class LaunchError(TilejitError, TypeError):
    """Kernel arguments do not match the kernel's parameters (wrong type, dtype, rank or count)."""


class TensorMapError(LaunchError):
    """An array, box or swizzle that no TMA tensor map can describe (``cuTensorMapEncodeTiled``'s rules), or a
    driver without that entry point (``tilejit.runtime.tensormap``)."""


class NotDeviceArrayError(TilejitError, TypeError):
    """``obj`` is not device memory: a host (CPU) array, or not an array at all. ``tilejit.asarray``
    copies such objects from the host; any other error of :func:`tilejit.runtime.interop.as_view` means a
    device array was refused (its dtype, layout, ...), and says why."""


class IRVerificationError(TilejitError, RuntimeError):
    """Invalid tile IR (an internal error of the compiler)."""


class AutotuneError(TilejitError, RuntimeError):
    """Every config an autotuned kernel offers failed to compile or launch; the message names each and why
    (``failures``: (config, exception) pairs), or an autotuner was declared wrongly."""

    failures: list[tuple[object, BaseException]]

    def __init__(self, message: str, failures: list[tuple[object, BaseException]] | None = None) -> None:
        self.failures = list(failures or [])
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle through ``__init__``'s own arguments, as ``LibraryNotFoundError`` does."""
        return type(self), (str(self), self.failures), self.__dict__


class CacheWarning(UserWarning):
    """The disk cache could not be written (read-only or full folder); tilejit keeps working without it."""


class DumpWarning(UserWarning):
    """A kernel's stages could not be written to ``TILEJIT_DUMP_DIR``; the kernel itself compiled and works."""


def refuse_lone_surrogates(what: str, text: str) -> None:
    """Raise ``ValueError`` naming ``what`` if ``text`` holds a lone surrogate (left by decoding bytes with
    ``errors="surrogateescape"``): it has no UTF-8 form, so NVRTC and the disk cache cannot take it.
    ASCII text costs one check."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        line = text.count("\n", 0, exc.start) + 1
        raise ValueError(
            f"{what} contains a lone surrogate {text[exc.start]!r} at index {exc.start} (line {line}), which has no "
            "UTF-8 form; was it decoded with errors='surrogateescape'? Decode it as UTF-8 text"
        ) from None


__all__ = [
    "Attempt", "AutotuneError", "CUDAError", "CacheWarning", "CompileError", "ConfigError", "DriverVersionError",
    "DumpWarning",
    "IRVerificationError", "LaunchError", "LibraryNotFoundError", "NotDeviceArrayError", "TargetError",
    "TensorMapError", "TileCompileError", "TileIRUnsupportedError", "TileirasError", "TilejitError",
    "refuse_lone_surrogates",
]
