"""Where access records go: the Sink protocol the writers (channel.py) write through, and its two sinks, the
engine's daily indices (IndexSink, create-only by record id) and daily JSON Lines files (FileSink). Apart from the
queues and the spool: a sink only writes a batch and deletes expired days; when, how often and what happens on a
failure is the channel's business.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import re
from pathlib import Path
from typing import Any, Protocol

import orjson

from es_provider.audit import access
from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.engine.client import Engine


class Sink(Protocol):
    name: str

    async def prepare(self) -> None: ...

    async def write(self, batch: list[dict[str, Any]]) -> list[tuple[int, str]]:
        """Writes the batch; returns the records rejected for good (position, why). Raises when nothing is
        known to be written (try again)."""
        ...

    async def expire(self, retention_days: int) -> list[str]: ...


_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


def _storable(batch: list[dict[str, Any]]) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, str]]]:
    """Pure: the records a sink can file — (position, record) — and the others, rejected for their content (a
    `time` or `id` of the wrong type would stop the writer: its day and name are made of them)."""
    storable, unstorable = [], []
    for position, r in enumerate(batch):
        time_text, name = r.get("time"), r.get("id")
        if isinstance(time_text, str) and _TIME.fullmatch(time_text) and isinstance(name, str) \
                and 0 < len(name) <= 512:
            storable.append((position, r))
        else:
            unstorable.append((position, "not an access record (time or id)"))
    return storable, unstorable


class IndexSink:
    name = "index"

    def __init__(self, engine: Engine, prefix: str) -> None:
        self.engine = engine
        self.prefix = prefix

    async def prepare(self) -> None:
        pass  # each day's index is made by its first write

    def nodes(self) -> list[str]:
        """The records' cluster: its nodes' URLs as the client normalized them (the spool's folder is keyed by)."""
        return [f"{n.scheme}://{n.host.lower()}:{n.port}{n.prefix}" for n in self.engine.connection.nodes]

    async def write(self, batch: list[dict[str, Any]]) -> list[tuple[int, str]]:
        storable, unstorable = _storable(batch)
        rows = [(access.daily_index(self.prefix, r["time"]), r["id"], orjson.dumps(r)) for _, r in storable]
        failed = await self.engine.append(rows, access.INDEX_BODY) if rows else []
        # The whole batch is tried again when any item is refused for the sink's sake (the written ones are 409s
        # the next time: create-only by id).
        retry = [f for f in failed if not access.rejected_for_content(f[1], f[2])]
        if retry:
            raise KnowledgeError(ErrorCode.UNAVAILABLE,
                                 detail=f"{len(retry)} records refused for now ({retry[0][1]} {retry[0][2]})")
        return unstorable + [(storable[position][0], f"{status} {kind}") for position, status, kind in failed]

    async def expire(self, retention_days: int) -> list[str]:
        names = await self.engine.list_indices(f"{self.prefix}-*")
        old = access.expired_indices(names, self.prefix, dt.datetime.now(dt.UTC).date(), retention_days)
        for name in old:
            await self.engine.delete_index(name)
        return old


class FileSink:
    """Daily files `access-YYYY-MM-DD.jsonl` (UTC), appended with one write per batch (O_APPEND: the workers of
    one host may share the folder; a new day starts a new file, which is the rotation)."""

    name = "file"

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    async def prepare(self) -> None:
        await asyncio.to_thread(self.directory.mkdir, parents=True, exist_ok=True)

    async def write(self, batch: list[dict[str, Any]]) -> list[tuple[int, str]]:
        storable, unstorable = _storable(batch)
        by_file: dict[str, list[bytes]] = {}
        for _, r in storable:
            by_file.setdefault(access.daily_file(r["time"]), []).append(access.json_line(r))
        await asyncio.to_thread(self._append, by_file)
        return unstorable

    def _append(self, by_file: dict[str, list[bytes]]) -> None:
        for name, lines in by_file.items():
            data = memoryview(b"".join(lines))
            fd = os.open(self.directory / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
            try:
                while data:
                    data = data[os.write(fd, data):]
            finally:
                os.close(fd)

    async def expire(self, retention_days: int) -> list[str]:
        names = await asyncio.to_thread(os.listdir, self.directory)
        old = access.expired_files(names, dt.datetime.now(dt.UTC).date(), retention_days)
        for name in old:
            await asyncio.to_thread((self.directory / name).unlink, missing_ok=True)
        return old
