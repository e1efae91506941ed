"""Keeps access records (access.py): queued in memory, written in batches off the answer's path, to each sink.

Each sink (the engine's daily indices, daily JSON Lines files) has its own queue and writer task, so one that is
down neither holds up nor duplicates the other. A batch that fails is kept and tried again (an engine write is
create-only by record id: written twice, it is one record). Nothing is dropped silently:
- a sink is "down" while its oldest queued record has waited longer than `max_delay_s` (failing, hanging or too
  slow alike); a queue is full at `max_queued`;
- `on_sink_failure = "refuse"`: while a sink is down or full, an answer is not given (`admit` says no and the
  caller answers 503), so no answer goes unrecorded; `"count"`: the answer is given and a record that finds its
  queue full is dropped — counted (es_provider_access_records_dropped) and logged;
- the index sink has a durable spool (`spool`, on by default): records it has not taken after max_delay_s / 2 go
  from memory to local files (Spool), so a sink down for longer (a node lost, the day's index write-blocked or
  closed, our user refused) is neither a refusal nor a loss; the writer drains the spool, oldest file first, once
  the engine takes writes again. Only a full or unwritable spool makes the sink "down";
- only a record the engine rejects for its own content (access.rejected_for_content) is dropped, counted and
  logged; a block, a closed index, a permission or shard error is an outage (tried again, spooled or refused);
- `close()` (the service's stop, SIGTERM included) writes what is queued before the process exits, and spools
  what the sink does not take.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import fcntl
import logging
import os
import secrets
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import orjson
from aiohttp import web

from es_provider.audit import access
from es_provider.config.settings import AccessLogSettings
from es_provider.core.deadline import fixed_budget
from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.engine.client import Engine

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
        # The whole batch is tried again when any item is refused for the sink's sake (the written ones are 409s
        # the next time: create-only by id).
        retry = [f for f in failed if not access.rejected_for_content(f[1], f[2])]
        if retry:
            raise KnowledgeError(ErrorCode.UNAVAILABLE,
                                 detail=f"{len(retry)} records refused for now ({retry[0][1]} {retry[0][2]})")
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
            by_file.setdefault(access.daily_file(r["time"]), []).append(access.json_line(r))
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


class SpoolFull(Exception):
    pass


class Claimed:
    """A spool file this process drains: locked (no other drain reads it meanwhile), deleted once written."""

    def __init__(self, path: Path, fd: int, records: list[dict[str, Any]]) -> None:
        self.path, self.fd, self.records, self.done = path, fd, records, 0


class Spool:
    """The index sink's durable spool: JSON Lines files `spool-<ns>-<pid>-<random>.jsonl` in one folder, which the
    workers of a host share. Each process appends (and fsyncs) only to its own file, holding an exclusive flock on it
    while it may still append; a sealed file (closed, or left by a process that died) is unlocked, and a drain
    claims it by taking that lock, so two drains never hold one file at once. Names sort oldest first."""

    FILE_BYTES = 4 * 1024 * 1024  # a file is sealed at this size: drains come in pieces

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._fd: int | None = None
        self._name = ""
        self._bytes = 0
        self.appended_at = 0.0  # monotonic, the last append to the own file

    def append(self, records: list[dict[str, Any]]) -> None:
        """Appends and fsyncs the records (in a thread: it blocks). Raises SpoolFull or OSError (nothing kept)."""
        data = b"".join(access.json_line(r) for r in records)
        self.directory.mkdir(mode=0o750, parents=True, exist_ok=True)  # records name who was served what
        if self.size() + len(data) > self.max_bytes:
            raise SpoolFull(f"{self.max_bytes} bytes")
        if self._fd is None or self._bytes >= self.FILE_BYTES:
            self.seal()
            name = f"spool-{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}.jsonl"
            fd = os.open(self.directory / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o640)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._fd, self._name, self._bytes = fd, name, 0
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        os.fsync(self._fd)
        self._bytes += len(data)
        self.appended_at = time.monotonic()

    def seal(self) -> None:
        """Closes the own file (its lock with it): a drain may claim it now."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def open(self) -> bool:
        return self._fd is not None

    def files(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.directory) if n.startswith("spool-") and n.endswith(".jsonl"))
        except FileNotFoundError:
            return []

    def size(self) -> int:
        total = 0
        for name in self.files():
            with contextlib.suppress(FileNotFoundError):  # drained meanwhile
                total += (self.directory / name).stat().st_size
        return total

    def claim(self) -> tuple[Claimed | None, int]:
        """The oldest file no process holds, read (lines a crash cut short are skipped: their count is returned)."""
        for name in self.files():
            if name == self._name and self._fd is not None:
                continue
            path = self.directory / name
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.fstat(fd).st_ino != path.stat().st_ino:
                    raise FileNotFoundError(name)  # drained and deleted by another process meanwhile
                with os.fdopen(os.dup(fd), "rb") as lines:
                    records, torn = _parse_lines(lines.read())
            except (BlockingIOError, FileNotFoundError):
                os.close(fd)
                continue
            return Claimed(path, fd, records), torn
        return None, 0

    @staticmethod
    def release(claimed: Claimed, written: bool) -> None:
        try:
            if written:
                claimed.path.unlink(missing_ok=True)
        finally:
            os.close(claimed.fd)


