"""``RawKernel``: a CUDA C++ kernel written by hand, compiled with NVRTC and launched fast.

    add = tj.RawKernel(source, "vadd")          # parameter types read from the source
    add(grid, block, (x, y, out, n))            # x, y, out: any device arrays; n: an int

Parameter types come from the kernel's ``__global__ void name(...)`` signature (or ``param_types``):
pointers take any device array (tilejit, torch, CuPy, JAX, ``__cuda_array_interface__``, DLPack)
or an int address; scalars are packed as their C type. The source is read without a preprocessor,
so every compile checks the declaration against the ``.param`` list of the PTX NVRTC made: where
``#if``/``#ifdef`` choose between declarations, or a macro names a type, the compiled kernel decides.
The kernel is compiled for the current device on its first launch there (through the disk cache,
whose entry holds the checked parameters too) and kept per device.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tilejit.runtime import device as _device_state
from tilejit.runtime.launch import Launcher, ParamKind

if TYPE_CHECKING:
    from tilejit.compiler.nvrtc import CompiledProgram
    from tilejit.compiler.targets import Target
    from tilejit.runtime.dispatch import FirstLaunches

_CACHE_TAG = "tilejit.RawKernel.v1"  # the entry holds the code and its checked parameters

_TYPE_WORDS = {"unsigned", "signed", "int", "long", "short", "char", "float", "double", "bool", "void"}
_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "struct"}
_LONG = "int32" if sys.platform == "win32" else "int64"
_ULONG = "uint32" if sys.platform == "win32" else "uint64"

#: C spellings of the scalar types a kernel parameter can have → runtime dtype names.
C_TYPES: dict[str, str] = {
    "bool": "bool", "char": "int8", "signed char": "int8", "unsigned char": "uint8",
    "short": "int16", "short int": "int16", "signed short": "int16", "unsigned short": "uint16",
    "unsigned short int": "uint16",
    "int": "int32", "signed": "int32", "signed int": "int32", "unsigned": "uint32", "unsigned int": "uint32",
    "long": _LONG, "long int": _LONG, "signed long": _LONG, "unsigned long": _ULONG, "unsigned long int": _ULONG,
    "long long": "int64", "long long int": "int64", "signed long long": "int64", "unsigned long long": "uint64",
    "unsigned long long int": "uint64",
    "int8_t": "int8", "int16_t": "int16", "int32_t": "int32", "int64_t": "int64",
    "uint8_t": "uint8", "uint16_t": "uint16", "uint32_t": "uint32", "uint64_t": "uint64",
    "size_t": "uint64", "ptrdiff_t": "int64", "intptr_t": "int64", "uintptr_t": "uint64",
    "float": "float32", "double": "float64", "__half": "float16", "half": "float16",
    "__nv_bfloat16": "bfloat16", "nv_bfloat16": "bfloat16",
    # tilejit's own dtype names are accepted in param_types
    "float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "float64": "float64",
    "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
}



def parse_c_type(text: str, *, where: str = "parameter") -> ParamKind:
    """The :class:`ParamKind` of a C parameter type such as ``const float* __restrict__`` or ``int``.

    ``T*`` (any qualifiers) is a pointer (element dtype None for ``void`` or unknown types such as
    ``float4``); scalars must be one of :data:`C_TYPES`. Anything else raises ``ValueError``.
    """
    tokens = [t for t in _tokens(text) if t not in _QUALIFIERS]
    if "&" in tokens or "[" in tokens:
        raise ValueError(f"{where}: references and arrays ({text.strip()!r}) cannot be kernel parameters here")
    depth = tokens.count("*")
    base = " ".join(t for t in tokens if t != "*")
    if depth:
        if depth == 1 and tokens[-1] != "*":
            raise ValueError(f"{where}: cannot parse the type {text.strip()!r}")
        return ParamKind.pointer(C_TYPES.get(base) if depth == 1 and base != "void" else None)
    dtype = C_TYPES.get(base)
    if dtype is None:
        raise ValueError(
            f"{where}: unsupported type {text.strip()!r}; RawKernel passes pointers (T*) and scalars of type bool, "
            "[unsigned] char/short/int/long/long long, int8_t..uint64_t, size_t, float, double, __half or "
            "__nv_bfloat16 "
            "(pass param_types=[...] to say how to pass it)"
        )
    return ParamKind.scalar(dtype)


def _tokens(text: str) -> list[str]:
    """C tokens as parsing a signature needs them: identifiers, ``::``, and any other character alone."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "_" or (c.isascii() and c.isalpha()):
            j = i + 1
            while j < n and (text[j] == "_" or text[j].isalnum()):
                j += 1
            out.append(text[i:j])
            i = j
            continue
        if not c.isspace():
            out.append("::" if text.startswith("::", i) else c)
            i += len(out[-1])
            continue
        i += 1
    return out


