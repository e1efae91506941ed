"""Pure: whether an existing index can be served under its knowledge base's schema, read from the live mapping of
every index behind the alias (engine `field_specs`). Each problem is one sentence naming the index, the field and
what is wrong; a knowledge base with any is refused (readiness and every request say why), never answered empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from es_provider.core.schema import ID, Schema

KEYWORD_TYPES = frozenset({"keyword", "constant_keyword"})
VECTOR_TYPES = frozenset({"knn_vector", "dense_vector"})


def checked_fields(schema: Schema) -> tuple[str, ...]:
    """The fields whose mapping is checked: every field the schema names, and its vector."""
    named = (*schema.text, schema.title, schema.document_id, schema.chunk_id, schema.tenant, *schema.acl_fields,
             schema.uri, schema.page, schema.locator, *(field for _, field in schema.metadata), schema.vector)
    return tuple(dict.fromkeys(f for f in named if f is not None and f != ID))


def problems(schema: Schema, specs: Mapping[str, Mapping[str, Mapping[str, Any]]],
             dimensions: int | None = None) -> list[str]:
    """What keeps `schema` from being served over these indices (index → field → mapping), given the embedder's
    vector `dimensions` (None: the knowledge base embeds nothing)."""
    if not specs:
        return ["no index behind the alias"]
    keyword = set(schema.keyword_fields)
    # Where a document was found (title, URI, page, locator) only decorates an answer: an index without one (a
    # LangChain loader that set no page) answers without it. Every other field it lacks is a refusal.
    optional = {schema.title, schema.uri, schema.page, schema.locator} - {*schema.text, *keyword}
    found: list[str] = []
    for index, fields in sorted(specs.items()):
        for field in checked_fields(schema):
            spec = fields.get(field)
            if spec is None:
                if field not in optional:
                    found.append(f"index {index} maps no field {field}")
                continue
            kind = spec.get("type")
            if field in keyword and kind not in KEYWORD_TYPES:
                hint = f" (its keyword sub-field, e.g. {field}.keyword, can be named instead)" if kind == "text" else ""
                found.append(f"field {field} is {kind} in index {index}: tenant, ACL and id fields must be keyword, "
                             f"a {kind} field matches words, not values{hint}")
            elif field == schema.public and kind != "boolean":
                found.append(f"field {field} is {kind} in index {index}: the public flag must be boolean")
            elif field == schema.vector:
                found += _vector_problems(index, field, spec, dimensions)
    return found


def _vector_problems(index: str, field: str, spec: Mapping[str, Any], dimensions: int | None) -> list[str]:
    kind = spec.get("type")
    if kind not in VECTOR_TYPES:
        return [f"field {field} is {kind} in index {index}, not a vector"]
    mapped = spec.get("dimension", spec.get("dims"))
    if dimensions is not None and mapped is not None and mapped != dimensions:
        return [f"field {field} has {mapped} dimensions in index {index}; the knowledge base's embedder makes "
                f"{dimensions}"]
    return []
