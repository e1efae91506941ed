"""What every part of the Engine stands on: its two clients (opensearch-py's and the HTTP/1.1 client), `_call` and what
the engine is (its `GET /`, flavor, plugins and modules). Every call runs inside a budget: the client's request
timeout, an asyncio timeout and the tenacity retries of transient failures (transient.py) all stop when the budget
is spent; and inside the one error boundary (errors.py). Separate so that the operation mixins (indices, documents,
bulk, by_query, reads) share one base declaring what they use; client.py composes them into the Engine.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from opensearchpy import AsyncOpenSearch
from opensearchpy.exceptions import TransportError
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, stop_before_delay, wait_exponential

from es_provider.core.deadline import Budget, fixed_budget
from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.engine import dialect
from es_provider.engine.connection import Connection, Node
from es_provider.engine.credentials import Authorizer
from es_provider.engine.dialect import Flavor
from es_provider.engine.errors import UnsupportedEngineError, aws_refusal, engine_errors
from es_provider.engine.transient import never_sent, transient
from es_provider.engine.transport import ClientConnection, Http1Client, OrjsonSerializer

log = logging.getLogger("es_provider.engine")
T = TypeVar("T")


def _host(node: Node) -> dict[str, Any]:
    return {"host": node.host, "port": node.port, "use_ssl": node.scheme == "https", "url_prefix": node.prefix}


def _refused_credentials(exc: BaseException) -> bool:
    """401, or AWS's 403 for an expired token or a signature it cannot match (credentials rotated under us)."""
    return isinstance(exc, TransportError) and (exc.status_code == 401 or (
        exc.status_code == 403 and aws_refusal(exc.info) is not None))


def _client_auth(auth: Authorizer | None) -> Callable[..., dict[str, str]] | None:
    """opensearch-py calls a callable `http_auth(method=, url=, body=, headers=)` for every request and adds the
    headers it returns: the one authorizer then serves both clients, rotation and signing included."""
    if auth is None:
        return None

    def headers(method: str, url: str, body: bytes | None, headers: dict[str, str]) -> dict[str, str]:
        return auth(method, url, body)

    return headers


