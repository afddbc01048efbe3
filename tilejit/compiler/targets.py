"""Compile targets (``sm_90``, ``sm_90a``, ``sm_100f``): parsing, spelling, and checking against an NVRTC.

A target names a GPU architecture only; whether it is compiled to SASS (``sm_XX``) or PTX
(``compute_XX``) is chosen by the output kind, so ``"compute_90"`` and ``"sm_90"`` parse to the same target.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Literal

from tilejit.errors import TargetError

if TYPE_CHECKING:
    from typing import TypeAlias

    from tilejit.bindings.nvrtc import NVRTC

    Suffix: TypeAlias = Literal["", "a", "f"]  # type-checking only: costs ~70 us at import
    TargetLike: TypeAlias = "str | int | tuple[int, int] | tuple[int, int, str] | Target"

_EXAMPLES = 'e.g. "sm_90", "sm90", "90", 90, (9, 0), "compute_90", "sm_90a" or "sm_100f"'


@functools.total_ordering
class Target:
    """A GPU architecture: compute capability ``major.minor`` plus an optional ``a``/``f`` feature suffix.

    ``a`` (arch-specific, sm_90a and newer) and ``f`` (family-specific, sm_100f and newer) enable
    instructions that run only on that exact architecture or family.
    """

    # A plain class, not a dataclass: creating a dataclass costs import time on every warm launch.
    __slots__ = ("major", "minor", "suffix")
    major: int
    minor: int
    suffix: Suffix

    def __init__(self, major: int, minor: int, suffix: Suffix = "") -> None:
        object.__setattr__(self, "major", major)
        object.__setattr__(self, "minor", minor)
        object.__setattr__(self, "suffix", suffix)
        if not isinstance(self.major, int) or isinstance(self.major, bool) or not 1 <= self.major <= 99:
            raise TargetError(f"target major version must be an int in 1..99, got {self.major!r}")
        if not isinstance(self.minor, int) or isinstance(self.minor, bool) or not 0 <= self.minor <= 9:
            raise TargetError(f"target minor version must be an int in 0..9, got {self.minor!r}")
        if self.suffix not in ("", "a", "f"):
            raise TargetError(f"target suffix must be '', 'a' or 'f', got {self.suffix!r}")
        if self.suffix == "a" and self.number < 90:
            raise TargetError(f"arch-specific targets ('a') start at sm_90a; sm_{self.number}a does not exist")
        if self.suffix == "f" and self.number < 100:
            raise TargetError(f"family targets ('f') start at sm_100f; sm_{self.number}f does not exist")

    @property
    def number(self) -> int:
        """The architecture as one number: 90 for sm_90a, 120 for sm_120."""
        return self.major * 10 + self.minor

    @property
    def sm(self) -> str:
        """The real-architecture spelling, e.g. ``sm_90a``, used for CUBIN output."""
        return f"sm_{self.number}{self.suffix}"

    @property
    def compute(self) -> str:
        """The virtual-architecture spelling, e.g. ``compute_90a``, used for PTX and LTO-IR output."""
        return f"compute_{self.number}{self.suffix}"

    def __str__(self) -> str:
        return self.sm

    def __repr__(self) -> str:
        return f"Target(major={self.major!r}, minor={self.minor!r}, suffix={self.suffix!r})"

    def _key(self) -> tuple[int, int, str]:
        return (self.major, self.minor, self.suffix)

    def __eq__(self, other: object) -> bool:
        return self._key() == other._key() if isinstance(other, Target) else NotImplemented

    def __lt__(self, other: Target) -> bool:
        return self._key() < other._key() if isinstance(other, Target) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self) -> tuple[object, tuple[int, int, str]]:
        """Pickle and copy through ``__init__``: the slots refuse assignment."""
        return Target, self._key()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Target is immutable; cannot set {name!r}")


def parse_target(value: str | int | tuple[int, int] | tuple[int, int, str] | Target) -> Target:
    """Parse ``"sm_90"``, ``"sm90"``, ``"90"``, ``90``, ``(9, 0)``, ``"compute_90"``, ``"sm_90a"`` or ``"sm_100f"``."""
    if isinstance(value, Target):
        return value
    if isinstance(value, bool):
        raise TargetError(f"invalid target {value!r}: expected an architecture, {_EXAMPLES}")
    if isinstance(value, int):
        return _from_number(value, "", value)
    if isinstance(value, tuple):
        if len(value) in (2, 3) and all(isinstance(v, int) and not isinstance(v, bool) for v in value[:2]):
            suffix = value[2] if len(value) == 3 else ""
            if suffix in ("", "a", "f"):
                try:
                    return Target(value[0], value[1], suffix)  # type: ignore[arg-type]
                except TargetError as exc:
                    raise TargetError(f"invalid target {value!r}: {exc}") from None
        raise TargetError(f"invalid target {value!r}: a tuple must be (major, minor) such as (9, 0); {_EXAMPLES}")
    if isinstance(value, str):
        parsed = _split_target(value.strip().lower())
        if parsed is None:
            raise TargetError(f"invalid target {value!r}: expected {_EXAMPLES}")
        return _from_number(parsed[0], parsed[1], value)
    raise TargetError(f"invalid target {value!r} of type {type(value).__name__}: expected {_EXAMPLES}")


def _split_target(text: str) -> tuple[int, Suffix] | None:
    """``[sm|compute][_]NN[N][a|f]`` → (number, suffix), or None (no regular expression: compiling one
    would cost a first launch more than this ever costs)."""
    for prefix in ("compute_", "compute", "sm_", "sm"):
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    suffix = text[-1:] if text[-1:] in ("a", "f") else ""
    digits = text[: len(text) - len(suffix)]
    if not (2 <= len(digits) <= 3 and digits.isascii() and digits.isdigit()):
        return None
    return int(digits), suffix  # type: ignore[return-value]


def _from_number(number: int, suffix: Suffix, original: object) -> Target:
    if not 10 <= number <= 999:
        raise TargetError(f"invalid target {original!r}: {number} is not an architecture number (10..999); {_EXAMPLES}")
    try:
        return Target(number // 10, number % 10, suffix)
    except TargetError as exc:
        raise TargetError(f"invalid target {original!r}: {exc}") from None


def resolve_target(target: TargetLike | None = None) -> Target:
    """The compile target, by the one rule every compile entry point follows: ``target`` when given, else the
    current GPU's architecture when there is a GPU, else ``TILEJIT_ARCH``, else a ``TargetError`` saying so."""
    if target is not None:
        return parse_target(target)
    return default_target()


