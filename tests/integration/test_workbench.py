"""The workbench on a real node: only its own key opens it; it answers what each protocol answers for the identity
it impersonates; "why not?" names the rule (acl.py's predicates) or the rank; every use is logged without content."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from typing import Any

import aiohttp
import pytest
from helpers import oracle
from helpers.calls import body, headers
from helpers.served import Served, kb_entry, write_config
from helpers.setup import PRINCIPALS, SAMPLE_CORPUS, TEST_ENV, api_key, settings_for

from es_provider.config.settings import ConfigError, parse_settings
from es_provider.core.errors import StartupError
from es_provider.edge.guard import GUESSES_IN_TOTAL, GUESSES_PER_ADDRESS
from es_provider.ingest.records import read_jsonl
from es_provider.ingest.writer import ingest
from es_provider.web.app import create_app
from es_provider.web.workbench import COOKIE

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


def other_address(last: int) -> aiohttp.ClientSession:
    """A client whose connections come from 127.0.0.<last> (all of 127/8 is this machine's loopback)."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(f"127.0.0.{last}", 0)))


async def test_without_the_workbench_key_nothing_is_shown(bench, kb) -> None:
    page = await bench.get("/workbench")
    text = await page.text()
    assert page.status == 401 and 'name="key"' in text and "workbench.js" not in text
    ask = {"knowledge_id": kb.id, "tenant": "team-a", "subject": "u-alice", "query": QUERY}
    # none, a wrong one, a platform's API key; each from its own address (four wrong keys each, under the lockout)
    for last, token in enumerate((None, "wrong-key", "test-api-key-0123456789"), start=20):
        sent = wb(token) if token else {"Content-Type": "application/json"}
        async with other_address(last) as client:
            for path in ("/workbench/api/search", "/workbench/api/explain"):
                refused = await client.post(bench.make_url(path), json={**ask, "document_id": "install-spec"},
                                            headers=sent)
                answer = await refused.json()
                assert refused.status == 401 and answer == {"error": {"code": "KNOWLEDGE_ACCESS_DENIED",
                                                                      "message": "Authentication failed."}}
            assert (await client.get(bench.make_url("/workbench/api/setup"), headers=sent)).status == 401
            assert (await client.get(bench.make_url("/workbench/workbench.js"), headers=sent)).status == 401
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
        assert answer["identity"] == {"tenants": [tenant], "subject": subject, "groups": PRINCIPALS[subject],
                                      "subject_active": True}
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


# --- issue 27: the audit trail, guessing the key, a malformed cookie ---


@pytest.mark.parametrize("log_format", ["json", "text"])
async def test_the_served_log_says_who_asked_as_whom_and_who_was_refused(opensearch, kb, tmp_path,
                                                                          log_format) -> None:
    config = write_config(tmp_path / "config.toml", opensearch.url, [kb_entry(kb.alias)], principals=PRINCIPALS)
    with config.open("a", encoding="utf-8") as handle:
        handle.write('\n[workbench]\nenabled = true\nkey_ref = "WB_KEY"\n')
    served = Served(config, {**TEST_ENV, "WB_KEY": KEY, "OPENSEARCH_URL": opensearch.url},
                    tmp_path / "service.log", args=("--log-format", log_format))
    forged = "u-bob\n2026-01-01 00:00:00,000 CRITICAL es_provider.security forged"
    wrong = "wrong-key-0123456789"
    try:
        async with aiohttp.ClientSession(served.base) as client:
            ask = {"knowledge_id": "project-documents", "tenant": "team-a", "subject": "u-alice", "query": QUERY}
            assert (await client.post("/workbench/api/search", json=ask, headers=wb())).status == 200
            explained = await client.post("/workbench/api/explain", headers=wb(), json={
                **ask, "subject": forged, "protocol": "dify", "document_id": "install-spec"})
            assert explained.status == 200
            assert (await client.post("/workbench/api/search", json=ask, headers=wb(wrong))).status == 401
            assert (await client.post("/workbench/login", data={"key": wrong})).status == 401
    finally:
        served.stop()
    logged = served.logs()
    assert QUERY not in logged and KEY not in logged and wrong not in logged
    assert not any(line.startswith("2026-01-01") for line in logged.splitlines())
    if log_format == "json":
        lines = [json.loads(line) for line in logged.splitlines() if line.startswith("{")]
        by_message = {line["message"]: line for line in lines if line["logger"] == "es_provider.workbench"}
        assert {k: by_message["workbench: search"].get(k) for k in ("knowledge_id", "as_tenant", "as_subject",
                                                                     "remote")} == {
            "knowledge_id": "project-documents", "as_tenant": "team-a", "as_subject": "u-alice", "remote": "127.0.0.1"}
        assert by_message["workbench: explain"]["protocol"] == "dify"
        assert by_message["workbench: explain"]["as_subject"] == forged
        refused = [line for line in lines if line["message"] in ("workbench: key refused", "workbench: login refused")]
        assert len(refused) == 2 and all(line["remote"] == "127.0.0.1" for line in refused)
        assert len({line["key_fingerprint"] for line in refused}) == 1  # the same wrong key, twice
        assert re.fullmatch("[0-9a-f]{8}", refused[0]["key_fingerprint"])
    else:
        search = next(line for line in logged.splitlines() if "workbench: search" in line)
        for field in ("knowledge_id=project-documents", "as_tenant=team-a", "as_subject=u-alice",
                      "remote=127.0.0.1"):
            assert field in search
        explain_line = next(line for line in logged.splitlines() if "workbench: explain" in line)
        assert "protocol=dify" in explain_line and 'as_subject="u-bob\\n2026-01-01' in explain_line
        refused = [line for line in logged.splitlines() if "workbench: key refused" in line
                   or "workbench: login refused" in line]
        assert len(refused) == 2
        assert all(re.search(r"remote=127\.0\.0\.1 key_fingerprint=[0-9a-f]{8}", line) for line in refused)


async def test_guessing_the_bearer_key_locks_the_address_out(bench, kb, caplog) -> None:
    caplog.set_level(logging.INFO)
    done = await bench.post("/workbench/login", data={"key": KEY}, allow_redirects=False)
    session = done.cookies[COOKIE].value
    bench.session.cookie_jar.clear()
    ask = {"knowledge_id": kb.id, "tenant": "team-a", "subject": "u-alice", "query": QUERY}
    started = time.monotonic()
    statuses = [(await bench.post("/workbench/api/search", json=ask, headers=wb(f"guess-{i}-0123456789"))).status
                for i in range(GUESSES_PER_ADDRESS + 3)]
    assert statuses == [401] * GUESSES_PER_ADDRESS + [429] * 3
    locked = await bench.get("/workbench/api/setup", headers=wb())  # the right key too, while locked
    assert locked.status == 429 and 0 < int(locked.headers["Retry-After"]) <= 60
    assert (await locked.json())["error"]["code"] == "KNOWLEDGE_RATE_LIMITED"
    assert time.monotonic() - started < 5  # refused at once, no pause to hold connections with
    # A session already opened is not a guess: it still works from the locked address.
    opened = await bench.get("/workbench/api/setup", headers={"Cookie": f"{COOKIE}={session}"})
    assert opened.status == 200
    async with other_address(2) as elsewhere:
        assert (await elsewhere.get(bench.make_url("/workbench/api/setup"), headers=wb())).status == 200
    logged = [r for r in caplog.records if r.name == "es_provider.workbench"]
    refused = [r for r in logged if r.getMessage() == "workbench: key refused"]
    assert len(refused) == GUESSES_PER_ADDRESS and all(r.remote == "127.0.0.1" for r in refused)
    assert len({r.key_fingerprint for r in refused}) == GUESSES_PER_ADDRESS  # five different guesses
    assert any(r.getMessage() == "workbench: locked out" and r.remote == "127.0.0.1" for r in logged)


async def test_guessing_through_the_login_form_is_counted_before_the_body(bench) -> None:
    # Concurrent wrong logins: each counts from the moment it arrives, so they cannot all slip in at once.
    started = time.monotonic()
    answers = await asyncio.gather(*(bench.post("/workbench/login", data={"key": f"guess-{i}"},
                                                allow_redirects=False) for i in range(GUESSES_PER_ADDRESS + 5)))
    assert sorted(a.status for a in answers) == [401] * GUESSES_PER_ADDRESS + [429] * 5
    assert time.monotonic() - started < 4  # the 1 s pauses run side by side
    right = await bench.post("/workbench/login", data={"key": KEY}, allow_redirects=False)
    assert right.status == 429 and "Set-Cookie" not in right.headers
    # Refused before any body is read: a body that never comes does not hold the answer.
    reader, writer = await asyncio.open_connection("127.0.0.1", bench.port)
    writer.write(b"POST /workbench/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded"
                 b"\r\nContent-Length: 1000\r\n\r\nkey=")
    await writer.drain()
    status = await asyncio.wait_for(reader.readline(), timeout=3)
    assert status.startswith(b"HTTP/1.1 429"), status
    writer.close()


async def test_guessing_from_many_addresses_locks_everybody_out(bench) -> None:
    per_address = GUESSES_PER_ADDRESS - 1
    addresses = -(-GUESSES_IN_TOTAL // per_address)
    statuses = []
    for last in range(10, 10 + addresses):
        async with other_address(last) as guesser:
            for i in range(per_address):
                answer = await guesser.get(bench.make_url("/workbench/api/setup"), headers=wb(f"guess-{last}-{i}"))
                statuses.append(answer.status)
    assert statuses[:GUESSES_IN_TOTAL] == [401] * GUESSES_IN_TOTAL and set(statuses[GUESSES_IN_TOTAL:]) <= {429}
    async with other_address(200) as operator:  # an address that never guessed, with the right key
        assert (await operator.get(bench.make_url("/workbench/api/setup"), headers=wb())).status == 429


async def test_a_malformed_cookie_is_no_session(bench, caplog) -> None:
    caplog.set_level(logging.INFO)
    for value in ("².x", "¹⁷.ab", "x" * 4000, "1.2.3", "abc", "9" * 40 + ".00", "%FF%FE.x", '"quoted.x"'):
        cookie = {"Cookie": f"{COOKIE}={value}"}
        page = await bench.get("/workbench", headers=cookie)
        assert page.status == 401 and 'name="key"' in await page.text(), value
        assert (await bench.get("/workbench/api/setup", headers=cookie)).status == 401, value
        assert (await bench.get("/workbench/workbench.js", headers=cookie)).status == 401, value
        assert (await bench.get("/workbench/api/setup", headers={**cookie, **wb()})).status == 200, value
        assert (await bench.get("/workbench", headers={**cookie, **wb()})).status == 200, value
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
