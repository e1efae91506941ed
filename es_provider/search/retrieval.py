"""The protocol-neutral flow: mode → (embed query) → build → search → fuse/normalise → re-check → passages →
(rerank) → threshold → cut."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from es_provider.config.knowledge import KnowledgeBase, RetrievalMode, ScoringSettings
from es_provider.core import acl, tracing
from es_provider.core.calibration import calibrate, calibrate_leg, fuse
from es_provider.core.deadline import Budget
from es_provider.core.errors import ErrorCode, KnowledgeError, forbidden, protocol_error
from es_provider.core.naming import alias_of_index
from es_provider.core.schema import Schema
from es_provider.engine.client import Engine
from es_provider.search import layout
from es_provider.search.document import Document, read_document
from es_provider.search.domain import Chunk, SearchRequest, SearchResult
from es_provider.search.embedders import Embedder
from es_provider.search.hits import MalformedHit, to_chunk
from es_provider.search.passage_cutting import with_passages
from es_provider.search.query import (
    SearchPlan,
    bounded_text,
    build_hybrid,
    build_knn,
    build_search,
    query_terms,
)
from es_provider.search.rerank import Reranker, Reranking
from es_provider.search.ttl_cache import TtlCache

log = logging.getLogger("es_provider.retrieval")
security_log = logging.getLogger("es_provider.security")


def resolve_mode(retrieval: SearchRequest) -> tuple[RetrievalMode, str | None]:
    """The retrieval mode and embedder for a request: the one asked for, or the one its knowledge bases share.

    Never a silent fallback: a mode the knowledge bases cannot serve is refused. Nor are an existing index and
    another knowledge base searched together: one query reads one schema's fields."""
    if len(retrieval.knowledge) > 1 and any(kb.existing for kb in retrieval.knowledge):
        raise protocol_error("an existing index's knowledge base is searched on its own; search them separately")
    modes = {kb.retrieval for kb in retrieval.knowledge}
    if retrieval.mode is not None:
        mode = retrieval.mode
    elif len(modes) == 1:
        mode = next(iter(modes))
    else:
        raise protocol_error("the knowledge bases use different retrieval modes; search them separately")
    if mode == "bm25":
        return mode, None
    embedders = {kb.embedder for kb in retrieval.knowledge}
    if None in embedders:
        raise protocol_error(f"retrieval mode {mode} needs knowledge bases with embeddings")
    if len(embedders) != 1:
        raise protocol_error("the knowledge bases use different embedders; search them separately")
    return mode, next(iter(embedders))


def scoring_of(knowledge: Sequence[KnowledgeBase], default: ScoringSettings) -> ScoringSettings:
    """The score mappings of a search: its knowledge bases' own `[knowledge.scoring]` when they all have the same,
    else `[scoring]` (scores of differently calibrated bases are not comparable under either)."""
    own = {kb.scoring for kb in knowledge}
    return next(iter(own)) or default if len(own) == 1 else default


def scored_hits(
    mode: RetrievalMode, responses: list[dict[str, Any]], scoring: ScoringSettings, *, terms: int = 1
) -> Sequence[tuple[Mapping[str, Any], float | None]]:
    """Pure: the engine's responses → hits in answer order with their calibrated scores (calibration.py). `terms`:
    the query's BM25 term count (query.query_terms), by which BM25 scores are divided."""
    legs = [response.get("hits", {}).get("hits", []) for response in responses]
    if mode == "hybrid":
        bm25 = calibrate_leg(legs[0], scoring.hybrid_bm25.logistic(), per=terms)
        vector = calibrate_leg(legs[1], scoring.vector.logistic())
        return calibrate(fuse(bm25, vector, weight=scoring.hybrid_weight), scoring.hybrid.logistic())
    if mode == "vector":
        return calibrate_leg(legs[0], scoring.vector.logistic())
    return calibrate_leg(legs[0], scoring.bm25.logistic(), per=terms)


