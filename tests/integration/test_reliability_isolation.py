"""1. Permission isolation at scale: a generated corpus with random tenants, application-shared chunks, subjects,
groups and public flags; thousands of random identities (hostile ones among them) asking through all three
protocols; a plain-Python oracle. Zero leaks, and nothing visible missing: every query names a token that
matches at most a handful of chunks, so the expected answer is exactly the oracle's visible matching set."""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

from acl_random import GROUPS, SUBJECTS, TENANTS, corpus, visible
from conftest import HEAVY, bearer, load_records

CHUNKS = 20_000 if HEAVY else 5_000
IDENTITIES = 10_000 if HEAVY else 2_000

async def test_no_leak_and_nothing_missing_through_all_protocols(engine, kb, client_for, figures) -> None:
    rng = random.Random(20261130)
    docs, uses = corpus(rng, CHUNKS)
    started = time.monotonic()
    await load_records(engine, kb, docs)
    ingest_seconds = time.monotonic() - started
    by_id = {d["document_id"]: d for d in docs}
    principals = {s: rng.sample(GROUPS, rng.randint(0, 4)) for s in SUBJECTS}

    identities = []
    for i in range(IDENTITIES):
        subject = rng.choice(SUBJECTS) if rng.random() < 0.9 else f"stranger-{i}"
        tenant = rng.choice([*TENANTS, None])
        identities.append((subject, tenant, rng.choice(list(uses))))

    # AgentArts: one broad key narrowed per request. Dify: a key per identity (its scope is its identity).
    broad = {"key_ref": "BROAD", "app": "app-1", "tenants": TENANTS, "subjects": ["*"], "knowledge": [kb.id]}
    dify_keys = {}
    api_keys = [broad]
    env = {"BROAD": "broad-key"}
    for subject, tenant, _ in identities:
        key = (subject, tenant)
        if key not in dify_keys:
            ref = f"DIFY_{len(dify_keys)}"
            dify_keys[key] = f"dify-{len(dify_keys)}"
            env[ref] = dify_keys[key]
            api_keys.append({"key_ref": ref, "app": "app-1", "tenants": [tenant] if tenant else [], "subject": subject,
                             "knowledge": [kb.id]})
    client = await client_for(kb, principals=principals, api_keys=api_keys, env=env)

    leaks: list[tuple[str, Any]] = []
    missing: list[tuple[str, Any]] = []
    gate = asyncio.Semaphore(8)

    async def check(n: int, subject: str, tenant: str | None, token: str) -> None:
        groups = set(principals.get(subject, []))
        expected = {d for d in uses[token] if visible(by_id[d], subject, tenant, groups)}
        async with gate:
            execution = f"iso-{n}"
            sparktide = await client.post("/agent/knowledge/project-documents/1.0.0", headers={
                "Authorization": "Bearer test-callback-secret-0123456789", "Idempotency-Key": execution}, json={
                "protocolVersion": "1.0", "appId": "app-1", "subjectId": subject, "tenantId": tenant,
                "knowledgeId": "project-documents", "version": "1.0.0", "query": token, "topK": 10,
                "filters": {"appId": "app-1", "subjectId": subject, "tenantId": tenant,
                            "required": ["TENANT", "SUBJECT"]},
                "runId": "r", "traceId": "t", "executionId": execution,
                "deadline": int(time.time() * 1000) + 30_000, "trustedContext": {}})
            agentarts = await client.post("/knowledge-bases/retrieve", headers=bearer("broad-key"), data=json.dumps({
                "knowledge_base_ids": [kb.id], "query": token, "method": "doc", "limit": 100,
                "extra_params": [{"key": "tenant_id", "value": tenant or ""}, {"key": "subject_id", "value": subject}]}))
            dify = await client.post("/retrieval", headers=bearer(dify_keys[(subject, tenant)]), data=json.dumps({
                "knowledge_id": kb.id, "query": token, "retrieval_setting": {"top_k": 100, "score_threshold": 0}}))
            answers = {
                "sparktide": {i["documentId"] for i in (await sparktide.json())["items"]},
                "agentarts": {r["file_id"] for r in (await agentarts.json())["search_result_list"]},
                "dify": {r["metadata"]["document_id"] for r in (await dify.json())["records"]},
            }
        for protocol, got in answers.items():
            if got - expected:
                leaks.append((protocol, (subject, tenant, token, sorted(got - expected))))
            if expected - got:
                missing.append((protocol, (subject, tenant, token, sorted(expected - got))))

    started = time.monotonic()
    await asyncio.gather(*(check(n, *identity) for n, identity in enumerate(identities)))
    query_seconds = time.monotonic() - started
    figures("1. Permission isolation at scale",
            f"{CHUNKS} chunks ({len(TENANTS)} tenants incl. prefix-sharing and hostile ids, 15 % shared, 10 % public, "
            f"5 % without ACL), ingested in {ingest_seconds:.1f} s; {IDENTITIES} random identities × 3 protocols = "
            f"{IDENTITIES * 3} queries in {query_seconds:.1f} s; leaks found: {len(leaks)}; visible chunks missing: "
            f"{len(missing)}")
    assert leaks == [], leaks[:5]
    assert missing == [], missing[:5]
