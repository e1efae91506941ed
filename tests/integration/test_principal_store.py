"""The principal store on the request path (issue 28): groups from the store's documents, the store authoritative
for the subjects it knows (a deactivated or deleted user grants nothing, not even what [principals] says), a change
seen after one poll, and fail closed (503 in the protocol's body) when the store cannot be read for longer than the
staleness bound. The SCIM service that writes the store is tested in test_scim.py; revocation across instances in
test_live_identities.py."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from helpers.calls import ROUTE, body, headers
from helpers.setup import api_key, bearer, load_records

from es_provider.identity import directory
from es_provider.identity.principals import announce_change

# What differs by engine, the principal store's conditional writes: run on Elasticsearch 9 too (-m engines).
pytestmark = pytest.mark.engines

DOCS = [{"document_id": "eng-plan", "title": "Plan", "tenant_id": "team-a", "content": "installation plan for eng",
         "acl": {"groups": ["eng"]}},
        {"document_id": "carol-notes", "title": "Notes", "tenant_id": "team-a",
         "content": "installation notes of carol", "acl": {"subjects": ["u-carol"]}},
        {"document_id": "ops-runbook", "title": "Runbook", "tenant_id": "team-a",
         "content": "installation runbook for ops", "acl": {"groups": ["ops"]}}]


async def put_user(engine: Any, index: str, scim_id: str, subject: str, *, active: bool = True) -> None:
    resource = {"id": scim_id, "userName": subject, "active": active}
    await engine.put_document(index, directory.doc_id("User", scim_id), directory.user_doc(resource, "userName"),
                              index_body=directory.INDEX_BODY)


async def put_group(engine: Any, index: str, scim_id: str, name: str, members: list[str]) -> None:
    resource = {"id": scim_id, "displayName": name, "members": [{"value": m} for m in members]}
    await engine.put_document(index, directory.doc_id("Group", scim_id), directory.group_doc(resource),
                              index_body=directory.INDEX_BODY)


def directory_settings(index: str, **extra: Any) -> dict[str, Any]:
    return {"enabled": True, "index": index, "poll_interval_s": 0.1, "max_staleness_s": 1.0, **extra}


async def sparktide_documents(client: Any, subject: str) -> tuple[int, set[str]]:
    execution = uuid.uuid4().hex[:12]
    response = await client.post(ROUTE, json=body(subject, "team-a", query="installation", topK=10,
                                                  executionId=execution),
                                 headers=headers(**{"Idempotency-Key": execution}))
    answer = await response.json()
    return response.status, {item["documentId"] for item in answer.get("items", [])}


async def key_documents(client: Any, acting: str) -> tuple[set[str], set[str]]:
    """(AgentArts with extra_params subject_id, Dify with acting_subject) documents for `acting`."""
    agentarts = await client.post("/knowledge-bases/retrieve", headers=bearer(), data=json.dumps(
        {"knowledge_base_ids": ["project-documents"], "query": "installation", "method": "doc", "top_k": 10,
         "extra_params": [{"key": "subject_id", "value": acting}]}))
    dify = await client.post("/retrieval", headers=bearer(), data=json.dumps(
        {"knowledge_id": "project-documents", "query": "installation",
         "retrieval_setting": {"top_k": 10, "score_threshold": 0},
         "metadata_condition": {"logical_operator": "and", "conditions": [
             {"name": "acting_subject", "comparison_operator": "is", "value": acting}]}}))
    assert agentarts.status == 200 and dify.status == 200, (await agentarts.text(), await dify.text())
    return ({r["file_id"] for r in (await agentarts.json())["search_result_list"]},
            {r["metadata"]["document_id"] for r in (await dify.json())["records"]})


async def eventually(check: Any, wanted: Any, seconds: float = 3.0) -> Any:
    """Polls `check()` until it returns `wanted` (or the time is up); the last value."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while True:
        value = await check()
        if value == wanted or loop.time() > end:
            return value
        await asyncio.sleep(0.05)


