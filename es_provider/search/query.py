"""Pure translation: a SearchRequest → ONE OpenSearch search body whose permission clauses are filters.

The query text is matched as text (multi_match), never parsed as query syntax, so no Lucene operator,
wildcard or script in it reaches OpenSearch. It is bounded in length so that its analysed terms stay well
inside OpenSearch's boolean clause limit (1024) even for the longest valid query.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from es_provider.core import acl, metadata
from es_provider.core.acl import Filters
from es_provider.core.schema import ID, Schema
from es_provider.search.domain import SearchRequest

# English-analysed fields always; the CJK-bigram fields only for a query that has CJK characters (on Latin text
# they add noise: SciFact nDCG@10 0.691 without them, 0.674 with). Each field adds one clause per analysed term:
# at most 4 fields × 200 units < 1024 clauses.
LATIN_FIELDS = ("title.en", "content.en")
CJK_FIELDS = ("title.en", "content.en", "title.cjk", "content.cjk")
MAX_QUERY_UNITS = 200
# Each chunk also indexes its document's text (`context`, ingest/writer.py); a chunk whose document matches the
# query ranks higher. Measured on SciFact train and DRCD dev (docs/benchmarks.md "relevance"): weight 0.5. Its
# clause sees the first CONTEXT_UNITS units only, so the whole query stays under 1024 clauses (4×200 + 2×64).
CONTEXT_WEIGHT = 0.5
CONTEXT_UNITS = 64
LATIN_CONTEXT_FIELDS = ("context",)
CJK_CONTEXT_FIELDS = ("context", "context.cjk")
# Ask for more than top_k so that hits the re-check drops do not shorten the answer. (Drops only happen when
# the index and the rules disagree, so a modest surplus suffices; every extra hit costs fetch and parse time.)
MIN_EXTRA_CANDIDATES = 5
MAX_CANDIDATES = 1024

VECTOR_FIELD = "embedding"  # mappings/vector.json
KNN_MIN_K = 100
SOURCE_FIELDS = [
    "chunk_id", "document_id", "title", "content", "tenant_id", "acl", "source", "metadata",
]

# Characters the analyzers turn into one term each (the standard tokenizer emits every ideograph and kana alone,
# the cjk analyzer one bigram per character, Hangul included): Hangul Jamo, CJK radicals to Yi, Hangul syllables,
# compatibility ideographs and forms, half/full-width forms, Tangut, Khitan, kana supplements, Nushu, enclosed
# ideographs, and the supplementary ideographic planes (Extension B onwards). Counting one unit per character of
# these, and one per run of other letters/digits, never counts fewer units than the terms OpenSearch produces.
_CJK_CLASS = (
    "\u1100-\u11ff\u2e80-\ua4cf\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef"
    "\U00016fe0-\U00018cff\U0001aff0-\U0001b2ff\U0001f200-\U0001f2ff\U00020000-\U0003ffff"
)
_CJK = re.compile(f"[{_CJK_CLASS}]")
# A unit: one CJK character, a run of other letters/digits (one word; the standard tokenizer cuts words at 255
# characters, so a longer run is several units), or any other single non-space character.
_UNIT = re.compile(f"[{_CJK_CLASS}]|[^\\W_{_CJK_CLASS}]{{1,255}}|\\S")


# Lucene's English stop words (EnglishAnalyzer): the english fields index none of them, so they add nothing to a
# BM25 score and are not counted as query terms.
_STOP_WORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not",
    "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was",
    "will", "with"
})


@lru_cache(maxsize=256)
def query_units(text: str) -> list[str]:
    """The (bounded) query's units that can match: lowercased words and CJK characters, less English stop words."""
    units = (m.group().lower() for m in _UNIT.finditer(bounded_text(text)))
    return [unit for unit in units if unit not in _STOP_WORDS and (unit.isalnum() or _CJK.match(unit))]


def query_terms(text: str) -> int:
    """How many terms of the (bounded) query can contribute to a BM25 score: its units less English stop words,
    at least 1. A raw BM25 score grows with this count; calibration.py divides by it."""
    return max(1, len(query_units(text)))


# The fields each language's analysis writes (admin.for_languages builds the mapping from the same lists).
LANGUAGE_FIELDS = {"en": ("title.en", "content.en", "context"), "zh": ("title.cjk", "content.cjk", "context.cjk")}


