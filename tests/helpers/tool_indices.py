"""Indices built by the tools companies index with, each by the tool's own library (its default mapping, its own
document shape): LangChain's OpenSearchVectorSearch, LlamaIndex's OpensearchVectorClient, haystack's
OpenSearchDocumentStore and ElasticsearchDocumentStore, and Elastic connectors' content-index shape (written with
elasticsearch-py's bulk helper, as the connectors' sink writes). Where each tool keeps no permissions of its own, the
company's pipeline put them in the tool's metadata; the `[knowledge.fields]` each layout needs say where.

The libraries are imported inside the builders: they are slow to import and only these tests need them. Each
builder is blocking (the tools' own sync APIs) and runs in a thread. Vectors are a deterministic stand-in (8
dimensions): these indices are served with BM25; the service's vector paths over existing indices are shown on the
corp-docs index (test_existing_index.py)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DIMENSIONS = 8
# Lucene's HNSW: the local node runs no native k-NN engine (nmslib, faiss); the tools' defaults are those.
LUCENE = {"name": "hnsw", "space_type": "cosinesimil", "engine": "lucene"}


def vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return [0.1 + byte / 255 for byte in digest[:DIMENSIONS]]


def metadata(doc: dict[str, Any]) -> dict[str, Any]:
    """The permissions a company's pipeline adds to a tool's metadata: absent, not empty, where a document has none
    (5 % of the corpus: readable by nobody)."""
    acl = doc["acl"]
    found: dict[str, Any] = {}
    if doc.get("tenant_id"):
        found["tenant"] = doc["tenant_id"]
    if acl["subjects"]:
        found["readers"] = acl["subjects"]
    if acl["groups"]:
        found["reader_groups"] = acl["groups"]
    if acl["public"]:
        found["public"] = True
    return found


def principals(doc: dict[str, Any]) -> list[str]:
    """Elastic connectors' `_allow_access_control`: prefixed identities (connectors' access_control.py)."""
    acl = doc["acl"]
    return [f"user:{s}" for s in acl["subjects"]] + [f"group:{g}" for g in acl["groups"]]


def langchain(url: str, index: str, docs: list[dict[str, Any]]) -> None:
    from langchain_community.vectorstores import OpenSearchVectorSearch
    from langchain_core.embeddings import DeterministicFakeEmbedding

    store = OpenSearchVectorSearch(url, index, DeterministicFakeEmbedding(size=DIMENSIONS), engine="lucene")
    store.add_texts([d["content"] for d in docs],
                    metadatas=[{"source": d["document_id"], **metadata(d)} for d in docs],
                    ids=[f"{d['document_id']}-0" for d in docs], bulk_size=len(docs), space_type="cosinesimil")


def llamaindex(url: str, index: str, docs: list[dict[str, Any]]) -> None:
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
    from llama_index.vector_stores.opensearch import OpensearchVectorClient, OpensearchVectorStore

    client = OpensearchVectorClient(url, index, DIMENSIONS, method=LUCENE)
    nodes = [TextNode(id_=f"{d['document_id']}-node", text=d["content"], embedding=vector(d["content"]),
                      metadata=metadata(d), relationships={
                          NodeRelationship.SOURCE: RelatedNodeInfo(node_id=d["document_id"])}) for d in docs]
    store = OpensearchVectorStore(client)
    try:
        store.add(nodes)
    finally:
        store.close()


def _haystack_documents(docs: list[dict[str, Any]]) -> list[Any]:
    from haystack import Document

    return [Document(id=d["document_id"], content=d["content"], meta=metadata(d), embedding=vector(d["content"]))
            for d in docs]


def haystack_opensearch(url: str, index: str, docs: list[dict[str, Any]]) -> None:
    from haystack_integrations.document_stores.opensearch import OpenSearchDocumentStore

    store = OpenSearchDocumentStore(hosts=url, index=index, embedding_dim=DIMENSIONS, method=LUCENE, http_auth=None)
    assert store.write_documents(_haystack_documents(docs), refresh=True) == len(docs)


def haystack_elasticsearch(url: str, index: str, docs: list[dict[str, Any]]) -> None:
    from haystack_integrations.document_stores.elasticsearch import ElasticsearchDocumentStore

    store = ElasticsearchDocumentStore(hosts=url, index=index, api_key=None, api_key_id=None)
    assert store.write_documents(_haystack_documents(docs), refresh=True) == len(docs)


# Elastic connectors' content index (connectors/es/settings.py): every string dynamically a text field with a
# keyword `enum` sub-field, `id` a keyword. Its analyzers (iq_text_base, …) are left out: the tests match tokens.
CONNECTORS_MAPPING = {
    "dynamic": "true",
    "dynamic_templates": [{"data": {"match_mapping_type": "string", "mapping": {
        "type": "text", "index_options": "freqs",
        "fields": {"enum": {"type": "keyword", "ignore_above": 2048}}}}}],
    "properties": {"id": {"type": "keyword"}, "_subextracted_as_of": {"type": "date"},
                   "_subextracted_version": {"type": "keyword"}},
}


def elastic_connectors(url: str, index: str, docs: list[dict[str, Any]]) -> None:
    """The connectors write with elasticsearch-py's bulk helper (es/sink.py); OpenSearch takes the same documents
    through opensearch-py's."""
    actions = []
    for d in docs:
        source: dict[str, Any] = {"id": d["document_id"], "title": d["title"], "body": d["content"],
                                  "url": f"https://drive.example.com/{d['document_id']}"}
        if allowed := principals(d):
            source["_allow_access_control"] = allowed
        actions.append({"_index": index, "_id": d["document_id"], "_source": source})
    if os.environ.get("ES_PROVIDER_ENGINE", "opensearch") == "opensearch":
        from opensearchpy import OpenSearch, helpers

        client: Any = OpenSearch(url)
        client.indices.create(index=index, body={"mappings": CONNECTORS_MAPPING})
        helpers.bulk(client, actions, refresh=True)
    else:
        from elasticsearch import Elasticsearch
        from elasticsearch import helpers as es_helpers

        client = Elasticsearch(url)
        client.indices.create(index=index, mappings=CONNECTORS_MAPPING)
        es_helpers.bulk(client, actions, refresh=True)
    client.close()


