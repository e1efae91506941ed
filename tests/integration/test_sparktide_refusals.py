"""Every SparkTide request rule, each refused with its exact status and code, no items, and no engine call.

The app talks to the real node through a counting proxy, so "refused before OpenSearch is asked anything"
is checked, not assumed. The knowledge base's alias is never created: a refusal must not need it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

import pytest
from helpers.calls import ROUTE, body, headers
from helpers.setup import CALLBACK_SECRET, new_kb


@pytest.fixture
async def assert_refused(client_for, proxy):
    """Posts a request and asserts it was refused with (status, code), with no content and no engine call."""
    kbs = [new_kb(), new_kb(id="other-kb", secret_ref="OTHER_KEY", apps=["app-2"]),
           new_kb(id="signed-kb", signature=True)]
    # The access record writes to the node itself, not through the proxy that counts the search path's calls.
    client = await client_for(*kbs, url=proxy.url, env={"OTHER_KEY": "other-secret"}, access_log={"url": proxy.target})
    proxy.requests.clear()  # the start-up's `GET /` (which engine answers) is not a request being refused

    async def post(status: int, code: str, *, data: bytes | None = None, payload: Any = None,
                   hdrs: dict[str, str] | None = None, route: str = ROUTE) -> dict[str, Any]:
        raw = data if data is not None else json.dumps(payload if payload is not None else body(), ensure_ascii=False).encode()
        response = await client.post(route, data=raw, headers=hdrs if hdrs is not None else headers())
        text = await response.text()
        assert response.status == status, text
        assert json.loads(text) == {"error": {"code": code}}, text
        assert proxy.requests == [], f"OpenSearch was asked: {proxy.requests}"
        return json.loads(text)

    post.client = client  # type: ignore[attr-defined]
    return post


DENIED = "KNOWLEDGE_ACCESS_DENIED"
PROTOCOL = "KNOWLEDGE_PROTOCOL_ERROR"


# --- credentials and binding ---

@pytest.mark.parametrize("authorization", [None, "", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "Bearer a b",
                                           "Bearer wrong-secret", f"Token {CALLBACK_SECRET}", CALLBACK_SECRET])
async def test_missing_or_bad_credential_is_401(assert_refused, authorization) -> None:
    await assert_refused(401, DENIED, hdrs=headers(Authorization=authorization))


async def test_credential_of_another_knowledge_base_is_403(assert_refused) -> None:
    await assert_refused(403, DENIED, hdrs=headers(Authorization="Bearer other-secret"))


async def test_unknown_unpublished_and_unbound_look_the_same(assert_refused) -> None:
    unknown = await assert_refused(403, DENIED, route="/agent/knowledge/no-such-kb/1.0.0",
                           payload=body(knowledgeId="no-such-kb"))
    unpublished = await assert_refused(403, DENIED, route="/agent/knowledge/project-documents/2.0.0",
                               payload=body(version="2.0.0"))
    unbound = await assert_refused(403, DENIED, payload=body(appId="app-2", filters={**body()["filters"], "appId": "app-2"}))
    assert unknown == unpublished == unbound


# --- body ---

@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b'{"a": 1, "a": 1}', "duplicate top-level key"),
        (json.dumps(body()).replace('"required"', '"required": [], "required"', 1).encode(), "duplicate nested key"),
        (json.dumps(body()).replace('"query": "installation"', '"query": "x", "query": "installation"').encode(),
         "duplicate field"),
        (json.dumps(body()).encode() + b"{}", "trailing JSON"),
        (json.dumps(body()).encode() + b"\x00", "trailing bytes"),
        (b"[" + json.dumps(body()).encode() + b"]", "array top level"),
        (b"null", "null top level"),
        (json.dumps(body(query="caf\u00e9")).encode().replace(b"caf\\u00e9", b"caf\xe9"), "invalid UTF-8"),
        (json.dumps(body()).replace('"topK": 3', '"topK": NaN').encode(), "NaN"),
        (b"", "empty body"),
    ],
)
async def test_malformed_bodies_are_400(assert_refused, raw: bytes, why: str) -> None:
    await assert_refused(400, PROTOCOL, data=raw)


async def test_body_over_the_limit_is_413(assert_refused) -> None:
    big = body(trustedContext={"pad": "x" * 70_000})
    await assert_refused(413, PROTOCOL, payload=big)


async def test_chunked_body_over_the_limit_is_413(assert_refused) -> None:
    async def chunks():
        yield json.dumps(body())[:-1].encode() + b', "pad": "'
        for _ in range(100):
            yield b"x" * 1024
        yield b'"}'

    response = await assert_refused.client.post(ROUTE, data=chunks(), headers=headers())
    assert response.status == 413
    assert await response.json() == {"error": {"code": PROTOCOL}}


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "application/json; charset=latin-1", "application/jsonx"])
async def test_wrong_content_type_is_415(assert_refused, content_type) -> None:
    await assert_refused(415, PROTOCOL, hdrs=headers(**{"Content-Type": content_type}))


async def test_json_with_utf8_charset_is_accepted(assert_refused, proxy) -> None:
    response = await assert_refused.client.post(ROUTE, data=json.dumps(body()),
                                        headers=headers(**{"Content-Type": "application/json; charset=utf-8"}))
    # It passes every check and reaches the engine (whose alias does not exist here → 503).
    assert response.status == 503
    assert proxy.requests


# --- fields ---

FIELDS = ["protocolVersion", "appId", "subjectId", "tenantId", "knowledgeId", "version", "query", "topK",
          "filters", "runId", "traceId", "executionId", "deadline", "trustedContext"]


@pytest.mark.parametrize("field", FIELDS)
async def test_each_missing_field_is_400(assert_refused, field: str) -> None:
    request = body()
    del request[field]
    await assert_refused(400, PROTOCOL, payload=request)


@pytest.mark.parametrize("field", ["appId", "subjectId", "tenantId", "required"])
async def test_each_missing_filters_field_is_400(assert_refused, field: str) -> None:
    request = body()
    del request["filters"][field]
    await assert_refused(400, PROTOCOL, payload=request)


@pytest.mark.parametrize(
    "changes",
    [
        {"extra": 1},
        {"filters": {**body()["filters"], "extra": True}},
        {"protocolVersion": "1.1"}, {"protocolVersion": 1.0}, {"protocolVersion": None},
        {"topK": "3"}, {"topK": True}, {"topK": 3.0}, {"topK": 0}, {"topK": 11}, {"topK": -1}, {"topK": None},
        {"deadline": "9999999999999"}, {"deadline": True}, {"deadline": 1.5e12}, {"deadline": None},
        {"query": ""}, {"query": 5}, {"query": None}, {"query": ["installation"]},
        {"query": "设" * 16385},
        {"appId": ""}, {"appId": "a" * 129}, {"appId": 1},
        {"subjectId": ""}, {"subjectId": "s" * 129}, {"subjectId": None},
        {"tenantId": "t" * 129}, {"tenantId": 7},
        {"knowledgeId": 1}, {"version": ""},
        {"runId": ""}, {"runId": "r" * 129}, {"traceId": ""}, {"traceId": "t" * 129},
        {"executionId": ""}, {"executionId": "e" * 129}, {"executionId": 5},
        {"trustedContext": []}, {"trustedContext": "x"}, {"trustedContext": None},
        {"filters": []}, {"filters": None},
        {"filters": {**body()["filters"], "required": "TENANT"}},
        {"filters": {**body()["filters"], "required": ["TENANT", "SUBJECT", "OWNER"]}},
        {"filters": {**body()["filters"], "required": [1]}},
    ],
    ids=lambda c: json.dumps(c)[:60],
)
async def test_wrong_type_range_or_extra_field_is_400(assert_refused, changes) -> None:
    request = body(**changes)
    await assert_refused(400, PROTOCOL, payload=request,
                 hdrs=headers(**{"Idempotency-Key": str(request.get("executionId") or "x")}))


@pytest.mark.parametrize(
    "changes",
    [
        {"knowledgeId": "other-kb"},
        {"version": "2.0.0"},
        {"filters": {**body()["filters"], "appId": "app-2"}},
        {"filters": {**body()["filters"], "subjectId": "u-bob"}},
        {"filters": {**body()["filters"], "tenantId": "team-b"}},
        {"filters": {**body()["filters"], "tenantId": None}},
        {"filters": {**body()["filters"], "required": ["TENANT", "SUBJECT", "TENANT"]}},
        {"filters": {**body()["filters"], "required": ["TENANT"]}},
        {"filters": {**body()["filters"], "required": []}},
    ],
    ids=lambda c: json.dumps(c)[:70],
)
async def test_inconsistent_fields_are_400(assert_refused, changes) -> None:
    await assert_refused(400, PROTOCOL, payload=body(**changes))


@pytest.mark.parametrize("key", [None, "", "exec-2", "EXEC-1"])
async def test_idempotency_key_must_equal_execution_id(assert_refused, key) -> None:
    await assert_refused(400, PROTOCOL, hdrs=headers(**{"Idempotency-Key": key}))


@pytest.mark.parametrize(
    ("deadline", "status", "code"),
    [
        (lambda now: now - 1, 504, "KNOWLEDGE_TIMED_OUT"),
        (lambda now: now - 3_600_000, 504, "KNOWLEDGE_TIMED_OUT"),
        (lambda now: now + 10, 504, "KNOWLEDGE_TIMED_OUT"),
        (lambda now: -1, 400, PROTOCOL),
        (lambda now: now + 11 * 60_000, 400, PROTOCOL),
    ],
)
async def test_deadlines(assert_refused, deadline, status, code) -> None:
    await assert_refused(status, code, payload=body(deadline=deadline(int(time.time() * 1000))))


# --- signature mode ---

def signed(payload: dict[str, Any], *, secret: str = CALLBACK_SECRET, ts: int | None = None) -> tuple[bytes, dict]:
    raw = json.dumps(payload).encode()
    timestamp = str(ts if ts is not None else int(time.time()))
    signature = hmac.new(secret.encode(), timestamp.encode() + b"." + raw, hashlib.sha256).hexdigest()
    return raw, headers(**{"X-Knowledge-Timestamp": timestamp, "X-Knowledge-Signature": signature})


SIGNED_ROUTE = "/agent/knowledge/signed-kb/1.0.0"


def signed_body() -> dict[str, Any]:
    return body(knowledgeId="signed-kb")


@pytest.mark.parametrize(
    "mutate",
    [
        lambda raw, h: (raw, {k: v for k, v in h.items() if k != "X-Knowledge-Signature"}),
        lambda raw, h: (raw, {k: v for k, v in h.items() if k != "X-Knowledge-Timestamp"}),
        lambda raw, h: (raw, {**h, "X-Knowledge-Signature": "0" * 64}),
        lambda raw, h: (raw.replace(b"installation", b"installatioN"), h),
        lambda raw, h: (raw, {**h, "X-Knowledge-Timestamp": str(int(h["X-Knowledge-Timestamp"]) + 1)}),
    ],
    ids=["no signature", "no timestamp", "wrong signature", "body changed", "timestamp changed"],
)
async def test_bad_signature_is_401(assert_refused, mutate) -> None:
    raw, h = mutate(*signed(signed_body()))
    await assert_refused(401, DENIED, data=raw, hdrs=h, route=SIGNED_ROUTE)


async def test_expired_signature_is_401(assert_refused) -> None:
    raw, h = signed(signed_body(), ts=int(time.time()) - 301)
    await assert_refused(401, DENIED, data=raw, hdrs=h, route=SIGNED_ROUTE)


async def test_replayed_signature_is_401(assert_refused, proxy) -> None:
    raw, h = signed(signed_body())
    first = await assert_refused.client.post(SIGNED_ROUTE, data=raw, headers=h)
    assert first.status == 503  # accepted; the alias does not exist in this test
    proxy.requests.clear()
    await assert_refused(401, DENIED, data=raw, hdrs=h, route=SIGNED_ROUTE)


# --- routing ---

@pytest.mark.parametrize(("method", "path", "status"), [("GET", ROUTE, 405), ("PUT", ROUTE, 405),
                                                         ("POST", "/agent/knowledge/project-documents", 404)])
async def test_routing_refusals_use_the_protocol_body(assert_refused, method, path, status) -> None:
    response = await assert_refused.client.request(method, path, data=json.dumps(body()), headers=headers())
    assert response.status == status
    assert await response.json() == {"error": {"code": PROTOCOL}}
