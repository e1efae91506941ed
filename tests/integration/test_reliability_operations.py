"""3. Credentials and 6. Operations, on the real `es-provider serve` process: every bad credential refused with
the right code; no secret in any log line, metric or error body; /healthz, /readyz, /metrics; JSON logs that
carry runId/traceId/executionId and no document content; graceful shutdown that finishes in-flight requests."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from typing import Any

import pytest
from helpers import calls
from helpers.served import Served, kb_entry, post, write_config
from helpers.setup import API_KEY, CALLBACK_SECRET, TEST_ENV

SECRET_CONTENT = "PURPLE-ELEPHANT-CONTENT"  # a marker: document content must never reach a log line


@pytest.fixture
def stack(opensearch, tmp_path, proxy) -> Any:
    """A knowledge base with one document, a signed one, and the service (through the engine proxy)."""
    alias = f"test-{uuid.uuid4().hex}"
    env = {**TEST_ENV, "OPENSEARCH_URL": proxy.url, "SIGNED_KEY": "signed-secret-0123456789"}
    config = write_config(tmp_path / "config.toml", proxy.url, [
        kb_entry(alias), kb_entry(alias, id="signed", secret_ref="SIGNED_KEY", signature=True)], api_keys=[
        {"key_ref": "TEST_API_KEY", "app": "app-1", "tenants": ["team-a"], "subject": "u-alice",
         "knowledge": ["project-documents"]}], principals={"u-alice": ["eng"]})
    cli = [sys.executable, "-m", "es_provider.cli"]
    cli_env = {**os.environ, **env, "OPENSEARCH_URL": opensearch.url}
    subprocess.run([*cli, "kb", "create", "--config", str(config), "--kb", "project-documents"], env=cli_env, check=True)
    records = tmp_path / "docs.jsonl"
    records.write_text(json.dumps({"document_id": "doc-1", "title": "Install", "tenant_id": "team-a",
                                   "content": f"installation guide {SECRET_CONTENT}", "acl": {"groups": ["eng"]}}) + "\n")
    subprocess.run([*cli, "ingest", "--config", str(config), "--kb", "project-documents", str(records)], env=cli_env,
                   check=True, capture_output=True)
    served = Served(config, env, tmp_path / "service.log")
    yield served, proxy
    served.stop()
    subprocess.run([*cli, "kb", "drop", "--config", str(config), "--kb", "project-documents"], env=cli_env, check=True,
                   capture_output=True)


def callback(execution: str = "exec-1", knowledge: str = "project-documents", **changes: Any) -> dict[str, Any]:
    return calls.body(knowledge=knowledge, executionId=execution, runId="run-77", traceId="trace-77", **changes)


async def apost(*args: Any) -> tuple[int, dict[str, Any]]:
    return await asyncio.to_thread(post, *args)


async def aget(*args: Any) -> tuple[int, bytes]:
    return await asyncio.to_thread(get, *args)


def get(base: str, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(base + path, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


async def test_credentials_refused_and_secrets_never_leak(stack, figures) -> None:
    served, _ = stack
    route = "/agent/knowledge/project-documents/1.0.0"
    cases = {
        "missing": ({}, 401), "malformed": ({"Authorization": "Token x"}, 401),
        "wrong": ({"Authorization": "Bearer wrong-secret"}, 401),
        "another knowledge base's": ({"Authorization": "Bearer signed-secret-0123456789"}, 403),
    }
    for name, (auth, status) in cases.items():
        got = await apost(served.base, route, callback(), {**auth, "Idempotency-Key": "exec-1"})
        assert got == (status, {"error": {"code": "KNOWLEDGE_ACCESS_DENIED"}}), name
    other_app = callback(appId="app-9", filters={**callback()["filters"], "appId": "app-9"})
    assert (await apost(served.base, route, other_app, {"Authorization": f"Bearer {CALLBACK_SECRET}",
                                                 "Idempotency-Key": "exec-1"}))[0] == 403

    signed_route = "/agent/knowledge/signed/1.0.0"
    raw = json.dumps(callback(knowledge="signed")).encode()

    def signature(ts: str) -> str:
        return hmac.new(b"signed-secret-0123456789", ts.encode() + b"." + raw, hashlib.sha256).hexdigest()

    now = str(int(time.time()))
    headers = {"Authorization": "Bearer signed-secret-0123456789", "Idempotency-Key": "exec-1",
               "X-Knowledge-Timestamp": now, "X-Knowledge-Signature": signature(now)}
    assert (await apost(served.base, signed_route, raw, headers))[0] == 200
    assert await apost(served.base, signed_route, raw, headers) == (401, {"error": {"code": "KNOWLEDGE_ACCESS_DENIED"}})
    old = str(int(time.time()) - 400)
    expired = {**headers, "X-Knowledge-Timestamp": old, "X-Knowledge-Signature": signature(old)}
    assert (await apost(served.base, signed_route, raw, expired))[0] == 401
    for key, status in (("", 403), ("wrong", 403), (API_KEY, 200)):
        got, _ = await apost(served.base, "/retrieval", {"knowledge_id": "project-documents", "query": "installation",
                                                  "retrieval_setting": {"top_k": 3, "score_threshold": 0}},
                      {"Authorization": f"Bearer {key}"})
        assert got == status

    _, metrics = await aget(served.base, "/metrics")
    everything = served.logs() + metrics.decode()
    for secret in (CALLBACK_SECRET, API_KEY, "signed-secret-0123456789", "wrong-secret"):
        assert secret not in everything, f"a credential reached the logs or metrics: {secret[:4]}…"
    figures("3. Credentials", "missing, malformed, wrong, another knowledge base's, another application's, replayed "
                              "and expired credentials refused with the protocol's code; no secret found in "
                              f"{len(served.logs().splitlines())} log lines or the metrics")


async def test_health_readiness_metrics_and_json_logs(stack, opensearch, tmp_path) -> None:
    served, _ = stack
    assert await aget(served.base, "/healthz") == (200, b'{"status": "ok", "worker": %d}' % served.process.pid)
    assert (await aget(served.base, "/readyz"))[0] == 200
    status, answer = await apost(served.base, "/agent/knowledge/project-documents/1.0.0", callback("exec-ops"),
                          {"Authorization": f"Bearer {CALLBACK_SECRET}", "Idempotency-Key": "exec-ops"})
    assert status == 200 and answer["items"]
    await apost(served.base, "/agent/knowledge/project-documents/1.0.0", callback("exec-late", deadline=1),
         {"Authorization": f"Bearer {CALLBACK_SECRET}", "Idempotency-Key": "exec-late"})
    _, metrics = await aget(served.base, "/metrics")
    text = metrics.decode()
    assert 'es_provider_requests_total{code="",route="/agent/knowledge/{knowledge_id}/{version}",status="200"}' in text
    assert 'code="KNOWLEDGE_TIMED_OUT"' in text and 'status="504"' in text
    assert "es_provider_request_seconds_bucket" in text
    assert 'es_provider_opensearch_seconds_count{operation="search",outcome="ok"}' in text
    assert "es_provider_dropped_hits_total 0.0" in text

    lines = [json.loads(line) for line in served.logs().splitlines() if line.startswith("{")]
    refused = [line for line in lines if "KNOWLEDGE_TIMED_OUT" in line["message"]]
    assert refused and refused[-1]["runId"] == "run-77" and refused[-1]["traceId"] == "trace-77"
    assert refused[-1]["executionId"] == "exec-late" and refused[-1]["level"] == "INFO"
    assert SECRET_CONTENT not in served.logs()

    # Readiness follows OpenSearch: a service whose engine cannot be reached is not ready, but is alive.
    lost = await asyncio.to_thread(Served, write_config(tmp_path / "lost.toml", "http://127.0.0.1:9", [kb_entry("test-nothing")]),
                  {**TEST_ENV, "OPENSEARCH_URL": "http://127.0.0.1:9"}, tmp_path / "lost.log")
    try:
        assert (await aget(lost.base, "/healthz"))[0] == 200
        assert await aget(lost.base, "/readyz") == (503, b'{"status":"unavailable","reasons":{"engine":"engine unreachable"}}')
    finally:
        await asyncio.to_thread(lost.stop)


async def test_openapi_describes_every_endpoint(stack) -> None:
    served, _ = stack
    status, raw = await aget(served.base, "/openapi.json")
    paths = json.loads(raw)["paths"]
    assert status == 200
    assert set(paths) == {"/agent/knowledge/{knowledge_id}/{version}", "/knowledge-bases", "/knowledge-bases/retrieve",
                          "/retrieval", "/healthz", "/readyz", "/metrics", "/openapi.json"}


async def test_graceful_shutdown_finishes_in_flight_requests(stack, figures) -> None:
    served, proxy = stack
    proxy.delay_s = 1.5
    results: list[tuple[int, dict[str, Any]]] = []
    request = asyncio.create_task(apost(
        served.base, "/agent/knowledge/project-documents/1.0.0", callback("exec-drain"),
        {"Authorization": f"Bearer {CALLBACK_SECRET}", "Idempotency-Key": "exec-drain"}))
    await asyncio.sleep(0.5)  # the request is now waiting on the (slow) engine
    started = time.monotonic()
    code = await asyncio.to_thread(served.stop, signal.SIGTERM)
    results.append(await request)
    assert code == 0
    assert results and results[0][0] == 200 and results[0][1]["items"], results
    figures("6. Operations", f"SIGTERM during a request waiting on a slow engine: the request completed with 200, "
                             f"the process exited 0 after {time.monotonic() - started:.1f} s")