def default_target(how: str = "target='sm_90'") -> Target:
    """The target when none is given: the current GPU's architecture, else ``TILEJIT_ARCH``, else a ``TargetError``.

    This is the one rule for every compile entry point (``tj.compile``, ``RawKernel.compile``, ``compile_cuda``,
    ``tilejit compile``); ``how`` is how the caller's user names a target (the command line: ``--arch sm_90``),
    for the error's advice."""
    from tilejit import config

    if _has_gpu():
        from tilejit.runtime.device import get_device

        return parse_target(get_device().arch)
    configured = config.DEFAULT_ARCH.get()
    if configured:
        try:
            return parse_target(configured)
        except TargetError as exc:
            raise TargetError(f"{config.DEFAULT_ARCH.name}={configured!r}: {exc}") from None
    raise TargetError(
        f"no GPU is present to choose a compile target: pass {how}, set {config.DEFAULT_ARCH.name}=sm_90, "
        "or run where a GPU is"
    )


@functools.cache
def _has_gpu() -> bool:
    """Whether a CUDA driver reports a device (asked once: the driver's device count does not change)."""
    from tilejit.errors import TilejitError

    try:
        from tilejit.runtime.device import device_count

        return device_count() > 0
    except (ImportError, TilejitError, OSError):
        return False


#: For each CUDA major: the oldest architecture its NVRTC compiles for, and the pip extra that installs it.
_NVRTC_MAJORS = ((13, 75, "cu13"), (12, 50, "cu12"), (11, 35, "cu11"))


def _older_nvrtc_hint(target: Target, major: int) -> str:
    """What to install for a target older than NVRTC ``major`` supports: the newest older major that has it."""
    from tilejit import config

    for older, oldest_arch, extra in _NVRTC_MAJORS:
        if older < major and oldest_arch <= target.number:
            return (
                f'NVRTC {older} still compiles for {target.sm}: pip install "tilejit[{extra}]" (with several '
                f"installed the newest is used, so uninstall the newer one or set {config.NVRTC.name} to the "
                f"NVRTC {older} library)"
            )
    return f"no NVRTC that tilejit supports (CUDA 11 to 13) compiles for {target.sm}"


def format_targets(numbers: list[int]) -> str:
    """``[70, 75, 80]`` → ``"sm_70, sm_75, sm_80"``."""
    return ", ".join(f"sm_{n}" for n in numbers)


def check_supported(target: Target, nvrtc: NVRTC) -> None:
    """Raise ``TargetError`` unless ``nvrtc`` can compile for ``target`` (from ``nvrtcGetSupportedArchs``)."""
    archs = list(nvrtc.supported_archs())
    version = ".".join(str(v) for v in nvrtc.version)
    where = f"NVRTC {version} ({nvrtc.path})"
    if target.number not in archs:
        span = f"sm_{archs[0]}…sm_{archs[-1]}" if archs else "nothing"
        if archs and target.number < archs[0]:
            hint = _older_nvrtc_hint(target, int(nvrtc.version[0]))
        elif archs and target.number > archs[-1] and int(nvrtc.version[0]) < _NVRTC_MAJORS[0][0]:
            hint = f'a newer NVRTC may: pip install "tilejit[{_NVRTC_MAJORS[0][2]}]"'
        else:
            hint = f"install an NVRTC that supports {target.sm}"
        raise TargetError(
            f"{target.sm} is not supported by {where}, which compiles for {span}: {format_targets(archs)}. "
            f"Pick one of those; {hint}."
        )
    if target.suffix == "a" and tuple(nvrtc.version) < (12, 0):
        raise TargetError(f"{target.sm} needs NVRTC 12.0 or newer; {where} knows no arch-specific ('a') targets")
    if target.suffix == "f" and tuple(nvrtc.version) < (12, 9):
        raise TargetError(f"{target.sm} needs NVRTC 12.9 or newer; {where} knows no family ('f') targets")


__all__ = ["Target", "check_supported", "default_target", "format_targets", "parse_target", "resolve_target"]
