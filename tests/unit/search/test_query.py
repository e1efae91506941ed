from __future__ import annotations

import pytest
from helpers.setup import new_kb

from es_provider.core.acl import Filter, Identity
from es_provider.search.domain import SearchRequest
from es_provider.search.query import (
    MAX_QUERY_UNITS,
    bounded_text,
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


@pytest.mark.parametrize(("languages", "indexed"), [
    (("en", "zh"), {"title.en", "title.cjk", "content.en", "content.cjk", "context", "context.cjk"}),
    (("en",), {"title.en", "content.en", "context"}),
    (("zh",), {"title.cjk", "content.cjk", "context.cjk"}),
])
def test_the_mapping_indexes_only_the_languages_fields(languages, indexed) -> None:
    from es_provider.ingest.admin import load_index_body

    properties = load_index_body(languages=languages)["mappings"]["properties"]
    found = set()
    for name in ("title", "content", "context"):
        if properties[name].get("index", True):
            found.add(name)
        found.update(f"{name}.{sub}" for sub in properties[name].get("fields", {}))
    assert found == indexed
    assert properties["title"]["index"] is False and properties["content"]["index"] is False  # never queried
