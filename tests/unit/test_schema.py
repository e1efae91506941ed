"""An existing index's schema where search and the configuration read it: a chunk from a hit (search/hits.py),
the configuration's layout and its refusals (config/knowledge.py), the query bodies (search/query.py) and the
live-mapping check (search/layout.py). The schema's own translation: tests/unit/core/test_schema.py."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import ValidationError

from es_provider.config.knowledge import KnowledgeBase
from es_provider.core.acl import Filter, Identity
from es_provider.core.schema import ID, Schema, chunk_of, document_of
from es_provider.search import layout
from es_provider.search.domain import SearchRequest
from es_provider.search.hits import MalformedHit, to_chunk
from es_provider.search.query import build_knn, build_search

CORP = Schema(name="custom", text=("body", "heading"), title="heading", document_id="doc_id", chunk_id=ID,
              tenant="tenant", subjects="owner", groups="allowed_groups", public=None, principals=None,
              uri="url", page="page", metadata=(("year", "meta.year"),), vector="vec")
ALICE = Identity.of("app", "t1", "alice", frozenset({"eng"}))


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


def _kb(**fields: Any) -> KnowledgeBase:
    entry = {"id": "corp", "name": "Corp", "versions": ["1"], "alias": "corp-docs", "secret_ref": "S", "apps": ["a"],
             "schema": "custom", "fields": {"text": ["body", "heading"], "title": "heading", "document_id": "doc_id",
                                            "tenant": "tenant", "subjects": "owner", "groups": "allowed_groups",
                                            "uri": "url", "page": "page", "metadata": ["meta.year"], "vector": "vec"},
             **fields}
    return KnowledgeBase.model_validate(entry, strict=False)


def test_the_configured_layout() -> None:
    kb = _kb(mandatory_filters=["TENANT", "SUBJECT"])
    assert kb.existing and kb.index_schema == CORP


@pytest.mark.parametrize(("fields", "message"), [
    ({"schema": "langchain", "mandatory_filters": ["TENANT"], "fields": None}, "no tenant field"),
    ({"schema": "elastic-connectors", "fields": None, "open_to_keys": True, "mandatory_filters": ["TENANT"]},
     "no tenant field"),
    ({"schema": "langchain", "fields": None, "mandatory_filters": [], "open_to_keys": False}, "open_to_keys"),
    ({"schema": "langchain", "fields": {"tenant": "metadata.tenant.keyword"}, "mandatory_filters": ["SUBJECT"]},
     "no ACL field"),
    ({"schema": "custom", "fields": {"document_id": "doc"}, "open_to_keys": True}, "needs fields.text"),
    ({"schema": "es-provider", "public_when_unset": True}, "existing index"),
    ({"retrieval": "vector", "embedder": "e5", "fields": {"text": ["b"], "tenant": "t"}}, "fields.vector"),
    ({"fields": {"text": ["b"], "tenant": "t", "metadata": ["a.year", "b.year"]}}, "two fields of one last name"),
])
def test_the_configuration_refuses_what_the_schema_cannot_enforce(fields: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _kb(**fields)


def _request(kb: KnowledgeBase) -> SearchRequest:
    return SearchRequest(knowledge=(kb,), query="budget plan", identity=ALICE,
                         filters=(Filter.TENANT, Filter.SUBJECT), top_k=3)


def test_an_existing_index_body_reads_its_fields() -> None:
    kb = _kb(mandatory_filters=["TENANT", "SUBJECT"])
    body = build_search(_request(kb), timeout_ms=1000).body
    assert body["_source"] == ["body", "heading", "doc_id", "tenant", "owner", "allowed_groups", "url", "page",
                               "meta.year"]
    assert body["collapse"] == {"field": "doc_id"}
    text = body["query"]["bool"]["must"][0]["multi_match"]
    assert text["fields"] == ["body", "heading"] and text["query"] == "budget plan"
    knn = build_knn(_request(kb), [0.1, 0.2], timeout_ms=1000).body["query"]["bool"]["must"][0]["knn"]
    assert list(knn) == ["vec"] and knn["vec"]["filter"]["bool"]["filter"] == body["query"]["bool"]["filter"]


def test_a_whole_document_index_is_not_collapsed() -> None:
    kb = _kb(mandatory_filters=["TENANT"], fields={"text": ["body"], "tenant": "tenant"})
    assert "collapse" not in build_search(_request(kb), timeout_ms=1000).body


SPECS = {"corp-docs-1": {"body": {"type": "text"}, "heading": {"type": "text"}, "doc_id": {"type": "keyword"},
                         "tenant": {"type": "keyword"}, "owner": {"type": "keyword"},
                         "allowed_groups": {"type": "keyword"}, "url": {"type": "keyword"},
                         "page": {"type": "integer"}, "meta.year": {"type": "long"},
                         "vec": {"type": "knn_vector", "dimension": 384}}}


@pytest.mark.parametrize(("change", "dimensions", "expected"), [
    ({}, 384, []),
    ({}, None, []),
    ({"allowed_groups": {"type": "text"}}, 384, ["field allowed_groups is text in index corp-docs-1: tenant, ACL "
                                                 "and id fields must be keyword, a text field matches words, not "
                                                 "values (its keyword sub-field, e.g. allowed_groups.keyword, can be "
                                                 "named instead)"]),
    ({"tenant": None}, 384, ["index corp-docs-1 maps no field tenant"]),
    ({"page": None, "url": None}, 384, []),  # where a document was found only decorates an answer
    ({"doc_id": None}, 384, ["index corp-docs-1 maps no field doc_id"]),
    ({"vec": {"type": "knn_vector", "dimension": 768}}, 384,
     ["field vec has 768 dimensions in index corp-docs-1; the knowledge base's embedder makes 384"]),
    ({"vec": {"type": "float"}}, 384, ["field vec is float in index corp-docs-1, not a vector"]),
])
def test_the_live_mapping_check(change: dict, dimensions: int | None, expected: list[str]) -> None:
    fields = {k: v for k, v in {**SPECS["corp-docs-1"], **change}.items() if v is not None}
    assert layout.problems(CORP, {"corp-docs-1": fields}, dimensions) == expected


def test_every_index_behind_the_alias_is_checked() -> None:
    second = {k: v for k, v in SPECS["corp-docs-1"].items() if k != "owner"}
    assert layout.problems(CORP, {**SPECS, "corp-docs-2": second}) == ["index corp-docs-2 maps no field owner"]
    assert layout.problems(CORP, {}) == ["no index behind the alias"]
    public = dataclasses.replace(CORP, public="open")
    assert layout.problems(public, {"i": {**SPECS["corp-docs-1"], "open": {"type": "keyword"}}}) == [
        "field open is keyword in index i: the public flag must be boolean"]