def _parse_lines(data: bytes) -> tuple[list[dict[str, Any]], int]:
    records, torn = [], 0
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            torn += 1
            continue
        if isinstance(record, dict) and "id" in record and "time" in record:
            records.append(record)
        else:
            torn += 1
    return records, torn


def spool_folder(settings: AccessLogSettings) -> Path:
    base = Path(settings.spool_dir).expanduser() if settings.spool_dir else Path(
        os.environ.get("ES_PROVIDER_CACHE", "~/.cache/es-provider")).expanduser() / "access-spool"
    return base / settings.index  # one folder per prefix: a drain writes to its own daily indices


class Channel:
    """One sink's queue and writer (and, for the index sink, its spool)."""

    def __init__(self, sink: Sink, settings: AccessLogSettings, *, dropped: Counted, written: Counted,
                 spool: Spool | None = None, spooled: Counted | None = None,
                 drained: Counted | None = None) -> None:
        self.sink = sink
        self._settings = settings
        self._dropped = dropped
        self._written = written
        self._spooled = spooled or (lambda _sink, _n: None)
        self._drained = drained or (lambda _sink, _n: None)
        self.spool = spool
        self.queue: deque[tuple[float, dict[str, Any]]] = deque()  # (when queued, record), oldest first
        self._inflight: list[tuple[float, dict[str, Any]]] = []  # the batch being written
        self._inflight_spooled = False  # ... a copy of it is in the spool already (a write twice is one record)
        self._taking = asyncio.Lock()  # the writer and the spooler both take from the queue's head
        self._claimed: Claimed | None = None
        self._spool_failing = False
        self._spooling = False  # for the log: spooling since the sink last took a write
        self._failing_since: float | None = None  # for the log: when writes began to fail
        self._prepared = False
        self._wake = asyncio.Event()

    def full(self) -> bool:
        return len(self.queue) >= self._settings.max_queued

    def _oldest(self) -> float | None:
        if self._inflight and not self._inflight_spooled:
            return self._inflight[0][0]
        return self.queue[0][0] if self.queue else None

    def down(self, now: float) -> bool:
        """Its oldest unkept record has waited longer than max_delay_s: the sink fails, hangs or cannot keep up
        (and the spool, if any, could not take it)."""
        oldest = self._oldest()
        return oldest is not None and now - oldest > self._settings.max_delay_s

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
            while True:
                if self.queue:
                    ok = await self.flush_once()
                elif self.spool is not None and (self._claimed is not None or await self._claim()):
                    ok = await self._drain_once()
                else:
                    break
                if ok:
                    wait = RETRY_WAIT_S[0]
                    continue
                await asyncio.sleep(wait)
                wait = min(wait * 2, RETRY_WAIT_S[1])

    async def run_spooler(self) -> None:
        """Moves what the sink has not taken after max_delay_s / 2 from memory to the spool, whatever the writer is
        doing (a write may hang for its whole timeout)."""
        tick = min(1.0, self._settings.max_delay_s / 4)
        while True:
            await asyncio.sleep(tick)
            oldest = self._oldest()
            if oldest is not None and time.monotonic() - oldest > self._settings.max_delay_s / 2:
                await self.spool_out()

    async def spool_out(self) -> int:
        """Appends the unkept records (the in-flight batch and the queue) to the spool; how many it took."""
        assert self.spool is not None
        async with self._taking:
            records = [r for _, r in self._inflight] if not self._inflight_spooled else []
            records += [r for _, r in self.queue]
            if not records:
                return 0
            appending = asyncio.ensure_future(asyncio.to_thread(self.spool.append, records))
            try:
                # A stop's cancel waits for the thread: the next append (the stop's own) must not run beside it.
                await asyncio.shield(appending)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await appending
                raise
            except (SpoolFull, OSError) as exc:
                if not self._spool_failing:
                    self._spool_failing = True
                    log.error("access record: the spool in %s cannot take %d records (%s): answers are refused "
                              "(or records dropped) as without a spool", self.spool.directory, len(records),
                              "full at " + str(exc) if isinstance(exc, SpoolFull) else _why(exc))
                return 0
            # By identity: a failed write may have put its batch back meanwhile (it is in `records` already).
            taken = {id(r) for r in records}
            self.queue = deque(queued for queued in self.queue if id(queued[1]) not in taken)
            self._inflight_spooled = True
        if self._spool_failing:
            self._spool_failing = False
            log.warning("access record: the spool in %s takes records again", self.spool.directory)
        if not self._spooling:  # once per outage, not per tick
            self._spooling = True
            log.warning("access record: the %s sink has not taken records for %.1f s: spooling them to %s",
                        self.sink.name, self._settings.max_delay_s / 2, self.spool.directory)
        self._spooled(self.sink.name, len(records))
        return len(records)

    async def _claim(self) -> bool:
        """Claims the oldest spool file to drain. The own file is sealed first once the sink takes writes again (or
        nothing was appended to it for max_delay_s), so its records can be drained too."""
        assert self.spool is not None
        spool = self.spool
        if spool.open and (self._failing_since is None
                           or time.monotonic() - spool.appended_at > self._settings.max_delay_s):
            async with self._taking:  # never while the spooler appends
                spool.seal()
        try:
            self._claimed, torn = await asyncio.to_thread(spool.claim)
        except OSError as exc:
            log.error("access record: the spool in %s cannot be read: %s", spool.directory, _why(exc))
            return False
        if torn:
            self._dropped("spool_torn", torn)
            log.error("access record: %d lines of a spool file in %s could not be read (cut short by a crash?)",
                      torn, spool.directory)
        if self._claimed is not None:
            log.info("access record: draining %d spooled records from %s", len(self._claimed.records),
                     self._claimed.path.name)
        return self._claimed is not None

    async def _drain_once(self) -> bool:
        """Writes the claimed file's next batch; the file is deleted once all its records are written."""
        claimed = self._claimed
        assert claimed is not None and self.spool is not None
        batch = claimed.records[claimed.done:claimed.done + self._settings.batch]
        if batch:
            try:
                rejected = await self.sink.write(batch)
            except (KnowledgeError, OSError) as exc:
                self._failed(exc)
                return False
            self._kept(len(batch), rejected, self._drained)
            claimed.done += len(batch)
        if claimed.done >= len(claimed.records):
            self._claimed = None
            try:
                await asyncio.to_thread(Spool.release, claimed, True)
            except OSError as exc:  # written; a later drain writes it again (409s) and deletes it
                log.error("access record: a drained spool file could not be deleted: %s", _why(exc))
        return True

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
        """Writes the oldest batch; False (kept for the next try, unless spooled meanwhile) when the sink failed."""
        async with self._taking:
            self._inflight = [self.queue.popleft() for _ in range(min(self._settings.batch, len(self.queue)))]
            self._inflight_spooled = False
        batch = [r for _, r in self._inflight]
        try:
            if not self._prepared:
                await self.sink.prepare()
                self._prepared = True
            rejected = await self.sink.write(batch)
        except (KnowledgeError, OSError) as exc:
            self._put_back()
            self._failed(exc)
            return False
        except BaseException:  # cancelled (the stop): the batch is still to be written
            self._put_back()
            raise
        self._inflight = []
        self._kept(len(batch), rejected, self._written)
        return True

    def _put_back(self) -> None:
        if not self._inflight_spooled:
            self.queue.extendleft(reversed(self._inflight))
        self._inflight = []

    def release_claim(self) -> None:
        if self._claimed is not None:
            Spool.release(self._claimed, False)  # kept: the next drain (this host's next start) writes it
            self._claimed = None

    def _failed(self, exc: BaseException) -> None:
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            log.error("access record: the %s sink failed (%s); %d records wait", self.sink.name, _why(exc),
                      len(self.queue))

    def _kept(self, sent: int, rejected: list[tuple[int, str]], counted: Counted) -> None:
        counted(self.sink.name, sent - len(rejected))
        if rejected:
            log.error("access record: the %s sink rejected %d records for their content, dropped (first: %s)",
                      self.sink.name, len(rejected), rejected[0][1])
            self._dropped("rejected", len(rejected))
        self._spooling = False
        if self._failing_since is not None:
            log.warning("access record: the %s sink recovered after %.1f s", self.sink.name,
                        time.monotonic() - self._failing_since)
            self._failing_since = None


