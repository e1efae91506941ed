"""Regression tests for the fourth adversarial test's findings (issue 52) that live in the engine's door and the
search path: redirects (1), an alias that gains an unchecked index (2), a search answer without hits (3), secret
files (6), non-finite scoring (9), `check` against readiness (11). The spool (4, 5), SCIM behind a proxy (8) and
passages (7) have modules of their own; the chart (10) is in tests/repo/test_chart_values.py."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from helpers import calls
from helpers.served import Served, kb_entry, write_config
from helpers.setup import TEST_ENV, api_key, bearer, load_records, new_kb
from helpers.sigv4_front import aws_alone

from es_provider.config.cluster import OpenSearchSettings
from es_provider.core.deadline import fixed_budget
from es_provider.core.errors import KnowledgeError
from es_provider.engine.client import connect
from harness.proxy import EngineProxy
from harness.tls_front import Certificates

# --- 1. No engine client follows a redirect -----------------------------------------------------------------------

TOKEN = "session-token-that-must-stay-home=="


@pytest.fixture
def aws_static(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """botocore's chain sees only these static keys with a session token (x-amz-security-token on every request)."""
    aws_alone(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAREDIRECTTEST0001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "redirect/secret+key0123456789abcdef")
    monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)


async def test_no_engine_client_follows_a_redirect(opensearch, aws_static, tmp_path, caplog) -> None:
    """An https front that answers every request with a 307 to a plain-http origin that would say yes to anything:
    neither client (opensearch-py's for admin, ingest, the CLI and calibrate; the HTTP/1.1 client) goes there, the
    answer is an engine error naming the status and both origins, never a credential."""
    seen: list[dict[str, str]] = []

    def believe_anything(request: web.Request) -> web.StreamResponse:
        seen.append(dict(request.headers))
        return web.json_response({"acknowledged": True, "hits": {"hits": []}})

    elsewhere = await EngineProxy(opensearch.url, gate=believe_anything).start()
    certificates = Certificates(tmp_path / "tls")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates.server_chain, certificates.server_key)

    def redirect(request: web.Request) -> web.StreamResponse:
        return web.Response(status=307, headers={"Location": f"{elsewhere.url}{request.path_qs}"})

    front = await EngineProxy(opensearch.url, gate=redirect, ssl_context=context).start()
    engine = connect(OpenSearchSettings.model_validate(
        {"url": front.url, "ca_file": certificates.ca_file, "aws": {"region": "eu-west-1", "service": "es"}}), {})
    caplog.set_level(logging.DEBUG)
    try:
        calls: dict[str, Any] = {
            "index_exists": lambda: engine.index_exists("kb-anything"),
            "create_index": lambda: engine.create_index("kb-anything", {}),
            "HTTP/1.1 client": lambda: engine.search("kb-anything", {"query": {"match_all": {}}},
                                                 fixed_budget(5000, now_monotonic=time.monotonic())),
        }
        for name, call in calls.items():
            with pytest.raises(KnowledgeError) as refused:
                await call()
            detail = refused.value.detail or ""
            assert "307" in detail and "redirect" in detail, (name, detail)
            assert front.url.rstrip("/") in detail, (name, detail)
            assert TOKEN not in detail and "secret" not in detail, (name, detail)
        assert seen == [], "a client followed the redirect to the other origin"
        assert TOKEN not in caplog.text
    finally:
        await engine.close()
        await front.close()
        await elsewhere.close()


# --- 3. A search answer of the wrong shape is unavailable, never "no match" -------------------------------------

async def _readiness(client: Any, status: int, *, within_s: float) -> bool:
    """Whether /readyz answers `status` within `within_s` (its checks run in the background)."""
    until = time.monotonic() + within_s
    while time.monotonic() < until:
        if (await client.get("/readyz")).status == status:
            return True
        await asyncio.sleep(0.2)
    return False


async def _three_protocols(client: Any, kb_id: str) -> dict[str, tuple[int, Any]]:
    execution = f"exec-{uuid.uuid4().hex[:10]}"
    sparktide = await client.post(calls.ROUTE, headers=calls.headers(**{"Idempotency-Key": execution}),
                                  json=calls.body(executionId=execution))
    agentarts = await client.post("/knowledge-bases/retrieve", headers=bearer(), data=json.dumps({
        "knowledge_base_ids": [kb_id], "query": "installation", "method": "doc"}))
    dify = await client.post("/retrieval", headers=bearer(), data=json.dumps({
        "knowledge_id": kb_id, "query": "installation", "retrieval_setting": {"top_k": 3, "score_threshold": 0}}))
    return {name: (response.status, await response.json())
            for name, response in (("sparktide", sparktide), ("agentarts", agentarts), ("dify", dify))}


@pytest.mark.parametrize("answer", [{}, {"took": 3, "_shards": {"total": 1, "successful": 1, "failed": 0}},
                                    {"took": 1, "timed_out": False, "hits": None}])
