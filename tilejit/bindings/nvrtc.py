"""ctypes bindings of NVRTC (CUDA 11.0 through 13.x): find, load and bind; no policy."""

from __future__ import annotations

import ctypes
import os
import re
import threading
from collections.abc import Iterator
from ctypes import POINTER, c_char_p, c_int, c_size_t, c_void_p
from typing import Any

from tilejit.bindings import loader
from tilejit.bindings.loader import Candidate
from tilejit.errors import Attempt, CompileError, LibraryNotFoundError
from tilejit.records import Record

nvrtcResult = c_int
nvrtcProgram = c_void_p

NVRTC_SUCCESS = 0
NVRTC_ERROR_OUT_OF_MEMORY = 1
NVRTC_ERROR_PROGRAM_CREATION_FAILURE = 2
NVRTC_ERROR_INVALID_INPUT = 3
NVRTC_ERROR_INVALID_PROGRAM = 4
NVRTC_ERROR_INVALID_OPTION = 5
NVRTC_ERROR_COMPILATION = 6
NVRTC_ERROR_BUILTIN_OPERATION_FAILURE = 7
NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION = 8
NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION = 9
NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID = 10
NVRTC_ERROR_INTERNAL_ERROR = 11

# Where NVRTC is looked for (data in the loader, so that a cache key can name NVRTC's file without
# importing this module).
LIBRARY = loader.NVRTC_LIBRARY
SONAMES = LIBRARY.sonames
DLL_NAMES = LIBRARY.dll_names
PIP_SUBDIRS = LIBRARY.pip_subdirs
PIP_SUBDIRS_WINDOWS = LIBRARY.pip_subdirs_windows
NVRTC_HINT = LIBRARY.hint
_BUILTINS_RX = r"libnvrtc-builtins\.so\.\d+\.\d+"

# Architectures of NVRTC releases that predate nvrtcGetSupportedArchs (added in 11.2).
_ARCHS_BEFORE_11_2: dict[tuple[int, int], list[int]] = {
    (11, 0): [30, 32, 35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80],
    (11, 1): [35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86],
}


class Entry(Record):
    """One NVRTC function: name, ctypes signature, and whether every supported release has it."""

    _fields = ("name", "argtypes", "required", "restype")
    __slots__ = _fields
    name: str
    argtypes: tuple[Any, ...]
    required: bool
    restype: Any

    def __init__(self, name: str, argtypes: tuple[Any, ...], required: bool = True, restype: Any = nvrtcResult) -> None:
        self._init(name, argtypes, required, restype)


_P = POINTER
_CSTRS = POINTER(c_char_p)  # const char * const *
ENTRIES: tuple[Entry, ...] = (
    Entry("nvrtcGetErrorString", (nvrtcResult,), restype=c_char_p),
    Entry("nvrtcVersion", (_P(c_int), _P(c_int))),
    Entry("nvrtcGetNumSupportedArchs", (_P(c_int),), required=False),  # 11.2+
    Entry("nvrtcGetSupportedArchs", (_P(c_int),), required=False),  # 11.2+
    Entry("nvrtcCreateProgram", (_P(nvrtcProgram), c_char_p, c_char_p, c_int, _CSTRS, _CSTRS)),
    Entry("nvrtcDestroyProgram", (_P(nvrtcProgram),)),
    Entry("nvrtcCompileProgram", (nvrtcProgram, c_int, _CSTRS)),
    Entry("nvrtcGetPTXSize", (nvrtcProgram, _P(c_size_t))),
    Entry("nvrtcGetPTX", (nvrtcProgram, c_char_p)),
    Entry("nvrtcGetCUBINSize", (nvrtcProgram, _P(c_size_t)), required=False),  # 11.1+
    Entry("nvrtcGetCUBIN", (nvrtcProgram, c_char_p), required=False),  # 11.1+
    Entry("nvrtcGetLTOIRSize", (nvrtcProgram, _P(c_size_t)), required=False),  # 12.0+
    Entry("nvrtcGetLTOIR", (nvrtcProgram, c_char_p), required=False),  # 12.0+
    Entry("nvrtcGetProgramLogSize", (nvrtcProgram, _P(c_size_t))),
    Entry("nvrtcGetProgramLog", (nvrtcProgram, c_char_p)),
    Entry("nvrtcAddNameExpression", (nvrtcProgram, c_char_p)),
    Entry("nvrtcGetLoweredName", (nvrtcProgram, c_char_p, _P(c_char_p))),
)
ENTRY_BY_NAME: dict[str, Entry] = {e.name: e for e in ENTRIES}


def _expected_major(path: str) -> int | None:
    """The CUDA major a library file name promises (libnvrtc.so.12 -> 12, nvrtc64_112_0.dll -> 11)."""
    base = os.path.basename(path)
    m = re.match(r"libnvrtc\.so\.(\d+)", base) or re.match(r"nvrtc64_(\d+?)\d_0\.dll", base)
    return int(m.group(1)) if m else None


def _query_version(lib: ctypes.CDLL) -> tuple[int, int] | None:
    fn = getattr(lib, "nvrtcVersion", None)
    if fn is None:
        return None
    fn.argtypes = [POINTER(c_int), POINTER(c_int)]
    fn.restype = c_int
    major, minor = c_int(0), c_int(0)
    if fn(ctypes.byref(major), ctypes.byref(minor)) != 0:
        return None
    return major.value, minor.value


