"""The protocol-neutral flow: build → search → re-check → normalise → threshold → cut."""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable, Mapping

from es_provider import acl
from es_provider.deadline import Budget
from es_provider.domain import Chunk, Result, Retrieval
from es_provider.engine import Engine
from es_provider.errors import forbidden
from es_provider.hits import MalformedHit, to_chunk
from es_provider.query import build_search

log = logging.getLogger("es_provider.retrieval")
security_log = logging.getLogger("es_provider.security")

_VERSION_SUFFIX = re.compile(r"-v\d+$")


@functools.lru_cache(maxsize=1024)
def alias_of_index(index: str) -> str:
    """Concrete indices are named `<alias>-v<N>` (admin.py), so a hit's `_index` names its knowledge base."""
    return _VERSION_SUFFIX.sub("", index)


async def retrieve(
    engine: Engine,
    retrieval: Retrieval,
    budget: Budget,
    *,
    pivot: float,
    mapped: set[str] | None = None,
    metadata_types: Mapping[str, str] | None = None,
) -> Result:
    if mapped is not None and (cannot := acl.unenforceable(retrieval.filters, mapped)):
        # E.g. an index without ACL fields: refuse rather than answer unfiltered content.
        raise forbidden(detail=f"index cannot enforce {[f.value for f in cannot]}")
    timeout_ms = int(budget.remaining(time.monotonic()) * 1000)
    plan = build_search(retrieval, timeout_ms=timeout_ms, metadata_types=metadata_types)
    missing = set(retrieval.filters) - set(plan.applied_filters)
    if missing:
        # Never answer with content when a required filter is not in the query that will run.
        raise forbidden(detail=f"query builder could not enforce {sorted(missing)}")

    by_alias = {kb.alias: kb for kb in retrieval.knowledge}
    index = ",".join(by_alias)
    response = await engine.search(index, plan.body, budget)

    chunks: list[Chunk] = []
    dropped = 0
    for hit in response.get("hits", {}).get("hits", []):
        source = hit.get("_source") or {}
        if not acl.visible(source, retrieval.identity, plan.applied_filters):
            dropped += 1
            security_log.warning(
                "dropped hit that failed the permission re-check",
                extra={"chunk_id": hit.get("_id"), "index": hit.get("_index"), "app_id": retrieval.identity.app_id},
            )
            continue
        kb = by_alias.get(alias_of_index(str(hit.get("_index", ""))))
        if kb is None and len(by_alias) == 1:
            kb = retrieval.knowledge[0]
        if kb is None:
            log.error("hit from an index outside the request", extra={"index": hit.get("_index")})
            continue
        try:
            chunk = to_chunk(hit, knowledge_id=kb.id, pivot=pivot)
        except MalformedHit as exc:
            log.error("skipped malformed chunk: %s", exc, extra={"chunk_id": hit.get("_id")})
            continue
        if retrieval.score_threshold > 0 and (chunk.score is None or chunk.score < retrieval.score_threshold):
            continue
        chunks.append(chunk)
    return Result(chunks=tuple(chunks[: retrieval.top_k]), applied_filters=plan.applied_filters, dropped=dropped)


class Retriever:
    """What protocols hold: the retrieval flow bound to one engine and the configured score normalisation.

    It remembers, per index expression, which ACL fields are mapped (for `mapping_ttl_s`), so checking that a
    filter is enforceable costs one engine call per knowledge base per minute, not one per request."""

    def __init__(
        self,
        engine: Engine,
        *,
        pivot: float,
        mapping_ttl_s: float = 60.0,
        on_dropped: Callable[[int], None] | None = None,
    ) -> None:
        self._engine = engine
        self._on_dropped = on_dropped
        self._pivot = pivot
        self._ttl = mapping_ttl_s
        self._mapped: dict[str, tuple[float, set[str]]] = {}
        self._metadata: dict[str, tuple[float, dict[str, str]]] = {}

    async def _mapped_fields(self, index: str, budget: Budget) -> set[str]:
        now = time.monotonic()
        cached = self._mapped.get(index)
        if cached is not None and cached[0] > now:
            return cached[1]
        fields = await self._engine.mapped_fields(index, acl.ACL_FIELDS, budget)
        self._mapped[index] = (now + self._ttl, fields)
        return fields

    async def _metadata_types(self, index: str, budget: Budget) -> dict[str, str]:
        # Short-lived: a metadata key first written by an ingest becomes filterable within seconds.
        now = time.monotonic()
        cached = self._metadata.get(index)
        if cached is not None and cached[0] > now:
            return cached[1]
        types = await self._engine.metadata_types(index, budget)
        self._metadata[index] = (now + min(self._ttl, 5.0), types)
        return types

    async def retrieve(self, retrieval: Retrieval, budget: Budget) -> Result:
        index = ",".join(kb.alias for kb in retrieval.knowledge)
        mapped = await self._mapped_fields(index, budget) if retrieval.filters else None
        types = await self._metadata_types(index, budget) if retrieval.metadata is not None else None
        result = await retrieve(
            self._engine, retrieval, budget, pivot=self._pivot, mapped=mapped, metadata_types=types
        )
        if result.dropped and self._on_dropped is not None:
            self._on_dropped(result.dropped)
        return result

    async def available(self, aliases: list[str], budget: Budget) -> set[str]:
        """Which of `aliases` exist now (point at an index) and so can be searched."""
        return await self._engine.existing_aliases(aliases, budget)
