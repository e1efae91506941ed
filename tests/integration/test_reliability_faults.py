"""4. Faults of the engine, on real nodes of their own: OpenSearch stopped → 503 within 1 s, and full service when
it is back without restarting the provider; slow → 504 at the deadline (± 100 ms); 429 → 429; a two-node cluster
keeps answering correctly while one node is killed and restarted."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from helpers.calls import body, headers
from helpers.setup import LOCAL, load_records, new_kb

from es_provider import admin
from es_provider.engine import Engine

CACHE = Path(os.environ.get("ES_PROVIDER_CACHE", Path.home() / ".cache" / "es-provider"))
DOCS = [{"document_id": f"d{i}", "content": f"alpha note {i}", "tenant_id": "team-a", "acl": {"public": True}}
        for i in range(20)]


def local(port: int, *args: str) -> str:
    env = {**os.environ, "OPENSEARCH_PORT": str(port), "OPENSEARCH_HEAP": "384m"}
    result = subprocess.run([str(LOCAL), *args], env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""


async def ask(client, n: int, deadline_ms: int = 10_000) -> tuple[int, dict]:
    execution = f"fault-{n}-{uuid.uuid4().hex[:6]}"
    response = await client.post("/agent/knowledge/project-documents/1.0.0",
                                 json=body(query="alpha", topK=5, executionId=execution,
                                           deadline=int(time.time() * 1000) + deadline_ms),
                                 headers=headers(**{"Idempotency-Key": execution}))
    return response.status, await response.json()


@pytest.fixture
def own_node():
    port = 9261
    url = local(port, "start")
    yield port, url
    local(port, "stop")


async def test_stopped_engine_is_503_fast_and_recovers_without_restart(own_node, client_for, figures) -> None:
    port, url = own_node
    kb = new_kb()
    engine = Engine(url)
    await admin.create(engine, kb, admin.load_index_body())
    await load_records(engine, kb, DOCS)
    await engine.close()
    client = await client_for(kb, url=url)
    assert (await ask(client, 1))[0] == 200

    local(port, "stop")
    started = time.monotonic()
    status, answer = await ask(client, 2)
    refused_in = time.monotonic() - started
    assert (status, answer) == (503, {"error": {"code": "KNOWLEDGE_UNAVAILABLE"}})
    assert refused_in < 1.0

    local(port, "start")
    status, answer = await ask(client, 3)
    assert status == 200 and len(answer["items"]) == 5
    figures("4. Engine faults", f"OpenSearch stopped: 503 KNOWLEDGE_UNAVAILABLE after {refused_in * 1000:.0f} ms; "
                                "after a restart of OpenSearch the same provider process answered 200 again")


@pytest.mark.parametrize("deadline_ms", [700, 1500])
async def test_slow_engine_times_out_at_the_deadline(engine, kb, client_for, proxy, deadline_ms, figures) -> None:
    await load_records(engine, kb, DOCS)
    proxy.delay_s = 10.0
    client = await client_for(kb, url=proxy.url)
    started = time.monotonic()
    status, answer = await ask(client, 1, deadline_ms)
    elapsed_ms = (time.monotonic() - started) * 1000
    assert (status, answer) == (504, {"error": {"code": "KNOWLEDGE_TIMED_OUT"}})
    assert abs(elapsed_ms - deadline_ms) <= 100, f"answered {elapsed_ms:.0f} ms after a {deadline_ms} ms deadline"
    figures("4. Engine faults", f"engine delayed 10 s, deadline {deadline_ms} ms: 504 KNOWLEDGE_TIMED_OUT after "
                                f"{elapsed_ms:.0f} ms")


async def test_engine_rate_limiting_is_passed_on(engine, kb, client_for, proxy) -> None:
    proxy.status = 429
    client = await client_for(kb, url=proxy.url)
    assert await ask(client, 1) == (429, {"error": {"code": "KNOWLEDGE_RATE_LIMITED"}})


async def test_two_node_cluster_survives_a_killed_node(client_for, figures) -> None:
    port = 9271
    local(port, "start", "--nodes", "2")
    urls = f"http://127.0.0.1:{port},http://127.0.0.1:{port + 1}"
    try:
        kb = new_kb()
        engine = Engine(urls)
        await admin.create(engine, kb, admin.load_index_body(replicas=1))
        await load_records(engine, kb, DOCS)
        health = await engine._client.cluster.health(wait_for_status="green", request_timeout=60)
        assert health["status"] == "green"
        await engine.close()
        client = await client_for(kb, url=urls)
        expected = (await ask(client, 0))[1]["items"]
        assert len(expected) == 5

        outcomes: list[tuple[int, int]] = []

        async def loop(seconds: float) -> None:
            stop = time.monotonic() + seconds
            while time.monotonic() < stop:
                status, answer = await ask(client, len(outcomes))
                outcomes.append((status, len(answer.get("items", []))))
                await asyncio.sleep(0.05)

        pid = int((CACHE / "run" / str(port) / "node-1" / "pid").read_text())
        os.kill(pid, signal.SIGKILL)
        await loop(5)
        local(port, "start", "--nodes", "2")  # starts the missing node again
        await loop(3)
        assert outcomes and all(o == (200, 5) for o in outcomes), [o for o in outcomes if o != (200, 5)][:5]
        figures("4. Engine faults", f"two-node cluster, replicas 1: node 1 killed (SIGKILL) and restarted while "
                                    f"{len(outcomes)} queries ran; all answered 200 with full results")
    finally:
        local(port, "stop")