def _why(exc: BaseException) -> str:
    return exc.detail or exc.safe_message if isinstance(exc, KnowledgeError) else f"{type(exc).__name__}: {exc}"


class Recorder:
    """The access record's sinks, each with its queue and writer; and the way back to what they hold."""

    def __init__(self, settings: AccessLogSettings, sinks: list[Sink], *, dropped: Counted,
                 written: Counted, spooled: Counted | None = None, drained: Counted | None = None) -> None:
        self.settings = settings
        self._dropped = dropped
        self.channels = [
            Channel(sink, settings, dropped=dropped, written=written, spooled=spooled, drained=drained,
                    spool=Spool(spool_folder(settings), settings.spool_max_bytes)
                    if settings.spool and isinstance(sink, IndexSink) else None)
            for sink in sinks]
        self._tasks: list[asyncio.Task[None]] = []
        self._unlogged = 0  # drops not yet in a log line: a sink down under load logs once a second, not per record
        self._logged_at = 0.0

    def start(self) -> None:
        """The writers (each drains its spool's leftovers first), and the spoolers."""
        self._tasks = [asyncio.create_task(channel.run()) for channel in self.channels]
        self._tasks += [asyncio.create_task(c.run_spooler()) for c in self.channels if c.spool is not None]
        for channel in self.channels:
            if channel.spool is not None:
                log.info("access record: the %s sink spools to %s (up to %d bytes)", channel.sink.name,
                         channel.spool.directory, channel.spool.max_bytes)

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
            channel.release_claim()
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
            if channel.queue and channel.spool is not None and await channel.spool_out():
                log.warning("access record: the %s sink's unwritten records are in the spool (%s) for the next start",
                            channel.sink.name, channel.spool.directory)
            if channel.spool is not None:
                channel.spool.seal()
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
