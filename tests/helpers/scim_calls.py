"""What the SCIM tests send: the service's test token and its headers, the SCIM schema URNs, a PatchOp body; and
the corpus and bound of the revocation tests."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson

from helpers import calls
from helpers.setup import API_KEY

if TYPE_CHECKING:
    from helpers.served import Served

TOKEN = "scim-token-0123456789abcdef"
SCIM_TYPE = "application/scim+json"
USER = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"
ENTERPRISE = "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"
PATCH_OP = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": SCIM_TYPE}


SCIM = auth()


def patch(*operations: dict[str, Any]) -> bytes:
    return orjson.dumps({"schemas": [PATCH_OP], "Operations": list(operations)})


# A revocation is in force on every instance within this (docs/identities.md); the documents the revocation tests
# serve: one the group eng-team reads, one everybody reads.
LIMIT_S = 2.0
DOCS = [{"document_id": "eng-plan", "title": "Plan", "tenant_id": "team-a", "content": "installation plan for eng",
         "acl": {"groups": ["eng-team"]}},
        {"document_id": "public-note", "title": "Note", "tenant_id": "team-a", "content": "installation note",
         "acl": {"public": True}}]


async def sees_plan(session: aiohttp.ClientSession, served: Served, mcp_token: str | None = None) -> tuple[bool, ...]:
    """Whether u-dana is served eng-plan through SparkTide, AgentArts (the key's own subject) and Dify
    (acting_subject) on this instance; and with `mcp_token` (u-dana's own), through MCP's retrieve too (refused
    with 401 when the store has the user deactivated: not served)."""
    execution = uuid.uuid4().hex[:12]
    bearer = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    async with session.post(served.base + calls.ROUTE, json=calls.body("u-dana", "team-a", executionId=execution),
                            headers=calls.headers(**{"Idempotency-Key": execution})) as r1:
        sparktide = {i["documentId"] for i in (await r1.json())["items"]}
    async with session.post(f"{served.base}/knowledge-bases/retrieve", headers=bearer, json={
            "knowledge_base_ids": ["project-documents"], "query": "installation", "method": "doc"}) as r2:
        agentarts = {r["file_id"] for r in (await r2.json())["search_result_list"]}
    async with session.post(f"{served.base}/retrieval", headers=bearer, json={
            "knowledge_id": "project-documents", "query": "installation",
            "retrieval_setting": {"top_k": 5, "score_threshold": 0},
            "metadata_condition": {"logical_operator": "and", "conditions": [
                {"name": "acting_subject", "comparison_operator": "is", "value": "u-dana"}]}}) as r3:
        dify = {r["metadata"]["document_id"] for r in (await r3.json())["records"]}
    assert "public-note" in sparktide & agentarts & dify  # every answer is a real one
    three = ("eng-plan" in sparktide, "eng-plan" in agentarts, "eng-plan" in dify)
    if mcp_token is None:
        return three
    async with session.post(f"{served.base}/mcp", headers={"Authorization": f"Bearer {mcp_token}",
                                                           "Content-Type": "application/json"},
                            json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                                "name": "retrieve", "arguments": {"query": "installation"}}}) as r4:
        if r4.status == 401:
            return (*three, False)
        chunks = (await r4.json())["result"]["structuredContent"]["chunks"]
    mcp = {c["document_id"] for c in chunks}
    assert "public-note" in mcp
    return (*three, "eng-plan" in mcp)
