"""Check the ctypes declarations of tilejit's binding tables against a toolkit's C headers.

A development and test tool, never imported at run time. It has a small C-declaration parser for
``cuda.h``/``cudaTypedefs.h``/``nvrtc.h``: function prototypes, ``#define name name_v2`` aliases
(with ``__CUDA_API_PTDS``/``__CUDA_API_PTSZ`` taken as the legacy default stream), typedefs of
scalars, handles, enums and function pointers, and enum values.

    python -m tilejit.bindings.abicheck /path/to/include     # prints problems, exit status 1 if any
"""

from __future__ import annotations

import ctypes
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# ----------------------------------------------------------------------------- C types


@dataclass(frozen=True)
class CType:
    """A C type reduced to what matters for the ABI: kind, width in bits, signedness, pointee."""

    kind: str  # "int", "float", "ptr", "void", "struct", "unknown"
    bits: int = 0
    signed: bool = False
    pointee: CType | None = None
    spelling: str = ""

    def __str__(self) -> str:
        if self.kind == "ptr":
            return f"{self.pointee}*"
        if self.kind == "int":
            return f"{'' if self.signed else 'u'}int{self.bits}"
        if self.kind == "float":
            return f"float{self.bits}"
        return self.spelling or self.kind


VOID = CType("void", spelling="void")
_CFUNC_PTR: type = ctypes.CFUNCTYPE(None).__mro__[1]  # ctypes._CFuncPtr, not exported to type checkers

_BUILTINS: dict[str, CType] = {}


def _b(names: Iterable[str], kind: str, bits: int, signed: bool) -> None:
    for n in names:
        _BUILTINS[n] = CType(kind, bits, signed, spelling=n)


# LP64 (Linux x86-64 / aarch64): long is 64-bit.
_b(["char", "signed char", "int8_t"], "int", 8, True)
_b(["unsigned char", "uint8_t", "bool", "_Bool"], "int", 8, False)
_b(["short", "short int", "signed short", "int16_t"], "int", 16, True)
_b(["unsigned short", "unsigned short int", "uint16_t"], "int", 16, False)
_b(["int", "signed", "signed int", "int32_t"], "int", 32, True)
_b(["unsigned", "unsigned int", "uint32_t", "cuuint32_t"], "int", 32, False)
_b(
    [
        "long",
        "long int",
        "signed long",
        "long long",
        "long long int",
        "signed long long",
        "int64_t",
        "ssize_t",
        "intptr_t",
        "ptrdiff_t",
    ],
    "int",
    64,
    True,
)
_b(
    [
        "unsigned long",
        "unsigned long int",
        "unsigned long long",
        "unsigned long long int",
        "uint64_t",
        "size_t",
        "uintptr_t",
        "cuuint64_t",
    ],
    "int",
    64,
    False,
)
_b(["float"], "float", 32, True)
_b(["double"], "float", 64, True)

_QUALIFIERS = {
    "const",
    "volatile",
    "restrict",
    "__restrict",
    "__restrict__",
    "CUDAAPI",
    "CUDA_CB",
    "extern",
    "__CUDA_DEPRECATED",
    "static",
    "inline",
    "__inline__",
    "__host__",
    "__device__",
}
_TYPE_WORDS = {
    "unsigned",
    "signed",
    "char",
    "short",
    "int",
    "long",
    "float",
    "double",
    "void",
    "struct",
    "enum",
    "union",
    "_Bool",
    "bool",
}


