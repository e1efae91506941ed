"""Protocol-neutral types: what a protocol asks the retrieval flow for, and what it gets back."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from es_provider.config.knowledge import KnowledgeBase, RetrievalMode
from es_provider.core.acl import Filters, Identity
from es_provider.core.metadata import Conditions
from es_provider.core.schema import Schema


@dataclass(frozen=True, slots=True)
class SearchRequest:
    knowledge: tuple[KnowledgeBase, ...]
    query: str
    identity: Identity
    filters: Filters  # the filters to enforce: the definition's mandatory ones and any the caller asks for
    top_k: int  # how many chunks to return at most, after the re-check
    score_threshold: float = 0.0
    metadata: Conditions | None = None  # Dify metadata conditions
    mode: RetrievalMode | None = None  # None: the knowledge bases' configured mode
    candidates: int = 0  # at least this many hits from the engine (a rerank stage's depth), else topK's share
    index: str = field(init=False)  # the index expression its searches name: its knowledge bases' aliases, in order

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", ",".join(kb.alias for kb in self.knowledge))  # made once, read twice

    @property
    def index_schema(self) -> Schema:
        """The fields its knowledge bases' indices are read by (one schema: retrieval.py refuses a mix)."""
        return self.knowledge[0].index_schema


@dataclass(frozen=True, slots=True)
class Chunk:
    """One retrieved chunk, as stored (`_source`) plus its normalised score."""

    knowledge_id: str
    chunk_id: str
    document_id: str
    content: str
    title: str | None
    tenant_id: str | None
    source: dict[str, Any]
    metadata: dict[str, Any]
    score: float | None
    repaired: bool = False  # markup residue was removed from its stored text (markup.py)


# What one answer served, for the access record: knowledge id, document id, chunk id, score.
Served = tuple[str, str, str, float | None]


def served(chunks: Iterable[Chunk]) -> tuple[Served, ...]:
    return tuple((c.knowledge_id, c.document_id, c.chunk_id, c.score) for c in chunks)


@dataclass(frozen=True, slots=True)
class SearchResult:
    # Every chunk the flow selected, best first, not cut: a protocol whose own item rules skip a chunk of the
    # answer takes the next one instead (SparkTide), so an answer still carries min(topK, visible matches) items.
    ranked: tuple[Chunk, ...]
    top_k: int
    applied_filters: Filters
    dropped: int = 0  # hits OpenSearch returned that the re-check refused (security events)
    rerank: str | None = None  # with a rerank stage: "applied", or "first-stage: <reason>" (rerank.py)
    unchecked: int = 0  # hits withheld because their index was not checked behind its alias (security events)

    @property
    def chunks(self) -> tuple[Chunk, ...]:
        """The answer: at most top_k, best first (the one cut; a tuple slice, no copy when nothing is cut)."""
        return self.ranked[: self.top_k]
