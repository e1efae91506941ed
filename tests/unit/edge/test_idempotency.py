"""The idempotency window (edge/idempotency.py): one executionId answered once, its answer kept as it was sent,
memory bounded in bytes."""

from __future__ import annotations

import asyncio

import pytest

from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.edge.exchange import Answer
from es_provider.edge.idempotency import IdempotencyCache


def test_idempotency_cache() -> None:
    cache = IdempotencyCache(window_s=60)
    key = ("kb", "1.0.0", "app", "exec")
    assert cache.get(key, b"f", 0) is None
    cache.put(key, b"f", Answer(b"answer"), 0)
    assert cache.get(key, b"f", 59) == Answer(b"answer")
    with pytest.raises(KnowledgeError) as caught:
        cache.get(key, b"other", 59)
    assert caught.value.code is ErrorCode.REQUEST_REJECTED and caught.value.status == 422
    assert cache.get(key, b"f", 61) is None


# --- finding 7: one executionId is answered once ---

KEY = ("kb", "1", "app", "exec")


class Held:
    """A callback's answer in flight: each call waits for `release`, then gives the next of `answers` (the last
    again once they run out), raising it if it is an error."""

    def __init__(self, *answers: bytes | KnowledgeError) -> None:
        self.release = asyncio.Event()
        self.calls = 0
        self.answers = answers

    async def __call__(self) -> Answer:
        self.calls += 1
        answer = self.answers[min(self.calls, len(self.answers)) - 1]
        await self.release.wait()
        if isinstance(answer, KnowledgeError):
            raise answer
        return Answer(answer)


async def test_concurrent_duplicates_wait_for_the_first_answer() -> None:
    cache = IdempotencyCache(window_s=60)
    answer = Held(b"the answer")
    runs = [asyncio.create_task(cache.once(KEY, b"same", answer, lambda: 0.0)) for _ in range(6)]
    await asyncio.sleep(0)
    answer.release.set()
    assert await asyncio.gather(*runs) == [Answer(b"the answer")] * 6
    assert answer.calls == 1


async def test_a_different_body_in_flight_is_refused() -> None:
    cache = IdempotencyCache(window_s=60)
    answer = Held(b"first")
    first = asyncio.create_task(cache.once(KEY, b"one", answer, lambda: 0.0))
    await asyncio.sleep(0)
    with pytest.raises(KnowledgeError) as caught:
        await cache.once(KEY, b"two", answer, lambda: 0.0)
    assert caught.value.code is ErrorCode.REQUEST_REJECTED
    answer.release.set()
    assert await first == Answer(b"first")


async def test_a_failed_first_answer_is_not_shared() -> None:
    cache = IdempotencyCache(window_s=60)
    answer = Held(KnowledgeError(ErrorCode.UNAVAILABLE), b"second try")
    first = asyncio.create_task(cache.once(KEY, b"f", answer, lambda: 0.0))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(cache.once(KEY, b"f", answer, lambda: 0.0))
    await asyncio.sleep(0)
    answer.release.set()
    with pytest.raises(KnowledgeError):
        await first
    assert await waiter == Answer(b"second try")


# --- the idempotency window is bounded in bytes ---

def test_idempotency_memory_is_bounded_in_bytes_oldest_first() -> None:
    sizes: list[int] = []
    cache = IdempotencyCache(window_s=300, max_bytes=64 * 1024, on_size=sizes.append)
    body = b"x" * 10_000
    for n in range(50):
        cache.put(("kb", "1", "app", f"e{n}"), b"f", Answer(body), now=float(n))
    assert cache.size_bytes <= 64 * 1024 and max(sizes) <= 64 * 1024
    assert cache.get(("kb", "1", "app", "e49"), b"f", 50.0) == Answer(body)  # the newest is kept
    assert cache.get(("kb", "1", "app", "e0"), b"f", 50.0) is None  # the oldest went first
    cache.put(("kb", "1", "app", "huge"), b"f", Answer(b"y" * 100_000), now=51.0)  # larger than the budget: not kept
    assert cache.get(("kb", "1", "app", "huge"), b"f", 52.0) is None
    assert cache.get(("kb", "1", "app", "e49"), b"f", 52.0) == Answer(body)
    assert cache.get(("kb", "1", "app", "e49"), b"f", 400.0) is None and cache.size_bytes == 0  # expired