def _plan(retrieval: SearchRequest, mode: RetrievalMode, vector: Sequence[float] | None, *, depth: int,
          timeout_ms: int, metadata_types: Mapping[str, str] | None) -> SearchPlan:
    if mode == "bm25":
        return build_search(retrieval, timeout_ms=timeout_ms, metadata_types=metadata_types)
    if vector is None:
        raise KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"{mode} retrieval without a query vector")
    if mode == "vector":
        return build_knn(retrieval, vector, timeout_ms=timeout_ms, metadata_types=metadata_types)
    return build_hybrid(retrieval, vector, depth=depth, timeout_ms=timeout_ms, metadata_types=metadata_types)


async def run_search(
    engine: Engine,
    retrieval: SearchRequest,
    budget: Budget,
    *,
    scoring: ScoringSettings,
    mode: RetrievalMode = "bm25",
    vector: Sequence[float] | None = None,
    mapped: set[str] | None = None,
    metadata_types: Mapping[str, str] | None = None,
    rerank: Reranking | None = None,
    checked: Callable[[set[str]], Awaitable[frozenset[str]]] | None = None,
) -> SearchResult:
    """With `rerank`, every chunk that passed the re-check goes to the rerank stage, and the score threshold and the
    cut to topK apply to its order and scores (or to the first-stage ones it fell back to). `checked`: given the
    indices the hits came from, the ones whose mapping was checked (Retriever); a hit of any other is withheld."""
    schema = retrieval.index_schema
    if mapped is not None and (cannot := acl.unenforceable(retrieval.filters, mapped, schema)):
        # E.g. an index without ACL fields: refuse rather than answer unfiltered content.
        raise forbidden(detail=f"index cannot enforce {[f.value for f in cannot]}")
    plan = _plan(retrieval, mode, vector, depth=scoring.fusion_depth,
                 timeout_ms=int(budget.remaining(time.monotonic()) * 1000), metadata_types=metadata_types)
    missing = set(retrieval.filters) - set(plan.applied_filters)
    if missing:
        # Never answer with content when a required filter is not in the query that will run.
        raise forbidden(detail=f"query builder could not enforce {sorted(missing)}")

    by_alias = {kb.alias: kb for kb in retrieval.knowledge}
    index = retrieval.index
    if len(plan.bodies) == 1:
        responses = [await engine.search(index, plan.body, budget)]
    else:
        responses = await engine.msearch(index, list(plan.bodies), budget)
    served = await checked(indices_of(responses)) if checked is not None else None

    with tracing.step("recheck") as span:
        chunks, dropped, unchecked = _rechecked(retrieval, responses, plan, schema=schema, mode=mode, scoring=scoring,
                                                by_alias=by_alias, scored=rerank is None, served=served)
        if span.is_recording():  # no attribute dict per request with traces off
            span.set_attributes({"es_provider.recheck.kept": len(chunks), "es_provider.recheck.dropped": dropped,
                                 "es_provider.recheck.dropped_reason": "permission re-check" if dropped else ""})
    # A whole document is answered (and reranked) as the part of it that answers (passage.py).
    chunks = await with_passages(chunks, retrieval.query, {kb.id: kb.passage_chars for kb in retrieval.knowledge},
                                 budget)
    outcome = None
    if rerank is not None:
        with tracing.step("rerank", {"es_provider.rerank.candidates": len(chunks)}) as span:
            chunks, outcome = await rerank.apply(retrieval.query, chunks, budget.remaining(time.monotonic()))
            span.set_attribute("es_provider.rerank.outcome", str(outcome))
        chunks = [chunk for chunk in chunks if not below(chunk, retrieval.score_threshold)]
    # Not cut here: the result's `chunks` is the topK cut, and SparkTide also reads past it (domain.SearchResult).
    return SearchResult(ranked=tuple(chunks), top_k=retrieval.top_k, applied_filters=plan.applied_filters,
                        dropped=dropped, rerank=outcome, unchecked=unchecked)


def indices_of(responses: list[dict[str, Any]]) -> set[str]:
    """Pure: the concrete indices the hits of these responses came from."""
    return {str(hit.get("_index", "")) for response in responses for hit in response.get("hits", {}).get("hits", [])}


