from __future__ import annotations

import hashlib
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


# Ids are joined with `:`, so `:` (and `%`, the escape) inside a component must not let two documents share ids.
@pytest.mark.parametrize(
    ("one", "other"),
    [(("a:b", "c"), ("a", "b:c")), (("a%3Ab", "c"), ("a:b", "c")), (("a", "b%3Ac"), ("a", "b:c")),
     (("a\x00b", "c"), ("a", "b\x00c")), (("x:", "1"), ("x", ":1")), (("有:空", "v"), ("有", "空:v"))],
)
def test_chunk_ids_of_different_documents_never_collide(one: tuple[str, str], other: tuple[str, str]) -> None:
    for position in (0, 1):
        assert chunk_id(*one, position) != chunk_id(*other, position)


@pytest.mark.parametrize(
    ("document_id", "version", "expected"),
    [("doc-1", "v1", "doc-1:v1:0"), ("guide.txt", "0123abcd4567", "guide.txt:0123abcd4567:0"),
     # ids that were hashed before keep their hash (the hash input changes only for `%`, `:` and NUL)
     ("有 空格", "v1", "h-" + hashlib.sha256("有 空格\x00v1".encode()).hexdigest()[:32] + ":0")],
)
def test_chunk_ids_without_colon_or_percent_are_unchanged(document_id: str, version: str, expected: str) -> None:
    assert chunk_id(document_id, version, 0) == expected
