"""The CUDA backend's device headers (handed to NVRTC in memory) and the parameter ABI of its kernels;
light to import, without the code generator. Which headers are in use, for cache keys, is
``tilejit.backends.cuda_backend.headers_identity``."""

from __future__ import annotations

import functools
import os

from tilejit.backends.base import ParamSpec as ParamSpec
from tilejit.backends.cuda_backend import HEADER_NAMES, header_folder


@functools.cache
def read_headers() -> tuple[tuple[str, str], ...]:
    """(include name, text) of each device header, read once."""
    folder = header_folder()
    try:  # plain files: the usual install, and no importlib.resources to import
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
    return dict(read_headers())
