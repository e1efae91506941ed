"""An HTTP proxy in front of the real OpenSearch node, for tests that must see or shape engine traffic:
it counts requests (a refusal must not reach OpenSearch), can delay answers (deadline tests) or answer
with a fixed status (429/503) instead of forwarding, or stand for a gateway that serves the engine under a path."""

from __future__ import annotations

import asyncio
import inspect
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import ClientSession, web


async def listen(app: web.Application, host: str = "127.0.0.1", port: int = 0,
                 ssl_context: ssl.SSLContext | None = None, **runner: Any) -> tuple[web.AppRunner, int]:
    """Serves `app` on `host` (port 0: a free one), with no access log unless `runner` names one: its runner (whose
    cleanup() stops it) and the port it listens on. What the harness's small servers share."""
    started = web.AppRunner(app, **{"access_log": None, **runner})
    await started.setup()
    site = web.TCPSite(started, host, port, ssl_context=ssl_context)
    await site.start()
    return started, int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]


@dataclass
class EngineProxy:
    target: str
    delay_s: float = 0.0
    status: int | None = None
    fail_matching: str | None = None  # answer `status` only to requests whose method+path contains this
    prefix: str = ""  # a gateway's path: only requests under it are forwarded (without it), others answer 404
    # An answer refuses the request; a coroutine gate may read the body (aiohttp keeps it for the forwarding).
    gate: Callable[[web.Request], web.StreamResponse | Awaitable[web.StreamResponse | None] | None] | None = None
    ssl_context: ssl.SSLContext | None = None  # served over TLS (tls_front.py)
    requests: list[str] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None
    _session: ClientSession | None = None

    @property
    def searches(self) -> int:
        return sum(1 for r in self.requests if "_search" in r)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(f"{request.method} {request.path_qs}")
        path_qs = request.path_qs
        if self.prefix:
            if not path_qs.startswith(self.prefix + "/"):
                return web.Response(status=404, text="<html>no route</html>", content_type="text/html")
            path_qs = path_qs[len(self.prefix):]
        refusal = self.gate(request) if self.gate is not None else None
        if inspect.isawaitable(refusal):
            refusal = await refusal
        if refusal is not None:
            return refusal
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.status is not None and (self.fail_matching is None or self.fail_matching in self.requests[-1]):
            return web.json_response({"error": {"type": "injected"}, "status": self.status}, status=self.status)
        assert self._session is not None
        body = await request.read()
        async with self._session.request(
            request.method, self.target + path_qs, data=body or None,
            headers={"Content-Type": request.headers.get("Content-Type", "application/json")},
        ) as upstream:
            payload = await upstream.read()
            return web.Response(status=upstream.status, body=payload,
                                content_type=upstream.content_type or "application/json")

    async def start(self) -> EngineProxy:
        self._session = ClientSession()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner, port = await listen(app, ssl_context=self.ssl_context)
        self.url = f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{port}{self.prefix}"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()
