"""How a knowledge base's index is shaped (docs/existing-index.md): which fields hold its text, ids, tenant, ACL,
source and metadata. One value per knowledge base, handed to the pure translation (acl.py's clauses and re-check,
query.py's bodies, hits.py's chunks), so that the query, the re-check and the answer read the same fields.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

ID = "_id"  # the engine's document id, named where a field would be
# Keyword sub-fields: the one the engines' dynamic mapping gives every string (`text` + `.keyword`), and the one
# Elastic's connectors' mappings gave (`.enum`). A field named with one is queried there and read from `_source`
# without it.
KEYWORD_SUFFIXES = (".keyword", ".enum")


def source_path(field: str) -> str:
    """Where a field's value sits in `_source` (a keyword sub-field is indexed from its parent's value)."""
    for suffix in KEYWORD_SUFFIXES:
        if field.endswith(suffix):
            return field.removesuffix(suffix)
    return field


def metadata_name(field: str) -> str:
    """The name callers see a metadata field under: its last name, its parent's for a keyword sub-field
    (`metadata.department.keyword` is `department`: the sub-field holds its parent's value)."""
    return source_path(field).rsplit(".", 1)[-1]


MAX_URI = 2048  # SparkTide's bound on a source uri, kept for every protocol


def web_uri(value: Any) -> str | None:
    """`value` if it is an http(s) URL a caller can follow, else None. Only such a value is answered as a source's
    URI on any protocol: LangChain's and LlamaIndex's loaders put file paths in the field their presets read it from
    (docs/existing-index.md)."""
    if not isinstance(value, str) or not value or len(value) > MAX_URI:
        return None
    try:
        parts = urlsplit(value)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return None
    return value if parts.scheme in ("http", "https") and host and "@" not in parts.netloc else None


@dataclass(frozen=True, slots=True)
class Schema:
    name: str
    text: tuple[str, ...]  # the fields a query's text is matched against; the first is the answer's content
    title: str | None
    document_id: str  # a field, or ID: each engine document is then a document of its own
    chunk_id: str  # a field, or ID
    tenant: str | None  # None: the index has no tenants (TENANT cannot be enforced on it)
    subjects: str | None  # the subjects that may read a chunk
    groups: str | None  # the groups that may
    public: str | None  # a boolean: anyone may
    principals: str | None  # one field of prefixed principals (user:…, group:…), as Elastic's connectors keep them
    subject_prefix: str = "user:"
    group_prefix: str = "group:"
    uri: str | None = None
    page: str | None = None
    locator: str | None = None
    metadata: tuple[tuple[str, str], ...] = ()  # (the name callers see and filter on, the field)
    vector: str | None = None
    # A chunk without any ACL value: readable by nobody (False, the default) or by everyone (an explicit, logged
    # choice for indices whose writers leave it out to mean "public", as Elastic's connectors do).
    public_when_unset: bool = False
    # A chunk without a tenant: application-shared, read by every tenant (the service's own indices, whose ingest
    # writes it on purpose), or read by no tenant (an existing index: fail closed).
    untenanted_shared: bool = False
    own: bool = False  # the service's own layout (mappings/): it writes these indices; every other is read-only

    @property
    def acl_fields(self) -> tuple[str, ...]:
        """The fields SUBJECT reads, in a fixed order."""
        return tuple(f for f in (self.subjects, self.groups, self.public, self.principals) if f is not None)

    @property
    def keyword_fields(self) -> tuple[str, ...]:
        """Fields that must be mapped `keyword`: a term query on a `text` field matches tokens, not values."""
        ids = tuple(f for f in (self.document_id, self.chunk_id) if f != ID)
        names = (*(f for f in (self.tenant, self.subjects, self.groups, self.principals) if f is not None), *ids)
        return tuple(dict.fromkeys(names))

    @property
    def fields(self) -> tuple[str, ...]:
        """Every field the service reads from a hit's `_source`."""
        named = (*self.text, self.title, self.document_id, self.chunk_id, self.tenant, *self.acl_fields, self.uri,
                 self.page, self.locator, *(field for _, field in self.metadata))
        return tuple(dict.fromkeys(source_path(f) for f in named if f is not None and f != ID))


OWN = Schema(
    name="es-provider", text=("content",), title="title", document_id="document_id", chunk_id="chunk_id",
    tenant="tenant_id", subjects="acl.subjects", groups="acl.groups", public="acl.public", principals=None,
    vector="embedding", untenanted_shared=True, own=True,
)


def value_at(source: Mapping[str, Any], field: str) -> Any:
    """The value of `field` in a `_source`, as the engine indexes it: through nested objects, or under a key that
    holds dots itself (`{"metadata.owner": …}` is indexed as `metadata.owner` too); a `.keyword` sub-field's is its
    parent's. None if absent."""
    return _at(source, source_path(field))


def _at(source: Mapping[str, Any], path: str) -> Any:
    if path in source:
        return source[path]
    head, dot, rest = path.partition(".")
    while dot:
        inner = source.get(head)
        if isinstance(inner, dict | Mapping):
            found = _at(inner, rest)
            if found is not None:
                return found
        step, dot, rest = rest.partition(".")
        head = f"{head}.{step}"
    return None


def strings(value: Any) -> list[str]:
    """A keyword field as the engine matches it: one string or a list of strings; anything else matches nothing."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def _id_of(hit: Mapping[str, Any], field: str) -> str | None:
    if field == ID:
        value = hit.get("_id")
    else:
        source = hit.get("_source")
        value = value_at(source, field) if isinstance(source, dict | Mapping) else None
    return value if isinstance(value, str) and value else None


def document_of(hit: Mapping[str, Any], schema: Schema) -> str | None:
    """A hit's document id under `schema` (a non-empty string), or None."""
    return _id_of(hit, schema.document_id)


def chunk_of(hit: Mapping[str, Any], schema: Schema) -> str | None:
    """A hit's chunk id under `schema`; the engine's `_id` where the field is missing (as the own layout always
    did)."""
    return _id_of(hit, schema.chunk_id) or _id_of(hit, ID)


def document_clause(schema: Schema, document_id: str) -> dict[str, Any]:
    """The filter clause selecting one document's chunks."""
    if schema.document_id == ID:
        return {"ids": {"values": [document_id]}}
    return {"term": {schema.document_id: document_id}}