def _strip_comments(source: str) -> str:
    """``/* */`` and ``//`` comments blanked, offsets kept (a scan with ``str.find``: a regular
    expression would cost more to compile than this costs to run, once per new process)."""
    parts: list[str] = []
    i = 0
    while (j := source.find("/", i)) >= 0 and j + 1 < len(source):
        kind = source[j + 1]
        if kind == "*":
            end = source.find("*/", j + 2)
            end = len(source) if end < 0 else end + 2
        elif kind == "/":
            end = source.find("\n", j)
            end = len(source) if end < 0 else end
        else:
            parts.append(source[i:j + 1])
            i = j + 1
            continue
        parts += [source[i:j], "".join(c if c == "\n" else " " for c in source[j:end])]
        i = end
    parts.append(source[i:])
    return "".join(parts)


def _find_globals(text: str, base: str) -> Iterator[tuple[int, int]]:
    """(position of ``__global__``, position of the ``(`` opening the parameters) of each kernel
    declaration ``__global__ ... base(``; ``__launch_bounds__(...)`` may come between. Found from each
    ``__global__`` (a few in any source), not each mention of the name (calls, longer names)."""
    i = 0
    while (at := text.find("__global__", i)) >= 0:
        i = at + 10
        if (at and (text[at - 1] == "_" or text[at - 1].isalnum())) or text[i:i + 1] == "_" or text[i:i + 1].isalnum():
            continue
        j = i
        while (paren := text.find("(", j)) >= 0:
            name_end = paren
            while name_end > j and text[name_end - 1].isspace():
                name_end -= 1
            name_start = name_end
            while name_start > j and (text[name_start - 1] == "_" or text[name_start - 1].isalnum()):
                name_start -= 1
            if text[name_start:name_end] != "__launch_bounds__":
                break
            try:
                j = _matching(text, paren, "(", ")") + 1
            except ValueError:
                return
        if paren < 0:
            return
        if text[name_start:name_end] == base and not any(c in text[i:name_start] for c in ";{}") \
                and not any(c in text[j:name_start] for c in "()"):
            yield at, paren


def _last_directive_end(text: str, end: int) -> int:
    """Index of the newline ending the last preprocessor directive line before ``end`` (-1 if none): a
    declaration starts after it, as after ``;`` or a brace (``#else`` may separate two declarations)."""
    at = end
    while (at := text.rfind("#", 0, at)) >= 0:
        line_start = text.rfind("\n", 0, at) + 1
        if not text[line_start:at].strip():
            line_end = text.find("\n", at, end)
            return line_end if line_end >= 0 else -1
    return -1


def _has_directive(text: str) -> bool:
    """Whether ``text`` (e.g. a parameter list) has a preprocessor directive line in it."""
    return any(line.lstrip().startswith("#") for line in text.splitlines()) if "#" in text else False


def _is_name(token: str) -> bool:
    """Whether a token of ``_tokens`` is an identifier (they start with a letter or ``_``)."""
    first = token[:1]
    return first == "_" or (first.isascii() and first.isalpha())


