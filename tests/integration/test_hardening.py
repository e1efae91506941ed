"""Regression tests for the adversarial test's findings (one per finding, 1–8), on the real node and the real app.
The permission oracle over knowledge bases without mandatory filters is in test_three_protocols_oracle.py."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from typing import Any

import pytest
from helpers import acl_corpus
from helpers.calls import ROUTE, body, headers
from helpers.served import Served, write_config
from helpers.setup import CALLBACK_SECRET, TEST_ENV, api_key, bearer, load_records, new_kb

from es_provider.search.query import MAX_QUERY_UNITS, bounded_text, text_fields

# --- 1. API keys read within their tenants on every knowledge base ---


async def _key_answers(client: Any, kb_id: str) -> tuple[set[str], set[str]]:
    response = await client.post("/knowledge-bases/retrieve", headers=bearer(), data=json.dumps({
        "knowledge_base_ids": [kb_id], "query": "alpha", "method": "doc", "top_k": 100, "limit": 100}))
    assert response.status == 200
    agentarts = {r["file_id"] for r in (await response.json())["search_result_list"]}
    response = await client.post("/retrieval", headers=bearer(), data=json.dumps({
        "knowledge_id": kb_id, "query": "alpha", "retrieval_setting": {"top_k": 100, "score_threshold": 0}}))
    assert response.status == 200
    return agentarts, {r["metadata"]["document_id"] for r in (await response.json())["records"]}


async def test_keys_stay_in_their_tenants_without_mandatory_filters(engine, kb, client_for, caplog) -> None:
    await load_records(engine, kb, acl_corpus.documents())
    bases = [
        new_kb(id="no-filters", alias=kb.alias, mandatory_filters=[]),
        new_kb(id="legacy", alias=kb.alias, mandatory_filters=[], protocol="legacy"),
        new_kb(id="subject-only", alias=kb.alias, mandatory_filters=["SUBJECT"]),
    ]
    with caplog.at_level(logging.WARNING, logger="es_provider.app"):
        client = await client_for(*bases, principals=acl_corpus.GROUPS,
                                  api_keys=[api_key([b.id for b in bases], tenants=["team-a"], subject="u-alice")])
    assert "no-filters has no mandatory_filters" in caplog.text and "legacy has no mandatory_filters" in caplog.text

    in_team_a = acl_corpus.visible("u-alice", "team-a", ("TENANT",))
    assert "team-b-bob" not in in_team_a  # the kind of chunk the adversarial test read through a team-a key
    expected = {"no-filters": in_team_a, "legacy": in_team_a, "subject-only": acl_corpus.visible("u-alice", "team-a")}
    for base in bases:
        agentarts, dify = await _key_answers(client, base.id)
        assert agentarts == dify == expected[base.id], base.id


async def test_reading_across_tenants_is_explicit_and_logged(engine, kb, client_for, caplog) -> None:
    await load_records(engine, kb, acl_corpus.documents())
    open_kb = new_kb(id="open", alias=kb.alias, mandatory_filters=[], open_to_keys=True)
    with caplog.at_level(logging.WARNING, logger="es_provider.app"):
        client = await client_for(open_kb, principals=acl_corpus.GROUPS,
                                  api_keys=[api_key(["open"], tenants=["team-a"], subject="u-alice")])
    assert "open is open_to_keys: API keys read every tenant's chunks" in caplog.text
    everything = {d["document_id"] for d in acl_corpus.documents()}
    assert await _key_answers(client, "open") == (everything, everything)


# --- 2. stalled bodies and one busy key starve nobody ---


async def _stall(port: int, path: str, key: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write((f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                  "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{").encode())
    await writer.drain()
    return reader, writer


async def test_stalled_bodies_are_cut_off_and_hold_no_slot(engine, kb, client_for) -> None:
    await load_records(engine, kb, acl_corpus.documents())
    client = await client_for(kb, principals=acl_corpus.GROUPS, env={"STALLER": "staller-key-000000"},
                              api_keys=[api_key([kb.id]), api_key([], ref="STALLER")],
                              server={"max_concurrency": 8, "max_concurrency_per_key": 4, "body_timeout_s": 1.5})
    port = client.server.port
    # A key with no knowledge base at all (and a SparkTide caller) open three times the service's slots and stall
    # every body.
    stalled = [await _stall(port, path, key) for path, key in [("/retrieval", "staller-key-000000"),
                                                               ("/knowledge-bases/retrieve", "staller-key-000000"),
                                                               (ROUTE, CALLBACK_SECRET)] * 8]
    await asyncio.sleep(0.2)
    assert (await client.get("/readyz")).status == 200
    for _ in range(3):
        response = await client.post("/retrieval", headers=bearer(), data=json.dumps({
            "knowledge_id": kb.id, "query": "alpha", "retrieval_setting": {"top_k": 3, "score_threshold": 0}}))
        assert response.status == 200, await response.text()
        execution = f"e-{uuid.uuid4().hex[:8]}"
        response = await client.post(ROUTE, json=body(executionId=execution),
                                     headers=headers(**{"Idempotency-Key": execution}))
        assert response.status == 200, await response.text()
    # After body_timeout_s every stalled request is answered 408 in its protocol's body and its connection closed.
    answers = []
    for reader, writer in stalled:
        raw = await asyncio.wait_for(reader.read(), timeout=10)
        writer.close()
        answers.append(raw)
    assert all(a.startswith(b"HTTP/1.1 408") for a in answers), answers[0][:200]
    assert any(b'"error":{"code":"KNOWLEDGE_PROTOCOL_ERROR"}' in a for a in answers)
    metrics = await (await client.get("/metrics")).text()
    assert "es_provider_slow_bodies_total 24.0" in metrics
    assert "es_provider_in_flight 0.0" in metrics


async def test_one_key_cannot_starve_another(engine, kb, proxy, client_for) -> None:
    await load_records(engine, kb, acl_corpus.documents())
    client = await client_for(kb, url=proxy.url, principals=acl_corpus.GROUPS, env={"BUSY": "busy-key-00000000"},
                              api_keys=[api_key([kb.id]), api_key([kb.id], ref="BUSY")],
                              server={"max_concurrency": 16, "max_concurrency_per_key": 3})
    proxy.delay_s = 0.3

    def ask(key: str) -> Any:
        return client.post("/retrieval", headers=bearer(key), data=json.dumps({
            "knowledge_id": kb.id, "query": "alpha", "retrieval_setting": {"top_k": 3, "score_threshold": 0}}))

    busy = [asyncio.ensure_future(ask("busy-key-00000000")) for _ in range(20)]
    await asyncio.sleep(0.05)
    calm = await asyncio.gather(*(ask("test-api-key-0123456789") for _ in range(3)))
    busy_statuses = sorted([(await r).status for r in busy])
    assert [r.status for r in calm] == [200, 200, 200]
    # At most 3 of the busy key's requests run at a time: the rest of a burst is refused at once.
    assert set(busy_statuses) == {200, 429} and busy_statuses.count(429) >= 10, busy_statuses


# --- 3. metadata values cannot make the engine fail, nor tell which keys exist elsewhere ---


async def test_metadata_value_bounds_do_not_depend_on_other_tenants(engine, kb, client_for) -> None:
    records = [{"document_id": "mine", "content": "alpha mine", "tenant_id": "team-a", "acl": {"public": True},
                "metadata": {"shared_key": "x"}},
               {"document_id": "theirs", "content": "alpha theirs", "tenant_id": "team-b", "acl": {"public": True},
                "metadata": {"only_team_b": "secret-project-name", "team_b_number": 7}}]
    await load_records(engine, kb, records)
    client = await client_for(kb, api_keys=[api_key([kb.id])])

    async def ask(name: str, operator: str, value: Any) -> tuple[int, Any]:
        response = await client.post("/retrieval", headers=bearer(), data=json.dumps({
            "knowledge_id": kb.id, "query": "alpha", "retrieval_setting": {"top_k": 5, "score_threshold": 0},
            "metadata_condition": {"logical_operator": "and", "conditions": [
                {"name": name, "comparison_operator": operator, "value": value}]}}))
        return response.status, await response.json()

    for operator in ("contains", "not contains", "start with", "end with"):
        long_value = "s" * 400
        elsewhere = await ask("only_team_b", operator, long_value)
        nowhere = await ask("nobody_has_this", operator, long_value)
        assert elsewhere == nowhere, (operator, elsewhere, nowhere)
        assert elsewhere[0] == 400 and "at most 128 characters" in elsewhere[1]["error_msg"]
        for value in ("s" * 128, "中" * 128, "\U00020000" * 128, "a" * 128):
            status, _ = await ask("only_team_b", operator, value)
            assert status == 200, (operator, value[:3])

    # An integer beyond a double: the same 400 whether another tenant maps the key as a number or nobody has it
    # (it was a 503 exactly when team-b's chunks held the key: an oracle for another tenant's key names).
    for operator in ("is", "is not", "=", "≥", "in"):
        huge = [int("9" * 400)] if operator == "in" else int("9" * 400)
        elsewhere = await ask("team_b_number", operator, huge)
        nowhere = await ask("nobody_has_this", operator, huge)
        assert elsewhere == nowhere, (operator, elsewhere, nowhere)
        assert elsewhere[0] == 400 and "finite number" in elsewhere[1]["error_msg"], elsewhere


# --- 4. the longest query of every script class is answered ---

SCRIPTS = {
    "latin words": "b " * 8192,
    "one long word": "x" * 16384,
    "cjk": "中" * 16384,
    "cjk extension b": "\U00020000" * 16384,
    "hiragana": "ひ" * 16384,
    "katakana": "カ" * 16384,
    "half-width katakana": "ｶ" * 16384,
    "hangul": "한" * 16384,
    "emoji": "\U0001f600" * 16384,
    "thai": "ส" * 16384,
    "arabic": "ب" * 16384,
    "alternating": "a中" * 8192,
    "digits and punctuation": "1.2,3-" * 2730,
}


async def test_the_longest_query_of_each_script_is_answered(engine, kb, opensearch, client_for) -> None:
    await load_records(engine, kb, acl_corpus.documents())
    client = await client_for(kb, principals=acl_corpus.GROUPS, api_keys=[api_key([kb.id])],
                              server={"max_body_bytes": 1024 * 1024})
    index = (await engine.alias_targets(kb.alias))[0]
    for name, query in SCRIPTS.items():
        # What the analyzers make of the bounded text stays within the unit bound, field by field.
        kept = bounded_text(query)
        for field in text_fields(kept):
            tokens = await engine._client.indices.analyze(index=index, body={"field": field, "text": kept})
            assert len(tokens["tokens"]) <= MAX_QUERY_UNITS, (name, field, len(tokens["tokens"]))
        execution = f"long-{uuid.uuid4().hex[:8]}"
        response = await client.post(ROUTE, json=body(query=query[:16384], executionId=execution),
                                     headers=headers(**{"Idempotency-Key": execution}))
        assert response.status == 200, (name, await response.text())
        response = await client.post("/knowledge-bases/retrieve", headers=bearer(), data=json.dumps({
            "knowledge_base_ids": [kb.id], "query": query[:4096], "method": "doc"}))
        assert response.status == 200, (name, await response.text())
        response = await client.post("/retrieval", headers=bearer(), data=json.dumps({
            "knowledge_id": kb.id, "query": query, "retrieval_setting": {"top_k": 3, "score_threshold": 0}}))
        assert response.status == 200, (name, await response.text())


# --- 5. a signed callback from the future cannot be replayed; malformed timestamps are a refusal ---


def _signed(payload: dict[str, Any], timestamp: str, secret: str = CALLBACK_SECRET) -> tuple[bytes, dict[str, str]]:
    raw = json.dumps(payload).encode()
    signature = hmac.new(secret.encode(), timestamp.encode() + b"." + raw, hashlib.sha256).hexdigest()
    return raw, {**headers(**{"Idempotency-Key": payload["executionId"]}), "X-Knowledge-Timestamp": timestamp,
                 "X-Knowledge-Signature": signature}


async def test_future_signed_callback_cannot_be_replayed(engine, kb, client_for) -> None:
    signed_kb = new_kb(alias=kb.alias, signature=True)
    client = await client_for(signed_kb, principals=acl_corpus.GROUPS,
                              server={"signature_window_s": 2.0, "signature_future_skew_s": 2.0})
    raw, sent = _signed(body(executionId="replay-1"), str(int(time.time() * 1000) + 1500))
    assert (await client.post(ROUTE, data=raw, headers=sent)).status == 200
    await asyncio.sleep(2.2)  # past "first use + window", not yet past "timestamp + window"
    replay = await client.post(ROUTE, data=raw, headers=sent)
    assert replay.status == 401 and await replay.json() == {"error": {"code": "KNOWLEDGE_ACCESS_DENIED"}}
    raw, sent = _signed(body(executionId="replay-2"), str(int(time.time() * 1000) + 60_000))
    assert (await client.post(ROUTE, data=raw, headers=sent)).status == 401  # too far in the future
    for malformed in ("¹⁷", "١٧٠٠٠٠٠٠٠٠", "17e9", "-1", " 1"):
        raw, sent = _signed(body(executionId="replay-3"), "1")
        sent["X-Knowledge-Timestamp"] = malformed
        response = await client.post(ROUTE, data=raw, headers={k: v.encode().decode("latin-1") for k, v in
                                                               sent.items()})
        assert response.status == 401, malformed


# --- 6. ingest refuses duplicate keys, naming the line ---


async def test_ingest_refuses_duplicate_keys(engine, kb, opensearch, tmp_path) -> None:
    entry = {"id": kb.id, "name": kb.name, "versions": ["1.0.0"], "alias": kb.alias,
             "mandatory_filters": ["TENANT", "SUBJECT"], "top_k": 10, "secret_ref": "TEST_CALLBACK_KEY",
             "apps": ["app-1"]}
    config = write_config(tmp_path / "config.toml", opensearch.url, [entry])
    records = tmp_path / "docs.jsonl"
    records.write_text("\n".join([
        json.dumps({"document_id": "fine", "content": "alpha", "tenant_id": "team-a", "acl": {"public": True}}),
        '{"document_id": "tricky", "content": "alpha", "tenant_id": "team-b", "acl": {"public": false}, '
        '"tenant_id": ""}',
        '{"document_id": "tricky2", "content": "alpha", "acl": {"public": false, "public": true}}',
    ]) + "\n")
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "es_provider.cli", "ingest", "--config", str(config), "--kb", kb.id,
                         str(records)], env={**os.environ, **TEST_ENV, "OPENSEARCH_URL": opensearch.url},
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "docs.jsonl:2: record has a duplicate key 'tenant_id'" in done.stdout + done.stderr
    assert "docs.jsonl:3: record has a duplicate key 'public'" in done.stdout + done.stderr
    await engine.refresh(kb.alias)
    stored = await engine.count(kb.alias)
    assert stored == 1  # only the good record


# --- 7. one executionId is answered once, even when duplicates arrive together ---


async def test_concurrent_duplicates_of_one_execution(engine, kb, proxy, client_for) -> None:
    await load_records(engine, kb, acl_corpus.documents())
    client = await client_for(kb, url=proxy.url, principals=acl_corpus.GROUPS)
    proxy.delay_s = 0.3
    queries = ["alpha", "installation", "note", "alpha note", "team", "document"]
    different = await asyncio.gather(*(
        client.post(ROUTE, json=body(query=q, executionId="race-1"), headers=headers(**{"Idempotency-Key": "race-1"}))
        for q in queries))
    statuses = sorted(r.status for r in different)
    assert statuses == [200, 422, 422, 422, 422, 422], statuses
    before = proxy.searches
    same = await asyncio.gather(*(
        client.post(ROUTE, json=body(executionId="race-2"), headers=headers(**{"Idempotency-Key": "race-2"}))
        for _ in range(6)))
    assert [r.status for r in same] == [200] * 6
    assert len({await r.read() for r in same}) == 1
    assert proxy.searches - before == 1


# --- 8. logs: no forged lines, disconnects are not failures ---


@pytest.fixture
def text_logged(opensearch, kb, tmp_path) -> Any:
    entry = {"id": kb.id, "name": kb.name, "versions": ["1.0.0"], "alias": kb.alias,
             "mandatory_filters": ["TENANT", "SUBJECT"], "top_k": 5, "secret_ref": "TEST_CALLBACK_KEY",
             "apps": ["app-1"], "signature": True}
    config = write_config(tmp_path / "config.toml", opensearch.url, [entry])
    served = Served(config, {**TEST_ENV, "OPENSEARCH_URL": opensearch.url}, tmp_path / "service.log",
                    args=("--log-format", "text"))
    yield served
    served.stop()


def _raw_request(port: int, data: bytes, *, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        if not read:
            return b""
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_logs_are_not_forged_and_disconnects_are_not_failures(text_logged: Served) -> None:
    port = text_logged.port
    forged = "/agent/knowledge/x%0A2026-12-01%2000:00:00,000%20CRITICAL%20es_provider.security%20forged/1.0.0"
    answer = _raw_request(port, f"POST {forged} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                f"Authorization: Bearer {CALLBACK_SECRET}\r\nContent-Length: 0\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 403")
    # A client that sends half its body and hangs up.
    _raw_request(port, (f"POST {ROUTE} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {CALLBACK_SECRET}\r\n"
                        "Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"proto").encode(), read=False)
    # A timestamp that str.isdigit() accepts and int() refuses.
    stamp = "¹⁷".encode()
    answer = _raw_request(port, b"POST " + ROUTE.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                          b"Authorization: Bearer " + CALLBACK_SECRET.encode() + b"\r\nContent-Type: application/json"
                          b"\r\nX-Knowledge-Timestamp: " + stamp + b"\r\nX-Knowledge-Signature: ab\r\n"
                          b"Content-Length: 2\r\n\r\n{}")
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    time.sleep(0.5)
    with urllib.request.urlopen(f"{text_logged.base}/metrics") as response:
        metrics = response.read().decode()
    logs = text_logged.logs()
    assert "Traceback" not in logs and " ERROR " not in logs, logs[-3000:]
    assert not any(line.startswith("2026-12-01 00:00:00,000") for line in logs.splitlines()), "a forged line"
    assert "x\\x0a2026-12-01 00:00:00,000 CRITICAL es_provider.security forged" in logs
    assert "client disconnected" in logs
    assert 'code="CLIENT_DISCONNECTED",route="/agent/knowledge/{knowledge_id}/{version}",status="499"' in metrics
    assert "KNOWLEDGE_UNAVAILABLE" not in metrics


async def test_a_process_sweeps_the_replay_index_before_its_first_signed_call(engine) -> None:
    """A restarted process (or one that never gets a signed call) still forgets expired signatures that others
    wrote: the sweep used to start only after this process's own first signed callback."""
    from es_provider.core.deadline import fixed_budget
    from es_provider.edge.replays import SharedReplays

    index = f"test-replays-{uuid.uuid4().hex}"
    writer = SharedReplays(engine, index)
    budget = fixed_budget(5000, now_monotonic=time.monotonic())
    assert await writer.first_use("expired-digest", time.time() - 1, budget)
    await engine.refresh(index)
    fresh = SharedReplays(engine, index)
    sweeping = asyncio.create_task(fresh.sweep(0.05))
    try:
        for _ in range(100):
            await asyncio.sleep(0.1)
            await engine.refresh(index)
            found = await engine.search(index, {"query": {"match_all": {}}}, fixed_budget(
                5000, now_monotonic=time.monotonic()))
            left = found.get("hits", {}).get("hits", [])  # filter_path drops an empty list
            if not left:
                break
        assert not left, "the expired signature was never swept"
    finally:
        sweeping.cancel()
        await engine.delete_index(index)


