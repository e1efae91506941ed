"""The floor of a Python search proxy on this machine: a forwarder that takes a POST, makes ONE engine search (a
pre-serialised body, through the service's own keep-alive client) and returns the engine's answer unchanged — no
parsing, no checks, no rendering. Its CPU per request is what any service built on that server layer pays before
doing any work of its own. Run by section 8 next to the service, same load, same CPU accounting.

    python -m bench.floor KIND PORT ENGINE_URL INDEX BODIES.json

KIND "aiohttp": an aiohttp web application with one route (the service's server layer).
KIND "asyncio": asyncio.Protocol + httptools request parsing, the leanest server asyncio allows (HTTP/1.1
keep-alive only; a measuring stick, not something to expose).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httptools
import orjson

from bench.common import cpu_seconds, free_port, wait_until_answering
from es_provider.engine.connection import parse_nodes
from es_provider.engine.http1 import Pool


async def serve(kind: str, port: int, engine: str, index: str, bodies: list[bytes]) -> None:
    pool = Pool(parse_nodes(engine)[0])  # the pool takes a node since connections became a model
    path = f"/{index}/_search"
    cycle = itertools.cycle(bodies)

    async def forward() -> tuple[int, bytes]:
        return await pool.post(path, next(cycle))

    if kind == "aiohttp":
        from aiohttp import web

        async def handle(request: web.Request) -> web.Response:
            await request.read()
            status, answer = await forward()
            return web.Response(body=answer, status=status, content_type="application/json")

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
    else:
        loop = asyncio.get_running_loop()
        tasks: set[asyncio.Task[None]] = set()  # held until done, as asyncio asks

        class Forwarder(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport: Any = transport
                self.parser = httptools.HttpRequestParser(self)

            def data_received(self, data: bytes) -> None:
                self.parser.feed_data(data)

            def on_message_complete(self) -> None:
                task = loop.create_task(self.answer())
                tasks.add(task)
                task.add_done_callback(tasks.discard)

            async def answer(self) -> None:
                status, answer = await forward()
                self.transport.write(b"HTTP/1.1 %d OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                                     % (status, len(answer), answer))

        await loop.create_server(Forwarder, "127.0.0.1", port)
    await asyncio.Event().wait()


class Running:
    """A forwarder in its own process; `base` to send to, `cpu_seconds()` like the service's."""

    def __init__(self, process: subprocess.Popen[bytes], base: str) -> None:
        self.process, self.base = process, base

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.process.pid)


@contextmanager
def running(kind: str, engine: str, index: str, bodies: list[dict[str, Any]]) -> Iterator[Running]:
    port = free_port()
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        json.dump(bodies, file)
        file.flush()
        process = subprocess.Popen([sys.executable, "-m", "bench.floor", kind, str(port), engine, index, file.name])
        try:
            base = f"http://127.0.0.1:{port}"
            wait_until_answering(f"{base}/", process, 30)  # any path: one forwarded search
            yield Running(process, base)
        finally:
            process.terminate()
            process.wait(10)


def main() -> None:
    kind, port, engine, index, bodies = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], Path(sys.argv[5])
    asyncio.run(serve(kind, port, engine, index, [orjson.dumps(b) for b in orjson.loads(bodies.read_bytes())]))


if __name__ == "__main__":
    main()
