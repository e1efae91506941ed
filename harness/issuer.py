"""A small OAuth issuer run on the loopback address (beside Keycloak): its discovery document and JWKS served by
aiohttp, its keys made with cryptography, its tokens signed with PyJWT. The tests mint exactly the token an attack
needs with it (tests/helpers/local_issuer.py) and rotate or withhold its keys at will; the bench signs the MCP
endpoint's tokens with it (bench/mcp.py), serving it from a thread of its own (`in_thread`)."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import jwt
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from harness.proxy import listen


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class SigningKey:
    kid: str
    alg: str
    private: Any

    def jwk(self) -> dict[str, Any]:
        public = json.loads(jwt.algorithms.get_default_algorithms()[self.alg].to_jwk(self.private.public_key()))
        return {**public, "kid": self.kid, "alg": self.alg, "use": "sig"}

    def public_pem(self) -> bytes:
        return bytes(self.private.public_key().public_bytes(serialization.Encoding.PEM,
                                                            serialization.PublicFormat.SubjectPublicKeyInfo))


def new_key(alg: str = "RS256") -> SigningKey:
    private: Any = ec.generate_private_key(ec.SECP256R1()) if alg == "ES256" else \
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return SigningKey(f"k-{uuid.uuid4().hex[:10]}", alg, private)


@dataclass
class LocalIssuer:
    """Serves `/.well-known/openid-configuration` and `/jwks`; `keys` are published, `signing` signs."""

    keys: list[SigningKey] = field(default_factory=lambda: [new_key()])
    url: str = ""
    jwks_requests: int = 0
    down: bool = False  # answer 503 to everything (the issuer is unreachable)
    # RFC 7662: opaque tokens it has issued (token → claims) and the one client allowed to introspect them.
    opaque: dict[str, dict[str, Any]] = field(default_factory=dict)
    introspector: tuple[str, str] = ("resource-server", "resource-secret")
    _runner: web.AppRunner | None = None

    @property
    def signing(self) -> SigningKey:
        return self.keys[-1]

    async def start(self) -> LocalIssuer:
        app = web.Application()
        app.router.add_get("/issuer/.well-known/openid-configuration", self._discovery)
        app.router.add_get("/jwks", self._jwks)
        app.router.add_post("/introspect", self._introspect)
        self._runner, port = await listen(app)
        self.url = f"http://127.0.0.1:{port}/issuer"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _discovery(self, _: web.Request) -> web.Response:
        if self.down:
            return web.Response(status=503)
        base = self.url.removesuffix("/issuer")
        return web.json_response({"issuer": self.url, "jwks_uri": f"{base}/jwks"})

    async def _jwks(self, _: web.Request) -> web.Response:
        self.jwks_requests += 1
        if self.down:
            return web.Response(status=503)
        return web.json_response({"keys": [k.jwk() for k in self.keys]})

    @property
    def introspection_endpoint(self) -> str:
        return self.url.removesuffix("/issuer") + "/introspect"

    async def _introspect(self, request: web.Request) -> web.Response:
        """Basic auth with the client id and secret form-encoded first (RFC 6749 §2.3.1), then the token."""
        if self.down:
            return web.Response(status=503)
        presented = request.headers.get("Authorization", "")
        wanted = "Basic " + base64.b64encode(":".join(quote(part, safe="") for part in self.introspector)
                                             .encode()).decode()
        if presented != wanted:
            return web.Response(status=401)
        token = str((await request.post()).get("token", ""))
        claims = self.opaque.get(token)
        return web.json_response({"active": True, **claims} if claims is not None else {"active": False})

    def opaque_token(self, claims: dict[str, Any]) -> str:
        """An opaque (non-JWT) access token standing for `claims`, answered by introspection only."""
        token = f"opaque-{uuid.uuid4().hex}{uuid.uuid4().hex}"
        self.opaque[token] = claims
        return token

    def rotate(self, alg: str = "RS256") -> SigningKey:
        key = new_key(alg)
        self.keys.append(key)
        return key

    def claims(self, subject: str, audience: str, **extra: Any) -> dict[str, Any]:
        now = int(time.time())
        return {"iss": self.url, "sub": subject, "aud": audience, "iat": now, "exp": now + 300,
                "azp": "test-agent", "scope": "knowledge.read", **extra}

    def token(self, claims: dict[str, Any], *, key: SigningKey | None = None, headers: dict[str, Any] | None = None
              ) -> str:
        key = key or self.signing
        return jwt.encode(claims, key.private, algorithm=key.alg, headers={"kid": key.kid, **(headers or {})})

    def mint(self, subject: str, audience: str, **extra: Any) -> str:
        return self.token(self.claims(subject, audience, **extra))


@contextmanager
def in_thread(issuer: LocalIssuer) -> Iterator[LocalIssuer]:
    """`issuer` started and served from a thread's own event loop, for a caller that has none running (the bench's
    sections are synchronous); closed afterwards."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="local-issuer", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(issuer.start(), loop).result(timeout=30)
        yield issuer
    finally:
        asyncio.run_coroutine_threadsafe(issuer.close(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
