"""Issue 52, finding 7: a whole document's passage is bounded work, cut off the event loop, within the deadline. An
existing index keeps one 3,000,000-character Chinese document whole (with an HTML export's `<br>` residue); four
Dify calls (the service's 4 s budget) ask it a pasted paragraph at once, on a served process of its own. Before, each
hit cost 1.1 s of CPU on the event loop: the calls answered at 1.4, 2.7, 3.8 and 5.0 s, and /healthz and a small
search on another knowledge base waited 3.5 s behind them. Now every call answers within its budget (0.15-0.35 s)
with the passage (≤ passage_chars), and the small requests answer meanwhile in tens of milliseconds."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers.long_texts import cjk_text
from helpers.served import Served, toml_value
from helpers.setup import API_KEY, TEST_ENV

# Each call within its 4 s budget, the small requests in tens of milliseconds meanwhile: timed, so `make test` runs it alone, after the parallel run (-m timing), so other tests' load cannot fail it.
pytestmark = pytest.mark.timing

BIG = 3_000_000
BUDGET_MS = 4000  # Dify carries no deadline: the service's default_budget_ms is its budget
CALLS = 4
# A user who pastes a paragraph (Dify passes the user's words): 160 characters, common ones among them.
QUERY = cjk_text(160, seed=3)
MAPPING = {"properties": {"body": {"type": "text"}, "doc_id": {"type": "keyword"}, "tenant": {"type": "keyword"},
                          "owner": {"type": "keyword"}, "allowed_groups": {"type": "keyword"}}}
FIELDS = {"text": ["body"], "document_id": "doc_id", "tenant": "tenant", "subjects": "owner",
          "groups": "allowed_groups"}


def _doc(doc_id: str, body: str) -> dict[str, Any]:
    return {"doc_id": doc_id, "body": body, "tenant": "t-a", "owner": "u-alice", "allowed_groups": []}


async def _index(engine: Any, docs: list[dict[str, Any]]) -> str:
    name = f"test-passages-{uuid.uuid4().hex[:10]}"
    await engine.create_index(name, {"settings": {"index": {"number_of_replicas": 0}}, "mappings": MAPPING})
    lines: list[dict[str, Any]] = []
    for doc in docs:
        lines += [{"index": {"_index": name, "_id": doc["doc_id"]}}, doc]
    response = await engine._client.bulk(body=lines, refresh=True, request_timeout=120)
    assert not response["errors"], response
    return name


def _config(path: Path, url: str, books: str, notes: str) -> Path:
    lines = ["[opensearch]", f"url = {toml_value(url)}", "", "[server]", f"default_budget_ms = {BUDGET_MS}", "",
             "[access_log]", f"spool_dir = {toml_value(str(path.parent / 'spool'))}"]
    for kb_id, alias in (("books", books), ("notes", notes)):
        lines += ["", "[[knowledge]]", f'id = "{kb_id}"', f'name = "{kb_id}"', 'versions = ["1.0.0"]',
                  f"alias = {toml_value(alias)}", 'secret_ref = "TEST_CALLBACK_KEY"', 'apps = ["app-1"]',
                  'schema = "custom"', 'mandatory_filters = ["TENANT", "SUBJECT"]', "top_k = 3", "",
                  "[knowledge.fields]", *(f"{k} = {toml_value(v)}" for k, v in FIELDS.items())]
    lines += ["", "[[api_keys]]", 'key_ref = "TEST_API_KEY"', 'app = "app-1"', 'tenants = ["t-a"]',
              'subject = "u-alice"', 'knowledge = ["books", "notes"]', "", "[principals]", '"u-alice" = []']
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
async def service(engine: Any, opensearch: Any, tmp_path: Path) -> AsyncIterator[Served]:
    big = (await asyncio.to_thread(cjk_text, BIG)).replace("。", "。<br>")[:BIG]  # residue of an HTML export
    books = await _index(engine, [_doc("big", big), _doc("small", cjk_text(3000, seed=5))])
    notes = await _index(engine, [_doc(f"note-{n}", f"installation note {n} alpha beta") for n in range(20)])
    served = None
    try:
        config = _config(tmp_path / "config.toml", opensearch.url, books, notes)
        served = await asyncio.to_thread(Served, config, {**TEST_ENV, "OPENSEARCH_URL": opensearch.url},
                                         tmp_path / "service.log")
        yield served
    finally:
        if served is not None:
            served.stop()
        for index in (books, notes):
            await engine.delete_index(index)


async def _dify(session: aiohttp.ClientSession, base: str, kb_id: str, query: str) -> tuple[int, Any, float]:
    started = time.monotonic()
    async with session.post(f"{base}/retrieval", headers={"Authorization": f"Bearer {API_KEY}"}, json={
            "knowledge_id": kb_id, "query": query, "retrieval_setting": {"top_k": 3, "score_threshold": 0}}) as got:
        answer = await got.json()
        return got.status, answer, time.monotonic() - started


async def _healthz(session: aiohttp.ClientSession, base: str) -> float:
    started = time.monotonic()
    async with session.get(f"{base}/healthz") as got:
        assert got.status == 200
    return time.monotonic() - started


async def _small_search(session: aiohttp.ClientSession, base: str) -> float:
    status, answer, took = await _dify(session, base, "notes", "installation alpha")
    assert status == 200 and answer["records"], answer
    return took


async def _probe(ask: Callable[[], Awaitable[float]], stop: asyncio.Event) -> list[float]:
    """`ask`'s latencies, one after the other every 50 ms, until `stop`."""
    taken: list[float] = []
    while not stop.is_set():
        taken.append(await ask())
        await asyncio.sleep(0.05)
    return taken


