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

# Functions, macros and types that NVRTC's built-in CUDA headers declare at file scope in CUDA 11.8-13.x
# (math functions, printf/malloc, vector types, stdarg macros...): an extern "C" kernel of the same name does
# not compile ("more than one instance of overloaded function has C linkage"). Found by compiling a kernel
# named after every identifier in each CUDA major's runtime headers; tests/test_backend_codegen.py repeats that
# check, so a name a new CUDA adds fails a test. Names starting with cuda/CUDA/CU_/NV_ are avoided by prefix.
_CUDA_DECLARED = frozenset((
    "abs", "acos", "acosf", "acosh", "acoshf", "asin", "asinf", "asinh", "asinhf", "assert", "atan", "atan2",
    "atan2f", "atanf", "atanh", "atanhf", "cbrt", "cbrtf", "ceil", "ceilf", "clock64", "copysign", "copysignf",
    "cos", "cosf", "cosh", "coshf", "cospi", "cospif", "cyl_bessel_i0", "cyl_bessel_i0f", "cyl_bessel_i1",
    "cyl_bessel_i1f", "erf", "erfc", "erfcf", "erfcinv", "erfcinvf", "erfcx", "erfcxf", "erff", "erfinv", "erfinvf",
    "exp", "exp10", "exp10f", "exp2", "exp2f", "expf", "expm1", "expm1f", "fabs", "fabsf", "fdim", "fdimf",
    "fdivide", "fdividef", "float2", "float4", "floor", "floorf", "fma", "fmaf", "fmax", "fmaxf", "fmin", "fminf",
    "fmod", "fmodf", "free", "frexp", "frexpf", "hypot", "hypotf", "ilogb", "ilogbf", "int2", "int4", "j0", "j0f",
    "j1", "j1f", "jn", "jnf", "labs", "ldexp", "ldexpf", "lgamma", "lgammaf", "llabs", "llmax", "llmin", "llrint",
    "llrintf", "llround", "llroundf", "log", "log10", "log10f", "log1p", "log1pf", "log2", "log2f", "logb", "logbf",
    "logf", "lrint", "lrintf", "lround", "lroundf", "malloc", "max", "min", "modf", "modff", "nan", "nanf",
    "nearbyint", "nearbyintf", "nextafter", "nextafterf", "norm", "norm3d", "norm3df", "norm4d", "norm4df",
    "normcdf", "normcdff", "normcdfinv", "normcdfinvf", "normf", "pow", "powf", "printf", "ptrdiff_t", "rcbrt",
    "rcbrtf", "remainder", "remainderf", "remquo", "remquof", "rhypot", "rhypotf", "rint", "rintf", "rnorm",
    "rnorm3d", "rnorm3df", "rnorm4d", "rnorm4df", "rnormf", "round", "roundf", "rsqrt", "rsqrtf", "scalbln",
    "scalblnf", "scalbn", "scalbnf", "sin", "sincos", "sincosf", "sincospi", "sincospif", "sinf", "sinh", "sinhf",
    "sinpi", "sinpif", "size_t", "sqrt", "sqrtf", "surface", "tan", "tanf", "tanh", "tanhf", "texture", "tgamma",
    "tgammaf", "trunc", "truncf", "ullmax", "ullmin", "umax", "umin", "va_arg", "va_copy", "va_end", "va_start",
    "y0", "y0f", "y1", "y1f", "yn", "ynf"
))
_CUDA_PREFIXES = ("cuda", "CUDA", "CU_", "NV_")

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
    reserved = name.startswith(("tj", "TJ", "__", *USER_PREFIXES, *_CUDA_PREFIXES)) or re.match(r"_[A-Z]", name)
    generated = re.fullmatch(r"[A-Za-z]+\d+(_\w*)?", name)
    declared = name in _KEYWORDS or name in _CUDA_DECLARED
    if name.isascii() and name.isidentifier() and not declared and not reserved and not generated:
        return name
    return "tjk_" + c_ident(name)


@dataclass(frozen=True)
class CV:
    """How one IR value is available in C++."""

    kind: str  # "scalar" | "tile" | "const" | "splat" | "arange"
    text: str  # expression / variable name / literal
    dtype: DType
    layout: Layout | None = None
