"""Reading back what the access record and /metrics say, for the tests that count answers against records."""

from __future__ import annotations

import asyncio
import datetime as dt
import time

from es_provider.audit import access
from es_provider.core.errors import KnowledgeError
from es_provider.engine.client import Engine


async def day_index(engine: Engine, prefix: str) -> str:
    """Today's index, where the records go (tomorrow's is made ahead, empty)."""
    name = access.day_index(prefix, dt.datetime.now(dt.UTC).date())
    assert name in await engine.list_indices(f"{prefix}-*")
    return name


async def record_ids(engine: Engine, prefix: str, ids: set[str], timeout_s: float = 30.0, *, poll_s: float = 0.5,
                     tolerated: tuple[type[BaseException], ...] = (KnowledgeError,)) -> set[str]:
    """The record ids in the daily indices, once all of `ids` are (or the time is up). A `tolerated` failure of
    the read (a cluster still electing, an index still starting its shard) is tried again until the time is up."""
    deadline = time.monotonic() + timeout_s
    found: set[str] = set()
    while True:
        try:
            await engine.refresh(f"{prefix}-*")
            found = {hit["_id"] async for hit in engine.scan(f"{prefix}-*")}
        except tolerated:
            if time.monotonic() > deadline:
                raise
        if ids <= found or time.monotonic() > deadline:
            return found
        await asyncio.sleep(poll_s)


def metric(exposition: str, name: str) -> float:
    """The sum of a metric's samples (every label set) in a /metrics exposition."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in exposition.splitlines()
               if line.startswith(name) and len(line) > len(name) and line[len(name)] in " {")
