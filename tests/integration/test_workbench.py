"""The workbench on a real node: only its own key opens it; it answers what each protocol answers for the identity
it impersonates; "why not?" names the rule (acl.py's predicates) or the rank; every use is logged without content."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from helpers import oracle
from helpers.calls import body, headers
from helpers.setup import PRINCIPALS, SAMPLE_CORPUS, api_key, settings_for

from es_provider.app import create_app
from es_provider.config import ConfigError, parse_settings
from es_provider.errors import StartupError
from es_provider.ingest.records import read_jsonl
from es_provider.ingest.writer import ingest

KEY = "workbench-key-0123456789"
WORKBENCH = {"enabled": True, "key_ref": "WB_KEY"}
DOCS = [json.loads(line) for line in SAMPLE_CORPUS.read_text(encoding="utf-8").splitlines()]
QUERY = "设备安装位置 installation"


def visible_docs(subject: str, tenant: str) -> set[str]:
    return {d["document_id"] for d in DOCS if oracle.visible(d, subject, {tenant}, PRINCIPALS.get(subject, []))}


@pytest.fixture
async def bench(engine, kb, client_for) -> Any:
    summary = await ingest(engine, kb, list(read_jsonl(SAMPLE_CORPUS)))
    assert summary.failures == []
    return await client_for(kb, env={"WB_KEY": KEY}, workbench=WORKBENCH, api_keys=[api_key([kb.id], subjects=["*"])])


def wb(token: str = KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


async def test_without_the_workbench_key_nothing_is_shown(bench, kb) -> None:
    page = await bench.get("/workbench")
    text = await page.text()
    assert page.status == 401 and 'name="key"' in text and "workbench.js" not in text
    ask = {"knowledge_id": kb.id, "tenant": "team-a", "subject": "u-alice", "query": QUERY}
    for token in (None, "wrong-key", "test-api-key-0123456789"):  # none, a wrong one, a platform's API key
        sent = wb(token) if token else {"Content-Type": "application/json"}
        for path in ("/workbench/api/search", "/workbench/api/explain"):
            refused = await bench.post(path, json={**ask, "document_id": "install-spec"}, headers=sent)
            answer = await refused.json()
            assert refused.status == 401 and answer == {"error": {"code": "KNOWLEDGE_ACCESS_DENIED",
                                                                  "message": "Authentication failed."}}
        assert (await bench.get("/workbench/api/setup", headers=sent)).status == 401
        assert (await bench.get("/workbench/workbench.js", headers=sent)).status == 401
    # A cross-site page cannot use an operator's session (nor the key).
    crossed = await bench.post("/workbench/api/search", json=ask, headers={**wb(), "Origin": "http://evil.example"})
    assert crossed.status == 403
    wrong = await bench.post("/workbench/login", data={"key": "test-api-key-0123456789"}, allow_redirects=False)
    assert wrong.status == 401 and "Set-Cookie" not in wrong.headers


async def test_login_gives_a_session_cookie_that_opens_the_page(bench) -> None:
    done = await bench.post("/workbench/login", data={"key": KEY}, allow_redirects=False)
    assert done.status == 303 and done.headers["Location"] == "/workbench"
    cookie = done.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/workbench" in cookie and KEY not in cookie
    page = await bench.get("/workbench")  # the test client keeps the cookie
    assert page.status == 200 and "workbench.js" in await page.text()
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]
    setup = await (await bench.get("/workbench/api/setup")).json()
    assert [kb["id"] for kb in setup["knowledge"]] == ["project-documents"] and "u-alice" in setup["subjects"]
    assert KEY not in json.dumps(setup)
    described = await (await bench.get("/openapi.json")).json()
    assert {"/workbench/api/setup", "/workbench/api/search", "/workbench/api/explain"} <= set(described["paths"])
    assert described["paths"]["/workbench/api/explain"]["post"]["requestBody"]["content"]["application/json"]


async def test_each_protocol_answer_is_what_the_protocol_itself_answers(bench, kb, caplog) -> None:
    caplog.set_level(logging.INFO)
    for subject, tenant in (("u-alice", "team-a"), ("u-bob", "team-b")):
        asked = await bench.post("/workbench/api/search", headers=wb(), json={
            "knowledge_id": kb.id, "tenant": tenant, "subject": subject, "query": QUERY, "top_k": 10})
        assert asked.status == 200, await asked.text()
        answer = await asked.json()
        assert answer["identity"] == {"tenants": [tenant], "subject": subject, "groups": PRINCIPALS[subject]}
        spark = answer["answers"]["sparktide"]
        assert spark["appliedFilters"] == ["TENANT", "SUBJECT"] and spark["mode"] == "bm25"
        direct = await bench.post("/agent/knowledge/project-documents/1.0.0", headers=headers(**{
            "Idempotency-Key": f"wb-{subject}"}), json=body(subject, tenant, query=QUERY, topK=10,
                                                            executionId=f"wb-{subject}"))
        assert spark["body"] == await direct.json()  # the very same items, scores and citations
        docs = {i["documentId"] for i in spark["body"]["items"]}
        assert docs and docs <= visible_docs(subject, tenant)
        for name, key in (("agentarts", "search_result_list"), ("dify", "records")):
            rows = answer["answers"][name]["body"][key]
            found = {r["file_id"] if name == "agentarts" else r["metadata"]["document_id"] for r in rows}
            assert found == docs, name  # same identity, same filters here: the same documents
    logged = [r for r in caplog.records if r.name == "es_provider.workbench"]
    assert any(getattr(r, "as_subject", None) == "u-bob" for r in logged)
    assert not any(QUERY in r.getMessage() or QUERY in json.dumps(r.__dict__, default=str) for r in caplog.records)


async def test_why_not_names_the_rule_or_the_rank(bench, kb, caplog) -> None:
    caplog.set_level(logging.INFO)
    alice = {"knowledge_id": kb.id, "tenant": "team-a", "subject": "u-alice", "query": QUERY,
             "protocol": "agentarts", "top_k": 10}
    hidden = sorted({d["document_id"] for d in DOCS} - visible_docs("u-alice", "team-a"))
    assert hidden
    for document_id in hidden:
        doc = next(d for d in DOCS if d["document_id"] == document_id)
        answer = await (await bench.post("/workbench/api/explain", headers=wb(),
                                         json={**alice, "document_id": document_id})).json()
        assert answer["found"] >= 1
        other_tenant = doc.get("tenant_id") not in (None, "", "team-a")
        expected = "tenant" if other_tenant else "subject"
        assert {r["rule"] for r in answer["reasons"]} == {expected}, (document_id, answer)
        if expected == "subject":
            assert "[eng]" in answer["reasons"][0]["detail"]  # Alice's groups, as compared

    # A document Alice reads: its best chunk is visible at the rank AgentArts gives it.
    plain = {k: v for k, v in alice.items() if k != "protocol"}  # a search shows every protocol at once
    search = await (await bench.post("/workbench/api/search", headers=wb(), json=plain)).json()
    rows = search["answers"]["agentarts"]["body"]["search_result_list"]
    first = rows[0]
    answer = await (await bench.post("/workbench/api/explain", headers=wb(),
                                     json={**alice, "chunk_id": first["chunk_id"]})).json()
    assert answer["reasons"] == [{"chunk_id": first["chunk_id"], "rule": "visible", "detail": "visible at rank 1",
                                  "rank": 1, "score": first["score"]}]
    if len(rows) > 1:
        cut = await (await bench.post("/workbench/api/explain", headers=wb(), json={
            **alice, "top_k": 1, "chunk_id": rows[1]["chunk_id"]})).json()
        assert cut["reasons"][0]["rule"] == "top_k" and cut["reasons"][0]["rank"] == 2
    high = await (await bench.post("/workbench/api/explain", headers=wb(), json={
        **alice, "threshold": 0.999, "chunk_id": first["chunk_id"]})).json()
    assert high["reasons"][0]["rule"] == "threshold"
    nothing = await (await bench.post("/workbench/api/explain", headers=wb(), json={
        **alice, "query": "zzzqqq", "chunk_id": first["chunk_id"]})).json()
    assert nothing["reasons"][0]["rule"] == "no_match"
    unknown = await (await bench.post("/workbench/api/explain", headers=wb(), json={
        **alice, "document_id": "no-such-document"})).json()
    assert unknown["found"] == 0 and unknown["reasons"] == []
    explained = [r for r in caplog.records if r.getMessage() == "workbench: explain"]
    assert explained and all(r.as_subject == "u-alice" and r.as_tenant == "team-a" for r in explained)


async def test_conditions_are_checked_and_a_pasted_acting_subject_is_not_a_filter(bench, kb) -> None:
    ask = {"knowledge_id": kb.id, "tenant": "team-a", "subject": "u-alice", "query": QUERY}
    bad = await bench.post("/workbench/api/search", headers=wb(), json={**ask, "metadata_condition": {
        "conditions": 5}})
    assert bad.status == 400 and (await bad.json())["error"]["code"] == "KNOWLEDGE_PROTOCOL_ERROR"
    plain = await (await bench.post("/workbench/api/search", headers=wb(), json=ask)).json()
    acting = await (await bench.post("/workbench/api/search", headers=wb(), json={**ask, "metadata_condition": {
        "logical_operator": "and", "conditions": [
            {"name": ["acting_subject"], "comparison_operator": "is", "value": "u-alice"}]}})).json()
    assert acting["answers"]["dify"]["body"] == plain["answers"]["dify"]["body"] and plain["answers"]["dify"]["body"]["records"]


async def test_behind_a_tls_proxy_the_configured_origin_is_the_one_accepted(engine, kb, client_for) -> None:
    client = await client_for(kb, env={"WB_KEY": KEY}, workbench={**WORKBENCH, "origin": "https://kb.example.com"})
    own = await client.post("/workbench/login", data={"key": KEY}, allow_redirects=False,
                            headers={"Origin": "https://kb.example.com"})
    assert own.status == 303 and "Secure" in own.headers["Set-Cookie"]
    plain_http = await client.post("/workbench/login", data={"key": KEY}, allow_redirects=False,
                                   headers={"Origin": str(client.make_url("")).rstrip("/")})
    assert plain_http.status == 403


async def test_off_unless_enabled(engine, kb, client_for) -> None:
    client = await client_for(kb)
    for path in ("/workbench", "/workbench/api/setup"):
        assert (await client.get(path, headers=wb())).status == 404


def test_the_workbench_key_is_its_own(opensearch, kb) -> None:
    with pytest.raises(ConfigError, match="its own credential"):
        parse_settings('[workbench]\nenabled = true\nkey_ref = "TEST_CALLBACK_KEY"\n[[knowledge]]\nid = "k"\n'
                       'name = "K"\nversions = ["1"]\nalias = "k"\nsecret_ref = "TEST_CALLBACK_KEY"\napps = ["a"]\n')
    with pytest.raises(ConfigError, match="needs key_ref"):
        parse_settings("[workbench]\nenabled = true\n")
    settings = settings_for(opensearch.url, kb, workbench=WORKBENCH)
    from helpers.setup import TEST_ENV

    with pytest.raises(StartupError, match="its own credential"):  # the same value as a platform secret
        create_app(settings, environ={**TEST_ENV, "WB_KEY": TEST_ENV["TEST_CALLBACK_KEY"]})
    with pytest.raises(StartupError, match="at least 16 characters"):
        create_app(settings, environ={**TEST_ENV, "WB_KEY": "short"})
