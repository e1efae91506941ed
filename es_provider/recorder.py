"""Keeps access records (access.py): queued in memory, written in batches off the answer's path, to each sink.

Each sink (the engine's daily indices, daily JSON Lines files) has its own queue and writer task, so one that is
down neither holds up nor duplicates the other. A batch that fails is kept and tried again (an engine write is
create-only by record id: written twice, it is one record). Nothing is dropped silently:
- a sink is "down" while its oldest queued record has waited longer than `max_delay_s` (failing, hanging or too
  slow alike); a queue is full at `max_queued`;
- `on_sink_failure = "refuse"`: while a sink is down or full, an answer is not given (`admit` says no and the
  caller answers 503), so no answer goes unrecorded; `"count"`: the answer is given and a record that finds its
  queue full is dropped — counted (es_provider_access_records_dropped) and logged;
- a record the engine rejects for good (a 4xx other than 409/429) is counted and logged likewise;
- `close()` (the service's stop, SIGTERM included) writes what is queued before the process exits.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import orjson
from aiohttp import web

from es_provider import access
from es_provider.config import AccessLogSettings
from es_provider.deadline import fixed_budget
from es_provider.engine import Engine
from es_provider.errors import ErrorCode, KnowledgeError

log = logging.getLogger("es_provider.access")
RETENTION_EVERY_S = 3600.0
RETRY_WAIT_S = (0.2, 5.0)  # first and longest wait between tries of a failing batch
CLOSE_WAIT_S = 15.0  # how long the stop waits for a sink to take what is queued
CLOSE_TRIES = 3  # ... and how many failed writes it tries before it gives up

Counted = Callable[[str, int], None]  # (reason or sink, records)


class Sink(Protocol):
    name: str

    async def prepare(self) -> None: ...

    async def write(self, batch: list[dict[str, Any]]) -> list[tuple[int, str]]:
        """Writes the batch; returns the records rejected for good (position, why). Raises when nothing is
        known to be written (try again)."""
        ...

    async def expire(self, retention_days: int) -> list[str]: ...


class IndexSink:
    name = "index"

    def __init__(self, engine: Engine, prefix: str) -> None:
        self.engine = engine
        self.prefix = prefix

    async def prepare(self) -> None:
        pass  # each day's index is made by its first write

    async def write(self, batch: list[dict[str, Any]]) -> list[tuple[int, str]]:
        rows = [(access.daily_index(self.prefix, r["time"]), r["id"], orjson.dumps(r)) for r in batch]
        failed = await self.engine.append(rows, access.INDEX_BODY)
        retry = [f for f in failed if f[1] == 429 or f[1] >= 500]
        if retry:
            raise KnowledgeError(ErrorCode.UNAVAILABLE, detail=f"{len(retry)} records refused for now ({retry[0][2]})")
        return [(position, f"{status} {kind}") for position, status, kind in failed]

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
        by_file: dict[str, list[bytes]] = {}
        for r in batch:
            by_file.setdefault(access.daily_file(r["time"]), []).append(orjson.dumps(r) + b"\n")
        await asyncio.to_thread(self._append, by_file)
        return []

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


class Channel:
    """One sink's queue and writer."""

    def __init__(self, sink: Sink, settings: AccessLogSettings, *, dropped: Counted, written: Counted) -> None:
        self.sink = sink
        self._settings = settings
        self._dropped = dropped
        self._written = written
        self.queue: deque[tuple[float, dict[str, Any]]] = deque()  # (when queued, record), oldest first
        self._failing_since: float | None = None  # for the log: when writes began to fail
        self._prepared = False
        self._wake = asyncio.Event()

    def full(self) -> bool:
        return len(self.queue) >= self._settings.max_queued

    def down(self, now: float) -> bool:
        """Its oldest record has waited longer than max_delay_s: the sink fails, hangs or cannot keep up."""
        return bool(self.queue) and now - self.queue[0][0] > self._settings.max_delay_s

    def put(self, record: dict[str, Any]) -> None:
        self.queue.append((time.monotonic(), record))
        if len(self.queue) >= self._settings.batch:
            self._wake.set()

    async def run(self) -> None:
        wait = RETRY_WAIT_S[0]
        next_expiry = 0.0
        while True:
            try:
                async with asyncio.timeout(self._settings.flush_interval_s):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            if time.monotonic() >= next_expiry and await self._expire():
                next_expiry = time.monotonic() + RETENTION_EVERY_S
            while self.queue:
                if await self.flush_once():
                    wait = RETRY_WAIT_S[0]
                    continue
                await asyncio.sleep(wait)
                wait = min(wait * 2, RETRY_WAIT_S[1])

    async def _expire(self) -> bool:
        try:
            old = await self.sink.expire(self._settings.retention_days)
        except (KnowledgeError, OSError) as exc:
            log.warning("access record: retention sweep of the %s sink failed: %s", self.sink.name, _why(exc))
            return False
        if old:
            log.info("access record: deleted %d %s older than %d days", len(old),
                     "indices" if self.sink.name == "index" else "files", self._settings.retention_days)
        return True

    async def flush_once(self) -> bool:
        """Writes the oldest batch; False (kept for the next try) when the sink failed."""
        batch = [self.queue[i][1] for i in range(min(self._settings.batch, len(self.queue)))]
        try:
            if not self._prepared:
                await self.sink.prepare()
                self._prepared = True
            rejected = await self.sink.write(batch)
        except (KnowledgeError, OSError) as exc:
            if self._failing_since is None:
                self._failing_since = time.monotonic()
                log.error("access record: the %s sink failed (%s); %d records wait", self.sink.name, _why(exc),
                          len(self.queue))
            return False
        for _ in batch:
            self.queue.popleft()
        self._written(self.sink.name, len(batch) - len(rejected))
        if rejected:
            log.error("access record: the %s sink rejected %d records for good (first: %s)", self.sink.name,
                      len(rejected), rejected[0][1])
            self._dropped("rejected", len(rejected))
        if self._failing_since is not None:
            log.warning("access record: the %s sink recovered after %.1f s", self.sink.name,
                        time.monotonic() - self._failing_since)
            self._failing_since = None
        return True


