"""How the tools that companies index with lay out an index, read off each tool's own code (docs/existing-index.md
cites the file and commit of each). A preset is a schema.py Schema without ACL or tenant fields: the tools keep
no permissions of their own (Elastic's connectors excepted), so a knowledge base names where its pipeline put
them (`[knowledge.fields]`), and is refused at start while a mandated filter has no field. A string the engine
mapped dynamically is `text` with a `.keyword` sub-field: ids, tenants and ACLs are matched on the sub-field.

Pure: data, and what the start log says once about a preset's uri (uri_note).
"""

from __future__ import annotations

from es_provider.core.schema import ID, OWN, Schema

PRESETS: dict[str, Schema] = {
    "es-provider": OWN,
    # elastic/connectors: content documents keep their id as `_id` (es/sink.py), their text in `body`, and
    # document-level security in `_allow_access_control`, a list of prefixed identities (access_control.py's
    # prefix_identity: user:…, group:…, email:…). Their content index maps every string as text with a keyword
    # `enum` sub-field (es/settings.py's TEXT_FIELD_MAPPING): the filter matches that sub-field.
    "elastic-connectors": Schema(
        name="elastic-connectors", text=("body",), title="title", document_id=ID, chunk_id=ID, tenant=None,
        subjects=None, groups=None, public=None, principals="_allow_access_control.enum", uri="url",
    ),
    # langchain-community OpenSearchVectorSearch (vectorstores/opensearch_vector_search.py) and
    # langchain-elasticsearch ElasticsearchStore: `text`, one `metadata` object (its loaders' `source`, `page`),
    # the chunk id as `_id`; no document id of their own.
    "langchain": Schema(
        name="langchain", text=("text",), title=None, document_id="metadata.source.keyword", chunk_id=ID,
        tenant=None, subjects=None, groups=None, public=None, principals=None, uri="metadata.source",
        page="metadata.page", vector="vector_field",
    ),
    # llama-index-vector-stores-opensearch OpensearchVectorClient (vector_stores/opensearch/base.py): `content`,
    # `embedding`, a `metadata` object holding the document id (`doc_id`) and the loaders' `file_path`,
    # `page_label`; the node id as `_id`.
    "llamaindex": Schema(
        name="llamaindex", text=("content",), title=None, document_id="metadata.doc_id.keyword", chunk_id=ID,
        tenant=None, subjects=None, groups=None, public=None, principals=None, uri="metadata.file_path",
        page="metadata.page_label", vector="embedding",
    ),
    # opensearch-haystack / elasticsearch-haystack (document_stores/*/document_store.py): `content`,
    # `embedding`, every meta key at the top level as a keyword (a dynamic template), the id as `_id` and `id`.
    "haystack": Schema(
        name="haystack", text=("content",), title=None, document_id=ID, chunk_id=ID, tenant=None, subjects=None,
        groups=None, public=None, principals=None, vector="embedding",
    ),
    # Amazon Bedrock knowledge bases on OpenSearch (the console's quick-create field map): the chunk in
    # AMAZON_BEDROCK_TEXT_CHUNK, the vector in bedrock-knowledge-base-default-vector, the source document's URI
    # and page at the top level.
    "bedrock": Schema(
        name="bedrock", text=("AMAZON_BEDROCK_TEXT_CHUNK",), title=None,
        document_id="x-amz-bedrock-kb-source-uri.keyword", chunk_id=ID, tenant=None, subjects=None, groups=None,
        public=None, principals=None, uri="x-amz-bedrock-kb-source-uri",
        page="x-amz-bedrock-kb-document-page-number", vector="bedrock-knowledge-base-default-vector",
    ),
    # Nothing assumed: [knowledge.fields] names every field.
    "custom": Schema(
        name="custom", text=(), title=None, document_id=ID, chunk_id=ID, tenant=None, subjects=None, groups=None,
        public=None, principals=None,
    ),
}

# The preset uri fields where the tools' loaders put file paths, not URLs (LangChain's document loaders' `source`,
# LlamaIndex's SimpleDirectoryReader's `file_path`).
PATH_URIS = {"metadata.source": "LangChain's loaders put file paths there",
             "metadata.file_path": "LlamaIndex's readers put file paths there"}


def uri_note(schema: Schema) -> str | None:
    """Said once at start for an existing index with a uri field: a value that is not an http(s) URL is answered
    as a URI on no protocol (schema.web_uri), rather than logged once per item."""
    if schema.own or schema.uri is None:
        return None
    why = PATH_URIS.get(schema.uri)
    return (f"source uri from {schema.uri} is answered, on every protocol, only where it holds an http(s) URL"
            + (f" ({why}; a path is left out)" if why else ""))