def text_fields(text: str, languages: frozenset[str] = frozenset({"en", "zh"})) -> tuple[str, ...]:
    """The text fields a query searches: the english ones, and the CJK ones when it has CJK characters — of those
    the knowledge bases index. A Chinese-only base is searched on its CJK fields whatever the query's script."""
    return _pick(CJK_FIELDS if _CJK.search(text) else LATIN_FIELDS, CJK_FIELDS, languages)


def _pick(wanted: tuple[str, ...], fallback: tuple[str, ...], languages: frozenset[str]) -> tuple[str, ...]:
    indexed = {field for language in languages for field in LANGUAGE_FIELDS[language]}
    return tuple(f for f in wanted if f in indexed) or tuple(f for f in fallback if f in indexed)


@lru_cache(maxsize=256)  # one request asks for the same prefix several times (query, terms, context)
def bounded_text(text: str, max_units: int = MAX_QUERY_UNITS) -> str:
    """The longest prefix of `text` holding at most `max_units` units (words, CJK characters, other symbols)."""
    end = 0
    for used, match in enumerate(_UNIT.finditer(text)):
        if used == max_units:
            break
        end = match.end()
    return text[:end]


@dataclass(frozen=True, slots=True)
class SearchPlan:
    """The search bodies to run (one; or two, BM25 then kNN, for hybrid) and the permission filters they carry."""

    bodies: tuple[dict[str, Any], ...]
    applied_filters: Filters

    @property
    def body(self) -> dict[str, Any]:
        return self.bodies[0]


def collapsed(body: dict[str, Any], retrieval: SearchRequest) -> dict[str, Any]:
    """One chunk per document (its best), when the request searches one knowledge base that asks for it: ten
    chunks of one article would otherwise fill a top 10 (docs/benchmarks.md "relevance"). Across several bases
    the engine would merge equal document ids of different bases, so the service dedupes those (retrieval.py)."""
    document = retrieval.index_schema.document_id
    if len(retrieval.knowledge) == 1 and retrieval.knowledge[0].one_chunk_per_document and document != ID:
        body["collapse"] = {"field": document}  # keyword: checked against the mapping (search/layout.py)
    return body


