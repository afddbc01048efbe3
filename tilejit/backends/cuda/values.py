"""How IR values exist in generated C++, and user names as safe C++ identifiers."""

from __future__ import annotations

from dataclasses import dataclass

from tilejit.backends.cuda.layouts import Layout
from tilejit.language.ir.types import DType

_KEYWORDS = frozenset((
    "alignas", "alignof", "asm", "auto", "bool", "break", "case", "catch", "char", "class", "const", "constexpr",
    "continue", "decltype", "default", "delete", "do", "double", "else", "enum", "explicit", "export", "extern",
    "false", "float", "for", "friend", "goto", "if", "inline", "int", "long", "mutable", "namespace", "new",
    "noexcept", "nullptr", "operator", "private", "protected", "public", "register", "return", "short", "signed",
    "sizeof", "static", "struct", "switch", "template", "this", "throw", "true", "try", "typedef", "typename",
    "union", "unsigned", "using", "virtual", "void", "volatile", "while", "half",
))


def c_ident(name: str) -> str:
    """A user name as a C++ identifier that cannot clash with keywords or generated names."""
    if name in _KEYWORDS or name.startswith(("tj", "_")) or (name[:1] in "tvcrL" and name[1:].isdigit()):
        return name + "_"
    return name


@dataclass(frozen=True)
class CV:
    """How one IR value is available in C++."""

    kind: str  # "scalar" | "tile" | "const" | "splat" | "arange"
    text: str  # expression / variable name / literal
    dtype: DType
    layout: Layout | None = None
