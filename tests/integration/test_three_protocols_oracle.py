"""One index, three platforms, identical permissions: for every identity of the ACL corpus, SparkTide, AgentArts
(a broad key narrowed by extra_params) and Dify (a key per identity) return exactly the oracle's visible set."""

from __future__ import annotations

import json
import uuid

import acl_corpus
from callbacks import ROUTE, body, headers
from conftest import bearer, load_records

ALL_TENANTS = sorted({t for _, t in acl_corpus.IDENTITIES if t} | {t for t in acl_corpus.TENANTS if t})


async def test_identical_visible_sets_across_protocols(engine, kb, client_for) -> None:
    await load_records(engine, kb, acl_corpus.documents())

    broad = {"key_ref": "BROAD_KEY", "app": "app-1", "tenants": ALL_TENANTS, "subjects": ["*"],
             "knowledge": ["project-documents"]}
    per_identity = [{"key_ref": f"DIFY_KEY_{i}", "app": "app-1", "tenants": [t] if t else [], "subject": s,
                     "knowledge": ["project-documents"]} for i, (s, t) in enumerate(acl_corpus.IDENTITIES)]
    env = {"BROAD_KEY": "broad-key", **{f"DIFY_KEY_{i}": f"dify-key-{i}" for i in range(len(per_identity))}}
    client = await client_for(kb, principals=acl_corpus.GROUPS, api_keys=[broad, *per_identity], env=env)

    for i, (subject, tenant) in enumerate(acl_corpus.IDENTITIES):
        expected = acl_corpus.visible(subject, tenant)

        execution = f"exec-{uuid.uuid4().hex[:8]}"
        response = await client.post(ROUTE, json=body(subject, tenant, query="alpha", topK=10, executionId=execution),
                                     headers=headers(**{"Idempotency-Key": execution}))
        assert response.status == 200
        sparktide = {item["documentId"] for item in (await response.json())["items"]}

        response = await client.post("/knowledge-bases/retrieve", headers=bearer("broad-key"), data=json.dumps({
            "knowledge_base_ids": ["project-documents"], "query": "alpha", "method": "doc", "limit": 100,
            "extra_params": [{"key": "tenant_id", "value": tenant or ""}, {"key": "subject_id", "value": subject}]}))
        assert response.status == 200
        agentarts = {r["file_id"] for r in (await response.json())["search_result_list"]}

        response = await client.post("/retrieval", headers=bearer(f"dify-key-{i}"), data=json.dumps({
            "knowledge_id": "project-documents", "query": "alpha",
            "retrieval_setting": {"top_k": 100, "score_threshold": 0.0}, "metadata_condition": None}))
        assert response.status == 200
        dify = {r["metadata"]["document_id"] for r in (await response.json())["records"]}

        assert sparktide == agentarts == dify == expected, (subject, tenant)
