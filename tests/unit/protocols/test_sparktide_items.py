"""protocols/sparktide_items.py: what a SparkTide item may hold (uri, id, metadata), the chunks it cannot send,
an item and a legacy document from a chunk, and the rendered body (deduplicated, capped at 100 and one mebibyte, a
skipped item's place taken by the next candidate)."""

from __future__ import annotations

import math

import orjson
import pytest

from es_provider.protocols import sparktide_items as items
from es_provider.search.domain import Chunk


def chunk(chunk_id: str = "c-1", **fields) -> Chunk:
    values = {"knowledge_id": "kb", "chunk_id": chunk_id, "document_id": "doc-1", "content": "text",
              "title": "Title", "tenant_id": "team-a", "source": {"type": "DOCUMENT", "id": "doc-1"},
              "metadata": {}, "score": 0.5}
    values.update(fields)
    return Chunk(**values)


@pytest.mark.parametrize(
    ("uri", "ok"),
    [("https://example.com/a?b=c", True), ("http://example.com", True), ("https://例子.cn/文档", True),
     ("ftp://example.com/a", False), ("https://user:pw@example.com", False), ("https://user@example.com", False),
     ("https:///path-only", False), ("mailto:a@b.c", False), ("javascript:alert(1)", False), ("", False),
     ("https://example.com/" + "a" * 2030, False), ("https://example.com:99999/", False), (None, False), (5, False)],
)
def test_valid_uri(uri, ok: bool) -> None:
    assert items.valid_uri(uri) is ok


@pytest.mark.parametrize(
    ("value", "ok"),
    [("c-1", True), ("a.b_c:d-e", True), ("x" * 128, True), ("x" * 129, False), ("", False), (".", False),
     ("..", False), ("...", True), ("has space", False), ("slash/no", False), ("中文", False)],
)
def test_valid_item_id(value: str, ok: bool) -> None:
    assert items.valid_item_id(value) is ok


@pytest.mark.parametrize(
    ("metadata", "ok"),
    [({"a": 1}, True), ({"a": "x" * 4080}, True), ({"a": "x" * 4090}, False), ({"a": "设" * 1360}, True),
     ({"a": "设" * 1400}, False), ({"a": [[[[[[[1]]]]]]]}, True), ({"a": [[[[[[[[1]]]]]]]]}, False),
     ({"a": math.nan}, False)],
)
def test_valid_metadata(metadata: dict, ok: bool) -> None:
    assert items.valid_metadata(metadata) is ok


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"chunk_id": "bad id"}, "item id"),
        ({"document_id": ""}, "documentId"),
        ({"content": "   "}, "empty"),
        ({"content": "x" * 16385}, "16384"),
        ({"tenant_id": "t" * 129}, "tenantId"),
        ({"source": {"type": "URL", "id": "u"}}, "URL source"),
        ({"source": {"type": "DOCUMENT", "id": "i" * 129}}, "source id"),
    ],
)
def test_unsendable_chunks_raise(fields: dict, reason: str) -> None:
    with pytest.raises(items.InvalidItem, match=reason):
        items.to_item(chunk(**fields))


@pytest.mark.parametrize(
    ("fields", "expected_item"),
    [
        ({}, {"id": "c-1", "documentId": "doc-1", "content": "text", "source": {"type": "DOCUMENT", "id": "doc-1"},
              "title": "Title", "score": 0.5, "tenantId": "team-a"}),
        ({"score": None, "title": None, "tenant_id": None},
         {"id": "c-1", "documentId": "doc-1", "content": "text", "source": {"type": "DOCUMENT", "id": "doc-1"}}),
        ({"score": 1.5, "title": None, "tenant_id": None},
         {"id": "c-1", "documentId": "doc-1", "content": "text", "source": {"type": "DOCUMENT", "id": "doc-1"}}),
        ({"content": "a < b and c > d", "title": None, "tenant_id": None, "score": None},
         {"id": "c-1", "documentId": "doc-1", "content": "a < b and c > d",
          "source": {"type": "DOCUMENT", "id": "doc-1"}}),
        ({"source": {"type": "INLINE", "version": "v2", "page": 1_000_000, "locator": "L" * 600, "uri": "https://e.x/"},
          "title": None, "tenant_id": None, "score": None},
         {"id": "c-1", "documentId": "doc-1", "content": "text",
          "source": {"type": "INLINE", "id": "doc-1", "version": "v2", "page": 1_000_000, "locator": "L" * 512,
                     "uri": "https://e.x/"}}),
        ({"source": {"type": "BOOK", "page": True}, "title": None, "tenant_id": None, "score": None},
         {"id": "c-1", "documentId": "doc-1", "content": "text", "source": {"type": "DOCUMENT", "id": "doc-1"}}),
    ],
)
def test_to_item(fields: dict, expected_item: dict) -> None:
    assert items.to_item(chunk(**fields))[0] == expected_item


def test_render_deduplicates_and_caps_at_100() -> None:
    chunks = [chunk("dup"), chunk("dup")] + [chunk(f"c-{i}") for i in range(150)]
    rendered = items.render(chunks, {"protocolVersion": "1.0", "appliedFilters": []}, "items")
    answer = orjson.loads(rendered.body)
    assert answer["protocolVersion"] == "1.0" and answer["appliedFilters"] == [] and rendered.count == 100
    ids = [i["id"] for i in answer["items"]]
    assert len(ids) == 100 and len(set(ids)) == 100 and ids[0] == "dup"
    assert any("duplicate" in p for p in rendered.problems)


def test_render_drops_from_the_tail_to_fit_one_mebibyte() -> None:
    chunks = [chunk(f"c-{i}", content="设" * 16000) for i in range(40)]
    envelope = {"protocolVersion": "1.0", "appliedFilters": ["TENANT"]}
    rendered = items.render(chunks, envelope, "items")
    assert len(rendered.body) <= 1024 * 1024
    kept = orjson.loads(rendered.body)["items"]
    assert [i["id"] for i in kept] == [f"c-{i}" for i in range(len(kept))]
    assert 20 <= len(kept) < 40
    # The next item would not have fitted: the cut is as late as possible.
    assert len(rendered.body) + len(orjson.dumps(items.to_item(chunks[len(kept)])[0])) + 1 > 1024 * 1024


def test_legacy_document() -> None:
    doc, _ = items.to_legacy(chunk(source={"type": "DOCUMENT", "id": "doc-1", "uri": "https://e.x/d"}))
    assert doc == {"id": "c-1", "text": "text", "source": "https://e.x/d", "title": "Title", "tenantId": "team-a"}


def test_render_empty_and_legacy_bodies() -> None:
    assert orjson.loads(items.render([], {"protocolVersion": "1.0", "appliedFilters": ["TENANT"]}, "items").body) == {
        "protocolVersion": "1.0", "appliedFilters": ["TENANT"], "items": []}
    assert orjson.loads(items.render([chunk()], {}, "documents", legacy=True).body) == {"documents": [
        {"id": "c-1", "text": "text", "source": "doc-1", "title": "Title", "tenantId": "team-a"}]}


def test_a_skipped_item_is_replaced_by_the_next_candidate() -> None:
    candidates = [chunk("bad id"), *(chunk(f"c-{n}") for n in range(1, 5))]
    rendered = items.render(candidates, {"protocolVersion": "1.0", "appliedFilters": []}, "items", limit=3)
    ids = [item["id"] for item in orjson.loads(rendered.body)["items"]]
    assert ids == ["c-1", "c-2", "c-3"] and rendered.count == 3
    assert any("skipped" in problem for problem in rendered.problems)
