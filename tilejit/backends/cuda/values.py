"""How IR values exist in generated C++, and user names as safe C++ identifiers."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tilejit.backends.cuda.layouts import Layout
from tilejit.language.ir.types import DType

# C++20 keywords, alternative tokens, names the CUDA/NVRTC environment predefines, and names that
# tilejit's generated code declares at file scope: a kernel symbol must avoid all of them.
_KEYWORDS = frozenset((
    "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break", "case", "catch",
    "char", "char8_t", "char16_t", "char32_t", "class", "co_await", "co_return", "co_yield", "compl", "concept",
    "const", "consteval", "constexpr", "constinit", "const_cast", "continue", "decltype", "default", "delete",
    "do", "double", "dynamic_cast", "else", "enum", "explicit", "export", "extern", "false", "float", "for",
    "friend", "goto", "if", "import", "inline", "int", "long", "module", "mutable", "namespace", "new", "noexcept",
    "not", "not_eq", "nullptr", "operator", "or", "or_eq", "private", "protected", "public", "register",
    "reinterpret_cast", "requires", "return", "short", "signed", "sizeof", "static", "static_assert",
    "static_cast", "struct", "switch", "template", "this", "thread_local", "throw", "true", "try", "typedef",
    "typeid", "typename", "union", "unsigned", "using", "virtual", "void", "volatile", "wchar_t", "while", "xor",
    "xor_eq", "final", "override", "NULL", "main", "std", "half", "nv_bfloat16",
    "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "dim3", "uint3", "int3",
))

# User names (kernel parameters, locals) live in their own namespace: an ASCII name is emitted as
# "u_" + name, any other as "u0_" + its punycode spelling. Generated C++ (lower.py and the other
# lowerings, the device headers' macros and helpers) never declares or uses a name starting with
# "u_" or "u0_" (USER_PREFIXES), so neither side can capture the other, and no user name can spell a
# keyword, builtin or macro.
USER_PREFIX = "u"
USER_PREFIXES = ("u_", "u0_")


def c_ident(name: str) -> str:
    """A user name as a C++ identifier: injective, deterministic, ASCII, disjoint from generated names."""
    if name.isascii():
        return USER_PREFIX + "_" + name
    # Punycode is injective and ASCII; its one '-' (before the encoded part, which is [a-z0-9]) becomes
    # '_', and the last '_' still marks where the encoded part starts, so the mapping stays injective.
    return USER_PREFIX + "0_" + name.encode("punycode").decode("ascii").replace("-", "_")


def kernel_symbol(name: str) -> str:
    """The extern "C" symbol of a kernel: its own name when that is a safe C++ identifier, else mangled."""
    reserved = name.startswith(("tj", "TJ", "__", *USER_PREFIXES)) or re.match(r"_[A-Z]", name)
    generated = re.fullmatch(r"[A-Za-z]+\d+(_\w*)?", name)
    if name.isascii() and name.isidentifier() and name not in _KEYWORDS and not reserved and not generated:
        return name
    return "tjk_" + c_ident(name)


@dataclass(frozen=True)
class CV:
    """How one IR value is available in C++."""

    kind: str  # "scalar" | "tile" | "const" | "splat" | "arange"
    text: str  # expression / variable name / literal
    dtype: DType
    layout: Layout | None = None
