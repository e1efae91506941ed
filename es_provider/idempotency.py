"""Answers kept per executionId for a window, so a retried callback gets the same answer without a second search."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from es_provider.errors import ErrorCode, KnowledgeError


@dataclass(frozen=True, slots=True)
class _Entry:
    fingerprint: bytes
    body: bytes
    expires_at: float


class IdempotencyCache:
    def __init__(self, window_s: float, max_entries: int = 10_000) -> None:
        self._window_s = window_s
        self._max = max_entries
        self._entries: OrderedDict[tuple[str, ...], _Entry] = OrderedDict()

    def _expire(self, now: float) -> None:
        while self._entries and next(iter(self._entries.values())).expires_at <= now:
            self._entries.popitem(last=False)

    def get(self, key: tuple[str, ...], fingerprint: bytes, now: float) -> bytes | None:
        """The stored answer for `key`; refuses (422) the same executionId carrying a different request."""
        self._expire(now)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.fingerprint != fingerprint:
            raise KnowledgeError(ErrorCode.REQUEST_REJECTED, detail="executionId reused for a different request")
        return entry.body

    def put(self, key: tuple[str, ...], fingerprint: bytes, body: bytes, now: float) -> None:
        if self._window_s <= 0:
            return
        self._expire(now)
        if len(self._entries) >= self._max:
            self._entries.popitem(last=False)
        self._entries[key] = _Entry(fingerprint, body, now + self._window_s)
