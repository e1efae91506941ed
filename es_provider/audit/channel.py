"""One sink's queue and writer task (Channel): batches, tries again with a growing wait, sweeps expired days, moves
what waits too long to the spool and drains it back. Apart from the Recorder (recorder.py), which hands each record
to every channel, says whether an answer may be given and stops them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from es_provider.audit.sinks import Sink
from es_provider.audit.spool import Claimed, Spool, SpoolFull
from es_provider.config.audit import AccessLogSettings
from es_provider.core.errors import KnowledgeError

log = logging.getLogger("es_provider.access")
RETENTION_EVERY_S = 3600.0
RETRY_WAIT_S = (0.2, 5.0)  # first and longest wait between tries of a failing batch

Counted = Callable[[str, int], None]  # (reason or sink, records)


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
