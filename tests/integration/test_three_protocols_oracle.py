"""One index, three platforms, identical permissions: for every identity of the ACL corpus, SparkTide, AgentArts
(a broad key narrowed by extra_params) and Dify (a key per identity) return exactly the oracle's visible set.

Also over knowledge bases without mandatory filters (1.0 and legacy): SparkTide applies what each callback's
`filters.required` asks for (the spec's meaning), while API keys still read only within their tenants, and a
request that names its end user (AgentArts subject_id) is trimmed to that user as well."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from helpers import acl_corpus
from helpers.calls import body, headers
from helpers.setup import bearer, load_records, new_kb

# What differs by engine, the dialect (the three protocols over the permission oracle): run on Elasticsearch 8
# and 9 too.
pytestmark = [pytest.mark.engines, pytest.mark.es8]

ALL_TENANTS = sorted({t for _, t in acl_corpus.IDENTITIES if t} | {t for t in acl_corpus.TENANTS if t})
BOTH = ("TENANT", "SUBJECT")


def sparktide_ids(answer: dict[str, Any], legacy: bool) -> set[str]:
    # Legacy documents carry no documentId: their `source` is the uri, else the document id (no uri here).
    return {d["source"] for d in answer["documents"]} if legacy else {i["documentId"] for i in answer["items"]}


@pytest.mark.parametrize(
    ("definition", "key_filters"),
    [
        ({"mandatory_filters": ["TENANT", "SUBJECT"]}, BOTH),
        ({"mandatory_filters": []}, ("TENANT",)),
        ({"mandatory_filters": [], "protocol": "legacy"}, ("TENANT",)),
        ({"mandatory_filters": ["SUBJECT"]}, BOTH),
    ],
    ids=["tenant+subject", "none", "legacy", "subject-only"],
)
async def test_identical_visible_sets_across_protocols(engine, kb, client_for, definition, key_filters) -> None:
    await load_records(engine, kb, acl_corpus.documents())
    base = new_kb(alias=kb.alias, **definition)
    legacy = base.protocol == "legacy"

    broad = {"key_ref": "BROAD_KEY", "app": "app-1", "tenants": ALL_TENANTS, "subjects": ["*"],
             "knowledge": ["project-documents"]}
    per_identity = [{"key_ref": f"DIFY_KEY_{i}", "app": "app-1", "tenants": [t] if t else [], "subject": s,
                     "knowledge": ["project-documents"]} for i, (s, t) in enumerate(acl_corpus.IDENTITIES)]
    env = {"BROAD_KEY": "broad-key", **{f"DIFY_KEY_{i}": f"dify-key-{i}" for i in range(len(per_identity))}}
    client = await client_for(base, principals=acl_corpus.GROUPS, api_keys=[broad, *per_identity], env=env)

    for i, (subject, tenant) in enumerate(acl_corpus.IDENTITIES):
        # SparkTide: what the callback requires (both filters here: an exact oracle, at most 10 visible).
        execution = f"exec-{uuid.uuid4().hex[:8]}"
        response = await client.post("/agent/knowledge/project-documents/1.0.0", json=body(
            subject, tenant, query="alpha", topK=10, executionId=execution),
            headers=headers(**{"Idempotency-Key": execution}))
        assert response.status == 200
        assert sparktide_ids(await response.json(), legacy) == acl_corpus.visible(subject, tenant, BOTH), (
            subject, tenant)

        # AgentArts names the end user (subject_id): SUBJECT applies for that user wherever the key reads.
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

        assert agentarts == acl_corpus.visible(subject, tenant, BOTH), (subject, tenant)
        # Dify with a key per identity: the key's own subject and tenants, with the filters keys get here.
        assert dify == acl_corpus.visible(subject, tenant, key_filters), (subject, tenant)

    if not base.mandatory_filters:
        # A callback that requires nothing gets what its definition allows: min(topK, every matching chunk).
        execution = f"exec-{uuid.uuid4().hex[:8]}"
        unfiltered = body("u-nobody", None, query="alpha", topK=10, executionId=execution)
        unfiltered["filters"]["required"] = []
        response = await client.post("/agent/knowledge/project-documents/1.0.0", json=unfiltered,
                                     headers=headers(**{"Idempotency-Key": execution}))
        assert response.status == 200
        assert len(sparktide_ids(await response.json(), legacy)) == 10
