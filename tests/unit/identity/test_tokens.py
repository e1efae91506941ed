"""identity/tokens.py: access tokens checked as a resource server does, against an issuer the test runs on the
loopback address (helpers/local_issuer.py). A good RS256 or ES256 token names its caller; every attack and every
malformed token is refused (401 invalid_token, 403 insufficient_scope for a missing scope) with a reason that holds no
fragment of the token; a rotated key verifies after one more fetch, forged key ids cost the issuer at most one fetch
per MIN_REFETCH_S, and cached keys keep verifying while the issuer is down, until keys_max_age_s."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import jwt
import pytest
from helpers.local_issuer import LocalIssuer, SigningKey, hs256_with_public_key, new_key, unsigned

from es_provider.config.mcp import McpIssuer, McpSettings
from es_provider.identity import tokens
from es_provider.identity.tokens import (
    MAX_TOKEN_BYTES,
    MIN_REFETCH_S,
    REFRESH_S,
    IssuerKeys,
    TokenRefused,
    TokenVerifier,
    signing_keys,
)

RESOURCE = "http://127.0.0.1:8080/mcp"


# --- signing_keys, pure ---

def _rsa() -> dict[str, Any]:
    return new_key("RS256").jwk()


def _ec() -> dict[str, Any]:
    return new_key("ES256").jwk()


def _without(jwk: dict[str, Any], name: str) -> dict[str, Any]:
    return {k: v for k, v in jwk.items() if k != name}


@pytest.mark.parametrize(("entry", "alg"), [
    pytest.param(_rsa(), "RS256", id="rsa"),
    pytest.param(_without(_rsa(), "alg"), "RS256", id="rsa-without-alg"),
    pytest.param(_without(_rsa(), "use"), "RS256", id="rsa-without-use"),
    pytest.param(_ec(), "ES256", id="ec"),
    pytest.param({**_rsa(), "use": "enc"}, None, id="encryption-key"),
    pytest.param(_without(_rsa(), "kid"), None, id="no-kid"),
    pytest.param({**_rsa(), "kid": 7}, None, id="kid-not-a-string"),
    pytest.param({"kty": "oct", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQ", "kid": "h", "alg": "HS256"}, None, id="hmac-oct"),
    pytest.param({**_rsa(), "alg": "HS256"}, None, id="rsa-named-hs256"),
    pytest.param({**_rsa(), "n": "!!"}, None, id="unreadable-rsa"),
    pytest.param({**_ec(), "crv": "P-999"}, None, id="unreadable-ec"),
    pytest.param(_without(_ec(), "x"), None, id="ec-without-x"),
    pytest.param({**_ec(), "alg": "RS256"}, None, id="ec-named-rs256"),
    pytest.param({"kid": "x"}, None, id="no-kty"),
    pytest.param("not a key", None, id="not-a-mapping"),
])
def test_signing_keys(entry: Any, alg: str | None) -> None:
    keys = signing_keys({"keys": [entry, _rsa()]})  # a good key beside: one bad entry spoils nothing else
    assert len(keys) == (2 if alg is not None else 1)
    if alg is not None:
        assert keys[entry["kid"]].algorithm_name == alg


@pytest.mark.parametrize("document", [None, [], "keys", {"keys": {}}, {"keys": None}, {"nokeys": []}])
def test_signing_keys_refuse_what_is_no_jwk_set(document: Any) -> None:
    with pytest.raises(ValueError, match="not a JWK set"):
        signing_keys(document)


# --- the verifier against a local issuer ---

class Clock:
    """The keys' clock, put forward at will (IssuerKeys takes a clock; the verifier makes its own)."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.ahead


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    shared = Clock()

    class ClockedKeys(IssuerKeys):
        def __init__(self, issuer: McpIssuer, session: Callable[[], aiohttp.ClientSession]) -> None:
            super().__init__(issuer, session, clock=shared)

    monkeypatch.setattr(tokens, "IssuerKeys", ClockedKeys)
    return shared


Verifier = Callable[..., Awaitable[TokenVerifier]]


@pytest.fixture
async def verifier_for() -> AsyncIterator[Verifier]:
    """A started verifier of one issuer (closed at the end)."""
    made: list[TokenVerifier] = []

    async def make(issuer: LocalIssuer, scopes: list[str] | None = None, **fields: Any) -> TokenVerifier:
        settings = McpSettings.model_validate({"enabled": True, "resource": RESOURCE, "knowledge": ["kb"],
                                               "scopes": scopes or [], "issuers": [{"issuer": issuer.url, **fields}]})
        verifier = TokenVerifier(settings, {})
        made.append(verifier)
        await verifier.start()
        return verifier

    yield make
    for verifier in made:
        await verifier.close()


