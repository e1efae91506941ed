"""The connection model: [opensearch] (or [access_log.engine]) → `Connection` — the nodes (scheme, host, port and the
path prefix a gateway needs kept), one TLS context (the company CA replacing the system's trust, a pinned
fingerprint, a client certificate, or verification off when `insecure`) and one authorizer (basic, API key or
SigV4, whose credentials refresh runs from the first use to `close()`).
Both clients, the search door and opensearch-py (admin, bulk, scans, the CLI, the stores, the access record), are
built from it, so there is no second place that opens a connection. Secrets are read here, at start: a missing one
stops the start naming its variable; none is ever part of a URL.
"""

from __future__ import annotations

import _ssl
import asyncio
import hashlib
import logging
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from es_provider.config.cluster import OpenSearchSettings
from es_provider.config.settings import ConfigError
from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.engine.aws import standard_credentials
from es_provider.engine.credentials import Authorizer, RotatingSecret, api_key_auth, basic_auth
from es_provider.engine.sigv4 import SigV4

log = logging.getLogger("es_provider.engine")
DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Node:
    scheme: str
    host: str
    port: int
    prefix: str  # "" or "/path" without a trailing slash

    @property
    def netloc(self) -> str:
        """host[:port] as a client sends it in `Host` (the default port left out): what SigV4 signs."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if DEFAULT_PORTS[self.scheme] == self.port else f"{host}:{self.port}"

    @property
    def base(self) -> str:
        return f"{self.scheme}://{self.netloc}{self.prefix}"


def parse_nodes(url: str) -> list[Node]:
    """The comma-separated node URLs (config/cluster.py has checked them)."""
    nodes = []
    for part in (piece.strip() for piece in url.split(",")):
        if not part:
            continue
        parts = urlsplit(part if "://" in part else f"http://{part}")
        assert parts.hostname is not None
        nodes.append(Node(parts.scheme, parts.hostname, parts.port or DEFAULT_PORTS[parts.scheme],
                          parts.path.rstrip("/")))
    return nodes


def _tls_context(settings: OpenSearchSettings) -> ssl.SSLContext | None:
    if not settings.tls:
        return None
    if settings.insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif settings.ca_file is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # only the company's CAs: the system's trust is replaced
        try:
            context.load_verify_locations(cafile=settings.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"opensearch.ca_file: cannot load {settings.ca_file}: {_reason(exc)}") from None
    elif settings.ca_fingerprint is not None:
        # Trusts nothing until the first connection pins the certificate (`Connection.prepare`): fails closed.
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # the pinned one may be the node's own certificate
    else:
        context = ssl.create_default_context()
    if settings.client_cert_file is not None and settings.client_key_file is not None:
        try:
            context.load_cert_chain(settings.client_cert_file, settings.client_key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"opensearch.client_cert_file / client_key_file: cannot load them: {_reason(exc)}"
                              ) from None
    return context


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or getattr(exc, "reason", None) or type(exc).__name__


def _authorizer(settings: OpenSearchSettings, environ: Mapping[str, str]) -> Authorizer | None:
    if settings.username is not None and settings.password_ref is not None:
        return basic_auth(settings.username, RotatingSecret(settings.password_ref, environ))
    if settings.api_key_ref is not None:
        return api_key_auth(RotatingSecret(settings.api_key_ref, environ))
    if settings.aws is not None:
        return SigV4(standard_credentials(settings.aws.profile), settings.aws.region, settings.aws.service)
    return None


class Connection:
    """Where the engine is and how to reach it; `prepare()` runs once before the first request (pinning a
    fingerprint, fetching the first AWS credentials and starting their refresh), `close()` stops that refresh."""

    def __init__(self, nodes: list[Node], *, tls: ssl.SSLContext | None = None, auth: Authorizer | None = None,
                 fingerprint: str | None = None, timeout_s: float = 30.0, client_cert: bool = False) -> None:
        if not nodes:
            raise ValueError("no engine node given")
        self.nodes = nodes
        self.tls = tls
        self.auth = auth
        self.timeout_s = timeout_s
        self.may_want_client_cert = tls is not None and not client_cert
        self._fingerprint = fingerprint
        self._prepared = fingerprint is None and not isinstance(auth, SigV4)
        self._lock = asyncio.Lock()

    @classmethod
    def plain(cls, url: str) -> Connection:
        """A URL and nothing else (tests, benchmarks, a node without security); a credential in it is refused."""
        return from_settings(OpenSearchSettings(url=url), {})

    def __repr__(self) -> str:
        return f"Connection({self.url})"

    @property
    def serverless(self) -> bool:
        """OpenSearch Serverless (aws.service = "aoss"): no `GET /`, no `_nodes`, a subset of the API."""
        return isinstance(self.auth, SigV4) and self.auth.service == "aoss"

    @property
    def url(self) -> str:
        return ",".join(node.base for node in self.nodes)

    def describe(self) -> str:
        """For the start's log line: where, and how (the secret's variable, never the secret)."""
        if isinstance(self.auth, SigV4):
            how = [self.auth.label]
        else:
            how = [] if self.auth is None else [repr(self.auth).removeprefix("HeaderAuth(").removesuffix(")")]
        if self.tls is not None:
            how.append("TLS, not verified" if self.tls.verify_mode == ssl.CERT_NONE else "TLS")
        return f"{self.url} ({', '.join(how) or 'plain HTTP, no credentials'})"

    async def renew(self) -> bool:
        """After the engine refused the credential (401, or 403 for a SigV4 token or signature): whether another
        one is now at hand (a file re-read, AWS credentials fetched again)."""
        if isinstance(self.auth, SigV4):
            return await self.auth.renew()
        renew = getattr(self.auth, "renew", None)  # reads a secret file: off the event loop
        return bool(await asyncio.to_thread(renew)) if renew is not None else False

    async def prepare(self) -> None:
        if self._prepared:
            return
        async with self._lock:
            if self._prepared:
                return
            if self._fingerprint is not None:
                assert self.tls is not None
                await asyncio.to_thread(_pin, self.tls, self.nodes[0], self._fingerprint, self.timeout_s)
                self._fingerprint = None  # pinned: a later prepare (after close) need not pin again
            if isinstance(self.auth, SigV4):
                await self.auth.start()
            self._prepared = True

    async def close(self) -> None:
        """Stops the SigV4 credentials' refresh; a later request prepares again."""
        if isinstance(self.auth, SigV4):
            await self.auth.close()
            self._prepared = False


