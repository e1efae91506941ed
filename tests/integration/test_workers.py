"""`es-provider serve --workers 2` as operators run it: two processes answer on one port, /metrics sums them, SIGTERM
stops both only after their in-flight requests are answered, a killed worker is replaced, and a signed callback
replayed to the other worker, or to a second instance, is refused (the replay store is the engine, replays.py)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import calls
from helpers.served import Served, kb_entry, write_config
from helpers.setup import CALLBACK_SECRET, TEST_ENV

SIGNED_SECRET = "signed-secret-0123456789"
CLI = [sys.executable, "-m", "es_provider.cli"]


def request(base: str, path: str, data: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One request on a NEW connection (urllib does not keep them): the kernel picks the worker each time."""
    sent = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json",
                                                                   **(headers or {})})
    try:
        with urllib.request.urlopen(sent, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def callback(execution: str, knowledge: str = "project-documents") -> bytes:
    return json.dumps(calls.body(knowledge=knowledge, executionId=execution)).encode()


def route(knowledge: str = "project-documents") -> str:
    return f"/agent/knowledge/{knowledge}/1.0.0"


def signed(raw: bytes, execution: str) -> dict[str, str]:
    timestamp = str(int(time.time() * 1000))
    signature = hmac.new(SIGNED_SECRET.encode(), timestamp.encode() + b"." + raw, hashlib.sha256).hexdigest()
    return {"Authorization": f"Bearer {SIGNED_SECRET}", "Idempotency-Key": execution,
            "X-Knowledge-Timestamp": timestamp, "X-Knowledge-Signature": signature}


def worker_pids(supervisor: int) -> set[int]:
    """The supervisor's worker processes (not multiprocessing's resource tracker, its other child)."""
    children = Path(f"/proc/{supervisor}/task/{supervisor}/children")
    pids = {int(pid) for pid in children.read_text().split()} if children.exists() else set()
    return {pid for pid in pids if b"spawn_main" in _cmdline(pid)}


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.fixture
def deployment(opensearch, tmp_path) -> Iterator[dict[str, Any]]:
    """One knowledge base with a document (plus a signed twin); `config_for(url)` writes its configuration."""
    alias = f"test-{uuid.uuid4().hex}"
    env = {**TEST_ENV, "SIGNED_KEY": SIGNED_SECRET}

    def config_for(url: str, name: str = "config.toml") -> Path:
        return write_config(tmp_path / name, url, [
            kb_entry(alias), kb_entry(alias, id="signed", secret_ref="SIGNED_KEY", signature=True)],
            principals={"u-alice": ["eng"]})

    config = config_for(opensearch.url)
    cli_env = {**os.environ, **env, "OPENSEARCH_URL": opensearch.url}
    subprocess.run([*CLI, "kb", "create", "--config", str(config), "--kb", "project-documents"], env=cli_env,
                   check=True, capture_output=True)
    records = tmp_path / "docs.jsonl"
    records.write_text(json.dumps({"document_id": "doc-1", "title": "Install", "tenant_id": "team-a",
                                   "content": "installation guide", "acl": {"groups": ["eng"]}}) + "\n")
    subprocess.run([*CLI, "ingest", "--config", str(config), "--kb", "project-documents", str(records)], env=cli_env,
                   check=True, capture_output=True)
    yield {"config": config, "config_for": config_for, "env": {**env, "OPENSEARCH_URL": opensearch.url},
           "tmp": tmp_path}
    subprocess.run([*CLI, "kb", "drop", "--config", str(config), "--kb", "project-documents"], env=cli_env,
                   check=True, capture_output=True)


@pytest.fixture
def two_workers(deployment) -> Iterator[Served]:
    served = Served(deployment["config"], deployment["env"], deployment["tmp"] / "workers.log",
                    args=("--workers", "2", "--log-format", "text"))
    deadline = time.monotonic() + 30
    while len(worker_pids(served.process.pid)) < 2 or "2 workers" not in served.logs():
        assert time.monotonic() < deadline, served.logs()[-2000:]
        time.sleep(0.2)
    yield served
    if served.process.poll() is None:
        served.stop()


def metric(text: bytes, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.decode().splitlines():
        match = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if match and all(f'{k}="{v}"' in (match.group(1) or "") for k, v in labels.items()):
            total += float(match.group(2))
    return total


def test_two_workers_answer_and_metrics_sum_across_them(two_workers: Served) -> None:
    _, before = request(two_workers.base, "/metrics")
    seen: dict[int, int] = {}
    for _ in range(40):
        status, body = request(two_workers.base, "/healthz")
        assert status == 200
        pid = json.loads(body)["worker"]
        seen[pid] = seen.get(pid, 0) + 1
    assert set(seen) == worker_pids(two_workers.process.pid) and len(seen) == 2, seen
    for i in range(10):
        status, body = request(two_workers.base, route(), callback(f"sum-{i}"),
                               {**calls.headers(), "Idempotency-Key": f"sum-{i}"})
        assert status == 200 and json.loads(body)["items"][0]["documentId"] == "doc-1"
    status, text = request(two_workers.base, "/metrics")
    assert status == 200
    # Whichever worker answers /metrics reports both workers' counts.
    assert metric(text, "es_provider_requests_total", route="/healthz", status="200") - \
        metric(before, "es_provider_requests_total", route="/healthz", status="200") == 40
    assert metric(text, "es_provider_requests_total", route="/agent/knowledge/{knowledge_id}/{version}",
                  status="200") == 10


async def test_sigterm_stops_both_workers_after_their_in_flight_requests(deployment, proxy) -> None:
    # Through the engine proxy, which holds every search for 1.5 s (the proxy runs in this test's loop).
    config = deployment["config_for"](proxy.url, "through-proxy.toml")
    served = await asyncio.to_thread(Served, config, {**deployment["env"], "OPENSEARCH_URL": proxy.url},
                                     deployment["tmp"] / "proxied.log", ("--workers", "2", "--log-format", "text"))
    try:
        deadline = time.monotonic() + 30
        while len(pids := worker_pids(served.process.pid)) < 2 or "2 workers" not in served.logs():
            assert time.monotonic() < deadline, served.logs()[-2000:]
            await asyncio.sleep(0.2)
        proxy.delay_s = 1.5
        started = [asyncio.create_task(asyncio.to_thread(
            request, served.base, route(), callback(f"term-{i}"),
            {**calls.headers(), "Idempotency-Key": f"term-{i}"})) for i in range(8)]
        async with asyncio.timeout(20):
            while proxy.searches < 8:  # every request has reached the engine and waits for its answer  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        served.process.send_signal(signal.SIGTERM)
        answers = await asyncio.gather(*started)
        assert [status for status, _ in answers] == [200] * 8
        assert all(json.loads(body)["items"] for _, body in answers)
        assert await asyncio.to_thread(served.process.wait, 30) == 0
        assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)  # noqa: ASYNC240
    finally:
        if served.process.poll() is None:
            served.stop()


def test_a_killed_worker_is_replaced(two_workers: Served) -> None:
    first = worker_pids(two_workers.process.pid)
    victim = min(first)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while not ((now := worker_pids(two_workers.process.pid)) - first and len(now) == 2):
        assert time.monotonic() < deadline, two_workers.logs()[-2000:]
        time.sleep(0.2)
    assert victim not in now
    pids = set()
    for _ in range(40):
        status, body = request(two_workers.base, "/healthz")
        assert status == 200
        pids.add(json.loads(body)["worker"])
    assert pids <= now
    assert f"worker {victim} exited with -9: starting another" in two_workers.logs()


def test_a_replayed_signed_callback_is_refused_by_the_other_worker_and_another_instance(
        two_workers: Served, deployment) -> None:
    raw = callback("signed-1", knowledge="signed")
    headers = signed(raw, "signed-1")
    status, body = request(two_workers.base, route("signed"), raw, headers)
    assert status == 200 and json.loads(body)["items"], body
    # The same bytes and headers again, on new connections: the kernel sends some to the other worker.
    for _ in range(12):
        status, body = request(two_workers.base, route("signed"), raw, headers)
        assert (status, json.loads(body)) == (401, {"error": {"code": "KNOWLEDGE_ACCESS_DENIED"}})
    assert "signature replayed (first used by another process)" in two_workers.logs()

    other = Served(deployment["config"], deployment["env"], deployment["tmp"] / "other.log")
    try:
        status, body = request(other.base, route("signed"), raw, headers)
        assert (status, json.loads(body)) == (401, {"error": {"code": "KNOWLEDGE_ACCESS_DENIED"}})
        assert "signature replayed (first used by another process)" in other.logs()
        # A fresh signature is still accepted there: the store refuses replays, not callers.
        fresh = callback("signed-2", knowledge="signed")
        status, body = request(other.base, route("signed"), fresh, signed(fresh, "signed-2"))
        assert status == 200
    finally:
        other.stop()


def test_a_worker_that_cannot_start_stops_the_supervisor(deployment) -> None:
    import socket

    with socket.socket() as taken:  # the port is held without SO_REUSEPORT: no worker can bind it
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([*CLI, "serve", "--config", str(deployment["config"]), "--port", str(port),
                                 "--workers", "2"], env={**os.environ, **deployment["env"]}, capture_output=True,
                                text=True, timeout=120)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "worker not started" in result.stderr and "before it served: stopping" in result.stderr
    assert CALLBACK_SECRET not in result.stderr and SIGNED_SECRET not in result.stderr
