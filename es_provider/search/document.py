"""One document's text as one user may read it: its chunks that pass the permission filters (in the query, and
re-checked on every hit), in their order (MCP's `fetch`).

A document the user may not read and one that does not exist answer alike: no chunk. The same query runs for
both, so neither the answer nor its time tells them apart.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from es_provider.core import acl
from es_provider.core.deadline import Budget
from es_provider.core.errors import forbidden
from es_provider.core.schema import document_clause
from es_provider.engine.client import Engine
from es_provider.search.domain import Chunk, SearchRequest
from es_provider.search.hits import MalformedHit, to_chunk
from es_provider.search.query import source_fields

log = logging.getLogger("es_provider.retrieval")
security_log = logging.getLogger("es_provider.security")

MAX_CHUNKS = 500  # a document's chunks read at most; its text is bounded again by the caller


@dataclass(frozen=True, slots=True)
class Document:
    chunks: tuple[Chunk, ...]  # the readable ones, in the document's order; empty: none (or no such document)
    complete: bool  # False: the document has more chunks than MAX_CHUNKS
    dropped: int = 0  # hits the re-check refused (security events)


def document_body(retrieval: SearchRequest, document_id: str, timeout_ms: int) -> dict[str, Any]:
    """Pure: the search for one document's chunks: its id and every permission clause in filter context, no
    scoring, the service's own chunks by position (an existing index's in index order)."""
    schema = retrieval.index_schema
    clauses = [clause for _, clause in acl.permission_clauses(retrieval.identity, retrieval.filters, schema)]
    return {
        "size": MAX_CHUNKS + 1,
        "timeout": f"{max(1, timeout_ms)}ms",
        "track_total_hits": False,
        "_source": source_fields(schema),
        "query": {"bool": {"filter": [document_clause(schema, document_id), *clauses]}},
        "sort": [{"position": "asc"}] if schema.own else ["_doc"],
    }


async def read_document(engine: Engine, retrieval: SearchRequest, document_id: str, budget: Budget, *,
                        mapped: set[str] | None, checked: Callable[[set[str]], Awaitable[frozenset[str]]]) -> Document:
    """The chunks of `document_id` in the request's one knowledge base that its identity may read."""
    schema = retrieval.index_schema
    kb = retrieval.knowledge[0]
    if mapped is not None and (cannot := acl.unenforceable(retrieval.filters, mapped, schema)):
        raise forbidden(detail=f"index cannot enforce {[f.value for f in cannot]}")
    body = document_body(retrieval, document_id, int(budget.remaining(time.monotonic()) * 1000))
    hits = (await engine.search(retrieval.index, body, budget)).get("hits", {}).get("hits", [])
    served = await checked({str(hit.get("_index", "")) for hit in hits})
    allowed = acl.rechecker(retrieval.identity, retrieval.filters, schema)
    chunks: list[Chunk] = []
    dropped = 0
    for hit in hits[:MAX_CHUNKS]:
        source = hit.get("_source") or {}
        if str(hit.get("_index", "")) not in served or not allowed(source):
            dropped += 1
            security_log.warning("dropped a chunk of a fetched document that failed the permission re-check",
                                 extra={"chunk_id": hit.get("_id"), "index": hit.get("_index"),
                                        "app_id": retrieval.identity.app_id})
            continue
        try:
            chunks.append(to_chunk(hit, knowledge_id=kb.id, score=None, schema=schema))
        except MalformedHit as exc:
            log.error("skipped malformed chunk: %s", exc, extra={"chunk_id": hit.get("_id")})
    return Document(tuple(chunks), complete=len(hits) <= MAX_CHUNKS, dropped=dropped)