async def test_a_search_answer_without_hits_is_unavailable(engine, kb, opensearch, client_for, answer) -> None:
    await load_records(engine, kb, [{"document_id": "d-1", "title": "t", "content": "installation guide",
                                     "source": {"type": "DOCUMENT", "id": "d-1", "version": "v1"},
                                     "acl": {"public": True}, "tenant_id": "team-a"}])
    shaped = False

    def wrong_shape(request: web.Request) -> web.StreamResponse | None:
        if shaped and request.path.endswith("/_search"):
            return web.json_response(answer)
        return None

    front = await EngineProxy(opensearch.url, gate=wrong_shape).start()
    try:
        client = await client_for(kb, url=front.url, api_keys=[api_key([kb.id], tenants=["team-a"])])
        assert {name: status for name, (status, _) in (await _three_protocols(client, kb.id)).items()} == {
            "sparktide": 200, "agentarts": 200, "dify": 200}
        shaped = True
        answers = await _three_protocols(client, kb.id)
        assert answers["sparktide"][0] == 503 and answers["sparktide"][1]["error"]["code"] == "KNOWLEDGE_UNAVAILABLE"
        assert answers["agentarts"][0] == 503, answers["agentarts"]
        assert answers["dify"][0] == 503 and answers["dify"][1]["error_code"] != 0, answers["dify"]
        for _, body_ in answers.values():
            assert "items" not in body_ and "records" not in body_ and "search_result_list" not in body_
        assert await _readiness(client, 503, within_s=10.0), "/readyz stayed ready"
    finally:
        await front.close()


# --- 2. An index that joins the alias is checked before any of its hits is served --------------------------------

CHECKED_MAPPING = {"properties": {
    "body": {"type": "text"}, "heading": {"type": "text"}, "doc_id": {"type": "keyword"},
    "tenant": {"type": "keyword"}, "owner": {"type": "keyword"}, "allowed_groups": {"type": "keyword"}}}
# The index that joins later: another pipeline's, whose documents keep their ACL under other names.
UNCHECKED_MAPPING = {"properties": {
    "body": {"type": "text"}, "heading": {"type": "text"}, "doc_id": {"type": "keyword"},
    "tenant": {"type": "keyword"}, "acl_users": {"type": "keyword"}, "acl_groups": {"type": "keyword"}}}
CORP_FIELDS = {"text": ["body", "heading"], "title": "heading", "document_id": "doc_id", "tenant": "tenant",
               "subjects": "owner", "groups": "allowed_groups"}


async def _company_index(engine: Any, mapping: dict[str, Any], docs: list[dict[str, Any]]) -> str:
    name = f"corp-{uuid.uuid4().hex[:10]}"
    await engine.create_index(name, {"settings": {"index": {"number_of_replicas": 0}}, "mappings": mapping})
    lines: list[dict[str, Any]] = []
    for doc in docs:
        lines += [{"index": {"_index": name, "_id": doc["doc_id"]}}, doc]
    response = await engine._client.bulk(body=lines, refresh=True)
    assert not response["errors"], response
    return name


