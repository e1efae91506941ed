"""`kb inspect`'s proposal (offline/proposal.py): from a mapping and sampled documents, which fields look like text,
ids, tenant, ACL, source, metadata and vectors, and what it could not decide; the block it prints is a valid
[[knowledge]] entry once its CHANGE-ME values are filled in."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from es_provider.config.knowledge import KnowledgeBase
from es_provider.offline.proposal import flatten, propose

KW = {"type": "keyword"}
DYNAMIC = {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}}
CORP = {"body": {"type": "text"}, "heading": {"type": "text"}, "doc_id": KW, "tenant": KW, "owner": KW,
        "allowed_groups": KW, "url": KW, "page": {"type": "integer"}, "meta": {"properties": {"year": {"type": "long"}}},
        "vec": {"type": "knn_vector", "dimension": 384}}
CORP_SAMPLE = [{"body": "a long body of text " * 20, "heading": "Title", "doc_id": "d", "tenant": "t", "owner": "u",
                "allowed_groups": ["g"], "url": "https://x", "page": 1, "meta": {"year": 2024}}]
LANGCHAIN = {"text": DYNAMIC, "vector_field": {"type": "knn_vector", "dimension": 8},
             "metadata": {"properties": {"source": DYNAMIC, "page": {"type": "long"}, "groups": DYNAMIC,
                                         "tenant_id": DYNAMIC}}}
LANGCHAIN_SAMPLE = [{"text": "chunk text " * 30, "metadata": {"source": "a.pdf", "page": 3, "groups": ["eng"],
                                                              "tenant_id": "t"}}]
# Elastic connectors' content index: strings are text with a keyword `enum` sub-field (connectors/es/settings.py).
ENUM = {"type": "text", "fields": {"enum": {"type": "keyword", "ignore_above": 2048}}}
CONNECTORS = {"title": ENUM, "body": ENUM, "url": ENUM, "id": KW, "_allow_access_control": ENUM,
              "_timestamp": {"type": "date"}}
CONNECTORS_SAMPLE = [{"title": "Page", "body": "confluence page body " * 30, "url": "https://wiki",
                      "_allow_access_control": ["user:a"], "_timestamp": "2026-01-01"}]


def test_flatten_keeps_objects_paths_and_keyword_sub_fields() -> None:
    assert set(flatten(LANGCHAIN)) == {"text", "text.keyword", "vector_field", "metadata.source",
                                       "metadata.source.keyword", "metadata.page", "metadata.groups",
                                       "metadata.groups.keyword", "metadata.tenant_id", "metadata.tenant_id.keyword"}


@pytest.mark.parametrize(("properties", "sample", "expected", "undecided"), [
    (CORP, CORP_SAMPLE, {"text": ["body", "heading"], "title": "heading", "document_id": "doc_id",
                         "tenant": "tenant", "subjects": "owner", "groups": "allowed_groups", "uri": "url",
                         "page": "page", "vector": "vec", "metadata": ["meta.year"]}, []),
    # A tool's index: its preset (tests/unit/test_tool_layouts.py), and only what the preset does not know.
    (LANGCHAIN, LANGCHAIN_SAMPLE, {"tenant": "metadata.tenant_id.keyword", "groups": "metadata.groups.keyword"}, []),
    (CONNECTORS, CONNECTORS_SAMPLE, {}, []),
    ({"content": {"type": "text"}}, [{"content": "x"}], {"text": ["content"], "document_id": "_id"},
     ["document_id", "ACL"]),
])
def test_the_proposal(properties: dict, sample: list, expected: dict, undecided: list) -> None:
    proposal = propose(properties, sample)
    assert proposal.fields == expected
    assert [line.split(":")[0] for line in proposal.undecided] == undecided


def test_a_text_only_acl_field_is_undecided_not_proposed() -> None:
    proposal = propose({"body": {"type": "text"}, "allowed_groups": {"type": "text"}}, [{"body": "x"}])
    assert "groups" not in proposal.fields
    assert any("no keyword form" in line for line in proposal.undecided)


@pytest.mark.parametrize(("properties", "sample"), [(CORP, CORP_SAMPLE), (LANGCHAIN, LANGCHAIN_SAMPLE),
                                                    (CONNECTORS, CONNECTORS_SAMPLE)])
def test_the_printed_block_is_a_valid_knowledge_base(properties: dict, sample: list) -> None:
    text = propose(properties, sample).toml("their-index").replace("CHANGE-ME", "x").replace("CHANGE_ME", "X")
    entry: dict[str, Any] = tomllib.loads(text)["knowledge"][0]
    kb = KnowledgeBase.model_validate(entry, strict=False)
    assert kb.existing and kb.alias == "their-index"
