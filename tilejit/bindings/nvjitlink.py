"""ctypes bindings of nvJitLink (CUDA 12.0+), an optional library: find, load and bind; no policy.

nvJitLink's header maps each function to a versioned export (``nvJitLinkCreate`` →
``__nvJitLinkCreate_12_9``); the signatures are stable within a major, so we bind the newest
``__<name>_<major>_<minor>`` the library exports and fall back to the plain name.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
from collections.abc import Iterator
from ctypes import POINTER, c_char_p, c_int, c_size_t, c_uint, c_uint32, c_void_p
from typing import Any

from tilejit.bindings import loader
from tilejit.bindings.loader import Candidate
from tilejit.errors import Attempt, CompileError, LibraryNotFoundError
from tilejit.records import Record

nvJitLinkResult = c_int
nvJitLinkHandle = c_void_p

NVJITLINK_SUCCESS = 0
NVJITLINK_INPUT_NONE = 0
NVJITLINK_INPUT_CUBIN = 1
NVJITLINK_INPUT_PTX = 2
NVJITLINK_INPUT_LTOIR = 3
NVJITLINK_INPUT_FATBIN = 4
NVJITLINK_INPUT_OBJECT = 5
NVJITLINK_INPUT_LIBRARY = 6
NVJITLINK_INPUT_ANY = 10

_ERRORS = (
    "NVJITLINK_SUCCESS",
    "NVJITLINK_ERROR_UNRECOGNIZED_OPTION",
    "NVJITLINK_ERROR_MISSING_ARCH",
    "NVJITLINK_ERROR_INVALID_INPUT",
    "NVJITLINK_ERROR_PTX_COMPILE",
    "NVJITLINK_ERROR_NVVM_COMPILE",
    "NVJITLINK_ERROR_INTERNAL",
    "NVJITLINK_ERROR_THREADPOOL",
    "NVJITLINK_ERROR_UNRECOGNIZED_INPUT",
    "NVJITLINK_ERROR_FINALIZE",
    "NVJITLINK_ERROR_NULL_INPUT",
    "NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS",
    "NVJITLINK_ERROR_INCORRECT_INPUT_TYPE",
    "NVJITLINK_ERROR_ARCH_MISMATCH",
    "NVJITLINK_ERROR_OUTDATED_LIBRARY",
    "NVJITLINK_ERROR_MISSING_FATBIN",
    "NVJITLINK_ERROR_UNRECOGNIZED_ARCH",
    "NVJITLINK_ERROR_UNSUPPORTED_ARCH",
)


def error_name(code: int) -> str:
    """Symbolic name of an nvJitLinkResult (the library has no error-string function)."""
    return _ERRORS[code] if 0 <= code < len(_ERRORS) else f"NVJITLINK_ERROR_{code}"


LIBRARY = loader.NVJITLINK_LIBRARY
SONAMES = LIBRARY.sonames
DLL_NAMES = LIBRARY.dll_names
PIP_SUBDIRS = LIBRARY.pip_subdirs
PIP_SUBDIRS_WINDOWS = LIBRARY.pip_subdirs_windows
NVJITLINK_HINT = LIBRARY.hint


class Entry(Record):
    """One nvJitLink function: name, ctypes signature, whether every 12.x/13.x release has it."""

    _fields = ("name", "argtypes", "required")
    __slots__ = _fields
    name: str
    argtypes: tuple[Any, ...]
    required: bool

    def __init__(self, name: str, argtypes: tuple[Any, ...], required: bool = True) -> None:
        self._init(name, argtypes, required)


_P = POINTER
ENTRIES: tuple[Entry, ...] = (
    Entry("nvJitLinkCreate", (_P(nvJitLinkHandle), c_uint32, _P(c_char_p))),
    Entry("nvJitLinkDestroy", (_P(nvJitLinkHandle),)),
    Entry("nvJitLinkAddData", (nvJitLinkHandle, c_int, c_void_p, c_size_t, c_char_p)),
    Entry("nvJitLinkAddFile", (nvJitLinkHandle, c_int, c_char_p)),
    Entry("nvJitLinkComplete", (nvJitLinkHandle,)),
    Entry("nvJitLinkGetLinkedCubinSize", (nvJitLinkHandle, _P(c_size_t))),
    Entry("nvJitLinkGetLinkedCubin", (nvJitLinkHandle, c_void_p)),
    Entry("nvJitLinkGetLinkedPtxSize", (nvJitLinkHandle, _P(c_size_t))),
    Entry("nvJitLinkGetLinkedPtx", (nvJitLinkHandle, c_char_p)),
    Entry("nvJitLinkGetErrorLogSize", (nvJitLinkHandle, _P(c_size_t))),
    Entry("nvJitLinkGetErrorLog", (nvJitLinkHandle, c_char_p)),
    Entry("nvJitLinkGetInfoLogSize", (nvJitLinkHandle, _P(c_size_t))),
    Entry("nvJitLinkGetInfoLog", (nvJitLinkHandle, c_char_p)),
    Entry("nvJitLinkVersion", (_P(c_uint), _P(c_uint)), required=False),  # 12.3+
)
ENTRY_BY_NAME: dict[str, Entry] = {e.name: e for e in ENTRIES}


def _major_of(path: str) -> int | None:
    """The CUDA major a library file name promises (libnvJitLink.so.12 -> 12, nvJitLink_130_0.dll -> 13)."""
    base = os.path.basename(path)
    m = re.match(r"libnvJitLink\.so\.(\d+)", base) or re.match(r"nvJitLink_(\d+?)\d_0\.dll", base)
    return int(m.group(1)) if m else None


def _versioned_exports(lib: ctypes.CDLL, name: str, major: int) -> list[str]:
    """``__<name>_<major>_<minor>`` exports, newest minor first (probing minors 0..99)."""
    return [f"__{name}_{major}_{minor}" for minor in range(99, -1, -1) if hasattr(lib, f"__{name}_{major}_{minor}")]


def _query_version(lib: ctypes.CDLL) -> tuple[int, int] | None:
    """What ``nvJitLinkVersion`` (12.3+) reports, or None where it is missing or fails."""
    fn = getattr(lib, "nvJitLinkVersion", None)
    if fn is None:
        return None
    fn.argtypes = [POINTER(c_uint), POINTER(c_uint)]
    fn.restype = c_int
    major, minor = c_uint(0), c_uint(0)
    if fn(ctypes.byref(major), ctypes.byref(minor)) != 0:
        return None
    return major.value, minor.value


def _export_majors(lib: ctypes.CDLL) -> list[int]:
    """The majors of the ``__nvJitLinkCreate_<major>_0`` exports (every release exports its major's first)."""
    return [m for m in (13, 12, 14) if hasattr(lib, f"__nvJitLinkCreate_{m}_0")]


def _reject(lib: ctypes.CDLL, path: str) -> str | None:
    """Why a loaded file must not be used: not nvJitLink, or another major than its file name says (as NVRTC)."""
    majors = _export_majors(lib)
    if not hasattr(lib, "nvJitLinkCreate") and not majors:
        return "not nvJitLink (no nvJitLinkCreate)"
    expected = _major_of(path)
    if expected is None:
        return None
    version = _query_version(lib)
    if version is not None:
        if version[0] != expected:
            return (
                f"wrong version: file name says CUDA {expected} but nvJitLinkVersion reports {version[0]}.{version[1]}"
            )
    elif majors and expected not in majors:  # before 12.3: the versioned exports name the major
        found = ", ".join(f"__nvJitLinkCreate_{m}_*" for m in majors)
        return f"wrong version: file name says CUDA {expected} but the library exports {found}"
    return None


def nvjitlink_candidates() -> Iterator[Candidate]:
    """Every place nvJitLink is looked for, in order (lazily)."""
    return loader.toolkit_candidates(LIBRARY)


class NVJitLink:
    """A loaded nvJitLink: every function of ``ENTRIES`` as an attribute (None when optional and absent)."""

    path: str
    version: tuple[int, int]
    symbols: dict[str, str]

    nvJitLinkCreate: Any
    nvJitLinkDestroy: Any
    nvJitLinkAddData: Any
    nvJitLinkAddFile: Any
    nvJitLinkComplete: Any
    nvJitLinkGetLinkedCubinSize: Any
    nvJitLinkGetLinkedCubin: Any
    nvJitLinkGetLinkedPtxSize: Any
    nvJitLinkGetLinkedPtx: Any
    nvJitLinkGetErrorLogSize: Any
    nvJitLinkGetErrorLog: Any
    nvJitLinkGetInfoLogSize: Any
    nvJitLinkGetInfoLog: Any
    nvJitLinkVersion: Any

    def __init__(self, lib: ctypes.CDLL, path: str) -> None:
        self._lib = lib
        self.path = path
        self.symbols = {}
        version = _query_version(lib)
        lib_major = version[0] if version else _major_of(path)
        if lib_major is None:
            lib_major = next(iter(_export_majors(lib)), 12)
        for entry in ENTRIES:
            names = _versioned_exports(lib, entry.name, lib_major) + [entry.name]
            symbol = next((n for n in names if hasattr(lib, n)), None)
            if symbol is None:
                if entry.required:
                    raise LibraryNotFoundError(
                        "nvJitLink", [Attempt(path, f"required function {entry.name} is missing")], NVJITLINK_HINT
                    )
                setattr(self, entry.name, None)
                continue
            fn = getattr(lib, symbol)
            fn.argtypes = list(entry.argtypes)
            fn.restype = nvJitLinkResult
            self.symbols[entry.name] = symbol
            setattr(self, entry.name, fn)
        if version is None:
            # Before 12.3 there is no nvJitLinkVersion; the newest versioned export names the release.
            m = re.fullmatch(r"__nvJitLinkCreate_(\d+)_(\d+)", self.symbols["nvJitLinkCreate"])
            version = (int(m.group(1)), int(m.group(2))) if m else (lib_major, 0)
        self.version = version

    def has(self, name: str) -> bool:
        """Whether the function ``name`` exists in this nvJitLink."""
        if name not in ENTRY_BY_NAME:
            raise AttributeError(f"{name!r} is not an nvJitLink function tilejit binds")
        return getattr(self, name) is not None

    def check(self, status: int, function: str, log: str = "") -> None:
        """Raise CompileError when an nvJitLink call returned non-zero."""
        if status != 0:
            raise CompileError(f"{function}: {error_name(status)} ({status})" + (f"\n{log}" if log else ""), log)

    def __repr__(self) -> str:
        return f"<NVJitLink {self.version[0]}.{self.version[1]} at {self.path}>"


def load_nvjitlink(path: str) -> NVJitLink:
    """Load nvJitLink from an explicit file (uncached)."""
    lib, found = loader.find_and_load(
        "nvJitLink", [Candidate.file(path, "explicit path")], NVJITLINK_HINT, reject=_reject
    )
    return NVJitLink(lib, found)


def find_nvjitlink() -> str:
    """Path of the nvJitLink library that ``nvjitlink()`` would load, found without loading anything."""
    return loader.find_toolkit_file(LIBRARY)


_lock = threading.Lock()
_nvjitlink: NVJitLink | None = None


def nvjitlink() -> NVJitLink:
    """The process-wide nvJitLink, found and loaded on first call (thread-safe). Failures are not cached."""
    global _nvjitlink
    if _nvjitlink is None:
        with _lock:
            if _nvjitlink is None:
                lib, found = loader.find_and_load("nvJitLink", nvjitlink_candidates(), NVJITLINK_HINT, reject=_reject)
                _nvjitlink = NVJitLink(lib, found)
                loader.note_loaded(LIBRARY, found)  # its file names it from now on, as for NVRTC
    return _nvjitlink
