"""The access record (docs/access.md) on a real node: one record per SparkTide, AgentArts and Dify answer (and per
refusal) with who, which credential, which knowledge base and what was served, never the query text; found again
by `es-provider access --document/--subject`; written before a SIGTERM'd service exits; and a sink that stops ends
in the configured failure mode, counted."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers import calls
from helpers.records import metric
from helpers.served import Served, free_port, kb_entry, write_config
from helpers.setup import API_KEY, TEST_ENV, api_key, bearer, load_records

from es_provider.core.errors import ErrorCode, KnowledgeError
from es_provider.engine.client import Engine
from harness.proxy import EngineProxy

QUERY = "installation zebracorn"  # a query text that must never appear in a record
QUERY_KEY = "access-query-key-0123456789"
DOCS = [
    {"document_id": f"doc-{n}", "title": f"Doc {n}", "content": f"installation zebracorn notes number {n}.",
     "tenant_id": "team-a", "acl": {"public": True}} for n in range(4)
] + [{"document_id": "secret-plan", "content": "installation zebracorn secret plan.", "tenant_id": "team-a",
      "acl": {"subjects": ["u-bob"]}}]


def access_section(prefix: str, **changes: Any) -> dict[str, Any]:
    return {"index": prefix, "flush_interval_s": 0.1, "query_key_ref": "ACCESS_QUERY_KEY", **changes}


async def records_of(engine: Engine, prefix: str, ids: list[str], timeout_s: float = 10.0) -> dict[str, Any]:
    """The records with these ids, once they are all in (refreshing the daily indices)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await engine.refresh(f"{prefix}-*")
            found = {hit["_id"]: hit["_source"] async for hit in engine.scan(f"{prefix}-*")}
        except KnowledgeError as exc:
            # A day's index just made by the first batch may still be starting its shard (Elasticsearch 8 under
            # load answered no_shard_available_action_exception once); what is asked is whether the records come.
            if exc.code is not ErrorCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            found = {}
        if set(ids) <= set(found) or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.2)


async def drop_records(engine: Engine, prefix: str) -> None:
    for name in await engine.list_indices(f"{prefix}-*"):
        await engine.delete_index(name)


@pytest.fixture
def prefix() -> str:
    return f"test-access-{uuid.uuid4().hex[:12]}"


def run_access(config: Path, *args: str) -> list[dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "es_provider.cli", "access", "--config", str(config), *args],
                          capture_output=True, text=True, env={**os.environ}, timeout=120)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.engines  # what differs by engine: the access record's bulk creates