def _why(exc: BaseException) -> str:
    return exc.detail or exc.safe_message if isinstance(exc, KnowledgeError) else f"{type(exc).__name__}: {exc}"


class Recorder:
    """The access record's sinks, each with its queue and writer; and the way back to what they hold."""

    def __init__(self, settings: AccessLogSettings, sinks: list[Sink], *, dropped: Counted,
                 written: Counted) -> None:
        self.settings = settings
        self._dropped = dropped
        self.channels = [Channel(sink, settings, dropped=dropped, written=written) for sink in sinks]
        self._tasks: list[asyncio.Task[None]] = []
        self._unlogged = 0  # drops not yet in a log line: a sink down under load logs once a second, not per record
        self._logged_at = 0.0

    def start(self) -> None:
        self._tasks = [asyncio.create_task(channel.run()) for channel in self.channels]

    def refusing(self) -> bool:
        """In "refuse" mode, whether an answer must not be given now (a sink down, or a queue full)."""
        if self.settings.on_sink_failure != "refuse":
            return False
        now = time.monotonic()
        return any(channel.full() or channel.down(now) for channel in self.channels)

    def keep(self, record: dict[str, Any]) -> None:
        """Queues the record on every sink; one whose queue is full drops it, counted and logged."""
        for channel in self.channels:
            if not channel.full():
                channel.put(record)
                continue
            self._dropped("queue_full", 1)
            self._unlogged += 1
            now = time.monotonic()
            if now - self._logged_at >= 1.0:
                log.error("access record: %d records dropped since the last line: the %s sink's queue is full "
                          "(%d records; latest dropped: %s)", self._unlogged, channel.sink.name, len(channel.queue),
                          record["id"])
                self._unlogged, self._logged_at = 0, now

    async def find(self, wanted: access.Wanted) -> list[dict[str, Any]]:
        """Matching records from the index sink if there is one, else from the files; newest first."""
        sink = self.channels[0].sink
        if isinstance(sink, IndexSink):
            return await find_in_index(sink.engine, sink.prefix, wanted)
        if isinstance(sink, FileSink):
            return await asyncio.to_thread(find_in_files, sink.directory, wanted)
        raise TypeError(sink)  # pragma: no cover

    async def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """Stops the writers, then writes what is queued (up to `wait_s`); what still cannot be written is counted
        and logged as lost."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        deadline = time.monotonic() + wait_s
        for channel in self.channels:
            # A few tries, within the wait: a sink that is down should not hold the stop for long.
            tries = CLOSE_TRIES
            while channel.queue and time.monotonic() < deadline and tries > 0:
                try:
                    async with asyncio.timeout(max(0.1, deadline - time.monotonic())):
                        if not await channel.flush_once():
                            tries -= 1
                            await asyncio.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
                except TimeoutError:
                    break
            if channel.queue:
                self._dropped("stopped", len(channel.queue))
                log.error("access record: %d records not written to the %s sink before the stop", len(channel.queue),
                          channel.sink.name)


RECORDER = web.AppKey("recorder", Recorder)


# --- reading records back (`es-provider access`, the workbench's view) ---

async def find_in_index(engine: Engine, prefix: str, wanted: access.Wanted) -> list[dict[str, Any]]:
    """The matching records of the daily indices, newest first (none yet: none)."""
    budget = fixed_budget(30_000, now_monotonic=time.monotonic())
    answer = await engine.search(f"{prefix}-*", access.search_body(wanted), budget)
    return [hit["_source"] for hit in answer.get("hits", {}).get("hits", [])]


def find_in_files(directory: Path, wanted: access.Wanted) -> list[dict[str, Any]]:
    """The matching records of the daily files, newest first (files are read newest day first, until `limit`
    records are in hand: every later file is older)."""
    names = sorted((n for n in os.listdir(directory) if n.startswith("access-") and n.endswith(".jsonl")),
                   reverse=True)
    found: list[dict[str, Any]] = []
    for name in names:
        with (directory / name).open("rb") as lines:
            found.extend(r for r in map(orjson.loads, filter(bytes.strip, lines)) if access.matches(r, wanted))
        if len(found) >= wanted.limit:
            break
    found.sort(key=lambda r: (str(r.get("time", "")), str(r.get("id", ""))), reverse=True)
    return found[:wanted.limit]
