"""edge/admission.py: a request's slot (per credential and for the service; turns go round-robin across credentials,
issue 52 finding 2), and searches with leading-wildcard patterns taking turns: at most `max_costly_searches` run at
once, the others wait within their budget (and give up with TIMED_OUT when it ends); other searches never wait."""

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


# --- a request's slot: per-credential slots, turns round-robin across credentials ---

def admission(**server: int) -> Admission:
    return Admission(ServerSettings.model_validate(server), Metrics())


async def test_a_credential_is_refused_beyond_its_own_slots() -> None:
    gate = admission(max_concurrency=10, max_concurrency_per_key=2, active_requests=10)
    async with gate.slot("flood"), gate.slot("flood"):
        with pytest.raises(KnowledgeError) as caught:
            async with gate.slot("flood"):
                pass
        assert caught.value.code is ErrorCode.RATE_LIMITED
        async with gate.slot("calm"):  # another credential is still admitted
            pass


async def test_the_service_is_refused_beyond_its_slots() -> None:
    gate = admission(max_concurrency=2, max_concurrency_per_key=2, active_requests=2)
    async with gate.slot("a"), gate.slot("b"):
        with pytest.raises(KnowledgeError):
            async with gate.slot("c"):
                pass


async def test_turns_go_round_robin_so_a_backlog_does_not_delay_another_caller() -> None:
    gate = admission(max_concurrency=100, max_concurrency_per_key=50, active_requests=1)
    order: list[str] = []
    release = asyncio.Event()

    async def run(holder: str, n: int) -> None:
        async with gate.slot(holder):
            order.append(f"{holder}{n}")
            if n == 0:
                await release.wait()

    flood = [asyncio.create_task(run("flood", n)) for n in range(5)]
    await asyncio.sleep(0)
    calm = asyncio.create_task(run("calm", 1))
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(*flood, calm)
    assert order[:3] == ["flood0", "flood1", "calm1"]


async def test_a_cancelled_waiter_gives_its_turn_away() -> None:
    gate = admission(max_concurrency=10, max_concurrency_per_key=10, active_requests=1)
    release = asyncio.Event()
    ran: list[str] = []

    async def run(holder: str) -> None:
        async with gate.slot(holder):
            ran.append(holder)
            if holder == "first":
                await release.wait()

    first = asyncio.create_task(run("first"))
    await asyncio.sleep(0)
    gone = asyncio.create_task(run("gone"))
    last = asyncio.create_task(run("last"))
    await asyncio.sleep(0)
    gone.cancel()
    release.set()
    await asyncio.gather(first, last)
    assert ran == ["first", "last"]
