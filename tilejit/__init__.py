"""tilejit: GPU kernels as tile programs in Python, compiled anywhere for CUDA 11, 12 and 13.

Importing tilejit loads no CUDA library; the driver and compilers are found on first use.
"""

from __future__ import annotations

__version__ = "0.1.0"
