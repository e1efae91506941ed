from __future__ import annotations

import pytest
from helpers.setup import new_kb

from es_provider.config.knowledge import KnowledgeBase
from es_provider.core.acl import Filter, Identity
from es_provider.search.domain import SearchRequest
from es_provider.search.query import (
    MAX_QUERY_UNITS,
    VECTOR_FIELD,
    bounded_text,
    build_hybrid,
    build_knn,
    build_search,
    candidate_count,
    query_terms,
    text_fields,
)

ID = Identity.of("app-1", "team-a", "u-alice", frozenset({"eng"}))


def retrieval(query: str = "installation", filters: tuple = (Filter.TENANT, Filter.SUBJECT), top_k: int = 3,
              knowledge: tuple = ()) -> SearchRequest:
    return SearchRequest(knowledge=knowledge or (new_kb(),), query=query, identity=ID, filters=filters, top_k=top_k)


@pytest.mark.parametrize(
    ("text", "max_units", "expected"),
    [
        ("short query", 200, "short query"),
        ("one two three four", 2, "one two"),
        ("设备安装位置", 3, "设备安"),
        ("abc 设备安装", 3, "abc 设备"),
        ("  spaced   words  ", 1, "  spaced"),
        ("", 5, ""),
        ("a*b? OR c:d", 3, "a*b"),
    ],
)
def test_bounded_text(text: str, max_units: int, expected: str) -> None:
    assert bounded_text(text, max_units) == expected


def test_longest_cjk_query_is_bounded() -> None:
    assert len(bounded_text("字" * 16384)) == MAX_QUERY_UNITS


def test_permission_clauses_are_filters_and_applied_is_derived() -> None:
    plan = build_search(retrieval(), timeout_ms=1500)
    bool_query = plan.body["query"]["bool"]
    assert plan.applied_filters == (Filter.TENANT, Filter.SUBJECT)
    assert len(bool_query["filter"]) == 2
    assert set(bool_query) == {"must", "filter"}  # nothing but the text and the filters
    scored = bool_query["must"][0]["bool"]
    assert scored["must"][0]["multi_match"]["query"] == "installation"
    assert scored["should"][0]["multi_match"]["fields"] == ["context"]  # scores only; never a permission clause
    assert plan.body["timeout"] == "1500ms"
    assert plan.body["collapse"] == {"field": "document_id"}  # one chunk per document by default


def test_one_chunk_per_document_can_be_turned_off() -> None:
    kb = new_kb(one_chunk_per_document=False)
    plan = build_search(retrieval(knowledge=(kb,)), timeout_ms=10)
    assert "collapse" not in plan.body


def test_cjk_query_stays_under_the_clause_limit() -> None:
    plan = build_search(retrieval(query="字" * 16384), timeout_ms=10)
    scored = plan.body["query"]["bool"]["must"][0]["bool"]
    text, context = scored["must"][0]["multi_match"], scored["should"][0]["multi_match"]
    clauses = len(text["query"]) * len(text["fields"]) + len(context["query"]) * len(context["fields"])
    assert clauses <= 1000


def test_no_filters_means_none_applied() -> None:
    plan = build_search(retrieval(filters=()), timeout_ms=10)
    assert plan.applied_filters == ()
    assert plan.body["query"]["bool"]["filter"] == []


def test_query_syntax_stays_text() -> None:
    plan = build_search(retrieval(query='title:* OR {"script": 1}'), timeout_ms=10)
    scored = plan.body["query"]["bool"]["must"][0]["bool"]
    assert {next(iter(clause)) for clause in (*scored["must"], *scored["should"])} == {"multi_match"}


@pytest.mark.parametrize(("top_k", "expected"), [(1, 6), (3, 8), (10, 15), (50, 75), (1000, 1024), (1024, 1024)])
def test_candidate_count(top_k: int, expected: int) -> None:
    assert candidate_count(top_k) == expected


@pytest.mark.parametrize(
    ("text", "fields"),
    [("installation guide", ("title.en", "content.en")),
     ("设备安装", ("title.en", "content.en", "title.cjk", "content.cjk")),
     ("mixed 安装 query", ("title.en", "content.en", "title.cjk", "content.cjk")),
     ("カタカナ", ("title.en", "content.en", "title.cjk", "content.cjk")),
     ("", ("title.en", "content.en"))],
)
def test_text_fields_follow_the_script(text: str, fields: tuple) -> None:
    assert text_fields(text) == fields


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        ("installation", 1),
        ("what is the installation procedure", 3),  # "is", "the" are English stop words: no BM25 score
        ("The", 1),  # never 0: a divisor
        ("", 1),
        ("安装", 2),  # one unit per CJK character
        ("install 安装 v2.1", 5),  # punctuation is not a term
    ],
)
def test_query_terms(text: str, terms: int) -> None:
    assert query_terms(text) == terms


# --- per-knowledge-base languages: the mapping indexes, and the query searches, only their fields ---------------

@pytest.mark.parametrize(("languages", "query", "fields", "context"), [
    (("en", "zh"), "install guide", ["title.en", "content.en"], ["context"]),
    (("en", "zh"), "安裝指南", ["title.en", "content.en", "title.cjk", "content.cjk"], ["context", "context.cjk"]),
    (("en",), "安裝指南", ["title.en", "content.en"], ["context"]),
    (("zh",), "install guide", ["title.cjk", "content.cjk"], ["context.cjk"]),
    (("zh",), "安裝指南", ["title.cjk", "content.cjk"], ["context.cjk"]),
])
def test_query_fields_follow_the_languages(languages, query, fields, context) -> None:
    from helpers.setup import new_kb

    from es_provider.core.acl import Filter, Identity
    from es_provider.search.domain import SearchRequest
    from es_provider.search.query import build_search

    kb = new_kb(languages=list(languages))
    plan = build_search(SearchRequest((kb,), query, Identity.of("a", "t", "s"), (Filter.TENANT,), 5), timeout_ms=100)
    scored = plan.body["query"]["bool"]["must"][0]["bool"]
    assert scored["must"][0]["multi_match"]["fields"] == fields
    assert scored["should"][0]["multi_match"]["fields"] == context


