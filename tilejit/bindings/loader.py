"""Find and load a shared library from an ordered list of places, recording why each place failed.

Used by every library binding (driver, NVRTC, nvJitLink). No policy lives here: callers decide
the order of places and what counts as the wrong library (``reject``). Where the toolkit libraries
live (file names, pip wheel folders) is data here too, so that finding one (for a cache key) does not
import its bindings.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import re
import site
import stat
import struct
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from tilejit import config
from tilejit.errors import Attempt, LibraryNotFoundError
from tilejit.records import Record

IS_WINDOWS = sys.platform == "win32"
IS_LINUX = sys.platform.startswith("linux")

RTLD_LOCAL: int = getattr(os, "RTLD_LOCAL", 0)
RTLD_GLOBAL: int = getattr(os, "RTLD_GLOBAL", 0)
RTLD_NOW: int = getattr(os, "RTLD_NOW", 0)

Reject = Callable[[ctypes.CDLL, str], "str | None"]
"""Inspects a freshly loaded library; returns why it must not be used, or None to accept it."""


class Candidate(Record):
    """One place to look for a library.

    kind is ``"file"`` (an explicit path), ``"dir"`` (a folder searched for ``names`` in order),
    ``"soname"`` (a bare name for the system loader) or ``"none"`` (nothing to try; ``why`` says why,
    e.g. an unset environment variable, so the error still lists the place).
    """

    _fields = ("kind", "path", "origin", "names", "why")
    __slots__ = _fields
    kind: str
    path: str
    origin: str
    names: tuple[str, ...]
    why: str

    def __init__(self, kind: str, path: str, origin: str, names: tuple[str, ...] = (), why: str = "") -> None:
        self._init(kind, path, origin, names, why)

    @staticmethod
    def file(path: str, origin: str) -> Candidate:
        """An explicit file, made absolute: dlopen searches the loader path for a name without a slash, so a
        bare ``libx.so.1`` would load some other file than the one in the current folder that was checked."""
        return Candidate("file", os.path.abspath(path), origin)

    @staticmethod
    def folder(path: str, names: Sequence[str], origin: str) -> Candidate:
        return Candidate("dir", path, origin, tuple(names))

    @staticmethod
    def soname(name: str, origin: str = "system loader") -> Candidate:
        return Candidate("soname", name, origin)

    @staticmethod
    def nothing(where: str, why: str) -> Candidate:
        return Candidate("none", where, where, why=why)


def _where(cand: Candidate, path: str) -> str:
    return f"{path} ({cand.origin})" if cand.origin and cand.origin != path else path


def _not_a_file(cand: Candidate, path: str) -> str:
    """Why an explicit ``path`` that is not a regular file cannot be used, naming the setting to fix."""
    what = cand.origin if cand.origin.startswith("$") else "the path"
    if os.path.isdir(path):
        return f"is a folder, not a file: {what} must name the library file itself"
    if os.path.exists(path):
        return f"not a regular file: {what} must name the library file itself"
    if os.path.lexists(path):
        return "file does not exist (a symbolic link to a missing file)"
    return "file does not exist"


class _DamagedLibrary(OSError):
    """A library file that must not be dlopened: it is not a complete shared library of this process's kind."""


_ELF_CLASS = 2 if struct.calcsize("P") == 8 else 1
_ELF_DATA = 1 if sys.byteorder == "little" else 2
_ELF_CHECKED = not IS_WINDOWS and sys.platform != "darwin"  # Linux and the BSDs load ELF files
_PT_LOAD, _PT_DYNAMIC, _SHT_NOBITS = 1, 2, 8
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def library_file_problem(path: str) -> str | None:
    """Why dlopen of the file at ``path`` could crash the process (None if it cannot): an ELF file of this
    process's class and byte order whose header tables, or the file spans of its loadable segments and its
    sections, reach past the end of the file (truncated).

    dlopen maps such a file as it is, and the process dies of SIGBUS on touching what is missing, so this
    runs first. Anything else (not ELF, another class, a header cut short) dlopen reads, not maps, and
    refuses with its own message; elsewhere than ELF platforms this says None."""
    if not _ELF_CHECKED:
        return None
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        return f"cannot read the file: {exc.strerror or exc}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file"
        return _elf_problem(fd, st.st_size)
    except OSError as exc:
        return f"cannot read the file: {exc.strerror or exc}"
    finally:
        os.close(fd)


