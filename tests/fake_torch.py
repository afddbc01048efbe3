"""A stand-in for the part of torch's public API that tilejit's launches read (``data_ptr()``, ``dtype``,
``shape``, ``stride()``, ``is_cuda``, ``is_contiguous()``, ``device``), for CPU tests and the CPU launch
benchmark where torch is not installed. ``install()`` puts it in ``sys.modules`` as ``torch``; tilejit finds
torch tensors by their class's module, as it does for the real one."""

from __future__ import annotations

import sys
import types
from typing import Any

DTYPE_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32", "float64",
               "complex64")


class dtype:  # torch's spelling
    """``torch.float32`` and the like: compared by identity."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


class Size(tuple):  # type: ignore[type-arg]
    """``torch.Size``: a tuple subclass, made afresh on every ``.shape`` read as torch's is."""


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


class Tensor:
    """A device tensor's metadata; methods and attributes as torch's, each computed on every read. Tests change
    them in place (``set_``-like ``move``, ``transpose_``-like ``restride``) as torch's in-place operations do."""

    __slots__ = ("_contiguous", "_dtype", "_ptr", "_shape", "_strides", "is_cuda")

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype_: dtype, strides: tuple[int, ...] | None = None,
                 is_cuda: bool = True) -> None:
        self._ptr, self._shape, self._dtype, self.is_cuda = ptr, tuple(shape), dtype_, is_cuda
        self._strides = _c_strides(self._shape) if strides is None else tuple(strides)
        self._contiguous = self._strides == _c_strides(self._shape)  # torch keeps this flag too

    def data_ptr(self) -> int:
        return self._ptr

    @property
    def shape(self) -> Size:
        return Size(self._shape)

    @property
    def dtype(self) -> dtype:
        return self._dtype

    @property
    def device(self) -> str:
        return "cuda:0" if self.is_cuda else "cpu"

    def stride(self) -> tuple[int, ...]:
        return self._strides

    def is_contiguous(self) -> bool:
        return self._contiguous

    def move(self, ptr: int) -> None:
        """What ``t.set_(other)`` or ``t.data = other`` do to the address."""
        self._ptr = ptr

    def restride(self, shape: tuple[int, ...], strides: tuple[int, ...]) -> None:
        """What ``t.transpose_()``/``t.as_strided_()`` do: new sizes and strides, same memory."""
        self._shape, self._strides = tuple(shape), tuple(strides)
        self._contiguous = self._strides == _c_strides(self._shape)

    def retype(self, dtype_: dtype) -> None:
        """What ``t.data = t.view(other_dtype)`` does: the same address, read as another dtype."""
        self._dtype = dtype_

    def __eq__(self, other: object) -> Any:  # torch compares elementwise: tilejit must never ask
        raise AssertionError("tilejit compared a tensor with ==")

    __hash__ = object.__hash__


Tensor.__module__ = "torch"
Size.__module__ = "torch"
dtype.__module__ = "torch"


def _module() -> types.ModuleType:
    """A ``torch`` module with the dtypes and ``Tensor``."""
    torch = types.ModuleType("torch")
    for name in DTYPE_NAMES:
        setattr(torch, name, dtype(name))
    torch.Tensor = Tensor  # type: ignore[attr-defined]
    torch.Size = Size  # type: ignore[attr-defined]
    torch.dtype = dtype  # type: ignore[attr-defined]
    return torch


#: The one stand-in module (tilejit keeps the torch dtypes it has seen, so there is only one set of them).
TORCH = _module()


def install() -> types.ModuleType:
    """Put the stand-in in ``sys.modules`` as ``torch`` (for a script; tests use ``monkeypatch.setitem``)."""
    sys.modules["torch"] = TORCH
    return TORCH
