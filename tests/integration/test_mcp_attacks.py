"""Token attacks on the MCP endpoint, over HTTP: each refused before the body is read, with the right status and
`WWW-Authenticate` challenge, no content, its reason in the log, and no fragment of the token in any log line,
header or body. Tokens come from the tests' own issuer (helpers/local_issuer.py), which can sign exactly the forgery
each attack needs; Keycloak's own (test_mcp_keycloak.py) are refused the same way. Also: a user the principal store
has deactivated is refused with a valid token."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from helpers import acl_corpus
from helpers.local_issuer import LocalIssuer, hs256_with_public_key, unsigned
from helpers.scim_calls import SCIM, TOKEN, USER
from helpers.setup import TEST_ENV, load_records, settings_for

from es_provider.web.app import create_app

RESOURCE = "http://127.0.0.1:8080/mcp"
METADATA = 'resource_metadata="http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp"'
JSON = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
LIST = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'


@pytest.fixture
async def issuers() -> AsyncIterator[tuple[LocalIssuer, LocalIssuer, LocalIssuer]]:
    """Ours, one not configured, and a second entry of ours (same keys) whose users name no tenant."""
    ours, theirs = await LocalIssuer().start(), await LocalIssuer().start()
    yield ours, theirs, LocalIssuer(keys=ours.keys, url=f"{ours.url}/tenantless")
    await ours.close()
    await theirs.close()


@pytest.fixture
async def served(engine: Any, kb: Any, opensearch: Any, store: str,
                 issuers: tuple[LocalIssuer, LocalIssuer, LocalIssuer]) -> AsyncIterator[TestClient[Any, Any]]:
    await load_records(engine, kb, acl_corpus.documents())
    ours, _, tenantless = issuers
    settings = settings_for(opensearch.url, kb, principals=acl_corpus.GROUPS, mcp={
        "enabled": True, "resource": RESOURCE, "knowledge": [kb.id], "scopes": ["knowledge.read"],
        "issuers": [{"issuer": ours.url, "tenant_claim": "tenant"},
                    {"issuer": tenantless.url, "jwks_uri": ours.url.removesuffix("/issuer") + "/jwks"}]},
        scim={"enabled": True, "token_ref": "SCIM_TOKEN"}, directory={"index": store})
    client: TestClient[Any, Any] = TestClient(TestServer(create_app(settings, environ={**TEST_ENV,
                                                                                       "SCIM_TOKEN": TOKEN})))
    await client.start_server()
    yield client
    await client.close()


def forged(issuer: LocalIssuer, token: str) -> str:
    """A middle character of the payload changed: the signature no longer matches (never the last character,
    whose padding bits may leave the bytes as they were)."""
    header, payload, signature = token.split(".")
    middle = len(payload) // 2
    return f"{header}.{payload[:middle]}{'A' if payload[middle] != 'A' else 'B'}{payload[middle + 1:]}.{signature}"


async def test_every_attack_is_refused_with_its_challenge_and_leaves_no_trace(
        served: TestClient[Any, Any], issuers: tuple[LocalIssuer, LocalIssuer, LocalIssuer], kb: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    ours, theirs, tenantless = issuers
    now = int(time.time())
    good = ours.claims("u-alice", RESOURCE, tenant="team-a")
    attacks: dict[str, tuple[str, int, str]] = {  # name → (token, status, the challenge's error)
        "expired": (ours.token({**good, "iat": now - 900, "exp": now - 600}), 401, "invalid_token"),
        "not yet valid": (ours.token({**good, "nbf": now + 600}), 401, "invalid_token"),
        "another audience": (ours.token({**good, "aud": "https://other.example.com/api"}), 401, "invalid_token"),
        "a token for another resource": (ours.token({**good, "aud": "http://127.0.0.1:8080/other-mcp"}), 401,
                                         "invalid_token"),
        "another issuer": (theirs.token({**good, "iss": theirs.url}), 401, "invalid_token"),
        "another issuer's key, our iss": (theirs.token(good), 401, "invalid_token"),
        "alg none": (unsigned(good, ours.signing.kid), 401, "invalid_token"),
        "HS256 with the public key": (hs256_with_public_key(good, ours.signing), 401, "invalid_token"),
        "an unknown kid": (ours.token(good, headers={"kid": "no-such-key"}), 401, "invalid_token"),
        "payload tampered": (forged(ours, ours.token(good)), 401, "invalid_token"),
        "no subject claim": (ours.token({k: v for k, v in good.items() if k != "sub"}), 401, "invalid_token"),
        "no tenant claim": (ours.token({k: v for k, v in good.items() if k != "tenant"}), 401, "invalid_token"),
        "no tenant where TENANT is mandatory": (tenantless.token({**good, "iss": tenantless.url}), 401,
                                                "invalid_token"),
        "scope missing": (ours.token({**good, "scope": "profile email"}), 403, "insufficient_scope"),
        "not a JWT": ("opaque-token-with-no-introspection-0123456789", 401, "invalid_token"),
    }
    assert kb.mandatory_filters  # the corpus base requires TENANT and SUBJECT
    caplog.set_level(logging.DEBUG)
    for name, (token, status, error) in attacks.items():
        caplog.clear()
        response = await served.post("/mcp", data=LIST, headers={**JSON, "Authorization": f"Bearer {token}"})
        body = await response.read()
        assert response.status == status, (name, body)
        challenge = response.headers["WWW-Authenticate"]
        assert challenge.startswith(f'Bearer error="{error}", {METADATA}'), (name, challenge)
        if status == 403:
            assert challenge.endswith('scope="knowledge.read"'), challenge
        assert b"tools" not in body and orjson.loads(body)["error"]["message"] in ("Unauthorized.", "Forbidden."), name
        reasons = [r.getMessage() for r in caplog.records if r.name == "es_provider.app"]
        assert len(reasons) == 1 and reasons[0].startswith("refused /mcp: KNOWLEDGE_ACCESS_DENIED"), (name, reasons)
        seen = "\n".join([*(r.getMessage() for r in caplog.records if r.name != "aiohttp.access"), challenge,
                          body.decode()])
        assert not any(token[i:i + 16] in seen for i in range(0, len(token) - 16, 8)), name
    in_query = await served.post(f"/mcp?access_token={ours.token(good)}", data=LIST, headers=JSON)
    assert in_query.status == 401 and in_query.headers["WWW-Authenticate"].startswith('Bearer error="invalid_request"')
    missing = await served.post("/mcp", data=LIST, headers=JSON)
    assert missing.status == 401 and missing.headers["WWW-Authenticate"] == f"Bearer {METADATA}"
    accepted = await served.post("/mcp", data=LIST, headers={**JSON, "Authorization": f"Bearer {ours.token(good)}"})
    assert accepted.status == 200


async def test_refused_before_the_body_is_read(served: TestClient[Any, Any]) -> None:
    """A body larger than the limit is not read for a bad token: the 401 comes, not the 413."""
    big = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' + b"x" * 200_000 + b'"}}'
    refused = await served.post("/mcp", data=big, headers={**JSON, "Authorization": "Bearer not-a-token"})
    assert refused.status == 401


async def test_a_user_the_store_deactivated_is_refused_with_a_valid_token(
        served: TestClient[Any, Any], issuers: tuple[LocalIssuer, LocalIssuer, LocalIssuer]) -> None:
    ours, _, _ = issuers
    token = ours.mint("u-frank", RESOURCE, tenant="team-a")
    auth = {**JSON, "Authorization": f"Bearer {token}"}
    call = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                         "params": {"name": "retrieve", "arguments": {"query": "alpha"}}})
    assert (await served.post("/mcp", data=call, headers=auth)).status == 200
    made = await served.post("/scim/v2/Users", headers=SCIM, data=orjson.dumps({
        "schemas": [USER], "userName": "u-frank", "active": False}))
    assert made.status == 201, await made.text()
    deadline = time.monotonic() + 5
    while (answer := await served.post("/mcp", data=call, headers=auth)).status == 200:
        assert time.monotonic() < deadline, "still served 5 s after the deactivation"
    assert answer.status == 401 and answer.headers["WWW-Authenticate"].startswith('Bearer error="invalid_token"')
