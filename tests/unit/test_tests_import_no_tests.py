"""tests/ holds test modules and conftest files only; what they share lives in `jpu.testing`
(fixtures as pytest plugins listed in tests/conftest.py, helpers as plain modules). A test module
that imports another module of tests/ — `tests.…`, a `conftest`, a `test_*` module or a helper
beside it — collects only where that folder happens to be on sys.path (`python -m pytest` from the
checkout, pytest's rootdir insertion), not under plain `pytest tests` from anywhere."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """Every module an import statement names, with its line (relative imports keep their dots)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, "." * node.level + (node.module or "")))
    return found


def test_no_module_under_tests_imports_another_module_of_tests() -> None:
    files = sorted(TESTS.rglob("*.py"))
    local = {p.stem for p in files}  # test_*, conftest and any helper beside them
    assert "conftest" in local and len(files) > 100, f"tests/ not found at {TESTS}"
    bad = []
    for path in files:
        for line, module in _imported(ast.parse(path.read_text(), str(path))):
            top = module.split(".")[0]
            if module.startswith(".") or top == "tests" or top in local:
                bad.append(f"{path.relative_to(TESTS.parent)}:{line}: imports {module}")
    assert not bad, "move what they share into jpu.testing:\n" + "\n".join(bad)