# --- the kNN and hybrid bodies: the permission filters inside the kNN query and in the BM25 leg ---------------

VECTOR = [0.1, 0.2, 0.3]


def hybrid_request(filters: tuple = (Filter.TENANT, Filter.SUBJECT), top_k: int = 5) -> SearchRequest:
    return retrieval(query="install", filters=filters, top_k=top_k,
                     knowledge=(new_kb(retrieval="hybrid", embedder="e5"),))


def test_knn_query_carries_the_permission_filters_inside_and_outside() -> None:
    plan = build_knn(hybrid_request(), VECTOR, timeout_ms=900)
    outer = plan.body["query"]["bool"]
    knn = outer["must"][0]["knn"][VECTOR_FIELD]
    assert plan.applied_filters == (Filter.TENANT, Filter.SUBJECT)
    # At least 100 (Lucene explores k candidates), and twice the candidates for collapsing.
    assert knn["vector"] == VECTOR and knn["k"] == 100 and plan.body["size"] == 10
    assert knn["filter"] == {"bool": {"filter": outer["filter"]}}
    assert len(outer["filter"]) == 2
    assert plan.body["timeout"] == "900ms"


def test_knn_without_filters_has_no_empty_filter() -> None:
    plan = build_knn(hybrid_request(filters=()), VECTOR, timeout_ms=10)
    assert "filter" not in plan.body["query"]["bool"]["must"][0]["knn"][VECTOR_FIELD]
    assert plan.applied_filters == ()


@pytest.mark.parametrize(("top_k", "depth", "size"), [(5, 30, 30), (10, 5, 15), (100, 30, 150), (1024, 30, 1024)])
def test_hybrid_runs_both_legs_with_the_same_filters(top_k: int, depth: int, size: int) -> None:
    plan = build_hybrid(hybrid_request(top_k=top_k), VECTOR, depth=depth, timeout_ms=10)
    bm25, knn = plan.bodies
    assert bm25["query"] == build_search(hybrid_request(top_k=top_k), timeout_ms=10).body["query"]
    assert bm25["size"] == knn["size"] == size
    assert knn["query"]["bool"]["must"][0]["knn"][VECTOR_FIELD]["k"] == min(1024, max(100, 2 * size))
    assert knn["query"]["bool"]["filter"] == bm25["query"]["bool"]["filter"]
    assert knn["query"]["bool"]["must"][0]["knn"][VECTOR_FIELD]["filter"]["bool"]["filter"] == bm25["query"]["bool"]["filter"]


# --- an existing index's body reads its own fields (its schema: tests/unit/test_schema.py) -----------------------

def _existing(**fields: object) -> KnowledgeBase:
    own = {"text": ["body", "heading"], "title": "heading", "document_id": "doc_id", "tenant": "tenant",
           "subjects": "owner", "groups": "allowed_groups", "uri": "url", "page": "page",
           "metadata": ["meta.year"], "vector": "vec"}
    return new_kb(id="corp", alias="corp-docs", **{"schema": "custom", "fields": own, **fields})


def test_an_existing_index_body_reads_its_fields() -> None:
    kb = _existing(mandatory_filters=["TENANT", "SUBJECT"])
    body = build_search(retrieval("budget plan", knowledge=(kb,)), timeout_ms=1000).body
    assert body["_source"] == ["body", "heading", "doc_id", "tenant", "owner", "allowed_groups", "url", "page",
                               "meta.year"]
    assert body["collapse"] == {"field": "doc_id"}
    text = body["query"]["bool"]["must"][0]["multi_match"]
    assert text["fields"] == ["body", "heading"] and text["query"] == "budget plan"
    knn = build_knn(retrieval("budget plan", knowledge=(kb,)), [0.1, 0.2], timeout_ms=1000).body["query"]["bool"]["must"][0]["knn"]
    assert list(knn) == ["vec"] and knn["vec"]["filter"]["bool"]["filter"] == body["query"]["bool"]["filter"]


def test_a_whole_document_index_is_not_collapsed() -> None:
    kb = _existing(mandatory_filters=["TENANT"], fields={"text": ["body"], "tenant": "tenant"})
    assert "collapse" not in build_search(retrieval("budget plan", knowledge=(kb,)), timeout_ms=1000).body


# --- the query bound counts what the analyzers produce (hardening finding 4) -----------------------------------

@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("\U00020000" * 520, 200),  # CJK Extension B: one term per character
        ("\U00030000" * 300, 200),  # Extension G (tertiary plane)
        ("中" * 300, 200), ("ひらがな" * 100, 200), ("カタカナ" * 100, 200), ("한국어" * 100, 200),
        ("ｶﾀｶﾅ" * 100, 200),  # half-width katakana
        ("a中" * 300, 200),  # alternating scripts: every character is its own term
        ("word " * 300, 200 * 5 - 1),
        ("x" * 600, 600),  # one long run: 3 terms (the tokenizer cuts at 255)
    ],
)
def test_query_bound_counts_terms(text: str, kept: int) -> None:
    assert len(bounded_text(text)) == kept


def test_supplementary_ideographs_use_the_cjk_fields() -> None:
    assert "content.cjk" in text_fields("\U00020000")
    assert "content.cjk" not in text_fields("plain words")
    assert MAX_QUERY_UNITS * len(text_fields("中")) < 1024
