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
        raise TargetError(
            f"{target.sm} is not supported by {where}, which compiles for {span}: {format_targets(archs)}. "
            f"Pick one of those, or install an NVRTC that supports {target.sm}."
        )
    if target.suffix == "a" and tuple(nvrtc.version) < (12, 0):
        raise TargetError(f"{target.sm} needs NVRTC 12.0 or newer; {where} knows no arch-specific ('a') targets")
    if target.suffix == "f" and tuple(nvrtc.version) < (12, 9):
        raise TargetError(f"{target.sm} needs NVRTC 12.9 or newer; {where} knows no family ('f') targets")


__all__ = ["Target", "check_supported", "format_targets", "parse_target"]
