"""Pure translation: a Retrieval → ONE OpenSearch search body whose permission clauses are filters.

The query text is matched as text (multi_match), never parsed as query syntax, so no Lucene operator,
wildcard or script in it reaches OpenSearch. It is bounded in length so that its analysed terms stay well
inside OpenSearch's boolean clause limit (1024) even for the longest valid query.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from es_provider import acl, metadata
from es_provider.acl import Filter
from es_provider.domain import Retrieval

# English-analysed fields always; the CJK-bigram fields only for a query that has CJK characters (on Latin text
# they add noise: SciFact nDCG@10 0.691 without them, 0.674 with). Each field adds one clause per analysed term:
# at most 4 fields × 200 units < 1024 clauses.
LATIN_FIELDS = ("title.en", "content.en")
CJK_FIELDS = ("title.en", "content.en", "title.cjk", "content.cjk")
MAX_QUERY_UNITS = 200
# Ask for more than top_k so that hits the re-check drops do not shorten the answer. (Drops only happen when
# the index and the rules disagree, so a modest surplus suffices; every extra hit costs fetch and parse time.)
MIN_EXTRA_CANDIDATES = 5
MAX_CANDIDATES = 1024

VECTOR_FIELD = "embedding"  # mappings/vector.json
SOURCE_FIELDS = [
    "chunk_id", "document_id", "title", "content", "tenant_id", "acl", "source", "metadata",
]

# A "unit" is a run of letters/digits (one word) or a single CJK/other non-space character.
_UNIT = re.compile(r"[^\W_]+|\S", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


def _units(word: str) -> int:
    cjk = len(_CJK.findall(word))
    return cjk + (1 if len(word) > cjk else 0)


def text_fields(text: str) -> tuple[str, ...]:
    return CJK_FIELDS if _CJK.search(text) else LATIN_FIELDS


def bounded_text(text: str, max_units: int = MAX_QUERY_UNITS) -> str:
    """The longest prefix of `text` holding at most `max_units` words or CJK characters."""
    used = 0
    end = 0
    for match in _UNIT.finditer(text):
        cost = _units(match.group())
        if used + cost > max_units:
            if cost > 1 and used < max_units:
                # A long CJK run: keep as many characters of it as still fit.
                end = match.start() + (max_units - used)
            break
        used += cost
        end = match.end()
    return text[:end]


@dataclass(frozen=True, slots=True)
class SearchPlan:
    """The search bodies to run (one; or two, BM25 then kNN, for hybrid) and the permission filters they carry."""

    bodies: tuple[dict[str, Any], ...]
    applied_filters: tuple[Filter, ...]

    @property
    def body(self) -> dict[str, Any]:
        return self.bodies[0]


def candidate_count(top_k: int) -> int:
    return min(MAX_CANDIDATES, top_k + max(MIN_EXTRA_CANDIDATES, top_k // 2))


def _filters(
    retrieval: Retrieval, metadata_types: Mapping[str, str] | None
) -> tuple[list[dict[str, Any]], tuple[Filter, ...]]:
    tagged = acl.permission_clauses(retrieval.identity, retrieval.filters)
    filters: list[dict[str, Any]] = [clause for _, clause in tagged]
    if retrieval.metadata is not None:
        filters.append(metadata.translate(retrieval.metadata, metadata_types or {}))
    return filters, tuple(f for f, _ in tagged)


def _envelope(size: int, timeout_ms: int, query: dict[str, Any]) -> dict[str, Any]:
    return {
        "size": size,
        "timeout": f"{max(1, timeout_ms)}ms",
        "track_total_hits": False,
        "_source": SOURCE_FIELDS,
        "query": query,
    }


def _bm25_query(retrieval: Retrieval, filters: list[dict[str, Any]]) -> dict[str, Any]:
    query_text = bounded_text(retrieval.query)
    text = {
        "multi_match": {
            "query": query_text,
            "fields": list(text_fields(query_text)),
            "type": "best_fields",
            "tie_breaker": 0.5,
        }
    }
    return {"bool": {"must": [text], "filter": filters}}


def _knn_query(vector: Sequence[float], k: int, filters: list[dict[str, Any]]) -> dict[str, Any]:
    knn: dict[str, Any] = {"vector": list(vector), "k": k}
    if filters:
        # Inside the kNN query the filter restricts the graph search itself (Lucene efficient filtering), so a
        # user who may read 1 % of the chunks still gets k of them; the same filter outside is belt and braces.
        knn["filter"] = {"bool": {"filter": filters}}
    return {"bool": {"must": [{"knn": {VECTOR_FIELD: knn}}], "filter": filters}}


def build_search(
    retrieval: Retrieval, *, timeout_ms: int, metadata_types: Mapping[str, str] | None = None
) -> SearchPlan:
    """BM25: one bool query, the text in `must`, every permission and metadata clause in `filter`."""
    filters, applied = _filters(retrieval, metadata_types)
    body = _envelope(candidate_count(retrieval.top_k), timeout_ms, _bm25_query(retrieval, filters))
    return SearchPlan(bodies=(body,), applied_filters=applied)


def build_knn(
    retrieval: Retrieval,
    vector: Sequence[float],
    *,
    timeout_ms: int,
    metadata_types: Mapping[str, str] | None = None,
) -> SearchPlan:
    """Vector: the k nearest chunks among those the filters allow."""
    filters, applied = _filters(retrieval, metadata_types)
    k = candidate_count(retrieval.top_k)
    return SearchPlan(bodies=(_envelope(k, timeout_ms, _knn_query(vector, k, filters)),), applied_filters=applied)


def build_hybrid(
    retrieval: Retrieval,
    vector: Sequence[float],
    *,
    depth: int,
    timeout_ms: int,
    metadata_types: Mapping[str, str] | None = None,
) -> SearchPlan:
    """Hybrid: the BM25 and the kNN search, each with the same filters, run together in one _msearch."""
    filters, applied = _filters(retrieval, metadata_types)
    size = min(MAX_CANDIDATES, max(depth, candidate_count(retrieval.top_k)))
    bm25 = _envelope(size, timeout_ms, _bm25_query(retrieval, filters))
    knn = _envelope(size, timeout_ms, _knn_query(vector, size, filters))
    return SearchPlan(bodies=(bm25, knn), applied_filters=applied)
