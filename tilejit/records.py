"""``Record``: small immutable value classes, cheap to define.

``dataclasses`` and ``typing.NamedTuple`` generate and compile code when a class is defined (a
NamedTuple compiles each string annotation too): 0.1 to 1 ms a class, which every new process
pays on its way to a first launch. A ``Record`` lists its fields once in ``_fields``, writes a
plain ``__init__`` that calls ``_init``, and gets equality, hashing and ``repr`` from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from typing_extensions import Self


class Record:
    """Base of the immutable value classes; a subclass sets ``_fields`` and ``__slots__ = _fields``."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()

    def _init(self, *values: object) -> None:
        """Set the fields, in ``_fields`` order (``__init__`` only: records are immutable after it)."""
        for name, value in zip(self._fields, values, strict=True):
            object.__setattr__(self, name, value)

    def replace(self, **changes: object) -> Self:
        """A copy with some fields changed (``__init__`` takes every field, in order)."""
        unknown = set(changes) - set(self._fields)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field(s) {', '.join(sorted(unknown))}")
        return type(self)(*(changes.get(name, getattr(self, name)) for name in self._fields))

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={_short_repr(getattr(self, name))}" for name in self._fields)
        return f"{type(self).__name__}({fields})"

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        """Pickle and copy through ``__init__`` (which takes every field, in order): the fields are slots
        that refuse assignment, so the default protocol could not restore them."""
        return type(self), self._values()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: {type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: {type(self).__name__} is immutable")


def _short_repr(value: object) -> str:
    """``repr`` of a field, but binary data (a CUBIN, PTX bytes) as its size: ``<3072 bytes>``."""
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{value.nbytes if isinstance(value, memoryview) else len(value)} bytes>"
    return repr(value)


__all__ = ["Record"]
