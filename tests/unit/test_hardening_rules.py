"""Unit tables for the hardening findings that are pure logic (the HTTP-level ones are in
tests/integration/test_hardening.py)."""

from __future__ import annotations

import asyncio

import pytest

from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.search.query import MAX_QUERY_UNITS, bounded_text, text_fields

# --- finding 4: the query bound counts what the analyzers produce ---

@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("\U00020000" * 520, 200),  # CJK Extension B: one term per character
        ("\U00030000" * 300, 200),  # Extension G (tertiary plane)
        ("中" * 300, 200), ("ひらがな" * 100, 200), ("カタカナ" * 100, 200), ("한국어" * 100, 200),
        ("ｶﾀｶﾅ" * 100, 200),  # half-width katakana
        ("a中" * 300, 200),  # alternating scripts: every character is its own term
        ("word " * 300, 200 * 5 - 1),
        ("x" * 600, 600),  # one long run: 3 terms (the tokenizer cuts at 255)
    ],
)
def test_query_bound_counts_terms(text: str, kept: int) -> None:
    assert len(bounded_text(text)) == kept


def test_supplementary_ideographs_use_the_cjk_fields() -> None:
    assert "content.cjk" in text_fields("\U00020000")
    assert "content.cjk" not in text_fields("plain words")
    assert MAX_QUERY_UNITS * len(text_fields("中")) < 1024


# --- finding 2: admission: per-credential slots, turns round-robin across credentials ---

def admission(**server: int):
    from es_provider.config.serving import ServerSettings
    from es_provider.core.metrics import Metrics
    from es_provider.edge.admission import Admission

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
