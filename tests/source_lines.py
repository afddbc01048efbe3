"""Where a snippet of a test file is code: tests of located errors compare file:line:col with it."""

from __future__ import annotations

from collections.abc import Sequence


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
