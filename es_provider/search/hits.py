"""Pure mapping of OpenSearch hits to neutral Chunks (shape checked; markup residue repaired, markup.py; the score
comes calibrated, calibration.py). The same content reaches every protocol."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from es_provider.core.markup import has_markup, strip_markup
from es_provider.search.domain import Chunk


class MalformedHit(ValueError):
    """A stored chunk that lacks what every protocol needs; it is skipped and logged, never sent."""


def _optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value != "" else None


def to_chunk(hit: Mapping[str, Any], *, knowledge_id: str, score: float | None) -> Chunk:
    source = hit.get("_source")
    if not isinstance(source, dict | Mapping):
        raise MalformedHit("hit has no _source")
    chunk_id = source.get("chunk_id") or hit.get("_id")
    document_id = source.get("document_id")
    content = source.get("content")
    if not isinstance(chunk_id, str) or not chunk_id:
        raise MalformedHit("chunk has no id")
    if not isinstance(document_id, str) or not document_id:
        raise MalformedHit("chunk has no document_id")
    if not isinstance(content, str) or not content.strip():
        raise MalformedHit("chunk has no content")
    repaired = has_markup(content)
    if repaired:
        content = strip_markup(content)
        if not content:
            raise MalformedHit("chunk holds markup and no text")
    src = source.get("source")
    metadata = source.get("metadata")
    return Chunk(
        knowledge_id=knowledge_id,
        chunk_id=chunk_id,
        document_id=document_id,
        content=content,
        title=_optional_str(strip_markup(title) if isinstance(title := source.get("title"), str) and has_markup(title)
                            else title),
        tenant_id=_optional_str(source.get("tenant_id")),
        source=dict(src) if isinstance(src, dict | Mapping) else {},
        metadata=dict(metadata) if isinstance(metadata, dict | Mapping) else {},
        score=score,
        repaired=repaired,
    )
