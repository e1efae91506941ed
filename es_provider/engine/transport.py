"""How the engine's requests travel: opensearch-py's serializer with orjson (OrjsonSerializer) and the search hot
path's own client (Http1Client) over http1.py's kept-alive connections. Separate from the Engine's operations: these
move bytes and raise opensearch-py's exception types; what a failure means is decided in errors.py.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import aiohttp
import orjson
from opensearchpy import AsyncHttpConnection
from opensearchpy.exceptions import ConnectionError as OSConnectionError
from opensearchpy.exceptions import TransportError
from opensearchpy.serializer import JSONSerializer

from es_provider.core.errors import Redirected, origin_of
from es_provider.engine.connection import Connection
from es_provider.engine.http1 import Pool


class OrjsonSerializer(JSONSerializer):
    """opensearch-py's serializer with orjson for bodies: several times faster on bulk and search requests."""

    def dumps(self, data: Any) -> str:
        if isinstance(data, str | bytes):
            return data  # type: ignore[return-value]
        return orjson.dumps(data, default=self.default).decode("utf-8")

    def loads(self, s: str) -> Any:
        return orjson.loads(s)


class _Unfollowed:
    """One request's answer, refused when it is a redirect (raised inside opensearch-py's request, which keeps it as
    the ConnectionError's info; errors.py maps it, transient.py never retries it)."""

    def __init__(self, request: Any, url: Any) -> None:
        self._request = request
        self._url = url

    async def __aenter__(self) -> aiohttp.ClientResponse:
        response: aiohttp.ClientResponse = await self._request.__aenter__()
        if 300 <= response.status < 400:
            target = origin_of(response.headers.get("Location", "")) if response.headers.get("Location") else ""
            await self._request.__aexit__(None, None, None)
            raise Redirected(response.status, origin_of(str(self._url)), target)
        return response

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._request.__aexit__(kind, exc, tb)


class _NoRedirects:
    """aiohttp's session as opensearch-py uses it (`request`, `close`), asked never to follow a redirect: aiohttp
    follows one by default, to another origin and from https to http, with every header but Authorization (a SigV4
    session token went along in clear text, and the other host's answers were believed)."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session

    def request(self, method: str, url: Any, **kwargs: Any) -> _Unfollowed:
        return _Unfollowed(self._session.request(method, url, allow_redirects=False, **kwargs), url)

    async def close(self) -> None:
        await self._session.close()


class ClientConnection(AsyncHttpConnection):
    """opensearch-py's connection class that takes a callable `http_auth` (the authorizer: basic, API key,
    rotation), follows no redirect (_NoRedirects), and reads error bodies as JSON as its default class does (this
    one passes no content type, so every error would lose its type and info: "index_not_found_exception", a write
    block's cause)."""

    async def _create_aiohttp_session(self) -> Any:
        await super()._create_aiohttp_session()
        self.session = _NoRedirects(self.session)  # type: ignore[arg-type]

    def _raise_error(self, status_code: int, raw_data: str | bytes, content_type: str | None = None) -> None:
        super()._raise_error(status_code, raw_data, content_type or "application/json")


class Http1Client:
    """The search hot path: an orjson body POSTed to the nodes in turn over kept-alive connections (http1.py),
    answered as orjson. opensearch-py's transport and aiohttp's client cost about a third of the service's CPU per
    request (docs/benchmarks.md "hot path"). Failures are raised as opensearch-py's own exception types, so the one
    error boundary (`map_error`) and the retry rule (transient.py) treat both clients alike."""

    def __init__(self, connection: Connection) -> None:
        self._nodes = connection.nodes
        self._pools = [Pool(node, tls=connection.tls, auth=connection.auth) for node in connection.nodes]
        self._turn = 0

    async def post(self, path: str, body: bytes, content_type: str = "application/json") -> dict[str, Any]:
        self._turn = (self._turn + 1) % len(self._pools)
        try:
            status, raw = await self._pools[self._turn].post(path, body, content_type)
        except ConnectionError as exc:  # ConnectFailed (never sent) or Disconnected
            raise OSConnectionError("N/A", str(exc), exc) from exc
        if 300 <= status < 400:  # http1.py follows nothing; say it was a redirect, as the admin client does
            refused = Redirected(status, origin_of(self._nodes[self._turn].base))
            raise OSConnectionError("N/A", str(refused), refused)
        if status >= 300:
            try:
                info: Any = orjson.loads(raw)
                error = info.get("error", {}) if isinstance(info, dict) else {}
                kind = error.get("type", str(error)) if isinstance(error, dict) else str(error)
            except orjson.JSONDecodeError:
                info, kind = raw[:2000].decode("utf-8", "replace"), "unparseable answer"
            raise TransportError(status, kind, info)
        answer: dict[str, Any] = orjson.loads(raw)
        return answer

    def close(self) -> None:
        for pool in self._pools:
            pool.close()
