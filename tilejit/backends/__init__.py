"""Backends: tile IR to CUDA C++ (``cuda``, compiled by NVRTC).

Which device headers the CUDA backend ships is answered here, not in ``cuda``: a launch that hits
the disk cache puts it in its cache key and should not import the backend's package to learn it.
"""

from __future__ import annotations

import os

#: The device headers of the CUDA backend (``cuda/include/tilejit/<name>.cuh``), in include order.
HEADER_NAMES = ("types", "tile", "math", "memory", "layout", "reduce", "mma", "tilejit")


def header_folder() -> str:
    """Where the CUDA backend's device headers are, as plain files in a usual install."""
    return os.path.join(os.path.dirname(__file__), "cuda", "include", "tilejit")


def headers_identity() -> str:
    """Which device headers a build uses, cheaply: each shipped header's name, size and modification
    time (as NVRTC is keyed by its file), or a hash of their text where they are not plain files."""
    parts = []
    try:
        for n in HEADER_NAMES:
            st = os.stat(os.path.join(header_folder(), f"{n}.cuh"))
            parts.append(f"{n}:{st.st_size}:{st.st_mtime_ns}")
    except OSError:
        from tilejit.backends.cuda.abi import read_headers
        from tilejit.compiler.cache import sha256

        h = sha256()
        for name, text in read_headers():
            h.update(name.encode() + b"\0" + text.encode() + b"\0")
        return h.hexdigest()
    return "|".join(parts)
