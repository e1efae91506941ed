"""The MCP conformance harness works end to end: scripts/mcp-conformance (npm @modelcontextprotocol/conformance
0.1.13, the newest that runs on Node 20) run by tests/helpers/conformance.py, through harness/bearer_proxy.py, against
a tiny MCP server made with the official SDK (mcp 2.3.0 MCPServer: stateless Streamable HTTP, JSON answers, tools
`search` and `fetch`) that refuses any request without its bearer token (the SDK's token_verifier). Through the proxy
server-initialize, ping, tools-list and dns-rebinding-protection pass; without it server-initialize fails (401).
The proxy itself is checked against a plain aiohttp target: the token replaces the client's, Host is not sent on
(unless forward_host), everything else is, and an answer streams back chunk by chunk.

The 32 server scenarios of 0.1.13 (`scripts/mcp-conformance list`; 30 in its active suite, the 2 marked pending
run only with --suite pending|all), and which apply to an MCP endpoint that offers only tools (search, fetch,
retrieve, list_knowledge_bases) and none of the logging, completion, resources, prompts, sampling or elicitation
capabilities, answering stateless JSON (no session, no SSE) behind OAuth bearer tokens (run through the proxy):

Apply (hold the endpoint to these):
- server-initialize: the initialize handshake (the suite speaks the handshake revisions, not 2026-07-28's envelope).
- ping: `{}` back; every server answers ping.
- tools-list: every tool has a name, a description and an inputSchema.
- dns-rebinding-protection: a foreign Host/Origin (evil.example.com) is refused with a 4xx, a localhost one
  accepted with a 2xx; it needs a localhost URL. Run it through the proxy: straight at an endpoint that wants a
  token, the refusal passes with 401 whatever the endpoint does about Origin, and the acceptance fails. The proxy
  does not send Host on, so by default it holds the Origin check only; BearerProxy(forward_host=True) holds the
  Host check too (the SDK answers 421 for Host, 403 for Origin).

Do not apply (each needs a fixture tool, prompt or resource of the suite's reference server, a capability the
endpoint does not offer, a session, or an SSE answer):
- tools-call-simple-text, tools-call-error: they call the fixture tools test_simple_text and test_error_handling.
  The SDK server passes them only by accident (it answers an unknown tool with isError text); an endpoint that
  answers an unknown tool with JSON-RPC -32602, as the specification says, fails them.
- tools-call-image, tools-call-audio, tools-call-embedded-resource, tools-call-mixed-content: fixture tools
  returning those content types.
- tools-call-with-logging, logging-set-level: the logging capability.
- tools-call-with-progress: progress notifications during a call (a fixture tool; a JSON answer carries none).
- tools-call-sampling, tools-call-elicitation, elicitation-sep1034-defaults, elicitation-sep1330-enums: requests
  from the server to the client (sampling, elicitation), impossible in a stateless JSON answer.
- completion-complete: the completions capability.
- resources-list, resources-read-text, resources-read-binary, resources-templates-read, resources-subscribe,
  resources-unsubscribe: the resources capability (the SDK server passes resources-list only because it always
  offers resources; an endpoint without them answers -32601).
- prompts-list, prompts-get-simple, prompts-get-with-args, prompts-get-embedded-resource, prompts-get-with-image:
  the prompts capability (prompts-list: as resources-list).
- server-sse-multiple-streams: SSE streams of one session (SEP-1699); a stateless server has no session id and
  gets a WARNING only (0 passed, 0 failed).
- server-sse-polling (pending): SSE resumption with the fixture tool test_reconnection; a WARNING only.
- json-schema-2020-12 (pending): the fixture tool json_schema_2020_12_tool, whose inputSchema keeps $schema, $defs
  and additionalProperties; the endpoint's own tests can hold its schemas to the same.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import uvicorn
from aiohttp import ClientSession, web
from helpers.conformance import failures, run_conformance, statuses
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from yarl import URL

from harness.bearer_proxy import BearerProxy

APPLICABLE = ["server-initialize", "ping", "tools-list", "dns-rebinding-protection"]


@dataclass
class OneToken:
    """The SDK's TokenVerifier for one fixed token; counts the requests it let in."""

    token: str
    accepted: list[str] = field(default_factory=list)

    async def verify_token(self, token: str) -> AccessToken | None:
        if not hmac.compare_digest(token.encode(), self.token.encode()):
            return None
        self.accepted.append("ok")
        return AccessToken(token=token, client_id="conformance", scopes=[], subject="tester")


@dataclass
class TinyServer:
    url: str  # http://127.0.0.1:<port> (the endpoint is at /mcp)
    verifier: OneToken


def tiny_app(port: int, verifier: OneToken) -> Starlette:
    # log_level: MCPServer calls logging.basicConfig; WARNING is the root's default, so other tests keep theirs.
    server = MCPServer("conformance-harness", version="0.0.1", token_verifier=verifier, log_level="WARNING",
                       auth=AuthSettings(issuer_url="https://issuer.example.test",
                                         resource_server_url=f"http://127.0.0.1:{port}/mcp",
                                         validate_token_resource=False))

    @server.tool(description="Search the knowledge bases; returns ids, titles and urls.")
    def search(query: str) -> dict[str, list[dict[str, str]]]:
        return {"results": [{"id": "doc-1", "title": f"hit for {query}", "url": "https://example.test/doc-1"}]}

    @server.tool(description="Fetch one document's text by id.")
    def fetch(id: str) -> dict[str, str]:  # `id`: the argument name of the usual fetch tool
        return {"id": id, "title": "Doc", "text": f"text of {id}", "url": f"https://example.test/{id}"}

    return server.streamable_http_app(stateless_http=True, json_response=True)


