"""The MCP endpoint held to a second client beside the Python SDK's (test_mcp_endpoint.py): the official TypeScript
SDK's Client over Streamable HTTP (scripts/mcp-ts-client, npm @modelcontextprotocol/sdk pinned there, running
tests/clients/mcp_client.mjs on Node), with tokens of the tests' own issuer, sees exactly what the permission oracle
allows, negotiates protocol 2025-11-25 and fetches what it found."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from helpers import acl_corpus
from helpers.local_issuer import LocalIssuer
from helpers.setup import TEST_ENV, load_records, settings_for

from es_provider.web.app import create_app

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "mcp-ts-client"
RESOURCE = "http://127.0.0.1:8080/mcp"
IDENTITIES = [(s, t) for s, t in acl_corpus.IDENTITIES if t][:3]  # tokens here always name a tenant
TOOLS = {"search", "fetch", "retrieve", "list_knowledge_bases"}
# The first run installs the SDK (about 5 s); a client's run then takes about a second.
TIMEOUT_S = 180.0


@pytest.fixture
async def served(engine: Any, kb: Any, opensearch: Any, issuer: LocalIssuer) -> AsyncIterator[TestClient[Any, Any]]:
    """The app with the MCP endpoint on, over the permission corpus, trusting the tests' issuer."""
    await load_records(engine, kb, acl_corpus.documents())
    mcp = {"enabled": True, "resource": RESOURCE, "knowledge": [kb.id], "scopes": ["knowledge.read"],
           "issuers": [{"issuer": issuer.url, "tenant_claim": "tenant"}]}
    app = create_app(settings_for(opensearch.url, kb, principals=acl_corpus.GROUPS, mcp=mcp), environ=TEST_ENV)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


def run_ts_client(url: str, token: str) -> dict[str, Any]:
    """The TypeScript client's one JSON answer; the token goes by the environment, never the command line."""
    try:
        run = subprocess.run([str(SCRIPT), url], env={**os.environ, "MCP_TOKEN": token}, capture_output=True,
                             text=True, timeout=TIMEOUT_S, cwd=ROOT, check=False)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{SCRIPT.name} {url} did not finish in {TIMEOUT_S:.0f} s") from exc
    assert run.returncode == 0, f"{SCRIPT.name} exited {run.returncode}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return dict(json.loads(run.stdout))


async def test_the_typescript_client_sees_what_the_oracle_allows(served: TestClient[Any, Any], issuer: LocalIssuer,
                                                                 kb: Any) -> None:
    url = str(served.make_url("/mcp"))
    tokens = [issuer.mint(subject, RESOURCE, tenant=tenant) for subject, tenant in IDENTITIES]
    # The clients run side by side, in threads: the server answers them from this test's event loop.
    answers = await asyncio.gather(*(asyncio.to_thread(run_ts_client, url, token) for token in tokens))
    for (subject, tenant), answer in zip(IDENTITIES, answers, strict=True):
        visible = acl_corpus.visible(subject, tenant)
        assert answer["protocolVersion"] == "2025-11-25"
        assert sorted(answer["tools"]) == sorted(TOOLS)
        assert {c["document_id"] for c in answer["retrieve"]["chunks"]} == visible, (subject, tenant)
        ids = [r["id"] for r in answer["search"]["results"]]
        assert ids and {i.split("/", 1)[1] for i in ids} <= visible, (subject, tenant, ids)
        assert [b["id"] for b in answer["bases"]["knowledge_bases"]] == [kb.id]
        assert answer["fetch"]["isError"] is False, (subject, tenant, answer["fetch"])
        assert ids[0].split("/", 1)[1] in answer["fetch"]["structuredContent"]["text"]
