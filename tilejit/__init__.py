"""tilejit: GPU kernels as tile programs in Python, compiled anywhere for CUDA 11, 12 and 13.

Importing tilejit loads no CUDA library and no heavy module: every public name below is
resolved on first use, and the driver and compilers are found when a kernel first needs them.

    import tilejit as tj

    @tj.kernel
    def vector_add(x, y, out, TILE: tj.Constant[int]):
        i = tj.bid(0)
        tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)) + tj.load(y, index=(i,), shape=(TILE,)))
"""

from __future__ import annotations

import importlib
from os import environ as _environ
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Every exception and warning class of ``tilejit.errors`` (a test checks that none is missing).
_ERRORS = (
    "TilejitError", "TileCompileError", "CompileError", "CUDAError", "DriverVersionError", "LaunchError",
    "LibraryNotFoundError", "TargetError", "ConfigError", "NotDeviceArrayError", "IRVerificationError",
    "AutotuneError", "CacheWarning", "DumpWarning", "TileIRUnsupportedError", "TileirasError", "TensorMapError",
)

#: The public names outside the tile language, each with its module. The tile language's names (``tj.load``,
#: ``tj.float32``...) are ``tilejit.language.tile.__all__``, read when one is first asked for.
_LAZY: dict[str, str] = {
    "DType": "tilejit.language.ir.types",
    "kernel": "tilejit.api.kernel",
    "Kernel": "tilejit.api.kernel",
    "autotune": "tilejit.api.autotune",
    "Config": "tilejit.api.autotune",
    "compile": "tilejit.api.compile",
    "Artifact": "tilejit.api.compile",
    "backend_for": "tilejit.api.compile",
    "fuse": "tilejit.api.fuse",
    "Fused": "tilejit.api.fuse",
    "RawKernel": "tilejit.api.raw",
    "Device": "tilejit.runtime.device",
    "device_count": "tilejit.runtime.device",
    "get_device": "tilejit.runtime.device",
    "Stream": "tilejit.runtime.stream",
    "current_stream": "tilejit.runtime.stream",
    "Event": "tilejit.runtime.event",
    "DeviceArray": "tilejit.runtime.array",
    "asarray": "tilejit.runtime.array",
    "empty": "tilejit.runtime.array",
    **{name: "tilejit.errors" for name in _ERRORS},
}

_TILE = "tilejit.language.tile"


def _public_names() -> list[str]:
    """``tilejit.__all__``: the names above and the tile language's (importing it: asked for, not at import)."""
    return sorted({*_LAZY, *importlib.import_module(_TILE).__all__}) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name == "__all__":
        value: Any = _public_names()
    else:
        module = _LAZY.get(name)
        if module is None and not name.startswith("__") and name in importlib.import_module(_TILE).__all__:
            module = _TILE
        if module is None:
            raise AttributeError(f"module 'tilejit' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return _public_names()


if _environ.get("TILEJIT_LOG"):  # asked for: the tilejit logger prints to stderr (no handler otherwise)
    from tilejit.logs import configure as _configure_log

    _configure_log()


if TYPE_CHECKING:
    from tilejit.api.autotune import Config, autotune
    from tilejit.api.compile import Artifact, compile
    from tilejit.api.fuse import Fused, fuse
    from tilejit.api.kernel import Kernel, kernel
    from tilejit.api.raw import RawKernel
    from tilejit.errors import (
        AutotuneError,
        CacheWarning,
        CompileError,
        ConfigError,
        CUDAError,
        DriverVersionError,
        DumpWarning,
        IRVerificationError,
        LaunchError,
        LibraryNotFoundError,
        NotDeviceArrayError,
        TargetError,
        TensorMapError,
        TileCompileError,
        TileirasError,
        TileIRUnsupportedError,
        TilejitError,
    )
    from tilejit.language.ir.types import DType
    from tilejit.language.tile import *
    from tilejit.runtime.array import DeviceArray, asarray, empty
    from tilejit.runtime.device import Device, device_count, get_device
    from tilejit.runtime.event import Event
    from tilejit.runtime.stream import Stream, current_stream
