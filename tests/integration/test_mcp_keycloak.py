"""The MCP endpoint with a real identity provider: Keycloak (scripts/keycloak-local), its realm, clients, audience
mapper, users and groups made through its admin REST API (helpers/keycloak.py). Its tokens — password grants for
three users in different groups, client credentials for a machine — drive the official SDK client against the
permission oracle; its attacks are refused with no fragment of the token anywhere; its signing key rotates mid-run
with no failed request; a user it disables is refused."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from helpers import acl_corpus
from helpers import keycloak as kc
from helpers.setup import TEST_ENV, load_records, settings_for
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from es_provider.config.mcp import McpSettings
from es_provider.identity.tokens import TokenRefused, TokenVerifier
from es_provider.web.app import create_app
from harness.proxy import EngineProxy

RESOURCE = "http://127.0.0.1:8080/mcp"
JSON = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
# The corpus's users, their groups in Keycloak (the token's groups claim is all the service knows of them here),
# and their tenants.
USERS = [kc.User("u-alice", "alice-pass", ("eng",), "team-a"), kc.User("u-bob", "bob-pass", ("sales",), "team-b"),
         kc.User("u-carol", "carol-pass", ("eng", "ops"), "team-c")]
MACHINE = "service-account-mcp-machine"


@pytest.fixture(scope="module")
def realm(keycloak: Any) -> Iterator[kc.Realm]:
    made = kc.make_realm(keycloak, f"mcp-{uuid.uuid4().hex[:8]}", RESOURCE)
    for group in ("eng", "sales", "ops"):
        kc.add_group(made, group)
    kc.add_users(made, USERS)
    machine = kc.user_id(made, MACHINE)  # the machine acts as a user of its own, in tenant team-a, group ops
    user = made.admin("GET", f"/users/{machine}").json()
    made.admin("PUT", f"/users/{machine}", {**user, "attributes": {**user.get("attributes", {}), "tenant": ["team-a"]}})
    made.admin("PUT", f"/users/{machine}/groups/{made.groups['ops']}")
    yield made
    kc.delete_realm(made)


def mcp_settings(realm: kc.Realm, kb: Any, **issuer: Any) -> dict[str, Any]:
    return {"enabled": True, "resource": RESOURCE, "knowledge": [kb.id], "scopes": ["knowledge.read"],
            "issuers": [{"issuer": realm.issuer, "subject_claim": "preferred_username", "tenant_claim": "tenant",
                         "groups_claim": "groups", **issuer}]}


@pytest.fixture
async def served(engine: Any, kb: Any, opensearch: Any, realm: kc.Realm) -> AsyncIterator[TestClient[Any, Any]]:
    await load_records(engine, kb, acl_corpus.documents())
    settings = settings_for(opensearch.url, kb, principals={}, mcp=mcp_settings(realm, kb))
    client: TestClient[Any, Any] = TestClient(TestServer(create_app(settings, environ=TEST_ENV)))
    await client.start_server()
    yield client
    await client.close()


async def documents_seen(url: str, token: str) -> tuple[set[str], set[str]]:
    """Through the SDK client: the documents `retrieve` answers, and those `fetch` reads of every corpus id."""
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http, \
            streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        assert len((await session.list_tools()).tools) == 4
        bases = await session.call_tool("list_knowledge_bases", {})
        kb_id = bases.structured_content["knowledge_bases"][0]["id"]  # type: ignore[index]
        retrieved = await session.call_tool("retrieve", {"query": "alpha", "top_k": 20})
        assert not retrieved.is_error
        found = await session.call_tool("search", {"query": "alpha installation"})
        assert not found.is_error
        fetched = set()
        for document in {d["document_id"] for d in acl_corpus.documents()}:
            answer = await session.call_tool("fetch", {"id": f"{kb_id}/{document}"})
            if not answer.is_error:
                fetched.add(document)
        return {c["document_id"] for c in retrieved.structured_content["chunks"]}, fetched  # type: ignore[index]


async def test_three_users_and_a_machine_see_what_the_oracle_allows(served: TestClient[Any, Any],
                                                                    realm: kc.Realm) -> None:
    url = str(served.make_url("/mcp"))
    for user in USERS:
        token = kc.password_token(realm, user.username, user.password)
        retrieved, fetched = await documents_seen(url, token)
        assert retrieved == fetched == acl_corpus.visible(user.username, user.tenant), user.username
    token = kc.client_token(realm, kc.MACHINE_CLIENT, realm.machine_secret)
    groups = {"ops"}  # the oracle's reading for a subject of its own with these groups
    want = {d["document_id"] for d in acl_corpus.documents()
            if acl_corpus.oracle.visible(d, MACHINE, {"team-a"}, groups, acl_corpus.oracle.BOTH)}
    assert await documents_seen(url, token) == (want, want)


def b64_json(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(value)).rstrip(b"=").decode()


def fragments(token: str, size: int = 20) -> list[str]:
    return [token[i:i + size] for i in range(0, max(1, len(token) - size), size)]


async def test_attacks_with_keycloak_tokens_are_refused_and_leave_no_trace(
        served: TestClient[Any, Any], realm: kc.Realm, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    good = kc.password_token(realm, "u-alice", "alice-pass")
    header, payload, signature = good.split(".")
    forged_payload = b64_json({**kc.decode_unverified(good), "groups": ["eng", "ops", "sales"]})
    attacks = {
        "another client's token (no audience)": kc.password_token(realm, "u-alice", "alice-pass",
                                                                  client_id=kc.OTHER_CLIENT),
        "payload tampered": f"{header}.{forged_payload}.{signature}",
        "signature tampered": f"{header}.{payload}.{signature[:10]}{'A' if signature[10] != 'A' else 'B'}"
                              f"{signature[11:]}",
        "unknown kid": ".".join([b64_json({**kc.unverified_header(good), "kid": "no-such-key"}), payload,
                                 signature]),
    }
    for name, token in attacks.items():
        response = await served.post("/mcp", data=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
                                     headers={**JSON, "Authorization": f"Bearer {token}"})
        assert response.status == 401, name
        assert response.headers["WWW-Authenticate"].startswith('Bearer error="invalid_token", resource_metadata='), name
        assert b"tools" not in await response.read(), name
    in_query = await served.post(f"/mcp?access_token={good}", data=b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
                                 headers=JSON)
    assert in_query.status == 401
    # Every log line but aiohttp's own access log, which `es-provider serve` turns off (access_log=None) and which
    # only this test server writes.
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name != "aiohttp.access")
    assert "a token in the query string" in logged
    for token in [*attacks.values(), good]:
        assert not any(part in logged for part in fragments(token)), "a fragment of a token reached the log"


async def test_a_key_rotation_mid_run_fails_no_request(served: TestClient[Any, Any], realm: kc.Realm) -> None:
    failures: list[int] = []

    async def ask() -> None:
        token = await asyncio.to_thread(kc.password_token, realm, "u-bob", "bob-pass")
        response = await served.post("/mcp", data=orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                                                "params": {"name": "retrieve",
                                                                           "arguments": {"query": "alpha"}}}),
                                     headers={**JSON, "Authorization": f"Bearer {token}"})
        if response.status != 200 or (await response.json())["result"]["isError"]:
            failures.append(response.status)

    kids_before = {kc.unverified_header(kc.password_token(realm, "u-bob", "bob-pass"))["kid"]}
    for round_ in range(30):
        await asyncio.gather(ask(), ask())
        if round_ == 10:
            await asyncio.to_thread(kc.rotate_key, realm)
    kid_after = kc.unverified_header(kc.password_token(realm, "u-bob", "bob-pass"))["kid"]
    assert kid_after not in kids_before  # the run did cross a rotation
    assert failures == []


async def test_a_user_disabled_in_keycloak_gets_no_new_token(
        served: TestClient[Any, Any], realm: kc.Realm) -> None:
    kc.add_users(realm, [kc.User("u-erin", "erin-pass", ("eng",), "team-a")])
    token = kc.password_token(realm, "u-erin", "erin-pass")
    kc.set_user_enabled(realm, "u-erin", False)
    with pytest.raises(kc.TokenRefused):
        kc.password_token(realm, "u-erin", "erin-pass")
    # A token issued before is still valid at the issuer for its lifetime: the principal store is what revokes in
    # seconds (test_mcp_live_identities.py shows it on two instances).
    response = await served.post("/mcp", data=b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
                                 headers={**JSON, "Authorization": f"Bearer {token}"})
    assert response.status == 200


async def test_keycloak_unreachable_cached_keys_serve_until_their_bound(engine: Any, kb: Any, opensearch: Any,
                                                                        realm: kc.Realm) -> None:
    """Keycloak's keys are reached through a proxy here, so that the test can cut the service off from the shared
    Keycloak (as a stopped one) without stopping it for the tests beside it."""
    await load_records(engine, kb, acl_corpus.documents())
    proxy = await EngineProxy(realm.kc.url).start()
    jwks_uri = realm.jwks_uri.replace(realm.kc.url, proxy.url)
    settings = settings_for(opensearch.url, kb, principals={}, mcp=mcp_settings(realm, kb, jwks_uri=jwks_uri,
                                                                                  keys_max_age_s=10))
    client: TestClient[Any, Any] = TestClient(TestServer(create_app(settings, environ=TEST_ENV)))
    await client.start_server()
    fetched = time.monotonic()  # the keys were fetched at start, before this
    token = kc.password_token(realm, "u-alice", "alice-pass")
    _, payload, signature = token.split(".")
    unknown_kid = ".".join([b64_json({**kc.unverified_header(token), "kid": "rotated-while-away"}), payload,
                            signature])

    async def ask(bearer: str) -> Any:
        return await client.post("/mcp", data=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
                                 headers={**JSON, "Authorization": f"Bearer {bearer}"})

    try:
        assert (await ask(token)).status == 200
        assert (await client.get("/readyz")).status == 200
        await proxy.close()  # Keycloak cannot be reached from here on
        assert (await ask(token)).status == 200  # the cached keys keep serving
        refused = await ask(unknown_kid)  # a key it cannot fetch: 401 with the challenge, never a 500
        assert refused.status == 401 and refused.headers["WWW-Authenticate"].startswith('Bearer error="invalid_token"')
        assert (await client.get("/readyz")).status == 200  # the keys it has are still within their bound
        await asyncio.sleep(max(0.0, fetched + 10.5 - time.monotonic()))
        assert (await ask(token)).status == 401  # past keys_max_age_s: nothing verifies
        ready = await client.get("/readyz")
        assert ready.status == 503 and "mcp_issuers" in (await ready.json())["reasons"]
    finally:
        await client.close()


async def test_keycloak_answers_our_introspection(realm: kc.Realm) -> None:
    """The introspection path speaks Keycloak's RFC 7662 endpoint: Basic auth with the resource URL as the client id
    (form-encoded), the token active with its claims; a token for another client's audience inactive. (Keycloak's
    access tokens are JWTs, which the endpoint verifies with its keys: introspection is for opaque ones.)"""
    settings = McpSettings.model_validate({
        "enabled": True, "resource": RESOURCE, "knowledge": ["any"], "issuers": [{
            "issuer": realm.issuer, "introspection_endpoint": realm.introspection_endpoint, "client_id": RESOURCE,
            "client_secret_ref": "RESOURCE_SECRET", "subject_claim": "preferred_username"}]}, strict=False)
    verifier = TokenVerifier(settings, {"RESOURCE_SECRET": realm.resource_secret})
    try:
        claims, _ = await verifier._introspect(kc.password_token(realm, "u-carol", "carol-pass"))
        assert (claims["active"], claims["preferred_username"], claims["tenant"]) == (True, "u-carol", "team-c")
        with pytest.raises(TokenRefused):
            await verifier._introspect(kc.password_token(realm, "u-carol", "carol-pass", client_id=kc.OTHER_CLIENT))
    finally:
        await verifier.close()
