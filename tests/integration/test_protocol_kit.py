"""A fourth platform protocol takes one module and one table row: this file is that module (a toy protocol with
its own request model, answer and error body), and the test adds its row to the table. It is routed, its
refusals are rendered in its own body, it is in /openapi.json, and it answers with permission-correct chunks
through the same search as every protocol."""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any

import orjson
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from helpers import acl_corpus
from helpers.records import record_ids
from helpers.setup import TEST_ENV, api_key, bearer, load_records, settings_for
from pydantic import Field

from es_provider.core.errors import KnowledgeError, unauthenticated
from es_provider.core.strictjson import StrictModel
from es_provider.edge import auth, handlers
from es_provider.edge.exchange import Answer, exchange_of
from es_provider.edge.service import SERVICES
from es_provider.search.domain import SearchRequest
from es_provider.web.app import PROTOCOLS, create_app


class ToyRequest(StrictModel):
    kb: Annotated[str, Field(min_length=1, max_length=128)]
    q: Annotated[str, Field(min_length=1, max_length=1000)]
    k: Annotated[int, Field(ge=1, le=50)] = 5


def toy_error(error: KnowledgeError) -> web.Response:
    return web.Response(status=error.status, body=orjson.dumps({"toy_error": error.code.value}),
                        content_type="application/json")


async def toy_search(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    exchange = exchange_of(request)
    key = handlers.api_key(request, services, exchange, missing=unauthenticated, unknown=unauthenticated)
    data = await handlers.read_json(request, services)
    async with services.admission.slot(f"key:{key.key_ref}"):
        req = handlers.validate(ToyRequest, data)
        kb = services.settings.knowledge_base(req.kb)
        if kb is None or kb.id not in key.knowledge:
            raise unauthenticated("not this key's knowledge base")
        budget = handlers.default_budget(services)
        tenants, subject = auth.api_key_scope(key)
        identity = await services.principals.identity(key.app, tenants, subject, budget, key.groups)
        exchange.knowledge, exchange.query = [(kb.id, None)], req.q
        exchange.identified(identity)
        result = await services.retriever.search(SearchRequest(
            knowledge=(kb,), query=req.q, identity=identity, filters=kb.key_filters(), top_k=req.k), budget)
        body = orjson.dumps({"hits": [{"doc": c.document_id, "text": c.content} for c in result.chunks]})
        return handlers.respond(exchange, Answer.of(body, result.chunks, result))


TOY = handlers.Protocol(
    name="toy",
    prefixes=("/toy/",),
    render_error=toy_error,
    error_schema={"type": "object", "required": ["toy_error"], "properties": {"toy_error": {"type": "string"}}},
    routes=(handlers.Route("POST", "/toy/search", toy_search, summary="a toy protocol", request_model=ToyRequest,
                      answer={"type": "object", "properties": {"hits": {"type": "array"}}}),),
)


async def test_a_fourth_protocol_is_one_module_and_one_row(engine, kb, opensearch) -> None:
    await load_records(engine, kb, acl_corpus.documents())
    prefix = f"toy-records-{uuid.uuid4().hex[:8]}"
    settings = settings_for(opensearch.url, kb, principals=acl_corpus.GROUPS,
                            api_keys=[api_key([kb.id], tenants=["team-a"], subject="u-alice")],
                            access_log={"index": prefix, "flush_interval_s": 0.1})
    client: TestClient[Any, Any] = TestClient(TestServer(create_app(settings, environ=TEST_ENV,
                                                                    protocols=(*PROTOCOLS, TOY))))
    await client.start_server()
    try:
        response = await client.post("/toy/search", headers=bearer(), data=json.dumps({"kb": kb.id, "q": "alpha",
                                                                                       "k": 50}))
        assert response.status == 200
        hits = {hit["doc"] for hit in (await response.json())["hits"]}
        assert hits == acl_corpus.visible("u-alice", "team-a")  # the same permissions as every protocol
        # Its access record, written from the exchange its handler filled: who asked and what it was served.
        record_id = response.headers["X-Access-Record"]
        assert record_id in await record_ids(engine, prefix, {record_id})
        [record] = [hit["_source"] async for hit in engine.scan(f"{prefix}-*") if hit["_id"] == record_id]
        assert (record["protocol"], record["credential"], record["subject"]) == ("toy", "key:TEST_API_KEY", "u-alice")
        assert set(record["documents"]) == hits and record["knowledge_ids"] == [kb.id]

        refusals = [
            (await client.post("/toy/search", data=b"{}", headers={"Content-Type": "application/json"}), 401,
             "KNOWLEDGE_ACCESS_DENIED"),
            (await client.post("/toy/search", headers=bearer(), data=b'{"kb": 1}'), 400, "KNOWLEDGE_PROTOCOL_ERROR"),
            (await client.post("/toy/nowhere", headers=bearer(), data=b"{}"), 404, "KNOWLEDGE_PROTOCOL_ERROR"),
            (await client.get("/toy/search", headers=bearer()), 405, "KNOWLEDGE_PROTOCOL_ERROR"),
        ]
        for response, status, code in refusals:
            assert response.status == status and await response.json() == {"toy_error": code}

        document = await (await client.get("/openapi.json")).json()
        toy = document["paths"]["/toy/search"]["post"]
        assert toy["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ToyRequest"}
        assert "ToyRequest" in document["components"]["schemas"] and "toyError" in document["components"]["schemas"]
        assert {"/agent/knowledge/{knowledge_id}/{version}", "/knowledge-bases", "/retrieval"} <= set(document["paths"])

        # The other protocols are untouched by the new row.
        response = await client.post("/retrieval", headers=bearer(), data=json.dumps({
            "knowledge_id": kb.id, "query": "alpha", "retrieval_setting": {"top_k": 50, "score_threshold": 0}}))
        assert response.status == 200
    finally:
        await client.close()


async def test_every_refusal_is_logged_once_with_its_reason(kb, client_for, caplog) -> None:
    from helpers.calls import ROUTE, body, headers

    client = await client_for(kb)
    missing_field = {k: v for k, v in body().items() if k != "runId"}
    cases = [
        (dict(json=missing_field, headers=headers()), "invalid fields: runId"),
        (dict(json=body(), headers=headers(**{"Idempotency-Key": None})), "Idempotency-Key must equal executionId"),
        (dict(json=body(), headers=headers(Authorization="Bearer nope")), "callback secret matches no knowledge base"),
    ]
    for request, reason in cases:
        caplog.clear()
        with caplog.at_level("INFO", logger="es_provider.app"):
            response = await client.post(ROUTE, **request)
        assert response.status in (400, 401)
        lines = [r.getMessage() for r in caplog.records if r.name == "es_provider.app"]
        assert len(lines) == 1 and reason in lines[0] and lines[0].startswith(f"refused {ROUTE}"), lines
