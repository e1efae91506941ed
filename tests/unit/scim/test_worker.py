"""scim/worker.py: SCIM requests run on the worker's own loop, in its own thread, so a costly one never holds the
service's loop; the engine is still called on the service's loop, through the bridge (a coroutine method, an async
generator, a plain attribute)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from es_provider.scim import worker as scim_worker


class FakeEngine:
    """What the bridge carries: a coroutine method, an async generator, a plain attribute."""

    index = "principals"

    def __init__(self) -> None:
        self.threads: list[int] = []

    async def get_documents(self, index: str, ids: list[str]) -> list[str]:
        self.threads.append(threading.get_ident())
        return [f"{index}/{i}" for i in ids]

    async def scan(self, index: str, *, query: dict[str, Any] | None = None) -> Any:
        self.threads.append(threading.get_ident())
        for n in range(3):
            yield {"_id": f"{index}/{n}", "query": query}


async def test_scim_runs_on_its_worker_and_the_engine_on_the_service_s_loop() -> None:
    engine = FakeEngine()
    bridge: Any = scim_worker.EngineBridge(engine, asyncio.get_running_loop())  # type: ignore[arg-type]

    async def handled() -> tuple[int, list[str], list[dict[str, Any]], str]:
        found = await bridge.get_documents("i", ["a", "b"])
        scanned = [hit async for hit in bridge.scan("i", query={"term": {"kind": "User"}})]
        return threading.get_ident(), found, scanned, bridge.index

    ticks = 0

    async def ticking() -> None:  # the service's loop keeps running while the worker is busy
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    ticker = asyncio.ensure_future(ticking())
    worker_thread, found, scanned, index = await scim_worker.worker().run(handled())
    busy = scim_worker.worker().run(_spin(0.3))
    before = ticks
    await busy
    ticker.cancel()
    assert worker_thread != threading.get_ident() and engine.threads == [threading.get_ident()] * 2
    assert found == ["i/a", "i/b"] and [hit["_id"] for hit in scanned] == ["i/0", "i/1", "i/2"]
    assert index == "principals"
    assert ticks - before > 20  # 0.3 s of CPU on the worker: the loop still ticked


async def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
