"""Pure: neutral Chunks → SparkTide 1.0 items and legacy documents, enforcing every result-field rule of the spec.

A chunk that can be made valid by dropping or shortening an optional field (title, locator, page, uri,
metadata, score) is fixed; one that cannot (id, documentId, content, tenantId, source id) is skipped. Either way
the reason is returned for the log; nothing invalid is ever sent.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from es_provider.core.schema import MAX_URI, web_uri
from es_provider.search.domain import Chunk

# The answer as a whole, then each field of an item, then its source and its metadata.
MAX_ITEMS = 100
MAX_BODY_BYTES = 1024 * 1024
MAX_CONTENT = 16384
MAX_TITLE = 512
MAX_TENANT = 128
SOURCE_TYPES = ("DOCUMENT", "URL", "INLINE")
MAX_SOURCE_ID = 128
MAX_LOCATOR = 512
MAX_PAGE = 1_000_000
MAX_METADATA_BYTES = 4096  # serialized
MAX_METADATA_DEPTH = 8

_ITEM_ID = re.compile(r"[A-Za-z0-9_.:\-]{1,128}")


class InvalidItem(ValueError):
    """The chunk cannot be sent; the message says why (never its content)."""


def valid_uri(uri: object) -> bool:
    """SparkTide's rule for a source uri, which every protocol keeps (core/schema.web_uri)."""
    return web_uri(uri) is not None


def metadata_depth(value: object, level: int = 1) -> int:
    if isinstance(value, Mapping):
        return max([level, *(metadata_depth(v, level + 1) for v in value.values())])
    if isinstance(value, list):
        return max([level, *(metadata_depth(v, level + 1) for v in value)])
    return level - 1


def valid_metadata(metadata: Mapping[str, Any]) -> bool:
    if not _all_finite(metadata):  # orjson would write NaN/Infinity as null: refuse them instead
        return False
    try:
        encoded = orjson.dumps(metadata)
    except orjson.JSONEncodeError:
        return False
    return len(encoded) <= MAX_METADATA_BYTES and metadata_depth(metadata) <= MAX_METADATA_DEPTH


def _all_finite(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, Mapping):
        return all(_all_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_all_finite(v) for v in value)
    return True


def valid_item_id(value: object) -> bool:
    return isinstance(value, str) and value not in (".", "..") and _ITEM_ID.fullmatch(value) is not None


def _content(chunk: Chunk, fixes: list[str]) -> str:
    """Content is never HTML: markup residue was removed when the hit was read (hits.py, markup.py), reported here
    as a fix; a chunk with nothing but markup never becomes a Chunk at all."""
    if not chunk.content.strip():
        raise InvalidItem("empty content")
    if len(chunk.content) > MAX_CONTENT:
        raise InvalidItem("content over 16384 characters")
    if chunk.repaired:
        fixes.append("removed markup residue from content")
    return chunk.content


def _source(chunk: Chunk, fixes: list[str]) -> dict[str, Any]:
    stored = chunk.source
    source_type = stored.get("type") if stored.get("type") in SOURCE_TYPES else "DOCUMENT"
    stored_id = stored.get("id")
    source_id = stored_id if isinstance(stored_id, str) and stored_id else chunk.document_id
    if len(source_id) > MAX_SOURCE_ID:
        raise InvalidItem("source id over 128 characters")
    source: dict[str, Any] = {"type": source_type, "id": source_id}
    version = stored.get("version")
    if isinstance(version, str) and version:
        source["version"] = version
    page = stored.get("page")
    if page is not None:
        if isinstance(page, int) and not isinstance(page, bool) and 1 <= page <= MAX_PAGE:
            source["page"] = page
        else:
            fixes.append("dropped invalid source.page")
    locator = stored.get("locator")
    if isinstance(locator, str) and locator:
        if len(locator) > MAX_LOCATOR:
            fixes.append("shortened source.locator")
        source["locator"] = locator[:MAX_LOCATOR]
    uri = stored.get("uri")
    if uri is not None:
        if valid_uri(uri):
            source["uri"] = uri
        else:
            fixes.append("dropped invalid source.uri")
    if source_type == "URL" and "uri" not in source:
        raise InvalidItem("URL source without a valid uri")
    return source


def to_item(chunk: Chunk) -> tuple[dict[str, Any], list[str]]:
    """One chunk → one 1.0 item, plus the fixes applied. Raises InvalidItem when it cannot be sent."""
    fixes: list[str] = []
    if not valid_item_id(chunk.chunk_id):
        raise InvalidItem("chunk id is not a valid item id")
    if not chunk.document_id:
        raise InvalidItem("chunk has no documentId")
    if chunk.tenant_id is not None and len(chunk.tenant_id) > MAX_TENANT:
        raise InvalidItem("tenantId over 128 characters")
    item: dict[str, Any] = {
        "id": chunk.chunk_id,
        "documentId": chunk.document_id,
        "content": _content(chunk, fixes),
        "source": _source(chunk, fixes),
    }
    if chunk.title:
        if len(chunk.title) > MAX_TITLE:
            fixes.append("shortened title")
        item["title"] = chunk.title[:MAX_TITLE]
    if chunk.score is not None:
        if math.isfinite(chunk.score) and 0.0 <= chunk.score <= 1.0:
            item["score"] = chunk.score
        else:
            fixes.append("omitted out-of-range score")
    if chunk.metadata:
        if valid_metadata(chunk.metadata):
            item["metadata"] = chunk.metadata
        else:
            fixes.append("omitted metadata over 4096 bytes or depth 8")
    if chunk.tenant_id is not None:
        item["tenantId"] = chunk.tenant_id
    return item, fixes


