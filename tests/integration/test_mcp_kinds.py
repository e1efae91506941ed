"""The MCP endpoint serves every kind of knowledge base the service serves: the service's own index in BM25, vector
and hybrid modes (the real e5 model), an existing index LangChain's own library built (served through its preset),
an existing index served through a custom field map, and a base with a rerank stage (harness/rerank_server.py).
For each, an app with that one base in `[mcp] knowledge` and a few users with tokens of the test's own issuer:
`retrieve` answers chunks scored 0-1 of exactly the documents the corpus's oracle lets that user read, `search` ids
"kb/doc" of those documents, `fetch` of one result the text of its chunks, `list_knowledge_bases` the base; behind
the rerank stage the order is the reranker's (`X-Rerank: applied`). The permission oracles at scale are elsewhere
(test_mcp_oracle.py); here each kind is a small case."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer
from helpers import acl_corpus
from helpers.acl_random import GROUPS, SUBJECTS, corpus
from helpers.local_issuer import LocalIssuer
from helpers.setup import TEST_ENV, load_records, new_kb, own_prefix, settings_for, vector_kb
from helpers.tool_indices import LANGCHAIN
from helpers.tool_oracle import KB_ID, readable

from es_provider.config.knowledge import KnowledgeBase
from es_provider.engine.client import Engine
from es_provider.ingest import admin
from es_provider.web.app import create_app
from harness.rerank_server import RerankServer, hashed

RESOURCE = "http://127.0.0.1:8080/mcp"
JSON = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
SEARCH_RESULTS = 10  # mcp_tools.SEARCH_RESULTS: `search` answers the documents of this many chunks at most
OWN_USERS = [("u-alice", "team-a"), ("u-bob", "team-b"), ("u-carol", "team-c"), ("u-nobody", "team-a")]


@dataclass(frozen=True)
class Ask:
    """One user's question and the documents the corpus's oracle lets them read among those it matches."""

    subject: str
    tenant: str
    query: str
    expected: frozenset[str]


@pytest.fixture
async def served(opensearch: Any, engine: Engine, issuer: LocalIssuer) -> AsyncIterator[Any]:
    """Makes the app serving one base over MCP (and whatever else the settings say); closes what it made. Its
    access records go to indices of the test's own (never the node's shared default), dropped at the end."""
    clients: list[TestClient[Any, Any]] = []
    async with own_prefix(engine, "test-mcp-kinds-access") as records:

        async def make(kb: KnowledgeBase, **overrides: Any) -> TestClient[Any, Any]:
            settings = settings_for(opensearch.url, kb, access_log={"index": records}, mcp={
                "enabled": True, "resource": RESOURCE, "knowledge": [kb.id],
                "issuers": [{"issuer": issuer.url, "tenant_claim": "tenant"}]}, **overrides)
            client: TestClient[Any, Any] = TestClient(TestServer(create_app(settings, environ=TEST_ENV)))
            await client.start_server()
            clients.append(client)
            return client

        yield make
        for client in clients:  # flushes their records before the prefix's indices are dropped
            await client.close()


async def call(client: TestClient[Any, Any], token: str, name: str,
               arguments: dict[str, Any]) -> tuple[dict[str, Any], ClientResponse]:
    """A tools/call over HTTP: its structured content (failing on an error result) and the response."""
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                         "params": {"name": name, "arguments": arguments}})
    response = await client.post("/mcp", data=body, headers={**JSON, "Authorization": f"Bearer {token}"})
    assert response.status == 200, await response.text()
    result = (await response.json())["result"]
    assert result["isError"] is False, (name, arguments, result)
    return dict(result["structuredContent"]), response


async def check_kind(client: TestClient[Any, Any], issuer: LocalIssuer, kb_id: str, asks: list[Ask],
                     pages: int = 1) -> list[list[dict[str, Any]]]:
    """Each user's four tools held to the oracle (`fetch` reads all `pages` chunks of a document); answers each
    user's `retrieve` chunks."""
    assert any(a.expected for a in asks), "a case where nobody reads anything shows nothing"
    answered = []
    for ask in asks:
        who = (ask.subject, ask.tenant, ask.query)
        token = issuer.mint(ask.subject, RESOURCE, tenant=ask.tenant)
        retrieved, _ = await call(client, token, "retrieve", {"query": ask.query, "top_k": 20})
        chunks = retrieved["chunks"]
        assert {c["document_id"] for c in chunks} == ask.expected, who
        assert all(c["knowledge_base"] == kb_id and c["content"] for c in chunks), who
        scores = [c["score"] for c in chunks]
        assert all(s is not None and 0.0 <= s <= 1.0 for s in scores), (who, scores)
        assert scores == sorted(scores, reverse=True), (who, scores)
        found, _ = await call(client, token, "search", {"query": ask.query})
        ids = [r["id"] for r in found["results"]]
        assert all(i.startswith(f"{kb_id}/") for i in ids) and len(set(ids)) == len(ids), (who, ids)
        documents = {i.removeprefix(f"{kb_id}/") for i in ids}
        assert documents == ask.expected, who  # no user here reads more than SEARCH_RESULTS documents
        if ids:
            fetched, _ = await call(client, token, "fetch", {"id": ids[0]})
            document = ids[0].removeprefix(f"{kb_id}/")
            assert fetched["id"] == ids[0] and fetched["metadata"]["document_id"] == document, (who, fetched)
            assert fetched["metadata"]["chunks"] == pages and not fetched["metadata"]["truncated"], (who, fetched)
            mine = [c["content"] for c in chunks if c["document_id"] == document]
            assert mine and all(content in fetched["text"] for content in mine), (who, mine, fetched["text"][:300])
        listed, _ = await call(client, token, "list_knowledge_bases", {})
        assert [b["id"] for b in listed["knowledge_bases"]] == [kb_id], who
        answered.append(chunks)
    return answered