def _elf_problem(fd: int, size: int) -> str | None:
    """``library_file_problem`` of the open file ``fd`` of ``size`` bytes."""
    head = os.pread(fd, 64, 0)
    if head[:4] != b"\x7fELF" or len(head) < 6 or head[4] != _ELF_CLASS or head[5] != _ELF_DATA:
        return None
    order = "<" if _ELF_DATA == 1 else ">"
    word = "Q" if _ELF_CLASS == 2 else "I"
    header = struct.Struct(f"{order}16xHHI{word}{word}{word}IHHHHHH")
    if len(head) < header.size:
        return None
    _, _, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, _ = header.unpack_from(head)
    if _ELF_CLASS == 2:  # (layout, index of the type, offset and size fields)
        phdr, shdr = (struct.Struct(f"{order}IIQQQQQQ"), (0, 2, 5)), (struct.Struct(f"{order}IIQQQQIIQQ"), (1, 4, 5))
    else:
        phdr, shdr = (struct.Struct(f"{order}IIIIIIII"), (0, 1, 4)), (struct.Struct(f"{order}IIIIIIIIII"), (1, 4, 5))
    why = _table_problem(fd, size, "program header", phoff, phnum, phentsize, *phdr,
                         lambda kind: kind in (_PT_LOAD, _PT_DYNAMIC))
    if why is None and shoff:
        why = _table_problem(fd, size, "section header", shoff, max(shnum, 1), shentsize, *shdr,
                             lambda kind: kind != _SHT_NOBITS)
    return why


def _table_problem(fd: int, size: int, what: str, offset: int, count: int, entsize: int, entry: struct.Struct,
                   fields: tuple[int, int, int], in_file: Callable[[int], bool]) -> str | None:
    """Whether an ELF header table (program or section headers) and the file spans of its entries whose
    type passes ``in_file`` lie within the file's ``size`` bytes."""
    end = offset + count * entsize
    if entsize < entry.size or end > size:
        return f"damaged library (truncated?): its {what}s end at byte {end}, past the file's end ({size} bytes)"
    table = os.pread(fd, count * entsize, offset)
    if len(table) < count * entsize:
        return f"damaged library (truncated?): cannot read its {what}s"
    type_at, offset_at, size_at = fields
    for k in range(count):
        values = entry.unpack_from(table, k * entsize)
        reach = values[offset_at] + values[size_at]
        if in_file(values[type_at]) and reach > size:
            return f"damaged library (truncated?): {what} {k} reaches byte {reach}, past the file's end ({size} bytes)"
    return None


def _check_file(path: str) -> None:
    """Raise ``_DamagedLibrary`` naming ``path`` if ``library_file_problem`` finds one."""
    why = library_file_problem(path)
    if why is not None:
        raise _DamagedLibrary(f"{path}: {why}")


def dlopen(path: str, mode: int = RTLD_LOCAL) -> ctypes.CDLL:
    """ctypes.CDLL with the mode tilejit wants (RTLD_NOW so missing symbols fail here, not at first call)."""
    if IS_WINDOWS:
        return ctypes.CDLL(path, winmode=0)
    return ctypes.CDLL(path, mode=mode | RTLD_NOW)


