"""An existing index's schema where the configuration reads it: the configured layout and its refusals
(config/knowledge.py). Where search reads it: tests/unit/search/ (test_hits.py, test_query.py, test_layout.py);
the schema's own translation: tests/unit/core/test_schema.py."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from es_provider.config.knowledge import KnowledgeBase
from es_provider.core.schema import ID, Schema

CORP = Schema(name="custom", text=("body", "heading"), title="heading", document_id="doc_id", chunk_id=ID,
              tenant="tenant", subjects="owner", groups="allowed_groups", public=None, principals=None,
              uri="url", page="page", metadata=(("year", "meta.year"),), vector="vec")


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