# the engine's search task must be gone within seconds of the budget's end: timed, so run alone (-m timing)
@pytest.mark.timing
async def test_a_search_stops_on_the_engine_when_its_budget_ends(engine, kb) -> None:
    """When a request's budget ends, its search's connection is closed, and the engine cancels the search task
    (OpenSearch and Elasticsearch cancel a search whose HTTP channel closed): it does not go on burning CPU."""
    from es_provider.core.deadline import fixed_budget
    from es_provider.core.errors import KnowledgeError

    await load_records(engine, kb, [{"document_id": f"d{i}", "content": f"alpha {i}", "tenant_id": "team-a",
                                     "acl": {"public": True}} for i in range(4000)])
    # 400,000 square roots per chunk: about 5 s of engine CPU here when not cancelled.
    slow = {"size": 5, "query": {"script_score": {"query": {"match_all": {}}, "script": {
        "source": "double s = 0; for (int i = 0; i < 400000; i++) { s += Math.sqrt(i); } return s;"}}}}

    async def running() -> list[dict[str, Any]]:  # this test's searches only (other tests may search meanwhile)
        tasks = await engine._client.tasks.list(actions="*search*", detailed=True)
        return [task for node in tasks["nodes"].values() for task in node["tasks"].values()
                if kb.alias in str(task.get("description", ""))]

    started = time.monotonic()
    with pytest.raises(KnowledgeError):
        await engine.search(kb.alias, slow, fixed_budget(300, now_monotonic=time.monotonic()))
    assert time.monotonic() - started < 2.0
    while not all(task.get("cancelled") for task in await running()):  # marked cancelled (or already gone)
        assert time.monotonic() - started < 2.0, "a search whose budget ended was not cancelled"
        await asyncio.sleep(0.05)
    while await running():
        assert time.monotonic() - started < 4.0, "the engine kept running a search whose budget had ended"
        await asyncio.sleep(0.05)


async def test_metrics_can_ask_for_their_own_token(kb, client_for) -> None:
    from es_provider.core.errors import StartupError

    open_metrics = await client_for(kb)
    assert (await open_metrics.get("/metrics")).status == 200  # the default: a scraper on a private port
    token = "metrics-token-0123456789"
    guarded = await client_for(kb, env={"METRICS_TOKEN": token}, server={"metrics_token_ref": "METRICS_TOKEN"})
    for presented in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": f"Basic {token}"}):
        refused = await guarded.get("/metrics", headers=presented)
        assert refused.status == 401 and await refused.read() == b""
    answered = await guarded.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert answered.status == 200 and b"es_provider_requests_total" in await answered.read()
    with pytest.raises(StartupError, match="its own credential"):
        await client_for(kb, env={"METRICS_TOKEN": CALLBACK_SECRET}, server={"metrics_token_ref": "METRICS_TOKEN"})
