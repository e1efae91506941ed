"""What a new user met on day one (issue 53), as regression tests on the real node: no silent empties from the
configuration — a key that reads nothing unless it names an end user says so at start and refuses a call that names
none; an index-level engine error (closed, read-blocked) names the index and the fix in /readyz and the log."""

from __future__ import annotations

import json
import logging
from typing import Any

from helpers import calls
from helpers.setup import api_key, bearer, load_records

DOC = {"document_id": "d-1", "title": "Guide", "content": "installation guide", "acl": {"groups": ["eng"]},
       "source": {"type": "DOCUMENT", "id": "d-1", "version": "v1"}, "tenant_id": "team-a"}


async def test_a_key_without_an_identity_of_its_own_refuses_a_call_naming_no_end_user(
        engine: Any, kb: Any, client_for: Any, caplog: Any) -> None:
    await load_records(engine, kb, [DOC])
    key = api_key([kb.id], tenants=["team-a"], subject=None, subjects=["*"])
    with caplog.at_level(logging.WARNING, logger="es_provider"):
        client = await client_for(kb, api_keys=[key], principals={"u-alice": ["eng"]})
    assert "API key TEST_API_KEY has no subject or groups of its own" in caplog.text
    dify = await client.post("/retrieval", headers=bearer(), data=json.dumps({
        "knowledge_id": kb.id, "query": "installation", "retrieval_setting": {"top_k": 3, "score_threshold": 0}}))
    answer = await dify.json()
    assert dify.status == 400 and "records" not in answer and "acting_subject" in answer["error_msg"], answer
    arts = await client.post("/knowledge-bases/retrieve", headers=bearer(), data=json.dumps({
        "knowledge_base_ids": [kb.id], "query": "installation", "method": "doc"}))
    answer = await arts.json()
    assert arts.status == 400 and "subject_id" in answer["error_msg"], answer
    # Naming the end user reads what that user may read.
    named = await client.post("/retrieval", headers=bearer(), data=json.dumps({
        "knowledge_id": kb.id, "query": "installation", "retrieval_setting": {"top_k": 3, "score_threshold": 0},
        "metadata_condition": {"logical_operator": "and", "conditions": [
            {"name": "acting_subject", "comparison_operator": "is", "value": "u-alice"}]}}))
    assert named.status == 200 and [r["metadata"]["document_id"] for r in (await named.json())["records"]] == ["d-1"]


async def test_a_closed_index_is_named_with_its_fix_in_readiness_and_the_log(
        engine: Any, kb: Any, client_for: Any, caplog: Any) -> None:
    await load_records(engine, kb, [DOC])
    (index,) = await engine.alias_targets(kb.alias)
    client = await client_for(kb, principals={"u-alice": ["eng"]})
    assert (await client.get("/readyz")).status == 200
    await engine._client.indices.close(index=index)
    try:
        with caplog.at_level(logging.WARNING, logger="es_provider"):
            ready = await client.get("/readyz")
            execution = "exec-closed-1"
            answer = await client.post(calls.ROUTE, headers=calls.headers(**{"Idempotency-Key": execution}),
                                       json=calls.body(executionId=execution))
        reasons = (await ready.json())["reasons"]
        assert ready.status == 503 and f"index {index} is closed, open it (POST /{index}/_open)" in reasons["engine"]
        assert answer.status == 503 and "items" not in await answer.json()
        assert f"index {index} is closed, open it" in caplog.text
    finally:
        await engine._client.indices.open(index=index)
