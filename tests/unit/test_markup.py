"""Markup residue repaired in answers rather than skipped (hits.py, sparktide_items.py), and a skipped
item's place taken by the next candidate. How residue is recognised and removed: tests/unit/core/test_markup.py."""

from __future__ import annotations

import pytest

from es_provider.protocols import sparktide_items as items
from es_provider.search.domain import Chunk
from es_provider.search.hits import MalformedHit, to_chunk


def hit(content: str, title: str = "Title") -> dict:
    return {"_id": "c-1", "_index": "kb-v1", "_source": {"chunk_id": "c-1", "document_id": "doc-1",
                                                         "content": content, "title": title}}


def test_a_chunk_with_residue_is_repaired_and_says_so() -> None:
    chunk = to_chunk(hit("安裝<br>位置", title="<b>規範</b>"), knowledge_id="kb", score=0.9)
    assert (chunk.content, chunk.title, chunk.repaired) == ("安裝 位置", "規範", True)
    item, fixes = items.to_item(chunk)
    assert item["content"] == "安裝 位置" and fixes == ["removed markup residue from content"]


def test_a_chunk_of_markup_only_is_malformed() -> None:
    with pytest.raises(MalformedHit, match="markup"):
        to_chunk(hit("<br><br/>"), knowledge_id="kb", score=0.9)


def chunk(n: int, **fields: object) -> Chunk:
    values: dict = {"knowledge_id": "kb", "chunk_id": f"c-{n}", "document_id": f"doc-{n}", "content": f"text {n}",
                    "title": "T", "tenant_id": None, "source": {"type": "DOCUMENT", "id": f"doc-{n}"},
                    "metadata": {}, "score": 0.5}
    values.update(fields)
    return Chunk(**values)


def test_a_skipped_item_is_replaced_by_the_next_candidate() -> None:
    import orjson

    candidates = [chunk(0, chunk_id="bad id"), chunk(1), chunk(2), chunk(3), chunk(4)]
    rendered = items.render(candidates, {"protocolVersion": "1.0", "appliedFilters": []}, "items", limit=3)
    ids = [item["id"] for item in orjson.loads(rendered.body)["items"]]
    assert ids == ["c-1", "c-2", "c-3"] and rendered.count == 3
    assert any("skipped" in problem for problem in rendered.problems)