def to_legacy(chunk: Chunk) -> tuple[dict[str, Any], list[str]]:
    """One chunk → one legacy document `{id, text, title, source, tenantId}`, under the same checks."""
    item, fixes = to_item(chunk)
    source = item["source"]
    document: dict[str, Any] = {
        "id": item["id"],
        "text": item["content"],
        "source": source.get("uri") or source["id"],
    }
    if "title" in item:
        document["title"] = item["title"]
    if "tenantId" in item:
        document["tenantId"] = item["tenantId"]
    return document, fixes


@dataclass
class Encoded:
    """Valid items, each already serialized, and the answer's bytes around them."""

    body: bytes = b""
    count: int = 0
    served: list[Chunk] = field(default_factory=list)  # the chunks whose items are in the body, in order
    problems: list[str] = field(default_factory=list)  # for the log: what was skipped or fixed, and why


def render(chunks: Iterable[Chunk], envelope: dict[str, Any], key: str, *, legacy: bool = False,
           limit: int = MAX_ITEMS) -> Encoded:
    """`envelope` plus `key`: valid, de-duplicated items, at most `limit` (and 100), the whole body within 1 MiB
    (items are dropped from the tail, the least relevant, until it fits). A chunk that must be skipped is skipped
    before the limit, so the next candidate takes its place. Each item is serialized once."""
    out = Encoded()
    seen: set[str] = set()
    head = orjson.dumps({**envelope, key: []})[:-3]  # '{..., "key":' without the closing '[]}'
    size = len(head) + 3
    parts: list[bytes] = []
    for chunk in chunks:
        if len(parts) >= min(limit, MAX_ITEMS):
            if len(parts) >= MAX_ITEMS:
                out.problems.append("item limit 100 reached")
            break
        try:
            item, fixes = to_legacy(chunk) if legacy else to_item(chunk)
        except InvalidItem as exc:
            out.problems.append(f"skipped chunk {chunk.chunk_id[:128]!r}: {exc}")
            continue
        out.problems.extend(f"chunk {chunk.chunk_id!r}: {fix}" for fix in fixes)
        if item["id"] in seen:
            out.problems.append(f"skipped duplicate item id {item['id']!r}")
            continue
        encoded = orjson.dumps(item)
        if size + len(encoded) + (1 if parts else 0) > MAX_BODY_BYTES:
            out.problems.append("response size limit 1 MiB reached")
            break
        seen.add(item["id"])
        size += len(encoded) + (1 if parts else 0)
        parts.append(encoded)
        out.served.append(chunk)
    out.body = head + b"[" + b",".join(parts) + b"]}"
    out.count = len(parts)
    return out


# The answers' shapes for /openapi.json, from the same limits the rendering enforces.
_SOURCE_SCHEMA = {"type": "object", "required": ["type", "id"], "properties": {
    "type": {"type": "string", "enum": list(SOURCE_TYPES)}, "id": {"type": "string", "maxLength": MAX_SOURCE_ID},
    "version": {"type": "string"}, "page": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
    "locator": {"type": "string", "maxLength": MAX_LOCATOR}, "uri": {"type": "string", "maxLength": MAX_URI}}}
_ITEM_SCHEMA = {"type": "object", "required": ["id", "documentId", "content", "source"], "properties": {
    "id": {"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,128}$"}, "documentId": {"type": "string"},
    "content": {"type": "string", "minLength": 1, "maxLength": MAX_CONTENT},
    "title": {"type": "string", "maxLength": MAX_TITLE}, "source": _SOURCE_SCHEMA,
    "score": {"type": "number", "minimum": 0, "maximum": 1}, "metadata": {"type": "object"},
    "tenantId": {"type": "string", "maxLength": MAX_TENANT}}}
ANSWER_SCHEMA = {"type": "object", "required": ["protocolVersion", "appliedFilters", "items"], "properties": {
    "protocolVersion": {"type": "string", "enum": ["1.0"]},
    "appliedFilters": {"type": "array", "items": {"type": "string", "enum": ["TENANT", "SUBJECT"]}},
    "items": {"type": "array", "maxItems": MAX_ITEMS, "items": _ITEM_SCHEMA}}}
LEGACY_SCHEMA = {"type": "object", "required": ["documents"], "properties": {"documents": {
    "type": "array", "maxItems": MAX_ITEMS, "items": {"type": "object", "required": ["id", "text", "source"],
                                                      "properties": {
        "id": {"type": "string"}, "text": {"type": "string"}, "title": {"type": "string"},
        "source": {"type": "string"}, "tenantId": {"type": "string"}}}}}}