def find_and_load(
    library: str,
    candidates: Iterable[Candidate],
    hint: str,
    *,
    reject: Reject | None = None,
    before_load: Callable[[str], None] | None = None,
) -> tuple[ctypes.CDLL, str]:
    """Load the first candidate that opens and passes ``reject``; return it and the path it was loaded from.

    ``before_load(path)`` runs before each dlopen of a file (e.g. to preload a companion library).
    Raises LibraryNotFoundError listing every place tried and why each failed.
    """
    attempts: list[Attempt] = []
    tried: set[str] = set()

    def try_path(cand: Candidate, path: str, display: str) -> tuple[ctypes.CDLL, str] | None:
        if cand.kind != "soname":
            key = os.path.realpath(path)
            if key in tried:
                return None
            tried.add(key)
        why = library_file_problem(path) if cand.kind != "soname" else _soname_problem(path)
        if why is not None:
            attempts.append(Attempt(display, why))
            return None
        try:
            if before_load is not None and cand.kind != "soname":
                before_load(path)
            lib = dlopen(path)
        except _DamagedLibrary as exc:  # a companion library before_load found damaged
            attempts.append(Attempt(display, f"a library it needs is damaged: {exc}"))
            return None
        except OSError as exc:
            attempts.append(Attempt(display, f"dlopen failed: {exc}"))
            return None
        loaded = path if cand.kind != "soname" else (library_path(lib) or path)
        if cand.kind == "soname":
            tried.add(os.path.realpath(loaded))
        why = reject(lib, loaded) if reject is not None else None
        if why is not None:
            attempts.append(Attempt(display if cand.kind != "soname" else f"{display} -> {loaded}", why))
            return None
        return lib, loaded

    for cand in candidates:
        if cand.kind == "none":
            attempts.append(Attempt(cand.path, cand.why))
        elif cand.kind == "file":
            if not os.path.isfile(cand.path):
                attempts.append(Attempt(_where(cand, cand.path), _not_a_file(cand, cand.path)))
                continue
            found = try_path(cand, cand.path, _where(cand, cand.path))
            if found:
                return found
        elif cand.kind == "dir":
            if not os.path.isdir(cand.path):
                attempts.append(Attempt(_where(cand, cand.path), "folder does not exist"))
                continue
            present = [os.path.join(cand.path, n) for n in cand.names if os.path.isfile(os.path.join(cand.path, n))]
            if not present:
                attempts.append(Attempt(_where(cand, cand.path), f"none of {', '.join(cand.names)} there"))
                continue
            for path in present:
                found = try_path(cand, path, _where(cand, path))
                if found:
                    return found
        elif cand.kind == "soname":
            found = try_path(cand, cand.path, _where(cand, cand.path))
            if found:
                return found
        else:
            raise ValueError(f"unknown candidate kind {cand.kind!r}")
    raise LibraryNotFoundError(library, attempts, hint)


def _soname_problem(soname: str) -> str | None:
    """``library_file_problem`` of the file the system loader would take first for a bare ``soname``, where
    that is cheap to know: a file of that name in an ``LD_LIBRARY_PATH`` folder."""
    if not IS_LINUX:
        return None
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        path = os.path.join(d, soname)
        if d and os.path.isfile(path):
            why = library_file_problem(path)
            return None if why is None else f"{path} (found through LD_LIBRARY_PATH): {why}"
    return None


def find_file(candidates: Iterable[Candidate]) -> tuple[str | None, list[Attempt]]:
    """Discovery without dlopen: the first existing file among the candidates (sonames are resolved
    through LD_LIBRARY_PATH or the ld.so cache only), plus the places that had nothing."""
    attempts: list[Attempt] = []
    for cand in candidates:
        if cand.kind == "none":
            attempts.append(Attempt(cand.path, cand.why))
        elif cand.kind == "file":
            if os.path.isfile(cand.path):
                return cand.path, attempts
            attempts.append(Attempt(_where(cand, cand.path), _not_a_file(cand, cand.path)))
        elif cand.kind == "dir":
            for name in cand.names:
                path = os.path.join(cand.path, name)
                if os.path.isfile(path):
                    return path, attempts
            attempts.append(Attempt(_where(cand, cand.path), "no matching file"))
        elif cand.kind == "soname":
            resolved = ldconfig_path_of(cand.path)
            if resolved is not None:
                return resolved, attempts
            attempts.append(Attempt(_where(cand, cand.path), "not in the loader cache"))
    return None, attempts


# ----------------------------------------------------------------------------- places to look


def loaded_libraries(needle: str = "") -> list[str]:
    """Paths of the shared libraries loaded in this process (Linux; elsewhere empty), only those containing
    ``needle`` when it is given. Walks the dynamic loader's list of loaded objects; /proc/self/maps, which
    the kernel builds on every read (0.3 ms in a process with numpy), is the fallback."""
    if not IS_LINUX:
        return []
    head = _link_map(None)
    if head is None:
        return _mapped_libraries(needle)
    want = os.fsencode(needle)
    paths: dict[str, None] = {}  # insertion-ordered set
    node = _LinkMap.from_address(head)
    while True:
        raw = node.l_name
        if raw and want in raw:
            path = os.fsdecode(raw)
            if path.startswith("/") and ".so" in path:
                paths[path] = None
        if not node.l_next:
            return list(paths)
        node = _LinkMap.from_address(node.l_next)


