"""``RawKernel``: a CUDA C++ kernel written by hand, compiled with NVRTC and launched fast.

    add = tj.RawKernel(source, "vadd")          # parameter types read from the source
    add(grid, block, (x, y, out, n))            # x, y, out: any device arrays; n: an int

Parameter types come from the kernel's ``__global__ void name(...)`` signature (or ``param_types``):
pointers take any device array (tilejit, torch, CuPy, JAX, ``__cuda_array_interface__``, DLPack)
or an int address; scalars are packed as their C type. The kernel is compiled for the current
device on its first launch there (through the disk cache) and kept per device.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tilejit.runtime import device as _device_state
from tilejit.runtime.launch import CHECKED_LAUNCHES, Launcher, ParamKind

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


def _find_global(text: str, base: str) -> tuple[int, int] | None:
    """(position of ``__global__``, position of the ``(`` opening the parameters) of the kernel
    declaration ``__global__ ... base(``, or None; ``__launch_bounds__(...)`` may come between."""
    i = 0
    while (i := text.find(base, i)) >= 0:
        end = i + len(base)
        before = text[i - 1] if i else " "
        paren = end
        while paren < len(text) and text[paren].isspace():
            paren += 1
        i = end
        if before == "_" or before.isalnum() or paren >= len(text) or text[paren] != "(":
            continue
        start = max(text.rfind(";", 0, end), text.rfind("}", 0, end), text.rfind("{", 0, end)) + 1
        head = text[start:end - len(base)]
        bounds = head.find("__launch_bounds__")
        if bounds >= 0 and "(" in head[bounds:]:
            try:
                close = _matching(head, head.index("(", bounds), "(", ")")
            except ValueError:
                continue
            head = head[:bounds] + " " * (close + 1 - bounds) + head[close + 1:]
        if "(" in head or ")" in head or "__global__" not in _tokens(head):
            continue
        return start + head.index("__global__"), paren
    return None


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
    """(parameters, is extern "C") of the ``__global__`` function ``name`` in ``source``."""
    text = _strip_comments(source)
    base = name.split("<", 1)[0].strip()
    found = _find_global(text, base)
    if found is None:
        raise ValueError(
            f"kernel {name!r} not found in the source: expected a definition like "
            f'extern "C" __global__ void {base}(...); pass param_types=[...] if it is generated by a macro'
        )
    global_at, open_paren = found
    params_text = text[open_paren + 1:_matching(text, open_paren, "(", ")")].strip()
    decl_start = max(text.rfind(";", 0, global_at), text.rfind("}", 0, global_at), text.rfind("{", 0, global_at))
    extern_c = any(True for _ in _extern_c(text, decl_start + 1, global_at)) or _in_extern_c_block(text, global_at)
    template_args = _template_arguments(text[decl_start + 1:global_at], name)
    params: list[tuple[str, ParamKind]] = []
    if params_text and params_text != "void":
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
            params.append((pname, parse_c_type(decl, where=f"parameter {pname!r} of kernel {name!r}")))
    return params, extern_c


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
        if not isinstance(source, str) or not isinstance(name, str) or not name:
            raise TypeError("RawKernel(source, name): both must be strings")
        self.source = source
        self.name = name
        self.options = tuple(options)
        self.headers = dict(headers or {})
        if param_types is None:
            self.params, self._extern_c = parse_signature(source, name)
        else:
            self.params = [
                (f"arg{i}", parse_c_type(t, where=f"param_types[{i}] of kernel {name!r}"))
                for i, t in enumerate(param_types)
            ]
            try:
                self._extern_c = parse_signature(source, name)[1]
            except ValueError:
                self._extern_c = False
        self._lock = threading.Lock()
        self._programs: dict[tuple[str, str], Any] = {}  # (target, output) -> CompiledProgram
        self._functions: dict[int, Any] = {}
        self._launchers: dict[tuple[Any, ...], Launcher] = {}
        self._entries: dict[tuple[Any, ...], Callable[..., None]] = {}
        self._checked_calls: dict[tuple[Any, ...], int] = {}
        # Held here too: a call in progress must not free the function it runs when _use replaces it.
        self._checked_entry: Callable[..., None] = self._first_call
        self._use(self._checked_entry)

    def __repr__(self) -> str:
        sig = ", ".join(f"{k} {n}" for n, k in self.params)
        return f"<tilejit.RawKernel {self.name}({sig})>"

    def compile(self, target: str | int | None = None, *, output: str = "cubin") -> Any:
        """Compile (no GPU needed) for ``target`` (default: the current device); returns the
        ``CompiledProgram`` (``.code``, ``.kind``, ``.lowered_names``)."""
        from tilejit.compiler.nvrtc import compile_cuda

        if target is None:
            target = _device_state.get_device().arch
        memo = (str(target), output)
        prog = self._programs.get(memo)
        if prog is None:
            prog = self._programs[memo] = compile_cuda(
                self.source,
                name=f"{self.name.split('<', 1)[0]}.cu",
                headers=self.headers,
                options=self.options,
                target=target,
                output=output,  # type: ignore[arg-type]
                name_expressions=() if self._extern_c else (self.name,),
            )
        return prog

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
                module = Module.load(prog.code, "ptx" if output == "ptx" else "cubin", device=dev)
                symbol = self.name if self._extern_c else prog.lowered_names.get(self.name, self.name)
                fn = self._functions[dev.ordinal] = module.get_function(symbol)
        return fn

    def launcher(self, block: Any, shared_mem: int = 0, device: Any = None) -> Launcher:
        """The :class:`Launcher` of this kernel for one block shape and dynamic shared size."""
        dev = _device_state.get_device() if device is None else _device_state.Device(device)
        key = (dev.ordinal, tuple(block) if isinstance(block, list) else block, shared_mem)
        launcher = self._launchers.get(key)
        if launcher is None:
            from tilejit.compiler.cache import cached_compile

            launcher = Launcher(self.function(dev), self.params, block, shared_mem, compile_code=cached_compile)
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
        take (another thread's, or another device, block or shared size). Entries read one thread's current
        device and stream: ``kernel(...)`` runs those of the first thread that had one made; another thread's
        calls come here and go on to its last entry, which hands back (``resolve``) what it does not take."""
        tid = threading.get_ident()
        if not resolve:
            last = self.__dict__.get("_last_entries")
            entry = None if last is None else last.get(tid)
            if entry is not None:
                entry(grid, block, args, stream, shared_mem)
                return
        dev = _device_state.get_device()
        block_key = tuple(block) if isinstance(block, list) else block
        key = (dev.ordinal, block_key, shared_mem)
        launcher = self._launchers.get(key) or self.launcher(block_key, shared_mem, dev)
        # The first launches take the checked path: a kernel launched a few times never pays for
        # generating (compiling) its fast path.
        calls = self._checked_calls.get(key, 0)
        if calls < CHECKED_LAUNCHES and key not in self._entries:
            self._checked_calls[key] = calls + 1
            launcher.launch_checked(grid, args, stream)
            return
        if self.func is self._checked_entry or getattr(self.func, "owner", None) == tid:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = launcher.entry(block_key, shared_mem, dev, self._first_call, tid)
            self._use(entry)
        else:
            from tilejit.runtime.launch import MAX_THREAD_LAUNCHERS

            mine: dict[Any, Callable[..., None]] = self.__dict__.setdefault("_thread_entries", {})
            last = self.__dict__.setdefault("_last_entries", {})
            entry = mine.get((tid, key))
            if entry is None:
                if len(mine) >= 4 * MAX_THREAD_LAUNCHERS:
                    mine.clear()
                    last.clear()
                entry = mine[tid, key] = launcher.entry(
                    block_key, shared_mem, dev, functools.partial(self._first_call, resolve=True), tid)
            last[tid] = entry
        entry(grid, block_key, args, stream, shared_mem)

    def _use(self, entry: Callable[..., None]) -> None:
        """Make ``kernel(...)`` run ``entry`` (the partial's function, replaced in place through its
        ``__setstate__``; the instance's attributes are kept)."""
        functools.partial.__setstate__(self, (entry, (), None, self.__dict__))  # type: ignore[attr-defined]

    def _entry_in_use(self) -> Callable[..., None] | None:
        """The generated launch function ``kernel(...)`` runs, None while calls take the checked path."""
        return None if self.func is self._checked_entry else self.func


__all__ = ["C_TYPES", "RawKernel", "parse_c_type", "parse_signature"]
