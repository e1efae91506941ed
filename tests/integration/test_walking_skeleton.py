"""The path end to end: JSONL ingest → SparkTide route → one filtered bool query → cited items."""

from __future__ import annotations

import json
import logging

import pytest
from helpers import oracle
from helpers.calls import body, headers
from helpers.setup import PRINCIPALS, SAMPLE_CORPUS

from es_provider.engine.client import Engine
from es_provider.ingest.records import read_jsonl
from es_provider.ingest.writer import ingest

# What differs by engine, the dialect (the walking skeleton): run on Elasticsearch 8 and 9 too.
pytestmark = [pytest.mark.engines, pytest.mark.es8]


def visible_documents(subject: str, tenant: str | None) -> set[str]:
    """The oracle over the sample corpus."""
    docs = [json.loads(line) for line in SAMPLE_CORPUS.read_text(encoding="utf-8").splitlines()]
    groups = PRINCIPALS.get(subject, [])
    return {d["document_id"] for d in docs if oracle.visible(d, subject, {tenant} if tenant else set(), groups)}


async def test_two_identities_see_different_permitted_sets(engine: Engine, kb, client_for) -> None:
    summary = await ingest(engine, kb, list(read_jsonl(SAMPLE_CORPUS)))
    assert summary.failures == [] and summary.documents == 24
    client = await client_for(kb)

    answers = {}
    for subject, tenant in (("u-alice", "team-a"), ("u-bob", "team-b")):
        response = await client.post(
            "/agent/knowledge/project-documents/1.0.0",
            json=body(subject, tenant, query="设备安装位置 installation", topK=10, executionId=f"exec-{subject}"),
            headers=headers(**{"Idempotency-Key": f"exec-{subject}"}),
        )
        assert response.status == 200, await response.text()
        answer = await response.json()
        assert answer["protocolVersion"] == "1.0"
        assert answer["appliedFilters"] == ["TENANT", "SUBJECT"]
        docs = {item["documentId"] for item in answer["items"]}
        assert docs, f"{subject} got no items"
        assert docs <= visible_documents(subject, tenant), f"{subject} saw {docs - visible_documents(subject, tenant)}"
        for item in answer["items"]:
            assert item["source"]["type"] == "DOCUMENT"
            assert 0 <= item["score"] <= 1
        answers[subject] = answer

    assert {i["documentId"] for i in answers["u-alice"]["items"]} != {i["documentId"] for i in answers["u-bob"]["items"]}
    pages = {i["source"].get("page") for i in answers["u-alice"]["items"] if i["documentId"] == "install-spec"}
    assert pages and pages <= {1, 2, 3}, "PDF-like pages are carried to source.page"
    assert "no-acl-draft" not in {i["documentId"] for a in answers.values() for i in a["items"]}


async def test_the_service_names_the_engine_it_found_at_start(opensearch, kb, client_for, caplog) -> None:
    # The same `[opensearch] url` takes either engine: the service learns which from the node's GET / and says so.
    caplog.set_level(logging.INFO, logger="es_provider.app")
    client = await client_for(kb)
    assert (await client.get("/healthz")).status == 200
    assert f"engine: {opensearch.name} {opensearch.version}" in caplog.messages
