"""Answers kept per executionId for a window, so a retried callback gets the same answer without a second search.

Memory is bounded in bytes (answer bodies, the bulk of it): beyond `max_bytes` the oldest answers are forgotten
first (a retry of a forgotten one is searched again: the same request, so the same kind of answer).

One executionId is answered once: a duplicate that arrives while the first is still being answered waits for
that answer instead of searching again; the same executionId with a different request is refused (422), whether
the first is finished or still running.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.edge.exchange import Answer

Key = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Entry:
    fingerprint: bytes
    answer: Answer
    expires_at: float


# What an entry costs besides its body: key tuple, fingerprint, the entry and the dict slot (measured roughly).
_OVERHEAD = 512


def _cost(entry: _Entry) -> int:
    return len(entry.answer.body) + 64 * len(entry.answer.served) + _OVERHEAD


def _reused() -> KnowledgeError:
    return KnowledgeError(ErrorCode.REQUEST_REJECTED, detail="executionId reused for a different request")


class IdempotencyCache:
    def __init__(self, window_s: float, max_bytes: int = 64 * 1024 * 1024,
                 on_size: Callable[[int], None] | None = None) -> None:
        self._window_s = window_s
        self._max_bytes = max_bytes
        self._bytes = 0
        self._on_size = on_size
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._running: dict[Key, tuple[bytes, asyncio.Future[Answer]]] = {}

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def _forget_oldest(self) -> None:
        _, entry = self._entries.popitem(last=False)
        self._bytes -= _cost(entry)

    def _expire(self, now: float) -> None:
        before = self._bytes
        while self._entries and next(iter(self._entries.values())).expires_at <= now:
            self._forget_oldest()
        if self._bytes != before and self._on_size is not None:
            self._on_size(self._bytes)

    def get(self, key: Key, fingerprint: bytes, now: float) -> Answer | None:
        """The stored answer for `key`; refuses (422) the same executionId carrying a different request."""
        self._expire(now)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.fingerprint != fingerprint:
            raise _reused()
        return entry.answer

    def put(self, key: Key, fingerprint: bytes, answer: Answer, now: float) -> None:
        if self._window_s <= 0:
            return
        self._expire(now)
        entry = _Entry(fingerprint, answer, now + self._window_s)
        if _cost(entry) > self._max_bytes:
            return  # larger than the whole budget: not kept
        if key in self._entries:
            self._bytes -= _cost(self._entries.pop(key))
        while self._entries and self._bytes + _cost(entry) > self._max_bytes:
            self._forget_oldest()
        self._entries[key] = entry
        self._bytes += _cost(entry)
        if self._on_size is not None:
            self._on_size(self._bytes)

    async def once(
        self, key: Key, fingerprint: bytes, answer: Callable[[], Awaitable[Answer]], clock: Callable[[], float]
    ) -> Answer:
        """The answer for `key`: stored, awaited from the request already computing it, or computed now.

        A failed first attempt stores nothing; a waiting duplicate then computes the answer itself."""
        while True:
            stored = self.get(key, fingerprint, clock())
            if stored is not None:
                return stored
            running = self._running.get(key)
            if running is None:
                break
            if running[0] != fingerprint:
                raise _reused()
            try:
                return await asyncio.shield(running[1])
            except KnowledgeError:
                continue  # the first attempt failed: try again (as the first, if nobody else took over)
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._running[key] = (fingerprint, future)
        try:
            computed = await answer()
        except BaseException as exc:
            failure = exc if isinstance(exc, KnowledgeError) else KnowledgeError(ErrorCode.UNAVAILABLE)
            future.set_exception(failure)
            future.exception()  # retrieved here, so an unawaited failure is not reported as "never retrieved"
            raise
        else:
            future.set_result(computed)
            self.put(key, fingerprint, computed, clock())
            return computed
        finally:
            del self._running[key]