def own_asks() -> list[Ask]:
    """acl_corpus: every document says "alpha", so what a user gets is decided by permissions alone."""
    return [Ask(s, t, "alpha", frozenset(acl_corpus.visible(s, t))) for s, t in OWN_USERS]


# kNN in vector and hybrid is the dialect, which differs by engine: run on Elasticsearch 8 and 9 too (as
# test_vector_retrieval.py); BM25 over the service's own index is the walking skeleton's, run once here.
DIALECT = [pytest.mark.engines, pytest.mark.es8]


@pytest.mark.parametrize("mode", ["bm25", pytest.param("vector", marks=DIALECT),
                                  pytest.param("hybrid", marks=DIALECT)])
async def test_the_services_own_index_in_each_mode(engine: Engine, e5: Any, served: Any, issuer: LocalIssuer,
                                                   mode: str) -> None:
    kb = new_kb() if mode == "bm25" else vector_kb(retrieval=mode)
    await admin.create(engine, kb, admin.load_index_body() if mode == "bm25" else admin.load_index_body(dimensions=384))
    try:
        await load_records(engine, kb, acl_corpus.documents(), embedder=None if mode == "bm25" else e5)
        client = await served(kb, principals=acl_corpus.GROUPS)
        await check_kind(client, issuer, kb.id, own_asks())
    finally:
        await admin.drop(engine, kb)


def langchain_asks(docs: list[dict[str, Any]], uses: dict[str, list[str]],
                   principals: dict[str, list[str]]) -> list[Ask]:
    """Owners of the first documents that name a tenant and a subject, each asking for one of its tokens, and a
    stranger of the first one's tenant; what tool_oracle.readable lets each read among that token's documents."""
    by_id = {d["document_id"]: d for d in docs}
    picked: list[tuple[str, str, str]] = []
    for doc in docs:
        owners = [s for s in doc["acl"]["subjects"] if s.startswith("user-")]
        if doc.get("tenant_id") and owners and len(picked) < 3:
            token = next(t for t, ids in uses.items() if doc["document_id"] in ids)
            picked.append((owners[0], doc["tenant_id"], token))
    picked.append(("stranger-1", picked[0][1], picked[0][2]))
    return [Ask(s, t, token, frozenset(d for d in uses[token] if readable(
        by_id[d], s, t, set(principals.get(s, [])), LANGCHAIN))) for s, t, token in picked]


