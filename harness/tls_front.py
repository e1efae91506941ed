"""A real TLS front for a node that has no security of its own (the local Elasticsearch nodes carry no x-pack):
it terminates TLS with a certificate from a CA the test makes (trustme), sends that CA in its chain as
Elasticsearch 8 does (so a CA fingerprint can be pinned), can require a client certificate, checks an
`Authorization` header against the keys it accepts (constant time), and forwards what it accepts to the node (an
EngineProxy served over TLS). The accepted keys are a set the test may change while requests run (a rotation)."""

from __future__ import annotations

import hashlib
import hmac
import ssl
from dataclasses import dataclass, field
from pathlib import Path

import trustme
from aiohttp import web

from harness.proxy import EngineProxy


@dataclass
class Certificates:
    """A CA, a certificate for 127.0.0.1/localhost signed by it, and a client certificate, written as PEM files."""

    directory: Path
    ca: trustme.CA = field(default_factory=trustme.CA)

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        server = self.ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = self._write("ca.pem", self.ca.cert_pem.bytes())
        # Leaf, then the CA itself: the chain Elasticsearch sends, which a fingerprint client pins on.
        self.server_chain = self._write("server.pem", server.cert_chain_pems[0].bytes() + self.ca.cert_pem.bytes())
        self.server_key = self._write("server-key.pem", server.private_key_pem.bytes())
        client = self.ca.issue_cert("es-provider-client")
        self.client_cert = self._write("client.pem", client.cert_chain_pems[0].bytes())
        self.client_key = self._write("client-key.pem", client.private_key_pem.bytes())

    def _write(self, name: str, data: bytes) -> str:
        path = self.directory / name
        path.write_bytes(data)
        return str(path)

    @property
    def ca_fingerprint(self) -> str:
        """The CA's SHA-256 as Elasticsearch prints it (colon-separated upper-case hex)."""
        der = ssl.PEM_cert_to_DER_cert(self.ca.cert_pem.bytes().decode())
        digest = hashlib.sha256(der).hexdigest().upper()
        return ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))


@dataclass
class TlsFront:
    target: str
    certificates: Certificates
    accepted: set[str] = field(default_factory=set)  # whole Authorization values; empty: no header checked
    require_client_cert: bool = False
    url: str = ""
    refused: int = 0
    forwarded: int = 0
    _proxy: EngineProxy | None = None

    def _check(self, request: web.Request) -> web.StreamResponse | None:
        if self.accepted:
            given = request.headers.get("Authorization", "").encode()
            if not any(hmac.compare_digest(given, key.encode()) for key in list(self.accepted)):
                self.refused += 1
                return web.json_response({"error": {"type": "security_exception", "reason": "unable to "
                                                    "authenticate with provided credentials"}, "status": 401},
                                         status=401)
        self.forwarded += 1
        return None

    async def start(self) -> TlsFront:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.certificates.server_chain, self.certificates.server_key)
        if self.require_client_cert:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(self.certificates.ca_file)
        self._proxy = await EngineProxy(self.target, gate=self._check, ssl_context=context).start()
        self.url = self._proxy.url
        return self

    async def close(self) -> None:
        if self._proxy is not None:
            await self._proxy.close()
