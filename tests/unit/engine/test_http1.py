"""The search hot path's HTTP/1.1 client (http1.py) against small local servers that answer as a node would:
keep-alive reuse, a reused connection the server had closed, chunked answers, a node that is not there, basic auth,
an answer cut off half-way, and a cancelled request that must not leave its connection for the next one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from es_provider.engine.connection import parse_nodes
from es_provider.engine.credentials import RotatingSecret, basic_auth
from es_provider.engine.http1 import ConnectFailed, Disconnected
from es_provider.engine.http1 import Pool as NodePool


def Pool(base: str, **options: Any) -> NodePool:
    return NodePool(parse_nodes(base)[0], **options)


Reply = Callable[[bytes], bytes | None]  # request head+body -> raw answer (None: close without answering)


def fixed(body: bytes, *, close: bool = False) -> Reply:
    extra = b"Connection: close\r\n" if close else b""
    return lambda _: b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


class Node:
    """A TCP server reading one request at a time (head + Content-Length body) and writing `reply`'s answer."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                answer = self.reply(request)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
                if b"Connection: close" in answer:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    @property
    def base(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"


@pytest.fixture
async def node() -> AsyncIterator[Node]:
    serving = Node(fixed(b'{"ok":true}'))
    serving.server = await asyncio.start_server(serving.handle, "127.0.0.1", 0)
    yield serving
    serving.server.close()


async def test_keeps_the_connection_alive(node: Node) -> None:
    pool = Pool(node.base)
    for _ in range(5):
        assert await pool.post("/i/_search", b"{}") == (200, b'{"ok":true}')
    assert node.connections == 1
    head = node.requests[0].split(b"\r\n\r\n")[0]
    assert head.startswith(b"POST /i/_search HTTP/1.1\r\n") and b"Content-Length: 2" in head
    pool.close()


async def test_a_closing_answer_is_not_reused(node: Node) -> None:
    node.reply = fixed(b"{}", close=True)
    pool = Pool(node.base)
    assert await pool.post("/", b"{}") == (200, b"{}")
    assert await pool.post("/", b"{}") == (200, b"{}")
    assert node.connections == 2
    pool.close()


async def test_a_reused_connection_the_node_dropped_is_sent_again(node: Node) -> None:
    pool = Pool(node.base)
    await pool.post("/", b"{}")
    answers = iter([None])  # the next request on the kept connection: closed without an answer
    node.reply = lambda request: next(answers, fixed(b"{}")(request))
    assert await pool.post("/", b"{}") == (200, b"{}")
    assert node.connections == 2
    pool.close()


async def test_chunked_answers_are_read_whole(node: Node) -> None:
    node.reply = lambda _: (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                            b"3\r\n{\"a\r\n5\r\n\":1}\n\r\n0\r\n\r\n")
    pool = Pool(node.base)
    assert await pool.post("/", b"{}") == (200, b'{"a":1}\n')
    pool.close()


async def test_an_error_status_is_returned_with_its_body(node: Node) -> None:
    node.reply = lambda _: b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 2\r\n\r\n{}"
    pool = Pool(node.base)
    assert await pool.post("/", b"{}") == (429, b"{}")
    pool.close()


async def test_an_answer_cut_off_half_way_fails_and_is_not_resent(node: Node) -> None:
    node.reply = lambda _: b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\n{\"partial"
    pool = Pool(node.base)
    with pytest.raises(Disconnected):
        await pool.post("/", b"{}")
    assert len(node.requests) == 1
    pool.close()


async def test_no_node_is_a_connect_failure() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(ConnectFailed):
        await Pool(f"http://127.0.0.1:{port}").post("/", b"{}")


async def test_the_authorizer_adds_its_headers(node: Node) -> None:
    pool = Pool(node.base, auth=basic_auth("elastic", RotatingSecret("PW", {"PW": "p@ss:w"})))
    await pool.post("/", b"{}")
    assert b"authorization: Basic ZWxhc3RpYzpwQHNzOnc=\r\n" in node.requests[0]  # base64("elastic:p@ss:w")
    pool.close()


async def test_a_path_prefix_is_kept(node: Node) -> None:
    pool = Pool(node.base + "/search-engine/")
    await pool.post("/kb/_search", b"{}")
    assert node.requests[0].startswith(b"POST /search-engine/kb/_search HTTP/1.1\r\n")
    pool.close()


async def test_a_cancelled_request_does_not_leave_its_connection_behind(node: Node) -> None:
    release = asyncio.Event()
    slow_then_fast = iter([True])

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if next(slow_then_fast, False):
            node.connections += 1
            await reader.readuntil(b"\r\n\r\n")
            await release.wait()  # never answers the first request
            writer.close()
            return
        await Node.handle(node, reader, writer)

    assert node.server is not None
    node.server.close()
    node.server = await asyncio.start_server(handle, "127.0.0.1", 0)
    pool = Pool(node.base)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            await pool.post("/", b"{}")
    assert await pool.post("/", b"{}") == (200, b'{"ok":true}')  # a new connection, not the half-read one
    assert node.connections == 2
    release.set()
    pool.close()
