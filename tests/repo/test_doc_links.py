"""Every relative link and image in README.md and docs/*.md names a file that exists, and every #anchor a heading of
the page it points at (as GitHub makes anchors from headings): the README's topics moved to docs/ pages (issue 30),
and a moved section must not leave a link behind."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")


def _lines_outside_code(text: str) -> list[str]:
    lines, fence = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fence = not fence
            lines.append("")
            continue
        lines.append("" if fence else re.sub(r"`[^`]*`", lambda m: " " * len(m.group()), line))
    return lines


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    fence = False
    for line in page.read_text(encoding="utf-8").split("\n"):
        if line.lstrip().startswith("```"):
            fence = not fence
        if fence or not re.match(r"^#{1,6} ", line):
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", re.sub(r"^#+ ", "", line).strip()).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken(pages: list[Path], root: Path = ROOT) -> list[str]:
    problems = []
    for page in pages:
        for number, line in enumerate(_lines_outside_code(page.read_text(encoding="utf-8")), 1):
            for match in LINK.finditer(line):
                target = match.group(1)
                if re.match(r"^[a-z]+:", target):
                    continue
                path, _, anchor = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                where = f"{page.relative_to(root)}:{number}"
                if not dest.exists():
                    problems.append(f"{where}: {target} does not exist")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    problems.append(f"{where}: {dest.name} has no heading #{anchor}")
    return problems


def test_every_relative_link_resolves() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert broken(pages) == []


def test_the_checker_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A title\n\n[a](gone.md) [b](#a-title) [c](#nowhere) ![d](img/x.png) `[e](code.md)`\n"
                    "```\n[f](fenced.md)\n```\n", encoding="utf-8")
    assert broken([page], tmp_path) == ["page.md:3: gone.md does not exist", "page.md:3: page.md has no heading #nowhere",
                                        "page.md:3: img/x.png does not exist"]


def test_github_anchors() -> None:
    page = ROOT / "docs" / "ingest.md"
    assert "mirroring-a-source-ingest---sync" in anchors(page)
    assert "access_log" in anchors(ROOT / "docs" / "configuration.md")
