"""What the CUDA backend shares with the launch path, kept light to import: a warm-cache launch
needs these facts (layout hints, the parameter ABI, the device headers' text for the cache key)
without importing the code generator."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

ParamSpec = tuple[str, str, int] | tuple[str, str]

HEADER_NAMES = ("types", "tile", "math", "memory", "layout", "reduce", "mma", "tilejit")


@dataclass(frozen=True)
class ArrayHint:
    """Layout facts of an array argument that allow vector accesses."""

    unit_stride: bool = False  # innermost stride == 1 at launch
    aligned16: bool = False  # base pointer % 16 == 0 and every row starts 16-byte aligned


@functools.cache
def _read_headers() -> tuple[tuple[str, str], ...]:
    folder = os.path.join(os.path.dirname(__file__), "include", "tilejit")
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


def device_headers() -> dict[str, str]:
    """The device headers as an include-name → text map (read once from package data)."""
    return dict(_read_headers())