@pytest.mark.parametrize("public_when_unset", [True, False])
async def test_an_index_joining_the_alias_serves_nothing_before_it_is_checked(
        engine, client_for, public_when_unset: bool) -> None:
    checked = await _company_index(engine, CHECKED_MAPPING, [
        {"doc_id": f"own-{i}", "heading": "Alpha", "body": "alpha installation notes", "tenant": "t-a",
         "owner": "u-bob", "allowed_groups": ["sales"]} for i in range(5)])
    intruder = await _company_index(engine, UNCHECKED_MAPPING, [
        {"doc_id": f"intruder-{i}", "heading": "Alpha", "body": "alpha installation notes alpha", "tenant": "t-a",
         "acl_users": ["u-alice"], "acl_groups": ["eng"]} for i in range(5)])
    alias = f"corp-alias-{uuid.uuid4().hex[:8]}"
    await engine.update_aliases([{"add": {"index": checked, "alias": alias}}])
    kb = new_kb(id="corp", alias=alias, schema="custom", fields=CORP_FIELDS, public_when_unset=public_when_unset,
                mandatory_filters=["TENANT", "SUBJECT"])
    client = await client_for(kb, principals={"u-bob": ["sales"]}, api_keys=[api_key(
        ["corp"], tenants=["t-a"], subject="u-bob")])
    route = "/agent/knowledge/corp/1.0.0"
    answers: list[tuple[str, int, set[str]]] = []

    async def ask_all() -> None:
        execution = f"exec-{uuid.uuid4().hex[:10]}"
        spark = await client.post(route, headers=calls.headers(**{"Idempotency-Key": execution}), json=calls.body(
            "u-bob", "t-a", knowledge="corp", query="alpha installation", topK=10, executionId=execution))
        arts = await client.post("/knowledge-bases/retrieve", headers=bearer(), data=json.dumps({
            "knowledge_base_ids": ["corp"], "query": "alpha installation", "method": "doc", "limit": 20}))
        dify = await client.post("/retrieval", headers=bearer(), data=json.dumps({
            "knowledge_id": "corp", "query": "alpha installation",
            "retrieval_setting": {"top_k": 20, "score_threshold": 0}}))
        for name, response, ids in (
                ("sparktide", spark, lambda a: {i["documentId"] for i in a.get("items", [])}),
                ("agentarts", arts, lambda a: {r["file_id"] for r in a.get("search_result_list", [])}),
                ("dify", dify, lambda a: {r["metadata"]["document_id"] for r in a.get("records", [])})):
            answers.append((name, response.status, ids(await response.json())))

    async def load(until: float) -> None:
        while time.monotonic() < until:
            await ask_all()

    try:
        for _ in range(2):  # warm: the alias's one index is checked and served
            await ask_all()
        assert all(status == 200 and ids for _, status, ids in answers), answers
        before = len(answers)
        until = time.monotonic() + 4.0
        loads = [asyncio.create_task(load(until)) for _ in range(3)]
        await asyncio.sleep(1.0)
        await engine.update_aliases([{"add": {"index": intruder, "alias": alias}}])
        await asyncio.gather(*loads)
        after = answers[before:]
        leaked = [(name, status, ids) for name, status, ids in after if any(i.startswith("intruder-") for i in ids)]
        assert leaked == [], f"{len(leaked)} answers served the unchecked index"
        assert all(status in (200, 503) for _, status, _ in after)
        if public_when_unset:
            # Its hits matched as "public": the first one made the service check the index at once, which lacks the
            # ACL fields, so the knowledge base is unservable from then on (never an empty answer).
            final = answers[-3:]
            assert all(status == 503 for _, status, _ in final), final
            ready = await client.get("/readyz")
            assert ready.status == 503 and "schema" in (await ready.json())["reasons"]
        else:
            # Nothing of it matched a filter (no ACL values is no one's): the answers go on with the checked index.
            assert all(status == 200 for _, status, _ in after), after
    finally:
        await engine.delete_index(checked)
        await engine.delete_index(intruder)


# --- 6. A secret file is read off the event loop, bounded, regular files only -----------------------------------

def _post(url: str, payload: dict[str, Any], headers_: dict[str, str], timeout: float) -> int:
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), headers=headers_, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _healthz_s(base: str) -> float:
    started = time.monotonic()
    with urllib.request.urlopen(f"{base}/healthz", timeout=3) as answer:
        assert answer.status == 200
    return time.monotonic() - started


async def test_a_fifo_or_a_huge_file_in_a_secrets_place_freezes_nothing(engine, kb, opensearch, tmp_path) -> None:
    await load_records(engine, kb, [{"document_id": "d-1", "title": "t", "content": "installation guide",
                                     "source": {"type": "DOCUMENT", "id": "d-1", "version": "v1"},
                                     "acl": {"public": True}, "tenant_id": "team-a"}])
    secret = tmp_path / "engine-password"
    secret.write_text("first-password-value\n")
    config = write_config(tmp_path / "config.toml", opensearch.url, [kb_entry(kb.alias)])
    text = config.read_text().replace("[opensearch]\n", '[opensearch]\nusername = "svc"\npassword_ref = "ENGINE_PW"\n')
    config.write_text(text)
    served = Served(config, {**TEST_ENV, "ENGINE_PW_FILE": str(secret)}, tmp_path / "service.log")

    def search(timeout: float = 10.0) -> int:
        execution = f"exec-{uuid.uuid4().hex[:10]}"
        return _post(f"{served.base}{calls.ROUTE}", calls.body(executionId=execution),
                     calls.headers(**{"Idempotency-Key": execution}), timeout)

    try:
        assert await asyncio.to_thread(search) == 200
        # A FIFO in its place: opening it for reading would wait for a writer that never comes.
        secret.unlink()
        os.mkfifo(secret)
        await asyncio.sleep(1.2)  # past the once-a-second look
        for _ in range(3):
            assert await asyncio.to_thread(search, 5.0) == 200  # the last good value stays in use
            assert await asyncio.to_thread(_healthz_s, served.base) < 1.0
            await asyncio.sleep(0.5)
        # A huge file: not a password (it would become a header on every request).
        secret.unlink()
        with secret.open("wb") as huge:
            huge.truncate(20 * 1024 * 1024)
        rss_before = served.rss_kib()
        await asyncio.sleep(1.2)
        for _ in range(3):
            assert await asyncio.to_thread(search, 5.0) == 200
            await asyncio.sleep(0.5)
        assert served.rss_kib() - rss_before < 10 * 1024, "the huge file was read"
        logs = served.logs()
        assert "ENGINE_PW_FILE is not a regular file" in logs and "ENGINE_PW_FILE is larger than" in logs
        assert logs.count("ENGINE_PW_FILE is not a regular file") == 1  # a lasting reason is logged once
        assert "first-password-value" not in logs
    finally:
        served.stop(timeout=10)
