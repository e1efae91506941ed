"""A reverse proxy that adds `Authorization: Bearer <token>` to every request it forwards, so that a client that
cannot send that header (the MCP conformance suite, scripts/mcp-conformance) can be held against an endpoint that
requires an OAuth bearer token.

Every request is forwarded as it came (method, raw path and query, headers, body) to the target, whose base path the
request's path is appended to; the client's own Authorization is replaced, its Host is not sent (the target gets its
own address) unless `forward_host`, and hop-by-hop headers stay on their hop. The answer streams back as it comes
(status, headers, body chunk by chunk: an SSE stream reaches the client event by event), compressed bodies
untouched. A target that cannot be reached answers 502.

    async with BearerProxy("http://127.0.0.1:8080", token) as proxy:   # proxy.url: http://127.0.0.1:<port>
        ...  # scripts/mcp-conformance --url f"{proxy.url}/mcp" ...

By hand: `TOKEN=... python -m harness.bearer_proxy http://127.0.0.1:8080 8082` (the token from the environment, so it
is not in the process list). Nothing here logs the token.
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass, field
from types import TracebackType

from aiohttp import ClientError, ClientSession, ClientTimeout, web
from multidict import CIMultiDict
from yarl import URL

from harness.proxy import listen

# RFC 9110 §7.6.1's hop-by-hop headers, plus the framing aiohttp redoes on each side (Content-Length, chunking).
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
                        "upgrade", "proxy-authenticate", "proxy-authorization", "content-length"})


@dataclass
class BearerProxy:
    target: str  # scheme://host:port[/base]
    token: str = field(repr=False)
    port: int = 0  # 0: a free port, read back into url
    host: str = "127.0.0.1"
    # Send the client's Host on: the target then judges the Host the client sent (a DNS-rebinding check on Host),
    # not its own address. Off, only an Origin check at the target can refuse a foreign origin.
    forward_host: bool = False
    url: str = ""
    _runner: web.AppRunner | None = field(default=None, repr=False)
    _session: ClientSession | None = field(default=None, repr=False)

    def _headers(self, request: web.Request) -> CIMultiDict[str]:
        dropped = HOP_BY_HOP | {"authorization"} | (set() if self.forward_host else {"host"})
        headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in dropped)
        headers["Authorization"] = f"Bearer {self.token}"
        return headers

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = await request.read()
        response: web.StreamResponse | None = None
        try:
            # skip_auto_headers: send what the client sent, not aiohttp's defaults (Accept-Encoding, User-Agent,
            # a Content-Type for the bytes).
            async with self._session.request(
                # encoded: the path and query go on byte for byte (yarl would decode %2F in a query).
                request.method, URL(self.target.rstrip("/") + request.raw_path, encoded=True),
                headers=self._headers(request),
                data=body or None, allow_redirects=False,
                skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"),
            ) as upstream:
                response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                for name, value in upstream.headers.items():
                    if name.lower() not in HOP_BY_HOP:
                        response.headers.add(name, value)
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                return response
        except (ClientError, TimeoutError) as exc:
            if response is not None and response.prepared:
                raise  # the answer has begun: nothing better than breaking it off
            return web.Response(status=502, text=f"bearer proxy: the target did not answer ({type(exc).__name__})")

    async def start(self) -> BearerProxy:
        # No read timeout: an SSE stream may stay quiet; auto_decompress off: the bytes go on as they came.
        self._session = ClientSession(timeout=ClientTimeout(total=None, sock_connect=10), auto_decompress=False)
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        # handler_cancellation: a client that hangs up ends its forwarding (and the held-open upstream stream);
        # a short shutdown_timeout: close() does not wait a minute for a held-open stream.
        self._runner, port = await listen(app, self.host, self.port, handler_cancellation=True, shutdown_timeout=1.0)
        self.url = f"http://{self.host}:{port}"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> BearerProxy:
        return await self.start()

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        await self.close()


async def start(target_url: str, token: str, port: int = 0) -> tuple[BearerProxy, str]:
    """A started proxy and its URL (close it with `await proxy.close()`)."""
    proxy = await BearerProxy(target_url, token, port).start()
    return proxy, proxy.url


async def _serve(target: str, port: int) -> None:
    async with BearerProxy(target, os.environ["TOKEN"], port) as proxy:
        print(f"bearer proxy on {proxy.url} -> {target}", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_serve(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0))
