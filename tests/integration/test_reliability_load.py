"""5. Load: a bounded soak at a steady rate from a load generator in another process (zero errors, a stable p99,
resident memory that does not grow), and limits that shed load with 429/413 instead of falling over."""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers import calls
from helpers.served import Served, run_loadgen, write_config
from helpers.setup import CALLBACK_SECRET, HEAVY, ROOT, TEST_ENV, load_records

SOAK_SECONDS = 60 if HEAVY else 15
RATE = 50 if HEAVY else 40  # requests per second, offered whatever the answers do
DOCS = [{"document_id": f"d{i}", "title": f"note {i}", "content": f"installation note {i} alpha beta",
         "tenant_id": "team-a", "acl": {"public": True}} for i in range(300)]


def callback(query: str) -> dict[str, Any]:
    return calls.body(query=query, topK=5, runId="soak", traceId="soak", executionId="x", deadline=0)


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


@pytest.fixture
async def served_kb(engine, kb, tmp_path, request) -> Any:
    await load_records(engine, kb, DOCS)

    def start(url: str, **server: Any) -> Served:
        entry = {"id": kb.id, "name": kb.name, "versions": kb.versions, "alias": kb.alias,
                 "mandatory_filters": ["TENANT", "SUBJECT"], "top_k": 5, "secret_ref": "TEST_CALLBACK_KEY",
                 "apps": ["app-1"]}
        config = write_config(tmp_path / f"config-{uuid.uuid4().hex[:6]}.toml", url, [entry], server=server)
        served = Served(config, {**TEST_ENV, "OPENSEARCH_URL": url}, tmp_path / f"service-{uuid.uuid4().hex[:6]}.log")
        request.addfinalizer(served.stop)
        return served

    return start


async def test_bounded_soak(served_kb, opensearch, figures) -> None:
    # A short idempotency window, so its cache reaches its steady size during the warm-up third.
    served = served_kb(opensearch.url, idempotency_window_s=2)
    queries = ["installation", "alpha", "beta note", "note 7", "installation alpha", "安装"]
    spec = {"mode": "service", "target": f"{served.base}/agent/knowledge/project-documents/1.0.0",
            "secret": CALLBACK_SECRET, "concurrency": 64, "rate": RATE, "requests": RATE * SOAK_SECONDS,
            "bodies": [callback(q) for q in queries]}
    soak = asyncio.ensure_future(run_loadgen(spec))
    rss = []
    for _ in range(3):
        await asyncio.sleep(SOAK_SECONDS / 3)
        rss.append(served.rss_kib())
    result = await soak
    latencies = result["latencies_ms"]
    thirds = [latencies[i * len(latencies) // 3:(i + 1) * len(latencies) // 3] for i in range(3)]
    p99s = [p99([x for x in third if x is not None]) for third in thirds]
    growth_mib = (rss[-1] - rss[0]) / 1024
    figures("5. Load", f"soak: {len(latencies)} requests at {RATE}/s for {SOAK_SECONDS} s from a separate process; "
                       f"errors {result['errors']}; p99 per third {', '.join(f'{x:.1f}' for x in p99s)} ms; "
                       f"resident memory {rss[0] // 1024} → {rss[-1] // 1024} MiB after the first third")
    assert result["errors"] == 0 and None not in latencies
    assert p99s[2] <= max(2 * p99s[0], p99s[0] + 50), f"p99 drifted: {p99s}"
    assert growth_mib < 16, f"resident memory grew {growth_mib:.1f} MiB after warm-up"


async def test_concurrency_and_size_limits_shed_load(served_kb, proxy, figures) -> None:
    proxy.delay_s = 0.5
    served = served_kb(proxy.url, max_concurrency=4)

    async def one(n: int) -> tuple[int, Any]:
        def call() -> tuple[int, Any]:
            import urllib.error
            import urllib.request

            execution = f"shed-{n}"
            body = callback("installation")
            body.update(executionId=execution, deadline=int(time.time() * 1000) + 10_000)
            request = urllib.request.Request(f"{served.base}/agent/knowledge/project-documents/1.0.0",
                                             data=json.dumps(body).encode(), headers={
                                                 "Authorization": f"Bearer {CALLBACK_SECRET}",
                                                 "Content-Type": "application/json", "Idempotency-Key": execution})
            try:
                with urllib.request.urlopen(request, timeout=20) as response:
                    return response.status, json.loads(response.read())
            except urllib.error.HTTPError as error:
                return error.code, json.loads(error.read())

        return await asyncio.to_thread(call)

    answers = await asyncio.gather(*(one(n) for n in range(24)))
    statuses = sorted(status for status, _ in answers)
    shed = [a for s, a in answers if s == 429]
    assert set(statuses) <= {200, 429} and shed and statuses.count(200) >= 4, statuses
    assert all(a == {"error": {"code": "KNOWLEDGE_RATE_LIMITED"}} for a in shed)

    proxy.delay_s = 0
    status, _ = await one(99)
    assert status == 200, "the service answers again once the burst is over"

    big = json.dumps({**callback("x" * 200), "trustedContext": {"pad": "x" * 70_000}}).encode()

    def too_big() -> int:
        import urllib.error
        import urllib.request

        request = urllib.request.Request(f"{served.base}/agent/knowledge/project-documents/1.0.0", data=big,
                                         headers={"Authorization": f"Bearer {CALLBACK_SECRET}",
                                                  "Content-Type": "application/json", "Idempotency-Key": "x"})
        try:
            with urllib.request.urlopen(request, timeout=20) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    assert await asyncio.to_thread(too_big) == 413
    figures("5. Load", f"burst of 24 concurrent requests against max_concurrency 4 with a slow engine: "
                       f"{statuses.count(200)} answered, {len(shed)} shed with 429 KNOWLEDGE_RATE_LIMITED, none "
                       "failed otherwise; a 70 KB body refused with 413")


@pytest.fixture(autouse=True)
def _loadgen_importable() -> None:
    assert (Path(ROOT) / "bench" / "loadgen.py").exists()
