"""Where a snippet of a test file is code: tests of located errors compare file:line:col with it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tilejit.errors import TileCompileError


def where_in(lines: Sequence[str], snippet: str) -> tuple[int, int]:
    """(1-based line, 0-based column) of the one place in ``lines`` where ``snippet`` is code
    (occurrences right after a quote are the tests' own arguments)."""
    found = []
    for i, line in enumerate(lines):
        col = line.find(snippet)
        while col >= 0:
            if col == 0 or line[col - 1] not in "\"'":
                found.append((i + 1, col))
            col = line.find(snippet, col + 1)
    assert len(found) == 1, f"{snippet!r} found {len(found)} times"
    return found[0]


def assert_located(err: TileCompileError, path: str, lines: Sequence[str], at: str, message: str) -> None:
    """``err`` is at the first character of the snippet ``at`` of ``path`` (whose text is ``lines``), says
    ``message``, and shows ``file:line:col: error: ...`` and a caret under that character."""
    line, col = where_in(lines, at)
    assert err.filename == path
    assert (err.line, err.col) == (line, col), str(err)
    assert message in err.message, str(err)
    text = str(err).splitlines()
    assert text[0] == f"{path}:{line}:{col + 1}: error: {err.message}"
    assert text[2] == "    " + " " * col + "^"
