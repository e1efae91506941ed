"""TtlCache: a value per key for a while, on a monotonic clock (the Retriever's mapping and metadata-type caches)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")



class TtlCache(Generic[K, V]):
    """A value per key for `ttl_s` seconds after it was put, on `clock` (monotonic seconds). Unbounded: its keys
    are index expressions, a handful per deployment."""

    __slots__ = ("_clock", "_entries", "_ttl_s")

    def __init__(self, ttl_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl_s = ttl_s
        self._clock = clock
        self._entries: dict[K, tuple[float, V]] = {}  # key → (expiry, value)

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is not None and entry[0] > self._clock():
            return entry[1]
        return None

    def put(self, key: K, value: V) -> None:
        self._entries[key] = (self._clock() + self._ttl_s, value)
