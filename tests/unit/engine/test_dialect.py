"""OpenSearch → Elasticsearch translations (dialect.py): which engine a `GET /` names, the vector mapping, and the
kNN clause wherever the query builder puts it. OpenSearch bodies pass through untouched."""

from __future__ import annotations

import pytest

from es_provider.engine.dialect import OPENSEARCH, Flavor, UnsupportedEngine, detect, index_body, search_body

ELASTIC = Flavor("elasticsearch", "8.17.0")


@pytest.mark.parametrize(("root", "engine", "major"), [
    ({"version": {"distribution": "opensearch", "number": "2.19.1"}}, "opensearch", 2),
    ({"version": {"number": "8.17.0", "build_flavor": "default"}, "tagline": "You Know, for Search"},
     "elasticsearch", 8),
    ({"version": {"number": "9.5.3"}}, "elasticsearch", 9),
])
def test_detect(root, engine, major) -> None:
    flavor = detect(root)
    assert (flavor.engine, flavor.major) == (engine, major)


@pytest.mark.parametrize("root", [{"version": {"number": "7.10.2"}}, {}, {"version": "x"}])
def test_elasticsearch_before_8_or_unknown_is_refused(root) -> None:
    with pytest.raises(UnsupportedEngine):
        detect(root)


def test_the_vector_mapping_becomes_a_dense_vector() -> None:
    from es_provider.ingest.admin import load_index_body

    body = load_index_body(dimensions=384)
    translated = index_body(body, ELASTIC)
    assert "knn" not in translated["settings"]["index"]
    assert translated["mappings"]["properties"]["embedding"] == {
        "type": "dense_vector", "dims": 384, "index": True, "similarity": "cosine",
        "index_options": {"type": "hnsw", "m": 16, "ef_construction": 128}}
    assert body["mappings"]["properties"]["embedding"]["type"] == "knn_vector"  # the input is not changed
    assert index_body(body, OPENSEARCH) is body
    assert "mapping.exclude_source_vectors" not in translated["settings"]["index"]
    nine = index_body(body, Flavor("elasticsearch", "9.5.3"))["settings"]["index"]
    assert nine["mapping.exclude_source_vectors"] is False  # 9.x would drop vectors from _source (and reindex)


def test_knn_clauses_are_translated_wherever_they_sit() -> None:
    from helpers.setup import new_kb

    from es_provider.core.acl import Filter, Identity
    from es_provider.search.domain import SearchRequest
    from es_provider.search.query import build_hybrid

    kb = new_kb(retrieval="hybrid", embedder="e5")
    request = SearchRequest((kb,), "install", Identity.of("a", "t", "s"), (Filter.TENANT, Filter.SUBJECT), 5)
    bm25, knn = build_hybrid(request, [0.1, 0.2], depth=30, timeout_ms=100).bodies
    assert search_body(bm25, ELASTIC) == bm25
    translated = search_body(knn, ELASTIC)
    clause = translated["query"]["bool"]["must"][0]["knn"]
    inner = knn["query"]["bool"]["must"][0]["knn"]["embedding"]
    assert clause == {"field": "embedding", "query_vector": [0.1, 0.2], "num_candidates": inner["k"],
                      "filter": inner["filter"]}
    # The permission filters stay inside the kNN clause AND beside it.
    assert translated["query"]["bool"]["filter"] == knn["query"]["bool"]["filter"]
    assert search_body(knn, OPENSEARCH) is knn
