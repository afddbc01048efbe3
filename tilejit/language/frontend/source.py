"""A Python function's source as the front end sees it: its AST, and file locations for errors.

Errors point at the user's real file: line = first line of the source + AST line - 1, and the
column undoes ``textwrap.dedent`` (and counts characters, where the AST counts UTF-8 bytes).

The source is read from the file as it is *now* (``inspect`` re-reads a file that changed), and
found by the line number the function's code object recorded at import. A file edited since then
can hold another function, or another body, at that line; ``check_matches`` refuses that.
"""

from __future__ import annotations

import ast
import inspect
import os
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType
from typing import Any

from tilejit.errors import TileCompileError
from tilejit.language.ir.core import Loc


class FrontendError(Exception):
    """A problem in user code found while translating one node; located by the node's handler."""

    def __init__(self, message: str, node: ast.AST | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.node = node


@dataclass(frozen=True, eq=False)
class Source:
    """The parsed source of one Python function, with what is needed to locate its nodes."""

    filename: str
    first_line: int
    lines: tuple[str, ...]
    indent: int
    tree: ast.FunctionDef

    def _line_text(self, lineno: int) -> str | None:
        i = lineno - 1
        return self.lines[i] if 0 <= i < len(self.lines) else None

    def position(self, node: ast.AST) -> tuple[int, int]:
        """(file line, 0-based character column) of ``node``."""
        lineno = getattr(node, "lineno", 1)
        col_bytes = getattr(node, "col_offset", 0)
        text = self._line_text(lineno)
        col = col_bytes
        if text is not None:
            dedented = text[self.indent:].encode("utf-8")
            col = len(dedented[:col_bytes].decode("utf-8", errors="replace"))
        return self.first_line + lineno - 1, col + self.indent

    def loc(self, node: ast.AST) -> Loc:
        line, col = self.position(node)
        return Loc(self.filename, line, col)

    def error(self, message: str, node: ast.AST) -> TileCompileError:
        line, col = self.position(node)
        text = self._line_text(getattr(node, "lineno", 1))
        return TileCompileError(message, self.filename, line, col, text.rstrip("\r\n") if text is not None else None)


def _const_key(c: object) -> object:
    """A comparable form of a code object's constant (nested code objects by ``_code_key``; floats by
    repr, so that nan equals nan and -0.0 differs from 0.0)."""
    if isinstance(c, CodeType):
        return _code_key(c)
    if isinstance(c, tuple):
        return ("tuple", tuple(_const_key(x) for x in c))
    if isinstance(c, frozenset):
        return ("frozenset", tuple(sorted(repr(_const_key(x)) for x in c)))
    if isinstance(c, float | complex):
        return (type(c).__name__, repr(c))
    return (type(c).__name__, c)


def _code_key(code: CodeType) -> tuple[object, ...]:
    """What a function's source determines about its code object: bytecode, names, constants and
    arguments (not line numbers, so a function moved within its file keeps its key)."""
    return (
        code.co_name, code.co_code, tuple(_const_key(c) for c in code.co_consts), code.co_names, code.co_varnames,
        code.co_freevars, code.co_cellvars, code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
    )


def _arg_names(tree: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    """The parameter names of a parsed ``def``, in the order its code object lists them."""
    a = tree.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return tuple(names)


def _code_arg_names(code: CodeType) -> tuple[str, ...]:
    n = code.co_argcount + code.co_kwonlyargcount
    n += bool(code.co_flags & inspect.CO_VARARGS) + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    return tuple(code.co_varnames[:n])


#: filename -> (the file's text, its compiled module code, or None where it does not compile)
_FILES: dict[str, tuple[str, CodeType | None]] = {}


def _compiled_file(filename: str, text: str) -> CodeType | None:
    """The file's current text compiled as a module (once per text), or None when it does not compile."""
    hit = _FILES.get(filename)
    if hit is not None and hit[0] == text:
        return hit[1]
    try:
        # dont_inherit: this module's own ``from __future__ import annotations`` must not leak in
        code: CodeType | None = compile(text, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError):
        code = None
    _FILES[filename] = (text, code)
    return code


def _find_code(module: CodeType, name: str, first_line: int) -> CodeType | None:
    """The function code object named ``name`` whose def starts at ``first_line``, in ``module``."""
    todo = [module]
    while todo:
        c = todo.pop()
        for k in c.co_consts:
            if isinstance(k, CodeType):
                if k.co_name == name and k.co_firstlineno == first_line:
                    return k
                todo.append(k)
    return None


def check_matches(func: Callable[..., Any], tree: ast.FunctionDef, filename: str, def_line: int,
                  line_text: str) -> None:
    """A located error (at the found ``def``, line ``def_line`` of ``filename``) when that def in
    ``func``'s file is not the source ``func`` was compiled from: the file was edited after the import
    (translating it would give a wrong kernel).

    The found def must have the function's name and parameter names. Then the whole file, as it is
    now, is compiled again and the code object at the function's name and first line must equal the
    function's own in bytecode, names, constants and arguments. Compiling the whole file (not the def
    alone) reproduces everything a def's bytecode depends on, on Python 3.10 to 3.13: free variables
    of enclosing functions, ``super()`` and ``__private`` name mangling in classes, ``from __future__``
    imports, and module-level imports (3.11+ call ``tj.load(...)`` differently when ``tj`` is
    imported); ``co_code`` is the bytecode without 3.11+'s specializations and instrumentation. An
    import hook that rewrites functions makes them differ: pytest's assertion rewriting, the common
    one, is recognized (its ``@py_builtins`` global), and a function with an ``assert`` in such a
    module is checked by names only, as is a file that no longer compiles."""
    code = inspect.unwrap(func).__code__  # inspect found the source of the innermost __wrapped__
    qualname = getattr(code, "co_qualname", None) or getattr(inspect.unwrap(func), "__qualname__", code.co_name)
    where = f"line {def_line} of {filename}"
    stale = ("the file was edited after it was imported: reload the module (importlib.reload) or restart "
             "Python")
    if tree.name != code.co_name:
        raise TileCompileError(
            f"the source of {qualname} has changed since it was imported: {where} now defines '{tree.name}', not "
            f"'{code.co_name}'; {stale}", filename, def_line, None, line_text,
        )
    if _arg_names(tree) != _code_arg_names(code):
        raise TileCompileError(
            f"the source of {qualname} has changed since it was imported: the def at {where} has parameters "
            f"({', '.join(_arg_names(tree))}), the function has ({', '.join(_code_arg_names(code))}); {stale}",
            filename, def_line, None, line_text,
        )
    rewritten = "@py_builtins" in getattr(inspect.unwrap(func), "__globals__", {})
    if rewritten and any(isinstance(n, ast.Assert) for n in ast.walk(tree)):
        return
    try:
        all_lines = inspect.findsource(func)[0]
    except (OSError, TypeError, ValueError):
        return
    module = _compiled_file(filename, "".join(all_lines))
    if module is None:
        return
    again = _find_code(module, code.co_name, code.co_firstlineno)
    if again is None or _code_key(again) != _code_key(code):
        raise TileCompileError(
            f"the source of {qualname} has changed since it was imported: the def at {where} no longer compiles "
            f"to the function's code; {stale} (or, if an import hook rewrote the module, define the kernel in a "
            "module it leaves alone)", filename, def_line, None, line_text,
        )


#: (code object, its file) -> Source: code objects compare equal across files (the filename is not
#: part of their equality), and two files may hold the same function at the same line
_CACHE: dict[tuple[CodeType, str], Source] = {}


def get_source(func: Callable[..., Any]) -> Source:
    """Parse ``func``'s source once per code object; a clear error when it cannot be read."""
    code = getattr(func, "__code__", None)
    if code is None:
        raise TileCompileError(f"{func!r} is not a Python function, so it cannot be compiled as tile code")
    cached = _CACHE.get((code, code.co_filename))
    if cached is not None:
        return cached
    filename = code.co_filename
    try:
        lines, first_line = inspect.getsourcelines(func)
    except (OSError, TypeError, ValueError) as exc:
        if os.path.isfile(filename):
            raise TileCompileError(
                f"cannot find the source of {func.__qualname__} in {filename}: {exc}; was the file edited after it "
                "was imported? Reload the module (importlib.reload) or restart Python"
            ) from None
        raise TileCompileError(
            f"cannot read the source of {func.__qualname__} ({filename}): {exc}; tile kernels must be "
            "defined in a file (not typed into an interactive prompt or built with exec)"
        ) from None
    first_line = max(first_line, 1)
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    first_orig = lines[0]
    first_ded = dedented.splitlines(keepends=True)[0] if dedented else ""
    indent = len(first_orig) - len(first_ded)
    try:
        module = ast.parse(dedented, filename=filename)
    except SyntaxError as exc:
        raise TileCompileError(f"cannot parse the source of {func.__qualname__}: {exc.msg}", filename,
                               first_line + (exc.lineno or 1) - 1, None, None) from None
    tree = next((n for n in module.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)), None)
    if tree is None and code.co_name != "<lambda>":
        raise TileCompileError(
            f"the source of {func.__qualname__} has changed since it was imported: line {first_line} of {filename} "
            "no longer holds its def; the file was edited after it was imported: reload the module "
            "(importlib.reload) or restart Python", filename, first_line, None, lines[0].rstrip("\r\n"),
        )
    if tree is None:
        raise TileCompileError(
            f"{func.__qualname__} is not defined with a 'def' statement (lambdas cannot be tile code)",
            filename, first_line, 0, lines[0].rstrip("\r\n"),
        )
    src = Source(filename, first_line, tuple(lines), indent, tree)  # type: ignore[arg-type]
    if isinstance(tree, ast.AsyncFunctionDef):
        raise src.error("a tile kernel cannot be 'async def'", tree)
    check_matches(func, tree, filename, first_line + tree.lineno - 1, lines[tree.lineno - 1].rstrip("\r\n"))
    _CACHE[code, filename] = src
    return src