def _rechecked(retrieval: SearchRequest, responses: list[dict[str, Any]], plan: SearchPlan, *, schema: Schema,
               mode: RetrievalMode, scoring: ScoringSettings, by_alias: dict[str, KnowledgeBase],
               scored: bool, served: frozenset[str] | None = None) -> tuple[list[Chunk], int, int]:
    """The hits that pass the permission re-check, as chunks (a refused hit counted and logged), how many were
    dropped, and how many were withheld because their index is not in `served` (None: no such check).
    `scored`: the score threshold applies here (with a rerank stage it applies after it)."""
    chunks: list[Chunk] = []
    dropped = unchecked = 0
    seen: set[tuple[str, str]] = set()  # (knowledge base, document) already answered, for one_chunk_per_document
    terms = 1 if mode == "vector" else query_terms(retrieval.query)  # only a BM25 leg is divided by it
    allowed = acl.rechecker(retrieval.identity, plan.applied_filters, schema)
    for hit, score in scored_hits(mode, responses, scoring, terms=terms):
        if served is not None and str(hit.get("_index", "")) not in served:
            # An index whose mapping was never checked (it joined the alias since, or is not behind it): its
            # documents may lack the ACL fields the re-check reads as "public" (Hardening IV).
            unchecked += 1
            security_log.warning("withheld a hit from an index not checked behind its alias",
                                 extra={"chunk_id": hit.get("_id"), "index": hit.get("_index"),
                                        "app_id": retrieval.identity.app_id})
            continue
        source = hit.get("_source") or {}
        if not allowed(source):
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
            chunk = to_chunk(hit, knowledge_id=kb.id, score=score, schema=schema, whole_over=kb.passage_chars)
        except MalformedHit as exc:
            log.error("skipped malformed chunk: %s", exc, extra={"chunk_id": hit.get("_id")})
            continue
        if scored and below(chunk, retrieval.score_threshold):
            continue
        if kb.one_chunk_per_document:
            # A lower chunk of a document already in the answer (the engine collapses one base; this covers
            # several bases and the kNN leg of a hybrid fusion). A design choice, not a lost hit.
            if (kb.id, chunk.document_id) in seen:
                continue
            seen.add((kb.id, chunk.document_id))
        chunks.append(chunk)
    return chunks, dropped, unchecked


def below(chunk: Chunk, threshold: float) -> bool:
    return threshold > 0 and (chunk.score is None or chunk.score < threshold)