def assert_no_fragment(refused: TokenRefused, token: str) -> None:
    said = " ".join([refused.reason, str(refused), *map(str, refused.args)])
    for i in range(max(len(token) - 19, 0)):
        assert token[i:i + 20] not in said, f"the reason {refused.reason!r} holds a fragment of the token"


async def refused_by(verifier: TokenVerifier, token: str) -> TokenRefused:
    with pytest.raises(TokenRefused) as caught:
        await verifier.caller(token)
    assert_no_fragment(caught.value, token)
    return caught.value


@pytest.mark.parametrize("alg", ["RS256", "ES256"])
async def test_a_good_token_names_its_caller(issuer: LocalIssuer, verifier_for: Verifier, alg: str) -> None:
    if alg == "ES256":
        issuer.rotate("ES256")  # published before the first fetch: the ES256 key signs
    verifier = await verifier_for(issuer, scopes=["knowledge.read"])
    token = issuer.mint("alice", RESOURCE, aud=[RESOURCE, "account"])
    assert issuer.signing.alg == alg and token.count(".") == 2
    caller = await verifier.caller(token)
    assert (caller.issuer, caller.subject, caller.client, caller.tenant) == (issuer.url, "alice", "test-agent", None)
    assert caller.scopes == {"knowledge.read"}
    assert issuer.jwks_requests == 1 and verifier.problems() == []


async def test_exp_within_the_leeway_still_verifies(issuer: LocalIssuer, verifier_for: Verifier) -> None:
    verifier = await verifier_for(issuer)
    now = int(time.time())
    assert (await verifier.caller(issuer.mint("alice", RESOURCE, exp=now - 10, nbf=now + 10))).subject == "alice"


def _tampered(token: str) -> str:
    header, payload, signature = token.split(".")
    middle = len(payload) // 2
    swapped = "B" if payload[middle] != "B" else "C"
    return ".".join([header, payload[:middle] + swapped + payload[middle + 1:], signature])


def _claims(issuer: LocalIssuer, **changes: Any) -> dict[str, Any]:
    claims = issuer.claims("alice", RESOURCE)
    claims.update(changes)
    return {k: v for k, v in claims.items() if v is not None}


ANOTHER = "http://127.0.0.1:9/other"  # a second issuer, not configured (never reached)
Make = Callable[[LocalIssuer], str]
REFUSALS: list[tuple[str, Make, str]] = [
    ("expired", lambda i: i.token(_claims(i, exp=int(time.time()) - 60)), "ExpiredSignatureError"),
    ("nbf-in-the-future", lambda i: i.token(_claims(i, nbf=int(time.time()) + 120)), "ImmatureSignatureError"),
    ("another-audience", lambda i: i.mint("alice", "https://other.example.com/mcp"), "InvalidAudienceError"),
    ("an-audience-list-without-ours", lambda i: i.mint("alice", RESOURCE, aud=["a", "b"]), "InvalidAudienceError"),
    ("no-exp", lambda i: i.token(_claims(i, exp=None)), "MissingRequiredClaimError"),
    ("no-aud", lambda i: i.token(_claims(i, aud=None)), "MissingRequiredClaimError"),
    ("another-issuer", lambda i: LocalIssuer(url=ANOTHER).mint("alice", RESOURCE), "issuer not configured"),
    ("no-iss", lambda i: i.token(_claims(i, iss=None)), "issuer not configured"),
    ("alg-none", lambda i: unsigned(_claims(i), i.signing.kid), "algorithm 'none'"),
    ("hs256-with-the-public-key", lambda i: hs256_with_public_key(_claims(i), i.signing), "algorithm 'HS256'"),
    ("rs384-with-an-rs256-key", lambda i: i.token(_claims(i), key=SigningKey(i.signing.kid, "RS384",
                                                                            i.signing.private)),
     "algorithm RS384 is not its key's"),
    ("our-kid-another-key", lambda i: i.token(_claims(i), key=SigningKey(i.signing.kid, "RS256",
                                                                        new_key().private)),
     "InvalidSignatureError"),
    ("no-kid", lambda i: jwt.encode(_claims(i), i.signing.private, algorithm="RS256"), "no key id"),
    ("unknown-kid", lambda i: i.token(_claims(i), key=new_key()), "signed by a key the issuer does not list"),
    ("tampered-payload", lambda i: _tampered(i.mint("alice", RESOURCE)),
     "not a readable JWT|InvalidSignatureError|issuer not configured"),
    ("tampered-signature", lambda i: i.mint("alice", RESOURCE)[:-6] + "AAAAAA", "InvalidSignatureError"),
    ("no-subject", lambda i: i.token(_claims(i, sub=None)), "no subject claim sub"),
    ("an-empty-subject", lambda i: i.token(_claims(i, sub="")), "no subject claim sub"),
    ("longer-than-16-KiB", lambda i: i.mint("alice", RESOURCE, padding="x" * MAX_TOKEN_BYTES),
     "token longer than 16 KiB"),
    ("garbage", lambda i: "garbage-" + "x" * 40, "not a JWT"),
    ("three-garbage-parts", lambda i: "gar.bage.token-token-token-token", "not a readable JWT"),
    ("an-empty-token", lambda i: "", "not a JWT"),
]