def _reject(lib: ctypes.CDLL, path: str) -> str | None:
    version = _query_version(lib)
    if version is None:
        return "not NVRTC (nvrtcVersion missing or failing)"
    expected = _expected_major(path)
    if expected is not None and version[0] != expected:
        return f"wrong version: file name says CUDA {expected} but nvrtcVersion reports {version[0]}.{version[1]}"
    if version[0] < 11:
        return f"NVRTC {version[0]}.{version[1]} is too old: tilejit needs NVRTC 11.0 or newer"
    return None


def _preload_builtins(path: str) -> None:
    """Make the libnvrtc-builtins shipped next to ``path`` the one NVRTC finds when it dlopens it."""
    folder = os.path.dirname(os.path.abspath(path))
    if loader.IS_WINDOWS:
        if hasattr(os, "add_dll_directory"):
            os.add_dll_directory(folder)
        return
    loader.preload_global(folder, _BUILTINS_RX)


def nvrtc_candidates() -> Iterator[Candidate]:
    """Every place NVRTC is looked for, in order (lazily)."""
    return loader.toolkit_candidates(LIBRARY)


class NVRTC:
    """A loaded NVRTC: every function of ``ENTRIES`` as an attribute (None when optional and absent)."""

    path: str
    version: tuple[int, int]

    nvrtcGetErrorString: Any
    nvrtcVersion: Any
    nvrtcGetNumSupportedArchs: Any
    nvrtcGetSupportedArchs: Any
    nvrtcCreateProgram: Any
    nvrtcDestroyProgram: Any
    nvrtcCompileProgram: Any
    nvrtcGetPTXSize: Any
    nvrtcGetPTX: Any
    nvrtcGetCUBINSize: Any
    nvrtcGetCUBIN: Any
    nvrtcGetLTOIRSize: Any
    nvrtcGetLTOIR: Any
    nvrtcGetProgramLogSize: Any
    nvrtcGetProgramLog: Any
    nvrtcAddNameExpression: Any
    nvrtcGetLoweredName: Any

    def __init__(self, lib: ctypes.CDLL, path: str) -> None:
        self._lib = lib
        self.path = path
        for entry in ENTRIES:
            fn = getattr(lib, entry.name, None)
            if fn is None:
                if entry.required:
                    raise LibraryNotFoundError(
                        "NVRTC", [Attempt(path, f"required function {entry.name} is missing")], NVRTC_HINT
                    )
                setattr(self, entry.name, None)
                continue
            fn.argtypes = list(entry.argtypes)
            fn.restype = entry.restype
            setattr(self, entry.name, fn)
        major, minor = c_int(0), c_int(0)
        self.check(self.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        self.version = (major.value, minor.value)
        self._archs: list[int] | None = None

    def has(self, name: str) -> bool:
        """Whether the function ``name`` exists in this NVRTC."""
        if name not in ENTRY_BY_NAME:
            raise AttributeError(f"{name!r} is not an NVRTC function tilejit binds")
        return getattr(self, name) is not None

    def error_string(self, status: int) -> str:
        text = self.nvrtcGetErrorString(status)
        return text.decode(errors="replace") if text else f"NVRTC error {status}"

    def check(self, status: int, function: str) -> None:
        """Raise CompileError when an NVRTC call returned non-zero."""
        if status != 0:
            raise CompileError(f"{function}: {self.error_string(status)} ({status})")

    def supported_archs(self) -> list[int]:
        """The SM versions this NVRTC can compile for, ascending, e.g. [50, 52, ..., 90, 100, 120]."""
        if self._archs is None:
            if self.nvrtcGetNumSupportedArchs is None or self.nvrtcGetSupportedArchs is None:
                self._archs = list(_ARCHS_BEFORE_11_2.get(self.version, []))
            else:
                count = c_int(0)
                self.check(self.nvrtcGetNumSupportedArchs(ctypes.byref(count)), "nvrtcGetNumSupportedArchs")
                archs = (c_int * count.value)()
                self.check(self.nvrtcGetSupportedArchs(archs), "nvrtcGetSupportedArchs")
                self._archs = sorted(archs)
        return list(self._archs)

    def __repr__(self) -> str:
        return f"<NVRTC {self.version[0]}.{self.version[1]} at {self.path}>"


def load_nvrtc(path: str) -> NVRTC:
    """Load NVRTC from an explicit file (uncached; several majors may be loaded side by side)."""
    lib, found = loader.find_and_load(
        "NVRTC", [Candidate.file(path, "explicit path")], NVRTC_HINT, reject=_reject, before_load=_preload_builtins
    )
    return NVRTC(lib, found)


def find_nvrtc() -> str:
    """Path of the NVRTC library that ``nvrtc()`` would load, found without loading anything."""
    return loader.find_toolkit_file(LIBRARY)


_lock = threading.Lock()
_nvrtc: NVRTC | None = None


def nvrtc() -> NVRTC:
    """The process-wide NVRTC, found and loaded on first call (thread-safe). Failures are not cached."""
    global _nvrtc
    if _nvrtc is None:
        with _lock:
            if _nvrtc is None:
                lib, found = loader.find_and_load(
                    "NVRTC", nvrtc_candidates(), NVRTC_HINT, reject=_reject, before_load=_preload_builtins
                )
                _nvrtc = NVRTC(lib, found)
                loader.note_loaded(LIBRARY, found)
    return _nvrtc
