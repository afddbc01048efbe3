"""Device arrays for GPU tests: inputs copied from numpy, outputs poisoned so unwritten elements show."""

from __future__ import annotations

from typing import Any

import numpy as np

import tilejit as tj


def dev(a: np.ndarray) -> Any:
    """A contiguous device copy of ``a``."""
    return tj.asarray(np.ascontiguousarray(a))


def poisoned(shape: Any, dtype: Any) -> Any:
    """A device array of ``shape`` filled with 77, a value the tests' kernels never write."""
    return tj.asarray(np.full(shape, 77, dtype))