@pytest.mark.parametrize(("make", "reason"), [pytest.param(m, r, id=n) for n, m, r in REFUSALS])
async def test_refused_tokens(issuer: LocalIssuer, verifier_for: Verifier, make: Make, reason: str) -> None:
    verifier = await verifier_for(issuer)
    refused = await refused_by(verifier, make(issuer))
    assert (refused.status, refused.error) == (401, "invalid_token")
    assert refused.reason and len(refused.reason) <= 200
    assert re.search(reason, refused.reason), refused.reason


async def test_a_missing_tenant_claim_is_refused(issuer: LocalIssuer, verifier_for: Verifier) -> None:
    verifier = await verifier_for(issuer, tenant_claim="tenant")
    assert (await verifier.caller(issuer.mint("alice", RESOURCE, tenant="acme"))).tenant == "acme"
    refused = await refused_by(verifier, issuer.mint("alice", RESOURCE))
    assert (refused.status, refused.error, refused.reason) == (
        401, "invalid_token", "no tenant claim tenant (a string of 1 to 128 characters)")


async def test_a_missing_scope_is_403_insufficient_scope(issuer: LocalIssuer, verifier_for: Verifier) -> None:
    verifier = await verifier_for(issuer, scopes=["knowledge.read", "knowledge.search"])
    refused = await refused_by(verifier, issuer.mint("alice", RESOURCE))  # scope "knowledge.read" only
    assert (refused.status, refused.error, refused.reason) == (403, "insufficient_scope", "scope knowledge.search "
                                                                                          "missing")
    assert (await verifier.caller(issuer.mint("alice", RESOURCE, scope="knowledge.read knowledge.search"))).subject \
        == "alice"
    assert (await verifier.caller(issuer.mint("alice", RESOURCE, scope=None, scp=["knowledge.read",
                                                                                  "knowledge.search"]))).subject \
        == "alice"  # Entra ID's scp


# --- keys: rotation, forged key ids, an issuer down ---

async def test_a_key_added_after_the_first_fetch_verifies(issuer: LocalIssuer, verifier_for: Verifier) -> None:
    verifier = await verifier_for(issuer)
    assert issuer.jwks_requests == 1
    issuer.rotate("ES256")  # right after the fetch: the new key id waits out the rest of MIN_REFETCH_S
    started = time.monotonic()
    assert (await verifier.caller(issuer.mint("alice", RESOURCE))).subject == "alice"
    assert time.monotonic() - started < MIN_REFETCH_S + 2.0
    assert issuer.jwks_requests == 2  # fetched again once
    old = issuer.token(_claims(issuer), key=issuer.keys[0])
    assert (await verifier.caller(old)).subject == "alice"  # the older key still listed: no fetch
    assert issuer.jwks_requests == 2


async def test_forged_key_ids_cost_the_issuer_at_most_one_fetch(issuer: LocalIssuer, verifier_for: Verifier) -> None:
    verifier = await verifier_for(issuer)
    before = issuer.jwks_requests
    forged = [issuer.token(_claims(issuer), headers={"kid": uuid.uuid4().hex}) for _ in range(50)]
    started = time.monotonic()
    results = await asyncio.gather(*(verifier.caller(t) for t in forged), return_exceptions=True)
    elapsed = time.monotonic() - started
    assert elapsed < 2 * MIN_REFETCH_S, elapsed
    assert issuer.jwks_requests - before <= 1, f"{issuer.jwks_requests - before} fetches within {elapsed:.2f} s"
    for token, result in zip(forged, results, strict=True):
        assert isinstance(result, TokenRefused) and result.status == 401, result
        assert result.reason == "signed by a key the issuer does not list"
        assert_no_fragment(result, token)
    assert (await verifier.caller(issuer.mint("alice", RESOURCE))).subject == "alice"  # the known key: no fetch
    assert issuer.jwks_requests - before <= 1


