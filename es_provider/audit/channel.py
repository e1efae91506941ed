"""One sink's queue and writer task (Channel): batches, tries again with a growing wait, sweeps expired days, moves
what waits too long to the spool and drains it back. Apart from the Recorder (recorder.py), which hands each record
to every channel, says whether an answer may be given and stops them.

The writer outlives any record: a spooled line or file the drain refuses is counted and logged (by file name and
count, never its content) and set aside; an error nobody foresaw is logged and tried again, never the writer's end.
The spool's file work runs in daemon threads of its own (in_thread), timed: one stuck on its file system is a
readiness reason (stuck), and never holds up the process's exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from es_provider.audit.journal import Journal, Segment
from es_provider.audit.lines import Refusal
from es_provider.audit.sinks import Sink
from es_provider.audit.spool import Claimed, SetAside, Spool, SpoolFull
from es_provider.config.audit import AccessLogSettings
from es_provider.core.errors import KnowledgeError

log = logging.getLogger("es_provider.access")
RETENTION_EVERY_S = 3600.0
RETENTION_RETRY_S = 60.0  # after a failed sweep
RETRY_WAIT_S = (0.2, 5.0)  # first and longest wait between tries of a failing batch
STUCK_AFTER_S = 30.0  # a spool file operation running longer is stuck (a claim reads at most 8 MiB)
BAD_FILE = "spool_bad_file"  # the dropped reason of a spool entry set aside unread (counted once per entry)
WHY = {Refusal.TORN: "cut short by a crash", Refusal.FORGED: "not signed by this service for this cluster",
       Refusal.INVALID: "not an access record", Refusal.OUT_OF_WINDOW: "older than the retention or in the future"}

Counted = Callable[[str, int], None]  # (reason or sink, records)
T = TypeVar("T")


async def in_thread(call: Callable[[], T], orphan: Callable[[T], None] | None = None) -> T:
    """`call()` in a daemon thread of its own. Awaiting it can always be cancelled, and a call stuck on its file
    system (an NFS server gone) never holds up the process's exit, as a thread of asyncio's default executor does
    (asyncio.run and aiohttp's run_app wait for those). `orphan` gets what a call returns after its waiter gave up
    (a claim's open file, to release)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            if error is None and orphan is not None:
                orphan(result)  # type: ignore[arg-type]
        elif error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            outcome: tuple[T | None, BaseException | None] = (call(), None)
        except BaseException as exc:  # handed to the waiter, as to_thread does
            outcome = (None, exc)
        with contextlib.suppress(RuntimeError):  # the loop is closed: the process is ending
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=run, name="access-spool", daemon=True).start()
    return await future


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
        self.journal = Journal(spool) if spool is not None else None  # the queue's write-ahead copy (journal.py)
        self._journaled: dict[int, Segment] = {}  # id(record) -> the journal segment holding it, until taken
        self.journal_failing = False  # the last journal write failed
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
        self._busy: dict[int, tuple[str, float]] = {}  # spool file operations running: (what, since when)
        self._tokens = itertools.count()
        self._appending: asyncio.Future[None] | None = None  # the spool's append, which may outlive its waiter
        self._unreadable = False  # the spool could not be read at the last claim (logged once per change)
        self._fault_logged_at = -60.0

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

    def write_ahead(self, record: dict[str, Any]) -> Segment | None:
        """The record's journal line, before its answer goes out (None: no journal, or the write failed: logged
        once per failure run, and the caller counts it)."""
        if self.journal is None:
            return None
        try:
            segment = self.journal.append(record)
        except OSError as exc:
            if not self.journal_failing:
                self.journal_failing = True
                log.error("access record: the journal in %s cannot be written (%s): a kill -9 would lose the records "
                          "queued in memory; answers are refused (or, with \"count\", counted)",
                          self.journal.spool.directory, _why(exc))
            return None
        if self.journal_failing:
            self.journal_failing = False
            log.warning("access record: the journal in %s is written again", self.journal.spool.directory)
        return segment

    def put(self, record: dict[str, Any], segment: Segment | None = None) -> None:
        if segment is not None:
            self._journaled[id(record)] = segment
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
            try:
                self._settle([])  # a journal file idle for Journal.ROTATE_S, all its records taken, goes
                if time.monotonic() >= next_expiry:
                    # A failed sweep (e.g. a user without delete_index) is tried, and logged, once a minute, not at
                    # every flush.
                    swept = await self._expire()
                    next_expiry = time.monotonic() + (RETENTION_EVERY_S if swept else RETENTION_RETRY_S)
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
            except Exception as exc:  # nobody foresaw it: the writer goes on (a batch is kept, a spool file set aside)
                self._fault(exc)
                await asyncio.sleep(wait)
                wait = min(wait * 2, RETRY_WAIT_S[1])

    def _fault(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._fault_logged_at >= 60.0:  # at most once a minute
            self._fault_logged_at = now
            log.error("access record: the %s sink's writer hit %s; it goes on", self.sink.name, _where(exc))

    async def run_spooler(self) -> None:
        """Moves what the sink has not taken after max_delay_s / 2 from memory to the spool, whatever the writer is
        doing (a write may hang for its whole timeout)."""
        tick = min(1.0, self._settings.max_delay_s / 4)
        while True:
            await asyncio.sleep(tick)
            oldest = self._oldest()
            try:
                if oldest is not None and time.monotonic() - oldest > self._settings.max_delay_s / 2:
                    await self.spool_out()
            except Exception as exc:  # as the writer: it goes on (the records stay queued)
                self._fault(exc)

    async def spool_out(self, wait_s: float | None = None) -> int:
        """Appends the unkept records (the in-flight batch and the queue) to the spool; how many it took. `wait_s`
        (the stop's) bounds the wait for the append, and for an earlier one still running: two never run at once
        (one file), and one stuck on its file system does not hold up the stop."""
        assert self.spool is not None
        spool = self.spool
        async with self._taking:
            records = [r for _, r in self._inflight] if not self._inflight_spooled else []
            records += [r for _, r in self.queue]
            if not records:
                return 0
            bound = asyncio.timeout(wait_s)
            try:
                async with bound:
                    if self._appending is not None and not self._appending.done():
                        await asyncio.wait({self._appending})  # a cancelled spooler's append, still in its thread
                    self._appending = appending = asyncio.ensure_future(
                        self._spool_op("append", lambda: spool.append(records)))
                    await asyncio.shield(appending)  # a cancel leaves it running: _appending says so
            except (SpoolFull, OSError) as exc:  # TimeoutError (the bound's) is an OSError
                if bound.expired():
                    log.error("access record: the spool in %s did not take %d records within %.1f s (its file "
                              "system hangs?)", spool.directory, len(records), wait_s or 0.0)
                elif not self._spool_failing:
                    self._spool_failing = True
                    log.error("access record: the spool in %s cannot take %d records (%s): answers are refused "
                              "(or records dropped) as without a spool", self.spool.directory, len(records),
                              "full at " + str(exc) if isinstance(exc, SpoolFull) else _why(exc))
                return 0
            # By identity: a failed write may have put its batch back meanwhile (it is in `records` already).
            taken = {id(r) for r in records}
            self.queue = deque(queued for queued in self.queue if id(queued[1]) not in taken)
            self._inflight_spooled = True
            self._settle(records)
        if self._spool_failing:
            self._spool_failing = False
            log.warning("access record: the spool in %s takes records again", self.spool.directory)
        if not self._spooling:  # once per outage, not per tick
            self._spooling = True
            log.warning("access record: the %s sink has not taken records for %.1f s: spooling them to %s",
                        self.sink.name, self._settings.max_delay_s / 2, self.spool.directory)
        self._spooled(self.sink.name, len(records))
        return len(records)

    async def _spool_op(self, what: str, call: Callable[[], T], orphan: Callable[[T], None] | None = None) -> T:
        """A spool file operation, timed (stuck says when one runs too long)."""
        token = next(self._tokens)
        self._busy[token] = (what, time.monotonic())
        try:
            return await in_thread(call, orphan)
        finally:
            del self._busy[token]

    def stuck(self, now: float) -> str | None:
        """Why this channel's spool is not drained as it should be, for readiness (no paths: the log has them)."""
        late = sorted(since for _, since in self._busy.values() if now - since > STUCK_AFTER_S)
        if late:
            what = next(w for w, since in self._busy.values() if since == late[0])
            return f"a spool {what} has run for {now - late[0]:.0f} s (its file system hangs?)"
        return "the spool cannot be read" if self._unreadable else None

    async def _claim(self) -> bool:
        """Claims the oldest spool file to drain. The own file is sealed first once the sink takes writes again (or
        nothing was appended to it for max_delay_s), so its records can be drained too."""
        assert self.spool is not None
        spool = self.spool
        if spool.open and (self._failing_since is None
                           or time.monotonic() - spool.appended_at > self._settings.max_delay_s):
            async with self._taking:  # never while the spooler appends
                if self._appending is None or self._appending.done():
                    spool.seal()

        def orphan(result: tuple[Claimed | None, list[SetAside]]) -> None:  # claimed after the stop gave up on it
            if result[0] is not None:
                spool.release(result[0], False)

        try:
            self._claimed, set_aside = await self._spool_op("claim", spool.claim, orphan)
        except OSError as exc:
            if not self._unreadable:
                self._unreadable = True
                log.error("access record: the spool in %s cannot be read: %s", spool.directory, _why(exc))
            return False
        if self._unreadable:
            self._unreadable = False
            log.warning("access record: the spool in %s can be read again", spool.directory)
        for entry in set_aside:
            self._dropped(BAD_FILE, 1)
            log.error("access record: the spool entry %s in %s is %s: not read, %s", entry.name, spool.directory,
                      entry.why, f"set aside as {entry.kept_as}" if entry.kept_as else "skipped from now on")
        claimed = self._claimed
        if claimed is None:
            return False
        for reason, n in claimed.refused.items():
            self._dropped(reason.value, n)
        if claimed.refused:
            log.error("access record: the spool file %s in %s has %s lines refused (%s); its %d other records are "
                      "drained, then it is set aside", claimed.name, spool.directory, sum(claimed.refused.values()),
                      "; ".join(f"{n} {WHY[reason]}" for reason, n in sorted(claimed.refused.items())),
                      len(claimed.records))
        log.info("access record: draining %d spooled records from %s", len(claimed.records), claimed.name)
        return True

    async def _drain_once(self) -> bool:
        """Writes the claimed file's next batch; the file is deleted once all its records are written (set aside
        when some of its lines were refused, or the sink could not take its records for a reason nobody foresaw)."""
        claimed = self._claimed
        assert claimed is not None and self.spool is not None
        spool = self.spool
        batch = claimed.records[claimed.done:claimed.done + self._settings.batch]
        if batch:
            try:
                rejected = await self.sink.write(batch)
            except (KnowledgeError, OSError) as exc:
                self._failed(exc)
                return False
            except Exception as exc:  # tried again, it would fail again: the writer would go no further
                left = len(claimed.records) - claimed.done
                claimed.refused[Refusal.INVALID] = claimed.refused.get(Refusal.INVALID, 0) + left
                claimed.done = len(claimed.records)
                self._dropped(Refusal.INVALID.value, left)
                log.error("access record: writing the spool file %s failed (%s): its %d records left are set aside",
                          claimed.name, _where(exc), left)
            else:
                self._kept(len(batch), rejected, self._drained)
                claimed.done += len(batch)
        if claimed.done >= len(claimed.records):
            self._claimed = None
            try:
                moved = await self._spool_op("release", lambda: spool.release(claimed, True))
            except OSError as exc:  # written; a later drain writes it again (409s) and deletes it
                log.error("access record: a drained spool file could not be deleted: %s", _why(exc))
            else:
                if moved is not None:
                    log.warning("access record: the spool file %s in %s is %s", claimed.name, spool.directory,
                                f"set aside as {moved.kept_as}" if moved.kept_as else "left in place, skipped")
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
        self._settle(batch)
        self._kept(len(batch), rejected, self._written)
        return True

    def _settle(self, records: list[dict[str, Any]]) -> None:
        """The records are taken (by the index, or the spool): their journal segments may go."""
        if self.journal is not None:
            segments = [s for r in records if (s := self._journaled.pop(id(r), None)) is not None]
            if segments or self.journal.current is not None:
                self.journal.settle(segments)

    def close_journal(self) -> int:
        """The stop's: the journal files whose records were all taken are deleted, the others left for the next
        drain; how many queued records they still hold."""
        if self.journal is None:
            return 0
        left = self.journal.close()
        self._journaled.clear()
        return left

    def _put_back(self) -> None:
        if not self._inflight_spooled:
            self.queue.extendleft(reversed(self._inflight))
        self._inflight = []

    def release_claim(self) -> None:
        if self._claimed is not None and self.spool is not None:
            self.spool.release(self._claimed, False)  # kept: the next drain (this host's next start) writes it
            self._claimed = None

    def seal_spool(self) -> None:
        """The stop's: closes the own spool file, unless an append still writes to it (the exit closes it)."""
        if self.spool is not None and (self._appending is None or self._appending.done()):
            self.spool.seal()

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


def _where(exc: BaseException) -> str:
    """An unforeseen error's type and where it was raised: never its message, which may quote a record."""
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{type(exc).__name__} at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else \
        type(exc).__name__
