"""bench/ and tests/ never import each other: what they share is harness/, which imports neither."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported(path: Path) -> set[str]:
    """The top-level names of every module `path` imports (at any depth: a function's own imports too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def path_parts(path: Path) -> set[str]:
    """String constants that name the tests' folders (a `ROOT / "tests"` put on sys.path, a helper run by path)."""
    return {node.value for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Constant) and node.value in ("tests", "helpers")}


def offenders(folder: str, forbidden: set[str], *, paths: bool = False) -> dict[str, list[str]]:
    found = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        wrong = (imported(path) & forbidden) | (path_parts(path) if paths else set())
        if wrong:
            found[str(path.relative_to(ROOT))] = sorted(wrong)
    return found


def test_bench_imports_nothing_of_the_tests() -> None:
    assert offenders("bench", {"tests", "helpers", "conftest"}, paths=True) == {}


def test_the_tests_import_nothing_of_bench() -> None:
    assert offenders("tests", {"bench"}) == {}


def test_what_they_share_imports_neither() -> None:
    assert offenders("harness", {"bench", "tests", "helpers", "conftest"}, paths=True) == {}


def test_the_check_sees_an_import_at_any_depth(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text('import os\n\ndef late():\n    from helpers.served import Served\n    import bench.loadgen\n'
                      'PATH = ROOT / "tests"\n', encoding="utf-8")
    assert imported(module) == {"os", "helpers", "bench"}
    assert path_parts(module) == {"tests"}