@pytest.fixture(scope="module")
def tiny_server() -> Iterator[TinyServer]:
    """The SDK server under uvicorn in a thread of its own (its own event loop), on a socket bound here."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    verifier = OneToken(secrets.token_urlsafe(24))
    server = uvicorn.Server(uvicorn.Config(tiny_app(port, verifier), log_level="warning", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            pytest.fail("the tiny MCP server did not start", pytrace=False)
        time.sleep(0.05)
    yield TinyServer(f"http://127.0.0.1:{port}", verifier)
    server.should_exit = True
    thread.join(10)
    sock.close()


async def test_through_the_proxy_the_applicable_scenarios_pass(tiny_server: TinyServer, tmp_path: Path) -> None:
    before = len(tiny_server.verifier.accepted)
    async with BearerProxy(tiny_server.url, tiny_server.verifier.token) as proxy:
        # In a thread: the proxy answers in this event loop while the suite runs.
        results = await asyncio.to_thread(run_conformance, f"{proxy.url}/mcp", APPLICABLE, tmp_path)
    assert failures(results) == []
    assert sorted(results) == sorted(APPLICABLE)
    assert all(checks and all(c["status"] == "SUCCESS" for c in checks) for checks in results.values()), \
        statuses(results)
    assert results["tools-list"][0]["details"]["tools"] == ["search", "fetch"]
    # The foreign Origin was refused by the server itself (403), behind a valid token, not by a missing one (401).
    rebinding = {c["id"]: c["details"]["statusCode"] for c in results["dns-rebinding-protection"]}
    assert rebinding == {"localhost-host-rebinding-rejected": 403, "localhost-host-valid-accepted": 200}
    assert len(tiny_server.verifier.accepted) > before


async def test_forwarding_host_holds_the_host_check(tiny_server: TinyServer, tmp_path: Path) -> None:
    async with BearerProxy(tiny_server.url, tiny_server.verifier.token, forward_host=True) as proxy:
        results = await asyncio.to_thread(run_conformance, f"{proxy.url}/mcp", ["dns-rebinding-protection"],
                                          tmp_path)
    assert failures(results) == []
    rebinding = {c["id"]: c["details"]["statusCode"] for c in results["dns-rebinding-protection"]}
    assert rebinding == {"localhost-host-rebinding-rejected": 421, "localhost-host-valid-accepted": 200}


def test_without_the_proxy_initialize_fails(tiny_server: TinyServer, tmp_path: Path) -> None:
    results = run_conformance(f"{tiny_server.url}/mcp", ["server-initialize"], tmp_path)
    found = failures(results)
    assert len(found) == 1 and found[0].startswith("server-initialize: server-initialize: "), found
    assert "invalid_token" in found[0], found  # the 401's body: the suite's client does not show the status


async def _echo(request: web.Request) -> web.Response:
    response = web.json_response({"method": request.method, "path_qs": request.raw_path,
                                  "body": (await request.text()), "host": request.headers.get("Host"),
                                  "authorization": request.headers.getall("Authorization", []),
                                  "x_test": request.headers.getall("X-Test", [])}, status=207)
    response.headers.add("Set-Cookie", "a=1")
    response.headers.add("Set-Cookie", "b=2")
    return response


async def test_the_proxy_forwards_and_streams() -> None:
    release = asyncio.Event()

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: first\n\n")
        await asyncio.wait_for(release.wait(), 10)  # set only once the client has read the first event
        await response.write(b"data: second\n\n")
        return response

    app = web.Application()
    app.router.add_route("*", "/base/echo", _echo)
    app.router.add_get("/base/stream", stream)
    target = web.AppRunner(app, access_log=None)
    await target.setup()
    site = web.TCPSite(target, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with BearerProxy(f"http://127.0.0.1:{port}/base", "s3cret") as proxy, ClientSession() as client:
            async with client.post(URL(f"{proxy.url}/echo?a=1&b=%2F", encoded=True), data=b'{"x": 1}',
                                   headers=[("Authorization", "Bearer theirs"), ("X-Test", "1"), ("X-Test", "2")],
                                   ) as answer:
                assert answer.status == 207
                assert answer.headers.getall("Set-Cookie") == ["a=1", "b=2"]
                echoed = await answer.json()
            assert echoed == {"method": "POST", "path_qs": "/base/echo?a=1&b=%2F", "body": '{"x": 1}',
                              "host": f"127.0.0.1:{port}", "authorization": ["Bearer s3cret"], "x_test": ["1", "2"]}
            async with client.get(f"{proxy.url}/stream") as answer:
                assert answer.headers["Content-Type"] == "text/event-stream"
                first = await asyncio.wait_for(answer.content.readuntil(b"\n\n"), 10)
                release.set()
                rest = await asyncio.wait_for(answer.content.read(), 10)
            assert (first, rest) == (b"data: first\n\n", b"data: second\n\n")
    finally:
        await target.cleanup()