def candidate_count(top_k: int) -> int:
    return min(MAX_CANDIDATES, top_k + max(MIN_EXTRA_CANDIDATES, top_k // 2))


def _size(retrieval: SearchRequest) -> int:
    return min(MAX_CANDIDATES, max(candidate_count(retrieval.top_k), retrieval.candidates))


def _filters(
    retrieval: SearchRequest, metadata_types: Mapping[str, str] | None
) -> tuple[list[dict[str, Any]], Filters]:
    tagged = acl.permission_clauses(retrieval.identity, retrieval.filters, retrieval.index_schema)
    filters: list[dict[str, Any]] = [clause for _, clause in tagged]
    if retrieval.metadata is not None:
        filters.append(metadata.translate(retrieval.metadata, metadata_types or {}))
    return filters, retrieval.filters  # each filter has its clause


def source_fields(schema: Schema) -> list[str]:
    """What a search reads of each hit's `_source`: the own layout's fields, or those an existing index's schema
    names (never the whole document, whose other fields nobody asked to serve)."""
    return SOURCE_FIELDS if schema.own else list(schema.fields)


def _envelope(size: int, timeout_ms: int, query: dict[str, Any], schema: Schema) -> dict[str, Any]:
    return {
        "size": size,
        "timeout": f"{max(1, timeout_ms)}ms",
        "track_total_hits": False,
        "_source": source_fields(schema),
        "query": query,
    }


def text_clause(retrieval: SearchRequest) -> dict[str, Any]:
    """The scored part of the BM25 query (what `must` holds): the text, with the context beside it; on an existing
    index, its schema's text fields and title, as they are analysed there."""
    query_text = bounded_text(retrieval.query)
    schema = retrieval.index_schema
    if not schema.own:
        fields = [*schema.text, *((schema.title,) if schema.title and schema.title not in schema.text else ())]
        return {"multi_match": {"query": query_text, "fields": fields, "type": "best_fields", "tie_breaker": 0.5}}
    languages = frozenset(language for kb in retrieval.knowledge for language in kb.languages)
    text = {
        "multi_match": {
            "query": query_text,
            "fields": list(text_fields(query_text, languages)),
            "type": "best_fields",
            "tie_breaker": 0.5,
        }
    }
    context_text = bounded_text(query_text, CONTEXT_UNITS)
    context = {
        "multi_match": {
            "query": context_text,
            "fields": list(_pick(CJK_CONTEXT_FIELDS if _CJK.search(context_text) else LATIN_CONTEXT_FIELDS,
                                 CJK_CONTEXT_FIELDS, languages)),
            "type": "best_fields",
            "tie_breaker": 0.5,
            "boost": CONTEXT_WEIGHT,
        }
    }
    # `should` beside `must` only adds to the score: the context never makes a chunk match on its own. It sits in
    # an inner bool so that the outer one holds nothing but the text and the filters.
    return {"bool": {"must": [text], "should": [context]}}


def _bm25_query(retrieval: SearchRequest, filters: list[dict[str, Any]]) -> dict[str, Any]:
    return {"bool": {"must": [text_clause(retrieval)], "filter": filters}}


def _knn_query(vector: Sequence[float], k: int, filters: list[dict[str, Any]], field: str) -> dict[str, Any]:
    knn: dict[str, Any] = {"vector": list(vector), "k": k}
    if filters:
        # Inside the kNN query the filter restricts the graph search itself (Lucene efficient filtering), so a
        # user who may read 1 % of the chunks still gets k of them; the same filter outside is belt and braces.
        knn["filter"] = {"bool": {"filter": filters}}
    return {"bool": {"must": [{"knn": {field: knn}}], "filter": filters}}


def build_search(
    retrieval: SearchRequest, *, timeout_ms: int, metadata_types: Mapping[str, str] | None = None
) -> SearchPlan:
    """BM25: one bool query, the text in `must`, every permission and metadata clause in `filter`."""
    filters, applied = _filters(retrieval, metadata_types)
    body = _envelope(_size(retrieval), timeout_ms, _bm25_query(retrieval, filters), retrieval.index_schema)
    return SearchPlan(bodies=(collapsed(body, retrieval),), applied_filters=applied)


def build_knn(
    retrieval: SearchRequest,
    vector: Sequence[float],
    *,
    timeout_ms: int,
    metadata_types: Mapping[str, str] | None = None,
) -> SearchPlan:
    """Vector: the k nearest chunks among those the filters allow."""
    filters, applied = _filters(retrieval, metadata_types)
    size = _size(retrieval)
    body = collapsed(_envelope(size, timeout_ms, _knn_query(vector, _neighbours(size), filters, _vector(retrieval)),
                               retrieval.index_schema), retrieval)
    return SearchPlan(bodies=(body,), applied_filters=applied)


def build_hybrid(
    retrieval: SearchRequest,
    vector: Sequence[float],
    *,
    depth: int,
    timeout_ms: int,
    metadata_types: Mapping[str, str] | None = None,
) -> SearchPlan:
    """Hybrid: the BM25 and the kNN search, each with the same filters, run together in one _msearch."""
    filters, applied = _filters(retrieval, metadata_types)
    size = min(MAX_CANDIDATES, max(depth, _size(retrieval)))
    bm25 = collapsed(_envelope(size, timeout_ms, _bm25_query(retrieval, filters), retrieval.index_schema), retrieval)
    knn = collapsed(_envelope(size, timeout_ms, _knn_query(vector, _neighbours(size), filters, _vector(retrieval)),
                              retrieval.index_schema), retrieval)
    return SearchPlan(bodies=(bm25, knn), applied_filters=applied)


def _vector(retrieval: SearchRequest) -> str:
    field = retrieval.index_schema.vector
    if field is None:  # the configuration refuses vector retrieval without a vector field
        raise ValueError("the knowledge base's schema has no vector field")
    return field


def _neighbours(size: int) -> int:
    """k for the kNN query. Lucene's HNSW search explores k candidates (its ef), so a small k makes the answer
    depend on how the graph happened to be built (segments, merge order): measured on DRCD, k 15 → 30 → 100 gave
    nDCG@10 0.901 → 0.909 → 0.910 on the same vectors. Collapsing to one chunk per document also happens after
    the k nearest chunks are found. Hence at least KNN_MIN_K, and twice the candidates."""
    return min(MAX_CANDIDATES, max(KNN_MIN_K, size * 2))
