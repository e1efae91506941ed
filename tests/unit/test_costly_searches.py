"""Searches with leading-wildcard patterns take turns: at most `max_costly_searches` run at once, the others wait
within their budget (and give up with TIMED_OUT when it ends); other searches never wait for them."""

from __future__ import annotations

import asyncio
import time

import pytest

from es_provider.config.serving import ServerSettings
from es_provider.core.deadline import fixed_budget
from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.core.metrics import Metrics
from es_provider.edge.admission import Admission


@pytest.mark.parametrize(("active", "configured", "allowed"), [(16, None, 4), (4, None, 1), (3, None, 1), (8, 3, 3)])
async def test_costly_searches_take_turns(active: int, configured: int | None, allowed: int) -> None:
    admission = Admission(ServerSettings(active_requests=active, max_costly_searches=configured), Metrics())
    running = peak = 0

    async def one() -> None:
        nonlocal running, peak
        async with admission.costly(True, fixed_budget(5000, now_monotonic=time.monotonic())):
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.01)
            running -= 1

    await asyncio.gather(*(one() for _ in range(3 * allowed)))
    assert peak == allowed
    async with admission.costly(False, fixed_budget(5000, now_monotonic=time.monotonic())):
        pass  # a search without patterns never waits


async def test_a_wait_ends_with_the_budget() -> None:
    admission = Admission(ServerSettings(active_requests=4), Metrics())
    async with admission.costly(True, fixed_budget(5000, now_monotonic=time.monotonic())):
        with pytest.raises(KnowledgeError) as caught:
            async with admission.costly(True, fixed_budget(50, now_monotonic=time.monotonic())):
                pass
    assert caught.value.code is ErrorCode.TIMED_OUT
