"""Find the CUDA Tile IR toolchain (tileiras, tileirdisasm, libnvvm, ptxas) and check that its pieces agree.

tileiras alone gives only "failed to compile Tile IR program" (exit code 5) when libnvvm or ptxas is missing
or of another CUDA minor version, so discovery finds the pieces tileiras itself would use, reads each one's
version, and names the wrong piece before anything runs. How tileiras finds them (measured with 13.5):
libnvvm at ``<its bin>/../nvvm/lib64/libnvvm.so`` then ``<its bin>/../lib/libnvvm.so.4`` (or under
``$CUDA_HOME``/``$CUDA_PATH`` when set, which the runner therefore unsets; ``LD_LIBRARY_PATH`` is not used);
ptxas in its own folder, else the first on ``PATH``. Nothing here is imported by ``import tilejit``; finding
the pieces (``locate``) runs none of them and imports no ``subprocess``, so that a caller who keeps what they
reported (``Toolchain.from_fields``) finds a toolchain on a warm launch in file lookups alone.
"""

from __future__ import annotations

import os
import re
import threading
from typing import TYPE_CHECKING

from tilejit import config
from tilejit.bindings import loader
from tilejit.errors import Attempt, LibraryNotFoundError, TargetError
from tilejit.records import Record

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Mapping

EXE = ".exe" if loader.IS_WINDOWS else ""

HINT = (
    'install the CUDA Tile IR toolchain with pip install "tilejit[tileir]" (one CUDA 13.x set of '
    "nvidia-cuda-tileiras, nvidia-nvvm and nvidia-cuda-nvcc), or set "
    f"{config.TILEIRAS.name} to the full path of tileiras"
)

LIBNVVM_NAMES = (("nvvm", "lib64", "libnvvm.so"), ("lib", "libnvvm.so.4"))
"""Where tileiras looks for libnvvm, relative to the folder above its own ``bin`` (toolkit, then pip layout)."""

FIRST_TARGET_RELEASE: tuple[tuple[range, tuple[int, int]], ...] = (
    (range(100, 1000), (13, 1)),
    (range(80, 90), (13, 2)),
    (range(90, 100), (13, 3)),
)
"""The first tileiras release that compiles for each range of ``sm_XY`` numbers."""

# Patterns, not compiled ones: compiling costs milliseconds at import, and only a probe (not a warm process) uses them.
_RELEASE = rb"Cuda compilation tools, release (\d+)\.(\d+), V(\d+(?:\.\d+)*)"
_GPU_NAME = r"(?m)^\s*=(sm_\d+)\b"
_PROBE_TIMEOUT = 30.0


