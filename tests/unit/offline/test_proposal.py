"""`kb inspect`'s proposal (offline/proposal.py): from a mapping and sampled documents, which fields look like text,
ids, tenant, ACL, source, metadata and vectors, and what it could not decide; the block it prints is a valid
[[knowledge]] entry once its CHANGE-ME values are filled in."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from es_provider.config.knowledge import KnowledgeBase
from es_provider.offline.proposal import flatten, propose

ROOT = Path(__file__).resolve().parents[3]

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


# --- the tools' layouts (issue 53, item 3): which preset a mapping is (the mappings as each tool's library makes them:
# tests/helpers/tool_indices.py builds them for real in tests/integration/test_inspect_tools.py), what the proposal
# prints beside the preset, and the comment on each permission field (coverage, public_when_unset, ignore_above,
# normalizer, index: false).

LUCENE = {"name": "hnsw", "space_type": "cosinesimil", "engine": "lucene"}
KNN = {"type": "knn_vector", "dimension": 8, "method": LUCENE}
ACL_META = {"tenant": DYNAMIC, "readers": DYNAMIC, "reader_groups": DYNAMIC, "public": {"type": "boolean"}}

# langchain-community OpenSearchVectorSearch: only `vector_field` mapped, the rest dynamic.
TOOL_LANGCHAIN = {"metadata": {"properties": {"source": DYNAMIC, "page": {"type": "long"}, **ACL_META}},
             "text": DYNAMIC, "vector_field": KNN}
# langchain-elasticsearch ElasticsearchStore: its vector is `vector`.
LANGCHAIN_ES = {"metadata": {"properties": {"source": DYNAMIC}}, "text": DYNAMIC,
                "vector": {"type": "dense_vector", "dims": 8, "index": True, "similarity": "cosine"}}
# llama-index-vector-stores-opensearch: `embedding` mapped; `content` and the node's metadata dynamic.
LLAMAINDEX = {"content": DYNAMIC, "embedding": KNN, "metadata": {"properties": {
    "_node_content": DYNAMIC, "_node_type": DYNAMIC, "doc_id": DYNAMIC, "document_id": DYNAMIC,
    "ref_doc_id": DYNAMIC, **ACL_META}}}
# opensearch-haystack / elasticsearch-haystack: `content` and `embedding`, every meta string a top-level keyword.
HAYSTACK = {"content": {"type": "text"}, "embedding": {"type": "knn_vector", "dimension": 8, "method": LUCENE},
            "id": KW, "tenant": KW, "readers": KW, "reader_groups": KW, "public": {"type": "boolean"}}
HAYSTACK_ES = {**HAYSTACK, "embedding": {"type": "dense_vector", "dims": 8, "index": True,
                                         "similarity": "cosine"}}
TOOL_CONNECTORS = {"id": KW, "_subextracted_as_of": {"type": "date"}, "_subextracted_version": KW, "title": ENUM,
              "body": ENUM, "url": ENUM, "_allow_access_control": ENUM, "_timestamp": {"type": "date"}}
BEDROCK = {"AMAZON_BEDROCK_TEXT_CHUNK": {"type": "text"}, "AMAZON_BEDROCK_METADATA": {"type": "text",
                                                                                    "index": False},
           "x-amz-bedrock-kb-source-uri": DYNAMIC, "x-amz-bedrock-kb-document-page-number": {"type": "long"},
           "bedrock-knowledge-base-default-vector": {"type": "knn_vector", "dimension": 1024}}
BEDROCK_TEXT = {**{k: v for k, v in BEDROCK.items() if k != "AMAZON_BEDROCK_TEXT_CHUNK"},
                "AMAZON_BEDROCK_TEXT": {"type": "text"}}
TOOL_CORP = {"body": {"type": "text"}, "heading": {"type": "text"}, "doc_id": KW, "tenant": KW, "owner": KW,
        "allowed_groups": KW, "url": KW, "page": {"type": "integer"}, "vec": KNN}


def _own() -> dict[str, Any]:
    return json.loads((ROOT / "mappings" / "chunks.json").read_text(encoding="utf-8"))["mappings"]["properties"]


@pytest.mark.parametrize(("properties", "preset"), [
    (TOOL_LANGCHAIN, "langchain"), (LANGCHAIN_ES, "langchain"), (LLAMAINDEX, "llamaindex"), (HAYSTACK, "haystack"),
    (HAYSTACK_ES, "haystack"), (TOOL_CONNECTORS, "elastic-connectors"), (BEDROCK, "bedrock"), (BEDROCK_TEXT, "bedrock"),
    (TOOL_CORP, None), (_own(), None), ({"content": {"type": "text"}}, None), ({"text": {"type": "text"}}, None),
    ({"content": {"type": "text"}, "embedding": KNN, "metadata": {"properties": {"year": KW}}}, None),
], ids=["langchain", "langchain-es", "llamaindex", "haystack", "haystack-es", "connectors", "bedrock",
        "bedrock-text", "corp", "es-provider", "content-only", "text-only", "content-embedding-metadata"])
def test_which_tool_made_the_mapping(properties: dict, preset: str | None) -> None:
    assert _printed(properties, [])["schema"] == (preset or "custom")
    from es_provider.offline.proposal import preset_of

    found = preset_of(flatten(properties))
    assert (found.preset if found else None) == preset


def _printed(properties: dict, sample: list) -> dict[str, Any]:
    """The block `kb inspect` prints, as the configuration reads it."""
    text = propose(properties, sample).toml("their-index").replace("CHANGE-ME", "x").replace("CHANGE_ME", "X")
    entry: dict[str, Any] = tomllib.loads(text)["knowledge"][0]
    return entry


SAMPLES = {
    "langchain": [{"text": "chunk text " * 30, "metadata": {"source": "/data/handbook.pdf", "page": 3,
                                                             "tenant": "acme", "readers": ["u-a"]}}],
    "langchain-es": [{"text": "chunk text " * 30, "metadata": {"source": "notes/a.md"}}],
    "llamaindex": [{"content": "node text " * 30, "metadata": {"_node_content": "{}" * 200, "_node_type": "TextNode",
                                                                "doc_id": "d1", "document_id": "d1",
                                                                "ref_doc_id": "d1", "tenant": "acme",
                                                                "reader_groups": ["g"]}}],
    "haystack": [{"content": "haystack text " * 30, "id": "d1", "tenant": "acme", "readers": ["u-a"],
                  "public": True}],
    "connectors": [{"id": "d1", "title": "Page", "body": "confluence page body " * 30,
                    "url": "https://wiki.example.com/d1", "_allow_access_control": ["user:a"],
                    "_timestamp": "2026-01-01"}],
    "bedrock-text": [{"AMAZON_BEDROCK_TEXT": "bedrock text " * 30,
                      "x-amz-bedrock-kb-source-uri": "s3://bucket/doc.pdf"}],
}


@pytest.mark.parametrize(("properties", "sample", "schema", "printed", "undecided"), [
    # The preset's own fields are not printed; the permission fields it lacks are.
    (TOOL_LANGCHAIN, SAMPLES["langchain"], "langchain", {
        "tenant": "metadata.tenant.keyword", "subjects": "metadata.readers.keyword",
        "groups": "metadata.reader_groups.keyword", "public": "metadata.public"}, []),
    # langchain-elasticsearch names its vector `vector`; there is no ACL field to propose.
    (LANGCHAIN_ES, SAMPLES["langchain-es"], "langchain", {"vector": "vector"}, ["ACL"]),
    # LlamaIndex's bookkeeping (`_node_content`, the ids) is neither metadata nor text.
    (LLAMAINDEX, SAMPLES["llamaindex"], "llamaindex", {
        "tenant": "metadata.tenant.keyword", "subjects": "metadata.readers.keyword",
        "groups": "metadata.reader_groups.keyword", "public": "metadata.public"}, []),
    (HAYSTACK, SAMPLES["haystack"], "haystack", {"tenant": "tenant", "subjects": "readers",
                                                 "groups": "reader_groups", "public": "public"}, []),
    # The connectors' preset already reads `_allow_access_control.enum`, `title`, `url`.
    (TOOL_CONNECTORS, SAMPLES["connectors"], "elastic-connectors", {}, []),
    (BEDROCK_TEXT, SAMPLES["bedrock-text"], "bedrock", {"text": ["AMAZON_BEDROCK_TEXT"]}, ["ACL"]),
])
def test_a_tools_index_is_proposed_its_preset(properties: dict, sample: list, schema: str, printed: dict,
                                              undecided: list) -> None:
    entry = _printed(properties, sample)
    assert (entry["schema"], entry.get("fields", {})) == (schema, printed)
    assert [u.split(":")[0] for u in propose(properties, sample).undecided] == undecided
    kb = KnowledgeBase.model_validate(entry, strict=False)
    assert kb.schema_name == schema and kb.existing


def test_a_preset_field_the_index_lacks_is_replaced_not_kept() -> None:
    """LangChain texts added without a loader have no `metadata.source`: the preset's document id cannot be read,
    so each engine document is a document (said as undecided); the preset's uri is simply absent."""
    properties = {"text": DYNAMIC, "vector_field": KNN, "metadata": {"properties": {"owner": DYNAMIC}}}
    sample = [{"text": "t " * 50, "metadata": {"owner": "u-a"}}]
    entry = _printed(properties, sample)
    assert (entry["schema"], entry["fields"]) == ("langchain", {"document_id": "_id",
                                                                "subjects": "metadata.owner.keyword"})
    assert [u.split(":")[0] for u in propose(properties, sample).undecided] == ["document_id"]