async def test_four_calls_on_a_3m_character_document_answer_within_budget_and_the_loop_stays_free(
        service: Served, figures: Any) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        status, answer, _ = await _dify(session, service.base, "books", QUERY)  # warm: connections, mappings
        assert status == 200, answer
        healthz, small = partial(_healthz, session, service.base), partial(_small_search, session, service.base)
        alone = (await healthz(), await small())
        cpu = service.cpu_seconds()
        stop = asyncio.Event()
        probes = [asyncio.create_task(_probe(ask, stop)) for ask in (healthz, small)]
        calls = await asyncio.gather(*(_dify(session, service.base, "books", QUERY) for _ in range(CALLS)))
        stop.set()
        worst = [max(await probe) for probe in probes]
        cpu = service.cpu_seconds() - cpu
    took = sorted(t for _, _, t in calls)
    summary = (f"{CALLS} concurrent Dify calls on a {BIG:,}-character CJK document (budget {BUDGET_MS} ms) "
               f"answered {sorted(status for status, _, _ in calls)} in {', '.join(f'{t:.2f}' for t in took)} s, "
               f"{cpu:.2f} s of service CPU in all; meanwhile the slowest /healthz {worst[0] * 1000:.0f} ms "
               f"({alone[0] * 1000:.0f} ms alone) and small search on another knowledge base {worst[1] * 1000:.0f} ms "
               f"({alone[1] * 1000:.0f} ms alone)")
    figures("passages", summary)
    print(summary)
    for status, answer, _ in calls:
        assert status == 200, (summary, answer)
        records = {r["metadata"]["document_id"]: r["content"] for r in answer["records"]}
        assert "big" in records and 0 < len(records["big"]) <= 16384, {k: len(v) for k, v in records.items()}
    assert took[-1] < BUDGET_MS / 1000, summary
    # The small search also waits for the engine, whose search threads (4 on 2 cores) fetch the big document four
    # times meanwhile: 0.27 s measured; the service's own part is what /healthz shows.
    assert worst[0] < 0.5 and worst[1] < 1.0, summary
