"""CUDA Tile IR output: bytecode for ``tileiras`` and the same module in ``cuda_tile.module`` text form.

``generate_bytecode(fn, target)`` and ``module_text(fn, target)`` take the IR ``Function`` of a
specialized kernel (``Artifact.ir()``); unsupported ops raise a located ``TileIRUnsupportedError``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from tilejit.backends.base import NO_HINTS, KernelHints
from tilejit.backends.tileir.module import VERSIONS
from tilejit.language.ir.ops import Function
from tilejit.language.ir.types import ArrayHint

__all__ = ["VERSIONS", "generate_bytecode", "module_text", "newest_accepted", "parse_version"]

_TARGET = re.compile(r"sm_(\d+)[a-z]?")


def parse_version(version: str | tuple[int, int] | None) -> tuple[int, int]:
    """``'13.4'`` or ``(13, 4)`` → ``(13, 4)``; ``None`` is the newest version this writer emits."""
    if version is None:
        return VERSIONS[-1]
    if isinstance(version, str):
        m = re.fullmatch(r"(\d+)\.(\d+)", version.strip())
        parsed = (int(m.group(1)), int(m.group(2))) if m else None
    else:
        parsed = tuple(version) if len(version) == 2 else None  # type: ignore[assignment]
    if parsed not in VERSIONS:
        known = ", ".join(f"{a}.{b}" for a, b in VERSIONS)
        raise ValueError(f"version: Tile IR bytecode version {version!r} is not one of {known}")
    return parsed  # type: ignore[return-value]


def newest_accepted(list_versions_output: str) -> tuple[int, int]:
    """The newest version this writer emits that ``tileiras --list-versions`` (its output, one version a line)
    lists; a ``ValueError`` saying both lists when they share none."""
    listed = set()
    for line in list_versions_output.split():
        m = re.fullmatch(r"(\d+)\.(\d+)", line)
        if m:
            listed.add((int(m.group(1)), int(m.group(2))))
    common = [v for v in VERSIONS if v in listed]
    if not common:
        ours = ", ".join(f"{a}.{b}" for a, b in VERSIONS)
        theirs = ", ".join(f"{a}.{b}" for a, b in sorted(listed)) or "none"
        raise ValueError(f"tileiras accepts bytecode versions {theirs}; this writer emits {ours}")
    return common[-1]


def _check_target(target: str) -> None:
    """Refuse a target that is not an ``sm_NN`` architecture name, naming the argument."""
    if not isinstance(target, str) or not _TARGET.fullmatch(target):
        raise ValueError(f"target: expected an architecture such as 'sm_90', got {target!r}")


def generate_bytecode(fn: Function, target: str, version: str | tuple[int, int] | None = None,
                      hints: Mapping[str, ArrayHint] | None = None, kernel_hints: KernelHints = NO_HINTS) -> bytes:
    """The Tile IR bytecode of kernel ``fn`` at ``version`` (default: the newest, 13.5), assuming the
    launch-checked array facts of ``hints`` (parameter name -> ``ArrayHint``), with the user's ``kernel_hints``."""
    _check_target(target)
    v = parse_version(version)
    from tilejit.backends.tileir.bytecode import encode_module
    from tilejit.backends.tileir.lower import lower_function

    return encode_module(lower_function(fn, target, hints, kernel_hints), v)


def module_text(fn: Function, target: str, hints: Mapping[str, ArrayHint] | None = None,
                kernel_hints: KernelHints = NO_HINTS) -> str:
    """Kernel ``fn`` as a ``cuda_tile.module`` in text form: deterministic, the module the bytecode holds."""
    _check_target(target)
    from tilejit.backends.tileir.lower import lower_function
    from tilejit.backends.tileir.text import print_module

    return print_module(lower_function(fn, target, hints, kernel_hints))
