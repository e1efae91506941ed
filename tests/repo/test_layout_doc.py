"""docs/development.md's layout names every module of es_provider on a line of its own, and nothing that is gone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "es_provider"


def layout_lines() -> list[str]:
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    return section.splitlines()


def test_every_module_has_its_line() -> None:
    named = {m.group(1) for line in layout_lines() if (m := re.match(r"^\s+([a-z_]+/[a-z_0-9]+\.py)\s", line))}
    modules = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
               if p.name != "__main__.py" and (p.name != "__init__.py" or p.parent.name == "cli")}
    assert sorted(modules - named) == [], "modules the layout does not name"
    assert sorted(named - modules) == [], "layout lines naming no module"


def test_every_room_has_its_line() -> None:
    rooms = {line.strip().split()[0] for line in layout_lines() if re.match(r"^  [a-z_]+/\s", line)}
    packages = {f"{p.parent.name}/" for p in PACKAGE.glob("*/__init__.py")}
    assert rooms == packages


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