def test_a_preset_whose_vector_the_index_lacks_is_not_proposed() -> None:
    """No `[knowledge.fields]` entry can take a preset's vector away, and readiness refuses a field the index lacks:
    LangChain's text and metadata without any vector field are served as a custom layout."""
    from es_provider.offline.proposal import preset_of

    properties = {"text": DYNAMIC, "metadata": {"properties": {"source": DYNAMIC}}}
    assert preset_of(flatten(properties)) is not None
    assert _printed(properties, [{"text": "t", "metadata": {"source": "a.md"}}])["schema"] == "custom"


OWNER = {"text": DYNAMIC, "vector_field": KNN, "metadata": {"properties": {"source": DYNAMIC, "owner": DYNAMIC}}}


def _owned(n: int, owner: str | None = "u-a") -> list[dict[str, Any]]:
    return [{"text": "t", "metadata": {"source": f"docs/{i}.md", **({"owner": owner} if owner else {})}}
            for i in range(n)]


@pytest.mark.parametrize(("properties", "sample", "role", "expected"), [
    # An owner every document carries: public_when_unset is moot, each document is its owner's.
    (OWNER, _owned(50), "acl", "every sampled document has an ACL value (metadata.owner.keyword in each): true "
                               "would change nothing"),
    (OWNER, _owned(50), "subjects", "set in 50 of 50 sampled documents; only the subjects it names read such a "
                                    "document, unless another ACL field grants it"),
    (OWNER, _owned(50), "subjects", "ignore_above 256: a value longer than 256 characters is not indexed; it grants "
                                    "nothing: access is denied"),
    (OWNER, _owned(3) + _owned(1, None), "acl", "1 of 4 sampled documents have no ACL value: nobody reads them; "
                                                "true would let everyone read them"),
    (OWNER, _owned(2, "u" * 300), "subjects", "ignore_above 256: a value longer than 256 characters is not indexed; "
                                              "it grants nothing: access is denied (2 sampled values are)"),
    ({"body": {"type": "text"}, "owner": {"type": "keyword", "normalizer": "lowercase"}},
     [{"body": "x", "owner": "Alice"}], "subjects",
     "normalizer lowercase: the engine matches values normalized, the re-check as stored; a value that differs "
     "from the caller's only by it is denied"),
    # OpenSearch 2.19 filters a keyword field that is not indexed on its doc values, and fails without them.
    ({"body": {"type": "text"}, "groups": {"type": "keyword", "index": False}}, [{"body": "x", "groups": ["g"]}],
     "groups", "index: false: the engine filters on its doc values instead, slower on a large index; it grants as "
               "an indexed field would"),
    ({"body": {"type": "text"}, "groups": {"type": "keyword", "index": False, "doc_values": False}},
     [{"body": "x", "groups": ["g"]}], "groups", "index: false and doc_values: false: the engine cannot filter on "
                                                 "it; every request that needs it fails (an error, never an answer)"),
    ({"body": {"type": "text"}, "tenant": {"type": "keyword", "ignore_above": 64}, "owner": KW},
     [{"body": "x", "tenant": "t", "owner": "u"}], "tenant",
     "ignore_above 64: a value longer than 64 characters is not indexed; such a document is no tenant's"),
    (OWNER, _owned(2), "uri", "2 of 2 sampled values are not http(s) URLs (LangChain's loaders put file paths "
                              "there): no protocol answers those as a URI"),
])
def test_each_permission_choice_says_what_it_means(properties: dict, sample: list, role: str, expected: str) -> None:
    printed = propose(properties, sample).toml("i")
    comment = "# public_when_unset (false): " if role == "acl" else f"# {role}"
    assert any(line.startswith(comment) and line.endswith(expected) for line in printed.splitlines()), printed
    tomllib.loads(printed)


def test_plain_fields_and_urls_carry_no_warning() -> None:
    printed = propose(TOOL_CORP, [{"body": "b " * 30, "heading": "h", "doc_id": "d", "tenant": "t", "owner": "u",
                              "allowed_groups": ["g"], "url": "https://wiki.example.com/d", "page": 1}]).toml("i")
    assert "# subjects: set in 1 of 1 sampled documents" in printed  # said, and nothing more
    assert not any(word in printed for word in ("http(s)", "denied", "no tenant's"))


def test_the_block_shown_in_the_docs_is_what_inspect_prints() -> None:
    """docs/existing-index.md shows the comments over LangChain's `metadata.owner` mapped to subjects."""
    printed = propose(OWNER, _owned(50)).toml("corp-handbook")
    doc = (ROOT / "docs" / "existing-index.md").read_text(encoding="utf-8")
    shown = re.search(r"```toml\nmandatory_filters.*?```", doc, re.S)
    assert shown is not None
    for line in shown.group(0).splitlines()[1:-1]:
        assert line in printed.splitlines(), line