def _mapped_libraries(needle: str) -> list[str]:
    """``loaded_libraries`` from /proc/self/maps, for a C library without ``dlinfo``."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return []
    if needle not in text:
        return []
    paths: list[str] = []
    seen: set[str] = set()
    for line in text.splitlines():
        if needle not in line:
            continue
        parts = line.split(None, 5)
        if len(parts) == 6:
            path = parts[5].strip()
            if path.startswith("/") and ".so" in path and path not in seen:
                seen.add(path)
                paths.append(path)
    return paths


class _LinkMap(ctypes.Structure):
    """The public head of the C library's ``struct link_map`` (<link.h>): one loaded object in a list."""

    _fields_ = [
        ("l_addr", ctypes.c_void_p),
        ("l_name", ctypes.c_char_p),
        ("l_ld", ctypes.c_void_p),
        ("l_next", ctypes.c_void_p),
        ("l_prev", ctypes.c_void_p),
    ]


_RTLD_DI_LINKMAP = 2


@functools.cache
def _dlinfo() -> tuple[Any, int]:
    """The C library's ``dlinfo`` (None where it has none) and the main program's handle."""
    main = ctypes.CDLL(None)
    try:
        fn = main.dlinfo
    except AttributeError:
        return None, main._handle
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn, main._handle


def _link_map(handle: int | None) -> int | None:
    """Address of the ``link_map`` of a ``dlopen`` handle (None: the main program, the list's head)."""
    try:
        dlinfo, main = _dlinfo()
    except OSError:
        return None
    if dlinfo is None:
        return None
    if handle is None:
        handle = main
    out = ctypes.c_void_p()
    if dlinfo(handle, _RTLD_DI_LINKMAP, ctypes.byref(out)) != 0:
        return None
    return out.value


def library_path(lib: ctypes.CDLL) -> str | None:
    """The file a loaded library came from (Linux: dlinfo RTLD_DI_LINKMAP), e.g. what a bare soname resolved to."""
    if not IS_LINUX:
        return None
    address = _link_map(lib._handle)
    if not address:
        return None
    name = _LinkMap.from_address(address).l_name
    return os.fsdecode(name) if name else None


def already_loaded(
    pattern: str, origin: str = "already loaded in this process", *, needle: str = ""
) -> list[Candidate]:
    """Candidates for copies of a library already mapped in this process whose file name matches ``pattern``
    (a regular expression, fully matched against the base name); ``needle``, a substring every match
    contains, lets the common case (nothing loaded) skip the regular expression."""
    paths = loaded_libraries(needle)
    if not paths:
        return []
    rx = re.compile(pattern)
    return [Candidate.file(os.path.realpath(p), origin) for p in paths if rx.fullmatch(os.path.basename(p))]


def site_dirs() -> Iterator[str]:
    """Every site-packages folder and sys.path entry, in order, without duplicates (lazily: discovery
    usually stops at the first)."""
    dirs: list[str] = []
    with contextlib.suppress(AttributeError):  # virtualenv's old site.py lacks these
        dirs += site.getsitepackages()
        dirs.append(site.getusersitepackages())
    dirs += [p for p in sys.path if p]
    seen: set[tuple[int, int]] = set()
    for d in dirs:
        try:
            st = os.stat(d)  # one call: a folder, and which one (a realpath costs a call per path component)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            yield d


def pip_wheel_dirs(subdirs: Sequence[str], names: Sequence[str], label: str) -> Iterator[Candidate]:
    """Folders of NVIDIA pip wheels (e.g. ``nvidia/cu13/lib``) under every site folder that exist; when none
    exists, a single ``nothing`` candidate says so (the error lists it as one place)."""
    found = False
    for base in site_dirs():
        for sub in subdirs:
            path = os.path.join(base, *sub.split("/"))
            if os.path.isdir(path):
                found = True
                yield Candidate.folder(path, names, f"pip wheel {label}")
    if not found:
        yield Candidate.nothing(
            f"pip wheels ({', '.join(subdirs)} under site-packages and sys.path)", "no such folder anywhere"
        )


def _unset(var: str) -> str:
    """Why an environment variable with no usable value names no place: unset, or set to only blanks
    (then ignored, as if unset; the listing says which)."""
    return "not set" if os.environ.get(var) is None else "set but empty: ignored"


def explicit_file(setting: config.Setting[str | None]) -> Candidate:
    """The library file a ``TILEJIT_*`` setting names (made absolute), or a ``nothing`` candidate saying
    it is not set or set but empty."""
    value = setting.get()
    if not value:
        return Candidate.nothing(f"${setting.name}", _unset(setting.name))
    return Candidate.file(value, f"${setting.name}")


