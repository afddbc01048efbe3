"""A Python function's source as the front end sees it: its AST, and file locations for errors.

Errors point at the user's real file: line = first line of the source + AST line - 1, and the
column undoes ``textwrap.dedent`` (and counts characters, where the AST counts UTF-8 bytes).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
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


_CACHE: dict[Any, Source] = {}


def get_source(func: Callable[..., Any]) -> Source:
    """Parse ``func``'s source once per code object; a clear error when it cannot be read."""
    code = getattr(func, "__code__", None)
    if code is None:
        raise TileCompileError(f"{func!r} is not a Python function, so it cannot be compiled as tile code")
    cached = _CACHE.get(code)
    if cached is not None:
        return cached
    filename = code.co_filename
    try:
        lines, first_line = inspect.getsourcelines(func)
    except (OSError, TypeError) as exc:
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
    if tree is None:
        raise TileCompileError(
            f"{func.__qualname__} is not defined with a 'def' statement (lambdas cannot be tile code)",
            filename, first_line, 0, lines[0].rstrip("\r\n"),
        )
    src = Source(filename, first_line, tuple(lines), indent, tree)  # type: ignore[arg-type]
    if isinstance(tree, ast.AsyncFunctionDef):
        raise src.error("a tile kernel cannot be 'async def'", tree)
    _CACHE[code] = src
    return src

