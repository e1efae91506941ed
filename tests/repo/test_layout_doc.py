"""No two test modules share the name pytest imports them by. (docs/development.md's layout, which this module
used to check, is held by scripts/check_house.py in `make lint`, with every module and package named and nothing
gone; tests/repo/test_check_house.py tests its reading.)"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def import_name(path: Path) -> str:
    """The name pytest imports a test module by: its basename, with the folders above it that hold an __init__.py
    (tests/unit/<package>/) in front, so tests/unit/cli/test_check.py is cli.test_check."""
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").exists():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts)


def test_no_two_test_modules_share_a_name() -> None:
    """A second test module imported by the same name stops the whole run at collection ("import file mismatch"):
    two basenames may meet only in different package folders (tests/unit/<package>/ has an __init__.py)."""
    names = sorted(import_name(p) for p in (ROOT / "tests").rglob("test_*.py"))
    assert sorted({n for n in names if names.count(n) > 1}) == []