async def alice_in_ops(engine, kb) -> str:
    """DOCS loaded and a new store in which u-alice (a1) is in ops; the store's index."""
    index = f"test-principals-{uuid.uuid4().hex}"
    await load_records(engine, kb, DOCS)
    await put_user(engine, index, "a1", "u-alice")
    await put_group(engine, index, "g1", "ops", ["a1"])
    await announce_change(engine, index)
    return index


async def test_the_store_grants_and_is_authoritative_for_subjects_it_knows(engine, kb, client_for) -> None:
    index = await alice_in_ops(engine, kb)
    client = await client_for(kb, directory=directory_settings(index),
                              api_keys=[api_key([kb.id], subjects=["*"], groups=[])])
    try:
        # [principals] says u-alice is in eng; the store knows u-alice and says ops: the store wins.
        assert await sparktide_documents(client, "u-alice") == (200, {"ops-runbook"})
        assert await key_documents(client, "u-alice") == ({"ops-runbook"}, {"ops-runbook"})
        # u-carol is unknown to the store: the file serves (groups eng, ops) and her subject grants.
        assert await sparktide_documents(client, "u-carol") == (200, {"eng-plan", "carol-notes", "ops-runbook"})

        # Deactivated: no grant through the subject or the store's groups, and not the file's either.
        await put_user(engine, index, "c1", "u-carol", active=False)
        await put_group(engine, index, "g1", "ops", ["a1", "c1"])
        await announce_change(engine, index)
        assert await eventually(lambda: sparktide_documents(client, "u-carol"), (200, set())) == (200, set())
        assert await key_documents(client, "u-carol") == (set(), set())

        # Deleted (a tombstone): still nothing, never back to the file.
        await engine.delete_document(index, directory.doc_id("User", "c1"))
        await engine.put_document(index, directory.doc_id("Tombstone", "u-carol"),
                                  directory.tombstone_doc("u-carol"))
        await announce_change(engine, index)
        await asyncio.sleep(0.3)
        assert await sparktide_documents(client, "u-carol") == (200, set())

        # A membership removed stops granting after one poll; added back, it returns.
        await put_group(engine, index, "g1", "ops", [])
        await announce_change(engine, index)
        assert await eventually(lambda: sparktide_documents(client, "u-alice"), (200, set())) == (200, set())
        await put_group(engine, index, "g1", "ops", ["a1"])
        await announce_change(engine, index)
        assert await eventually(lambda: sparktide_documents(client, "u-alice"),
                                (200, {"ops-runbook"})) == (200, {"ops-runbook"})
    finally:
        await engine.delete_index(index)


async def test_an_unreadable_store_fails_closed(engine, kb, proxy, client_for) -> None:
    index = await alice_in_ops(engine, kb)
    client = await client_for(kb, url=proxy.url, directory=directory_settings(index))
    try:
        assert await sparktide_documents(client, "u-alice") == (200, {"ops-runbook"})
        # The counter cannot be read (searches still can): after the staleness bound, 503 in SparkTide's body,
        # never an answer with groups older than the bound.
        proxy.status, proxy.fail_matching = 503, "_mget"
        await asyncio.sleep(1.5)
        execution = uuid.uuid4().hex[:12]
        response = await client.post(ROUTE, json=body("u-alice", "team-a", executionId=execution),
                                     headers=headers(**{"Idempotency-Key": execution}))
        assert response.status == 503
        assert await response.json() == {"error": {"code": "KNOWLEDGE_UNAVAILABLE"}}
        proxy.status = None
        assert await eventually(lambda: sparktide_documents(client, "u-alice"),
                                (200, {"ops-runbook"})) == (200, {"ops-runbook"})
    finally:
        await engine.delete_index(index)