def _pin(context: ssl.SSLContext, node: Node, fingerprint: str, timeout_s: float) -> None:
    """Trust the certificate of the node's chain whose SHA-256 is `fingerprint` (Elasticsearch prints its CA's)."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe.check_hostname = False
    probe.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((node.host, node.port), timeout=timeout_s) as raw, \
                probe.wrap_socket(raw, server_hostname=node.host) as tls:
            # Python 3.13 names it SSLSocket.get_unverified_chain; before, only its C object has it.
            chain_of = getattr(tls, "get_unverified_chain", None) or tls._sslobj.get_unverified_chain  # type: ignore[attr-defined]
            chain = [cert.public_bytes(_ssl.ENCODING_DER) for cert in chain_of() or []]
    except OSError as exc:
        raise KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"engine unreachable to check ca_fingerprint: {exc}"
                             ) from None
    for der in chain:
        if hashlib.sha256(der).hexdigest() == fingerprint:
            context.load_verify_locations(cadata=der)
            return
    raise KnowledgeError(ErrorCode.UNAVAILABLE,
                         detail="no certificate of the engine's chain matches opensearch.ca_fingerprint")


def from_settings(settings: OpenSearchSettings, environ: Mapping[str, str]) -> Connection:
    """The connection [opensearch] (or [access_log.engine]) describes, its secrets read from `environ`."""
    return Connection(parse_nodes(settings.url), tls=_tls_context(settings), auth=_authorizer(settings, environ),
                      fingerprint=settings.ca_fingerprint, timeout_s=settings.timeout_s,
                      client_cert=settings.client_cert_file is not None)