async def test_cached_keys_verify_while_the_issuer_is_down_until_keys_max_age_s(
        issuer: LocalIssuer, verifier_for: Verifier, clock: Clock) -> None:
    verifier = await verifier_for(issuer)
    issuer.down = True
    token = issuer.mint("alice", RESOURCE)
    assert (await verifier.caller(token)).subject == "alice"
    assert verifier.problems() == []
    keys = verifier.issuers[issuer.url]
    clock.ahead = keys.issuer.keys_max_age_s + 1
    refused = await refused_by(verifier, token)
    assert (refused.status, refused.error) == (401, "invalid_token")
    assert "the issuer's keys cannot be had" in refused.reason
    assert verifier.problems()
    await keys.refresh()  # what run() does when due (REFRESH_S): the failed fetch names the issuer
    assert keys.due() and verifier.problems() == [f"keys of {issuer.url} cannot be fetched: GET {issuer.url}/"
                                                  ".well-known/openid-configuration answered 503"]
    await refused_by(verifier, token)
    issuer.down = False
    await keys.refresh()
    assert verifier.problems() == [] and (await verifier.caller(token)).subject == "alice"


async def test_problems_name_the_issuer_whose_keys_are_too_old(issuer: LocalIssuer, verifier_for: Verifier,
                                                               clock: Clock) -> None:
    verifier = await verifier_for(issuer)
    issuer.down = True
    clock.ahead = verifier.issuers[issuer.url].issuer.keys_max_age_s + 1
    await refused_by(verifier, issuer.mint("alice", RESOURCE))
    problems = verifier.problems()
    assert len(problems) == 1 and issuer.url in problems[0], f"BUG: /readyz is told {problems}, naming no issuer"


async def test_keys_past_their_max_age_are_fetched_again_while_the_issuer_is_up(
        issuer: LocalIssuer, verifier_for: Verifier, clock: Clock) -> None:
    verifier = await verifier_for(issuer, keys_max_age_s=60)
    clock.ahead = 120  # past keys_max_age_s, before REFRESH_S: due all the same (at half the keys' bound)
    assert 60 < clock.ahead < REFRESH_S and verifier.issuers[issuer.url].due()
    try:
        caller = await verifier.caller(issuer.mint("alice", RESOURCE))
    except TokenRefused as refused:
        raise AssertionError(f"BUG: a good token refused while the issuer is up: {refused.reason}") from None
    assert caller.subject == "alice"


async def test_problems_before_the_first_fetch_and_after_a_failed_one(issuer: LocalIssuer) -> None:
    issuer.down = True
    verifier = TokenVerifier(McpSettings.model_validate({"enabled": True, "resource": RESOURCE, "knowledge": ["kb"],
                                                         "issuers": [{"issuer": issuer.url}]}), {})
    try:
        assert verifier.problems() == ["not fetched yet"]
        await verifier.start()  # never fatal
        assert len(verifier.problems()) == 1 and issuer.url in verifier.problems()[0]
        refused = await refused_by(verifier, issuer.mint("alice", RESOURCE))
        assert refused.reason.startswith("the issuer's keys cannot be had (keys of ")
    finally:
        await verifier.close()


async def test_a_token_verified_once_skips_the_signature_until_a_key_is_withdrawn(
        issuer: LocalIssuer, verifier_for: Verifier, monkeypatch: pytest.MonkeyPatch) -> None:
    verifier = await verifier_for(issuer)
    token = issuer.mint("alice", RESOURCE)
    assert (await verifier.caller(token)).subject == "alice"

    def no_signature_check(*_: Any, **__: Any) -> Any:
        raise AssertionError("the signature was checked again")

    with monkeypatch.context() as patched:
        patched.setattr(tokens.jwt, "decode", no_signature_check)
        assert (await verifier.caller(token)).subject == "alice"  # remembered
    other = issuer.mint("bob", RESOURCE)
    assert (await verifier.caller(other)).subject == "bob"
    issuer.keys = [new_key()]  # the signing key withdrawn (a new one in its place)
    await verifier.issuers[issuer.url].refresh()
    refused = await refused_by(verifier, token)  # verified again: its key is gone
    assert "does not list" in refused.reason


async def test_a_token_is_remembered_no_longer_than_its_exp(issuer: LocalIssuer, verifier_for: Verifier) -> None:
    verifier = await verifier_for(issuer)
    soon = int(time.time()) + 60
    assert (await verifier.caller(issuer.token({**issuer.claims("alice", RESOURCE), "exp": soon}))).subject == "alice"
    assert (await verifier.caller(issuer.mint("bob", RESOURCE))).subject == "bob"  # exp in 300 s: VERIFIED_S bounds
    [(alice_until, *_), (bob_until, *_)] = verifier._verified.values()
    assert alice_until == soon and bob_until <= time.time() + tokens.VERIFIED_S