class Toolchain(Record):
    """One CUDA Tile IR toolchain: the path and version of each piece tileiras uses, the bytecode versions
    it reads (``--list-versions``) and the targets it compiles for. Versions are ``"13.5.37"`` strings
    (``libnvvm_version`` may be only ``"13.5"``, or None when the library does not say)."""

    _fields = (
        "tileiras", "tileirdisasm", "ptxas", "libnvvm", "tileiras_version", "ptxas_version", "libnvvm_version",
        "bytecode_versions", "targets", "origin",
    )
    __slots__ = _fields
    tileiras: str
    tileirdisasm: str | None
    ptxas: str
    libnvvm: str
    tileiras_version: str
    ptxas_version: str
    libnvvm_version: str | None
    bytecode_versions: tuple[tuple[int, int], ...]
    targets: tuple[str, ...]
    origin: str

    def __init__(
        self, tileiras: str, tileirdisasm: str | None, ptxas: str, libnvvm: str, tileiras_version: str,
        ptxas_version: str, libnvvm_version: str | None, bytecode_versions: tuple[tuple[int, int], ...],
        targets: tuple[str, ...], origin: str,
    ) -> None:
        self._init(tileiras, tileirdisasm, ptxas, libnvvm, tileiras_version, ptxas_version, libnvvm_version,
                   bytecode_versions, targets, origin)

    @classmethod
    def from_fields(cls, fields: Mapping[str, object]) -> Toolchain:
        """The toolchain of ``fields`` (each field by name) as plain data holds them, e.g. read back from a memo
        (lists for tuples); ``ValueError`` for a missing field or one of another type."""
        return cls(*(_checked_field(name, fields.get(name)) for name in cls._fields))  # type: ignore[arg-type]

    @property
    def bin_dir(self) -> str:
        """The folder of tileiras (first on ``PATH`` when it runs)."""
        return os.path.dirname(self.tileiras)

    @property
    def release(self) -> tuple[int, int]:
        """tileiras's CUDA (major, minor)."""
        return major_minor(self.tileiras_version)

    def describe(self) -> str:
        """One line per piece: its version and where it is (for error messages)."""
        return "\n".join([
            f"  tileiras {self.tileiras_version} at {self.tileiras} ({self.origin})",
            f"  libnvvm {self.libnvvm_version or '(version unknown)'} at {self.libnvvm}",
            f"  ptxas {self.ptxas_version} at {self.ptxas}",
        ])

    def check_target(self, target: str) -> None:
        """Raise ``TargetError`` unless this tileiras compiles for ``target`` (e.g. ``"sm_90"``)."""
        if target in self.targets:
            return
        number = _sm_number(target)
        if number is None:
            raise TargetError(f"target {target!r} is not of the form sm_XY (e.g. sm_90); tileiras "
                              f"{self.tileiras_version} compiles for {', '.join(self.targets)}")
        first = first_release_for(number)
        if first is None:
            raise TargetError(f"Tile IR does not support {target} (it needs sm_80 or newer); tileiras "
                              f"{self.tileiras_version} compiles for {', '.join(self.targets)}")
        if self.release < first:
            raise TargetError(f"tileiras {self.tileiras_version} cannot compile for {target}: Tile IR supports "
                              f"{target} from CUDA {first[0]}.{first[1]}; install a newer toolchain "
                              '(pip install -U "tilejit[tileir]")')
        raise TargetError(f"tileiras {self.tileiras_version} at {self.tileiras} does not list {target} among its "
                          f"targets ({', '.join(self.targets)})")


def _checked_field(name: str, value: object) -> object:
    """``value`` as the ``Toolchain`` field ``name`` holds it (tuples for lists); ``ValueError`` if of another type."""
    if name == "bytecode_versions":
        if isinstance(value, list | tuple) and all(
                isinstance(v, list | tuple) and len(v) == 2 and all(type(n) is int for n in v) for v in value):
            return tuple((v[0], v[1]) for v in value)
    elif name == "targets":
        if isinstance(value, list | tuple) and all(isinstance(t, str) for t in value):
            return tuple(value)
    elif value is None and name in ("tileirdisasm", "libnvvm_version"):
        return None
    elif isinstance(value, str) and (not name.endswith("_version") or _is_version(value)):
        return value
    raise ValueError(f"toolchain field {name!r}: {value!r} is not of its type")


def _is_version(text: str) -> bool:
    """Whether ``text`` is a version such as ``13.5`` or ``13.5.37``."""
    parts = text.split(".")
    return len(parts) >= 2 and all(p.isascii() and p.isdigit() for p in parts)


def major_minor(version: str) -> tuple[int, int]:
    """``"13.5.37"`` -> ``(13, 5)``."""
    parts = version.split(".")
    return int(parts[0]), int(parts[1])


def _sm_number(target: str) -> int | None:
    m = re.fullmatch(r"sm_(\d+)[af]?", target)
    return int(m.group(1)) if m else None


def first_release_for(number: int) -> tuple[int, int] | None:
    """The first CUDA release whose tileiras compiles for ``sm_<number>``; None when none does."""
    for span, release in FIRST_TARGET_RELEASE:
        if number in span:
            return release
    return None


