"""Vector and hybrid retrieval against the real node with the real e5 model: what each mode finds, its scores,
one round trip for hybrid, refusals instead of silent BM25, and `kb reindex` adding embeddings."""

from __future__ import annotations

import json

import pytest
from helpers import calls
from helpers.setup import api_key, bearer, load_records, new_kb, vector_kb

from es_provider.ingest import admin
from es_provider.search.embedders import CachedEmbedder

# What differs by engine, the dialect (kNN in vector and hybrid): run on Elasticsearch 8 and 9 too.
pytestmark = [pytest.mark.engines, pytest.mark.es8]

# The paraphrase documents share no content word with their query: only the vector leg can find them.
DOCS = [
    {"document_id": "feline", "title": "Pets", "content": "The kitten slept on the warm windowsill all afternoon."},
    {"document_id": "engine", "title": "Cars", "content": "Replace the spark plugs every thirty thousand miles."},
    {"document_id": "invoice", "title": "Billing", "content": "Invoices are due thirty days after the billing date."},
    {"document_id": "install", "title": "Setup", "content": "To install the agent, run the installer as root."},
    {"document_id": "bread", "title": "Baking", "content": "Knead the dough for ten minutes, then let it rise."},
]
for doc in DOCS:
    doc.update(tenant_id="team-a", acl={"public": True})


def retrieve_body(kb_id: str, query: str, mode: str | None = None, top_k: int = 5) -> str:
    body = {"knowledge_base_ids": [kb_id], "query": query, "method": "doc", "top_k": top_k, "limit": 100,
            "extra_params": [{"key": "retrieval_mode", "value": mode}] if mode else []}
    return json.dumps(body)


async def ask(client, kb_id: str, query: str, mode: str | None = None, top_k: int = 5) -> list[dict]:
    response = await client.post("/knowledge-bases/retrieve", headers=bearer(),
                                 data=retrieve_body(kb_id, query, mode, top_k))
    assert response.status == 200, await response.text()
    return (await response.json())["search_result_list"]


async def test_each_mode_finds_what_it_should_with_scores_in_range(engine, vkb, e5: CachedEmbedder, client_for) -> None:
    await load_records(engine, vkb, DOCS, embedder=e5)
    client = await client_for(vkb, api_keys=[api_key([vkb.id])])

    bm25 = await ask(client, vkb.id, "cat nap", "bm25")
    vector = await ask(client, vkb.id, "cat nap", "vector")
    hybrid = await ask(client, vkb.id, "cat nap")  # the knowledge base's own mode: hybrid
    assert bm25 == []  # no shared word
    assert vector[0]["file_id"] == "feline"
    assert hybrid[0]["file_id"] == "feline"
    assert len(vector) == len(hybrid) == len(DOCS)
    for answer in (vector, hybrid):
        scores = [row["score"] for row in answer]
        assert all(0.0 <= s <= 1.0 for s in scores)
        assert scores == sorted(scores, reverse=True)

    both = await ask(client, vkb.id, "install the agent installer", "hybrid")
    assert both[0]["file_id"] == "install"


# Short passages on many topics, so that BM25 term statistics look like a real collection's (a five-passage
# index gives every word a tiny idf) and the vector leg has real neighbours to tell apart.
TOPICS = ["volcano lava eruption", "tax return deadline", "piano sonata recital", "football league season",
          "vaccine clinical trial", "railway timetable delay", "coral reef bleaching", "mortgage interest rate",
          "chess opening gambit", "wedding dress fitting", "solar panel inverter", "medieval castle siege",
          "password reset email", "dental cavity filling", "jazz saxophone solo", "glacier melting ice",
          "parliament election vote", "sourdough starter flour", "marathon training plan", "satellite orbit launch"]
FILLER = [
    {"document_id": f"filler-{i}", "title": topic.split()[0].title(), "tenant_id": "team-a", "acl": {"public": True},
     "content": f"Notes about {topic}: part {j} of a short guide on {topic.split()[-1]} and {topic.split()[0]}."}
    for i, (topic, j) in enumerate((t, j) for t in TOPICS for j in range(6))
]


