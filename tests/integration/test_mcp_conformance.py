"""The MCP conformance suite (npm @modelcontextprotocol/conformance 0.1.13, scripts/mcp-conformance) against the
MCP endpoint itself, through harness/bearer_proxy.py (the suite cannot send a token): every server scenario that
applies to an endpoint offering tools only passes, and of the whole active suite only the scenarios listed as not
applying fail (test_conformance_harness.py's docstring and docs/mcp.md say why each does not apply)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from helpers import acl_corpus
from helpers.conformance import failures, run_conformance, statuses
from helpers.local_issuer import LocalIssuer
from helpers.setup import TEST_ENV, load_records, settings_for

from es_provider.web.app import create_app
from harness.bearer_proxy import BearerProxy

RESOURCE = "http://127.0.0.1:8080/mcp"
APPLICABLE = ["server-initialize", "ping", "tools-list", "dns-rebinding-protection"]
NOT_APPLICABLE = {
    "tools-call-simple-text", "tools-call-error", "tools-call-image", "tools-call-audio",
    "tools-call-embedded-resource", "tools-call-mixed-content", "tools-call-with-logging", "logging-set-level",
    "tools-call-with-progress", "tools-call-sampling", "tools-call-elicitation", "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums", "completion-complete", "resources-list", "resources-read-text",
    "resources-read-binary", "resources-templates-read", "resources-subscribe", "resources-unsubscribe",
    "prompts-list", "prompts-get-simple", "prompts-get-with-args", "prompts-get-embedded-resource",
    "prompts-get-with-image", "server-sse-multiple-streams",
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
async def endpoint(engine: Any, kb: Any, opensearch: Any) -> AsyncIterator[tuple[str, str]]:
    """The endpoint's URL through the proxy (with a token of the tests' own issuer for u-alice)."""
    await load_records(engine, kb, acl_corpus.documents())
    issuer = await LocalIssuer().start()
    port = free_port()
    # The suite's "valid" request names the URL it was given as its Origin: the proxy's, allowed here.
    settings = settings_for(opensearch.url, kb, principals=acl_corpus.GROUPS, mcp={
        "enabled": True, "resource": RESOURCE, "knowledge": [kb.id], "scopes": ["knowledge.read"],
        "allowed_origins": [f"http://127.0.0.1:{port}"], "issuers": [{"issuer": issuer.url, "tenant_claim": "tenant"}]})
    server = TestServer(create_app(settings, environ=TEST_ENV))
    await server.start_server()
    token = issuer.mint("u-alice", RESOURCE, tenant="team-a")
    async with BearerProxy(str(server.make_url("")).rstrip("/"), token, port=port) as proxy:
        yield f"{proxy.url}/mcp", token
    await server.close()
    await issuer.close()


async def test_the_applicable_scenarios_pass(endpoint: tuple[str, str], tmp_path: Path) -> None:
    url, _ = endpoint
    results = await asyncio.to_thread(run_conformance, url, APPLICABLE, tmp_path)
    assert failures(results) == [], statuses(results)
    assert sorted(results) == sorted(APPLICABLE)
    assert results["tools-list"][0]["details"]["tools"] == ["search", "fetch", "retrieve", "list_knowledge_bases"]
    rebinding = {c["id"]: c["details"]["statusCode"] for c in results["dns-rebinding-protection"]}
    assert rebinding == {"localhost-host-rebinding-rejected": 403, "localhost-host-valid-accepted": 200}


async def test_of_the_whole_suite_only_what_does_not_apply_fails(endpoint: tuple[str, str], tmp_path: Path) -> None:
    url, _ = endpoint
    results = await asyncio.to_thread(run_conformance, url, None, tmp_path)
    failing = {line.split(":", 1)[0] for line in failures(results)}
    assert failing <= NOT_APPLICABLE, failures(results)
    assert set(APPLICABLE) <= set(results) - failing
