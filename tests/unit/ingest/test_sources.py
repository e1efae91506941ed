"""What a run reads from its command-line paths (issue 27): folders walked without following symbolic links or
entering hidden folders, what was left out named in one line, and one document per id."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from es_provider.ingest.records import RecordError, SourceDocument
from es_provider.ingest.sources import HIDDEN, SPECIAL, SYMLINK, FileDefaults, Skipped, collect, skipped_line, walk
from es_provider.ingest.writer import first_occurrences


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A folder with every kind of entry a walk meets, and a secret outside it that links point to."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.env").write_text("API_TOKEN=do-not-index")
    root = tmp_path / "docs"
    for name, text in {"a.txt": "alpha", "sub/b.md": "# B\n\nbeta", "sub/deeper/c.txt": "gamma", ".env": "hidden",
                       ".hidden/x.txt": "in a hidden folder", "sub/.cache/y.txt": "cached"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "link.txt").symlink_to(outside / "secret.env")
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    (root / "sub" / "inside-link.txt").symlink_to(root / "a.txt")  # even a link that stays inside
    (root / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(root / "pipe")
    return root


def test_a_walk_follows_no_link_and_enters_no_hidden_folder(tree: Path) -> None:
    found = walk(tree)
    assert [document_id for _, document_id in found.files] == ["a.txt", "sub/b.md", "sub/deeper/c.txt"]
    assert found.skipped == [
        Skipped(".env", HIDDEN), Skipped(".hidden/", HIDDEN), Skipped("dangling", SYMLINK),
        Skipped("link.txt", SYMLINK), Skipped("linkdir", SYMLINK), Skipped("pipe", SPECIAL),
        Skipped("sub/.cache/", HIDDEN), Skipped("sub/inside-link.txt", SYMLINK)]
    assert found.errors == []


def test_collect_reads_the_walked_files_and_says_what_it_left_out(tree: Path) -> None:
    collected = collect([str(tree)], FileDefaults(tenant_id="team-a"))
    docs = [item for item in collected.items if isinstance(item, SourceDocument)]
    assert [d.record.document_id for d in docs] == ["a.txt", "sub/b.md", "sub/deeper/c.txt"]
    assert not any("do-not-index" in s.text for d in docs for s in d.sections)
    assert [d.origin for d in docs] == [str(tree / "a.txt"), str(tree / "sub/b.md"), str(tree / "sub/deeper/c.txt")]
    assert len(collected.skipped) == 8 and not [i for i in collected.items if isinstance(i, RecordError)]


@pytest.mark.parametrize(("given", "reason"), [
    ("link.txt", "is a symbolic link, not followed"), ("linkdir", "is a symbolic link, not followed"),
    ("dangling", "is a symbolic link, not followed"), ("pipe", "not a regular file"),
    ("missing.txt", "no such file or directory"),
])
def test_a_path_given_that_is_a_link_or_no_regular_file_is_refused(tree: Path, given: str, reason: str) -> None:
    collected = collect([str(tree / given)], FileDefaults())
    assert len(collected.items) == 1 and isinstance(collected.items[0], RecordError)
    assert collected.items[0].where == str(tree / given) and reason in collected.items[0].reason


def test_a_hidden_path_given_by_name_is_read(tree: Path) -> None:
    (tree / ".notes.txt").write_text("named on purpose")
    collected = collect([str(tree / ".notes.txt"), str(tree / ".hidden")], FileDefaults())
    assert [i.record.document_id for i in collected.items if isinstance(i, SourceDocument)] == [".notes.txt", "x.txt"]


def test_an_unlistable_folder_is_a_failure_not_a_silence(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scandir = os.scandir

    def refusing(path: Path) -> object:
        if Path(path).name == "sub":
            raise PermissionError(13, "Permission denied")
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)  # as for a folder without read permission (root reads every one)
    found = walk(tree)
    assert [str(e) for e in found.errors] == [f"{tree / 'sub'}: cannot list folder: Permission denied"]
    assert [document_id for _, document_id in found.files] == ["a.txt"]


@pytest.mark.parametrize(("skipped", "line"), [
    ([], None),
    ([Skipped("link.txt", SYMLINK)], "skipped: 1 symbolic link (link.txt)"),
    ([Skipped("link.txt", SYMLINK), Skipped(".hidden/", HIDDEN)],
     "skipped: 1 symbolic link (link.txt), 1 hidden (.hidden/)"),
    ([Skipped(f"l{i}", SYMLINK) for i in range(7)] + [Skipped("p", SPECIAL), Skipped("q", SPECIAL)],
     "skipped: 7 symbolic links (l0, l1, l2, l3, l4, … 2 more), 2 special files (p, q)"),
])
def test_the_skipped_line(skipped: list[Skipped], line: str | None) -> None:
    assert skipped_line(skipped) == line


def test_json_lines_records_carry_their_line(tmp_path: Path) -> None:
    data = tmp_path / "docs.jsonl"
    data.write_text("\n".join(json.dumps({"document_id": i, "content": "x"}) for i in ("a", "b", "a")) + "\n")
    docs = [item for item in collect([str(data)], FileDefaults()).items if isinstance(item, SourceDocument)]
    assert [d.origin for d in docs] == [f"{data}:1", f"{data}:2", f"{data}:3"]
    assert first_occurrences(docs)[1] == [f"document a: its id appears again at {data}:3, first at {data}:1; "
                                          "only the first is ingested"]
