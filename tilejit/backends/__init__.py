"""Backends: tile IR to a loadable kernel image, behind one contract (``base``).

``cuda``: CUDA C++ compiled by NVRTC. ``tileir``: Tile IR bytecode compiled by ``tileiras``. Which one a
compile uses is ``base.choose_backend``; each backend's own facts (headers, toolchain identity, targets
to try) live in its package.
"""