async def test_a_store_that_disappears_fails_closed_instead_of_falling_back(engine, kb, client_for) -> None:
    """Review finding: once a process has seen the store, its index deleted (or a 404 for it) must not turn every
    subject into an unknown one served from [principals]."""
    index = f"test-principals-{uuid.uuid4().hex}"
    await load_records(engine, kb, DOCS)
    await put_user(engine, index, "c1", "u-carol", active=False)  # [principals] gives u-carol eng and ops
    await announce_change(engine, index)
    client = await client_for(kb, directory=directory_settings(index))
    assert await sparktide_documents(client, "u-carol") == (200, set())
    await engine.delete_index(index)
    await asyncio.sleep(1.5)  # past max_staleness_s (1 s)
    status, documents = await sparktide_documents(client, "u-carol")
    assert (status, documents) == (503, set())


async def test_a_retry_after_a_revocation_is_not_answered_from_memory(engine, kb, client_for) -> None:
    """Review finding: a SparkTide retry (same executionId) after the directory revoked a grant got the answer
    computed before: now the grants are part of the request's fingerprint, so it is refused (422), no content."""
    index = await alice_in_ops(engine, kb)
    client = await client_for(kb, directory=directory_settings(index))
    try:
        call = body("u-alice", "team-a", query="installation", topK=10, executionId="retried-1")
        first = await client.post(ROUTE, json=call, headers=headers(**{"Idempotency-Key": "retried-1"}))
        assert {i["documentId"] for i in (await first.json())["items"]} == {"ops-runbook"}
        await put_group(engine, index, "g1", "ops", [])
        await announce_change(engine, index)
        await asyncio.sleep(0.5)
        retry = await client.post(ROUTE, json=call, headers=headers(**{"Idempotency-Key": "retried-1"}))
        assert retry.status == 422 and "items" not in await retry.json()
    finally:
        await engine.delete_index(index)



DANA_DOCS = [{"document_id": "dana-notes", "title": "Notes", "tenant_id": "team-a",
              "content": "installation notes of dana", "acl": {"subjects": ["dana-r@x.com"]}},
             {"document_id": "eng-plan", "title": "Plan", "tenant_id": "team-a", "content": "installation plan",
              "acl": {"groups": ["eng"]}}]


async def test_a_case_variant_of_a_subject_is_the_store_s_subject(engine, kb, client_for) -> None:
    """Hardening III finding 2: the store keeps userName unique case-insensitively, so `dana-r@x.com` is the user
    `Dana-R@x.com`: once that user is deactivated or deleted, the variant reads nothing (not its own ACL entries,
    not the [principals] groups listed under that spelling). Failed before the fix: the variant was "unknown to the
    store" and kept reading both."""
    index = f"test-principals-{uuid.uuid4().hex}"
    await load_records(engine, kb, DANA_DOCS)
    await put_user(engine, index, "d1", "Dana-R@x.com")
    await announce_change(engine, index)
    client = await client_for(kb, directory=directory_settings(index), principals={"dana-r@x.com": ["eng"]},
                              api_keys=[api_key([kb.id], subjects=["*"], groups=[])])
    try:
        # Active: the store speaks for the variant (its groups: none; not the file's eng), and the subject grants
        # the ACL entries that name the spelling the platform sent.
        assert await sparktide_documents(client, "dana-r@x.com") == (200, {"dana-notes"})
        assert await key_documents(client, "dana-r@x.com") == ({"dana-notes"}, {"dana-notes"})
        await put_user(engine, index, "d1", "Dana-R@x.com", active=False)
        await announce_change(engine, index)
        assert await eventually(lambda: sparktide_documents(client, "dana-r@x.com"), (200, set())) == (200, set())
        assert await key_documents(client, "dana-r@x.com") == (set(), set())
        assert await sparktide_documents(client, "DANA-R@X.COM") == (200, set())
        # Deleted: the tombstone holds for every spelling too.
        await engine.delete_document(index, directory.doc_id("User", "d1"))
        await engine.put_document(index, directory.doc_id("Tombstone", "Dana-R@x.com"),
                                  directory.tombstone_doc("Dana-R@x.com"))
        await announce_change(engine, index)
        assert await eventually(lambda: sparktide_documents(client, "dana-r@x.com"), (200, set())) == (200, set())
        assert await key_documents(client, "dana-r@x.com") == (set(), set())
    finally:
        await engine.delete_index(index)