def conda_dirs(names: Sequence[str]) -> list[Candidate]:
    """``$CONDA_PREFIX/lib`` (``Library/bin`` on Windows)."""
    prefix = os.environ.get("CONDA_PREFIX")
    if not prefix:
        return [Candidate.nothing("$CONDA_PREFIX", _unset("CONDA_PREFIX"))]
    sub = os.path.join("Library", "bin") if IS_WINDOWS else "lib"
    return [Candidate.folder(os.path.join(prefix, sub), names, "conda")]


def cuda_home_dirs(names: Sequence[str]) -> list[Candidate]:
    """Library folders of the toolkits named by ``$CUDA_HOME`` and ``$CUDA_PATH``."""
    out: list[Candidate] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if not root:
            out.append(Candidate.nothing(f"${var}", _unset(var)))
            continue
        if IS_WINDOWS:
            subs = [os.path.join(root, "bin"), os.path.join(root, "bin", "x64")]
        else:
            subs = [os.path.join(root, "lib64"), os.path.join(root, "lib")]
            import glob  # here, not at the top: it compiles regular expressions on import (warm launches)

            subs += sorted(glob.glob(os.path.join(root, "targets", "*", "lib")))
        out += [Candidate.folder(s, names, f"${var}") for s in subs]
    return out


def system_sonames(names: Sequence[str]) -> list[Candidate]:
    """Bare names for the system loader (LD_LIBRARY_PATH, ld.so.cache; PATH on Windows)."""
    return [Candidate.soname(n) for n in names]


class ToolkitLibrary(Record):
    """Where one CUDA toolkit library (NVRTC, nvJitLink) is looked for: the setting that names an
    explicit file, the file names of a copy already loaded (``loaded_rx``, a regular expression on
    the basename), pip wheel folders and file names on Linux and Windows, and what to install."""

    _fields = ("label", "setting", "loaded_rx", "sonames", "dll_names", "pip_subdirs", "pip_subdirs_windows", "hint")
    __slots__ = _fields
    label: str
    setting: config.Setting[str | None]
    loaded_rx: str
    sonames: tuple[str, ...]
    dll_names: tuple[str, ...]
    pip_subdirs: tuple[str, ...]
    pip_subdirs_windows: tuple[str, ...]
    hint: str

    def __init__(
        self, label: str, setting: config.Setting[str | None], loaded_rx: str, sonames: tuple[str, ...],
        dll_names: tuple[str, ...], pip_subdirs: tuple[str, ...], pip_subdirs_windows: tuple[str, ...], hint: str,
    ) -> None:
        self._init(label, setting, loaded_rx, sonames, dll_names, pip_subdirs, pip_subdirs_windows, hint)


NVRTC_LIBRARY = ToolkitLibrary(
    "NVRTC",
    config.NVRTC,
    # Any 11.x file name: the soname stops at 11.2, but the file a toolkit ships is e.g. libnvrtc.so.11.8.89.
    r"libnvrtc\.so\.(13|12|11)(\.\d+)*",
    # Newest first: the first library found wins within one folder.
    ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so.11.1", "libnvrtc.so.11.0"),
    ("nvrtc64_130_0.dll", "nvrtc64_120_0.dll", "nvrtc64_112_0.dll", "nvrtc64_111_0.dll", "nvrtc64_110_0.dll"),
    ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"),
    ("nvidia/cu13/bin/x86_64", "nvidia/cu13/bin", "nvidia/cuda_nvrtc/bin"),
    'install NVRTC with pip install "tilejit[cu13]" (or "tilejit[cu12]" / "tilejit[cu11]" to match an older '
    f"driver), or set {config.NVRTC.name} to the full path of libnvrtc.so.* / nvrtc64_*.dll",
)
NVJITLINK_LIBRARY = ToolkitLibrary(
    "nvJitLink",
    config.NVJITLINK,
    r"libnvJitLink\.so\.(13|12)(\.\d+)*",
    ("libnvJitLink.so.13", "libnvJitLink.so.12"),
    ("nvJitLink_130_0.dll", "nvJitLink_120_0.dll"),
    ("nvidia/cu13/lib", "nvidia/nvjitlink/lib"),
    ("nvidia/cu13/bin/x86_64", "nvidia/cu13/bin", "nvidia/nvjitlink/bin"),
    "install nvJitLink with pip install nvidia-nvjitlink (CUDA 13) or nvidia-nvjitlink-cu12, or set "
    f"{config.NVJITLINK.name} to the full path of libnvJitLink.so.* / nvJitLink_*.dll",
)