class Retriever:
    """What protocols hold: the retrieval flow bound to one engine and the configured score normalisation.

    It remembers, per index expression, which ACL fields are mapped (for `mapping_ttl_s`), so checking that a
    filter is enforceable costs one engine call per knowledge base per minute, not one per request."""

    def __init__(
        self,
        engine: Engine,
        *,
        scoring: ScoringSettings,
        embedders: Mapping[str, Embedder] | None = None,
        mapping_ttl_s: float = 60.0,
        on_dropped: Callable[[int], None] | None = None,
        on_embedded: Callable[[float, bool], None] | None = None,
        on_unchecked: Callable[[int], None] | None = None,
        reranker: Reranker | None = None,
        reranks: Callable[[set[str], RetrievalMode], bool] = lambda _kbs, _mode: False,
    ) -> None:
        self._engine = engine
        self._rerank = Reranking(reranker, scoring.rerank.logistic()) if reranker is not None else None
        self._reranks = reranks
        self._on_dropped = on_dropped
        self._on_embedded = on_embedded
        self._scoring = scoring
        self._embedders = dict(embedders or {})
        self._mapped: TtlCache[str, set[str]] = TtlCache(mapping_ttl_s)
        self._layouts: TtlCache[str, list[str]] = TtlCache(mapping_ttl_s)  # an existing index's problems, by alias
        # Only hits of indices whose mapping was checked behind their alias are served (Hardening IV): each index
        # checked with the time its check stands until, so an index a reindex just swapped out still answers the
        # search that ran before the swap (the next check is due when `_layouts`, put by the same check, expires).
        self._trusted: dict[str, dict[str, float]] = {}
        self._ttl_s = mapping_ttl_s
        self._checking: dict[str, tuple[float, asyncio.Future[tuple[frozenset[str], list[str]]]]] = {}
        self.unchecked: dict[str, set[str]] = {}  # alias → indices whose hits were withheld, until a check passes
        self._on_unchecked = on_unchecked
        # Short-lived: a metadata key first written by an ingest becomes filterable within seconds.
        self._metadata: TtlCache[str, dict[str, str]] = TtlCache(min(mapping_ttl_s, 5.0))

    async def _mapped_fields(self, index: str, schema: Schema, budget: Budget) -> set[str]:
        fields = self._mapped.get(index)
        if fields is None:
            wanted = (*acl.filter_fields(schema), *((schema.vector,) if schema.vector else ()))
            fields = await self._engine.mapped_fields(index, wanted, budget)
            self._mapped.put(index, fields)
        return fields

    async def layout_problems(self, kb: KnowledgeBase, budget: Budget) -> list[str]:
        """What keeps an existing index from being served under its schema (layout.py), read from the live mapping
        of every index behind its alias at most once per `mapping_ttl_s`; none for the service's own indices."""
        if not kb.existing:
            return []
        found = self._layouts.get(kb.alias)
        if found is None:
            found = (await self.check(kb, budget))[1]
        return found

    async def check(self, kb: KnowledgeBase, budget: Budget) -> tuple[frozenset[str], list[str]]:
        """Reads the live mapping of every index behind `kb`'s alias: the indices whose hits may be served (none
        while an existing index has a problem) and the problems (layout.py; none for the service's own indices,
        whose every index `kb create`/`reindex` made)."""
        embedder = self._embedders.get(kb.embedder) if kb.embedder else None
        specs = await self._engine.field_specs(kb.alias, layout.checked_fields(kb.index_schema), budget)
        found = layout.problems(kb.index_schema, specs, embedder.dimensions if embedder is not None else None) \
            if kb.existing else []
        if found:
            log.error("knowledge base %s cannot be served: %s", kb.id, "; ".join(found))
        served = frozenset() if found else frozenset(specs)
        now = time.monotonic()
        trusted = {} if found else {i: t for i, t in self._trusted.get(kb.alias, {}).items() if t > now}
        trusted.update(dict.fromkeys(served, now + self._ttl_s))
        self._trusted[kb.alias] = trusted
        self._layouts.put(kb.alias, found)
        if self.unchecked.pop(kb.alias, None):
            log.info("knowledge base %s: the indices behind its alias are checked again: %s", kb.id,
                     ", ".join(sorted(served)) or "none served")
        return served, found

    async def _check_since(self, kb: KnowledgeBase, since: float, budget: Budget) -> None:
        """`check`, shared with the requests that ask while it runs, if it began at `since` or later (one that
        began before the engine answered may not have seen an index that joined the alias meanwhile)."""
        running = self._checking.get(kb.alias)
        if running is None or running[0] < since:
            check = asyncio.ensure_future(self.check(kb, budget))
            entry = (time.monotonic(), check)
            self._checking[kb.alias] = entry
            check.add_done_callback(lambda _: self._checking.pop(kb.alias, None)
                                    if self._checking.get(kb.alias) is entry else None)
            running = entry
        await asyncio.shield(running[1])

    def _trusted_now(self, alias: str) -> set[str]:
        now = time.monotonic()
        return {index for index, until in self._trusted.get(alias, {}).items() if until > now}

    async def _served_indices(self, knowledge: Sequence[KnowledgeBase], seen: set[str],
                              budget: Budget) -> frozenset[str]:
        """Of the indices `seen` in an answer the engine just gave, the checked ones. An index not checked yet (it
        joined an alias since the last check) is checked at once; what still is not (a hit from outside the alias)
        is withheld, and /readyz says so until a check passes."""
        answered = time.monotonic()
        served: set[str] = set()
        for kb in knowledge:
            if self._layouts.get(kb.alias) is None:  # the last check expired: due
                await self._check_since(kb, 0.0, budget)
            served |= self._trusted_now(kb.alias)
        if seen <= served:
            return frozenset(served)
        for kb in knowledge:
            await self._check_since(kb, answered, budget)
            if found := self._layouts.get(kb.alias):
                raise KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"knowledge base {kb.id} cannot be served: "
                                                                   f"{found[0]}")
            served |= self._trusted_now(kb.alias)
        if stray := seen - served:
            for kb in knowledge:
                self.unchecked.setdefault(kb.alias, set()).update(stray)
        return frozenset(served)

    async def metadata_types(self, index: str, budget: Budget) -> dict[str, str]:
        """The types of `index`'s metadata fields, cached for a few seconds: what a metadata condition is translated
        with, by the search and by the workbench's "why not?"."""
        types = self._metadata.get(index)
        if types is None:
            types = await self._engine.metadata_types(index, budget)
            self._metadata.put(index, types)
        return types

    async def _query_vector(self, embedder_name: str, query: str, budget: Budget) -> Sequence[float]:
        embedder = self._embedders.get(embedder_name)
        if embedder is None:
            raise KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"embedder {embedder_name} is not loaded")
        started = time.monotonic()
        ok = False
        try:
            async with asyncio.timeout(max(0.0, budget.remaining(started))):
                with tracing.step("embed query", {"gen_ai.operation.name": "embeddings",
                                                  "es_provider.embedder": embedder_name}):
                    vector = await embedder.query(bounded_text(query))
            ok = True
            return vector
        except TimeoutError:
            raise KnowledgeError(ErrorCode.TIMED_OUT, detail="query embedding outlived the deadline") from None
        finally:
            if self._on_embedded is not None:
                self._on_embedded(time.monotonic() - started, ok)

    async def search(self, retrieval: SearchRequest, budget: Budget) -> SearchResult:
        mode, embedder_name = resolve_mode(retrieval)
        if retrieval.metadata is not None and not retrieval.index_schema.own:
            # Their names map to an existing index's own fields in a later part of issue 40; until then a
            # condition is refused, never answered with what it would match nothing of (metadata.py's fields).
            raise protocol_error("metadata conditions are not supported on an existing index's knowledge base yet")
        for kb in retrieval.knowledge:
            if found := await self.layout_problems(kb, budget):
                raise KnowledgeError(ErrorCode.UNAVAILABLE,
                                     detail=f"knowledge base {kb.id} cannot be served: {found[0]}")
        index = retrieval.index
        schema = retrieval.index_schema
        mapped = await self._mapped_fields(index, schema, budget) if retrieval.filters or embedder_name else None
        if embedder_name is not None and mapped is not None and schema.vector not in mapped:
            # Configured for vectors but indexed without them: refuse rather than quietly answer with BM25.
            fix = "; run `es-provider kb reindex`" if schema.own else ""
            raise KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"{index} has no {schema.vector} field{fix}")
        types = await self.metadata_types(index, budget) if retrieval.metadata is not None else None
        vector = await self._query_vector(embedder_name, retrieval.query, budget) if embedder_name else None
        rerank = None
        if self._rerank is not None and self._reranks({kb.id for kb in retrieval.knowledge}, mode):
            rerank = self._rerank
            retrieval = dataclasses.replace(retrieval, candidates=self._rerank.reranker.settings.candidates)
        knowledge = retrieval.knowledge

        async def checked(seen: set[str]) -> frozenset[str]:
            return await self._served_indices(knowledge, seen, budget)

        result = await run_search(
            self._engine, retrieval, budget, scoring=scoring_of(retrieval.knowledge, self._scoring), mode=mode,
            vector=vector, mapped=mapped, metadata_types=types, rerank=rerank, checked=checked,
        )
        if result.dropped and self._on_dropped is not None:
            self._on_dropped(result.dropped)
        if result.unchecked and self._on_unchecked is not None:
            self._on_unchecked(result.unchecked)
        return result

    async def document(self, retrieval: SearchRequest, document_id: str, budget: Budget) -> Document:
        """One document of the request's one knowledge base, as its identity may read it (search/document.py)."""
        kb = retrieval.knowledge[0]
        if found := await self.layout_problems(kb, budget):
            raise KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"knowledge base {kb.id} cannot be served: {found[0]}")
        mapped = await self._mapped_fields(retrieval.index, retrieval.index_schema, budget)

        async def checked(seen: set[str]) -> frozenset[str]:
            return await self._served_indices(retrieval.knowledge, seen, budget)

        found_document = await read_document(self._engine, retrieval, document_id, budget, mapped=mapped,
                                             checked=checked)
        if found_document.dropped and self._on_dropped is not None:
            self._on_dropped(found_document.dropped)
        return found_document

    async def available(self, aliases: list[str], budget: Budget) -> set[str]:
        """Which of `aliases` exist now (point at an index) and so can be searched."""
        return await self._engine.existing_aliases(aliases, budget)
