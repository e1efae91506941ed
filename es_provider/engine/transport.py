"""How the engine's requests travel: opensearch-py's serializer with orjson (OrjsonSerializer) and the search hot
path's own door (SearchDoor) over http1.py's kept-alive connections. Separate from the Engine's operations: these
move bytes and raise opensearch-py's exception types; what a failure means is decided in errors.py.
"""

from __future__ import annotations

from typing import Any

import orjson
from opensearchpy import AsyncHttpConnection
from opensearchpy.exceptions import ConnectionError as OSConnectionError
from opensearchpy.exceptions import TransportError
from opensearchpy.serializer import JSONSerializer

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


class ClientConnection(AsyncHttpConnection):
    """opensearch-py's connection class that takes a callable `http_auth` (the authorizer: basic, API key,
    rotation), reading error bodies as JSON as its default class does (this one passes no content type, so every
    error would lose its type and info: "index_not_found_exception", a write block's cause)."""

    def _raise_error(self, status_code: int, raw_data: str | bytes, content_type: str | None = None) -> None:
        super()._raise_error(status_code, raw_data, content_type or "application/json")


class SearchDoor:
    """The search hot path: an orjson body POSTed to the nodes in turn over kept-alive connections (http1.py),
    answered as orjson. opensearch-py's transport and aiohttp's client cost about a third of the service's CPU per
    request (docs/benchmarks.md "hot path"). Failures are raised as opensearch-py's own exception types, so the one
    error boundary (`map_error`) and the retry rule (transient.py) treat both doors alike."""

    def __init__(self, connection: Connection) -> None:
        self._pools = [Pool(node, tls=connection.tls, auth=connection.auth) for node in connection.nodes]
        self._turn = 0

    async def post(self, path: str, body: bytes, content_type: str = "application/json") -> dict[str, Any]:
        self._turn = (self._turn + 1) % len(self._pools)
        try:
            status, raw = await self._pools[self._turn].post(path, body, content_type)
        except ConnectionError as exc:  # ConnectFailed (never sent) or Disconnected
            raise OSConnectionError("N/A", str(exc), exc) from exc
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