@dataclass(frozen=True)
class Layout:
    """A tool's index and the knowledge base that serves it."""

    name: str
    build: Callable[[str, str, list[dict[str, Any]]], None]
    schema: str
    fields: dict[str, Any]
    # Where an ACL field holds its values as text (the engine's dynamic mapping) and where one would be missing.
    text_acl: dict[str, str]
    missing: dict[str, str]
    tenants: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


# Dynamic mapping makes LangChain's and LlamaIndex's metadata strings text with a `.keyword` sub-field.
LANGCHAIN = Layout("langchain", langchain, "langchain", {
    "tenant": "metadata.tenant.keyword", "subjects": "metadata.readers.keyword",
    "groups": "metadata.reader_groups.keyword", "public": "metadata.public"},
    text_acl={"groups": "metadata.reader_groups"}, missing={"tenant": "metadata.team.keyword"})
LLAMAINDEX = Layout("llamaindex", llamaindex, "llamaindex", {
    "tenant": "metadata.tenant.keyword", "subjects": "metadata.readers.keyword",
    "groups": "metadata.reader_groups.keyword", "public": "metadata.public"},
    text_acl={"subjects": "metadata.readers"}, missing={"groups": "metadata.teams.keyword"})
# haystack's dynamic template makes every meta string a keyword at the top level.
HAYSTACK_OPENSEARCH = Layout("haystack-opensearch", haystack_opensearch, "haystack", {
    "tenant": "tenant", "subjects": "readers", "groups": "reader_groups", "public": "public"},
    text_acl={"subjects": "content"}, missing={"tenant": "team"})
HAYSTACK_ELASTICSEARCH = Layout("haystack-elasticsearch", haystack_elasticsearch, "haystack",
                                HAYSTACK_OPENSEARCH.fields, text_acl={"groups": "content"},
                                missing={"subjects": "owners"})
# Connectors keep no tenant: SUBJECT only, API keys read every document SUBJECT lets them (open_to_keys).
CONNECTORS = Layout("elastic-connectors", elastic_connectors, "elastic-connectors", {},
                    text_acl={"principals": "_allow_access_control"}, missing={"principals": "_allowed.enum"},
                    tenants=False, extra={"mandatory_filters": ["SUBJECT"], "open_to_keys": True})
