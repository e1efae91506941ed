"""The MCP endpoint end to end against the engine, with tokens of a second issuer the tests run themselves
(helpers/local_issuer.py; Keycloak's are in test_mcp_keycloak.py): the official SDK's client over Streamable HTTP
sees exactly what the permission oracle allows, `fetch` of a forbidden and of an unknown id answer the same bytes,
and the transport's refusals carry the right status, JSON-RPC code and challenge."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from helpers import acl_corpus
from helpers.local_issuer import LocalIssuer
from helpers.records import metric, record_ids
from helpers.setup import TEST_ENV, load_records, settings_for
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from es_provider.web.app import create_app

RESOURCE = "http://127.0.0.1:8080/mcp"
IDENTITIES = [(s, t) for s, t in acl_corpus.IDENTITIES if t]  # tokens here always name a tenant
JSON = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
WORKBENCH_KEY = "workbench-key-0123456789"


@pytest.fixture
async def served(engine: Any, kb: Any, opensearch: Any, issuer: LocalIssuer) -> AsyncIterator[TestClient[Any, Any]]:
    await load_records(engine, kb, acl_corpus.documents())
    settings = settings_for(opensearch.url, kb, principals=acl_corpus.GROUPS, mcp={
        "enabled": True, "resource": RESOURCE, "knowledge": [kb.id], "scopes": ["knowledge.read"],
        "allowed_origins": ["https://agent.example.com"],
        "issuers": [{"issuer": issuer.url, "tenant_claim": "tenant"}]})
    client: TestClient[Any, Any] = TestClient(TestServer(create_app(settings, environ=TEST_ENV)))
    await client.start_server()
    yield client
    await client.close()


def rpc(method: str, params: dict[str, Any] | None = None, request_id: int = 1) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, **({"params": params} if params
                                                                                 is not None else {})})


async def call(client: TestClient[Any, Any], token: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/mcp", data=rpc("tools/call", {"name": name, "arguments": arguments}),
                                 headers={**JSON, "Authorization": f"Bearer {token}"})
    assert response.status == 200, await response.text()
    return dict((await response.json())["result"])


async def test_the_sdk_client_sees_what_the_oracle_allows(served: TestClient[Any, Any], issuer: LocalIssuer,
                                                          kb: Any) -> None:
    url = str(served.make_url("/mcp"))
    for subject, tenant in IDENTITIES:
        token = issuer.mint(subject, RESOURCE, tenant=tenant)
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http, \
                streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.protocol_version == "2025-11-25"
            listed = await session.list_tools()
            assert {t.name for t in listed.tools} == {"search", "fetch", "retrieve", "list_knowledge_bases"}
            assert all(t.annotations is not None and t.annotations.read_only_hint for t in listed.tools)
            retrieved = await session.call_tool("retrieve", {"query": "alpha", "top_k": 20})
            assert not retrieved.is_error
            assert retrieved.structured_content is not None
            got = {c["document_id"] for c in retrieved.structured_content["chunks"]}
            assert got == acl_corpus.visible(subject, tenant), (subject, tenant)
            assert json.loads(retrieved.content[0].text) == retrieved.structured_content  # type: ignore[union-attr]
            found = await session.call_tool("search", {"query": "alpha"})
            ids = [r["id"] for r in found.structured_content["results"]]  # type: ignore[index]
            assert {i.split("/", 1)[1] for i in ids} <= acl_corpus.visible(subject, tenant)
            bases = await session.call_tool("list_knowledge_bases", {})
            assert [b["id"] for b in bases.structured_content["knowledge_bases"]] == [kb.id]  # type: ignore[index]
            for document in {d["document_id"] for d in acl_corpus.documents()}:
                fetched = await session.call_tool("fetch", {"id": f"{kb.id}/{document}"})
                if document in acl_corpus.visible(subject, tenant):
                    assert not fetched.is_error
                    assert document in fetched.structured_content["text"]  # type: ignore[index]
                else:
                    assert fetched.is_error, (subject, tenant, document)


async def test_fetch_of_a_forbidden_and_of_an_unknown_id_answer_the_same_bytes(served: TestClient[Any, Any],
                                                                               issuer: LocalIssuer, kb: Any) -> None:
    token = issuer.mint("u-bob", RESOURCE, tenant="team-b")
    forbidden = await served.post("/mcp", data=rpc("tools/call", {"name": "fetch", "arguments": {
        "id": f"{kb.id}/team-a-alice"}}), headers={**JSON, "Authorization": f"Bearer {token}"})
    unknown = await served.post("/mcp", data=rpc("tools/call", {"name": "fetch", "arguments": {
        "id": f"{kb.id}/no-such-document"}}), headers={**JSON, "Authorization": f"Bearer {token}"})
    other_base = await served.post("/mcp", data=rpc("tools/call", {"name": "fetch", "arguments": {
        "id": "another-base/team-a-alice"}}), headers={**JSON, "Authorization": f"Bearer {token}"})
    bodies = {await r.read() for r in (forbidden, unknown, other_base)}
    assert len(bodies) == 1
    assert json.loads(bodies.pop())["result"]["isError"] is True


async def test_transport_refusals(served: TestClient[Any, Any], issuer: LocalIssuer) -> None:
    token = issuer.mint("u-alice", RESOURCE, tenant="team-a")
    auth = {**JSON, "Authorization": f"Bearer {token}"}
    missing = await served.post("/mcp", data=rpc("ping"), headers=JSON)
    assert missing.status == 401
    assert missing.headers["WWW-Authenticate"] == \
        'Bearer resource_metadata="http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp"'
    cases: list[tuple[str, bytes, dict[str, str], int, int | None]] = [
        ("batch", b"[" + rpc("ping") + b"]", auth, 400, -32600),
        ("parse", b'{"jsonrpc": "2.0", "id": 1, "method": "ping"', auth, 400, -32700),
        ("duplicate keys", b'{"jsonrpc": "2.0", "id": 1, "id": 2, "method": "ping"}', auth, 400, -32700),
        ("NaN", b'{"jsonrpc": "2.0", "id": NaN, "method": "ping"}', auth, 400, -32700),
        ("trailing", rpc("ping") + b" {}", auth, 400, -32700),
        ("no jsonrpc", b'{"id": 1, "method": "ping"}', auth, 400, -32600),
        ("unknown method", rpc("resources/list"), auth, 200, -32601),
        ("unknown tool", rpc("tools/call", {"name": "drop_index", "arguments": {}}), auth, 200, -32602),
        ("origin", rpc("ping"), {**auth, "Origin": "https://evil.example.com"}, 403, -32600),
        ("version", rpc("ping"), {**auth, "MCP-Protocol-Version": "1999-01-01"}, 400, -32600),
        ("ping", rpc("ping"), auth, 200, None),
        ("allowed origin", rpc("ping"), {**auth, "Origin": "https://agent.example.com"}, 200, None),
    ]
    for name, body, headers, status, code in cases:
        response = await served.post("/mcp", data=body, headers=headers)
        assert response.status == status, (name, await response.text())
        answer = await response.json()
        assert (answer.get("error") or {}).get("code") == code, (name, answer)
    notification = await served.post("/mcp", data=b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
                                     headers=auth)
    assert notification.status == 202
    assert (await served.get("/mcp", headers=auth)).status == 405
    metadata = await (await served.get("/.well-known/oauth-protected-resource/mcp")).json()
    assert metadata["resource"] == RESOURCE and metadata["authorization_servers"] == [issuer.url]
    assert metadata["scopes_supported"] == ["knowledge.read"]
    assert await (await served.get("/.well-known/oauth-protected-resource")).json() == metadata


async def test_the_access_record_names_subject_issuer_and_client(engine: Any, kb: Any, opensearch: Any,
                                                                 issuer: LocalIssuer) -> None:
    await load_records(engine, kb, acl_corpus.documents())
    prefix = f"mcp-records-{uuid.uuid4().hex[:8]}"
    settings = settings_for(opensearch.url, kb, principals=acl_corpus.GROUPS, access_log={
        "index": prefix, "flush_interval_s": 0.1}, mcp={
        "enabled": True, "resource": RESOURCE, "knowledge": [kb.id],
        "issuers": [{"issuer": issuer.url, "tenant_claim": "tenant"}]})
    client: TestClient[Any, Any] = TestClient(TestServer(create_app(settings, environ=TEST_ENV)))
    await client.start_server()
    try:
        token = issuer.mint("u-carol", RESOURCE, tenant="team-c", azp="claude-desktop")
        response = await client.post("/mcp", data=rpc("tools/call", {"name": "retrieve", "arguments": {
            "query": "alpha", "top_k": 20}}), headers={**JSON, "Authorization": f"Bearer {token}"})
        assert response.status == 200
        served = {c["document_id"] for c in (await response.json())["result"]["structuredContent"]["chunks"]}
        assert served == acl_corpus.visible("u-carol", "team-c")
        record_id = response.headers["X-Access-Record"]
        assert record_id in await record_ids(engine, prefix, {record_id})
        [record] = [hit["_source"] async for hit in engine.scan(f"{prefix}-*") if hit["_id"] == record_id]
        assert (record["protocol"], record["credential"], record["app_id"], record["subject"], record["tenants"]) == \
            ("mcp", f"oauth:{issuer.url}", "claude-desktop", "u-carol", ["team-c"])
        assert set(record["documents"]) == served and record["knowledge_ids"] == [kb.id]
        assert token[:20] not in json.dumps(record) and token[-20:] not in json.dumps(record)
        exposition = await (await client.get("/metrics")).text()
        assert metric(exposition, 'es_provider_requests_total{code="",route="/mcp",status="200"}') >= 1
    finally:
        await client.close()


async def test_the_workbench_asks_as_anyone_through_mcp_and_says_why_a_document_is_hidden(
        engine: Any, kb: Any, opensearch: Any, issuer: LocalIssuer) -> None:
    await load_records(engine, kb, acl_corpus.documents())
    settings = settings_for(opensearch.url, kb, principals=acl_corpus.GROUPS,
                            workbench={"enabled": True, "key_ref": "WB_KEY"}, mcp={
        "enabled": True, "resource": RESOURCE, "knowledge": [kb.id],
        "issuers": [{"issuer": issuer.url, "tenant_claim": "tenant"}]})
    client: TestClient[Any, Any] = TestClient(TestServer(create_app(settings, environ={**TEST_ENV,
                                                                                       "WB_KEY": WORKBENCH_KEY})))
    await client.start_server()
    wb = {"Authorization": f"Bearer {WORKBENCH_KEY}", "Content-Type": "application/json"}
    try:
        ask = {"knowledge_id": kb.id, "tenant": "team-b", "subject": "u-bob", "query": "alpha", "top_k": 20}
        shown = await (await client.post("/workbench/api/search", headers=wb, json=ask)).json()
        answer = shown["answers"]["mcp"]
        assert answer["appliedFilters"] == ["TENANT", "SUBJECT"]
        token = issuer.mint("u-bob", RESOURCE, tenant="team-b")
        direct = await call(client, token, "retrieve", {"query": "alpha", "top_k": 20})
        assert answer["body"] == direct  # the very chunks, scores and citations the endpoint answers
        hidden = sorted({d["document_id"] for d in acl_corpus.documents()} - acl_corpus.visible("u-bob", "team-b"))
        why = await (await client.post("/workbench/api/explain", headers=wb, json={
            **ask, "protocol": "mcp", "document_id": hidden[0]})).json()
        assert why["found"] >= 1 and {r["rule"] for r in why["reasons"]} <= {"tenant", "subject"}, why
    finally:
        await client.close()


async def test_opaque_tokens_are_checked_by_the_issuers_introspection(engine: Any, kb: Any, opensearch: Any,
                                                                      issuer: LocalIssuer) -> None:
    await load_records(engine, kb, acl_corpus.documents())
    client_id, secret = issuer.introspector
    settings = settings_for(opensearch.url, kb, principals=acl_corpus.GROUPS, mcp={
        "enabled": True, "resource": RESOURCE, "knowledge": [kb.id],
        "issuers": [{"issuer": issuer.url, "tenant_claim": "tenant", "introspection_endpoint":
                     issuer.introspection_endpoint, "client_id": client_id, "client_secret_ref": "INTROSPECTION"}]})
    client: TestClient[Any, Any] = TestClient(TestServer(create_app(settings, environ={**TEST_ENV,
                                                                                       "INTROSPECTION": secret})))
    await client.start_server()
    try:
        good = issuer.opaque_token(issuer.claims("u-bob", RESOURCE, tenant="team-b"))
        answer = await call(client, good, "retrieve", {"query": "alpha", "top_k": 20})
        assert {c["document_id"] for c in answer["structuredContent"]["chunks"]} == acl_corpus.visible("u-bob",
                                                                                                       "team-b")
        other_audience = issuer.opaque_token(issuer.claims("u-bob", "https://other.example.com", tenant="team-b"))
        expired = issuer.opaque_token({**issuer.claims("u-bob", RESOURCE, tenant="team-b"), "exp": 1})
        for token in (other_audience, expired, "opaque-never-issued"):
            refused = await client.post("/mcp", data=rpc("ping"), headers={**JSON, "Authorization": f"Bearer {token}"})
            assert refused.status == 401 and refused.headers["WWW-Authenticate"].startswith(
                'Bearer error="invalid_token"')
    finally:
        await client.close()
