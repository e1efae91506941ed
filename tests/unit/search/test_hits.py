"""A chunk from a hit (search/hits.py): an existing index's fields read through its schema, what makes a hit
malformed, and markup residue repaired rather than skipped (how residue is recognised and removed:
tests/unit/core/test_markup.py)."""

from __future__ import annotations

import pytest

from es_provider.core.schema import ID, Schema, chunk_of, document_of
from es_provider.protocols import sparktide_items as items
from es_provider.search.hits import MalformedHit, to_chunk

CORP = Schema(name="custom", text=("body", "heading"), title="heading", document_id="doc_id", chunk_id=ID,
              tenant="tenant", subjects="owner", groups="allowed_groups", public=None, principals=None,
              uri="url", page="page", metadata=(("year", "meta.year"),), vector="vec")


HIT = {"_id": "corp-7", "_index": "corp-docs", "_source": {
    "body": "<p>Body text</p>", "heading": "Heading", "doc_id": "doc-7", "tenant": "t1", "url": "https://x/7#p2",
    "page": "2", "meta": {"year": 2024}, "owner": "alice"}}


def test_a_chunk_from_an_existing_index() -> None:
    chunk = to_chunk(HIT, knowledge_id="corp", score=0.5, schema=CORP)
    assert (chunk.chunk_id, chunk.document_id, chunk.content, chunk.title, chunk.tenant_id) == (
        "corp-7", "doc-7", "Body text", "Heading", "t1")
    assert chunk.repaired
    assert chunk.source == {"type": "DOCUMENT", "id": "doc-7", "uri": "https://x/7#p2", "page": 2}
    assert chunk.metadata == {"year": 2024}
    assert (document_of(HIT, CORP), chunk_of(HIT, CORP)) == ("doc-7", "corp-7")


@pytest.mark.parametrize(("change", "message"), [
    ({"doc_id": None}, "no doc_id"),
    ({"body": None, "heading": None}, "no content"),
    ({"body": ["  "], "heading": "  "}, "no content"),
])
def test_a_malformed_chunk_is_named(change: dict, message: str) -> None:
    source = {k: v for k, v in {**HIT["_source"], **change}.items() if v is not None}
    with pytest.raises(MalformedHit, match=message):
        to_chunk({**HIT, "_source": source}, knowledge_id="corp", score=None, schema=CORP)


def test_the_second_text_field_serves_when_the_first_is_empty() -> None:
    source = {**HIT["_source"], "body": ""}
    assert to_chunk({**HIT, "_source": source}, knowledge_id="corp", score=None, schema=CORP).content == "Heading"


# --- markup residue ---------------------------------------------------------------------------------------------

def residue_hit(content: str, title: str = "Title") -> dict:
    return {"_id": "c-1", "_index": "kb-v1", "_source": {"chunk_id": "c-1", "document_id": "doc-1",
                                                         "content": content, "title": title}}


def test_a_chunk_with_residue_is_repaired_and_says_so() -> None:
    chunk = to_chunk(residue_hit("安裝<br>位置", title="<b>規範</b>"), knowledge_id="kb", score=0.9)
    assert (chunk.content, chunk.title, chunk.repaired) == ("安裝 位置", "規範", True)
    item, fixes = items.to_item(chunk)
    assert item["content"] == "安裝 位置" and fixes == ["removed markup residue from content"]


def test_a_chunk_of_markup_only_is_malformed() -> None:
    with pytest.raises(MalformedHit, match="markup"):
        to_chunk(residue_hit("<br><br/>"), knowledge_id="kb", score=0.9)