async def test_each_protocol_answer_and_refusal_has_one_record_without_the_query(
        engine, kb, client_for, prefix, tmp_path) -> None:
    await load_records(engine, kb, DOCS)
    client = await client_for(kb, api_keys=[api_key([kb.id], tenants=["team-a"], subjects=["*"])],
                              access_log=access_section(prefix), env={"ACCESS_QUERY_KEY": QUERY_KEY})
    try:
        sparktide = await client.post(calls.ROUTE, headers=calls.headers(**{"Idempotency-Key": "exec-acc"}),
                                      json=calls.body("u-alice", "team-a", query=QUERY, executionId="exec-acc",
                                                      runId="run-acc", traceId="trace-acc"))
        agentarts = await client.post("/knowledge-bases/retrieve", headers=bearer(), data=json.dumps({
            "knowledge_base_ids": [kb.id], "query": QUERY, "method": "doc",
            "extra_params": [{"key": "subject_id", "value": "u-bob"}]}))
        dify = await client.post("/retrieval", headers=bearer(), data=json.dumps({
            "knowledge_id": kb.id, "query": QUERY, "retrieval_setting": {"top_k": 3, "score_threshold": 0}}))
        refused = await client.post("/retrieval", headers=bearer("wrong-key-0123456789"), data=json.dumps({
            "knowledge_id": kb.id, "query": QUERY, "retrieval_setting": {"top_k": 3}}))
        assert [r.status for r in (sparktide, agentarts, dify, refused)] == [200, 200, 200, 403]
        answers = {
            "sparktide": [(i["documentId"], i["id"], i["score"]) for i in (await sparktide.json())["items"]],
            "agentarts": [(r["file_id"], r["chunk_id"], r["score"])
                          for r in (await agentarts.json())["search_result_list"]],
            "dify": [(r["metadata"]["document_id"], r["metadata"]["chunk_id"], r["score"])
                     for r in (await dify.json())["records"]],
        }
        ids = {name: r.headers["X-Access-Record"] for name, r in
               (("sparktide", sparktide), ("agentarts", agentarts), ("dify", dify), ("refused", refused))}
        found = await records_of(engine, prefix, list(ids.values()))
        assert set(ids.values()) <= set(found)
        assert len(found) == 4  # one record per request, no more

        for name, served in answers.items():
            record = found[ids[name]]
            assert served, name
            assert [(s["document_id"], s["chunk_id"], s["score"]) for s in record["served"]] == served, name
            assert record["documents"] == list(dict.fromkeys(d for d, _, _ in served))
            assert record["status"] == 200 and record["code"] == "" and record["knowledge_ids"] == [kb.id]
            assert record["protocol"] == name and record["app_id"] == "app-1" and record["tenants"] == ["team-a"]
            assert len(record["query_hmac"]) == 32
            assert QUERY not in json.dumps(record) and "zebracorn" not in json.dumps(record)
            assert "content" not in json.dumps(record["served"])
        assert len({found[ids[n]]["query_hmac"] for n in answers}) == 1  # the same query correlates
        spark = found[ids["sparktide"]]
        assert (spark["credential"], spark["subject"], spark["execution_id"], spark["run_id"], spark["trace_id"]) == (
            "callback:TEST_CALLBACK_KEY", "u-alice", "exec-acc", "run-acc", "trace-acc")
        assert spark["knowledge"] == [{"id": kb.id, "version": "1.0.0"}]
        arts = found[ids["agentarts"]]
        assert (arts["credential"], arts["subject"], arts["acting_subject"]) == ("key:TEST_API_KEY", "u-bob", "u-bob")
        assert "secret-plan" in arts["documents"]  # u-bob's own document, served to u-bob only
        assert "secret-plan" not in spark["documents"]
        refusal = found[ids["refused"]]
        assert (refusal["status"], refusal["code"], refusal["served"], refusal["credential"]) == (
            403, "KNOWLEDGE_ACCESS_DENIED", [], None)
        assert API_KEY not in json.dumps(found) and TEST_ENV["TEST_CALLBACK_KEY"] not in json.dumps(found)

        # A retried callback (same executionId) is answered from the idempotency window: its record still says
        # what it served.
        retry = await client.post(calls.ROUTE, headers=calls.headers(**{"Idempotency-Key": "exec-acc"}),
                                  json=calls.body("u-alice", "team-a", query=QUERY, executionId="exec-acc",
                                                  runId="run-acc", traceId="trace-acc"))
        retried = (await records_of(engine, prefix, [retry.headers["X-Access-Record"]]))[
            retry.headers["X-Access-Record"]]
        assert retried["served"] == spark["served"]

        # `es-provider access` finds them, newest first.
        config = write_config(tmp_path / "config.toml", engine.url, [], sections={"access_log": {"index": prefix}})
        by_document = run_access(config, "--document", "secret-plan")
        assert [r["id"] for r in by_document] == [ids["agentarts"]]
        by_subject = run_access(config, "--subject", "u-alice", "--since", "1h")
        # SparkTide's callback and Dify's key both answered u-alice (the key's own subject); the retry last.
        assert [r["id"] for r in by_subject] == [retry.headers["X-Access-Record"], ids["dify"], ids["sparktide"]]
        assert run_access(config, "--document", "doc-0", "--limit", "2") == sorted(
            [found[i] for i in ids.values() if "doc-0" in found[i]["documents"]] + [retried],
            key=lambda r: (r["time"], r["id"]), reverse=True)[:2]
        assert run_access(config, "--kb", "no-such-kb") == []
    finally:
        await drop_records(engine, prefix)