def supported_targets(release: tuple[int, int], listed: tuple[str, ...]) -> tuple[str, ...]:
    """The targets of ``listed`` (tileiras's ``--gpu-name`` values) that a tileiras of ``release`` compiles
    for by the version rule (sm_100+ from 13.1, sm_80-sm_89 from 13.2, sm_90 from 13.3)."""
    out = []
    for target in listed:
        number = _sm_number(target)
        first = None if number is None else first_release_for(number)
        if first is not None and release >= first:
            out.append(target)
    return tuple(out)


# ----------------------------------------------------------------------------- the pieces' versions


def _run_tool(path: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Run a toolchain program briefly for what it reports (its version, its lists)."""
    import subprocess

    return subprocess.run([path, *args], stdin=subprocess.DEVNULL, capture_output=True, timeout=_PROBE_TIMEOUT,
                          check=False)


def program_version(path: str, what: str) -> str:
    """The ``V13.5.37`` of ``<path> --version``; ``LibraryNotFoundError`` naming ``what`` if it says none."""
    import subprocess

    why = ""
    try:
        done = _run_tool(path, "--version")
        m = re.search(_RELEASE, done.stdout + done.stderr)
        if m:
            return m.group(3).decode()
        why = f"`{os.path.basename(path)} --version` exited with code {done.returncode} and reported no release"
    except subprocess.TimeoutExpired:
        why = f"`{os.path.basename(path)} --version` did not finish within {_PROBE_TIMEOUT:g} s"
    except OSError as exc:
        why = f"cannot run it: {exc.strerror or exc}"
    raise LibraryNotFoundError(what, [Attempt(path, why)], HINT)


def library_version(path: str) -> str | None:
    """The CUDA release a toolkit library states in its ``Cuda compilation tools, release X.Y, VX.Y.Z`` string
    (libnvvm's ``nvvmVersion`` says only the NVVM version, 2.0), read without loading it; None if absent."""
    import mmap

    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            start = data.find(b"Cuda compilation tools, release ")
            if start < 0:
                return None
            m = re.match(_RELEASE, data[start:start + 80])
    except (OSError, ValueError):  # ValueError: an empty file cannot be mapped
        return None
    return m.group(3).decode() if m else None


def bytecode_versions(tileiras: str) -> tuple[tuple[int, int], ...]:
    """The bytecode versions ``tileiras --list-versions`` accepts, e.g. ``((13, 1), ..., (13, 5))``."""
    import subprocess

    try:
        done = _run_tool(tileiras, "--list-versions")
    except (OSError, subprocess.TimeoutExpired):
        return ()
    found = re.findall(rb"^\s*(\d+)\.(\d+)\s*$", done.stdout, re.MULTILINE)
    return tuple(sorted((int(a), int(b)) for a, b in found))


def listed_targets(tileiras: str) -> tuple[str, ...]:
    """The ``--gpu-name`` values of ``tileiras --help``."""
    import subprocess

    try:
        done = _run_tool(tileiras, "--help")
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(dict.fromkeys(re.findall(_GPU_NAME, done.stdout.decode(errors="replace"))))


# ----------------------------------------------------------------------------- discovery


def _is_program(path: str) -> str | None:
    """Why ``path`` is not a runnable program (None if it is)."""
    if os.path.isdir(path):
        return "is a folder, not a program"
    if not os.path.isfile(path):
        return "file does not exist" if not os.path.lexists(path) else "not a regular file"
    if not os.access(path, os.X_OK):
        return "not executable"
    return None


def tileiras_candidates() -> list[tuple[str, str]]:
    """Every place tileiras is looked for, in order, as (path or place, origin): ``$TILEJIT_TILEIRAS`` (then
    nothing else), pip wheels (``nvidia/cu13/bin``), ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``, ``PATH``."""
    name = "tileiras" + EXE
    explicit = config.TILEIRAS.get()
    setting = f"${config.TILEIRAS.name}"
    if explicit:
        path = os.path.abspath(explicit)
        return [(os.path.join(path, name) if os.path.isdir(path) else path, setting)]
    out: list[tuple[str, str]] = [(setting, "")]
    for cand in loader.pip_wheel_dirs(("nvidia/cu13/bin",), (name,), "nvidia-cuda-tileiras"):
        out.append((os.path.join(cand.path, name), cand.origin) if cand.kind == "dir" else (cand.path, ""))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        out.append((os.path.join(root, "bin", name), f"${var}") if root else (f"${var}", ""))
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    out += [(os.path.join(d, name), "PATH") for d in dirs] or [("$PATH", "")]
    return out


def _unset_why(place: str) -> str:
    var = place.lstrip("$")
    return "not set" if os.environ.get(var) is None else "set but empty: ignored"


def find_tileiras() -> tuple[str, str]:
    """The tileiras program to use and where it was found; ``LibraryNotFoundError`` lists every place tried."""
    attempts: list[Attempt] = []
    for path, origin in tileiras_candidates():
        if not origin:  # a place with nothing to look at (an unset variable, no pip folder)
            attempts.append(Attempt(path, "no such folder anywhere" if path.startswith("pip") else _unset_why(path)))
            continue
        why = _is_program(path)
        if why is None:
            return path, origin
        if origin != "PATH" or why != "file does not exist":
            attempts.append(Attempt(f"{path} ({origin})", why))
        elif not any(a.where == "PATH" for a in attempts):
            attempts.append(Attempt("PATH", "no tileiras in any of its folders"))
    raise LibraryNotFoundError("tileiras (the CUDA Tile IR assembler)", attempts, HINT)


def find_libnvvm(tileiras: str) -> str:
    """The libnvvm that ``tileiras`` loads (relative to its own real location, since the runner unsets
    ``$CUDA_HOME``/``$CUDA_PATH``); ``LibraryNotFoundError`` lists the places tileiras looks."""
    root = os.path.dirname(os.path.dirname(os.path.realpath(tileiras)))
    attempts: list[Attempt] = []
    for parts in LIBNVVM_NAMES:
        path = os.path.join(root, *parts)
        if os.path.isfile(path):
            return path
        attempts.append(Attempt(path, "file does not exist"))
    raise LibraryNotFoundError(
        f"libnvvm for tileiras at {tileiras}", attempts,
        "tileiras looks for libnvvm only there; " + HINT.replace("install the", "install a complete", 1),
    )


def find_ptxas(tileiras: str) -> str:
    """The ptxas that ``tileiras`` runs: the one in its own folder, else the first on ``PATH``."""
    name = "ptxas" + EXE
    attempts: list[Attempt] = []
    own = os.path.join(os.path.dirname(os.path.realpath(tileiras)), name)
    why = _is_program(own)
    if why is None:
        return own
    attempts.append(Attempt(own, why))
    for d in os.environ.get("PATH", "").split(os.pathsep):
        path = os.path.join(d, name)
        if d and _is_program(path) is None:
            return path
    attempts.append(Attempt("PATH", "no ptxas in any of its folders"))
    raise LibraryNotFoundError(f"ptxas for tileiras at {tileiras}", attempts,
                               "install nvidia-cuda-nvcc of the same CUDA version as tileiras; " + HINT)


def check_consistent(toolchain: Toolchain) -> None:
    """Raise ``LibraryNotFoundError`` naming each piece whose CUDA minor version differs from tileiras's
    (such a mix fails with only "failed to compile Tile IR program", even on an empty module)."""
    want = toolchain.release
    wrong: list[Attempt] = []
    for piece, version, path in (("libnvvm", toolchain.libnvvm_version, toolchain.libnvvm),
                                 ("ptxas", toolchain.ptxas_version, toolchain.ptxas)):
        if version is not None and major_minor(version) != want:
            have = "{}.{}".format(*major_minor(version))
            wrong.append(Attempt(path, f"tileiras {want[0]}.{want[1]} needs {piece} {want[0]}.{want[1]}; "
                                       f"found {have} at {path}"))
    if wrong:
        raise LibraryNotFoundError(
            f"a consistent CUDA Tile IR toolchain (tileiras {toolchain.tileiras_version} at {toolchain.tileiras})",
            wrong,
            "all pieces must be of one CUDA minor version: " + HINT,
        )


def find_toolchain() -> Toolchain:
    """Find tileiras and the libnvvm, ptxas and tileirdisasm it uses, read their versions and check that they
    agree; cached while the settings and ``PATH`` that discovery reads stay the same."""
    key = tuple(os.environ.get(v) for v in (config.TILEIRAS.name, "CUDA_HOME", "CUDA_PATH", "PATH"))
    with _lock:
        cached = _found.get(key)
    if cached is not None:
        return cached
    toolchain = probe(*find_tileiras())
    with _lock:
        _found[key] = toolchain
    return toolchain


def probe(tileiras: str, origin: str) -> Toolchain:
    """The ``Toolchain`` of the tileiras at ``tileiras``, checked for missing and mismatched pieces."""
    toolchain = ask(locate(tileiras), origin)
    check_consistent(toolchain)
    return toolchain


class Pieces(Record):
    """Where the pieces of one toolchain are, found without running any: tileiras (its real path), the
    tileirdisasm beside it (None: none), and the ptxas and libnvvm it uses."""

    _fields = ("tileiras", "tileirdisasm", "ptxas", "libnvvm")
    __slots__ = _fields
    tileiras: str
    tileirdisasm: str | None
    ptxas: str
    libnvvm: str

    def __init__(self, tileiras: str, tileirdisasm: str | None, ptxas: str, libnvvm: str) -> None:
        self._init(tileiras, tileirdisasm, ptxas, libnvvm)

    def as_fields(self) -> dict[str, str | None]:
        """The paths by field name, as ``Toolchain.from_fields`` takes them."""
        return {"tileiras": self.tileiras, "tileirdisasm": self.tileirdisasm, "ptxas": self.ptxas,
                "libnvvm": self.libnvvm}


def locate(tileiras: str) -> Pieces:
    """The pieces of the toolchain of the tileiras at ``tileiras``, running none of them; ``LibraryNotFoundError``
    names a missing one."""
    tileiras = os.path.realpath(tileiras)
    libnvvm = find_libnvvm(tileiras)
    ptxas = find_ptxas(tileiras)
    disasm: str | None = os.path.join(os.path.dirname(tileiras), "tileirdisasm" + EXE)
    if _is_program(disasm) is not None:  # type: ignore[arg-type]
        disasm = None
    return Pieces(tileiras, disasm, ptxas, libnvvm)


#: The ``Toolchain`` fields that ``ask`` learns by running (or reading) the pieces; the others are ``Pieces``' and
#: the origin.
REPORTED = ("tileiras_version", "ptxas_version", "libnvvm_version", "bytecode_versions", "targets")


def ask(pieces: Pieces, origin: str) -> Toolchain:
    """The ``Toolchain`` of ``pieces`` as they report themselves (runs tileiras and ptxas), not yet checked for
    consistency (``check_consistent``); ``LibraryNotFoundError`` when one states no version."""
    tileiras = pieces.tileiras
    version = program_version(tileiras, f"tileiras ({origin})")
    return Toolchain(
        tileiras, pieces.tileirdisasm, pieces.ptxas, pieces.libnvvm, version,
        program_version(pieces.ptxas, f"ptxas for tileiras at {tileiras}"), library_version(pieces.libnvvm),
        bytecode_versions(tileiras), supported_targets(major_minor(version), listed_targets(tileiras)), origin,
    )


def unavailable() -> str | None:
    """Why no usable CUDA Tile IR toolchain is here (the error's text), or None when there is one."""
    try:
        find_toolchain()
    except LibraryNotFoundError as exc:
        return str(exc)
    return None


_lock = threading.Lock()
_found: dict[tuple[str | None, ...], Toolchain] = {}
