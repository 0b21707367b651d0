"""The code's shape (issue #24): no Python file under libs/ or services/ over 800 lines, no
function or method over 100 lines (from its ``def`` to its last line).

A file or function past a limit is split along a seam, as ``libs/crawlstream/store/`` was (a
facade over private modules of one job each), never by an arbitrary cut."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("libs", "services")
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 100



def _sources() -> dict[str, str]:
    """Every checked file's text, by its path relative to the repository."""
    files = sorted(path for root in ROOTS for path in (REPO / root).rglob("*.py"))
    assert files, f"no Python files under {ROOTS} of {REPO}"
    return {path.relative_to(REPO).as_posix(): path.read_text(encoding="utf-8") for path in files}


def _long_files(sources: dict[str, str]) -> list[str]:
    return [
        f"{name}: {len(text.splitlines())} lines"
        for name, text in sources.items()
        if len(text.splitlines()) > MAX_FILE_LINES
    ]


def _long_functions(sources: dict[str, str]) -> list[str]:
    out = []
    for name, text in sources.items():
        for node in ast.walk(ast.parse(text, filename=name)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    out.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    return out


def test_no_file_is_over_800_lines() -> None:
    offenders = _long_files(_sources())
    assert not offenders, f"split these files along a seam (at most {MAX_FILE_LINES} lines): {offenders}"


def test_no_function_is_over_100_lines() -> None:
    offenders = _long_functions(_sources())
    assert not offenders, f"split these functions (at most {MAX_FUNCTION_LINES} lines): {offenders}"