def toolkit_candidates(lib: ToolkitLibrary) -> Iterator[Candidate]:
    """Every place a CUDA toolkit library is looked for, in order, made lazily so that discovery stops
    at the first hit: the file named by its setting (then nothing else), a copy already loaded, pip
    wheels, conda, ``$CUDA_HOME``/``$CUDA_PATH``, the system loader."""
    explicit = explicit_file(lib.setting)
    yield explicit
    if explicit.kind == "file":  # an explicit file is the only place looked at: no silent fallback
        return
    names = lib.dll_names if IS_WINDOWS else lib.sonames
    if not IS_WINDOWS:
        yield from already_loaded(lib.loaded_rx, needle=lib.sonames[0].split(".so", 1)[0])
    yield from pip_wheel_dirs(lib.pip_subdirs_windows if IS_WINDOWS else lib.pip_subdirs, names, lib.label)
    yield from conda_dirs(names)
    yield from cuda_home_dirs(names)
    yield from system_sonames(names)


def find_toolkit_file(lib: ToolkitLibrary) -> str:
    """Path of the file ``lib`` would be loaded from, found without loading anything (a cache key names
    the compiler by this file); ``LibraryNotFoundError`` lists every place tried."""
    path, attempts = find_file(toolkit_candidates(lib))
    if path is None:
        raise LibraryNotFoundError(lib.label, attempts, lib.hint)
    return path


_identities: dict[str, str] = {}


def file_identity(path: str) -> str:
    """``realpath|size|mtime_ns`` of a library file: names it in a cache key without loading it."""
    cached = _identities.get(path)
    if cached is None:
        try:
            real = os.path.realpath(path)
            st = os.stat(real)
            cached = f"{real}|{st.st_size}|{st.st_mtime_ns}"
        except OSError:
            cached = f"{path}|?|?"
        _identities[path] = cached
    return cached


_loaded_files: dict[str, str] = {}


def note_loaded(lib: ToolkitLibrary, path: str) -> None:
    """Record that this process loaded ``lib`` from ``path`` (its identity from then on)."""
    _loaded_files[lib.label] = path


def toolkit_identity(lib: ToolkitLibrary) -> str:
    """``file_identity`` of the file ``lib`` was loaded from in this process, else of the file it would be
    loaded from (found without loading it, once per setting of its variable)."""
    loaded = _loaded_files.get(lib.label)
    if loaded is not None:
        return file_identity(loaded)
    memo = f"\0{lib.label}\0{explicit_file(lib.setting).path}"  # absolute: a relative path moves with the cwd
    cached = _identities.get(memo)
    if cached is None:
        cached = _identities[memo] = file_identity(find_toolkit_file(lib))
    return cached


def ldconfig_path_of(soname: str) -> str | None:
    """Where the system loader would find ``soname``, from ``ldconfig -p``, without loading it."""
    if not IS_LINUX:
        return None
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        if d and os.path.isfile(os.path.join(d, soname)):
            return os.path.join(d, soname)
    import subprocess

    for exe in ("/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"):
        try:
            out = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        for line in out.splitlines():
            left, _, right = line.partition("=>")
            if left.strip().split(" ")[0] == soname and right.strip():
                return right.strip()
        return None
    return None


def preload_global(folder: str, pattern: str) -> list[str]:
    """dlopen with RTLD_GLOBAL every file in ``folder`` whose name fully matches ``pattern``; return their paths.

    Lets a library that dlopens a companion by soname (NVRTC → libnvrtc-builtins) find the copy shipped
    next to it. Failures to load are ignored here: the library reports them itself when it needs the
    companion. A damaged file (see ``library_file_problem``) raises ``_DamagedLibrary``: the library
    would load it itself later and crash.
    """
    rx = re.compile(pattern)
    loaded: list[str] = []
    try:
        entries = sorted(os.listdir(folder))
    except OSError:
        return loaded
    for name in entries:
        if rx.fullmatch(name):
            path = os.path.join(folder, name)
            _check_file(path)
            try:
                dlopen(path, RTLD_GLOBAL)
                loaded.append(path)
            except OSError:
                pass
    return loaded


def dlsym(lib: ctypes.CDLL, name: str) -> int | None:
    """Address of an exported symbol, or None."""
    try:
        fn = getattr(lib, name)
    except AttributeError:
        return None
    return ctypes.cast(fn, ctypes.c_void_p).value
