"""Admission: who may take the service's time. A body must arrive whole within `body_timeout_s` (slow senders are
cut off with 408 and counted); a request takes a slot only once its body is in; each credential holds at most
`max_concurrency_per_key` slots; and at most `active_requests` run at once, the others waiting for turns that go
round-robin across credentials. So neither stalled connections nor one busy caller starve the rest: a calm caller
waits for one turn, not behind a flood's queue.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import ClientPayloadError, web
from aiohttp.http_exceptions import HttpProcessingError

from es_provider.config.serving import ServerSettings
from es_provider.core import tracing
from es_provider.core.deadline import Budget
from es_provider.core.errors import ClientDisconnected, ErrorCode, KnowledgeError, protocol_error
from es_provider.core.metrics import Metrics


class Admission:
    def __init__(self, server: ServerSettings, metrics: Metrics) -> None:
        self._max_bytes = server.max_body_bytes
        self._body_timeout_s = server.body_timeout_s
        self._total = server.max_concurrency
        self._per_key = server.max_concurrency_per_key
        self._metrics = metrics
        self._active = server.active_requests
        self._admitted = 0
        self._by_holder: dict[str, int] = {}
        self._running = 0
        self._waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()
        self._costly = asyncio.Semaphore(server.max_costly_searches or max(1, server.active_requests // 4))

    async def body(self, request: web.Request) -> bytes:
        """The raw body: refused (413) as soon as it exceeds `max_body_bytes`, whatever Content-Length claims;
        cut off (408) when it has not arrived whole within `body_timeout_s`. A compressed body (any
        Content-Encoding but identity) is refused (415) unread: no platform we serve sends one, and it is never
        inflated (app.py turns aiohttp's decompression off)."""
        encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise protocol_error("content encoding must be identity (compressed bodies are not accepted)",
                                 status=415, detail=f"Content-Encoding {encoding[:40]!r} refused")
        if request.content_length is not None and request.content_length > self._max_bytes:
            raise protocol_error("body is too large", status=413)
        buf = bytearray()
        try:
            async with asyncio.timeout(self._body_timeout_s):
                while True:
                    chunk = await request.content.read(self._max_bytes + 1 - len(buf))
                    if not chunk:
                        break
                    buf.extend(chunk)
                    if len(buf) > self._max_bytes:
                        raise protocol_error("body is too large", status=413)
        except TimeoutError:
            self._metrics.slow_bodies.inc()
            detail = f"body not complete after {self._body_timeout_s} s ({len(buf)} bytes)"
            raise protocol_error("the request body did not arrive in time", status=408, detail=detail) from None
        except (ConnectionError, ClientPayloadError, HttpProcessingError) as exc:
            raise ClientDisconnected(f"{type(exc).__name__} after {len(buf)} bytes of body") from None
        return bytes(buf)

    @asynccontextmanager
    async def slot(self, holder: str) -> AsyncIterator[None]:
        """Admits one request of `holder` (a credential), or refuses it with 429 at once when the service or that
        credential is full; then waits for its turn to run, turns going round-robin across credentials."""
        held = self._by_holder.get(holder, 0)
        if self._admitted >= self._total:
            raise KnowledgeError(ErrorCode.RATE_LIMITED, detail=f"all {self._total} slots busy")
        if held >= self._per_key:
            raise KnowledgeError(ErrorCode.RATE_LIMITED, detail=f"this credential holds its {self._per_key} slots")
        self._admitted += 1
        self._by_holder[holder] = held + 1
        try:
            with tracing.step("admission wait") as span:  # traced: a slow answer that only queued shows as such
                span.set_attribute("es_provider.admission.queued", await self._turn(holder))
            self._metrics.in_flight.inc()
            try:
                yield
            finally:
                self._metrics.in_flight.dec()
                self._pass_turn()
        finally:
            self._admitted -= 1
            left = self._by_holder[holder] - 1
            if left:
                self._by_holder[holder] = left
            else:
                del self._by_holder[holder]

    @asynccontextmanager
    async def costly(self, needed: bool, budget: Budget) -> AsyncIterator[None]:
        """For a search the engine pays dearly for (leading-wildcard metadata patterns): waits, within the
        request's budget, until fewer than `max_costly_searches` such searches run, so they never hold every
        engine search thread. A no-op when not `needed`."""
        if not needed:
            yield
            return
        try:
            with tracing.step("costly-search wait"):
                async with asyncio.timeout(max(0.0, budget.remaining(time.monotonic()))):
                    await self._costly.acquire()
        except TimeoutError:
            raise KnowledgeError(ErrorCode.TIMED_OUT, detail="budget spent waiting for a costly-search turn") from None
        try:
            yield
        finally:
            self._costly.release()

    async def _turn(self, holder: str) -> bool:
        """Waits for `holder`'s turn to run; whether it had to queue for it."""
        if self._running < self._active and not self._waiting:
            self._running += 1
            return False
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(holder, deque()).append(turn)
        try:
            await turn
            return True
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._pass_turn()  # granted just as it was cancelled: hand the turn on
            else:
                queue = self._waiting.get(holder)
                if queue is not None and turn in queue:
                    queue.remove(turn)
                    if not queue:
                        del self._waiting[holder]
            raise

    def _pass_turn(self) -> None:
        """A running request finished: the next credential in line (round-robin) gets its turn."""
        while self._waiting:
            holder, queue = next(iter(self._waiting.items()))
            turn = queue.popleft()
            if queue:
                self._waiting.move_to_end(holder)
            else:
                del self._waiting[holder]
            if not turn.done():
                turn.set_result(None)
                return
        self._running -= 1