def _matching(text: str, start: int, open_ch: str, close_ch: str) -> int:
    """Index of the bracket closing the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_ch:
            depth += 1
        elif text[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"unbalanced {open_ch}{close_ch} in the kernel source")


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in "(<[{":
            depth += 1
        elif ch in ")>]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def _extern_c(text: str, start: int, end: int) -> Iterator[int]:
    """For each ``extern "C"`` in ``text[start:end]``: the index of the ``{`` opening its block, or -1."""
    i = start
    while (i := text.find("extern", i, end)) >= 0:
        quote = i + 6
        while quote < end and text[quote].isspace():
            quote += 1
        i += 6
        if quote == i or not text.startswith('"C"', quote, end):
            continue
        brace = quote + 3
        while brace < end and text[brace].isspace():
            brace += 1
        yield brace if brace < end and text[brace] == "{" else -1


def _in_extern_c_block(source: str, pos: int) -> bool:
    for brace in _extern_c(source, 0, pos):
        if brace < 0:
            continue
        try:
            close = _matching(source, brace, "{", "}")
        except ValueError:
            close = len(source)
        if close > pos:
            return True
    return False


def parse_signature(source: str, name: str) -> tuple[list[tuple[str, ParamKind]], bool]:
    """(parameters, is extern "C") of the first ``__global__`` function ``name`` in ``source``, as its text says
    (without preprocessing: ``RawKernel`` checks them against what NVRTC compiled)."""
    decls = _declarations(source, name, strict=True)
    if not decls:
        raise _not_found(name)
    first = decls[0]
    return [(pname, kind) for pname, kind in first.params if kind is not None], first.extern_c


class _Declaration:
    """One ``__global__`` declaration of a kernel in its source: the parameters (a kind of None: a type the
    source alone cannot tell, a macro; the compiled kernel says), whether it is extern "C", and its line."""

    __slots__ = ("extern_c", "line", "params")

    def __init__(self, params: list[tuple[str, ParamKind | None]], extern_c: bool, line: int) -> None:
        self.params = params
        self.extern_c = extern_c
        self.line = line

    def kinds(self) -> list[ParamKind | None]:
        return [kind for _, kind in self.params]

    def describe(self) -> str:
        """``line 3: (float64 a, int64 n)``, for error messages."""
        params = ", ".join(f"{kind or '?'} {pname}" for pname, kind in self.params)
        return f"line {self.line}: ({params})"


def _not_found(name: str) -> ValueError:
    base = name.split("<", 1)[0].strip()
    return ValueError(
        f"kernel {name!r} not found in the source: expected a definition like "
        f'extern "C" __global__ void {base}(...); pass param_types=[...] if it is generated by a macro'
    )


def _declarations(source: str, name: str, *, strict: bool, macros: Callable[[], set[str]] | None = None,
                  ) -> list[_Declaration]:
    """Every ``__global__`` declaration of ``name`` in ``source`` (several when preprocessor conditions choose
    between them, or a prototype precedes the definition). A type the source does not define raises ``ValueError``
    unless ``macros()`` names it (then its kind is None); with ``strict`` False a declaration that cannot be
    read (a directive inside its parameter list, an unsupported type) is left out when another can be."""
    text = _strip_comments(source)
    base = name.split("<", 1)[0].strip()
    out: list[_Declaration] = []
    first_error: ValueError | None = None
    for global_at, open_paren in _find_globals(text, base):
        line = text.count("\n", 0, global_at) + 1
        try:
            params_text = text[open_paren + 1:_matching(text, open_paren, "(", ")")].strip()
        except ValueError as exc:
            if strict:
                raise
            first_error = first_error or exc
            continue
        if _has_directive(params_text):
            first_error = first_error or ValueError(
                f"kernel {name!r} (line {line}): preprocessor directives inside the parameter list; RawKernel "
                "cannot read its parameters: pass param_types=[...]"
            )
            continue
        decl_start = max(text.rfind(";", 0, global_at), text.rfind("}", 0, global_at),
                         text.rfind("{", 0, global_at), _last_directive_end(text, global_at))
        extern_c = any(True for _ in _extern_c(text, decl_start + 1, global_at)) or _in_extern_c_block(text, global_at)
        template_args = _template_arguments(text[decl_start + 1:global_at], name)
        try:
            params = _declared_params(params_text, name, template_args, macros)
        except ValueError as exc:
            if strict:
                raise
            first_error = first_error or exc
            continue
        out.append(_Declaration(params, extern_c, line))
    if not out and first_error is not None:
        raise first_error
    return out


def _declared_params(params_text: str, name: str, template_args: dict[str, str],
                     macros: Callable[[], set[str]] | None) -> list[tuple[str, ParamKind | None]]:
    """The parameters in one declaration's parameter list (a None kind: a scalar type named by a macro)."""
    params: list[tuple[str, ParamKind | None]] = []
    if not params_text or params_text == "void":
        return params
    for i, p in enumerate(_split_top_level(params_text)):
        decl = p.split("=", 1)[0].strip()
        tokens = _tokens(decl)
        pname = f"arg{i}"
        if len(tokens) > 1 and _is_name(tokens[-1]) and tokens[-1] not in _TYPE_WORDS \
                and tokens[-1] not in _QUALIFIERS and tokens[-2] != "::":
            pname = tokens[-1]
            decl = decl[: decl.rfind(pname)]
        if template_args:
            decl = " ".join(template_args.get(t, t) for t in _tokens(decl))
        where = f"parameter {pname!r} of kernel {name!r}"
        try:
            kind: ParamKind | None = parse_c_type(decl, where=where)
        except ValueError:
            tokens = [t for t in _tokens(decl) if t not in _QUALIFIERS]
            if macros is None or any(t in ("&", "[", "*") for t in tokens) \
                    or not any(_is_name(t) and t in macros() for t in tokens):
                raise
            kind = None  # e.g. `real_t x` with `#define real_t float`: what NVRTC compiled says
        params.append((pname, kind))
    return params


def _macro_names(texts: Iterable[str], options: Iterable[str]) -> set[str]:
    """The names ``#define``d in ``texts`` or by ``-DNAME[=...]`` options (an unknown parameter type named
    here is read from the compiled kernel instead of refused)."""
    names: set[str] = set()
    for text in texts:
        for line in text.splitlines():
            words = line.strip().lstrip("#").split(None, 2) if line.lstrip().startswith("#") else []
            if len(words) >= 2 and words[0] == "define":
                names.add(words[1].split("(", 1)[0])
    for opt in options:
        for prefix in ("--define-macro=", "-D"):
            if opt.startswith(prefix):
                names.add(opt[len(prefix):].split("=", 1)[0].strip())
    return names


def _template_arguments(head: str, name: str) -> dict[str, str]:
    """Template parameter name → argument, from the ``template <...>`` before the kernel and the arguments
    in ``name`` (``"scale<float, 4>"``; defaults fill the rest), so ``T x`` in ``scale<float>`` is a float."""
    at = head.find("template")
    if at < 0 or "<" not in head[at:]:
        return {}
    open_at = head.index("<", at)
    try:
        clause = head[open_at + 1:_matching(head, open_at, "<", ">")]
    except ValueError:
        return {}
    given = _split_top_level(name[name.index("<") + 1:name.rindex(">")]) if "<" in name and ">" in name else []
    out: dict[str, str] = {}
    for i, param in enumerate(p for p in _split_top_level(clause) if p):
        decl, _, default = param.partition("=")
        words = [t for t in _tokens(decl) if _is_name(t)]
        if len(words) < 2:
            continue
        value = given[i] if i < len(given) else default.strip()
        if value:
            out[words[-1]] = value
    return out


class _PtxParam:
    """One ``.param`` of a PTX ``.entry``: its class (``f`` float, ``i`` integer or pointer, ``b`` a byte array:
    a struct, ``__half``), its size in bytes and its PTX spelling."""

    __slots__ = ("cls", "size", "text")

    def __init__(self, cls: str, size: int, text: str) -> None:
        self.cls = cls
        self.size = size
        self.text = text


def ptx_entry_params(ptx: str, symbol: str) -> list[_PtxParam] | None:
    """The parameters of the ``.entry symbol(...)`` in ``ptx``, or None when it has no such entry."""
    import re  # on a compile only

    match = re.search(r"\.entry\s+" + re.escape(symbol) + r"\s*\(([^)]*)\)", ptx)
    if match is None:
        return None
    params: list[_PtxParam] = []
    for decl in (d.strip() for d in match.group(1).split(",")):
        if not decl:
            continue
        words = decl.split()
        kinds = [w for w in words[1:-1] if w.startswith(".") and w not in (".align", ".ptr") and w[1:2] in "bfsu"
                 and w[2:].isdigit()]
        if words[0] != ".param" or not kinds:
            raise ValueError(f"cannot read the PTX parameter {decl!r} of {symbol}")
        bits = int(kinds[0][2:])
        count = words[-1].partition("[")[2].rstrip("]")
        if count:
            params.append(_PtxParam("b", bits // 8 * int(count), decl.replace(words[-1], f"[{count}]")))
        else:
            params.append(_PtxParam("f" if kinds[0][1] == "f" else "i", bits // 8, kinds[0]))
    return params


def _fits(kind: ParamKind, p: _PtxParam) -> bool:
    """Whether a parameter passed as ``kind`` has the size and class of the compiled parameter ``p``."""
    if kind.kind == "pointer":
        return p.cls == "i" and p.size == 8
    if kind.dtype in ("float16", "bfloat16"):  # __half and __nv_bfloat16 are structs: .b8 x[2]
        return p.cls in ("b", "i") and p.size == 2
    return p.cls == ("f" if kind.dtype in ("float32", "float64") else "i") and p.size == kind.size


def _from_ptx(p: _PtxParam) -> ParamKind | None:
    """The scalar kind of a parameter whose source type is a macro: float32/float64, or the signed integer of its
    size (the PTX does not say signed or unsigned); None for a struct, which RawKernel cannot pass."""
    if p.cls == "f" and p.size in (4, 8):
        return ParamKind.scalar("float32" if p.size == 4 else "float64")
    if p.cls == "i" and p.size in (1, 2, 4, 8):
        return ParamKind.scalar(f"int{p.size * 8}")
    return None


def _matched(decl: _Declaration, compiled: list[_PtxParam]) -> list[tuple[str, ParamKind]] | None:
    """``decl``'s parameters if they fit the compiled ones (a macro-typed one takes the compiled type), else None."""
    if len(decl.params) != len(compiled):
        return None
    out: list[tuple[str, ParamKind]] = []
    for (pname, kind), p in zip(decl.params, compiled):
        got = _from_ptx(p) if kind is None else kind
        if got is None or not _fits(got, p):
            return None
        out.append((pname, got))
    return out


def _merged(name: str, matches: list[list[tuple[str, ParamKind]]]) -> list[tuple[str, ParamKind]]:
    """One parameter list from the declarations that fit the compiled kernel: where they differ only in a
    pointer's element type, a pointer taking any array; any other difference is refused."""
    out: list[tuple[str, ParamKind]] = []
    for i, column in enumerate(zip(*matches)):
        pname, kind = column[0]
        kinds = {k for _, k in column}
        if len(kinds) > 1:
            if any(k.kind != "pointer" for k in kinds):
                raise ValueError(
                    f"kernel {name!r}: the declarations that fit what NVRTC compiled disagree on parameter {i} "
                    f"({' / '.join(sorted(str(k) for k in kinds))}); pass param_types=[...] to say how to pass it"
                )
            kind = ParamKind.pointer(None)
        out.append((pname if all(n == pname for n, _ in column) else f"arg{i}", kind))
    return out


def _entry_ok(entry: dict[str, Any], output: str) -> bool:
    """Whether a RawKernel cache entry has what a hit needs: ``compile_cuda``'s fields and the checked parameters."""
    from tilejit.compiler.nvrtc import _entry_ok as program_ok

    params = entry.get("params")
    return program_ok(entry, output) and (isinstance(params, str) or (isinstance(params, list) and all(
        isinstance(p, list) and len(p) == 3 and isinstance(p[0], str) and p[1] in ("scalar", "pointer")
        and (p[2] is None or isinstance(p[2], str)) for p in params)))


def _launchable(checked: list[tuple[str, ParamKind]] | str) -> list[tuple[str, ParamKind]]:
    """The parameters a compile checked, or the ``ValueError`` saying how they differ from the declared ones."""
    if isinstance(checked, str):
        raise ValueError(checked)
    return checked


def _str_tuple(what: str, values: object, example: str) -> tuple[str, ...]:
    """``values`` as a tuple of str, or a ``TypeError`` naming the argument (a lone str would be split into letters)."""
    from tilejit.errors import refuse_lone_surrogates

    if isinstance(values, str | bytes) or not isinstance(values, Sequence | tuple | list):
        raise TypeError(f"{what} must be a list of str such as {example}, got {type(values).__name__} {values!r}")
    out = tuple(values)
    for i, v in enumerate(out):
        if not isinstance(v, str):
            raise TypeError(f"{what}[{i}] must be a str, got {type(v).__name__} {v!r}")
        refuse_lone_surrogates(f"{what}[{i}]", v)
    return out


def _header_dict(headers: object) -> dict[str, str]:
    """``headers`` as a dict of include name → text, or a ``TypeError`` naming the argument."""
    from tilejit.errors import refuse_lone_surrogates

    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise TypeError(f"headers must map include names to header text, e.g. {{'util.h': '...'}}; got "
                        f"{type(headers).__name__} {headers!r}")
    out: dict[str, str] = {}
    for hname, text in headers.items():
        if not isinstance(hname, str) or not hname or not isinstance(text, str):
            raise TypeError(f"headers must map non-empty str names to str text; got {hname!r}: {type(text).__name__}")
        refuse_lone_surrogates(f"header name {hname!r}", hname)
        refuse_lone_surrogates(f"header {hname!r}", text)
        out[hname] = text
    return out


def _not_ready(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError("RawKernel.__init__ did not run")


class RawKernel(functools.partial):  # type: ignore[type-arg]
    """A CUDA C++ ``__global__`` function from source. Call ``kernel(grid, block, args, stream=None,
    shared_mem=0)``; grid and block are ints or tuples of up to three ints.

    A RawKernel is a ``functools.partial`` of the function a call runs: the checked first-call path,
    then the launch function generated for the block shape in use. A call goes straight to it (a
    partial is called through C, a ``__call__`` method through a Python-level lookup and an argument
    tuple; ``bench/bench_launch_cpu.py`` measures the difference).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> RawKernel:
        return super().__new__(cls, _not_ready)

    def __init__(
        self,
        source: str,
        name: str,
        *,
        options: Sequence[str] = (),
        headers: Mapping[str, str] | None = None,
        param_types: Sequence[str] | None = None,
    ) -> None:
        from tilejit.errors import refuse_lone_surrogates

        if not isinstance(source, str):
            raise TypeError(f"RawKernel(source, name): source must be a str of CUDA C++, got {type(source).__name__}")
        if not isinstance(name, str) or not name.strip():
            raise TypeError(f"RawKernel(source, name): name must be the kernel's name as a non-empty str, got {name!r}")
        refuse_lone_surrogates("source", source)
        refuse_lone_surrogates("name", name)
        self.source = source
        self.name = name
        self.options = _str_tuple("options", options, "['-O3', '-DN=4']")
        self.headers = _header_dict(headers)
        given = None if param_types is None else _str_tuple("param_types", param_types, "['float*', 'int']")
        # Every declaration of the kernel: a preprocessor condition may choose between them, so the compiled
        # kernel's parameters (read from its PTX on each compile) decide which one holds.
        self._given: list[tuple[str, ParamKind]] | None = None
        self._decls: list[_Declaration] = []
        self._params: list[tuple[str, ParamKind]] | None = None
        if given is None:
            decls = _declarations(source, name, strict=False,
                                  macros=lambda: _macro_names((source, *self.headers.values()), self.options))
            if not decls:
                raise _not_found(name)
            self._decls = decls
            first = decls[0].kinds()
            if None not in first and all(d.kinds() == first for d in decls[1:]):
                self._params = decls[0].params  # type: ignore[assignment]  # no None: checked above
            self._extern_c = all(d.extern_c for d in decls)
        else:
            self._given = self._params = [
                (f"arg{i}", parse_c_type(t, where=f"param_types[{i}] of kernel {name!r}")) for i, t in enumerate(given)
            ]
            try:
                decls = _declarations(source, name, strict=False)
            except ValueError:
                decls = []
            self._extern_c = bool(decls) and all(d.extern_c for d in decls)
        self._lock = threading.Lock()
        self._programs: dict[tuple[str, str], Any] = {}  # (target, output) -> CompiledProgram
        # (target, output) -> the compiled kernel's parameters, or why they are not the declared ones
        self._checked: dict[tuple[str, str], list[tuple[str, ParamKind]] | str] = {}
        self._first_checked: list[tuple[str, ParamKind]] | str | None = None  # what .params shows once compiled
        self._functions: dict[int, Any] = {}
        self._device_params: dict[int, list[tuple[str, ParamKind]]] = {}  # device ordinal -> params of its code
        self._launchers: dict[tuple[Any, ...], Launcher] = {}
        # (device ordinal, block, shared) -> each thread's checked launches and generated entries there
        self._policies: dict[tuple[Any, ...], FirstLaunches] = {}
        self._last_entries: dict[int, Callable[..., None]] = {}  # another thread -> the entry it used last
        # Held here too: a call in progress must not free the function it runs when _use replaces it.
        self._checked_entry: Callable[..., None] = self._first_call
        self._use(self._checked_entry)

    @property
    def params(self) -> list[tuple[str, ParamKind]]:
        """(name, kind) of each parameter, as NVRTC compiled the kernel: the first compile's, checked against its
        PTX. Before any compile, the source's when it declares the kernel one way; when preprocessor conditions
        choose between declarations, or a macro names a type, this runs a compile for the default target. A
        ``ValueError`` says how the compiled parameters differ from the declared ones."""
        checked = self._first_checked
        if checked is None:
            if self._params is not None:
                return self._params
            self.compile()
            checked = self._first_checked
        assert checked is not None
        return _launchable(checked)

    def __repr__(self) -> str:
        checked = self._first_checked
        params = checked if isinstance(checked, list) else self._params
        if params is None:
            return f"<tilejit.RawKernel {self.name}(...)>"
        sig = ", ".join(f"{k} {n}" for n, k in params)
        return f"<tilejit.RawKernel {self.name}({sig})>"

    def compile(self, target: str | int | Target | None = None, *, output: str = "cubin") -> CompiledProgram:
        """Compile (no GPU needed) for ``target`` (default: the current GPU, else ``TILEJIT_ARCH``) into ``output``
        (``"cubin"``, ``"ptx"`` or ``"ltoir"``); returns the ``CompiledProgram`` (``.code``, ``.kind``,
        ``.lowered_names``). The compiled parameters are checked against the declared ones (or ``param_types``);
        when they differ the code is still returned, and ``.params`` and launches raise a ``ValueError`` saying how."""
        from tilejit.compiler.nvrtc import OUTPUTS
        from tilejit.compiler.targets import resolve_target

        if output not in OUTPUTS:
            raise ValueError(f"RawKernel.compile: output must be one of {', '.join(OUTPUTS)}; got {output!r}")
        tgt = resolve_target(target)
        memo = (tgt.sm, output)
        prog = self._programs.get(memo)
        if prog is None:
            prog, checked = self._compile(tgt, output)
            self._checked[memo] = checked
            self._programs[memo] = prog
            if self._first_checked is None:
                self._first_checked = checked
        return prog

    def _compile(self, target: Target, output: str) -> tuple[CompiledProgram, list[tuple[str, ParamKind]] | str]:
        """The program and its checked parameters (or why they are not the declared ones), from the disk cache or
        from NVRTC: one cache entry holds both, so a warm load reads one file and checks nothing again."""
        from tilejit import __version__, config
        from tilejit.compiler.nvrtc import (
            CompiledProgram,
            _reads_disk_headers,
            compile_cuda,
            compile_cuda_ptx_and_cubin,
            nvrtc_identity,
        )

        checked: list[tuple[str, ParamKind]] | str | None
        file_name = f"{self.name.split('<', 1)[0].strip()}.cu"
        exprs = () if self._extern_c else (self.name,)
        key = None
        # As compile_cuda's own cache: headers NVRTC reads from disk are not in the key, so then nothing is cached.
        if config.CACHE.get() and not _reads_disk_headers(self.source, self.headers, self.options):
            from tilejit.compiler.cache import cache_key, default_cache

            parts = [_CACHE_TAG, __version__, nvrtc_identity(), self.source, file_name, target.sm, output]
            parts += [str(len(self.headers)), *(x for h in sorted(self.headers) for x in (h, self.headers[h]))]
            parts += [str(len(self.options)), *self.options, *exprs]
            parts.append("" if self._given is None else repr([str(kind) for _, kind in self._given]))  # checked too
            key = cache_key(*parts)
            entry = default_cache().get(key)
            if entry is not None and _entry_ok(entry, output):
                stored = entry["params"]
                try:
                    checked = stored if isinstance(stored, str) else [
                        (p[0], ParamKind.from_spec(p[1:])) for p in stored]
                except ValueError:  # a dtype this version does not know: compile again
                    checked = None
                if checked is not None:
                    prog = CompiledProgram(entry["code"], output, target,  # type: ignore[arg-type]
                                           dict(entry["lowered_names"]), entry["log"],
                                           tuple(entry["nvrtc_version"]), True)  # type: ignore[arg-type]
                    return prog, checked

        def run(out: str) -> CompiledProgram:
            return compile_cuda(self.source, name=file_name, headers=self.headers, options=self.options, target=target,
                                output=out, name_expressions=exprs, cache=False)  # type: ignore[arg-type]

        if output == "cubin":  # the PTX to check comes from the same NVRTC run
            ptx, prog = compile_cuda_ptx_and_cubin(self.source, name=file_name, headers=self.headers,
                                                   options=self.options, target=target, name_expressions=exprs)
        else:
            prog = run(output)
            ptx = prog if output == "ptx" else run("ptx")
        symbol = self.name if self._extern_c else ptx.lowered_names.get(self.name, self.name)
        try:
            checked = self._check_compiled(ptx.code.decode("utf-8"), symbol, target)
        except ValueError as exc:
            checked = str(exc)
        if key is not None:
            from tilejit.compiler.cache import default_cache

            default_cache().put(key, {
                "code": prog.code, "kind": output, "lowered_names": prog.lowered_names, "log": prog.log,
                "nvrtc_version": list(prog.nvrtc_version), "target": target.sm,
                "params": checked if isinstance(checked, str) else [[n, k.kind, k.dtype] for n, k in checked],
            })
        return prog, checked

    def _check_compiled(self, ptx: str, symbol: str, target: Target) -> list[tuple[str, ParamKind]]:
        """The parameters to launch with, from what NVRTC compiled (the ``.entry``'s ``.param`` list): the declaration
        that fits it, or ``param_types`` if they fit; a ``ValueError`` saying what differs otherwise."""
        compiled = ptx_entry_params(ptx, symbol)
        where = f"kernel {self.name!r} compiled for {target.sm}"
        if compiled is None:
            raise ValueError(
                f"{where}: NVRTC's output has no kernel {symbol!r}; is its definition inside a preprocessor "
                "condition that is false (e.g. #ifdef X without -DX in options)?"
            )
        shown = ", ".join(p.text for p in compiled) or "no parameters"
        if self._given is not None:
            if len(self._given) != len(compiled):
                raise ValueError(f"{where}: param_types names {len(self._given)} parameter(s), the compiled kernel "
                                 f"has {len(compiled)} ({shown})")
            for i, ((_, kind), p) in enumerate(zip(self._given, compiled)):
                if not _fits(kind, p):
                    raise ValueError(f"{where}: param_types[{i}] is {kind} ({kind.size} bytes), the compiled parameter "
                                     f"{i} is {p.text} ({p.size} bytes); parameters: {shown}")
            return self._given
        matches = [m for m in (_matched(d, compiled) for d in self._decls) if m is not None]
        if not matches:
            declared = "; ".join(d.describe() for d in self._decls)
            structs = [p.text for p in compiled if p.cls == "b" and p.size != 2]
            hint = (f"RawKernel passes pointers and scalars, not structs by value ({', '.join(structs)}); pass a "
                    "pointer instead" if structs else
                    "a macro or preprocessor condition changes them? Pass param_types=[...] to say how to pass each")
            raise ValueError(
                f"{where}: the parameters NVRTC compiled ({shown}) are not those the source declares ({declared}); "
                + hint
            )
        return matches[0] if len(matches) == 1 else _merged(self.name, matches)

    def function(self, device: Any = None) -> Any:
        """The loaded kernel on ``device`` (default: current), compiling and loading it on first use."""
        from tilejit import config
        from tilejit.runtime.module import Module

        dev = _device_state.get_device() if device is None else _device_state.Device(device)
        fn = self._functions.get(dev.ordinal)
        if fn is not None:
            return fn
        with self._lock:
            fn = self._functions.get(dev.ordinal)
            if fn is None:
                output = "ptx" if config.EMIT_PTX.get() else "cubin"
                prog = self.compile(dev.arch, output=output)
                params = _launchable(self._checked[(prog.target.sm, output)])  # before loading anything
                module = Module.load(prog.code, "ptx" if output == "ptx" else "cubin", device=dev)
                symbol = self.name if self._extern_c else prog.lowered_names.get(self.name, self.name)
                self._device_params[dev.ordinal] = params
                fn = self._functions[dev.ordinal] = module.get_function(symbol)
        return fn

    def launcher(self, block: Any, shared_mem: int = 0, device: Any = None) -> Launcher:
        """The :class:`Launcher` of this kernel for one block shape and dynamic shared size."""
        dev = _device_state.get_device() if device is None else _device_state.Device(device)
        key = (dev.ordinal, tuple(block) if isinstance(block, list) else block, shared_mem)
        try:
            launcher = self._launchers.get(key)
        except TypeError:  # an unhashable block: the check below says what a block is
            launcher = None
        if launcher is None:
            from tilejit.compiler.cache import cached_compile
            from tilejit.runtime.launch import block3

            block3(key[1])  # checked before anything compiles
            if isinstance(shared_mem, bool) or not isinstance(shared_mem, int) or shared_mem < 0:
                raise ValueError(f"shared_mem must be a non-negative int (bytes of dynamic shared memory), got "
                                 f"{shared_mem!r}")
            function = self.function(dev)
            params = self._device_params.get(dev.ordinal)
            launcher = Launcher(function, self.params if params is None else params, block, shared_mem,
                                compile_code=cached_compile)
            self._launchers[key] = launcher
        return launcher

    if TYPE_CHECKING:  # the partial runs the call; this is its signature for type checkers and readers

        def __call__(
            self, grid: Any, block: Any, args: Sequence[Any], stream: Any = None, shared_mem: int = 0
        ) -> None:
            """Launch ``grid`` blocks of ``block`` threads on ``args`` (on ``stream``, default: the current one)."""

    def _first_call(self, grid: Any, block: Any, args: Sequence[Any], stream: Any = None, shared_mem: int = 0,
                    *, resolve: bool = False) -> None:
        """What ``kernel(...)`` runs until an entry is generated, and what an entry hands back a call it does not
        take (another thread's, or another device, block or shared size). Each (device, block, shared size) has a
        Launcher, and per thread the launch policy of ``tilejit.runtime.dispatch`` (``FirstLaunches``): checked
        launches first, then a generated entry. Entries read one thread's current device and stream:
        ``kernel(...)`` runs those of the first thread that had one made; another thread's calls come here and
        go on to its last entry, which hands back (``resolve``) what it does not take."""
        tid = threading.get_ident()
        if not resolve:
            entry = self._last_entries.get(tid)
            if entry is not None:
                entry(grid, block, args, stream, shared_mem)
                return
        dev = _device_state.get_device()
        block_key = tuple(block) if isinstance(block, list) else block
        key = (dev.ordinal, block_key, shared_mem)
        try:
            policy = self._policies.get(key)
        except TypeError:  # an unhashable block: launcher() says what a block is
            policy = None
        if policy is None:
            policy = self._policy(key, dev)
        entry = policy.function(tid)
        if entry is None:
            self._launchers[key].launch_checked(grid, args, stream)
            return
        if entry.owner == self.__dict__.get("_home_thread"):  # type: ignore[attr-defined]
            self._use(entry)
        else:
            from tilejit.runtime.dispatch import MAX_THREAD_LAUNCHERS

            if len(self._last_entries) >= 4 * MAX_THREAD_LAUNCHERS:
                self._last_entries.clear()
            self._last_entries[tid] = entry
        entry(grid, block_key, args, stream, shared_mem)

    def _policy(self, key: tuple[Any, ...], dev: Any) -> FirstLaunches:
        """The launch policy of (device ordinal, block, shared size) ``key`` (its Launcher made, block and shared size
        checked); its generated entries hand what they do not take to ``_first_call``."""
        from tilejit.runtime.dispatch import FirstLaunches

        _, block_key, shared_mem = key
        launcher = self.launcher(block_key, shared_mem, dev)

        def make(thread: int) -> Callable[..., None]:
            # ``kernel(...)`` runs the entries of the first thread that had one made (its home thread; the setdefault
            # decides once, whichever thread gets there first): they hand other threads' calls to their last
            # entries; those hand back all they do not take, to be resolved here.
            home = self.__dict__.setdefault("_home_thread", thread)
            fallback = self._first_call if home == thread else functools.partial(self._first_call, resolve=True)
            return launcher.entry(block_key, shared_mem, dev, fallback, thread)

        policy = self._policies[key] = FirstLaunches(make)
        return policy

    def _use(self, entry: Callable[..., None]) -> None:
        """Make ``kernel(...)`` run ``entry`` (the partial's function, replaced in place through its
        ``__setstate__``, the one way to set it; the instance's attributes are kept). The plainer designs cost
        every call more on CPython 3.12, where a partial subclass is called through vectorcall (a generated entry
        of one pointer, thread CPU time per call, 3.12.1): the partial 650-660 ns, ``__call__ =
        staticmethod(entry)`` on a class made per kernel 700-715 ns (an argument tuple, a type lookup), ``__call__
        = property(attrgetter(...))`` 755-770 ns, a ``__call__`` method that forwards 745-750 ns. On 3.11 (no
        vectorcall for subclasses) the per-kernel class ties with the partial (645-655 against 640-645 ns)."""
        functools.partial.__setstate__(self, (entry, (), None, self.__dict__))  # type: ignore[attr-defined]

    def _entry_in_use(self) -> Callable[..., None] | None:
        """The generated launch function ``kernel(...)`` runs, None while calls take the checked path."""
        return None if self.func is self._checked_entry else self.func


__all__ = ["C_TYPES", "RawKernel", "parse_c_type", "parse_signature", "ptx_entry_params"]
