"""AWS Signature Version 4 for Amazon OpenSearch Service (`es`) and OpenSearch Serverless (`aoss`): the headers of
one request (x-amz-date, x-amz-content-sha256, x-amz-security-token, authorization), byte-identical to botocore's
SigV4Auth for what the service sends (tests/unit/test_sigv4.py compares them), with the signing key derived once a
day rather than on every request. The credentials are frozen in memory: the hot path never waits on the network.
Fresh ones are fetched in a thread (the standard chain may ask instance metadata or STS) when the connection is
first used, then every 30 s or sooner as their expiry nears, and once more when the engine says a signature's token
has expired. Our own signer (not botocore's) because botocore's rebuilds an AWSRequest and four HMACs per request.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol
from urllib.parse import quote, urlsplit

from es_provider.core.errors import ErrorCode, KnowledgeError

log = logging.getLogger("es_provider.engine")
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
DEFAULT_PORTS = {"http": 80, "https": 443}
REFRESH_S = 30.0  # how often the chain is asked again when the credentials do not say when they expire
SOONEST_S = 0.25  # never ask faster than this, even for credentials about to expire
RENEW_EVERY_S = 5.0  # a refused signature walks the chain afresh at most this often (a wrong key: every request)


@dataclass(frozen=True)
class AwsCredentials:
    """One frozen set: the secret key and token never appear in a repr."""

    access_key: str = field(repr=False)
    secret_key: str = field(repr=False)
    token: str | None = field(default=None, repr=False)
    expires_at: float | None = None  # epoch seconds; None: long-term keys


class CredentialsProvider(Protocol):
    """Blocking (it may ask the network): called in a thread only. `fresh`: walk the chain anew rather than take
    what it holds (after the engine refused a signature: a key rotated in a file, a revoked session)."""

    def __call__(self, fresh: bool = False) -> AwsCredentials: ...


class CredentialsUnavailable(Exception):
    """The chain gave no credentials; the message names why and never holds a secret."""


def canonical_path(path: str) -> str:
    """botocore's rule for every service but S3: dot segments and empty segments removed, then URI-encoded again
    (an already percent-encoded path is encoded twice, as AWS computes it)."""
    if not path:
        return "/"
    kept: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if kept:
                kept.pop()
        elif segment and segment != ".":
            kept.append(segment)
    normal = ("/" if path[0] == "/" else "") + "/".join(kept) + ("/" if path[-1] == "/" and kept else "")
    return quote(normal, safe="/~")


def canonical_query(query: str) -> str:
    """The query's pairs sorted by key then value, as sent (botocore signs the URL's query as it is written)."""
    if not query:
        return ""
    pairs = sorted((key, value) for key, _, value in (pair.partition("=") for pair in query.split("&")))
    return "&".join(f"{key}={value}" for key, value in pairs)


def canonical_host(scheme: str, host: str, port: int | None) -> str:
    """What the clients send in `Host` (connection.Node.netloc): lower case, IPv6 in brackets, no default port."""
    host = f"[{host}]" if ":" in host else host
    return host if port is None or DEFAULT_PORTS.get(scheme) == port else f"{host}:{port}"


class SigV4:
    """The authorizer `(method, url, body) -> headers` that signs each request for `service` in `region`."""

    def __init__(self, provider: CredentialsProvider, region: str, service: str, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.region = region
        self.service = service
        self._provider = provider
        self._clock = clock
        self._credentials: AwsCredentials | None = None
        self._keys: tuple[tuple[str, str, str, str], bytes] | None = None  # the last (day, region, service, secret)
        self._lock = asyncio.Lock()
        self._refresher: asyncio.Task[None] | None = None
        self._renewed_at = -RENEW_EVERY_S

    def __repr__(self) -> str:
        return f"SigV4({self.service} {self.region})"

    @property
    def label(self) -> str:
        return f"SigV4 {self.service} {self.region}"

    def use(self, credentials: AwsCredentials) -> None:
        self._credentials = credentials

    def _signing_key(self, secret: str, day: str) -> bytes:
        # Four HMACs that change once a day (or when the secret does): AWS's own clients cache the result too.
        ident = (day, self.region, self.service, secret)
        if self._keys is None or self._keys[0] != ident:
            key = f"AWS4{secret}".encode()
            for part in (day, self.region, self.service, "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            self._keys = (ident, key)
        return self._keys[1]

    def headers(self, method: str, url: str, body: bytes | str | None, *,
                now: datetime | None = None) -> dict[str, str]:
        """The headers to add; `url` is the whole URL as sent (prefix and query included). Host is signed as the
        client writes it and is not returned (the client sets it)."""
        credentials = self._credentials
        if credentials is None:
            raise KnowledgeError(ErrorCode.UNAVAILABLE, detail="no AWS credentials yet ([opensearch.aws])")
        stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
        day = stamp[:8]
        parts = urlsplit(url)
        data = body.encode("utf-8") if isinstance(body, str) else body
        payload = hashlib.sha256(data).hexdigest() if data else EMPTY_SHA256
        signed = {"host": canonical_host(parts.scheme, parts.hostname or "", parts.port),
                  "x-amz-content-sha256": payload, "x-amz-date": stamp}
        if credentials.token:
            signed["x-amz-security-token"] = credentials.token
        names = ";".join(sorted(signed))
        canonical = "\n".join((
            method.upper(), canonical_path(parts.path), canonical_query(parts.query),
            "".join(f"{name}:{' '.join(signed[name].split())}\n" for name in sorted(signed)), names, payload))
        scope = f"{day}/{self.region}/{self.service}/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signature = hmac.new(self._signing_key(credentials.secret_key, day), to_sign.encode(),
                             hashlib.sha256).hexdigest()
        del signed["host"]
        signed["authorization"] = (f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
                                   f"SignedHeaders={names}, Signature={signature}")
        return signed

    __call__ = headers

    # --- keeping the credentials fresh, off the hot path ---

    async def _fetch(self, *, fresh: bool = False) -> bool:
        credentials = await asyncio.to_thread(self._provider, fresh)
        changed = credentials != self._credentials
        self._credentials = credentials
        return changed

    async def start(self) -> None:
        """The first credentials (a failure names the chain's reason), then the refresh task."""
        if self._credentials is None:
            try:
                await self._fetch()
            except CredentialsUnavailable as exc:
                raise KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"no AWS credentials for SigV4: {exc}") from None
            except Exception as exc:
                raise KnowledgeError(ErrorCode.UNAVAILABLE,
                                     detail=f"no AWS credentials for SigV4: {type(exc).__name__}") from None
        if self._refresher is None or self._refresher.done():
            self._refresher = asyncio.create_task(self._keep_fresh(), name="sigv4-credentials")

    def next_refresh_in(self) -> float:
        """Seconds to the next look: every 30 s, or at a third of the time the credentials have left."""
        expires = None if self._credentials is None else self._credentials.expires_at
        if expires is None:
            return REFRESH_S
        return min(REFRESH_S, max(SOONEST_S, (expires - self._clock()) / 3))

    async def _keep_fresh(self) -> None:
        while True:
            await asyncio.sleep(self.next_refresh_in())
            try:
                async with self._lock:
                    await self._fetch()
            except Exception as exc:  # the current ones stay in use; the next turn asks again
                reason = str(exc) if isinstance(exc, CredentialsUnavailable) else type(exc).__name__
                log.warning("engine credentials: refreshing the AWS credentials failed (%s); the current ones "
                            "stay in use", reason)

    async def renew(self) -> bool:
        """After the engine refused a signature: whether other credentials are now at hand (one fetch, shared by
        the requests refused at the same time)."""
        seen = self._credentials
        async with self._lock:
            if self._credentials is not seen:
                return True
            if time.monotonic() - self._renewed_at < RENEW_EVERY_S:
                return False
            self._renewed_at = time.monotonic()
            try:
                return await self._fetch(fresh=True)
            except Exception as exc:
                log.warning("engine credentials: renewing the AWS credentials failed (%s)", type(exc).__name__)
                return False

    async def close(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            self._refresher = None