@pytest.mark.engines  # what differs by engine: the access record's bulk creates
async def test_records_queued_before_a_sigterm_are_written_before_the_exit(opensearch, engine, kb, prefix,
                                                                            tmp_path) -> None:
    await load_records(engine, kb, DOCS)
    # Records wait up to a minute before a batch goes out: only the stop can have written them.
    config = write_config(tmp_path / "config.toml", opensearch.url, [kb_entry(kb.alias, id=kb.id)],
                          principals={"u-alice": ["eng"]},
                          sections={"access_log": {"index": prefix, "flush_interval_s": 60, "max_delay_s": 300}})
    served = Served(config, TEST_ENV, tmp_path / "service.log")
    try:
        import aiohttp

        ids = []
        async with aiohttp.ClientSession() as session:
            for n in range(5):
                async with session.post(served.base + calls.ROUTE, json=calls.body(executionId=f"stop-{n}"),
                                        headers=calls.headers(**{"Idempotency-Key": f"stop-{n}"})) as response:
                    assert response.status == 200
                    ids.append(response.headers["X-Access-Record"])
        await engine.refresh(f"{prefix}-*")  # today's and tomorrow's indices are made ahead, empty
        assert len(await engine.list_indices(f"{prefix}-*")) == 2 and await engine.count(f"{prefix}-*") == 0
        assert served.stop(timeout=60) == 0
        found = await records_of(engine, prefix, ids)
        assert set(ids) <= set(found), served.logs()[-3000:]
    finally:
        served.stop()
        await drop_records(engine, prefix)


async def test_a_stopped_sink_refuses_answers_until_it_recovers(engine, kb, client_for, prefix) -> None:
    await load_records(engine, kb, DOCS)
    sink = await EngineProxy(engine.url).start()
    # Without the spool (test_reliability_access.py has it): past max_delay_s, answers are refused.
    client = await client_for(kb, access_log=access_section(prefix, url=sink.url, max_delay_s=0.3, spool=False),
                              env={"ACCESS_QUERY_KEY": QUERY_KEY})
    try:
        async def ask(n: int) -> Any:
            return await client.post(calls.ROUTE, headers=calls.headers(**{"Idempotency-Key": f"sink-{n}"}),
                                     json=calls.body(executionId=f"sink-{n}"))

        assert (await ask(0)).status == 200
        sink.status = 503  # the records' engine stops taking writes; the search engine is fine
        first_failure = time.monotonic()
        statuses = []
        while time.monotonic() - first_failure < 3:
            statuses.append((await ask(len(statuses) + 1)).status)
            await asyncio.sleep(0.05)
        assert statuses[0] == 200 and statuses[-1] == 503, statuses  # down after max_delay_s, not at once
        refused = await ask(1000)
        assert refused.status == 503 and await refused.json() == {"error": {"code": "KNOWLEDGE_UNAVAILABLE"}}
        metrics = await (await client.get("/metrics")).text()
        assert metric(metrics, "es_provider_access_refused_answers_total") >= 1

        sink.status = None  # it recovers: what waited is written, and answers are given again
        deadline = time.monotonic() + 15
        while (await ask(2000 + int(time.monotonic()))).status != 200:
            assert time.monotonic() < deadline, "answers did not come back after the sink recovered"
            await asyncio.sleep(0.2)
        metrics = await (await client.get("/metrics")).text()
        assert metric(metrics, "es_provider_access_records_dropped_total") == 0
    finally:
        await sink.close()
        await drop_records(engine, prefix)


async def test_count_mode_answers_and_counts_every_dropped_record(engine, kb, client_for, prefix, caplog) -> None:
    await load_records(engine, kb, DOCS)
    dead = f"http://127.0.0.1:{free_port()}"
    # No flush during the ten requests (a writer that took a batch would free the queue for more): three are queued,
    # seven dropped, whatever the machine's speed.
    client = await client_for(kb, access_log=access_section(prefix, url=dead, on_sink_failure="count",
                                                             max_queued=3, spool=False, flush_interval_s=60,
                                                             max_delay_s=120),
                              env={"ACCESS_QUERY_KEY": QUERY_KEY})
    for n in range(10):
        response = await client.post(calls.ROUTE, headers=calls.headers(**{"Idempotency-Key": f"count-{n}"}),
                                     json=calls.body(executionId=f"count-{n}"))
        assert response.status == 200
    metrics = await (await client.get("/metrics")).text()
    assert metric(metrics, 'es_provider_access_records_dropped_total{reason="queue_full"}') == 7
    assert "records dropped since the last line" in caplog.text


