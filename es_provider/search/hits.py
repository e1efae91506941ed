"""Pure mapping of OpenSearch hits to neutral Chunks, through the knowledge base's schema (schema.py: the own layout
or an existing index's fields; shape checked; markup residue repaired, markup.py; the score comes calibrated,
calibration.py). The same content reaches every protocol."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from es_provider.core.markup import has_markup, strip_markup
from es_provider.core.schema import OWN, Schema, chunk_of, document_of, value_at, web_uri
from es_provider.search.domain import Chunk


class MalformedHit(ValueError):
    """A stored chunk that lacks what every protocol needs; it is skipped and logged, never sent."""


def _optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value != "" else None


def _text(value: Any) -> str | None:
    """A text field's value: a string, or the strings of a list joined (a multi-valued field)."""
    if isinstance(value, list):
        value = "\n".join(v for v in value if isinstance(v, str))
    return value if isinstance(value, str) and value.strip() else None


def _page(value: Any) -> int | None:
    """A page number, also from its string form ("3", as some pipelines keep page labels)."""
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _mapped(source: Mapping[str, Any], schema: Schema, document_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """An existing index's source and metadata, from the fields its schema names. A uri that is not an http(s) URL
    (a loader's file path) is left out here, so that no protocol answers it and none logs it per item."""
    where: dict[str, Any] = {"type": "DOCUMENT", "id": document_id}
    for key, field, read in (("uri", schema.uri, web_uri), ("page", schema.page, _page),
                             ("locator", schema.locator, _optional_str)):
        if field is not None and (value := read(value_at(source, field))) is not None:
            where[key] = value
    metadata = {name: value for name, field in schema.metadata if (value := value_at(source, field)) is not None}
    return where, metadata


def to_chunk(hit: Mapping[str, Any], *, knowledge_id: str, score: float | None, schema: Schema = OWN,
             whole_over: int | None = None) -> Chunk:
    """`whole_over`: a text longer than this is a whole document, kept as stored: its passage is repaired once cut
    (passage_cutting.with_passages), so markup repair reads a passage, never a whole document (134 ms for 3M characters
    with residue, on the event loop)."""
    source = hit.get("_source")
    if not isinstance(source, dict | Mapping):
        raise MalformedHit("hit has no _source")
    chunk_id = chunk_of(hit, schema)
    document_id = document_of(hit, schema)
    content = next((text for field in schema.text if (text := _text(value_at(source, field))) is not None), None)
    if chunk_id is None:
        raise MalformedHit("chunk has no id")
    if document_id is None:
        raise MalformedHit(f"chunk has no {schema.document_id}")
    if content is None:
        raise MalformedHit("chunk has no content")
    repaired = (whole_over is None or len(content) <= whole_over) and has_markup(content)
    if repaired:
        content = strip_markup(content)
        if not content:
            raise MalformedHit("chunk holds markup and no text")
    if schema.own:
        src, metadata = source.get("source"), source.get("metadata")
        where = dict(src) if isinstance(src, dict | Mapping) else {}
        meta = dict(metadata) if isinstance(metadata, dict | Mapping) else {}
    else:
        where, meta = _mapped(source, schema, document_id)
    title = value_at(source, schema.title) if schema.title is not None else None
    tenant = value_at(source, schema.tenant) if schema.tenant is not None else None
    return Chunk(
        knowledge_id=knowledge_id,
        chunk_id=chunk_id,
        document_id=document_id,
        content=content,
        title=_optional_str(strip_markup(title) if isinstance(title, str) and has_markup(title) else title),
        tenant_id=_optional_str(tenant),
        source=where,
        metadata=meta,
        score=score,
        repaired=repaired,
    )
