"""Traces read back from a real Jaeger (scripts/jaeger-local: v2 all-in-one, OTLP in, query API out): the service
started with the standard OTEL_* variables, a SparkTide call continuing the caller's `traceparent` and a Dify call
starting its own trace, each with its server span, its engine span, its re-check, admission, identity and
access-record spans, their parents and attributes, the access record carrying the server span's ids, and never
the query text or a document's content; every worker of `serve --workers 2` exports; the exporter pointed at a
dead port leaves answers unchanged and counts what it could not send."""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import calls
from helpers.records import metric
from helpers.served import Served, free_port, kb_entry, post, write_config
from helpers.setup import API_KEY, CALLBACK_SECRET, ROOT, TEST_ENV, load_records, new_kb

from es_provider.ingest import admin

QUERY = "zeppelin hangar inspection"  # no span attribute may hold it
CONTENT = "The zeppelin hangar inspection found a cracked girder near the north door."


@pytest.fixture(scope="module")
def jaeger() -> Iterator[str]:
    """The query API's URL. Started here (and stopped) unless one already answers: a test never skips."""
    running = subprocess.run([str(ROOT / "scripts" / "jaeger-local"), "status"], capture_output=True, text=True)
    started = running.returncode != 0
    url = subprocess.run([str(ROOT / "scripts" / "jaeger-local"), "start"], capture_output=True, text=True,
                         check=True).stdout.strip().splitlines()[-1]
    yield url
    if started:
        subprocess.run([str(ROOT / "scripts" / "jaeger-local"), "stop"], capture_output=True, check=False)


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def traces(jaeger: str, service: str, want: int) -> list[dict[str, Any]]:
    """The service's traces once `want` of them are in (the batch exporter sends every 100 ms here)."""
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            found = get_json(f"{jaeger}/api/traces?service={service}&limit={max(50, 2 * want)}")["data"] or []
        except (OSError, ValueError):
            found = []
        if len(found) >= want:
            return found
        time.sleep(0.2)
    raise AssertionError(f"Jaeger holds {len(found)} traces of {service}, not {want}")


def both_calls(records: list[dict[str, Any]]) -> bool:
    return {r["protocol"] for r in records} >= {"sparktide", "dify"}


