"""What the CUDA backend shares with the launch path, kept light to import: a warm-cache launch
needs these facts (layout hints, the parameter ABI, which device headers are in use for the cache
key) without importing the code generator."""

from __future__ import annotations

import functools
import os

from tilejit.records import Record

ParamSpec = tuple[str, str, int] | tuple[str, str]

HEADER_NAMES = ("types", "tile", "math", "memory", "layout", "reduce", "mma", "tilejit")


class ArrayHint(Record):
    """Layout facts of an array argument that allow vector accesses: ``unit_stride`` (innermost
    stride == 1 at launch), ``aligned16`` (base pointer % 16 == 0 and every row starts 16-byte aligned)."""

    _fields = ("unit_stride", "aligned16")
    __slots__ = _fields
    unit_stride: bool
    aligned16: bool

    def __init__(self, unit_stride: bool = False, aligned16: bool = False) -> None:
        self._init(unit_stride, aligned16)


@functools.cache
def _read_headers() -> tuple[tuple[str, str], ...]:
    folder = _header_folder()
    try:  # plain files: the usual install, and no importlib.resources to import on a warm launch
        texts = []
        for n in HEADER_NAMES:
            with open(os.path.join(folder, f"{n}.cuh"), encoding="utf-8") as f:
                texts.append(f.read())
    except OSError:  # e.g. a zipped install
        from importlib import resources

        root = resources.files("tilejit.backends.cuda").joinpath("include").joinpath("tilejit")
        texts = [root.joinpath(f"{n}.cuh").read_text(encoding="utf-8") for n in HEADER_NAMES]
    return tuple((f"tilejit/{n}.cuh", text) for n, text in zip(HEADER_NAMES, texts))


def _header_folder() -> str:
    return os.path.join(os.path.dirname(__file__), "include", "tilejit")


def headers_identity() -> str:
    """Which device headers a build uses, cheaply: each shipped header's name, size and modification
    time (as NVRTC is keyed by its file), or a hash of their text where they are not plain files."""
    parts = []
    try:
        for n in HEADER_NAMES:
            st = os.stat(os.path.join(_header_folder(), f"{n}.cuh"))
            parts.append(f"{n}:{st.st_size}:{st.st_mtime_ns}")
    except OSError:
        from tilejit.compiler.cache import sha256

        h = sha256()
        for name, text in _read_headers():
            h.update(name.encode() + b"\0" + text.encode() + b"\0")
        return h.hexdigest()
    return "|".join(parts)


def device_headers() -> dict[str, str]:
    """The device headers as an include-name → text map (read once from package data)."""
    return dict(_read_headers())
