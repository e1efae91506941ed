"""Access tokens from the company's identity providers, checked as an OAuth 2.1 resource server does (docs/mcp.md).

JWTs are verified against each configured issuer's signing keys (PyJWT): asymmetric algorithms only, the key's own
algorithm, `iss`, `aud`, `exp`, `nbf` with a small leeway. The keys are fetched with aiohttp (never blocking the event
loop), kept per issuer, fetched again every few minutes in the background and for a key id not seen yet (at most
once per MIN_REFETCH_S per issuer, so forged key ids cannot make us hammer the issuer); keys fetched up to the
issuer's `keys_max_age_s` ago keep verifying while it cannot be reached. Opaque tokens go to an issuer's RFC 7662
introspection endpoint when one is configured. A token is never logged, traced, recorded or sent to the engine;
reasons are.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
import jwt
import orjson
from yarl import URL

from es_provider.config.mcp import McpIssuer, McpSettings, secure_url
from es_provider.config.secrets import read_secret
from es_provider.identity.claims import Caller, Refused, audience_ok, caller_of

log = logging.getLogger("es_provider.tokens")

# Asymmetric only: `none` and HMAC (which a public key could be misused as the secret of) are never accepted.
ASYMMETRIC = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"})
LEEWAY_S = 30  # clock skew between the issuer and this host
REFRESH_S = 300.0  # keys are fetched again this often
MIN_REFETCH_S = 1.0  # an unknown key id fetches the keys again at most this often per issuer
FETCH_TIMEOUT_S = 5.0
MAX_DOCUMENT_BYTES = 1 << 20
MAX_TOKEN_BYTES = 16384
VERIFIED_S = 300.0  # a verified JWT is remembered this long at most (never past its exp), so an agent's next call
MAX_VERIFIED = 10_000  # with the same token skips the signature (~140 us); the least recently used are forgotten


class TokenRefused(Exception):
    """A request refused for its token: 401 `invalid_token` (missing, malformed, unverifiable, expired, not for us)
    or 403 `insufficient_scope`. `reason` is for the log only."""

    def __init__(self, reason: str, *, status: int = 401, error: str | None = "invalid_token") -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.error = error


def _context(ca_file: str | None) -> ssl.SSLContext | None:
    if ca_file is None:
        return None
    context = ssl.create_default_context()
    context.load_verify_locations(cafile=ca_file)
    return context


async def _get_json(session: aiohttp.ClientSession, url: str, ssl_context: ssl.SSLContext | None,
                    form: Mapping[str, str] | None = None, authorization: str | None = None) -> Any:
    """One bounded GET (or form POST) of a JSON document from an issuer."""
    timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S)
    method = "POST" if form is not None else "GET"
    headers = {"Authorization": authorization} if authorization is not None else None
    async with session.request(method, url, data=form, headers=headers, timeout=timeout, allow_redirects=False,
                               ssl=ssl_context if ssl_context is not None else True) as response:
        if response.status != 200:
            raise OSError(f"{method} {URL(url).with_query(None)} answered {response.status}")
        body = await response.content.read(MAX_DOCUMENT_BYTES + 1)
        if len(body) > MAX_DOCUMENT_BYTES:
            raise OSError(f"{URL(url).with_query(None)} answered more than {MAX_DOCUMENT_BYTES} bytes")
        return orjson.loads(body)


def signing_keys(jwks: Any) -> dict[str, jwt.PyJWK]:
    """Pure: a JWKS document's signing keys by key id: `use` sig or unset (Keycloak lists an encryption key too),
    an asymmetric algorithm; a key PyJWT cannot read is left out and logged."""
    if not isinstance(jwks, Mapping) or not isinstance(jwks.get("keys"), list):
        raise ValueError("not a JWK set")
    keys: dict[str, jwt.PyJWK] = {}
    for entry in jwks["keys"]:
        if not isinstance(entry, Mapping) or entry.get("use", "sig") != "sig" or not isinstance(entry.get("kid"), str):
            continue
        if entry.get("kty") not in ("RSA", "EC", "OKP"):
            continue
        try:
            key = jwt.PyJWK(dict(entry))
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError) as exc:
            log.warning("skipped a signing key PyJWT cannot read (kid %s): %s", entry["kid"][:64], exc)
            continue
        if key.algorithm_name in ASYMMETRIC:
            keys[entry["kid"]] = key
    return keys


class IssuerKeys:
    """One issuer's signing keys, as last fetched."""

    def __init__(self, issuer: McpIssuer, session: Callable[[], aiohttp.ClientSession], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.issuer = issuer
        self._session = session
        self._clock = clock
        self._ssl = _context(issuer.ca_file)
        self.keys: dict[str, jwt.PyJWK] = {}
        self.fetched_at: float | None = None
        self._tried_at = float("-inf")
        self._fetch: asyncio.Task[None] | None = None
        self.problem: str | None = "not fetched yet"
        self.generation = 0  # moves when a key is withdrawn

    def usable(self) -> bool:
        return self.fetched_at is not None and self._clock() - self.fetched_at <= self.issuer.keys_max_age_s

    async def _jwks_uri(self) -> str:
        if self.issuer.jwks_uri is not None:
            return self.issuer.jwks_uri
        base = self.issuer.issuer.rstrip("/")
        discovery = await _get_json(self._session(), f"{base}/.well-known/openid-configuration", self._ssl)
        if not isinstance(discovery, Mapping) or discovery.get("issuer") != self.issuer.issuer:
            raise ValueError("its discovery document names another issuer")
        uri = discovery.get("jwks_uri")
        if not isinstance(uri, str):
            raise ValueError("its discovery document has no jwks_uri")
        return secure_url(uri)

    async def _fetch_now(self) -> None:
        self._tried_at = self._clock()
        try:
            keys = signing_keys(await _get_json(self._session(), await self._jwks_uri(), self._ssl))
        except (TimeoutError, OSError, ValueError, aiohttp.ClientError) as exc:
            self.problem = f"keys of {self.issuer.issuer} cannot be fetched: {str(exc)[:200] or type(exc).__name__}"
            log.warning("%s (fetched %s)", self.problem, "never" if self.fetched_at is None else
                        f"{self._clock() - self.fetched_at:.0f} s ago")
            return
        added = set(keys) - set(self.keys)
        if added and self.keys:
            log.info("issuer %s: new signing key(s) %s", self.issuer.issuer, ", ".join(sorted(k[:64] for k in added)))
        if set(self.keys) - set(keys):
            self.generation += 1  # a key withdrawn: what it verified is verified again
        self.keys, self.fetched_at, self.problem = keys, self._clock(), None

    async def refresh(self) -> None:
        """Fetches the keys once, shared by every request that asks meanwhile."""
        if self._fetch is None or self._fetch.done():
            self._fetch = asyncio.ensure_future(self._fetch_now())
        await asyncio.shield(self._fetch)

    def due(self) -> bool:
        """Time to fetch again: every REFRESH_S, or at half the keys' bound when that is shorter."""
        every = min(REFRESH_S, self.issuer.keys_max_age_s / 2)
        return self.fetched_at is None or self._clock() - self.fetched_at >= every

    async def key(self, kid: str) -> jwt.PyJWK | None:
        """The signing key `kid`. A new one fetches the keys again: at once, or, within MIN_REFETCH_S of the last
        fetch, after waiting out the rest of it (a rotation is then never refused, and forged key ids cost the
        issuer at most one fetch per MIN_REFETCH_S)."""
        if kid not in self.keys or not self.usable():  # new, or every key too old: fetch before refusing
            asked = self._clock()
            if (wait := self._tried_at + MIN_REFETCH_S - asked) > 0:
                await asyncio.sleep(wait)
            if self._tried_at < asked or (self._fetch is not None and not self._fetch.done()):
                await self.refresh()  # none began since this request asked: begin one (or join the running one)
        return self.keys.get(kid) if self.usable() else None


@dataclass(frozen=True, slots=True)
class Introspection:
    issuer: McpIssuer
    secret: str


class TokenVerifier:
    """Every configured issuer's keys; `caller` checks one bearer token and names who asks."""

    def __init__(self, settings: McpSettings, environ: Mapping[str, str]) -> None:
        self._settings = settings
        self._session_obj: aiohttp.ClientSession | None = None
        self.issuers = {i.issuer: IssuerKeys(i, self._session) for i in settings.issuers}
        # sha256(token) → (remember until, the keys that verified it and their generation, its claims)
        self._verified: OrderedDict[bytes, tuple[float, IssuerKeys, int, dict[str, Any]]] = OrderedDict()
        # Secrets are read now, so a missing one stops the service at start, naming the variable.
        self._introspection = [Introspection(i, read_secret(i.client_secret_ref, environ).decode())
                               for i in settings.issuers if i.introspection_endpoint is not None
                               and i.client_secret_ref is not None]
        for issuer in settings.issuers:
            if URL(issuer.issuer).scheme == "http":
                log.warning("MCP issuer %s is reached over plain http (loopback only)", issuer.issuer)

    def _session(self) -> aiohttp.ClientSession:
        if self._session_obj is None or self._session_obj.closed:
            self._session_obj = aiohttp.ClientSession()
        return self._session_obj

    async def close(self) -> None:
        if self._session_obj is not None:
            await self._session_obj.close()

    async def start(self) -> None:
        """Fetches every issuer's keys once (a failure is logged and told by /readyz, never fatal)."""
        await asyncio.gather(*(keys.refresh() for keys in self.issuers.values()))

    async def run(self) -> None:
        """For the life of the app: keys fetched again when due."""
        while True:
            await asyncio.sleep(min(REFRESH_S, 30.0, *(k.issuer.keys_max_age_s / 4 for k in self.issuers.values())))
            for keys in self.issuers.values():
                if keys.due():
                    await keys.refresh()

    def problems(self) -> list[str]:
        """Why some issuer's tokens cannot be verified now (for /readyz)."""
        return [keys.problem or f"keys of {keys.issuer.issuer} older than keys_max_age_s"
                for keys in self.issuers.values() if not keys.usable() and keys.issuer.introspection_endpoint is None]

    def audience(self, issuer: McpIssuer) -> str:
        return issuer.audience or self._settings.resource or ""

    async def caller(self, token: str) -> Caller:
        """Who the token names, or TokenRefused (401; 403 for a missing scope)."""
        if len(token) > MAX_TOKEN_BYTES:
            raise TokenRefused("token longer than 16 KiB")
        claims, issuer = await (self._verify_jwt(token) if token.count(".") == 2 else self._introspect(token))
        try:
            caller = caller_of(claims, issuer)
        except Refused as exc:
            raise TokenRefused(str(exc)) from None
        if missing := [s for s in self._settings.scopes if s not in caller.scopes]:
            raise TokenRefused(f"scope {' '.join(missing)} missing", status=403, error="insufficient_scope")
        return caller

    async def _verify_jwt(self, token: str) -> tuple[dict[str, Any], McpIssuer]:
        """A JWT's claims: remembered for a token verified before (until VERIFIED_S, its exp, the keys' bound or a
        key withdrawn, whichever comes first), else verified."""
        digest = hashlib.sha256(token.encode()).digest()
        known = self._verified.get(digest)
        if known is not None:
            until, keys, generation, claims = known
            if time.time() < until and keys.generation == generation and keys.usable():
                self._verified.move_to_end(digest)
                return claims, keys.issuer
            del self._verified[digest]
        claims, keys = await self._verify_signed(token)
        exp = claims["exp"]
        self._verified[digest] = (min(float(exp), time.time() + VERIFIED_S), keys, keys.generation, claims)
        if len(self._verified) > MAX_VERIFIED:
            self._verified.popitem(last=False)
        return claims, keys.issuer

    async def _verify_signed(self, token: str) -> tuple[dict[str, Any], IssuerKeys]:
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise TokenRefused("not a readable JWT") from None
        keys = self.issuers.get(str(unverified.get("iss")))
        if keys is None:
            raise TokenRefused("issuer not configured")
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in ASYMMETRIC:
            raise TokenRefused(f"algorithm {str(alg)[:16]!r} is not an issuer's asymmetric one")
        if not isinstance(kid, str):
            raise TokenRefused("no key id")
        key = await keys.key(kid)
        if key is None:
            raise TokenRefused("signed by a key the issuer does not list" if keys.usable() else
                               f"the issuer's keys cannot be had ({keys.problem or 'too old'})")
        if key.algorithm_name != alg:
            raise TokenRefused(f"algorithm {alg} is not its key's ({key.algorithm_name})")
        try:
            claims = jwt.decode(token, key=key, algorithms=[alg], audience=self.audience(keys.issuer),
                                issuer=keys.issuer.issuer, leeway=LEEWAY_S,
                                options={"require": ["exp", "iss", "aud"]})
        except jwt.PyJWTError as exc:
            raise TokenRefused(f"{type(exc).__name__}: {exc}"[:200]) from None
        if not isinstance(claims.get("exp"), int | float):
            raise TokenRefused("exp is not a number")
        return claims, keys

    async def _introspect(self, token: str) -> tuple[dict[str, Any], McpIssuer]:
        if not self._introspection:
            raise TokenRefused("not a JWT, and no issuer introspects opaque tokens")
        for each in self._introspection:
            issuer = each.issuer
            assert issuer.introspection_endpoint is not None and issuer.client_id is not None
            try:
                answer = await _get_json(self._session(), issuer.introspection_endpoint, _context(issuer.ca_file),
                                         form={"token": token, "token_type_hint": "access_token"},
                                         # RFC 6749 2.3.1: both form-encoded in Basic (a client id may be a URL)
                                         authorization=aiohttp.encode_basic_auth(quote(issuer.client_id, safe=""),
                                                                                 quote(each.secret, safe="")))
            except (TimeoutError, OSError, ValueError, aiohttp.ClientError) as exc:
                log.warning("introspection at %s failed: %s", issuer.issuer, str(exc)[:200])
                continue
            if not isinstance(answer, dict) or answer.get("active") is not True:
                continue
            if answer.get("iss", issuer.issuer) != issuer.issuer:
                continue
            now = time.time()
            if not isinstance(answer.get("exp"), int | float) or answer["exp"] < now - LEEWAY_S:
                raise TokenRefused("introspected token expired or without exp")
            if isinstance(answer.get("nbf"), int | float) and answer["nbf"] > now + LEEWAY_S:
                raise TokenRefused("introspected token not valid yet")
            if not audience_ok(answer, self.audience(issuer)):
                raise TokenRefused("introspected token is for another audience")
            return answer, issuer
        raise TokenRefused("no issuer says the opaque token is active")
