"""The service against OpenSearch with its real security plugin (tests/helpers/secure_node.py: HTTPS from a CA
made here, internal users per duty): kb create and ingest as the ingest user, the search, the signed callbacks'
replay store and the access record as the serve user — with basic auth and with a client certificate —; every
protocol, SCIM and the principal store as well; and a wrong CA refused with a message naming ca_file."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
import uuid
from typing import Any

import pytest
from helpers import scim_calls
from helpers.calls import ROUTE, body, headers
from helpers.setup import CALLBACK_SECRET, api_key, bearer, load_records, new_kb

from es_provider.cli import main as cli_main
from es_provider.config.cluster import OpenSearchSettings
from es_provider.core.errors import KnowledgeError
from es_provider.engine.client import connect
from es_provider.ingest import admin


def cluster(node: Any, user: str | None, **changes: Any) -> dict[str, Any]:
    keys: dict[str, Any] = {"url": node.url, "ca_file": str(node.ca_file)}
    if user is not None:
        keys.update(username=user, password_ref=f"PW_{user.upper()}")
    return {**keys, **changes}


def passwords(node: Any) -> dict[str, str]:
    return {f"PW_{user.upper()}": password for user, password in node.passwords.items()}


async def ask(client: Any, signed: bool = False) -> tuple[int, Any]:
    execution = f"exec-{uuid.uuid4().hex[:12]}"
    extra: dict[str, str] = {"Idempotency-Key": execution}
    response = await client.post(ROUTE, data=json.dumps(body(executionId=execution)).encode(),
                                 headers=headers(**extra))
    return response.status, await response.json()


@pytest.fixture
async def secured_kb(secure_opensearch):
    engine = connect(OpenSearchSettings.model_validate(cluster(secure_opensearch, "ingest_user")),
                     passwords(secure_opensearch))
    kb = new_kb(alias=f"kb-secure-{uuid.uuid4().hex}")
    await admin.create(engine, kb, admin.load_index_body())
    await load_records(engine, kb, [{
        "document_id": "secure-1", "title": "Secure", "content": "installation on the secured cluster",
        "source": {"type": "DOCUMENT", "id": "secure-1", "version": "v1"}, "acl": {"public": True},
        "tenant_id": "team-a"}])
    yield kb
    await admin.drop(engine, kb)
    await engine.close()


@pytest.mark.parametrize("how", ["basic auth", "client certificate"])
async def test_the_service_serves_through_the_security_plugin(how, secure_opensearch, secured_kb, client_for
                                                              ) -> None:
    node = secure_opensearch
    keys = cluster(node, "serve_user") if how == "basic auth" else cluster(
        node, None, client_cert_file=str(node.client_cert), client_key_file=str(node.client_key))
    prefix = f"es-provider-access-test-{uuid.uuid4().hex[:8]}"
    served = await client_for(secured_kb, env=passwords(node), opensearch=keys,
                              access_log={"index": prefix, "flush_interval_s": 0.1})
    assert (await served.get("/readyz")).status == 200
    status, answer = await ask(served)
    assert status == 200 and [item["documentId"] for item in answer["items"]] == ["secure-1"]

    # The access record reached the secured cluster as the serve user.
    reader = connect(OpenSearchSettings.model_validate(cluster(node, "admin_user")), passwords(node))
    try:
        deadline = time.monotonic() + 10
        found: list[Any] = []
        while not found and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            try:
                if await reader.index_exists(f"{prefix}-*"):
                    await reader.refresh(f"{prefix}-*")
                    found = [hit async for hit in reader.scan(f"{prefix}-*")]
            except KnowledgeError:  # the day's index made a moment ago: its shard may not be started yet
                continue
        assert found, "no access record written to the secured cluster"
        await reader.delete_index(f"{prefix}-*")
    finally:
        await reader.close()


async def test_a_wrong_ca_is_refused_naming_ca_file(secure_opensearch, secured_kb, client_for, caplog) -> None:
    node = secure_opensearch
    served = await client_for(secured_kb, env=passwords(node),
                              opensearch=cluster(node, "serve_user", ca_file=str(node.wrong_ca_file)))
    with caplog.at_level(logging.WARNING, logger="es_provider"):
        ready = await served.get("/readyz")
        status, _ = await ask(served)
    assert ready.status == 503 and status == 503
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "set [opensearch] ca_file" in logged
    assert all(password not in logged for password in node.passwords.values())


async def test_a_wrong_password_is_unavailable_never_empty(secure_opensearch, secured_kb, client_for, caplog) -> None:
    node = secure_opensearch
    served = await client_for(secured_kb, env={"PW_SERVE_USER": "not-the-password"},
                              opensearch=cluster(node, "serve_user"))
    with caplog.at_level(logging.WARNING, logger="es_provider"):
        assert (await served.get("/readyz")).status == 503
        status, answer = await ask(served)
    assert status == 503 and "items" not in answer
    assert "engine refused the service's credentials (401)" in "\n".join(r.getMessage() for r in caplog.records)


def _toml(node: Any, user: str, kb: Any) -> str:
    entry = {"id": kb.id, "name": kb.name, "versions": kb.versions, "alias": kb.alias, "secret_ref": kb.secret_ref,
             "apps": kb.apps, "mandatory_filters": kb.mandatory_filters}
    return "\n".join(["[opensearch]", *(f"{k} = {json.dumps(v)}" for k, v in cluster(node, user).items()),
                      "[[knowledge]]", *(f"{k} = {json.dumps(v)}" for k, v in entry.items())]) + "\n"


def _signed(execution: str, subject: str) -> tuple[bytes, dict[str, str]]:
    raw = json.dumps(body(subject, executionId=execution)).encode()
    stamp = str(int(time.time() * 1000))
    signature = hmac.new(CALLBACK_SECRET.encode(), stamp.encode() + b"." + raw, hashlib.sha256).hexdigest()
    return raw, {**headers(**{"Idempotency-Key": execution}), "X-Knowledge-Timestamp": stamp,
                 "X-Knowledge-Signature": signature}


@pytest.mark.parametrize("how", ["basic auth", "client certificate"])
async def test_every_protocol_and_store_through_the_security_plugin(how, secure_opensearch, client_for, tmp_path,
                                                                   monkeypatch) -> None:
    """kb create, ingest and reindex by the CLI as the ingest user; then, as the serve user (by password or by its
    certificate): SCIM writing the principal store, a signed SparkTide callback whose subject's group comes from
    that store (and its replay refused by the replay store), AgentArts and Dify, and each answer's access record."""
    node = secure_opensearch
    tag = uuid.uuid4().hex[:8]
    kb = new_kb(alias=f"kb-secure-all-{tag}", signature=True)
    config = tmp_path / "ingest.toml"
    config.write_text(_toml(node, "ingest_user", kb), encoding="utf-8")
    records = tmp_path / "docs.jsonl"
    records.write_text("\n".join(json.dumps(r) for r in [
        {"document_id": "open-1", "title": "Open", "content": "installation guide for everyone", "tenant_id": "team-a",
         "acl": {"public": True}},
        {"document_id": "eng-1", "title": "Eng", "content": "installation plan for engineering", "tenant_id": "team-a",
         "acl": {"groups": [f"sec-eng-{tag}"]}}]) + "\n", encoding="utf-8")
    for name, value in {**passwords(node), "TEST_CALLBACK_KEY": CALLBACK_SECRET}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("OPENSEARCH_URL", raising=False)  # the run's plain node would replace the file's url
    for command in (["kb", "create"], ["ingest"], ["kb", "reindex", "--delete-old"]):
        arguments = [*command, "--config", str(config), "--kb", kb.id, *([str(records)] if command == ["ingest"]
                                                                           else [])]
        assert await asyncio.to_thread(cli_main, arguments) == 0, arguments
    monkeypatch.undo()

    keys = cluster(node, "serve_user") if how == "basic auth" else cluster(
        node, None, client_cert_file=str(node.client_cert), client_key_file=str(node.client_key))
    prefix, store, replays = (f"es-provider-{part}-{tag}" for part in ("access", "principals", "replays"))
    served = await client_for(kb, env={**passwords(node), "SCIM_TOKEN": scim_calls.TOKEN}, opensearch=keys,
                              scim={"enabled": True, "token_ref": "SCIM_TOKEN"}, directory={"index": store},
                              server={"replay_index": replays}, api_keys=[api_key([kb.id], subjects=["*"])],
                              access_log={"index": prefix, "flush_interval_s": 0.1})
    admin_engine = connect(OpenSearchSettings.model_validate(cluster(node, "admin_user")), passwords(node))
    try:
        assert (await served.get("/readyz")).status == 200
        subject = f"u-sec-{tag}"
        user = await served.post("/scim/v2/Users", headers=scim_calls.SCIM, data=json.dumps(
            {"schemas": [scim_calls.USER], "userName": subject}))
        assert user.status == 201, await user.text()
        group = await served.post("/scim/v2/Groups", headers=scim_calls.SCIM, data=json.dumps(
            {"schemas": [scim_calls.GROUP], "displayName": f"sec-eng-{tag}",
             "members": [{"value": (await user.json())["id"]}]}))
        assert group.status == 201, await group.text()

        raw, sent = _signed(f"exec-{tag}", subject)
        spark = await served.post(ROUTE, data=raw, headers=sent)
        assert spark.status == 200, await spark.text()
        assert {i["documentId"] for i in (await spark.json())["items"]} == {"open-1", "eng-1"}
        assert (await served.post(ROUTE, data=raw, headers=sent)).status == 401  # the replay store has it

        agentarts = await served.post("/knowledge-bases/retrieve", headers=bearer(), data=json.dumps({
            "knowledge_base_ids": [kb.id], "query": "installation", "method": "doc",
            "extra_params": [{"key": "subject_id", "value": "u-bob"}]}))
        assert agentarts.status == 200
        assert [r["file_id"] for r in (await agentarts.json())["search_result_list"]] == ["open-1"]
        dify = await served.post("/retrieval", headers=bearer(), data=json.dumps({
            "knowledge_id": kb.id, "query": "installation", "retrieval_setting": {"top_k": 3, "score_threshold": 0}}))
        assert dify.status == 200 and [r["metadata"]["document_id"] for r in (await dify.json())["records"]] == [
            "open-1"]

        ids = {r.headers["X-Access-Record"] for r in (spark, agentarts, dify)}
        found: set[str] = set()
        deadline = time.monotonic() + 15
        while not ids <= found and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            try:
                await admin_engine.refresh(f"{prefix}-*")
                found = {hit["_id"] async for hit in admin_engine.scan(f"{prefix}-*")}
            except KnowledgeError:  # the day's index made a moment ago: its shard may not be started yet
                continue
        assert ids <= found
    finally:
        for name in (f"{prefix}-*", store, replays, f"{kb.alias}-v*"):
            await admin_engine.delete_index(name)
        await admin_engine.close()
