"""The connection model: [opensearch] (or [access_log.engine]) → `Connection` — the nodes (scheme, host, port and the
path prefix a gateway needs kept), one TLS context (the company CA replacing the system's trust, a pinned
fingerprint, a client certificate, or verification off when `insecure`) and one authorizer (basic, API key or
SigV4, whose credentials refresh runs from the first use to `close()`).
Both clients, the HTTP/1.1 client and opensearch-py (admin, bulk, scans, the CLI, the stores, the access record), are
built from it, so there is no second place that opens a connection. Secrets are read here, at start: a missing one
stops the start naming its variable; none is ever part of a URL.
"""

from __future__ import annotations

import _ssl
import asyncio
import hashlib
import logging
import os
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from es_provider.config.cluster import OpenSearchSettings
from es_provider.config.settings import ConfigError
from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.engine.aws import standard_credentials
from es_provider.engine.credentials import (
    Authorizer,
    HeaderAuth,
    RotatingSecrets,
    api_key_auth,
    basic_auth,
    credential_used,
)
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


class ClientCertificate:
    """[opensearch] client_cert_file + client_key_file, loaded again into the connection's one TLS context (both
    clients open their connections from it) when either file changes: new connections present the new certificate,
    open ones keep the one they were made with (OpenSSL copies a context's certificate into each connection). The
    files are watched and read as one consistent pair by RotatingSecrets (a stat once a second on the loop, the
    read in a thread, bounded, as Kubernetes swaps a Secret's files at once); a new pair is checked on a context of
    its own and only then loaded, from the same bytes. A pair that cannot be taken leaves the last one in use, the
    reason logged once."""

    def __init__(self, context: ssl.SSLContext, files: RotatingSecrets, paths: tuple[Path, Path]) -> None:
        self._context = context
        self._files = files
        self._paths = paths
        self._seen = files.values()
        cert, key = self._seen
        _load_pair(context, cert, key, paths)  # the context holds the very pair the files are watched from

    def __repr__(self) -> str:
        return f"ClientCertificate({self._paths[0]})"

    def poll(self) -> None:
        """On the loop, before a call: a pair read anew (RotatingSecrets) goes into the live context."""
        pair = self._files.values()
        if pair is self._seen:
            return
        self._seen = pair
        cert, key = pair
        try:
            _load_pair(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), cert, key, self._paths)  # checked apart first
            _load_pair(self._context, cert, key, self._paths)
        except (OSError, ssl.SSLError) as exc:
            log.warning("engine client certificate: client_cert_file / client_key_file cannot be loaded as a pair "
                        "(%s); the last pair stays in use", _reason(exc))
            return
        log.info("engine client certificate: client_cert_file changed; new connections present the certificate "
                 "with SHA-256 %s, open ones keep theirs", _fingerprint(cert))


def _load_pair(context: ssl.SSLContext, cert: str, key: str, paths: tuple[Path, Path]) -> None:
    """load_cert_chain reads only files: the bytes read and checked go through memory files (never the disk), so
    what is loaded is what was checked. Without memfd (not Linux), from the files themselves."""
    if not hasattr(os, "memfd_create"):  # pragma: no cover - Linux has it
        context.load_cert_chain(str(paths[0]), str(paths[1]))
        return
    descriptors: list[int] = []
    try:
        for data in (cert, key):
            descriptor = os.memfd_create("es-provider-client-tls", os.MFD_CLOEXEC)
            descriptors.append(descriptor)
            view = memoryview((data + "\n").encode("utf-8"))
            while view:
                view = view[os.write(descriptor, view):]
        context.load_cert_chain(*(f"/proc/self/fd/{descriptor}" for descriptor in descriptors))
    finally:
        for descriptor in descriptors:
            os.close(descriptor)


def _fingerprint(cert: str) -> str:
    """The first certificate's SHA-256 (public: it says which certificate, not a secret)."""
    begin, end = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"
    try:
        block = cert[cert.index(begin):cert.index(end) + len(end)]
        return hashlib.sha256(ssl.PEM_cert_to_DER_cert(block)).hexdigest()
    except ValueError:
        return "unknown"


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or getattr(exc, "reason", None) or type(exc).__name__


def _authorizer(settings: OpenSearchSettings, environ: Mapping[str, str]) -> Authorizer | None:
    if settings.password_ref is not None and settings.username_ref is not None:
        # One pair, read together: a rotation to another engine user is never half-seen.
        return basic_auth(None, RotatingSecrets((settings.username_ref, settings.password_ref), environ))
    if settings.username is not None and settings.password_ref is not None:
        return basic_auth(settings.username, RotatingSecrets((settings.password_ref,), environ))
    if settings.api_key_ref is not None:
        return api_key_auth(RotatingSecrets((settings.api_key_ref,), environ))
    if settings.aws is not None:
        return SigV4(standard_credentials(settings.aws.profile), settings.aws.region, settings.aws.service)
    return None


class Connection:
    """Where the engine is and how to reach it; `prepare()` runs once before the first request (pinning a
    fingerprint, fetching the first AWS credentials and starting their refresh), `close()` stops that refresh."""

    def __init__(self, nodes: list[Node], *, tls: ssl.SSLContext | None = None, auth: Authorizer | None = None,
                 fingerprint: str | None = None, timeout_s: float = 30.0, client_cert: bool = False,
                 certificate: ClientCertificate | None = None) -> None:
        if not nodes:
            raise ValueError("no engine node given")
        self.nodes = nodes
        self.tls = tls
        self.auth = auth
        self.certificate = certificate
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
        if isinstance(self.auth, HeaderAuth):
            await asyncio.to_thread(self.auth.recheck)  # reads the secret files: off the event loop
            return self.auth.refused()
        return False

    def accepted(self) -> None:
        """The engine answered this task's call: the credential it carried works (a rotation settles on it)."""
        if isinstance(self.auth, HeaderAuth):
            self.auth.accepted()

    async def prepare(self) -> None:
        """Before each call: forgets which credential this task last carried (so an answer or a 401 is laid to
        this call's), looks at the client certificate's files; once, the first time: pins, starts SigV4."""
        credential_used.set(None)
        if self.certificate is not None:
            self.certificate.poll()
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
    tls = _tls_context(settings)  # refuses files that cannot be loaded, naming the keys
    certificate = None
    if tls is not None and settings.client_cert_file is not None and settings.client_key_file is not None:
        files = RotatingSecrets(("client_cert", "client_key"), {"client_cert_FILE": settings.client_cert_file,
                                                                "client_key_FILE": settings.client_key_file})
        certificate = ClientCertificate(tls, files, (Path(settings.client_cert_file), Path(settings.client_key_file)))
    return Connection(parse_nodes(settings.url), tls=tls, auth=_authorizer(settings, environ),
                      fingerprint=settings.ca_fingerprint, timeout_s=settings.timeout_s,
                      client_cert=settings.client_cert_file is not None, certificate=certificate)