async def test_an_index_langchain_built_through_its_preset(opensearch: Any, engine: Engine, served: Any,
                                                           issuer: LocalIssuer) -> None:
    rng = random.Random("mcp-kinds-langchain")
    docs, uses = corpus(rng, 60)
    principals = {s: rng.sample(GROUPS, rng.randint(0, 3)) for s in SUBJECTS}
    index = f"test-mcp-kinds-langchain-{uuid.uuid4().hex[:8]}"
    try:
        await asyncio.to_thread(LANGCHAIN.build, opensearch.url, index, docs)
        kb = new_kb(id=KB_ID, alias=index, schema=LANGCHAIN.schema, fields=LANGCHAIN.fields, retrieval="bm25")
        client = await served(kb, principals=principals)
        asks = langchain_asks(docs, uses, principals)
        assert sum(1 for a in asks if a.expected) >= 3
        await check_kind(client, issuer, KB_ID, asks)
    finally:
        if await engine.index_exists(index):
            await engine.delete_index(index)


# A company's own index (as test_existing_index.py's corp-docs, smaller): two pages a document, each its own engine
# document with its own URL; a tenant, an owner and groups per document; the pipeline's own e5 vectors.
CORP_FIELDS = {"text": ["body", "heading"], "title": "heading", "document_id": "doc_id", "tenant": "tenant",
               "subjects": "owner", "groups": "allowed_groups", "uri": "url", "page": "page", "vector": "vec"}
CORP_MAPPING = {"properties": {
    "body": {"type": "text"}, "heading": {"type": "text"}, "doc_id": {"type": "keyword"},
    "tenant": {"type": "keyword"}, "owner": {"type": "keyword"}, "allowed_groups": {"type": "keyword"},
    "url": {"type": "keyword"}, "page": {"type": "integer"},
    # Lucene's HNSW: the local node runs no native k-NN engine.
    "vec": {"type": "knn_vector", "dimension": 384,
            "method": {"name": "hnsw", "space_type": "cosinesimil", "engine": "lucene"}}}}
CORP_PRINCIPALS = {"u-alice": ["eng"], "u-bob": ["sales"], "u-carol": ["ops"]}
CORP_USERS = [("u-alice", "t-a"), ("u-bob", "t-a"), ("u-carol", "t-b"), ("u-nobody", "t-a")]


def corp_pages() -> list[dict[str, Any]]:
    pages = []
    for t, tenant in enumerate(["t-a", "t-b", None]):
        for o, owner in enumerate(["u-alice", "u-bob", None]):
            doc_id = f"doc-{t}-{o}"
            for page in (1, 2):
                source: dict[str, Any] = {
                    "doc_id": doc_id, "heading": f"Alpha report {doc_id}", "page": page,
                    "body": f"alpha budget page {page} of {doc_id}: installation notes for the quarter.",
                    "url": f"https://wiki.example.com/{doc_id}#page-{page}",
                    "allowed_groups": [["eng"], ["ops", "sales"], []][(t + o) % 3]}
                if tenant is not None:
                    source["tenant"] = tenant
                if owner is not None:
                    source["owner"] = owner
                pages.append({"_id": f"{doc_id}-p{page}", **source})
    return pages


def corp_readable(page: dict[str, Any], subject: str, tenant: str) -> bool:
    """Fail closed on an existing index: no tenant is no one's; no owner and no groups is nobody's."""
    groups = set(CORP_PRINCIPALS.get(subject, []))
    return page.get("tenant") == tenant and (page.get("owner") == subject or bool(groups & set(page["allowed_groups"])))


