"""Issue 53, item 3: the tools' layouts where an answer reads them: metadata named by a keyword sub-field answering
under its parent's name, and the uri rule: a value that is not an http(s) URL is answered as a URI on no protocol,
never logged per item (the path was in Dify's metadata.uri, one "dropped invalid source.uri" per SparkTide item).
What `kb inspect` proposes for each tool's mapping: tests/unit/offline/test_proposal.py; the uri rule said once at
start: tests/unit/web/test_startup.py."""

from __future__ import annotations

from typing import Any

import pytest
from helpers.setup import new_kb

from es_provider.config.knowledge import KnowledgeBase
from es_provider.protocols import dify
from es_provider.protocols import sparktide_items as items
from es_provider.search.hits import to_chunk

# The new functions are imported where used, so that on the code before each test fails on its behaviour (the
# proposal printed, the chunk answered, the start log), not on an import.

# --- metadata named by a keyword sub-field ---

@pytest.mark.parametrize(("field", "name"), [
    ("meta.year", "year"), ("metadata.department.keyword", "department"), ("department.keyword", "department"),
    ("title.enum", "title"), ("year", "year"), ("metadata.keyword_count", "keyword_count"),
])
def test_metadata_name(field: str, name: str) -> None:
    from es_provider.core.schema import metadata_name

    assert metadata_name(field) == name
    kb = new_kb(schema="custom", fields={"text": ["body"], "metadata": [field]}, mandatory_filters=[],
                open_to_keys=True)
    assert kb.index_schema.metadata == ((name, field),)


def _kb(**fields: Any) -> KnowledgeBase:
    return new_kb(schema="langchain", fields={"subjects": "metadata.readers.keyword", **fields},
                  mandatory_filters=["SUBJECT"], open_to_keys=True)


def test_metadata_named_by_a_keyword_sub_field_answers_under_its_parents_name() -> None:
    kb = _kb(metadata=["metadata.department.keyword", "metadata.team.keyword", "metadata.year"])
    hit = {"_id": "c1", "_source": {"text": "x", "metadata": {"source": "a.md", "department": "eng",
                                                              "team": "infra", "year": 2026}}}
    chunk = to_chunk(hit, knowledge_id="kb", score=0.5, schema=kb.index_schema)
    assert chunk.metadata == {"department": "eng", "team": "infra", "year": 2026}
    assert dify.render_record(chunk)["metadata"]["department"] == "eng"
    item, _ = items.to_item(chunk)
    assert item["metadata"] == {"department": "eng", "team": "infra", "year": 2026}


def test_two_fields_of_one_name_are_still_refused() -> None:
    with pytest.raises(ValueError, match="two fields of one last name"):
        _kb(metadata=["metadata.department.keyword", "other.department"])


# --- the uri rule ---

@pytest.mark.parametrize(("stored", "uri"), [
    ("https://wiki.example.com/handbook", "https://wiki.example.com/handbook"), ("/data/handbook.pdf", None),
    ("handbook.pdf", None), ("file:///data/handbook.pdf", None), ("s3://bucket/handbook.pdf", None),
    ("https://user:pw@wiki.example.com/x", None),
])
def test_a_uri_that_is_no_url_is_answered_on_no_protocol_and_logged_per_item_nowhere(stored: str,
                                                                                      uri: str | None) -> None:
    kb = _kb()
    hit = {"_id": "c1", "_source": {"text": "x", "metadata": {"source": stored, "readers": ["u-a"], "page": 2}}}
    chunk = to_chunk(hit, knowledge_id="kb", score=0.5, schema=kb.index_schema)
    assert chunk.source.get("uri") == uri and chunk.source["page"] == 2
    item, fixes = items.to_item(chunk)
    assert item["source"].get("uri") == uri and fixes == []  # nothing to log per item
    legacy, _ = items.to_legacy(chunk)
    assert legacy["source"] == (uri or stored)  # the document id (`metadata.source`) where no URI
    assert dify.render_record(chunk)["metadata"].get("uri") == uri
