"""The access record's spool under attack (tests/integration/test_access_spool_*.py): a front of the records' engine
that can be down and keeps which record ids reached it, and reading the spool's folder and the records' indices."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from es_provider.audit.sinks import IndexSink
from es_provider.engine.client import Engine
from harness.proxy import EngineProxy


class KeepingSink(IndexSink):
    """An index sink (unit tests: no engine) that keeps what it is given by id and expires nothing; subclasses
    decide when a write fails."""

    def __init__(self, nodes: list[str]) -> None:
        self.prefix = "rec"
        self.kept: dict[str, dict[str, Any]] = {}
        self._nodes = nodes

    async def prepare(self) -> None:
        pass

    async def write(self, batch: list[dict[str, Any]]) -> list[tuple[int, str]]:
        self.kept.update((r["id"], r) for r in batch)
        return []

    async def expire(self, retention_days: int) -> list[str]:
        return []

    def nodes(self) -> list[str]:
        return self._nodes


FIRST = "spool-00000000000000000001-1-aa"  # sorts before every file the service writes: drained first


class RecordsFront(EngineProxy):
    """The records' engine behind a proxy: `down` answers every `_bulk` 503 (an outage), and the record ids of every
    `_bulk` forwarded are kept (which cluster each record reached)."""

    down = False

    def __init__(self, target: str) -> None:
        super().__init__(target, gate=self._gate)
        self.written: list[str] = []

    async def _gate(self, request: web.Request) -> web.StreamResponse | None:
        if not request.path.endswith("/_bulk"):
            return None
        if self.down:
            return web.json_response({"error": {"type": "injected"}, "status": 503}, status=503)
        lines = [orjson.loads(line) for line in (await request.read()).splitlines() if line.strip()]
        self.written += [action["create"]["_id"] for action in lines[0::2] if "create" in action]
        return None


def entries(folder: Path, pattern: str) -> list[Path]:
    return sorted(folder.glob(pattern))


def unblock(folder: Path | None) -> None:
    """Opens every FIFO in the folder for writing and closes it: a drain blocked opening one for reading (the code
    before the fix) gets its end of file, so the test process can exit."""
    for path in folder.iterdir() if folder is not None and folder.exists() else ():
        if path.is_fifo():
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


async def written_ids(engine: Engine, prefix: str) -> list[str]:
    """Every record id in the prefix's indices, with repeats (a record written twice would show twice)."""
    await engine.refresh(f"{prefix}-*")
    return [hit["_id"] async for hit in engine.scan(f"{prefix}-*")]
