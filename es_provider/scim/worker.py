"""Where SCIM requests are handled: one thread of their own with its own event loop (Worker), so scim2-server's
synchronous CPU work never holds the service's event loop, and the bridge (EngineBridge) that carries the
storage's engine calls from that loop back to the service's own. Separate from service.py, which carries the
requests here: running beside the service's loop is a concern of its own."""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

from es_provider.engine.client import Engine

T = TypeVar("T")


class Worker:
    """One thread with its own event loop, where every SCIM request is handled: scim2-server's PATCH application,
    filter parsing and matching and pydantic validation of big resources are synchronous CPU work, which on the
    service's event loop would hold every platform answer (and /healthz) until it ends. In this thread the
    interpreter switches back to the service's loop every few milliseconds (sys.getswitchinterval), and SCIM
    requests queue behind each other here, not in front of the platforms."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="es-provider-scim", daemon=True)
        self._thread.start()

    async def run(self, work: Coroutine[Any, Any, T]) -> T:
        """`work`'s outcome, run on the worker's loop (cancelled there when the caller is cancelled)."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self.loop))


@functools.cache
def worker() -> Worker:
    return Worker()


class EngineBridge:
    """The engine, as the SCIM worker's loop calls it: each coroutine runs on the service's own loop (whose
    aiohttp session it belongs to), its outcome carried back; `scan` is read whole there, then iterated."""

    def __init__(self, engine: Engine, home: asyncio.AbstractEventLoop) -> None:
        self._engine = engine
        self._home = home

    async def _at_home(self, work: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self._home))

    async def scan(self, index: str, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        async def read() -> list[dict[str, Any]]:
            return [hit async for hit in self._engine.scan(index, **kwargs)]
        for hit in await self._at_home(read()):
            yield hit

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._engine, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        @functools.wraps(attribute)
        async def bridged(*args: Any, **kwargs: Any) -> Any:
            return await self._at_home(attribute(*args, **kwargs))
        return bridged
