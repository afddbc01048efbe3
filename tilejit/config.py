"""Typed ``TILEJIT_*`` environment settings: the one place tilejit reads its configuration from.

Each setting is read when it is asked for, so tests and long-lived processes see changes to
``os.environ`` without re-importing anything.
"""

from __future__ import annotations

import os
from typing import Generic, TypeVar

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class Setting(Generic[T]):
    """One environment variable with a type, a default and a line of documentation.

    A plain class, not a dataclass: this module is on every first launch's path, and creating
    dataclasses (and importing ``dataclasses``/``inspect``) costs milliseconds there."""

    __slots__ = ("choices", "default", "doc", "kind", "name")

    def __init__(self, name: str, kind: type, default: T, doc: str, choices: tuple[str, ...] = ()) -> None:
        self.name = name
        self.kind = kind
        self.default = default
        self.doc = doc
        self.choices = choices  # a str setting: the values it takes (empty: any)

    def __repr__(self) -> str:
        return f"Setting({self.name!r}, {self.kind.__name__}, default={self.default!r})"

    def get(self) -> T:
        raw = os.environ.get(self.name)
        if raw is None:
            return self.default
        try:
            return self._parse(raw.strip())  # type: ignore[return-value]
        except ValueError as exc:
            from tilejit.errors import ConfigError  # only on a bad value: keeps this module's imports light

            raise ConfigError(f"environment variable {self.name}={raw!r}: {exc}") from None

    def _parse(self, raw: str) -> object:
        if self.kind is bool:
            low = raw.lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError("expected one of 1/0/true/false/yes/no/on/off")
        if self.kind is int:
            return _parse_size(raw) if raw else self.default
        if raw and self.choices and raw.lower() not in self.choices:
            raise ValueError(f"expected one of {', '.join(self.choices)}")
        return (raw.lower() if self.choices else raw) or self.default


def _parse_size(raw: str) -> int:
    """A byte count >= 0, optionally with a K/M/G/T suffix (powers of 1024): ``1000000``, ``512M``, ``1.5G``."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    low = raw.lower().removesuffix("b").removesuffix("i")
    try:
        if low and low[-1] in units:
            value = float(low[:-1]) * units[low[-1]]
            if not value >= 0 or value == float("inf"):  # also rejects nan
                raise ValueError
            size = int(value)
        else:
            size = int(low)
    except (ValueError, OverflowError):
        raise ValueError("expected a size in bytes such as 1000000, 512M or 2G") from None
    if size < 0:
        raise ValueError("a size must be >= 0")
    return size


CUDA_DRIVER: Setting[str | None] = Setting(
    "TILEJIT_CUDA_DRIVER", str, None, "explicit path of libcuda.so.1 / nvcuda.dll"
)
NVRTC: Setting[str | None] = Setting("TILEJIT_NVRTC", str, None, "explicit path of the NVRTC library to load")
NVJITLINK: Setting[str | None] = Setting("TILEJIT_NVJITLINK", str, None, "explicit path of the nvJitLink library")
CACHE_DIR: Setting[str | None] = Setting("TILEJIT_CACHE_DIR", str, None, "disk cache folder (default: user cache dir)")
CACHE: Setting[bool] = Setting("TILEJIT_CACHE", bool, True, "set to 0 to disable the disk cache")
CACHE_MAX_BYTES: Setting[int] = Setting("TILEJIT_CACHE_MAX_BYTES", int, 1 << 30, "cache size bound, e.g. 512M or 2G")
DEFAULT_ARCH: Setting[str | None] = Setting(
    "TILEJIT_ARCH", str, None, "compile target when no GPU is present, e.g. sm_90"
)
EMIT_PTX: Setting[bool] = Setting(
    "TILEJIT_EMIT_PTX", bool, False, "load PTX (driver JIT) instead of an exact-arch CUBIN"
)
ARCH_SPECIFIC: Setting[bool] = Setting(
    "TILEJIT_ARCH_SPECIFIC", bool, True, "tile kernels on an H100/H200 build for sm_90a (wgmma); 0: plain sm_90"
)
CUDA_WARP_SPECIALIZE: Setting[bool] = Setting(
    "TILEJIT_CUDA_WARP_SPECIALIZE", bool, True,
    "CUDA backend on sm_90a: run a recognized wgmma K loop with a producer warpgroup (TMA or cp.async into a ring of "
    "mbarrier-guarded stages) and consumer warpgroups (wgmma only); read when a kernel builds a specialization",
)
CUDA_TMA: Setting[bool] = Setting(
    "TILEJIT_CUDA_TMA", bool, True,
    "CUDA backend on sm_90a: a warp-specialized K loop's producer copies its operands with TMA (host-encoded tensor "
    "maps) where both arrays allow (unit inner stride, 16-byte aligned rows); 0: cp.async; read when a kernel builds "
    "a specialization",
)
TILEIRAS: Setting[str | None] = Setting(
    "TILEJIT_TILEIRAS", str, None, "explicit path of tileiras (or its bin folder) for the Tile IR backend"
)
BACKEND: Setting[str] = Setting(
    "TILEJIT_BACKEND", str, "auto",
    "tile kernel backend: cuda (C++ via NVRTC), tileir (via tileiras) or auto (Tile IR where a consistent "
    "tileiras toolchain supports the target, else CUDA C++; a kernel Tile IR refuses falls back to CUDA C++); read "
    "when a kernel builds a specialization, which it then keeps for the process",
    choices=("auto", "cuda", "tileir"),
)
AUTOTUNE: Setting[bool] = Setting(
    "TILEJIT_AUTOTUNE", bool, True,
    "set to 0 to launch autotuned kernels with their first config (after pruning), untimed"
)
LOG: Setting[str | None] = Setting(
    "TILEJIT_LOG", str, None,
    "debug, info or warning: print the tilejit logger's records of that level and above to stderr (compile stages "
    "and their times, disk cache hits and misses, module loads at debug); read when tilejit is imported",
    choices=("debug", "info", "warning"),
)
DUMP_DIR: Setting[str | None] = Setting(
    "TILEJIT_DUMP_DIR", str, None,
    "folder where each tile kernel compiled (not one a disk cache hit serves) leaves its stages: IR, CUDA C++ with "
    "the device headers, PTX, Tile IR text and bytecode, CUBIN",
)

ALL: tuple[Setting[object], ...] = (
    CUDA_DRIVER,  # type: ignore[assignment]
    NVRTC,  # type: ignore[assignment]
    NVJITLINK,  # type: ignore[assignment]
    CACHE_DIR,  # type: ignore[assignment]
    CACHE,  # type: ignore[assignment]
    CACHE_MAX_BYTES,  # type: ignore[assignment]
    DEFAULT_ARCH,  # type: ignore[assignment]
    EMIT_PTX,  # type: ignore[assignment]
    ARCH_SPECIFIC,  # type: ignore[assignment]
    CUDA_WARP_SPECIALIZE,  # type: ignore[assignment]
    CUDA_TMA,  # type: ignore[assignment]
    TILEIRAS,  # type: ignore[assignment]
    BACKEND,  # type: ignore[assignment]
    AUTOTUNE,  # type: ignore[assignment]
    LOG,  # type: ignore[assignment]
    DUMP_DIR,  # type: ignore[assignment]
)
