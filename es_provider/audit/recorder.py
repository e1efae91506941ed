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
  the engine takes writes again. Only a full or unwritable spool makes the sink "down". The spool belongs to one
  cluster (its folder is keyed by the records' cluster and prefix) and drains only lines this service signed
  (lines.py): what others put in its folder is refused, counted and logged, never written;
- with the spool, the index sink's journal (journal.Journal): `keep` appends each record's signed line to this
  process's journal file before the answer goes out (one write(2), no fsync), so a process killed (SIGKILL) loses
  none of the records it queued: a drain takes its journal files once it is dead. A journal file goes once all its
  records were taken or spooled. One that cannot be written is the sink failing ("refuse": the answer is refused);
- only a record the engine rejects for its own content (access.rejected_for_content) is dropped, counted and
  logged; a block, a closed index, a permission or shard error is an outage (tried again, spooled or refused);
- `close()` (the service's stop, SIGTERM included) writes what is queued before the process exits, and spools
  what the sink does not take; each of its waits is bounded, a spool stuck on its file system included;
- `stuck()`: why the record is not kept as it should be although answers are not refused (a writer that ended, a
  spool drain stuck or unreadable), for readiness.

sinks.py holds where records go, spool.py the index sink's spool (its lines in lines.py, its key in spool_key.py,
its journal in journal.py), channel.py one sink's queue and writer; here the Recorder over them, and the way back
to what the sinks hold.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from es_provider.audit import access
from es_provider.audit.channel import Channel, Counted
from es_provider.audit.journal import Segment
from es_provider.audit.sinks import FileSink, IndexSink, Sink
from es_provider.audit.spool import Spool, leftovers, spool_folder
from es_provider.config.audit import AccessLogSettings
from es_provider.core.deadline import fixed_budget
from es_provider.engine.client import Engine

log = logging.getLogger("es_provider.access")
CLOSE_WAIT_S = 15.0  # how long the stop waits for a sink to take what is queued
CLOSE_TRIES = 3  # ... and how many failed writes it tries before it gives up
CLOSE_SPOOL_S = 5.0  # ... and how long for the spool to take what the sink did not
CANCEL_WAIT_S = 2.0  # ... and for the writers to end once cancelled (they end at once: nothing they await blocks)


class Recorder:
    """The access record's sinks, each with its queue and writer; and the way back to what they hold."""

    def __init__(self, settings: AccessLogSettings, sinks: list[Sink], *, dropped: Counted,
                 written: Counted, spooled: Counted | None = None, drained: Counted | None = None) -> None:
        self.settings = settings
        self._dropped = dropped
        self.channels = [
            Channel(sink, settings, dropped=dropped, written=written, spooled=spooled, drained=drained,
                    spool=Spool(spool_folder(settings, sink.nodes()), settings.spool_max_bytes, settings.retention_days)
                    if settings.spool and isinstance(sink, IndexSink) else None)
            for sink in sinks]
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
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
                for name, files in leftovers(channel.spool.directory):
                    log.warning("access record: the spool folder %s beside it holds %d files of another cluster, "
                                "URL or version: not drained here", name, files)

    def stuck(self) -> str | None:
        """Why the access record is not being kept as it should be while answers are not refused: a writer or
        spooler that ended, a spool file operation stuck, a spool that cannot be read (a readiness reason)."""
        if not self._closing and any(task.done() for task in self._tasks):
            return "a writer of the access record stopped"
        now = time.monotonic()
        return next((f"the {c.sink.name} sink: {why}" for c in self.channels if (why := c.stuck(now))), None)

    def refusing(self) -> bool:
        """In "refuse" mode, whether an answer must not be given now (a sink down, or a queue full)."""
        if self.settings.on_sink_failure != "refuse":
            return False
        now = time.monotonic()
        return any(channel.full() or channel.down(now) or channel.journal_failing for channel in self.channels)

    def keep(self, record: dict[str, Any]) -> bool:
        """Queues the record on every sink (the index sink's journal line written first, on the loop: a process
        killed after the answer went out loses nothing); one whose queue is full drops it, counted and logged.
        False (nothing queued): the journal could not be written and, in "refuse" mode, the record's answer
        (status < 400) must not be given — the caller keeps the refusal's record instead. A journal that cannot be
        written is counted (reason="journal_unwritten") and logged either way."""
        segments: dict[int, Segment | None] = {}
        for n, channel in enumerate(self.channels):
            if channel.journal is None or channel.full():
                continue
            segment = channel.write_ahead(record)
            if segment is None:
                self._dropped("journal_unwritten", 1)
                if self.settings.on_sink_failure == "refuse" and record.get("status", 500) < 400:
                    return False
            segments[n] = segment
        for n, channel in enumerate(self.channels):
            if not channel.full():
                channel.put(record, segments.get(n))
                continue
            self._dropped("queue_full", 1)
            self._unlogged += 1
            now = time.monotonic()
            if now - self._logged_at >= 1.0:
                log.error("access record: %d records dropped since the last line: the %s sink's queue is full "
                          "(%d records; latest dropped: %s)", self._unlogged, channel.sink.name, len(channel.queue),
                          record["id"])
                self._unlogged, self._logged_at = 0, now
        return True

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
        self._closing = True
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=CANCEL_WAIT_S)
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
            if channel.queue and channel.spool is not None and await channel.spool_out(wait_s=CLOSE_SPOOL_S):
                log.warning("access record: the %s sink's unwritten records are in the spool (%s) for the next start",
                            channel.sink.name, channel.spool.directory)
            channel.seal_spool()
            if (journaled := channel.close_journal()) and channel.journal is not None:
                log.warning("access record: %d records not written to the %s sink before the stop are in its "
                            "journal (%s) for the next start", journaled, channel.sink.name,
                            channel.journal.spool.directory)
            if len(channel.queue) > journaled:
                self._dropped("stopped", len(channel.queue) - journaled)
                log.error("access record: %d records not written to the %s sink before the stop",
                          len(channel.queue) - journaled, channel.sink.name)


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
