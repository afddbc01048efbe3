"""README.md stays true: its configuration table is config.ALL, its test command is the one .ci/run runs."""

from __future__ import annotations

import re
from pathlib import Path

from tilejit import config

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _default(s: config.Setting[object]) -> str:
    if s.default is None:
        return "unset"
    if s.kind is bool:
        return "1" if s.default else "0"
    return str(s.default)


def test_configuration_table_lists_every_setting() -> None:
    rows = re.findall(r"^\| `(TILEJIT_\w+)` \| (\w+) \| ([^|]+) \| ([^|]+) \|$", README, re.MULTILINE)
    want = [(s.name, s.kind.__name__, _default(s), s.doc) for s in config.ALL]
    assert [(n, k, d.strip(), doc.strip()) for n, k, d, doc in rows] == want


def test_readme_test_command_is_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    last = [ln for ln in ci.strip().splitlines() if ln.strip() and not ln.startswith("#")][-1]
    assert last == ".venv/bin/python -m pytest -q"
    assert f"`{last}`" in README
    assert "bash .ci/run" in README
    assert "set -euo pipefail" in ci


def test_readme_names_files_that_exist() -> None:
    for path in re.findall(r"`((?:examples|bench|tilejit)/[\w/.]+\.py)`", README) + ["examples/vector_add.py"]:
        assert (ROOT / path).is_file(), path
    for folder in re.findall(r"^\| `(tilejit/\w+/)`", README, re.MULTILINE):
        assert (ROOT / folder).is_dir(), folder