@dataclass
class Header:
    """Declarations parsed from one or more C headers (the first declaration of each name wins)."""

    functions: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # name -> (return, [arg decls])
    typedefs: dict[str, str] = field(default_factory=dict)  # name -> declaration text of the aliased type
    funcptrs: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # typedef name -> (return, args)
    enum_types: set[str] = field(default_factory=set)
    struct_types: set[str] = field(default_factory=set)
    enumerators: dict[str, int] = field(default_factory=dict)
    defines: dict[str, str] = field(default_factory=dict)

    # ------------------------------------------------------------------ parsing

    def parse(self, text: str) -> Header:
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        text = re.sub(r"//[^\n]*", " ", text)
        text = text.replace("\\\n", " ")
        body: list[str] = []
        for line in text.split("\n"):
            stripped = line.strip()
            if stripped.startswith("#"):
                m = re.match(r"#\s*define\s+(\w+)\s+(.+)$", stripped)
                if m and m.group(1) not in self.defines:
                    self.defines[m.group(1)] = m.group(2).strip()
                continue
            body.append(line)
        code = re.sub(r'extern\s+"C"\s*\{', " ", "\n".join(body))
        for stmt in _statements(code):
            self._statement(" ".join(stmt.split()))
        return self

    def _statement(self, stmt: str) -> None:
        if not stmt:
            return
        if stmt.startswith("typedef "):
            self._typedef(stmt[len("typedef ") :])
            return
        if re.match(r"(enum)\s+\w*\s*\{", stmt):
            self._enum_body(stmt[stmt.index("{") + 1 : stmt.rindex("}")])
            return
        if "{" in stmt:
            m = re.match(r"(.*?)\b(\w+)\s*\((.*?)\)\s*\{", stmt)  # an inline function definition
            if m and m.group(2) not in self.functions:
                self.functions[m.group(2)] = (m.group(1).strip(), _split_args(m.group(3)))
            return
        m = re.match(r"(.*?)\b(\w+)\s*\((.*)\)\s*(?:__attribute__\s*\(\(.*\)\))?\s*$", stmt)
        if m and not m.group(1).strip().endswith("("):
            ret, name, args = m.group(1).strip(), m.group(2), m.group(3)
            ret = re.sub(r"__attribute__\s*\(\(.*?\)\)", " ", ret)
            ret = re.sub(r"__declspec\s*\(.*?\)", " ", ret)
            if ret and name not in self.functions:
                self.functions[name] = (ret, _split_args(args))

    def _typedef(self, decl: str) -> None:
        m = re.match(r"(.*?)\(\s*(?:\w+\s+)*\*\s*(\w+)\s*\)\s*\((.*)\)\s*$", decl)
        if m and "{" not in decl:
            self.funcptrs.setdefault(m.group(2), (m.group(1).strip(), _split_args(m.group(3))))
            self.typedefs.setdefault(m.group(2), "void *")
            return
        if "{" in decl:
            keyword = decl.split(None, 1)[0]
            inner = decl[decl.index("{") + 1 : decl.rindex("}")]
            after = decl[decl.rindex("}") + 1 :]
            if keyword == "enum":
                self._enum_body(inner)
            for declarator in after.split(","):
                declarator = declarator.strip()
                name_m = re.match(r"(\**)\s*(\w+)\s*$", declarator)
                if not name_m:
                    continue
                stars, name = name_m.groups()
                if stars:
                    self.typedefs.setdefault(name, "void " + stars)
                elif keyword == "enum":
                    self.enum_types.add(name)
                elif keyword in ("struct", "union"):
                    self.struct_types.add(name)
            return
        m = re.match(r"(.*?)(\w+)\s*(\[[^\]]*\])?\s*$", decl)
        if m:
            base, name, array = m.groups()
            if array:
                base += " *"
            if base.strip().startswith("enum ") and "*" not in base:
                self.enum_types.add(name)
            self.typedefs.setdefault(name, base.strip())

    def _enum_body(self, inner: str) -> None:
        value = -1
        for item in inner.split(","):
            item = item.strip()
            if not item:
                continue
            name, _, expr = item.partition("=")
            name = name.strip()
            if not re.fullmatch(r"\w+", name):
                continue
            if expr.strip():
                evaluated = self._eval(expr)
                if evaluated is None:
                    continue
                value = evaluated
            else:
                value += 1
            self.enumerators.setdefault(name, value)

    def _eval(self, expr: str) -> int | None:
        expr = re.sub(r"(?<=[0-9a-fA-F])[uUlL]+\b", "", expr.strip())
        expr = re.sub(r"\(\s*(?:int|unsigned int|long|unsigned long|long long|unsigned long long)\s*\)", "", expr)

        def name(m: re.Match[str]) -> str:
            word = m.group(0)
            if word in self.enumerators:
                return str(self.enumerators[word])
            if word in self.defines and re.fullmatch(r"[\w\s()<|x+\-]+", self.defines[word]):
                return "(" + self.defines[word] + ")"
            return word

        for _ in range(4):
            expr = re.sub(r"\b[A-Za-z_]\w*\b", name, expr)
        if not re.fullmatch(r"[0-9a-fA-Fx\s()<>|&+\-~*]+", expr):
            return None
        try:
            return int(eval(expr, {"__builtins__": {}}, {}))
        except Exception:
            return None

    # ------------------------------------------------------------------ queries

    def resolve(self, decl: str, depth: int = 0) -> CType:
        """The CType of a declaration such as ``const char * const *`` or ``CUdeviceptr``."""
        if depth > 30:
            return CType("unknown", spelling=decl)
        decl = decl.replace("[]", "*")
        stars = decl.count("*")
        words = [w for w in re.findall(r"\w+", decl) if w not in _QUALIFIERS]
        if words and words[0] in ("struct", "union", "enum"):
            tag = words[0]
            name = words[1] if len(words) > 1 else ""
            base = (
                CType("int", 32, True, spelling=f"enum {name}")
                if tag == "enum"
                else CType("struct", spelling=f"{tag} {name}")
            )
        else:
            spelled = " ".join(words)
            if spelled == "void":
                base = VOID
            elif spelled in _BUILTINS:
                base = _BUILTINS[spelled]
            elif len(words) == 1 and words[0] in self.enum_types:
                base = CType("int", 32, True, spelling=words[0])
            elif len(words) == 1 and words[0] in self.struct_types:
                base = CType("struct", spelling=words[0])
            elif len(words) == 1 and words[0] in self.typedefs:
                base = self.resolve(self.typedefs[words[0]], depth + 1)
            else:
                base = CType("unknown", spelling=spelled)
        for _ in range(stars):
            base = CType("ptr", 64, False, base)
        return base

    def signature(self, name: str) -> tuple[CType, list[CType]] | None:
        """Return type and argument types of a declared function, or None."""
        found = self.functions.get(name)
        return None if found is None else self._types(found)

    def funcptr_signature(self, typedef: str) -> tuple[CType, list[CType]] | None:
        found = self.funcptrs.get(typedef)
        return None if found is None else self._types(found)

    def _types(self, found: tuple[str, list[str]]) -> tuple[CType, list[CType]]:
        ret, args = found
        return self.resolve(ret), [self.resolve(_strip_param_name(a)) for a in args]

    def mapped_symbol(self, name: str) -> str:
        """The symbol the header makes ``name`` call: ``cuMemAlloc`` -> ``cuMemAlloc_v2`` (legacy stream)."""
        target = self.defines.get(name, name)
        m = re.fullmatch(r"__CUDA_API_PT(?:DS|SZ)\(\s*(\w+)\s*\)", target)
        if m:
            target = m.group(1)
        return target if re.fullmatch(r"\w+", target) else name

    def pfn_versions(self, name: str) -> list[int]:
        """ABI versions of ``name`` in cudaTypedefs.h (``PFN_<name>_v<version>``, default stream), ascending."""
        rx = re.compile(rf"PFN_{re.escape(name)}_v(\d+)")
        return sorted({int(m.group(1)) for t in self.funcptrs if (m := rx.fullmatch(t))})