def access_records(directory: Path, done: Callable[[list[dict[str, Any]]], bool] = both_calls) -> list[dict[str, Any]]:
    """The access record's "file" sink (flushed every 100 ms), once `done` holds: by default, a record of each of
    the two calls is in."""
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        records = [json.loads(line) for path in sorted(directory.glob("access-*.jsonl"))
                   for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if done(records):
            return records
        time.sleep(0.2)
    raise AssertionError(f"the access record holds {records}")


def dropped_spans(base: str) -> float:
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
        return metric(response.read().decode(), "es_provider_trace_spans_dropped_total")


def tags(span: dict[str, Any]) -> dict[str, Any]:
    return {tag["key"]: tag["value"] for tag in span["tags"]}


@pytest.fixture
async def served(engine: Any, tmp_path: Path) -> Any:
    kb = new_kb()
    await admin.create(engine, kb, admin.load_index_body())
    await load_records(engine, kb, [{"document_id": "hangar", "title": "Hangar report", "tenant_id": "team-a",
                                     "content": CONTENT, "acl": {"groups": ["eng"]}}])
    config = write_config(tmp_path / "config.toml", engine.url, [kb_entry(kb.alias)], api_keys=[
        {"key_ref": "TEST_API_KEY", "app": "app-1", "tenants": ["team-a"], "subject": "u-alice",
         "knowledge": ["project-documents"]}], principals={"u-alice": ["eng"]},
        sections={"access_log": {"sinks": ["file"], "directory": str(tmp_path / "access"), "flush_interval_s": 0.1,
                                 "max_delay_s": 5}})

    def serve(*args: str, **otel: str) -> Served:
        return Served(config, {**TEST_ENV, "OTEL_BSP_SCHEDULE_DELAY": "100", **otel}, tmp_path / f"{uuid.uuid4()}.log",
                      args=args)

    yield serve
    await admin.drop(engine, kb)


async def test_sparktide_and_dify_calls_are_traced_without_query_or_content(served: Any, jaeger: str,
                                                                             tmp_path: Path) -> None:
    served_dir = tmp_path / "access"
    service = f"es-provider-test-{uuid.uuid4().hex[:8]}"
    app = served(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318", OTEL_SERVICE_NAME=service)
    try:
        caller_trace, caller_span = secrets.token_hex(16), secrets.token_hex(8)
        execution = f"exec-{uuid.uuid4().hex[:8]}"
        status, answer = post(app.base, "/agent/knowledge/project-documents/1.0.0", calls.body(
            query=QUERY, executionId=execution, runId="run-traced", traceId="trace-traced"), {
            **calls.headers(**{"Idempotency-Key": execution}), "traceparent": f"00-{caller_trace}-{caller_span}-01"})
        assert status == 200 and [i["documentId"] for i in answer["items"]] == ["hangar"], answer
        status, answer = post(app.base, "/retrieval", {
            "knowledge_id": "project-documents", "query": QUERY,
            "retrieval_setting": {"top_k": 3, "score_threshold": 0.0}}, {"Authorization": f"Bearer {API_KEY}"})
        assert status == 200 and answer["records"], answer

        found = {t["traceID"]: t for t in traces(jaeger, service, 2)}
        assert caller_trace in found, "the SparkTide call did not continue the caller's trace"
        sparktide = found.pop(caller_trace)["spans"]
        (dify,) = [t["spans"] for t in found.values()]
        for spans, route, protocol in ((sparktide, "POST /agent/knowledge/{knowledge_id}/{version}", "sparktide"),
                                       (dify, "POST /retrieval", "dify")):
            (server,) = [s for s in spans if s["operationName"] == route]
            engine = [s for s in spans if tags(s).get("db.system.name") == "opensearch"]
            assert engine, [s["operationName"] for s in spans]
            for span in engine:  # each engine call a child of the request's span, described as a database call
                assert span["references"][0]["spanID"] == server["spanID"]
                assert tags(span)["span.kind"] == "client"
                assert tags(span)["db.operation.name"] in {"search", "msearch"}
                assert tags(span)["db.collection.name"].startswith("test-")
            (recheck,) = [s for s in spans if s["operationName"] == "recheck"]  # the re-check, and what it did
            assert recheck["references"][0]["spanID"] == server["spanID"]
            assert {k: tags(recheck)[k] for k in ("es_provider.recheck.kept", "es_provider.recheck.dropped")} \
                == {"es_provider.recheck.kept": 1, "es_provider.recheck.dropped": 0}
            for name in ("admission wait", "identity", "access record"):  # the request's other stages
                (stage,) = [s for s in spans if s["operationName"] == name]
                assert stage["references"][0]["spanID"] == server["spanID"], name
            (admission,) = [s for s in spans if s["operationName"] == "admission wait"]
            assert tags(admission)["es_provider.admission.queued"] is False
            (identity,) = [s for s in spans if s["operationName"] == "identity"]
            assert {k: tags(identity)[k] for k in ("es_provider.identity.source", "es_provider.identity.active")} \
                == {"es_provider.identity.source": "file", "es_provider.identity.active": True}
            (record,) = [r for r in access_records(served_dir) if r["protocol"] == protocol]
            assert (record["otel_trace_id"], record["otel_span_id"]) == (server["traceID"], server["spanID"])
            attributes = tags(server)
            assert attributes["span.kind"] == "server" and attributes["http.response.status_code"] == 200
            assert attributes["es_provider.protocol"] == protocol
            assert attributes["gen_ai.operation.name"] == "retrieval"
            assert attributes["gen_ai.data_source.id"] == "project-documents"
            for span in spans:  # never the query, the content, or a secret
                text = json.dumps(span["tags"])
                for secret_text in (QUERY, "zeppelin", "girder", CALLBACK_SECRET, API_KEY):
                    assert secret_text not in text, (span["operationName"], secret_text)
        (server,) = [s for s in sparktide if s["operationName"].startswith("POST /agent/")]
        assert server["references"][0]["spanID"] == caller_span  # the caller's span is its parent
        assert {k: tags(server)[k] for k in ("sparktide.run_id", "sparktide.trace_id", "sparktide.execution_id")} \
            == {"sparktide.run_id": "run-traced", "sparktide.trace_id": "trace-traced",
                "sparktide.execution_id": execution}
    finally:
        app.stop()


async def test_every_worker_exports_its_spans(served: Any, jaeger: str, tmp_path: Path) -> None:
    """`serve --workers 2`: requests answered by each worker (the access record names the worker's pid) and every
    answer's trace in Jaeger, found by the trace id its record carries."""
    service = f"es-provider-workers-{uuid.uuid4().hex[:8]}"
    app = served("--workers", "2", OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318", OTEL_SERVICE_NAME=service)
    try:
        sent = 0
        records: list[dict[str, Any]] = []
        while sent < 100 and len({r["worker"] for r in records}) < 2:  # new connections: the kernel spreads them
            for _ in range(10):
                status, answer = post(app.base, "/retrieval", {
                    "knowledge_id": "project-documents", "query": QUERY,
                    "retrieval_setting": {"top_k": 3, "score_threshold": 0.0}}, {"Authorization": f"Bearer {API_KEY}"})
                assert status == 200 and answer["records"], answer
            sent += 10
            records = access_records(tmp_path / "access", lambda found: len(found) >= sent)  # noqa: B023
        assert len({r["worker"] for r in records}) == 2, records
        found = {t["traceID"] for t in traces(jaeger, service, len(records))}
        assert {r["otel_trace_id"] for r in records} <= found
    finally:
        app.stop()


async def test_a_dead_exporter_changes_no_answer_and_its_drops_are_counted(served: Any) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    app = served(OTEL_EXPORTER_OTLP_ENDPOINT=dead, OTEL_EXPORTER_OTLP_TIMEOUT="1")  # seconds, as the Python SDK reads it
    try:
        for n in range(20):
            execution = f"dead-{n}-{uuid.uuid4().hex[:6]}"
            started = time.monotonic()
            status, answer = post(app.base, "/agent/knowledge/project-documents/1.0.0", calls.body(
                query=QUERY, executionId=execution), calls.headers(**{"Idempotency-Key": execution}))
            assert status == 200 and [i["documentId"] for i in answer["items"]] == ["hangar"], answer
            assert time.monotonic() - started < 1.0
        dropped = 0.0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and dropped < 1:
            dropped = await asyncio.to_thread(dropped_spans, app.base)
            await asyncio.sleep(0.5)
        assert dropped >= 1
    finally:
        app.stop()