async def test_an_existing_index_through_a_custom_field_map(engine: Engine, e5: Any, served: Any,
                                                            issuer: LocalIssuer) -> None:
    index = f"test-mcp-kinds-corp-{uuid.uuid4().hex[:8]}"
    await engine.create_index(index, {"settings": {"index": {"knn": True, "number_of_replicas": 0}},
                                      "mappings": CORP_MAPPING})
    try:
        pages = corp_pages()
        vectors = await e5.passages([p["body"] for p in pages])
        lines: list[dict[str, Any]] = []
        for page, vector in zip(pages, vectors, strict=True):
            source = {k: v for k, v in page.items() if k != "_id"}
            lines += [{"index": {"_index": index, "_id": page["_id"]}}, {**source, "vec": list(vector)}]
        written = await engine._client.bulk(body=lines, refresh=True)
        assert not written["errors"], written
        kb = new_kb(id="corp", alias=index, schema="custom", fields=CORP_FIELDS, retrieval="hybrid", embedder="e5")
        client = await served(kb, principals=CORP_PRINCIPALS)
        asks = [Ask(s, t, "alpha budget installation", frozenset(
            p["doc_id"] for p in pages if corp_readable(p, s, t))) for s, t in CORP_USERS]
        answered = await check_kind(client, issuer, "corp", asks, pages=2)
        for chunks in answered:  # each page a chunk of its own, cited with its own URL
            assert all(c["source"]["uri"] == f"https://wiki.example.com/{c['document_id']}#page-{c['source']['page']}"
                       for c in chunks), chunks
    finally:
        if await engine.index_exists(index):
            await engine.delete_index(index)


@pytest.fixture
async def reranker() -> AsyncIterator[RerankServer]:
    server = await RerankServer().start()
    yield server
    await server.close()


def reranked_order(server: RerankServer) -> list[str]:
    """The document ids of the last rerank request's candidates in the test server's order (its hashed scores);
    a candidate's text is "<title> <content>", the title "Alpha note <document id>"."""
    last = server.received[-1].body
    texts: list[str] = last["texts"]
    scores = hashed(last["query"], texts)
    return [texts[i].split()[2] for i in sorted(range(len(texts)), key=lambda i: -scores[i])]


async def test_a_base_with_a_rerank_stage(engine: Engine, kb: KnowledgeBase, served: Any, issuer: LocalIssuer,
                                          reranker: RerankServer) -> None:
    await load_records(engine, kb, acl_corpus.documents())
    client = await served(kb, principals=acl_corpus.GROUPS, rerank={
        "url": reranker.tei_url, "api": "tei", "knowledge": [kb.id], "candidates": 30, "timeout_ms": 5000})
    await check_kind(client, issuer, kb.id, own_asks())
    for subject, tenant in OWN_USERS[:2]:
        token = issuer.mint(subject, RESOURCE, tenant=tenant)
        visible = acl_corpus.visible(subject, tenant)
        retrieved, response = await call(client, token, "retrieve", {"query": f"alpha installation {subject}",
                                                                     "top_k": 20})
        assert response.headers.get("X-Rerank") == "applied", dict(response.headers)
        order = reranked_order(reranker)
        assert set(order) == visible  # the reranker read the candidates this user may read, and nothing else
        first_stage = [t.split()[2] for t in reranker.received[-1].body["texts"]]  # sent in BM25's order
        assert order != first_stage, "the reranker kept BM25's order: the test would show nothing"
        assert [c["document_id"] for c in retrieved["chunks"]] == order, subject
        found, response = await call(client, token, "search", {"query": f"alpha notes {subject}"})
        assert response.headers.get("X-Rerank") == "applied", dict(response.headers)
        assert [r["id"] for r in found["results"]] == [f"{kb.id}/{d}" for d in reranked_order(reranker)][
            :SEARCH_RESULTS], subject