def _statements(code: str) -> list[str]:
    """Split C code into top-level statements (``;``-terminated, or a function body's closing ``}``)."""
    out: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(code):
        if ch == "{":
            depth += 1
        elif ch == "}":
            if depth == 0:  # closing brace of extern "C"
                start = i + 1
                continue
            depth -= 1
            if depth == 0:
                head = code[start:i].lstrip()
                if not re.match(r"(typedef|struct|enum|union)\b", head):
                    out.append(code[start : i + 1])
                    start = i + 1
        elif ch == ";" and depth == 0:
            out.append(code[start:i])
            start = i + 1
    return out


def _split_args(args: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    cur = ""
    for ch in args:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    if parts == ["void"]:
        return []
    return parts


def _strip_param_name(arg: str) -> str:
    """``const char * const * options`` -> ``const char * const *``; ``unsigned int`` stays."""
    arg = re.sub(r"\[[^\]]*\]", "*", arg)
    if re.search(r"\(\s*\*", arg):  # a function-pointer parameter
        return "void *"
    m = re.match(r"(.*?)\b(\w+)\s*$", arg)
    if m:
        before, last = m.groups()
        meaningful = [w for w in re.findall(r"\w+", before) if w not in _QUALIFIERS]
        if meaningful and last not in _TYPE_WORDS and (meaningful[-1] not in ("struct", "enum", "union")):
            return before
    return arg


def parse_headers(*paths: Path | str) -> Header:
    """One Header holding the declarations of all the given files, in order."""
    header = Header()
    for path in paths:
        header.parse(Path(path).read_text(encoding="utf-8", errors="replace"))
    return header


# ----------------------------------------------------------------------------- ctypes side


def ctype_of(t: Any) -> CType:
    """The CType a ctypes type passes as (None restype is void)."""
    if t is None:
        return VOID
    if t in (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_wchar_p):
        pointee = {ctypes.c_void_p: VOID, ctypes.c_char_p: _BUILTINS["char"]}.get(t, CType("unknown"))
        return CType("ptr", 64, False, pointee)
    if isinstance(t, type) and issubclass(t, ctypes._Pointer):
        return CType("ptr", 64, False, ctype_of(t._type_))
    if isinstance(t, type) and issubclass(t, _CFUNC_PTR):
        return CType("ptr", 64, False, CType("function"))
    if isinstance(t, type) and issubclass(t, (ctypes.Structure, ctypes.Union)):
        return CType("struct", spelling=t.__name__)
    if isinstance(t, type) and issubclass(t, ctypes._SimpleCData):
        code = t._type_  # type: ignore[attr-defined]
        if code in "fd":
            return CType("float", ctypes.sizeof(t) * 8, True, spelling=t.__name__)
        if code in "?":
            return CType("int", 8, False, spelling=t.__name__)
        return CType("int", ctypes.sizeof(t) * 8, code in "bhilqc", spelling=t.__name__)
    return CType("unknown", spelling=repr(t))


def compatible(c: CType, py: CType, top: bool = True) -> str | None:
    """Why a ctypes type cannot stand for a C type, or None when it can."""
    if c.kind == "unknown":
        return f"cannot resolve C type {c.spelling!r}"
    if c.kind == "ptr":
        if py.kind != "ptr":
            return f"C {c} is a pointer, ctypes passes {py}"
        assert c.pointee is not None and py.pointee is not None
        if c.pointee.kind in ("void", "struct", "function") or py.pointee.kind in ("void", "unknown", "function"):
            return None
        if py.pointee.kind == "struct" or c.pointee.kind == "unknown":
            return None
        why = compatible(c.pointee, py.pointee, top=False)
        return None if why is None else f"pointee of C {c} vs ctypes {py}: {why}"
    if c.kind == "void":
        return None if py.kind == "void" else f"C void, ctypes {py}"
    if c.kind != py.kind:
        return f"C {c} vs ctypes {py}"
    if c.bits != py.bits:
        return f"C {c} is {c.bits}-bit, ctypes {py} is {py.bits}-bit"
    if c.kind == "int" and c.signed != py.signed and c.bits > 8:
        return f"C {c} vs ctypes {py}: signedness differs"
    return None


# ----------------------------------------------------------------------------- table checks


def check_signature(name: str, sig: tuple[CType, list[CType]], argtypes: Sequence[Any], restype: Any) -> list[str]:
    """Problems with a ctypes declaration against a C signature (count, each argument, return type)."""
    ret, args = sig
    problems: list[str] = []
    if len(args) != len(argtypes):
        return [f"{name}: header has {len(args)} arguments, table has {len(argtypes)}"]
    for i, (c, py) in enumerate(zip(args, argtypes)):
        why = compatible(c, ctype_of(py))
        if why:
            problems.append(f"{name}: argument {i + 1}: {why}")
    why = compatible(ret, ctype_of(restype))
    if why:
        problems.append(f"{name}: return type: {why}")
    return problems


def check_functions(header: Header, entries: Iterable[Any], required_attr: str = "required") -> list[str]:
    """Every entry's ctypes declaration against the header's prototype; a required entry the header
    lacks is a problem, an optional one is skipped (an older toolkit)."""
    problems: list[str] = []
    for e in entries:
        sig = header.signature(e.name)
        if sig is None:
            if getattr(e, required_attr, True):
                problems.append(f"{e.name}: not declared in the header")
            continue
        problems += check_signature(e.name, sig, e.argtypes, e.restype)
    return problems


def symbol_for_version(header: Header, name: str, version: int) -> str | None:
    """The exported symbol of ``name``'s ABI at ``version``: ``cuMemAlloc`` at 3020 -> ``cuMemAlloc_v2``."""
    versions = header.pfn_versions(name)
    if version not in versions:
        return None
    index = versions.index(version)
    return name if index == 0 else f"{name}_v{index + 1}"


def check_driver_versions(header: Header, entries: Iterable[Any]) -> list[str]:
    """For each driver entry: the version we request resolves (highest ABI version <= requested, as
    cuGetProcAddress does) to the symbol the header maps the base name to, or to a later revision with
    the identical signature; the ABI we get matches the table; the dlsym fallback name is that symbol."""
    problems: list[str] = []
    for e in entries:
        versions = header.pfn_versions(e.name)
        if not versions:
            if e.required:
                problems.append(f"{e.name}: no PFN_{e.name}_v* typedef in cudaTypedefs.h")
            continue
        mapped = header.mapped_symbol(e.name)
        expected = next((v for v in versions if symbol_for_version(header, e.name, v) == mapped), None)
        if expected is None:
            problems.append(f"{e.name}: header maps it to {mapped}, which matches no PFN version {versions}")
            continue
        eligible = [v for v in versions if v <= e.version]
        if not eligible:
            problems.append(f"{e.name}: requested version {e.version} predates its first ABI {versions[0]}")
            continue
        resolved = eligible[-1]
        got = header.funcptr_signature(f"PFN_{e.name}_v{resolved}")
        want = header.funcptr_signature(f"PFN_{e.name}_v{expected}")
        if got is None or want is None:
            problems.append(f"{e.name}: PFN typedef for version {resolved} or {expected} missing")
            continue
        if resolved != expected and (resolved < expected or not _same_signature(got, want)):
            problems.append(
                f"{e.name}: requested version {e.version} resolves to "
                f"{symbol_for_version(header, e.name, resolved)} ({resolved}), but the header maps "
                f"{e.name} to {mapped} ({expected})"
            )
            continue
        problems += check_signature(f"{e.name}@{resolved}", got, e.argtypes, e.restype)
        if symbol_for_version(header, e.name, resolved) not in e.dlsym_names:
            problems.append(
                f"{e.name}: dlsym fallback names {e.dlsym_names} lack {symbol_for_version(header, e.name, resolved)}"
            )
        by_symbol = {symbol_for_version(header, e.name, v): v for v in versions}
        for symbol in e.dlsym_names:
            if symbol not in by_symbol:
                if symbol.startswith(e.name + "_v"):
                    continue  # a revision newer than this header
                problems.append(f"{e.name}: dlsym fallback {symbol} is no ABI version of {e.name}")
                continue
            other = header.funcptr_signature(f"PFN_{e.name}_v{by_symbol[symbol]}")
            if other is None or not _same_signature(other, got):
                problems.append(f"{e.name}: dlsym fallback {symbol} has another signature than version {resolved}")
    return problems


def _same_signature(a: tuple[CType, list[CType]], b: tuple[CType, list[CType]]) -> bool:
    return str(a[0]) == str(b[0]) and [str(x) for x in a[1]] == [str(x) for x in b[1]]


def check_constants(header: Header, constants: dict[str, Any], prefixes: Sequence[str]) -> tuple[list[str], int]:
    """Module constants with the given prefixes against the header's enumerators and ``((void*)N)`` defines.

    Returns the problems and how many constants were compared (constants the header lacks are skipped).
    """
    problems: list[str] = []
    compared = 0
    for name, value in constants.items():
        if not name.startswith(tuple(prefixes)):
            continue
        if isinstance(value, ctypes.c_void_p):
            value = value.value or 0
        if not isinstance(value, int):
            continue
        if name in header.enumerators:
            want: int | None = header.enumerators[name]
        elif name in header.defines:
            raw = header.defines[name]
            m = re.fullmatch(r"\(\(void\s*\*\)\s*(\w+)\)", raw)
            want = header._eval(m.group(1) if m else raw)
        else:
            continue
        compared += 1
        if want != value:
            problems.append(f"{name} = {value}, header says {want}")
    return problems, compared


def main(argv: Sequence[str] | None = None) -> int:
    """Check the driver and NVRTC tables against the headers in an include folder."""
    from tilejit.bindings import driver, nvrtc

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m tilejit.bindings.abicheck INCLUDE_DIR", file=sys.stderr)
        return 2
    inc = Path(args[0])
    cuda = parse_headers(inc / "cuda.h", inc / "cudaTypedefs.h")
    problems = check_functions(cuda, driver.ENTRIES) + check_driver_versions(cuda, driver.ENTRIES)
    problems += check_constants(cuda, vars(driver), ("CU_", "CUDA_"))[0]
    if (inc / "nvrtc.h").exists():
        rtc = parse_headers(inc / "nvrtc.h")
        problems += check_functions(rtc, nvrtc.ENTRIES) + check_constants(rtc, vars(nvrtc), ("NVRTC_",))[0]
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
