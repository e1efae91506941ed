"""An index a tool built, served and asked against a plain-Python oracle (test_tool_indices.py, where the knowledge
base is configured by hand, and test_inspect_tools.py, where it is what `kb inspect` proposed): the index built by
the tool's library (tests/helpers/tool_indices.py) with a random permission corpus, and random identities asking
through SparkTide, AgentArts and Dify's acting_subject in turn, each answer compared with what the oracle lets that
identity read."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from helpers import calls
from helpers.acl_random import GROUPS, SUBJECTS, TENANTS, corpus
from helpers.setup import bearer
from helpers.tool_indices import Layout

KB_ID = "tool-docs"
ROUTE = f"/agent/knowledge/{KB_ID}/1.0.0"


def readable(doc: dict[str, Any], subject: str, tenant: str, groups: set[str], layout: Layout) -> bool:
    """The oracle for an index the service did not write: a document without a tenant is no one's (where the
    knowledge base filters by tenant), one without any ACL value nobody's (the connectors keep no public flag)."""
    if layout.tenants and doc.get("tenant_id") != tenant:
        return False
    acl = doc["acl"]
    public = acl["public"] is True and "public" in layout.fields
    return public or subject in acl["subjects"] or bool(groups & set(acl["groups"]))


@contextlib.asynccontextmanager
async def tool_index(layout: Layout, url: str, engine: Any, label: str,
                     chunks: int) -> AsyncIterator[tuple[str, list[dict[str, Any]], dict[str, list[str]]]]:
    """(index, documents, uses): `chunks` random documents (seeded `label-<layout>`) written by the tool's own
    library into `test-<label>-<layout>-<hex>`, deleted at the end."""
    docs, uses = corpus(random.Random(f"{label}-{layout.name}"), chunks)
    index = f"test-{label}-{layout.name}-{uuid.uuid4().hex[:8]}"
    try:
        await asyncio.to_thread(layout.build, url, index, docs)
        assert await engine.count(index) == chunks
        yield index, docs, uses
    finally:
        if await engine.index_exists(index):
            await engine.delete_index(index)


@dataclass(frozen=True)
class Crowd:
    """Random identities (subject, tenant, token; one in ten a stranger), their groups, and the keys they ask with:
    BROAD for SparkTide and AgentArts, one acting key per tenant for Dify."""

    principals: dict[str, list[str]]
    identities: list[tuple[str, str, str]]
    acting: dict[str, str]
    api_keys: list[dict[str, Any]]
    env: dict[str, str]


def crowd(seed: str, uses: dict[str, list[str]], count: int) -> Crowd:
    rng = random.Random(seed)
    principals = {s: rng.sample(GROUPS, rng.randint(0, 4)) for s in SUBJECTS}
    identities = [(rng.choice(SUBJECTS) if rng.random() < 0.9 else f"stranger-{i}", rng.choice(TENANTS),
                   rng.choice(list(uses))) for i in range(count)]
    acting = {t: f"acting-{n}" for n, t in enumerate(TENANTS)}
    api_keys = [{"key_ref": "BROAD", "app": "app-1", "tenants": TENANTS, "subjects": ["*"], "knowledge": [KB_ID]}]
    api_keys += [{"key_ref": f"ACTING_{n}", "app": "app-1", "tenants": [t], "subjects": ["*"], "knowledge": [KB_ID]}
                 for n, t in enumerate(TENANTS)]
    env = {"BROAD": "broad-key", **{f"ACTING_{n}": key for n, key in enumerate(acting.values())}}
    return Crowd(principals, identities, acting, api_keys, env)


@dataclass
class Tally:
    """What the crowd was answered: calls per protocol, documents in all, leaks and missing documents (protocol,
    subject, tenant, token, ids), and the source uris SparkTide and Dify answered."""

    asked: dict[str, int]
    documents: int = 0
    leaks: list[Any] = field(default_factory=list)
    missing: list[Any] = field(default_factory=list)
    uris: set[Any] = field(default_factory=set)

    def assert_as_the_oracle(self) -> None:
        """No leak, nothing missing."""
        assert self.leaks == [], self.leaks[:5]
        assert self.missing == [], self.missing[:5]


async def ask_every_protocol(client: Any, layout: Layout, docs: list[dict[str, Any]], uses: dict[str, list[str]],
                             people: Crowd, required: list[str], tag: str) -> Tally:
    """Each identity asks once, through the protocols in turn (8 at a time); each answer is held to the oracle."""
    by_id = {d["document_id"]: d for d in docs}

    async def sparktide(n: int, subject: str, tenant: str, token: str) -> set[str]:
        execution = f"{tag}-{n}"
        response = await client.post(ROUTE, headers=calls.headers(**{"Idempotency-Key": execution}), json=calls.body(
            subject, tenant, knowledge=KB_ID, query=token, topK=10, executionId=execution, required=required,
            deadline=int(time.time() * 1000) + 30_000))
        answer = await response.json()
        assert response.status == 200 and answer["appliedFilters"] == required, answer
        tally.uris.update(i["source"].get("uri") for i in answer["items"])
        return {i["documentId"] for i in answer["items"]}

    async def agentarts(n: int, subject: str, tenant: str, token: str) -> set[str]:
        response = await client.post("/knowledge-bases/retrieve", headers=bearer("broad-key"), data=json.dumps({
            "knowledge_base_ids": [KB_ID], "query": token, "method": "doc", "limit": 100,
            "extra_params": [{"key": "tenant_id", "value": tenant}, {"key": "subject_id", "value": subject}]}))
        assert response.status == 200, await response.text()
        return {r["file_id"] for r in (await response.json())["search_result_list"]}

    async def dify(n: int, subject: str, tenant: str, token: str) -> set[str]:
        response = await client.post("/retrieval", headers=bearer(people.acting[tenant]), data=json.dumps({
            "knowledge_id": KB_ID, "query": token, "retrieval_setting": {"top_k": 100, "score_threshold": 0},
            "metadata_condition": {"logical_operator": "and", "conditions": [
                {"name": "acting_subject", "comparison_operator": "is", "value": subject}]}}))
        assert response.status == 200, await response.text()
        records = (await response.json())["records"]
        tally.uris.update(r["metadata"].get("uri") for r in records)
        return {r["metadata"]["document_id"] for r in records}

    protocols = {"SparkTide": sparktide, "AgentArts": agentarts, "Dify acting_subject": dify}
    tally = Tally(asked=dict.fromkeys(protocols, 0))
    gate = asyncio.Semaphore(8)

    async def check(n: int, subject: str, tenant: str, token: str) -> None:
        groups = set(people.principals.get(subject, []))
        expected = {d for d in uses[token] if readable(by_id[d], subject, tenant, groups, layout)}
        name = list(protocols)[n % len(protocols)]
        async with gate:
            got = await protocols[name](n, subject, tenant, token)
        tally.asked[name] += 1
        tally.documents += len(got)
        if got - expected:
            tally.leaks.append((name, subject, tenant, token, sorted(got - expected)))
        if expected - got:
            tally.missing.append((name, subject, tenant, token, sorted(expected - got)))

    await asyncio.gather(*(check(n, *identity) for n, identity in enumerate(people.identities)))
    return tally
