"""The MCP endpoint's permission oracle at scale: one endpoint serving two bases, the service's own index and an index
LangChain's own library built (tool_indices.py), each holding a random permission corpus (acl_random.py); the
identities' groups in the principal store ([directory], an index of the test's own, bulk-filled); ≥ 1,000 identities
with tokens of the test's own issuer (LocalIssuer, tenant from `tenant_claim`) asking `retrieve` 8 at a time, each
answer held to a plain-Python oracle: no chunk out of reach, none missing. Every query token matches at most 4
chunks per base (≤ top_k 20), so the oracle's set is the exact answer. `fetch` of a forbidden id and of an unknown id
answers the same bytes (the not-found result names no id); a readable id answers its document's text.

The store is authoritative for the subjects it knows: `[principals]` and the tokens' groups claim name every group
for those subjects, and must change nothing; deactivated and deleted users are refused (401)."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from helpers.acl_random import GROUPS, corpus, visible
from helpers.local_issuer import LocalIssuer
from helpers.mcp_oracle import Base, Person, Store, crowd, expected, fill_store, random_store, tool_call
from helpers.setup import TEST_ENV, drop_indices, load_records, new_kb, settings_for
from helpers.tool_indices import LANGCHAIN
from helpers.tool_oracle import KB_ID, Tally, readable, tool_index

from es_provider.config.knowledge import KnowledgeBase
from es_provider.web.app import create_app

RESOURCE = "http://127.0.0.1:8080/mcp"
OWN_CHUNKS = 2_000
TOOL_CHUNKS = 600
IDENTITIES = 2_000
FETCHERS = 100


@dataclass
class World:
    client: TestClient[Any, Any]
    issuer: LocalIssuer
    store: Store
    bases: list[Base]
    people: list[Person]
    setup_s: float

    def token(self, person: Person) -> str:
        return self.issuer.mint(person.subject, RESOURCE, tenant=person.tenant, groups=list(person.claimed))


@pytest.fixture
async def world(engine: Any, kb: KnowledgeBase, opensearch: Any) -> AsyncIterator[World]:
    started = time.monotonic()
    rng = random.Random(20261215)
    docs, uses = corpus(rng, OWN_CHUNKS)
    store = random_store(rng)
    label = f"test-mcp-oracle-{uuid.uuid4().hex[:8]}"
    principal_index, access_prefix = f"{label}-principals", f"{label}-access"
    issuer = await LocalIssuer().start()
    client: TestClient[Any, Any] | None = None
    try:
        async with tool_index(LANGCHAIN, opensearch.url, engine, "mcp-oracle", TOOL_CHUNKS) as (index, tdocs, tuses):
            await asyncio.gather(load_records(engine, kb, docs), fill_store(engine, principal_index, store))
            tool_kb = new_kb(id=KB_ID, alias=index, schema=LANGCHAIN.schema, fields=LANGCHAIN.fields,
                             retrieval="bm25")
            bases = [Base(kb.id, {d["document_id"]: d for d in docs}, uses,
                          lambda d, s, t, g: visible(d, s, t, set(g))),
                     Base(KB_ID, {d["document_id"]: d for d in tdocs}, tuses,
                          lambda d, s, t, g: readable(d, s, t, set(g), LANGCHAIN))]
            known = [*store.users, *store.tombstones]
            settings = settings_for(
                opensearch.url, kb, tool_kb,
                principals={s: GROUPS for s in known},  # decoys: the store knows these subjects
                directory={"enabled": True, "index": principal_index},
                access_log={"index": access_prefix, "flush_interval_s": 0.2},
                mcp={"enabled": True, "resource": RESOURCE, "knowledge": [kb.id, KB_ID],
                     "issuers": [{"issuer": issuer.url, "tenant_claim": "tenant", "groups_claim": "groups"}]})
            client = TestClient(TestServer(create_app(settings, environ=TEST_ENV)))
            await client.start_server()
            ready = await client.get("/readyz")
            assert ready.status == 200, await ready.text()
            people = crowd(rng, store, bases, IDENTITIES)
            yield World(client, issuer, store, bases, people, time.monotonic() - started)
    finally:
        if client is not None:
            await client.close()  # its access records flushed before their indices go
        await issuer.close()
        await drop_indices(engine, principal_index, f"{access_prefix}-*")


def documents(tool: str, result: dict[str, Any], query: str) -> set[tuple[str, str]]:
    """(base, document) pairs a `retrieve` or `search` result names; each retrieved chunk holds the query token."""
    if tool == "search":
        hits = result["structuredContent"]["results"]
        assert len(hits) <= 10, hits
        return {tuple(h["id"].split("/", 1)) for h in hits}
    chunks = result["structuredContent"]["chunks"]
    assert all(query in c["content"] for c in chunks), chunks
    return {(c["knowledge_base"], c["document_id"]) for c in chunks}


async def test_every_identity_retrieves_and_searches_exactly_what_the_oracle_allows(world: World,
                                                                                    figures: Any) -> None:
    tally = Tally(asked={"retrieve": 0, "search": 0})
    kinds: dict[str, int] = {}
    refused = 0
    gate = asyncio.Semaphore(8)

    async def check(person: Person) -> None:
        nonlocal refused
        token = world.token(person)
        async with gate:
            answers = {"retrieve": await tool_call(world.client, token, "retrieve", {"query": person.query,
                                                                                      "top_k": 20}),
                       "search": await tool_call(world.client, token, "search", {"query": person.query})}
        kinds[person.kind] = kinds.get(person.kind, 0) + 1
        who = (person.kind, person.subject, person.tenant, person.query)
        want = expected(world.bases, person, person.query)
        for tool, answered in answers.items():
            tally.asked[tool] += 1
            answer = orjson.loads(answered.body)
            if person.kind == "refused":  # deactivated or deleted: 401 on every tools/call, whatever the token
                ok = answered.status == 401 and "result" not in answer and \
                    (answered.challenge or "").startswith('Bearer error="invalid_token"')
                refused += ok
                if not ok:
                    tally.leaks.append(("answered though deactivated or deleted", tool, *who, answered))
                continue
            if answered.status != 200 or answer["result"]["isError"]:
                tally.missing.append(("refused", tool, *who, answered))
                continue
            got = documents(tool, answer["result"], person.query)
            tally.documents += len(got)
            if got - want:
                tally.leaks.append((tool, *who, sorted(got - want)))
            if want - got:
                tally.missing.append((tool, *who, sorted(want - got)))

    started = time.monotonic()
    await asyncio.gather(*(check(p) for p in world.people))
    seconds = time.monotonic() - started
    calls = sum(tally.asked.values())
    figures("1. Permission isolation at scale",
            f"MCP endpoint serving the service's own index ({OWN_CHUNKS} chunks) and one LangChain built "
            f"({TOOL_CHUNKS}), groups from the principal store (decoys for the subjects it knows in [principals] and "
            f"in the tokens' groups claim): {len(world.people)} identities with LocalIssuer tokens "
            f"({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}), {calls} calls (retrieve and search, 8 "
            f"identities at a time) in {seconds:.1f} s (setup {world.setup_s:.1f} s), {tally.documents} documents "
            f"answered, {refused} calls of deactivated or deleted users refused (401); leaks {len(tally.leaks)}, "
            f"visible chunks missing {len(tally.missing)}")
    tally.assert_as_the_oracle()
    assert refused == 2 * kinds["refused"] > 0
    assert tally.documents >= len(world.people)  # the crowd was answered documents, not only empty lists


async def test_fetch_of_a_forbidden_and_of_an_unknown_id_answer_the_same_bytes(world: World, figures: Any) -> None:
    rng = random.Random(20261216)
    not_found: set[bytes] = set()
    read: list[Any] = []
    calls = 0
    for n, person in enumerate(rng.sample([p for p in world.people if p.kind != "refused"], FETCHERS)):
        token = world.token(person)
        mine = {(b.kb_id, d) for b in world.bases for d in b.docs
                if b.readable(b.docs[d], person.subject, person.tenant, person.groups)}
        forbidden = [f"{b.kb_id}/{rng.choice([d for d in b.docs if (b.kb_id, d) not in mine])}"
                     for b in world.bases]
        unknown = [f"{world.bases[0].kb_id}/no-such-{n}", f"{KB_ID}/d{99_000 + n}", f"another-base/d{n:05d}",
                   "no-slash"]
        for ref in [*forbidden, *unknown]:
            answered = await tool_call(world.client, token, "fetch", {"id": ref})
            calls += 1
            assert answered.status == 200, (person, ref, answered)
            not_found.add(answered.body)
        if mine:
            kb_id, document = rng.choice(sorted(mine))
            answered = await tool_call(world.client, token, "fetch", {"id": f"{kb_id}/{document}"})
            calls += 1
            result = orjson.loads(answered.body)["result"]
            assert answered.status == 200 and not result["isError"], (person, kb_id, document, answered)
            base = next(b for b in world.bases if b.kb_id == kb_id)
            assert base.docs[document]["content"] in result["structuredContent"]["text"], (person, document, result)
            read.append((kb_id, document))
    # One body for all: the not-found result names no id, and every call had JSON-RPC id 1.
    assert len(not_found) == 1, sorted(not_found)[:3]
    answer = orjson.loads(not_found.pop())
    assert answer["result"]["isError"] is True and "KNOWLEDGE_NOT_FOUND" in answer["result"]["content"][0]["text"]
    assert len(read) >= FETCHERS // 2
    figures("1. Permission isolation at scale",
            f"MCP fetch: {FETCHERS} identities, {calls} calls; every forbidden id (one per base) and unknown id "
            f"(four shapes) answered one and the same body; {len(read)} readable documents fetched with their text")