async def test_calibrated_scores_mean_the_same_in_every_mode(engine, vkb, e5, client_for) -> None:
    """The same passage scores ≥ 0.5 for a query on its exact topic, in bm25, vector and hybrid mode, and nothing
    scores ≥ 0.5 for an unrelated query (docs/protocols.md §8: a score is a probability of relevance)."""
    await load_records(engine, vkb, DOCS + FILLER, embedder=e5)
    client = await client_for(vkb, api_keys=[api_key([vkb.id])])
    for mode in ("bm25", "vector", "hybrid"):
        exact = await ask(client, vkb.id, "how to install the agent: run the installer as root", mode)
        assert exact[0]["file_id"] == "install", (mode, exact[:3])
        assert exact[0]["score"] >= 0.5, (mode, exact[0])
        unrelated = await ask(client, vkb.id, "how many moons does the planet neptune have", mode)
        assert all(row["score"] < 0.5 for row in unrelated), (mode, unrelated[:3])


async def test_threshold_applies_to_the_mode_score(engine, vkb, e5, client_for) -> None:
    await load_records(engine, vkb, DOCS, embedder=e5)
    client = await client_for(vkb, api_keys=[api_key([vkb.id])])
    everything = await ask(client, vkb.id, "cat nap", "vector")
    cut = everything[1]["score"]
    body = json.loads(retrieve_body(vkb.id, "cat nap", "vector"))
    body["search_threshold"] = cut
    response = await client.post("/knowledge-bases/retrieve", headers=bearer(), data=json.dumps(body))
    kept = (await response.json())["search_result_list"]
    assert [r["file_id"] for r in kept] == [r["file_id"] for r in everything if r["score"] >= cut]


async def test_hybrid_is_one_round_trip_through_every_protocol(engine, vkb, e5, client_for, proxy) -> None:
    await load_records(engine, vkb, DOCS, embedder=e5)
    # The access record writes to the node itself, not through the proxy that counts the search path's calls.
    client = await client_for(vkb, url=proxy.url, api_keys=[api_key([vkb.id])], access_log={"url": proxy.target})
    await ask(client, vkb.id, "warm up mapping caches")
    proxy.requests.clear()
    rows = await ask(client, vkb.id, "kitten")
    assert rows and proxy.requests == [proxy.requests[0]] and "_msearch" in proxy.requests[0]

    proxy.requests.clear()
    response = await client.post("/agent/knowledge/project-documents/1.0.0", headers={
        "Authorization": "Bearer test-callback-secret-0123456789", "Idempotency-Key": "vec-1"}, json=calls.body(query="kitten", topK=3, executionId="vec-1"))
    answer = await response.json()
    assert response.status == 200, answer
    assert answer["items"][0]["documentId"] == "feline" and len(answer["items"]) == 3
    assert len(proxy.requests) == 1 and "_msearch" in proxy.requests[0]
    metrics = await (await client.get("/metrics")).text()
    assert 'es_provider_embedding_seconds_count{outcome="ok"} 3.0' in metrics  # one per request


async def test_modes_the_knowledge_base_cannot_serve_are_refused(engine, kb, client_for) -> None:
    client = await client_for(kb, api_keys=[api_key([kb.id])])
    for mode, status in (("vector", 400), ("hybrid", 400), ("semantic", 400)):
        response = await client.post("/knowledge-bases/retrieve", headers=bearer(), data=retrieve_body(kb.id, "x", mode))
        assert response.status == status
        assert set(await response.json()) == {"error_code", "error_msg"}


async def test_vector_knowledge_base_without_vectors_is_refused_not_answered_with_bm25(engine, kb, client_for) -> None:
    await load_records(engine, kb, DOCS)
    configured = vector_kb(alias=kb.alias)  # configured for hybrid, but the index was built without vectors
    client = await client_for(configured, api_keys=[api_key([configured.id])])
    response = await client.post("/knowledge-bases/retrieve", headers=bearer(),
                                 data=retrieve_body(configured.id, "install"))
    assert response.status == 503
    assert (await response.json())["error_code"] == "KNOWLEDGE_UNAVAILABLE"


async def test_reindex_adds_embeddings_to_an_existing_knowledge_base(engine, e5, client_for) -> None:
    plain = new_kb()
    await admin.create(engine, plain, admin.load_index_body())
    try:
        await load_records(engine, plain, DOCS)
        upgraded = vector_kb(alias=plain.alias)
        index = await admin.reindex(engine, upgraded, admin.load_index_body(dimensions=384), embedder=e5)
        assert index.endswith("-v2")
        assert await engine.count(plain.alias) == len(DOCS)
        client = await client_for(upgraded, api_keys=[api_key([upgraded.id])])
        rows = await ask(client, upgraded.id, "cat nap", "vector")
        assert rows[0]["file_id"] == "feline"
    finally:
        await admin.drop(engine, plain)
