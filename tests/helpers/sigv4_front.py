"""An AWS endpoint stand-in in front of the real local node: HTTPS (a trustme CA, tls_front.Certificates) whose
every request must carry a SigV4 signature that botocore's own SigV4Auth, recomputed here from the request as it
arrived (its Host header, raw path and query, body) and the test's known credentials, agrees with — else 403 with
AWS's own messages. It may know several credential sets at once, each valid until its `expires_at` (a rotation), and
forwards what it accepts without the auth headers (an EngineProxy with this gate). With `serverless_quirks` it
also refuses what OpenSearch Serverless refuses (docs/cluster.md "OpenSearch Serverless" lists the sources):
`GET /` and `_nodes` (404), scrolls, `_reindex` and the by-query APIs, `_refresh` and a `refresh` parameter, and
a document id given on an index or create (a vector search collection's rule)."""

from __future__ import annotations

import calendar
import hashlib
import hmac
import re
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from harness.proxy import EngineProxy
from harness.tls_front import Certificates

MISMATCH = ("The request signature we calculated does not match the signature you provided. Check your AWS Secret "
            "Access Key and signing method. Consult the service documentation for details.")
_AUTH = re.compile(r"^AWS4-HMAC-SHA256 Credential=([^/,]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                   r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$")


@dataclass
class Known:
    """A credential set AWS would accept until `expires_at` (epoch seconds; None: long-term keys)."""

    access_key: str
    secret_key: str
    token: str | None = None
    expires_at: float | None = None


@dataclass
class SigV4Front:
    upstream: str
    region: str
    service: str
    known: list[Known]
    certificates: Certificates
    serverless_quirks: bool = False
    accepted: int = 0
    refused: int = 0
    unsupported: list[str] = field(default_factory=list)  # requests a Serverless collection refused
    hashed: list[str] = field(default_factory=list)  # method + path of every request with x-amz-content-sha256
    keys: set[str] = field(default_factory=set)  # the access keys of accepted requests
    url: str = ""
    _proxy: EngineProxy | None = None

    def _refuse(self, message: str, status: int = 403) -> web.Response:
        self.refused += 1
        return web.json_response({"message": message}, status=status)

    async def _check(self, request: web.Request) -> web.StreamResponse | None:
        found = _AUTH.match(request.headers.get("Authorization", ""))
        if found is None:
            return self._refuse("Missing Authentication Token")
        access_key, day, region, service, signed, signature = found.groups()
        now = time.time()
        matching = [k for k in self.known if hmac.compare_digest(k.access_key, access_key)]
        if not matching:
            return self._refuse("The security token included in the request is invalid.")
        current = [k for k in matching if k.expires_at is None or now < k.expires_at]
        if not current:
            return self._refuse("The security token included in the request is expired")
        credentials = current[0]
        if (region, service) != (self.region, self.service):
            return self._refuse(f"Credential should be scoped to a valid region and service '{self.service}'.")
        stamp = request.headers.get("X-Amz-Date", "")
        try:
            moment = calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ"))
        except ValueError:
            return self._refuse("Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.")
        if abs(now - moment) > 300 or stamp[:8] != day:
            return self._refuse("Signature expired: the request's date is not within 5 minutes of the server's.")
        if credentials.token is not None and request.headers.get("X-Amz-Security-Token") != credentials.token:
            return self._refuse("The security token included in the request is invalid.")
        body = await request.read()
        payload = request.headers.get("X-Amz-Content-SHA256")
        if payload is not None:
            self.hashed.append(f"{request.method} {request.path}")
            if payload != hashlib.sha256(body).hexdigest():
                return self._refuse("The provided 'x-amz-content-sha256' header does not match what was computed.",
                                    400)
        elif self.service == "aoss":
            return self._refuse("x-amz-content-sha256 header is required for OpenSearch Serverless", 400)
        names = signed.split(";")
        if "host" not in names or any(name not in request.headers for name in names):
            return self._refuse(MISMATCH)
        # botocore recomputes from the request as it arrived: the Host the client sent, the raw path and query.
        again = AWSRequest(method=request.method, url=f"https://{request.headers['Host']}{request.raw_path}",
                           data=body, headers={name: request.headers[name] for name in names})
        reference = SigV4Auth(Credentials(credentials.access_key, credentials.secret_key, credentials.token),
                              self.service, self.region)
        again.context["timestamp"] = stamp
        expected = reference.signature(reference.string_to_sign(again, reference.canonical_request(again)), again)
        if not hmac.compare_digest(expected, signature):
            return self._refuse(MISMATCH)
        quirk = self._serverless_refusal(request, body) if self.serverless_quirks else None
        if quirk is not None:
            self.unsupported.append(f"{request.method} {request.path_qs}")
            return quirk
        self.accepted += 1
        self.keys.add(access_key)
        return None

    def _serverless_refusal(self, request: web.Request, body: bytes) -> web.StreamResponse | None:
        path, query = request.path, request.query
        if path == "/" or path.startswith("/_nodes"):
            return web.Response(status=404)  # Serverless answers GET / and _nodes with an empty 404
        if "scroll" in query or path.startswith("/_search/scroll") or any(
                part in path for part in ("/_reindex", "/_delete_by_query", "/_update_by_query", "/_refresh")):
            return web.Response(status=404)
        if query.get("refresh") in ("true", "", "wait_for"):
            return _error(400, "status_exception", f"{query.get('refresh') or 'true'} refresh policy is not supported.")
        if request.method in ("PUT", "POST") and re.search(r"/_(doc|create)/[^/]+$", path):
            return _error(400, "illegal_argument_exception", "Document ID is not supported in create/index operation "
                          "request")
        if path.endswith("/_bulk"):
            for line in body.splitlines()[::2]:
                action: Any = orjson.loads(line) if line.strip() else {}
                meta = next(iter(action.values()), {}) if isinstance(action, dict) and action else {}
                if ("index" in action or "create" in action) and isinstance(meta, dict) and "_id" in meta:
                    return _error(400, "illegal_argument_exception",
                                  "Document ID is not supported in create/index operation request")
        return None

    async def start(self) -> SigV4Front:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.certificates.server_chain, self.certificates.server_key)
        self._proxy = await EngineProxy(self.upstream, gate=self._check, ssl_context=context).start()
        self.url = self._proxy.url
        return self

    async def close(self) -> None:
        if self._proxy is not None:
            await self._proxy.close()


def aws_alone(monkeypatch: Any, tmp_path: Path) -> None:
    """botocore's chain sees only what the test sets after this: no credentials or profile from the environment, no
    metadata endpoint, no user's ~/.aws."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                 "AWS_SESSION_TOKEN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _error(status: int, kind: str, reason: str) -> web.Response:
    cause = {"type": kind, "reason": reason}
    return web.json_response({"error": {"root_cause": [cause], **cause}, "status": status}, status=status)


@asynccontextmanager
async def sigv4_front(upstream_url: str, region: str, service: str, known_credentials: list[Known], *,
                      directory: Path, serverless_quirks: bool = False) -> AsyncIterator[SigV4Front]:
    """The front on a free port; `.url` (https), `.certificates.ca_file` for the service's ca_file."""
    front = await SigV4Front(upstream_url, region, service, known_credentials, Certificates(directory),
                             serverless_quirks).start()
    try:
        yield front
    finally:
        await front.close()