async def test_file_sink_writes_json_lines_that_access_reads(engine, kb, client_for, tmp_path) -> None:
    await load_records(engine, kb, DOCS)
    folder = tmp_path / "records"
    client = await client_for(kb, access_log={"sinks": ["file"], "directory": str(folder), "flush_interval_s": 0.1})
    response = await client.post(calls.ROUTE, headers=calls.headers(**{"Idempotency-Key": "file-1"}),
                                 json=calls.body(executionId="file-1", query=QUERY))
    assert response.status == 200
    for _ in range(100):  # up to 10 s
        if list(folder.glob("access-*.jsonl")):
            break
        await asyncio.sleep(0.1)
    (written,) = folder.glob("access-*.jsonl")
    (line,) = written.read_text().splitlines()
    assert json.loads(line)["id"] == response.headers["X-Access-Record"] and QUERY not in line
    config = write_config(tmp_path / "config.toml", engine.url, [],
                          sections={"access_log": {"sinks": ["file"], "directory": str(folder)}})
    assert [r["id"] for r in run_access(config, "--subject", "u-alice")] == [response.headers["X-Access-Record"]]


VIEW_KEY = "access-view-key-0123456789"
WORKBENCH_KEY = "workbench-key-0123456789"


@pytest.mark.engines  # what differs by engine: the access record's searches
async def test_the_access_view_answers_only_its_own_key(engine, kb, client_for, prefix) -> None:
    await load_records(engine, kb, DOCS)
    client = await client_for(kb, access_log=access_section(prefix, view_key_ref="VIEW_KEY"),
                              workbench={"enabled": True, "key_ref": "WB_KEY"},
                              env={"ACCESS_QUERY_KEY": QUERY_KEY, "VIEW_KEY": VIEW_KEY, "WB_KEY": WORKBENCH_KEY},
                              api_keys=[api_key([kb.id], tenants=["team-a"], subjects=["*"])])
    try:
        answered = await client.post("/knowledge-bases/retrieve", headers=bearer(), data=json.dumps({
            "knowledge_base_ids": [kb.id], "query": QUERY, "method": "doc",
            "extra_params": [{"key": "subject_id", "value": "u-bob"}]}))
        assert answered.status == 200
        await records_of(engine, prefix, [answered.headers["X-Access-Record"]])
        lookup = json.dumps({"document_id": "secret-plan", "since": "1h"})

        page = await client.get("/workbench/access")
        assert page.status == 401 and "access view key" in await page.text() and "access.js" not in await page.text()
        for token in (None, WORKBENCH_KEY, API_KEY, TEST_ENV["TEST_CALLBACK_KEY"]):
            sent = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
            refused = await client.post("/workbench/access/api/served", headers=sent, data=lookup)
            assert refused.status == 401 and "records" not in await refused.text(), token
        # The view's key opens neither the workbench nor a platform protocol.
        assert (await client.get("/workbench/api/setup", headers={"Authorization": f"Bearer {VIEW_KEY}"})).status == 401
        assert (await client.post("/retrieval", headers=bearer(VIEW_KEY), data="{}")).status == 403

        by_key = await client.post("/workbench/access/api/served", data=lookup,
                                   headers={"Authorization": f"Bearer {VIEW_KEY}", "Content-Type": "application/json"})
        records = (await by_key.json())["records"]
        assert [r["id"] for r in records] == [answered.headers["X-Access-Record"]]
        assert records[0]["subject"] == "u-bob" and records[0]["credential"] == "key:TEST_API_KEY"

        login = await client.post("/workbench/access/login", data={"key": VIEW_KEY}, allow_redirects=False)
        assert login.status == 303 and login.headers["Location"] == "/workbench/access"
        assert "Path=/workbench/access" in login.headers["Set-Cookie"] and VIEW_KEY not in login.headers["Set-Cookie"]
        assert (await client.get("/workbench/access")).status == 200  # the client keeps the cookie
        assert (await client.get("/workbench/access/access.js")).status == 200
        by_session = await client.post("/workbench/access/api/served", data=lookup,
                                       headers={"Content-Type": "application/json"})
        assert [r["id"] for r in (await by_session.json())["records"]] == [answered.headers["X-Access-Record"]]
        # The lookups are in the record too (who looked, not what was found).
        looked = await records_of(engine, prefix, [by_session.headers["X-Access-Record"]])
        mine = looked[by_session.headers["X-Access-Record"]]
        assert (mine["protocol"], mine["credential"], mine["documents"]) == ("access-view", "access-view:session", [])
    finally:
        await drop_records(engine, prefix)
