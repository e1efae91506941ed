"""A small keep-alive HTTP/1.1 client for the search hot path: requests written in one piece, answers parsed by
httptools (llhttp, as uvicorn uses it), connections kept per node and reused.

Why not aiohttp's client: measured on the benchmark machine it spent about 1.0 ms of CPU per search where this
spends about 0.35 ms (docs/benchmarks.md "hot path") — the service's largest cost after the engine itself. It is
used only for searches, which are reads: a reused connection that the node had already closed is retried once on a
new one. Everything else (admin, bulk, scans) keeps opensearch-py.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque

import httptools

from es_provider.core.errors import ConnectFailed, Disconnected
from es_provider.engine.connection import Node
from es_provider.engine.credentials import Authorizer


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._body: list[bytes] = []
        self._answer: asyncio.Future[tuple[int, bytes]] | None = None
        self.received = False  # any byte of the current answer
        self.reusable = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(Disconnected(f"unparseable answer: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        error = Disconnected(f"connection closed{f': {exc}' if exc else ''}")
        error.__cause__ = exc  # a TLS alert (a client certificate asked for) is read from it
        self._fail(error)

    # httptools callbacks
    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self.reusable = self._parser.should_keep_alive()
        answer, self._answer = self._answer, None
        if answer is not None and not answer.done():
            answer.set_result((self._parser.get_status_code(), b"".join(self._body)))

    def _fail(self, exc: Exception) -> None:
        answer, self._answer = self._answer, None
        if answer is not None and not answer.done():
            answer.set_exception(exc)

    async def request(self, data: bytes) -> tuple[int, bytes]:
        assert self.transport is not None
        self._body = []
        self.received = False
        self.reusable = False
        self._answer = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return await self._answer

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class Pool:
    """Keep-alive connections to one node. At most `keep` idle connections are kept; more may be open at once while
    requests need them. `auth` adds each request's credential headers (a static header is cached by its maker)."""

    def __init__(self, node: Node, *, tls: ssl.SSLContext | None = None, auth: Authorizer | None = None,
                 keep: int = 64) -> None:
        self.host = node.host
        self.port = node.port
        self._base = node.base
        self._prefix = node.prefix.encode("ascii")
        self._ssl = tls
        self._auth = auth
        self._head = f"Host: {node.netloc}\r\n".encode("latin-1")
        self._keep = keep
        self._idle: deque[_Connection] = deque()

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, connection = await loop.create_connection(_Connection, self.host, self.port, ssl=self._ssl)
        except OSError as exc:
            raise ConnectFailed(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        return connection

    async def post(self, path: str, body: bytes, content_type: str = "application/json") -> tuple[int, bytes]:
        """(status, body) of a POST; the answer is read whole."""
        head = self._head
        if self._auth is not None:
            extra = self._auth("POST", self._base + path, body)
            head += "".join(f"{name}: {value}\r\n" for name, value in extra.items()).encode("latin-1")
        data = b"".join((
            b"POST ", self._prefix, path.encode("ascii"), b" HTTP/1.1\r\n", head, b"Content-Type: ",
            content_type.encode("ascii"), b"\r\nContent-Length: ", str(len(body)).encode("ascii"), b"\r\n\r\n", body,
        ))
        while self._idle:
            connection = self._idle.pop()
            if connection.transport is None or connection.transport.is_closing():
                continue
            try:
                return await self._exchange(connection, data)
            except Disconnected:
                if connection.received:
                    raise
                # The node closed an idle connection as we reused it: nothing was answered, send it anew.
        return await self._exchange(await self._connect(), data)

    async def _exchange(self, connection: _Connection, data: bytes) -> tuple[int, bytes]:
        done = False
        try:
            answer = await connection.request(data)
            done = True
            return answer
        finally:
            if done and connection.reusable and len(self._idle) < self._keep:
                self._idle.append(connection)
            else:
                connection.close()  # cancelled, failed, or not to be kept: never reused half-read

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()
