from __future__ import annotations

import re

import pytest

from es_provider.ingest.chunker import CONTENT_LIMIT, chunk_id, split_text


@pytest.mark.parametrize(
    ("text", "size", "overlap", "expected"),
    [
        ("One. Two. Three.", 100, 0, ["One. Two. Three."]),
        ("One sentence here. Another one here.", 20, 0, ["One sentence here.", "Another one here."]),
        ("第一句。第二句！第三句？", 4, 0, ["第一句。", "第二句！", "第三句？"]),
        ("第一句。第二句。", 100, 0, ["第一句。第二句。"]),
        ("Para one.\n\nPara two.", 9, 0, ["Para one.", "Para two."]),
        ("aaaa bbbb. cccc.", 10, 6, ["aaaa bbbb.", "cccc."]),
        ("A. B. C. D.", 6, 3, ["A. B.", "B. C.", "C. D."]),
        ("x" * 25, 10, 0, ["x" * 10, "x" * 10, "x" * 5]),
        ("", 10, 0, []),
    ],
)
def test_split_text(text: str, size: int, overlap: int, expected: list[str]) -> None:
    assert [c.text for c in split_text(text, size=size, overlap=overlap)] == expected


def test_never_over_the_content_limit() -> None:
    chunks = split_text("字" * 40000, size=10**9)
    assert all(len(c.text) <= CONTENT_LIMIT for c in chunks)


def test_page_and_paragraph_are_kept() -> None:
    chunks = split_text("First.\n\nSecond.", size=7, page=4)
    assert [(c.page, c.paragraph) for c in chunks] == [(4, 1), (4, 2)]


@pytest.mark.parametrize(
    ("document_id", "version", "position", "readable"),
    [("doc-1", "v1", 0, "doc-1:v1:0"), ("a.b_c", "2", 7, "a.b_c:2:7"), ("有 空格", "v1", 0, None),
     ("x" * 200, "v1", 0, None), ("..", "", 0, "..::0")],
)
def test_chunk_ids_are_valid_and_deterministic(document_id: str, version: str, position: int, readable: str | None) -> None:
    first = chunk_id(document_id, version, position)
    assert first == chunk_id(document_id, version, position)
    assert re.fullmatch(r"[A-Za-z0-9_.:\-]{1,128}", first) and first not in (".", "..")
    if readable is not None:
        assert first == readable
