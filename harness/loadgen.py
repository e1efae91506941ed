"""Load generator, run as its own process so it does not share an event loop or a core's time slices with the
service: sends a list of requests at a fixed concurrency and prints per-request latencies as JSON.

    python -m harness.loadgen SPEC.json      (spec: mode, target, concurrency, requests, warmup, bodies, ...)

mode "direct": each body is an OpenSearch search body, sent with opensearch-py's async client.
mode "service": each body is a SparkTide callback; executionId, Idempotency-Key and deadline are made fresh for
every request, so the service's idempotency window never answers from memory; with "sign": true each is signed.
With "protocol": "agentarts" each body is an AgentArts retrieve request, sent as it is; with "protocol": "mcp" a
JSON-RPC message to the MCP endpoint, sent as it is with the secret as the user's access token, and an answer that
is a JSON-RPC error or a tool's `isError` counts as an error. "duration_s" (closed loop) stops starting requests
after that many seconds.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import orjson
from aiohttp import ClientSession, ClientTimeout, TCPConnector

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


def _tool_answered(raw: bytes) -> bool:
    """An MCP answer is a JSON-RPC result whose tool did not fail."""
    answer = orjson.loads(raw)
    result = answer.get("result") if isinstance(answer, dict) else None
    return isinstance(result, dict) and result.get("isError") is not True


async def run_direct(spec: dict[str, Any]) -> tuple[list[float], int, float]:
    from opensearchpy import AsyncOpenSearch

    from es_provider.engine.transport import OrjsonSerializer

    client = AsyncOpenSearch(hosts=[spec["target"]], serializer=OrjsonSerializer(), maxsize=spec["concurrency"] + 4)
    bodies = spec["bodies"]
    index = spec["index"]

    async def one(i: int) -> None:
        response = await client.search(index=index, body=bodies[i % len(bodies)])
        if response.get("timed_out"):
            raise RuntimeError("timed out")

    try:
        return await drive(spec, one)
    finally:
        await client.close()


async def run_service(spec: dict[str, Any]) -> tuple[list[float], int, float]:
    bodies = spec["bodies"]
    url = spec["target"]
    headers = {"Authorization": f"Bearer {spec['secret']}", "Content-Type": "application/json"}
    protocol = spec.get("protocol")
    # As an MCP client sends every request after `initialize` (the endpoint is stateless: no session to open).
    sent_as = {**headers, **MCP_HEADERS} if protocol == "mcp" else headers
    connector = TCPConnector(limit=spec["concurrency"] + 4)
    async with ClientSession(connector=connector, timeout=ClientTimeout(total=30)) as session:
        counter = 0

        async def one(i: int) -> None:
            nonlocal counter
            if protocol in ("agentarts", "mcp"):  # bodies go as they are: neither has execution ids
                async with session.post(url, data=orjson.dumps(bodies[i % len(bodies)]), headers=sent_as) as response:
                    raw = await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"status {response.status}")
                if protocol == "mcp" and not _tool_answered(raw):
                    raise RuntimeError("a JSON-RPC error or a tool's isError")
                return
            counter += 1
            execution = f"lg-{time.monotonic_ns()}-{counter}"
            body = dict(bodies[i % len(bodies)])
            body["executionId"] = execution
            body["deadline"] = int(time.time() * 1000) + 10_000
            raw = orjson.dumps(body)
            sent = {**headers, "Idempotency-Key": execution}
            if spec.get("sign"):  # a signed callback: HMAC-SHA256 over "timestamp.body" with the callback secret
                timestamp = str(int(time.time() * 1000))
                sent["X-Knowledge-Timestamp"] = timestamp
                sent["X-Knowledge-Signature"] = hmac.new(spec["secret"].encode(), timestamp.encode() + b"." + raw,
                                                         hashlib.sha256).hexdigest()
            async with session.post(url, data=raw, headers=sent) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"status {response.status}")

        return await drive(spec, one)


async def paced(spec: dict[str, Any], one: Any) -> tuple[list[float], int, float]:
    """Open loop: request i starts at i / rate seconds, whatever the answers do (a steady offered load)."""
    rate, total = spec["rate"], spec["requests"]
    latencies: list[float] = [float("nan")] * total
    errors = 0
    started = time.perf_counter()

    async def timed(i: int) -> None:
        nonlocal errors
        begin = time.perf_counter()
        try:
            await one(i)
        except Exception:
            errors += 1
            return
        latencies[i] = (time.perf_counter() - begin) * 1000

    tasks = []
    for i in range(total):
        delay = started + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(timed(i)))
    await asyncio.gather(*tasks)
    return latencies, errors, time.perf_counter() - started


async def drive(spec: dict[str, Any], one: Any) -> tuple[list[float], int, float]:
    """(latencies of the measured requests, errors, seconds from the first measured request to the last answer)."""
    if spec.get("rate"):
        return await paced(spec, one)
    concurrency, total, warmup = spec["concurrency"], spec["requests"], spec.get("warmup", 0)
    # Optional: stop starting requests after this many seconds (a flood of a given length).
    stop_at = time.perf_counter() + spec["duration_s"] if spec.get("duration_s") else math.inf
    latencies: list[float] = []
    errors = 0
    next_index = 0
    measured_from = 0.0

    async def worker() -> None:
        nonlocal next_index, errors
        nonlocal measured_from
        while next_index < warmup + total and time.perf_counter() < stop_at:
            i = next_index
            next_index += 1
            started = time.perf_counter()
            if i == warmup:
                measured_from = started
            try:
                await one(i)
            except Exception:
                errors += 1
                continue
            if i >= warmup:
                latencies.append((time.perf_counter() - started) * 1000)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, errors, time.perf_counter() - measured_from


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    runner = run_direct if spec["mode"] == "direct" else run_service
    latencies, errors, elapsed = asyncio.run(runner(spec))
    # In paced mode latencies keep request order (NaN where a request failed), so windows can be compared.
    print(json.dumps({"latencies_ms": [None if math.isnan(x) else x for x in latencies], "errors": errors,
                      "elapsed_s": elapsed}))


if __name__ == "__main__":
    main()