class EngineBase:
    """What every part of the Engine (client.py) shares: the connections, the one way to call (`_call`) and what it
    learns of the engine (flavor, plugins, modules)."""

    def __init__(
        self, connection: Connection | str, *, timeout_s: float = 30.0,
        observe: Callable[[str, float, bool], None] | None = None, by_query: bool | None = None,
    ) -> None:
        """`connection`: connection.py's model ([opensearch] read by `from_settings`), or a plain URL (a node
        without security: tests, benchmarks). `by_query`: None asks the engine whether it has
        `_by_query`/`_reindex`; False forces the core-API path (tests run it on OpenSearch too)."""
        self.connection = connection if isinstance(connection, Connection) else Connection.plain(connection)
        self.url = self.connection.url
        self._timeout_s = timeout_s
        self._observe = observe
        # Retries are ours (tenacity, bounded by each request's budget), not the client's. Several nodes: requests
        # go round-robin, and a retry after a connection failure goes to the next node.
        self._client = AsyncOpenSearch(
            hosts=[_host(node) for node in self.connection.nodes], timeout=timeout_s, max_retries=0,
            retry_on_timeout=False, serializer=OrjsonSerializer(), ssl_context=self.connection.tls,
            http_auth=_client_auth(self.connection.auth), http_compress=False,
            connection_class=ClientConnection,
        )
        self._http1 = Http1Client(self.connection)
        self._flavor: Flavor | None = None  # which engine answers: learnt from GET / at the first call that cares
        self._by_query = by_query
        self._ensured: set[str] = set()  # the service's own indices this process made or saw exist (indices.py)

    async def flavor(self, budget: Budget | None = None) -> Flavor:
        """OpenSearch or Elasticsearch, and its version (dialect.py), from the node's `GET /`, once."""
        if self._flavor is None and self.connection.serverless:
            # Serverless answers GET / with an empty 404; its collections speak OpenSearch 2's API.
            self._flavor = Flavor("opensearch", "2")
        if self._flavor is None:
            root = await self.info(budget)
            try:
                self._flavor = dialect.detect(root)
            except dialect.UnsupportedEngine as exc:
                raise UnsupportedEngineError(ErrorCode.UNAVAILABLE, detail=str(exc)) from None
            log.debug("engine: %s", self._flavor)
        return self._flavor

    async def close(self) -> None:
        await self._client.close()
        self._http1.close()
        await self.connection.close()

    def _default_budget(self) -> Budget:
        return fixed_budget(int(self._timeout_s * 1000), now_monotonic=time.monotonic())

    async def _call(self, budget: Budget | None, call: Callable[[float], Awaitable[T]], *, retry: bool = True) -> T:
        budget = budget or self._default_budget()
        remaining = budget.remaining(time.monotonic())
        if remaining <= 0:
            raise KnowledgeError(ErrorCode.TIMED_OUT, detail="budget spent before the engine call")
        try:
            answer = await self._attempts(budget, call, retry=retry)
        except KnowledgeError as exc:
            if self.connection.may_want_client_cert and "disconnected" in (exc.detail or "").lower():
                # A TLS 1.3 server that wants a client certificate just closes the connection: say so.
                exc.detail = (f"{exc.detail}; the engine closed the TLS connection before answering: if it asks "
                              "for a client certificate, set [opensearch] client_cert_file and client_key_file")
            raise
        self.connection.accepted()  # the credential it carried works: a rotation settles on it
        return answer

    async def _attempts(self, budget: Budget, call: Callable[[float], Awaitable[T]], *, retry: bool) -> T:
        remaining = budget.remaining(time.monotonic())
        with engine_errors():
            await self.connection.prepare()
            # The first attempt runs bare (the hot path); tenacity takes over only after a transient failure.
            # A write that must not run twice (retry=False) is still sent to the next node when no node got it.
            worth_retrying = transient if retry else never_sent
            try:
                async with asyncio.timeout(remaining):
                    return await call(remaining)
            except Exception as exc:
                if _refused_credentials(exc) and await self.connection.renew():
                    log.info("engine refused the credential; resending with the rotated one")
                    async with asyncio.timeout(max(0.001, budget.remaining(time.monotonic()))):
                        return await call(budget.remaining(time.monotonic()))
                if not worth_retrying(exc):
                    raise
            await asyncio.sleep(min(0.05, max(0.0, budget.remaining(time.monotonic()))))
            remaining = budget.remaining(time.monotonic())
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(worth_retrying),
                stop=stop_after_attempt(2) | stop_before_delay(remaining),
                wait=wait_exponential(multiplier=0.05, max=0.5),
                reraise=True,
            ):
                with attempt:
                    left = budget.remaining(time.monotonic())
                    if left <= 0:
                        raise TimeoutError
                    async with asyncio.timeout(left):
                        return await call(left)
        raise KnowledgeError(ErrorCode.UNAVAILABLE, detail="retry loop ended without a result")  # pragma: no cover

    async def info(self, budget: Budget | None = None) -> dict[str, Any]:
        async def run(left: float) -> dict[str, Any]:
            response: dict[str, Any] = await self._client.info(request_timeout=left)
            return response

        return await self._call(budget, run)

    async def knn_available(self, budget: Budget | None = None) -> bool:
        """Whether every node has the k-NN plugin (official image: "opensearch-knn"; local node: KNNPlugin).
        Elasticsearch 8 and later has kNN search built in (dense_vector)."""
        if self.connection.serverless or (await self.flavor(budget)).elastic:
            return True  # Serverless has no _nodes to ask: k-NN is part of its vector search collections
        return await self._every_node(
            "plugins", lambda name: "knn" in name.lower(), budget)

    async def _every_node(self, kind: str, wanted: Callable[[str], bool], budget: Budget | None = None) -> bool:
        """Whether every node lists a `kind` ("plugins" or "modules") whose name is `wanted`."""

        async def run(left: float) -> bool:
            response = await self._client.nodes.info(metric="plugins", request_timeout=left)
            nodes = (response.get("nodes") or {}).values()
            return bool(nodes) and all(any(wanted(str(item.get("name", ""))) for item in node.get(kind) or [])
                                       for node in nodes)

        return await self._call(budget, run)
